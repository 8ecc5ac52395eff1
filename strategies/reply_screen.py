"""Screen a round's train replies before aggregation (plain PyTorch, no server maths).

A reply is aggregated only when it holds exactly one ArrayRecord and one MetricRecord, a finite
non-negative weight (`num-examples`), the model's keys with the model's shapes and dtypes, only
finite values and, with `max_norm > 0`, an update `||w_i - phi||` (over every float tensor) of at
most `max_norm`. Anything else - an error reply, a missing reply (timeout), a bad update - is
logged with the node and the reason, counted, and left out; the round goes on with the rest.

`limit_influence` then bounds what one good reply can do (docs/security.md): an update whose
norm exceeds `norm_ratio` times the round's median update norm is dropped (`dropped-outlier`),
and a claimed weight above `weight_ratio` times the round's median claim is cut to that value
(`capped-weight`). `check_node_report` validates what a node says about its partition.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from logging import WARNING

import torch
from flwr.app import Message, RecordDict
from flwr.common import log

from models.wire import state_view

State = dict[str, torch.Tensor]

# Why a reply was dropped; each one is counted as `dropped-<reason>` in the round's metrics.
REASONS = ("malformed", "keys", "shape", "dtype", "non-finite", "norm", "outlier", "duplicate")


def short_reason(reason: str, limit: int = 300) -> str:
    """The last line of an error reason (simulation errors carry a whole traceback)."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "(no reason given)"


class BadUpdate(ValueError):
    """A reply that cannot be aggregated; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def update_norm(model: State, phi: State) -> float:
    """||model - phi|| over every float tensor of phi (fused per-tensor norms)."""
    keys = [k for k, p in phi.items() if p.is_floating_point()]
    diffs = torch._foreach_sub([model[k] for k in keys], [phi[k] for k in keys])
    return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(diffs)).double()))


def check_finite(model: State, keys: Sequence[str]) -> None:
    """BadUpdate unless every value of model[keys] is finite (one fused norm pass, no bool
    masks)."""
    norms = torch.stack(torch._foreach_norm([model[k] for k in keys]))
    bad = (~torch.isfinite(norms)).nonzero()
    if len(bad):
        k = keys[int(bad[0])]
        count = int((~torch.isfinite(model[k])).sum())
        if count:
            raise BadUpdate("non-finite", f"'{k}' has {count} NaN/Inf value(s)")
        raise BadUpdate("norm", f"'{k}' holds values too large to aggregate (its norm overflows)")


def check_update(content: RecordDict, phi: State, weight_key: str, max_norm: float = 0.0
                 ) -> tuple[State, float]:
    """The reply's model and weight, or BadUpdate saying why it cannot be aggregated."""
    if len(content.array_records) != 1 or len(content.metric_records) != 1:
        raise BadUpdate("malformed", f"{len(content.array_records)} ArrayRecord(s) and "
                        f"{len(content.metric_records)} MetricRecord(s), expected one of each")
    metrics = next(iter(content.metric_records.values()))
    n = metrics.get(weight_key)
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0:
        raise BadUpdate("malformed",
                        f"metric '{weight_key}' = {n!r}, expected a finite number >= 0")
    try:
        model = state_view(next(iter(content.array_records.values())))  # read-only views, no copy
    except Exception as err:  # undecodable bytes, unknown dtype, ...
        raise BadUpdate("malformed",
                        f"arrays cannot be decoded ({type(err).__name__}: {err})") from None
    if model.keys() != phi.keys():
        missing, extra = sorted(phi.keys() - model.keys()), sorted(model.keys() - phi.keys())
        raise BadUpdate("keys",
                        f"array keys differ from the model's (missing {missing}, extra {extra})")
    for k, ref in phi.items():
        if model[k].shape != ref.shape:
            raise BadUpdate("shape",
                            f"'{k}' has shape {tuple(model[k].shape)}, expected {tuple(ref.shape)}")
        if model[k].dtype != ref.dtype:
            raise BadUpdate("dtype", f"'{k}' has dtype {model[k].dtype}, expected {ref.dtype}")
    check_finite(model, [k for k, v in model.items() if v.is_floating_point()])
    if max_norm > 0:
        norm = update_norm(model, phi)
        if norm > max_norm:
            raise BadUpdate("norm", f"update norm ||w - phi|| = {norm:.4g} > "
                                    f"max-update-norm = {max_norm:g}")
    return model, float(n)


