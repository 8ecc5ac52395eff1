"""Smoke run of benchmarks/server_aggregation.py (tiny sizes, no timing asserted): its table and
JSON, and that the app's aggregate is the floor's weighted mean (FedACG with eta = 1: the new
theta is the weighted mean of the replies), which the benchmark checks every round."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import server_aggregation as bench

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.long  # three Python processes, each building the replies
def test_smoke_run_table_and_json(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.server_aggregation", "--tiny",
         "--json", str(tmp_path / "a.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert ("| updates | floor ms best / median | app ms best / median | app/floor median "
            "(min-max) | floor peak MB | app peak MB | replies MB | max abs diff |") in out.stdout
    figures = json.loads((tmp_path / "a.json").read_text())
    assert {"torch-threads", "load-average", "model", "repeats"} <= figures["info"].keys()
    row = figures["updates"]["3"]
    assert row["first-round-ms"] > 0  # round 1: untimed in the pairs, shown on its own
    assert len(row["floor-ms"]) == len(row["app-ms"]) == len(row["pair-ratios"]) == 2
    assert row["ratio-spread"] == [min(row["pair-ratios"]), max(row["pair-ratios"])]
    assert row["max-abs-diff"] < 1e-5
    for key in ("floor-peak-mb", "app-peak-mb"):  # None only where /proc cannot be reset
        assert row[key] is None or row[key] >= 0


def test_floor_is_the_weighted_mean_and_the_app_agrees():
    """The floor against a float64 mean computed here, and the app's first round against it."""
    from flwr.app import ConfigRecord

    from models.wire import state_view

    model, replies, grid, strategy, arrays = bench.setup("cnn", 3)
    for i, reply in enumerate(replies):  # unequal weights: n = 100, 200, 300
        reply.content["metrics"]["num-examples"] = 100 * (i + 1)
    answers = grid.send_and_receive(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    keys = bench.float_keys(model)
    acc = [torch.zeros_like(model.state_dict()[k]) for k in keys]
    bench.floor_mean(answers, acc)
    states = [state_view(r.content["arrays"]) for r in replies]
    expected = {k: sum(s[k].double() * (100 * (i + 1)) for i, s in enumerate(states)) / 600
                for k in keys}
    theta, _ = strategy.aggregate_train(1, answers)
    theta = state_view(theta)
    for k, a in zip(keys, acc):
        torch.testing.assert_close(a.double(), expected[k], rtol=0, atol=1e-6)
        torch.testing.assert_close(theta[k].double(), expected[k], rtol=0, atol=1e-6)
