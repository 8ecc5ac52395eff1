"""Which partitions train: simulated nodes are not asked one by one, and sample the same ones.

Deployment nodes hold their own data: the server asks every node for its partition-id once (a
QUERY message each) and samples in partition order. Simulated nodes can load any partition: the
first node asked says it is simulated, no other node is asked, slot p goes to the p-th node by
id, and each message names its partition. With the same seed both ways train the same partitions
in the same order (here: other node ids, in another order, for the simulated federation).
"""

import sys
import types

import pytest
import torch

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fakegrid import FakeGrid
from strategy_helpers import LookaheadFedAvg


def grid_of(n: int, simulated: bool, shift: int = 0) -> FakeGrid:
    """n nodes; node i holds partition i and answers queries (node ids shifted by `shift`)."""
    def handler(index, msg):
        if msg.metadata.message_type == "query":
            return RecordDict({"metrics": MetricRecord(
                {"partition-id": index, "num-partitions": n, "simulated": int(simulated)})})
        raise AssertionError("only queries are answered here")

    grid = FakeGrid(n, handler)
    grid.node_ids = [(nid * 31 + shift) % 1_000_003 for nid in grid.node_ids]
    return grid


def trained_partitions(grid: FakeGrid, rounds: int, per_round: int,
                       seed: int = 3) -> list[list[int]]:
    """The partition each train message makes its node train, per round."""
    strategy = LookaheadFedAvg(seed=seed, identify_nodes=True, fraction_train=1e-9,
                               min_train_nodes=per_round, fraction_evaluate=0.0)
    arrays = ArrayRecord({"w": torch.zeros(2)})
    out = []
    for r in range(1, rounds + 1):
        messages = strategy.configure_train(r, arrays, ConfigRecord(), grid)
        row = []
        for msg in messages:
            config = msg.content["config"]
            own = grid.node_ids.index(msg.metadata.dst_node_id)  # the node's own partition
            row.append(config.get("partition-id", own))
        out.append(row)
    return out


def test_simulated_nodes_train_the_partitions_the_seed_samples():
    deployed = trained_partitions(grid_of(50, simulated=False), rounds=6, per_round=5)
    simulated = trained_partitions(grid_of(50, simulated=True, shift=17), rounds=6, per_round=5)
    assert simulated == deployed
    assert len({p for row in deployed for p in row}) > 5  # the rounds differ


def test_simulated_nodes_are_asked_once_in_all():
    grid = grid_of(2000, simulated=True)
    trained_partitions(grid, rounds=3, per_round=10)
    assert [len(q) for q in grid.queries] == [1]  # one node, once
    deployed = grid_of(200, simulated=False)
    trained_partitions(deployed, rounds=3, per_round=10)
    assert sorted(n for q in deployed.queries for n in q) == sorted(deployed.node_ids)


def test_slot_p_is_the_p_th_node_by_id_and_the_message_names_it():
    grid = grid_of(30, simulated=True, shift=5)
    strategy = LookaheadFedAvg(seed=0, identify_nodes=True, fraction_train=1.0, min_train_nodes=2,
                               fraction_evaluate=0.0)
    arrays = ArrayRecord({"w": torch.zeros(2)})
    messages = list(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    by_id = sorted(grid.node_ids)
    assert len(messages) == 30
    for msg in messages:
        config = msg.content["config"]
        assert config["partition-id"] == by_id.index(msg.metadata.dst_node_id)
        assert config["num-partitions"] == 30


def test_the_client_says_whether_it_is_simulated(monkeypatch):
    from flwr.app import Context, Message

    from client_app.app import query

    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 2, "num-partitions": 5},
                  state=RecordDict(), run_config={})
    msg = Message(RecordDict({"config": ConfigRecord({"want": "partition-id"})}), dst_node_id=1,
                  message_type="query")
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # deployment: no Ray
    reply = query(msg, ctx).content["metrics"]
    assert (reply["partition-id"], reply["num-partitions"], reply["simulated"]) == (2, 5, 0)
    fake_ray = types.SimpleNamespace(is_initialized=lambda: True)  # inside a Ray actor
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    assert query(msg, ctx).content["metrics"]["simulated"] == 1


