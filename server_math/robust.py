"""Robust aggregation of client updates and server-side differential privacy, in plain PyTorch.

The server round (docs/algorithms.md#server-round) forms the aggregate update d from the
clients' updates u_i = w_i - phi. By default d is the weighted mean sum_i p_i u_i (kept
bit-for-bit as `server_update.aggregate_update`). `robust-aggregator` replaces that mean with
one of the rules of Flower's robust strategies, computed here on the updates (every rule is
translation invariant, so on updates it selects/averages what Flower's strategy does on models):

    median         d[j] = median_i u_i[j]                      (FedMedian, Yin et al. 2018)
    trimmed-mean   d[j] = mean of u_i[j] without the  floor(beta*n) lowest and highest values
                                                               (FedTrimmedAvg, beta = trim)
    krum           d = u_k, k = argmin_i score_i,  score_i = sum of the n-f-2 smallest
                   ||u_i - u_j||^2 (j != i)                    (Krum, Blanchard et al. 2017)
    multikrum      d = sum_{k in K} p_k u_k / sum_{k in K} p_k, K = the m lowest scores
    bulyan         K = multikrum(f, n - 2f); d[j] = mean of the n - 4f values u_k[j], k in K,
                   closest to median_{k in K} u_k[j]           (Bulyan, El Mhamdi et al. 2018)

Then the server's own rules apply to d as usual (global GC, momentum, step). Server-side DP with
fixed clipping (Flower's DifferentialPrivacyServerSideFixedClipping, Andrew et al.) clips every
update to norm C before aggregation, u_i *= min(1, C / ||u_i||), and adds N(0, (z C / n)^2) to
every coordinate of d (z = noise multiplier, n = the number of updates aggregated).
tests/test_robust.py pins each rule against Flower's own functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .reply_pass import PreparedMean
from .server_update import State, aggregate_update, client_weights, float_keys

AGGREGATORS = ("mean", "median", "trimmed-mean", "krum", "multikrum", "bulyan")


@dataclass(frozen=True)
class RobustConfig:
    """How the round's updates become d: the aggregator and server-side DP (0 = off). Built by
    the server rules from their settings (`methods.momentum.robust_aggregation`: the run
    config's robust-aggregator, trim-fraction, num-malicious, multikrum-select,
    dp-clipping-norm, dp-noise-multiplier and seed)."""

    aggregator: str = "mean"
    trim: float = 0.2  # trimmed-mean: fraction cut at each end, in [0, 0.5)
    num_malicious: int = 0  # f of Krum / MultiKrum / Bulyan
    multikrum_select: int = 0  # m of MultiKrum; 0 = n - f
    dp_clipping_norm: float = 0.0  # C; 0 = no DP
    dp_noise_multiplier: float = 0.0  # z
    seed: int = 0  # of the DP noise (one generator per round)

    def __post_init__(self):
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {self.aggregator!r}; one of {AGGREGATORS}")
        if not 0 <= self.trim < 0.5:
            raise ValueError(f"trim must be in [0, 0.5), got {self.trim}")


class TooFewUpdates(ValueError):
    """The rule needs more updates than the round has (e.g. Bulyan: n >= 4f + 3)."""


def stack_updates(phi: State, models: Sequence[State], key: str) -> torch.Tensor:
    """(n, *shape): u_i[key] = models_i[key] - phi[key]."""
    return torch.stack([m[key] - phi[key] for m in models])


def coordinate_median(stacked: torch.Tensor) -> torch.Tensor:
    """Median over dim 0; the mean of the two middle values for even n (as numpy's median)."""
    n = stacked.shape[0]
    s = stacked.sort(dim=0).values
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def trimmed_mean(stacked: torch.Tensor, trim: float) -> torch.Tensor:
    """Mean over dim 0 without the int(trim * n) lowest and highest values per coordinate."""
    n = stacked.shape[0]
    cut = int(trim * n)
    return stacked.sort(dim=0).values[cut:n - cut].mean(dim=0)


def flat_updates(phi: State, models: Sequence[State]) -> torch.Tensor:
    """(n, P) float64: every float tensor of each update, flattened and concatenated."""
    keys = float_keys(phi)
    return torch.stack([torch.cat([(m[k] - phi[k]).double().flatten() for k in keys])
                        for m in models])


def krum_scores(flat: torch.Tensor, num_malicious: int) -> torch.Tensor:
    """score_i = sum of the n-f-2 (at least 1) smallest squared distances to the others."""
    n = flat.shape[0]
    dist = torch.cdist(flat, flat).square()
    closest = max(1, n - num_malicious - 2)
    # each row's smallest entry is its own 0 distance: skip it, as Flower's select_multikrum does
    return dist.sort(dim=1).values[:, 1:closest + 1].sum(dim=1)


def multikrum_select(flat: torch.Tensor, num_malicious: int, count: int) -> list[int]:
    """Indices of the `count` lowest Krum scores (stable order on ties)."""
    scores = krum_scores(flat, num_malicious)
    return torch.sort(scores, stable=True).indices[:count].tolist()


def too_few(cfg: RobustConfig, n: int) -> str | None:
    """Why `n` updates are too few for the rule (the round is then skipped), or None."""
    need = replies_needed(cfg.aggregator, cfg.num_malicious, cfg.multikrum_select)
    if n < need:
        return f"{cfg.aggregator} with num-malicious = {cfg.num_malicious} needs at least " \
               f"{need} good replies, got {n}"
    return None


def replies_needed(aggregator: str, num_malicious: int, multikrum_select: int = 0) -> int:
    """The fewest replies a round needs for the rule with f = num_malicious: Bulyan 4f + 3;
    Krum and Multi-Krum f + 3 where f > 0 (a score sums the n - f - 2 closest distances: at
    least one), and Multi-Krum at least the updates it averages; 1 otherwise."""
    f = num_malicious
    if aggregator == "bulyan":
        return 4 * f + 3
    if aggregator in ("krum", "multikrum"):
        return max(f + 3 if f > 0 else 1, multikrum_select if aggregator == "multikrum" else 1)
    return 1


def bulyan(phi: State, models: Sequence[State], num_malicious: int) -> State:
    f, n = num_malicious, len(models)
    if n < 4 * f + 3:
        raise TooFewUpdates(f"bulyan with f = {f} needs at least {4 * f + 3} updates, got {n}")
    chosen = [models[i] for i in multikrum_select(flat_updates(phi, models), f, n - 2 * f)]
    beta = n - 4 * f
    out = {}
    for k in float_keys(phi):
        stacked = stack_updates(phi, chosen, k)
        ref = coordinate_median(stacked)
        idx = (stacked - ref).abs().argsort(dim=0, stable=True)[:beta]
        out[k] = torch.gather(stacked, 0, idx).mean(dim=0)
    return out


def clip_update_(model: State, phi: State, clip: float) -> State:
    """A copy of `model` whose update model - phi is scaled to norm at most `clip`."""
    keys = float_keys(phi)
    u = {k: model[k] - phi[k] for k in keys}
    norm = float(torch.linalg.vector_norm(torch.stack(
        [torch.linalg.vector_norm(v.double()) for v in u.values()])))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return {**model, **{k: phi[k] + u[k] * scale for k in keys}}


def aggregate(cfg: RobustConfig, phi: State, models: Sequence[State], num_examples: Sequence[float],
              weighting: str, server_round: int = 0, out: State | None = None,
              prepared: PreparedMean | None = None) -> State:
    """d for the round: the configured rule over the updates, then the DP noise if any.

    `weighting` ('examples' or 'uniform') weights the mean and MultiKrum's average; the
    coordinate-wise rules (median, trimmed mean, Bulyan) and Krum are unweighted, as in Flower.
    `out`: where the mean may be written (a buffer of an earlier round); `prepared`: the mean
    the screen computed (`aggregate_update` takes it when it is this one).
    """
    if cfg.dp_clipping_norm > 0:
        models = [clip_update_(m, phi, cfg.dp_clipping_norm) for m in models]
    rule = cfg.aggregator
    if rule == "mean":
        d = aggregate_update(phi, models, client_weights(num_examples, weighting), out,
                             prepared)
    elif rule in ("median", "trimmed-mean"):
        fn = coordinate_median if rule == "median" else lambda s: trimmed_mean(s, cfg.trim)
        d = {k: fn(stack_updates(phi, models, k)) for k in float_keys(phi)}
    elif rule in ("krum", "multikrum"):
        n, f = len(models), cfg.num_malicious
        count = 1 if rule == "krum" else (cfg.multikrum_select or max(1, n - f))
        chosen = multikrum_select(flat_updates(phi, models), f, min(count, n))
        d = aggregate_update(phi, [models[i] for i in chosen],
                             client_weights([num_examples[i] for i in chosen], weighting))
    else:
        d = bulyan(phi, models, cfg.num_malicious)
    if cfg.dp_clipping_norm > 0 and cfg.dp_noise_multiplier > 0:
        std = cfg.dp_noise_multiplier * cfg.dp_clipping_norm / len(models)
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + server_round)
        for k, v in d.items():
            v.add_(torch.randn(v.shape, generator=gen, dtype=v.dtype) * std)
    return d
