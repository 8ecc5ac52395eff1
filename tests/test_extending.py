"""A method added from a module inside tests/ (median_method: a new server rule with state and a
new loss term with per-client state and extra records down and up), run end to end through the
real ServerApp and ClientApp in-process, with no other file changed (docs/extending.md)."""

import json

import pytest
import torch
from flwr.app import Context, RecordDict

import methods
import server_app.app as server
from client_app.app import evaluate, query, train
from fakegrid import FakeGrid
from run_config import ConfigError, resolve
from server_app.checkpoint import load_checkpoint
from server_app.traffic import array_bytes


@pytest.fixture(autouse=True, scope="module")
def median_method():
    """Registers the test's method for this module's tests only (the docs tables list the
    app's own methods)."""
    import median_method as module  # registers it on first import

    methods.register(*module.ITEMS)  # (again, if an earlier module test unregistered it)
    yield module
    methods.unregister(*module.ITEMS)


def persistent_clients(run_config: dict, num_nodes: int, seen: list):
    """The real ClientApp, each node keeping one Flower Context (its state) across rounds, as a
    SuperNode does; every train instruction and reply is recorded in `seen`."""
    contexts = [Context(run_id=1, node_id=i, state=RecordDict(), run_config=dict(run_config),
                        node_config={"partition-id": i, "num-partitions": num_nodes})
                for i in range(num_nodes)]
    functions = {"train": train, "evaluate": evaluate, "query": query}

    def handler(index, msg):
        reply = functions[msg.metadata.message_type](msg, contexts[index])
        if msg.metadata.message_type == "train":
            seen.append((int(msg.content["config"]["server-round"]), index, msg, reply,
                         array_bytes(reply.content), "drift" in reply.content.array_records))
        return reply

    return handler, contexts


