"""The papers' numbers from a run's per-round rows: EMA, accuracy at round R, rounds to X%, summary.

docs/algorithms.md#reporting: EMA_t = 0.9 * EMA_{t-1} + 0.1 * acc_t, starting at the first
accuracy measured after training (round 0, the initial model, is not part of it). "Accuracy at
round R" and "rounds to reach X%" are read off the EMA; a run that never reaches X% within its
T rounds reports "T+". "last10-acc" is the mean of the run's metric over its last
LAST_ROUNDS rounds (those evaluated): the number one rerun of a cell is compared with, which
the last round's accuracy alone, one draw of a noisy curve, is not.

Rows are dicts with a "round" key and, on evaluated rounds, "test-acc" (the server's test set)
and/or "fed-acc" (federated evaluation on the clients' held-out data) and "ema-acc", the EMA of
the run's metric (test-acc, or fed-acc where the server has no test set: docs/results.md);
accuracies as fractions in [0, 1]; targets are given in percent, as the papers write them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

EMA_FACTOR = 0.9
LAST_ROUNDS = 10


def ema_update(ema: float | None, acc: float, factor: float = EMA_FACTOR) -> float:
    """One EMA step; the first accuracy starts the average."""
    return acc if ema is None else factor * ema + (1 - factor) * acc


def ema_series(accs: Iterable[float], factor: float = EMA_FACTOR) -> list[float]:
    """EMA of a sequence of accuracies (one per evaluated round, in order)."""
    out: list[float] = []
    ema = None
    for acc in accs:
        ema = ema_update(ema, acc, factor)
        out.append(ema)
    return out


def curve(rows: Sequence[dict[str, Any]], key: str = "ema-acc") -> tuple[list[int], list[float]]:
    """(rounds, values) of the rows after round 0 that hold `key`."""
    pairs = [(r["round"], r[key]) for r in rows if r["round"] > 0 and r.get(key) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def value_at_round(rounds: Sequence[int], values: Sequence[float], at: int) -> float | None:
    """The value at round `at`: the last one measured at or before it (eval-every > 1).

    None when the run did not get to round `at`, or nothing was measured by then.
    """
    if not rounds or at > rounds[-1]:
        return None
    last = None
    for r, v in zip(rounds, values):
        if r > at:
            break
        last = v
    return last


def mean_of_last(rows: Sequence[dict[str, Any]], key: str,
                 last: int = LAST_ROUNDS) -> float | None:
    """The mean of `key` over the rows of the last `last` rounds that hold it (rounds after
    round 0 above the run's last round - `last`); None when none does."""
    trained = [r["round"] for r in rows if r["round"] > 0]
    if not trained:
        return None
    values = [r[key] for r in rows if r["round"] > max(0, trained[-1] - last)
              and r.get(key) is not None]
    return sum(values) / len(values) if values else None


def not_reached(total_rounds: int) -> str:
    """How the papers write "not reached within T rounds"."""
    return f"{total_rounds}+"


def rounds_to_target(rounds: Sequence[int], values: Sequence[float], target_pct: float,
                     total_rounds: int) -> int | str:
    """First round whose value is >= target_pct / 100, or "T+" if none is."""
    for r, v in zip(rounds, values):
        if v >= target_pct / 100.0 - 1e-12:
            return r
    return not_reached(total_rounds)


def round_key(value: float) -> str:
    """Dictionary key of a round or target: '500', '80', '37.5'."""
    return f"{value:g}"


def run_summary(rows: Sequence[dict[str, Any]], *, acc_at_rounds: Sequence[int],
                target_accs: Sequence[float], total_rounds: int,
                metric: str = "test-acc",
                momentum: tuple[float, float] | None = None) -> dict[str, Any]:
    """The end-of-run numbers: accuracy (EMA of `metric`) at the given rounds, rounds to each
    target, bytes, the server's step against the clients' update, and with `momentum` (lambda,
    eta: `momentum_terms` of the run's config) its momentum against the clients' update
    (`momentum_alignment`; both None without it)."""
    rounds, ema = curve(rows, "ema-acc")

    def last(key):
        evaluated = [r for r in rows if r["round"] > 0 and key in r]
        return evaluated[-1] if evaluated else {}

    trained = [r for r in rows if r["round"] > 0]
    out: dict[str, Any] = {
        "rounds": len(trained),
        "metric": metric,
        "final-test-acc": last("test-acc").get("test-acc"),
        "final-ema-acc": last(metric).get("ema-acc"),
        "last10-acc": mean_of_last(rows, metric),
        "final-test-loss": last("test-acc").get("test-loss"),
        "acc-at-round": {round_key(r): value_at_round(rounds, ema, r) for r in acc_at_rounds},
        "rounds-to-acc": {round_key(t): rounds_to_target(rounds, ema, t, total_rounds)
                          for t in target_accs},
    }
    if last("fed-acc"):
        out["final-fed-acc"] = last("fed-acc").get("fed-acc")
    for key in ("bytes-down-total", "bytes-up-total"):
        out[key] = trained[-1].get(key, 0) if trained else 0
    out["bytes-total"] = out["bytes-down-total"] + out["bytes-up-total"]
    out["train-seconds"] = sum(r.get("seconds", 0.0) for r in trained)
    out["step-ratio"] = step_ratio(trained)
    out["momentum-cos"], out["momentum-ratio"] = (
        momentum_alignment(rows, *momentum) if momentum else (None, None))
    return out


def step_ratio(rows: Sequence[dict[str, Any]]) -> float | None:
    """The median over rounds of the server's step against the clients' mean update
    (train-server-step-norm / train-client-update-norm, server_math.step_size): about 1 for
    FedAvg, 1 / (1 - lambda) for server momentum whose updates keep their direction; None where
    no round has both."""
    ratios = [r["train-server-step-norm"] / r["train-client-update-norm"] for r in rows
              if r.get("train-server-step-norm") is not None
              and r.get("train-client-update-norm")]
    return _median(ratios) if ratios else None


def momentum_terms(cfg: dict[str, Any]) -> tuple[float, float] | None:
    """(lambda, eta) of a run whose server's step is exactly lambda * m + eta * d (the momentum
    rule, docs/algorithms.md#server-round, with server momentum and no global GC: FedAvgM,
    FedACG, FedAGM), so that `momentum_alignment` can split its recorded norms; None for any
    other rule, lambda 0 (no momentum) or global GC (it changes d after its norm was taken)."""
    if cfg.get("server-rule") != "momentum" or cfg.get("global-gc", "none") != "none":
        return None
    lam, eta = cfg.get("lam"), cfg.get("eta", 1.0)
    if not isinstance(lam, (int, float)) or not isinstance(eta, (int, float)):
        return None
    return (float(lam), float(eta)) if lam > 0 and eta > 0 else None


def momentum_alignment(rows: Sequence[dict[str, Any]], lam: float,
                       eta: float) -> tuple[float | None, float | None]:
    """The medians over rounds of cos(lambda m, d) and ||lambda m|| / ||eta d||: whether the
    clients' mean update d of a round goes with the server's momentum term or against it, and
    how long that term is against the update, for a run whose step is lambda m + eta d
    (`momentum_terms`; FedACG's look-ahead is that lambda m).

    From the recorded norms alone: m^t is the last round's step (theta^t - theta^{t-1} = m^t),
    so ||lambda m^t|| = lambda * s^{t-1}, and s^2 = ||lambda m||^2 + ||eta d||^2
    + 2 lambda eta m.d gives the cosine. A round counts when it and the round before it
    aggregated (both hold the clients' update norm) and both terms are non-zero; (None, None)
    where none does."""
    cosines, ratios = [], []
    for before, row in zip(rows, rows[1:]):
        if row.get("round") != before.get("round", -2) + 1:
            continue
        s_before, s = before.get("train-server-step-norm"), row.get("train-server-step-norm")
        if s_before is None or s is None or not before.get("train-client-update-norm"):
            continue
        term = lam * s_before  # ||lambda m^t||
        update = eta * (row.get("train-client-update-norm") or 0.0)  # ||eta d^t||
        if term <= 0 or update <= 0:
            continue
        cos = (s * s - term * term - update * update) / (2 * term * update)
        cosines.append(min(1.0, max(-1.0, cos)))
        ratios.append(term / update)
    return (_median(cosines), _median(ratios)) if cosines else (None, None)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