# --- client slots: one node per slot; a node's data must fit the run's client-data ----------
def reporting_grid(reports: list[dict]) -> FakeGrid:
    """Nodes that answer a query with their report (node i: reports[i]); node 0 has the
    smallest id, so it is the node asked first, alone."""
    grid = FakeGrid(len(reports), lambda i, msg: RecordDict({"metrics": MetricRecord(
        {"simulated": 0, **reports[i]})}))
    assert min(grid.node_ids) == grid.node_ids[0]
    return grid


def identified(grid: FakeGrid, client_data: str | None = "own", nodes=None):
    from strategies import Nodes

    nodes = nodes or Nodes(identify_nodes=True, min_available_nodes=1, client_data=client_data)
    nodes.sample(grid, 1.0, 1, lambda content, ids, kind: [
        grid.create_message(content, kind, n, "") for n in ids])
    index = {node: i for i, node in enumerate(grid.node_ids)}
    return nodes, {index[n]: p for n, p in nodes.partition_of.items()}, \
        {index[n] for n in nodes.refused}


def test_a_client_id_gets_its_slot_though_an_anonymous_node_was_asked_first(caplog):
    """The issue's case: node 0 (asked first, alone) has no client-id, node 1 says client-id
    0: node 1 is client 0, the anonymous nodes take the free slots 1 and 2."""
    caplog.set_level("INFO")
    grid = reporting_grid([{"own-data": 1}, {"own-data": 1, "partition-id": 0,
                                             "num-partitions": 3}, {"own-data": 1}])
    _, slots, refused = identified(grid)
    assert slots == {1: 0, 0: 1, 2: 2} and not refused
    assert "is client 0 of" not in caplog.text  # no anonymous node was logged as client 0


def test_two_connected_nodes_never_hold_one_client_slot(caplog):
    grid = reporting_grid([{"own-data": 1, "partition-id": 1, "num-partitions": 2},
                           {"own-data": 1, "partition-id": 1, "num-partitions": 2}])
    nodes, slots, refused = identified(grid)
    assert slots == {0: 1} and not refused and list(nodes.waiting) == [grid.node_ids[1]]
    assert f"client-id 1 is held by node {grid.node_ids[0]}, which is connected" in caplog.text
    for _ in range(3):  # not sampled while the holder is connected
        sampled = nodes.sample(grid, 1.0, 1, lambda content, ids, kind: [])
        assert sampled == [grid.node_ids[0]]


def test_a_restarted_node_waits_for_its_old_node_id_to_leave_then_takes_its_slot():
    """Flower keeps a restarted node's old node id online until its heartbeat lapses: the
    new node id, claiming the same client-id, waits (not sampled) and is not locked out."""
    grid = FakeGrid(1, lambda i, msg: RecordDict({"metrics": MetricRecord(
        {"simulated": 0, "own-data": 1, "partition-id": 1, "num-partitions": 2})}))
    nodes, _, _ = identified(grid)
    old = grid.node_ids[0]
    grid.node_ids.append(old + 1)  # the restarted node, while the old id is still online
    _, _, refused = identified(grid, nodes=nodes)
    assert nodes.partition_of == {old: 1} and not refused and nodes.waiting == {old + 1: 1}
    grid.node_ids.remove(old)  # its heartbeat lapsed
    identified(grid, nodes=nodes)
    assert nodes.partition_of == {old + 1: 1} and not nodes.waiting and not nodes.refused
    sampled = nodes.sample(grid, 1.0, 1, lambda content, ids, kind: [])
    assert sampled == [old + 1]


def test_a_restarted_node_with_a_new_node_id_takes_its_client_slot_back():
    grid = reporting_grid([{"own-data": 1, "partition-id": 1, "num-partitions": 2}])
    nodes, slots, _ = identified(grid)
    assert slots == {0: 1}
    gone = grid.node_ids[0]
    grid.node_ids[0] = gone + 1  # the same node, back with a new node id
    _, slots, refused = identified(grid, nodes=nodes)
    assert slots == {0: 1} and not refused and gone not in nodes.partition_of


