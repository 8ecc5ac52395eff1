"""The server's step against the clients' update (server_math/step_size.py), recorded in every
round's row: against a hand computation of the norms, and against what the rules must give
(FedAvg: the server's step is the clients' mean update, no look-ahead; FedACG with eta 1: the
look-ahead of round t+1 is lambda times the step of round t, theta^{t+1} - theta^t = m^t)."""

import json
import math

import pytest
import torch
from flwr.app import Context, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from server_math.step_size import distance, norm, step_sizes


def test_the_norms_are_float64_sums_over_the_float_tensors():
    a = {"w": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0]), "n": torch.tensor([7])}
    b = {"w": torch.tensor([0.0, 0.0]), "b": torch.tensor([0.0]), "n": torch.tensor([1])}
    assert norm(a) == 5.0 and distance(a, b) == 5.0  # the integer tensor is not counted
    big = {"w": torch.full((4,), 3e20)}  # squares past float32's range
    assert norm(big) == pytest.approx(6e20)
    phi = {"w": torch.tensor([3.0, 4.0]), "b": torch.tensor([4.0])}
    assert distance(phi, a) == 4.0
    sizes = step_sizes(a, b, 4.0, 2.5)
    assert sizes == {"server-step-norm": 5.0, "lookahead-norm": 4.0, "client-update-norm": 2.5}
    assert "client-update-norm" not in step_sizes(a, b, 0.0, None)


def test_the_step_ratio_is_the_median_over_the_rounds_that_have_both_norms():
    from reporting.metrics import step_ratio

    def row(step, update):
        return {"train-server-step-norm": step, "train-client-update-norm": update}

    assert step_ratio([row(1.0, 1.0), row(6.0, 2.0), row(4.0, 2.0)]) == 2.0  # 1, 3, 2
    assert step_ratio([row(1.0, 1.0), row(6.0, 2.0)]) == 2.0  # (1 + 3) / 2
    assert step_ratio([row(1.0, 1.0), {"train-server-step-norm": 5.0}, row(9.0, 0.0),
                       row(3.0, 1.0), {}]) == 2.0  # rows without both, or a zero update, left out
    assert step_ratio([{}, {"train-client-update-norm": 1.0}]) is None


def _rows(tmp_path, method: str, **extra) -> list[dict]:
    rc = {"method": method, "num-server-rounds": 4, "out-dir": str(tmp_path),
          "run-name": "run", "fraction-train": 0.5, "local-iterations": 2, **extra}
    grid = FakeGrid(6, client_app_handler(rc, 6))
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    return json.loads((tmp_path / "run" / "results.json").read_text())["rounds"][1:]


def test_fedavg_steps_as_far_as_its_clients_moved(tmp_path):
    rows = _rows(tmp_path, "fedavg")
    summary = json.loads((tmp_path / "run" / "results.json").read_text())["summary"]
    assert summary["step-ratio"] == pytest.approx(1.0, rel=1e-5)
    for row in rows:
        assert row["train-lookahead-norm"] == 0.0
        assert row["train-server-step-norm"] > 0
        assert row["train-server-step-norm"] == pytest.approx(row["train-client-update-norm"],
                                                              rel=1e-5)


def test_fedacg_looks_ahead_by_lambda_times_its_last_step(tmp_path):
    rows = _rows(tmp_path, "fedacg", lam=0.85)
    assert rows[0]["train-lookahead-norm"] == 0.0  # m = 0 before the first round
    for before, after in zip(rows, rows[1:]):
        assert after["train-lookahead-norm"] == pytest.approx(
            0.85 * before["train-server-step-norm"], rel=1e-4)
    # the step is the momentum, which holds more than the last mean update once it has run
    assert all(math.isfinite(r["train-client-update-norm"]) for r in rows)
    assert rows[-1]["train-server-step-norm"] != pytest.approx(
        rows[-1]["train-client-update-norm"], rel=1e-3)
