"""The server's step against the clients' update (server_math/step_size.py), recorded in every
round's row: against a hand computation of the norms, and against what the rules must give
(FedAvg: the server's step is the clients' mean update, no look-ahead; FedACG with eta 1: the
look-ahead of round t+1 is lambda times the step of round t, theta^{t+1} - theta^t = m^t)."""

import json
import statistics
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


def _momentum_rows(lam: float, eta: float, updates: list[torch.Tensor]):
    """The momentum rule run on given mean updates d^t, in float64: its rows (the norms the app
    records) and, computed from the vectors themselves, cos(lam m^t, eta d^t) and
    ||lam m^t|| / ||eta d^t|| of every round whose m^t is not 0."""
    m = torch.zeros_like(updates[0])
    rows, cosines, ratios = [{"round": 0}], [], []
    for t, d in enumerate(updates, 1):
        term = lam * m
        if term.norm() > 0:
            cosines.append(float(term @ (eta * d) / (term.norm() * (eta * d).norm())))
            ratios.append(float(term.norm() / (eta * d).norm()))
        m = lam * m + eta * d  # the step theta^{t+1} - theta^t
        rows.append({"round": t, "train-server-step-norm": float(m.norm()),
                     "train-client-update-norm": float(d.norm())})
    return rows, cosines, ratios


def test_the_momentum_alignment_splits_the_step_as_the_vectors_do():
    """reporting.metrics.momentum_alignment, from the norms alone, against the cosines and
    lengths computed from the vectors: clients that pull back against the momentum (each d
    partly undoes the last step), and clients that go on with it."""
    from reporting.metrics import momentum_alignment

    gen = torch.Generator().manual_seed(0)
    for pull in (-0.6, 0.5):
        updates, last = [], torch.zeros(50, dtype=torch.float64)
        for _ in range(9):
            d = torch.randn(50, generator=gen, dtype=torch.float64) + pull * last
            updates.append(d)
            last = d
        rows, cosines, ratios = _momentum_rows(0.85, 0.7, updates)
        cos, ratio = momentum_alignment(rows, 0.85, 0.7)
        assert cos == pytest.approx(statistics.median(cosines), abs=1e-9)
        assert ratio == pytest.approx(statistics.median(ratios), rel=1e-9)
        assert (cos < 0) == (pull < 0)  # the sign follows the clients' pull


def test_the_momentum_alignment_counts_a_round_only_after_one_that_aggregated():
    from reporting.metrics import momentum_alignment

    gen = torch.Generator().manual_seed(1)
    updates = [torch.randn(20, generator=gen, dtype=torch.float64) for _ in range(5)]
    rows, cosines, _ = _momentum_rows(0.5, 1.0, updates)
    # round 3's reply norm missing (a robust rule, say): rounds 3 and 4 are left out
    del rows[3]["train-client-update-norm"]
    cos, _ = momentum_alignment(rows, 0.5, 1.0)
    kept = [cosines[0], cosines[3]]  # rounds 2 and 5 (round 1 has m = 0)
    assert cos == pytest.approx(statistics.median(kept), abs=1e-9)
    assert momentum_alignment(rows[:2], 0.5, 1.0) == (None, None)  # round 1 alone: m = 0
    rows, cosines, _ = _momentum_rows(0.5, 1.0, updates)
    del rows[3]  # no row of round 3: round 4's m is not round 2's step
    cos, _ = momentum_alignment(rows, 0.5, 1.0)
    assert cos == pytest.approx(statistics.median([cosines[0], cosines[3]]), abs=1e-9)


@pytest.mark.parametrize("method, extra, terms", [
    ("fedavgm", {"lam": 0.7}, (0.7, 1.0)),
    ("fedacg", {}, (0.85, 1.0)),
    ("fedagm", {"eta": 0.5}, (0.85, 0.5)),
    ("fedavg", {}, None),  # lambda 0: no momentum term
    ("fedacg+gcfed", {}, None),  # global GC changes d after its norm was taken
    ("fedacg", {"global-gc": "all"}, None),
    ("fedadam-fedacg", {}, None),  # another rule
])
def test_the_momentum_terms_are_given_only_where_the_step_is_lambda_m_plus_eta_d(
        method, extra, terms):
    from reporting.metrics import momentum_terms
    from run_config import resolve

    assert momentum_terms(resolve({"method": method, **extra})) == terms


def test_a_fedacg_run_summarises_its_momentum_and_fedavg_has_none(tmp_path):
    rows = _rows(tmp_path / "acg", "fedacg", lam=0.85)
    summary = json.loads((tmp_path / "acg" / "run" / "results.json").read_text())["summary"]
    from reporting.metrics import momentum_alignment

    assert summary["momentum-cos"] is not None and -1 <= summary["momentum-cos"] <= 1
    assert (summary["momentum-cos"], summary["momentum-ratio"]) == momentum_alignment(
        [{"round": 0}] + rows, 0.85, 1.0)
    line = server.done_line(summary, tmp_path)
    assert (f"| server step {summary['step-ratio']:.2f}x the clients' update, momentum "
            f"{summary['momentum-ratio']:.2f}x at cos {summary['momentum-cos']:+.2f} |") in line
    _rows(tmp_path / "avg", "fedavg")
    summary = json.loads((tmp_path / "avg" / "run" / "results.json").read_text())["summary"]
    assert summary["momentum-cos"] is None and summary["momentum-ratio"] is None
    assert "server step" not in server.done_line(summary, tmp_path)