def test_a_method_from_tests_runs_end_to_end(tmp_path, median_method):
    rc = {"out-dir": str(tmp_path), "run-name": "run", "method": "median-anchor", "seed": 3,
          "num-server-rounds": 3, "local-iterations": 2, "fraction-train": 0.5,
          "checkpoint-every": 1}
    seen = []
    handler, contexts = persistent_clients(rc, 6, seen)
    server.main(FakeGrid(6, handler),
                Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    rows = results["rounds"]
    assert results["config"]["server-rule"] == "coordinate-median"
    assert results["config"]["client-objective"] == "anchor-pull"

    # the server rule: theta = coordinate-wise median of the last round's client models
    last = [reply for r, _, _, reply, *_ in seen if r == 3]
    assert len(last) == 3
    models = [reply.content["arrays"].to_torch_state_dict() for reply in last]
    final = torch.load(tmp_path / "run" / "final_model.pt", weights_only=True)
    for k, v in final.items():
        column = torch.stack([m[k] for m in models])
        assert torch.equal(v, column.sort(dim=0).values[1]), k  # the middle one of three

    # the extra records: anchor down (the mean of theta_0 .. theta_{t-1}), drift up, metered
    first = [msg for r, _, msg, *_ in seen if r == 1]
    theta0 = first[0].content["arrays"].to_torch_state_dict()
    anchor1 = first[0].content["anchor"].to_torch_state_dict()
    assert all(torch.equal(anchor1[k], theta0[k]) for k in theta0)
    for r in (1, 2, 3):
        sent = [msg for rr, _, msg, *_ in seen if rr == r]
        up = [(size, drift) for rr, _, _, _, size, drift in seen if rr == r]
        assert rows[r]["bytes-down"] == sum(array_bytes(m.content) for m in sent)
        assert rows[r]["bytes-down"] == 2 * sum(m.content["arrays"].count_bytes() for m in sent)
        assert rows[r]["bytes-up"] == sum(size for size, _ in up)  # model + drift, as sent
        assert all(drift for _, drift in up)
        assert rows[r]["train-replies"] == 3 and rows[r]["train-dropped"] == 0

    # per-client state: each node counted the rounds it trained in its own Context.state
    trained = [sum(1 for _, i, *_ in seen if i == node) for node in range(6)]
    for node, ctx in enumerate(contexts):
        rounds = ctx.state.metric_records.get("anchor-pull", {"rounds": 0})["rounds"]
        assert rounds == trained[node]

    # the rule's state is in the checkpoint and restores exactly
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ckpt["round"] == 3 and len(ckpt["strategy"]["drifts"]) == 9
    rule = median_method.CoordinateMedian(median_method.CoordinateMedian.Settings(), None)
    rule.load_state_dict(ckpt["strategy"])
    assert all(torch.equal(rule.theta[k], final[k]) for k in final)
    assert rule.state_dict()["anchor-rounds"] == 4


def test_the_new_parts_compose_and_are_refused_where_they_cannot_work():
    cfg = resolve({"method": "median-anchor"})
    assert (cfg["server-rule"], cfg["client-objective"]) == ("coordinate-median", "anchor-pull")
    # FedProx's term on top of the new method's parts: both run
    both = resolve({"method": "median-anchor", "client-objective": "anchor-pull,proximal",
                    "beta": 0.1})
    assert both["client-objective"] == "anchor-pull,proximal"
    with pytest.raises(ConfigError, match="server-rule 'coordinate-median' needs the record "
                       "'drift'.*client-objective 'none'"):
        resolve({"method": "median-anchor", "client-objective": "none"})
    with pytest.raises(ConfigError, match="client part 'anchor-pull' needs the record 'anchor'"
                       ".*server-rule 'momentum'"):
        resolve({"method": "fedacg", "client-objective": "proximal,anchor-pull"})
    with pytest.raises(ConfigError, match="'lookahead' = true cannot be combined with method "
                       "'median-anchor' \\(server-rule 'coordinate-median'"):
        resolve({"method": "median-anchor", "lookahead": True})
    # per-client state resumes too (the server names each client's version of it)
    assert resolve({"method": "median-anchor", "resume": "latest"})["resume"] == "latest"
    with pytest.raises(ConfigError, match="'beta' = 0.1 is a knob of 'proximal'"):
        resolve({"method": "median-anchor", "beta": 0.1})


def test_the_method_table_lists_it():
    from pages.tables import methods

    assert "| `median-anchor` |" in methods()
    assert "coordinate-median" in resolve({"method": "median-anchor"})["server-rule"]


def test_a_record_must_say_what_it_holds(median_method):
    """A part or rule whose `up` names a record without saying what it holds is refused when it
    is registered (the server could not screen it); a client part that declares a record unlike
    the rule that reads it is refused by the config check."""
    from methods import ClientPart, ServerRule, UpRecord
    from methods.registry import RegistryError

    class Bare(ServerRule):
        name, up = "bare-records", ("drift",)

    with pytest.raises(RegistryError, match=r"Bare.up = \('drift',\): map each name to a "
                       r"methods.UpRecord"):
        methods.register(Bare)

    class Loose(ServerRule):
        name, up_metrics = "loose-metrics", {"local-steps": (0, 1)}

    with pytest.raises(RegistryError, match="Loose.up_metrics .* methods.ReplyMetric"):
        methods.register(Loose)

    class OtherDrift(ClientPart):  # sends 'drift' as one tensor per parameter
        name, up = "other-drift", {"drift": UpRecord()}

    methods.register(OtherDrift)
    try:
        with pytest.raises(ConfigError, match="client part 'other-drift' declares its record "
                           "'drift' as UpRecord\\(holds='parameters'.*server-rule "
                           "'coordinate-median' as UpRecord\\(holds=\\{'drift'"):
            resolve({"method": "median-anchor", "client-objective": "other-drift"})
    finally:
        methods.unregister(OtherDrift)
    assert "bare-records" not in methods.SERVER_RULES


def test_its_record_is_screened_as_declared(median_method, tmp_path):
    """The worked example's 'drift' record ((1,), float32): a reply whose drift has another
    shape or dtype, or NaN, is dropped whole (the rule never sees it); the others are kept."""
    from server_math.reply_screen import BadUpdate, check_record, record_layouts

    model = torch.nn.Linear(2, 2)
    layout = record_layouts(median_method.DRIFT, model.named_parameters(),
                            model.state_dict())["drift"]
    from flwr.app import ArrayRecord

    views, norm = check_record("drift", ArrayRecord({"drift": torch.tensor([-0.5])}), layout)
    assert norm == 0.5 and views["drift"].tolist() == [-0.5]
    _, norm = check_record("drift", ArrayRecord({"drift": torch.tensor([-0.5])}), layout,
                           center={"drift": torch.tensor([1.0])})
    assert norm == 1.5  # measured from the rule's center (up_centers)
    for bad, reason in ((torch.tensor([0.5, 0.5]), "shape"), (torch.tensor([1], dtype=torch.int64),
                        "dtype"), (torch.tensor([float("nan")]), "non-finite")):
        with pytest.raises(BadUpdate) as err:
            check_record("drift", ArrayRecord({"drift": bad}), layout)
        assert err.value.reason == reason and err.value.detail.startswith("record 'drift': ")
    with pytest.raises(BadUpdate, match="missing \\['drift'\\], extra \\['x'\\]"):
        check_record("drift", ArrayRecord({"x": torch.zeros(1)}), layout)
