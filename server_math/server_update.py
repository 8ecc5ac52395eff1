"""The server update of docs/algorithms.md#server-round in plain PyTorch (no Flower), on name ->
tensor dicts.

    phi   = theta + lam * m            if lookahead else theta
    d     = sum_i w_i * (w_i_K - phi)  = sum_i w_i * w_i_K - phi      (sum_i w_i = 1)
    d[l]  = P(d[l])                    for l in the GLOBAL-GC set
    m     = lam * m + eta * d
    theta = theta + m
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from models.centralization import centralize_

from .reply_pass import PreparedMean, weighted_sum_minus

State = dict[str, torch.Tensor]


def float_keys(phi: State) -> list[str]:
    """The names of phi's float tensors: those an update moves (not e.g. BatchNorm's counts)."""
    return [k for k, v in phi.items() if v.is_floating_point()]


def lookahead(theta: State, m: State, lam: float) -> State:
    """phi = theta + lam * m on float tensors (others are copied from theta)."""
    return {k: torch.add(v, m[k], alpha=lam) if k in m else v for k, v in theta.items()}


def client_weights(num_examples: Sequence[float], aggregation: str) -> list[float]:
    """w_i = n_i / sum_j n_j ('examples') or 1 / |S_t| ('uniform'); overflow-safe: when the
    sum of finite claims overflows (two of 1e308), the weights are computed from n_i / max_j n_j."""
    if aggregation == "uniform":
        return [1.0 / len(num_examples)] * len(num_examples)
    total = float(sum(num_examples))
    if not math.isfinite(total):  # huge claims overflow the sum: weigh n_i / max_j n_j instead
        top = float(max(num_examples))
        num_examples = [n / top for n in num_examples]
        total = float(sum(num_examples))
    if total <= 0:
        raise ValueError("the replies report no training examples in total")
    return [n / total for n in num_examples]


def aggregate_update(phi: State, models: Sequence[State], weights: Sequence[float],
                     out: State | None = None, prepared: PreparedMean | None = None) -> State:
    """d = sum_i w_i * models_i - phi, for the float tensors of phi (models: same dtypes as phi),
    into `out` when given (a buffer of an earlier round: no new model-sized memory). One pass
    over the models, a cache-sized block at a time (`server_math.reply_pass`); none when `prepared`
    (the screen's pass) already holds this very sum (same phi, models and weights)."""
    if prepared is not None and prepared.matches(phi, models, weights):
        return prepared.mean
    return weighted_sum_minus(models, weights, phi, float_keys(phi), out)


def global_gc_(d: State, names: Sequence[str], vectors: str) -> None:
    """d[l] = P(d[l]) for l in `names` (GC-Fed Def. 2, Alg. 1 line 20)."""
    for name in names:
        centralize_(d[name], vectors)


def server_step_(theta: State, m: State, d: State, lam: float, eta: float) -> None:
    """In place: m = lam * m + eta * d; theta = theta + m."""
    keys = list(d)
    ms = [m[k] for k in keys]
    torch._foreach_mul_(ms, lam)
    torch._foreach_add_(ms, [d[k] for k in keys], alpha=eta)
    torch._foreach_add_([theta[k] for k in keys], ms)