@dataclass
class Screened:
    """The replies that may be aggregated (in a stable order) and what happened to the others."""

    good: list[tuple[Message, State, float]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def screen_replies(
    server_round: int, replies: Iterable[Message], sent: Sequence[Message], phi: State,
    weight_key: str, max_norm: float, describe: Callable[[int], str],
    order: Callable[[int], object],
) -> Screened:
    """Split a round's replies into good ones and counted failures.

    `sent`: the round's instructions (a node without a reply timed out). A reply is matched to
    its instruction by message id where the grid set one: an error made by the SuperLink for a
    node that went away carries the SuperLink's node id, not the node's;
    `describe(node_id)` names a node in log lines; `order(node_id)` sorts the good replies, so that
    the aggregate does not depend on the order in which replies arrived.
    """
    out = Screened(counts={"replies": 0, "errors": 0, "timeouts": 0, "dropped": 0})
    node_of = {m.metadata.message_id: m.metadata.dst_node_id for m in sent if m.metadata.message_id}
    answered = set()
    for msg in replies:
        node = node_of.get(msg.metadata.reply_to_message_id, msg.metadata.src_node_id)
        if node in answered:  # one reply per instruction: a repeated one is not counted twice
            out.counts["dropped"] += 1
            out.counts["dropped-duplicate"] = out.counts.get("dropped-duplicate", 0) + 1
            log(WARNING, "round %d: dropped a second reply of %s", server_round, describe(node))
            continue
        answered.add(node)
        if msg.has_error():
            out.counts["errors"] += 1
            log(WARNING, "round %d: %s failed: %s", server_round, describe(node),
                short_reason(msg.error.reason))
            continue
        try:
            model, n = check_update(msg.content, phi, weight_key, max_norm)
        except BadUpdate as bad:
            out.counts["dropped"] += 1
            key = f"dropped-{bad.reason}"
            out.counts[key] = out.counts.get(key, 0) + 1
            log(WARNING, "round %d: dropped the reply of %s: %s", server_round, describe(node),
                bad.detail)
            continue
        out.good.append((msg, model, n))
    for node in (m.metadata.dst_node_id for m in sent):
        if node not in answered:
            out.counts["timeouts"] += 1
            log(WARNING, "round %d: no reply from %s within round-timeout", server_round,
                describe(node))
    out.good.sort(key=lambda item: order(node_of.get(item[0].metadata.reply_to_message_id,
                                                     item[0].metadata.src_node_id)))
    out.counts["replies"] = len(out.good)
    return out


def cap_weights(server_round: int, screened: Screened, bound: float,
                describe: Callable[[int], str], why: str) -> None:
    """Cut every claimed weight n_i > bound to bound, counted as `capped-weight` and logged
    with `why` (which rule, and the bound). In place."""
    good, counts = screened.good, screened.counts
    for i, (msg, model, n) in enumerate(good):
        if n > bound:
            counts["capped-weight"] = counts.get("capped-weight", 0) + 1
            log(WARNING, "round %d: %s claims %g examples, %s", server_round,
                describe(msg.metadata.src_node_id), n, why)
            good[i] = (msg, model, bound)


def limit_influence(server_round: int, screened: Screened, phi: State, norm_ratio: float,
                    weight_ratio: float, describe: Callable[[int], str],
                    max_weight: float = 0.0, clip_ratio: float = 0.0) -> Screened:
    """Drop updates with ||w_i - phi|| > norm_ratio * median_j ||w_j - phi||, scale the kept
    ones above clip_ratio * that median down to it (w_i = phi + u_i * bound / ||u_i||); cut weights
    n_i > max_weight to max_weight, then n_i > weight_ratio * median_j n_j to that bound (0 = that
    rule off). In place; returns it.

    Honest clients of one round have update norms within a small factor of each other, so a
    ratio of 5-10 leaves them alone; an update scaled by 1e3 or 1e12, or a claim of 1e18
    examples, is out. With 2 replies the median is their mean and nothing can exceed 2x it.
    `max_weight` is what the server knows: the largest partition of the data split, which no
    honest claim exceeds; it bounds an inflated claim to an honest client's weight.
    """
    good, counts = screened.good, screened.counts
    if norm_ratio > 0 and len(good) >= 2:
        norms = [update_norm(model, phi) for _, model, _ in good]
        bound = norm_ratio * statistics.median(norms)
        keep = []
        for item, norm in zip(good, norms):
            if norm > bound:
                counts["dropped"] += 1
                counts["dropped-outlier"] = counts.get("dropped-outlier", 0) + 1
                log(WARNING, "round %d: dropped the reply of %s: update norm %.4g > %g x the "
                    "round's median %.4g (update-norm-ratio)", server_round,
                    describe(item[0].metadata.src_node_id), norm, norm_ratio,
                    statistics.median(norms))
            else:
                keep.append(item)
        good[:] = keep
    if clip_ratio > 0 and len(good) >= 2:
        median = statistics.median(update_norm(model, phi) for _, model, _ in good)
        bound = clip_ratio * median
        for i, (msg, model, n) in enumerate(good):
            norm = update_norm(model, phi)
            if norm > bound:
                counts["clipped-norm"] = counts.get("clipped-norm", 0) + 1
                log(WARNING, "round %d: %s sent an update of norm %.4g > %g x the round's median "
                    "%.4g: scaled down to it (update-clip-ratio)", server_round,
                    describe(msg.metadata.src_node_id), norm, clip_ratio, median)
                scale = bound / norm
                good[i] = (msg, {k: phi[k] + (v - phi[k]) * scale if v.is_floating_point() else v
                                 for k, v in model.items()}, n)
    if max_weight > 0:
        cap_weights(server_round, screened, max_weight, describe,
                    f"more than the largest partition ({max_weight:g}): weighted as "
                    f"{max_weight:g} (num-examples-check)")
    if weight_ratio > 0 and len(good) >= 2:
        bound = weight_ratio * statistics.median(n for _, _, n in good)
        cap_weights(server_round, screened, bound, describe,
                    f"> {weight_ratio:g} x the round's median: weighted as {bound:g} "
                    "(num-examples-ratio)")
    counts["replies"] = len(good)
    return screened


# A node may say it holds partition `partition-id` of `num-partitions`; more partitions than
# this are refused (each needs examples; no dataset here has more than ~1e6 examples per class).
MAX_PARTITIONS = 1_000_000


def check_node_report(pid: object, nparts: object, limit: int = MAX_PARTITIONS) -> str | None:
    """None when (partition-id, num-partitions) is a valid report, else why it is not."""
    for name, v in (("partition-id", pid), ("num-partitions", nparts)):
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{name} = {v!r} is not an integer"
    if not 1 <= nparts <= limit:
        return f"num-partitions = {nparts} is outside [1, {limit}]"
    if not 0 <= pid < nparts:
        return f"partition-id = {pid} is outside [0, num-partitions = {nparts})"
    return None


def screen_node_reports(reports: dict[int, tuple[object, object]], num_slots: int = 0
                        ) -> tuple[dict[int, int], int, dict[int, str]]:
    """Nodes' (partition-id, num-partitions) reports -> (node -> partition-id of the accepted
    ones, num-partitions, node -> why refused). num-partitions is `num_slots` when already
    known, else the value most nodes report (ties: the smallest), so one node cannot set it."""
    valid = {n: r for n, r in reports.items() if check_node_report(*r) is None}
    refused = {n: check_node_report(*r) for n, r in reports.items() if n not in valid}
    if not num_slots and valid:
        counts: dict[int, int] = {}
        for _, nparts in valid.values():
            counts[nparts] = counts.get(nparts, 0) + 1
        num_slots = min(counts, key=lambda k: (-counts[k], k))
    accepted = {}
    for n, (pid, nparts) in valid.items():
        if nparts != num_slots:
            refused[n] = f"num-partitions = {nparts}, the other nodes say {num_slots}"
        else:
            accepted[n] = pid
    return accepted, num_slots, refused
