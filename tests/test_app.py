"""The whole ServerApp + ClientApp in-process (a FakeGrid instead of the Flower runtime)."""

import json

import pytest
import torch
from flwr.app import Context, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from models import build_model

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots


def run_app(tmp_path, num_nodes, **overrides):
    rc = {"out-dir": str(tmp_path), "run-name": "run", **overrides}
    grid = FakeGrid(num_nodes, client_app_handler(rc, num_nodes))
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    return json.loads((tmp_path / "run" / "results.json").read_text()), grid


@pytest.mark.parametrize("method", ["fedacg", "gcfed"])
def test_default_setup_learns_digits(tmp_path, method):
    results, grid = run_app(tmp_path, 20, method=method)
    rows = results["rounds"]
    assert [r["round"] for r in rows] == list(range(31))
    assert rows[0]["test-acc"] < 0.3  # the initial model is at chance
    assert results["summary"]["final-test-acc"] >= 0.85, results["summary"]
    assert all(len(s) == 5 for s in grid.sent if s)  # 25% of 20 nodes per round
    # partition ids asked once per node (the first node alone: it says it is not simulated)
    assert [len(q) for q in grid.queries] == [1, 19]
    assert sorted(n for q in grid.queries for n in q) == sorted(grid.node_ids)
    for key in ("test-acc", "ema-acc", "test-loss", "train-loss", "seconds"):
        assert key in rows[-1]
    state = torch.load(tmp_path / "run" / "final_model.pt", weights_only=True)
    model = build_model("cnn", (1, 8, 8), 10)
    model.load_state_dict(state)
    assert results["config"]["method"] == method


def test_ema_and_eval_every(tmp_path):
    results, _ = run_app(tmp_path, 6, **{"num-server-rounds": 5, "eval-every": 2})
    rows = results["rounds"]
    evaluated = [r["round"] for r in rows if "test-acc" in r]
    assert evaluated == [0, 2, 4, 5]
    acc2, acc4, acc5 = (rows[i]["test-acc"] for i in (2, 4, 5))
    assert rows[2]["ema-acc"] == acc2  # the EMA starts at the first accuracy after training
    assert rows[4]["ema-acc"] == pytest.approx(0.9 * acc2 + 0.1 * acc4)
    assert rows[5]["ema-acc"] == pytest.approx(0.9 * (0.9 * acc2 + 0.1 * acc4) + 0.1 * acc5)


def test_flower_baseline_and_federated_evaluation(tmp_path):
    results, grid = run_app(tmp_path, 6, method="fedyogi", **{
        "num-server-rounds": 3, "fraction-evaluate": 0.5, "min-evaluate-nodes": 3})
    assert results["summary"]["final-test-acc"] > results["rounds"][0]["test-acc"]
    assert [len(s) for s in grid.sent] == [2, 3] * 3  # train 25% (min 2), evaluate 50% of 6


def test_failing_client_is_counted_and_the_round_goes_on(tmp_path):
    rc = {"out-dir": str(tmp_path), "run-name": "run", "num-server-rounds": 2,
          "fraction-train": 1.0}
    real = client_app_handler(rc, 4)

    def handler(i, msg):
        if i == 2:
            raise RuntimeError("disk on fire")
        return real(i, msg)

    server.main(FakeGrid(4, handler),
                Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    rows = json.loads((tmp_path / "run" / "results.json").read_text())["rounds"]
    assert rows[1]["train-replies"] == 3


def test_same_seed_samples_the_same_partitions_whatever_the_node_ids(tmp_path):
    def sampled_partitions(shift, step):
        rc = {"out-dir": str(tmp_path), "num-server-rounds": 3, "local-iterations": 1}
        grid = FakeGrid(10, client_app_handler(rc, 10))
        grid.node_ids = [(37 + shift + step * i) % 1009 for i in range(10)]  # partition i's node id
        server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                  run_config=rc))
        return [sorted(grid.node_ids.index(n) for n in s) for s in grid.sent if s]

    first = sampled_partitions(0, 1)
    assert first == sampled_partitions(500, -3)  # other node ids, in another order
    assert len({tuple(s) for s in first}) > 1