@pytest.mark.parametrize("client_data, report, says", [
    ("partitions", {"own-data": 1}, "the node has its own data (node config data-path) and "
                                    "the run config has client-data = 'partitions'"),
    ("own", {"own-data": 0, "partition-id": 0, "num-partitions": 1},
     "the run config has client-data = 'own' (every node trains on its own folder) and the "
     "node's config has no data-path"),
])
def test_a_node_whose_data_does_not_fit_client_data_is_refused_when_first_asked(
        client_data, report, says, caplog):
    fits = {"own-data": 1} if client_data == "own" else {
        "own-data": 0, "partition-id": 0, "num-partitions": 1}
    grid = reporting_grid([report, fits])
    _, slots, refused = identified(grid, client_data)
    assert refused == {0} and 0 not in slots, caplog.text
    assert says in caplog.text
    assert sorted(n for q in grid.queries for n in q) == sorted(grid.node_ids)  # asked once
    # unchecked where the run's client-data is not known (a strategy of one's own)
    _, slots, refused = identified(reporting_grid([report]), None)
    assert not refused


def test_a_run_whose_connected_nodes_are_all_refused_stops_at_once_counting_the_reasons():
    """No node can be sampled: the server says so when it first asks, each reason once with
    how many nodes gave it, instead of skipping every round."""
    from strategies.nodes import NodesRefused

    own = {"own-data": 1}  # data-path, in a run on partitions
    out_of_range = {"own-data": 0, "partition-id": 5, "num-partitions": 2}
    grid = reporting_grid([own, out_of_range, own])
    with pytest.raises(NodesRefused) as err:
        identified(grid, "partitions")
    text = str(err.value)
    assert text.startswith("every connected node (3) was refused"), text
    assert "2 nodes: the node has its own data (node config data-path)" in text
    assert "1 node: its client-id = 5 is outside [0, num-clients = 2)" in text


@pytest.mark.parametrize("num_clients, refused_nodes, says", [
    (3, {0, 1}, "its num-clients = 2, but the run config's num-clients is 3: start the node "
                "with --num-clients 3, or with its own data (--data-path) without "
                "--num-clients: it then takes the run config's"),
    (0, {2}, "its num-clients = 3, but the number most nodes report is 2: start the node with "
             "--num-clients 2, or set num-clients in the run config"),
])
def test_a_node_whose_num_clients_differs_is_told_where_the_federations_n_came_from(
        num_clients, refused_nodes, says, caplog):
    """The docs' two nodes (--num-clients 2) and a third started with --num-clients 3: with
    num-clients = 3 in the run config the two are refused, naming the run config's key;
    without it N is what most nodes report, and the third is refused, saying so."""
    from strategies import Nodes

    grid = reporting_grid([{"own-data": 1, "partition-id": i, "num-partitions": n}
                           for i, n in enumerate([2, 2, 3])])
    nodes = Nodes(identify_nodes=True, min_available_nodes=1, client_data="own",
                  num_clients=num_clients)
    _, _, refused = identified(grid, nodes=nodes)
    assert refused == refused_nodes
    assert all(f"node {grid.node_ids[i]}: its report was refused ({says}" in caplog.text
               for i in refused_nodes), caplog.text
    assert "num-partitions" not in caplog.text and "other nodes say" not in caplog.text


def test_the_first_deployment_node_asked_does_not_set_n_alone():
    """The first node is asked alone (is it simulated?); a deployment node's report is then
    screened with the others', so N is what most nodes report, not what the first says."""
    grid = reporting_grid([{"own-data": 1, "partition-id": pid, "num-partitions": n}
                           for pid, n in ((4, 5), (0, 2), (1, 2))])
    nodes, slots, refused = identified(grid)
    assert nodes.num_slots == 2 and refused == {0} and slots == {1: 0, 2: 1}
    assert [len(q) for q in grid.queries] == [1, 2]  # the first alone, then the others


