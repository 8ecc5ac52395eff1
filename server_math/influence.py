"""Bound what one good reply can do (docs/security.md), after the screening of each reply
(`reply_screen`): an update whose norm exceeds `norm_ratio` times the round's median update norm
is dropped (`dropped-outlier`), as is a record whose norm (from the point its server rule gives,
`up_centers`) exceeds `record_ratio` times the round's median norm of that record; an update
longer than `clip_ratio` times the median is scaled down to it (`clipped-norm`); a claimed weight
above the largest partition, or `weight_ratio` times the round's median claim, is cut to that
value (`capped-weight`; the ratio only where the split is not known).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from logging import WARNING

from flwr.common import log

from .reply_pass import ScaledUpdate
from .reply_screen import Screened, State, update_norm


def cap_weights(server_round: int, screened: Screened, bound: float,
                describe: Callable[[int], str], why: str) -> None:
    """Cut every claimed weight n_i > bound to bound, counted as `capped-weight` and logged
    with `why` (which rule, and the bound). In place."""
    good = screened.good
    for i, (msg, model, n) in enumerate(good):
        if n > bound:
            screened.count("capped-weight")
            log(WARNING, "round %d: %s claims %g examples, %s", server_round,
                describe(msg.metadata.src_node_id), n, why)
            good[i] = (msg, model, bound)


def drop_outliers(server_round: int, screened: Screened, norms: Sequence[float], ratio: float,
                  describe: Callable[[int], str], what: str, key: str) -> None:
    """Drop the good replies whose norm (`norms`, in `good`'s order) exceeds ratio x their
    median, counted as `dropped-outlier` and logged with `what` was measured and the `key`."""
    median = statistics.median(norms)
    keep = []
    for item, norm in zip(screened.good, norms):
        if norm > ratio * median:
            screened.drop("outlier")
            log(WARNING, "round %d: dropped the reply of %s: %s norm %.4g > %g x the round's "
                "median %.4g (%s)", server_round, describe(item[0].metadata.src_node_id), what,
                norm, ratio, median, key)
        else:
            keep.append(item)
    screened.good[:] = keep


def limit_influence(server_round: int, screened: Screened, phi: State, norm_ratio: float,
                    weight_ratio: float, describe: Callable[[int], str],
                    max_weight: float = 0.0, clip_ratio: float = 0.0, record_ratio: float = 0.0,
                    records: Sequence[str] = ()) -> Screened:
    """Drop updates with ||w_i - phi|| > norm_ratio * median_j ||w_j - phi||, and replies whose
    record r (of `records`) has ||r_i - c|| > record_ratio * median_j ||r_j - c|| (c: the record's
    center, 0 by default); scale the kept updates
    above clip_ratio * their median down to it (w_i = phi + u_i * bound / ||u_i||); cut weights
    n_i > max_weight to max_weight or, where the split is not known (max_weight = 0),
    n_i > weight_ratio * median_j n_j to that bound (0 = that rule off). In place; returns it.

    Honest clients of one round have norms within a small factor of each other (the table of
    docs/security.md#honest-runs, `benchmarks/honest_norms.py`), so a ratio above that factor
    leaves them alone while an update or record scaled by 1e3 or 1e12, or a claim of 1e18
    examples, is out. With 2 replies the median is their mean and nothing can exceed 2x it.
    `max_weight` is what the server knows: the largest partition of the data split, which no
    honest claim exceeds; it bounds an inflated claim to an honest client's weight, so the ratio
    rule, which also cuts honest claims of unbalanced splits (18x the median on digits' LDA
    0.05), is left for when the split is not known.
    """
    good = screened.good
    for msg, model, _ in good:  # computed once by screen_replies; here for hand-made lists
        if id(msg) not in screened.norms:
            screened.norms[id(msg)] = update_norm(model, phi)
    if norm_ratio > 0 and len(good) >= 2:
        drop_outliers(server_round, screened, [screened.norms[id(m)] for m, _, _ in good],
                      norm_ratio, describe, "update", "update-norm-ratio")
    for name in records if record_ratio > 0 else ():
        if len(good) >= 2:
            drop_outliers(server_round, screened,
                          [screened.up_norms[id(m)][name] for m, _, _ in good], record_ratio,
                          describe, f"record '{name}'", "record-norm-ratio")
    if clip_ratio > 0 and len(good) >= 2:
        median = statistics.median(screened.norms[id(m)] for m, _, _ in good)
        bound = clip_ratio * median
        for i, (msg, model, n) in enumerate(good):
            norm = screened.norms[id(msg)]
            if norm > bound:
                screened.count("clipped-norm")
                log(WARNING, "round %d: %s sent an update of norm %.4g > %g x the round's median "
                    "%.4g: scaled down to it (update-clip-ratio)", server_round,
                    describe(msg.metadata.src_node_id), norm, clip_ratio, median)
                # w_i = phi + u_i * bound / ||u_i||, computed where a rule reads it (the
                # weighted mean reweighs w_i and phi instead: server_math.reply_pass)
                good[i] = (msg, ScaledUpdate(model, phi, bound / norm), n)
                screened.norms[id(msg)] = bound
    bound = claim_bound([n for _, _, n in good], max_weight, weight_ratio)
    if bound and max_weight > 0:
        cap_weights(server_round, screened, bound, describe,
                    f"more than the largest partition ({bound:g}): weighted as "
                    f"{bound:g} (num-examples-check)")
    elif bound:
        cap_weights(server_round, screened, bound, describe,
                    f"> {weight_ratio:g} x the round's median: weighted as {bound:g} "
                    "(num-examples-ratio)")
    screened.counts["replies"] = len(good)
    return screened


def claim_bound(claims: Sequence[float], max_weight: float, weight_ratio: float) -> float:
    """The weight no claim of these replies may exceed (0 = none): `max_weight`, the largest
    partition, where the split is known; else `weight_ratio` x the median claim (2+ replies)."""
    if max_weight > 0:
        return max_weight
    if weight_ratio > 0 and len(claims) >= 2:
        return weight_ratio * statistics.median(claims)
    return 0.0
