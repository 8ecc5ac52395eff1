"""Which partitions train: simulated nodes are not asked one by one, and sample the same ones.

Deployment nodes hold their own data: the server asks every node for its partition-id once (a
QUERY message each) and samples in partition order. Simulated nodes can load any partition: the
first node asked says it is simulated, no other node is asked, slot p goes to the p-th node by
id, and each message names its partition. With the same seed both ways train the same partitions
in the same order (here: other node ids, in another order, for the simulated federation).
"""

import sys
import types

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