def test_refused_nodes_do_not_stop_a_run_whose_accepted_node_left():
    """A node that was accepted keeps its slot when it leaves: a refused node left alone
    connected does not stop the run (the accepted one may come back)."""
    fits = {"own-data": 0, "partition-id": 0, "num-partitions": 2}
    grid = reporting_grid([fits, {"own-data": 1}])
    nodes, slots, refused = identified(grid, "partitions")
    assert slots == {0: 0} and refused == {1}
    grid.node_ids.remove(grid.node_ids[0])  # the accepted node left
    assert nodes.sample(grid, 1.0, 1, lambda content, ids, kind: []) == []


@pytest.mark.parametrize("node_config, expected", [
    ({"client-id": 2, "num-clients": 4}, (2, 4)),
    ({"partition-id": 2, "num-partitions": 4}, (2, 4)),  # deploy/supernode.sh's older names
    ({"client-id": 2, "partition-id": 2, "num-clients": 4}, (2, 4)),  # the same, twice
    ({}, (None, 0)),  # none: the server gives it a slot
])
def test_a_node_with_own_data_reads_its_client_id_by_either_name(node_config, expected):
    from flwr.app import Context

    from client_app.app import partition_of

    ctx = Context(run_id=1, node_id=1, node_config={"data-path": "/d", **node_config},
                  state=RecordDict(), run_config={})
    assert partition_of(ctx) == expected
    ctx.node_config.pop("data-path")
    if expected[0] is not None:  # the same id without own data: its partition
        assert partition_of(ctx) == expected


def test_two_different_client_ids_in_one_node_config_are_refused():
    from flwr.app import Context

    from client_app.app import partition_of

    ctx = Context(run_id=1, node_id=1, node_config={"data-path": "/d", "client-id": 1,
                                                    "partition-id": 0}, state=RecordDict(),
                  run_config={})
    with pytest.raises(ValueError, match="client-id = 1 and partition-id = 0, two names of one"):
        partition_of(ctx)


def test_num_clients_without_a_client_id_on_a_node_with_own_data_is_refused():
    """N alone would be dropped (the server gives such a node a slot among the run config's
    num-clients): the node says so instead of training under another N."""
    from flwr.app import Context

    from client_app.app import partition_of

    ctx = Context(run_id=1, node_id=1, node_config={"data-path": "/d", "num-clients": 3},
                  state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match="num-clients = 3 and no client-id"):
        partition_of(ctx)


def test_each_rounds_row_counts_the_connected_refused_and_waiting_nodes():
    """The round's metrics (results.json: train-nodes-connected, -refused, -waiting) count the
    nodes connected when the round sampled: here 4, of which node 2 is refused (its
    num-clients is not the federation's 3) and node 3 waits (node 1 holds its client-id)."""
    from strategy_helpers import LookaheadFedAvg, random_state, reply

    reports = [(0, 3), (1, 3), (2, 99), (1, 3)]

    def handler(i, msg):
        if msg.metadata.message_type == "query":
            pid, n = reports[i]
            return RecordDict({"metrics": MetricRecord(
                {"simulated": 0, "partition-id": pid, "num-partitions": n})})
        phi = msg.content["arrays"].to_torch_state_dict()
        return reply({k: v + 0.01 for k, v in phi.items()}, 10)

    strategy = LookaheadFedAvg(lam=0.5, lookahead=True, fraction_train=1.0, min_train_nodes=2,
                               fraction_evaluate=0.0, identify_nodes=True)
    seen = {}
    strategy.round_metrics_fn = lambda r, metrics: seen.setdefault(r, dict(metrics))
    strategy.start(grid=FakeGrid(4, handler), initial_arrays=ArrayRecord(random_state(1)),
                   num_rounds=2)
    for r in (1, 2):
        counts = {k: seen[r][k] for k in ("nodes-connected", "nodes-refused", "nodes-waiting")}
        assert counts == {"nodes-connected": 4, "nodes-refused": 1, "nodes-waiting": 1}, r
        assert seen[r]["replies"] == 2  # nodes 0 and 1 trained
