"""Screen a round's train replies before aggregation (plain PyTorch, no server maths).

A reply is aggregated only when it holds exactly one ArrayRecord and one MetricRecord besides
the server rule's extra records, a finite non-negative weight (`num-examples`), the numbers the
rule reads (its `up_metrics`) in their declared range, the model's keys with the model's shapes
and dtypes, only finite values and, with `max_norm > 0`, an update `||w_i - phi||` (over every
float tensor) of at most `max_norm`. Each extra record the rule needs (its `up`, e.g. SCAFFOLD's
`scaffold-dc`) is taken out of the reply and checked the same way against what its part declares
(`methods.UpRecord`: keys, shapes, dtypes, finite values). Anything else - an error reply, a
missing reply (timeout), a bad update or record - is logged with the node and the reason,
counted, and left out whole; the round goes on with the rest.

What one good reply may then do is bounded by `server_math.influence`; what nodes say of their
partitions is checked by `server_math.node_reports`.

Each record is parsed once (read-only views of the message's bytes) and each norm computed once,
in one pass over all the models that also computes the rule's weighted mean
(`server_math.reply_pass`: no model-sized temporary per reply); the rules get the very views and
numbers screened here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from logging import WARNING
from typing import Any

import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.common import log

from models.wire import state_view

from .reply_pass import PreparedMean, norms_and_sum
from .records import FLOATS, PARAMETERS, REPORTED_METRICS, ReplyMetric, UpRecord
from .server_update import float_keys

State = dict[str, torch.Tensor]

# Why a reply was dropped; each one is counted as `dropped-<reason>` in the round's metrics.
REASONS = ("malformed", "keys", "shape", "dtype", "non-finite", "norm", "outlier", "duplicate",
           "payload")


def short_reason(reason: str, limit: int = 300) -> str:
    """The last line of an error reason (simulation errors carry a whole traceback)."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "(no reason given)"


class BadUpdate(ValueError):
    """A reply that cannot be aggregated; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def record_layouts(declared: Mapping[str, UpRecord], parameters: Iterable[tuple[str, Any]],
                   state: Mapping[str, torch.Tensor]) -> dict[str, State]:
    """Each declared reply record (a server rule's `up`) -> key -> an empty tensor of the shape
    and dtype it must have (on the meta device: no memory), what `check_record` compares to.
    `parameters`, `state`: the model's `named_parameters()` and `state_dict()`."""
    parameters = list(parameters)
    out = {}
    for name, record in declared.items():
        if record.holds == PARAMETERS:
            layout = {k: (p.shape, p.dtype) for k, p in parameters}
        elif record.holds == FLOATS:
            layout = {k: (v.shape, v.dtype) for k, v in state.items() if v.is_floating_point()}
        elif isinstance(record.holds, Mapping):
            layout = {k: (tuple(shape), getattr(torch, str(dtype), None))
                      for k, (shape, dtype) in record.holds.items()}
        else:
            layout = {}
        if not layout or not all(isinstance(d, torch.dtype) for _, d in layout.values()):
            raise ValueError(f"record '{name}': UpRecord holds {record.holds!r}: expected "
                             f"'{PARAMETERS}', '{FLOATS}' or {{key: (shape, dtype name)}}")
        out[name] = {k: torch.empty(shape, dtype=dtype, device="meta")
                     for k, (shape, dtype) in layout.items()}
    return out


def tensor_norms(state: State, keys: Sequence[str], minus: State | None = None) -> list:
    """||state[k]|| for each key (fused), or ||state[k] - minus[k]||: one tensor's difference at
    a time, so no copy of a whole model is made."""
    if minus is None:
        return torch._foreach_norm([state[k] for k in keys])
    return [torch.linalg.vector_norm(state[k] - minus[k]) for k in keys]


def total_norm(norms) -> float:
    """The norm over all tensors from their norms (a list of them or one tensor; in float64)."""
    if not isinstance(norms, torch.Tensor):
        norms = torch.stack(list(norms)) if len(norms) else torch.zeros(0)
    return float(torch.linalg.vector_norm(norms.double())) if norms.numel() else 0.0


def update_norm(model: State, phi: State) -> float:
    """||model - phi|| over every float tensor of phi."""
    return norms_and_sum([model], phi, float_keys(phi))[0][0]


def check_finite(state: State, keys: Sequence[str], norms, prefix: str = "") -> None:
    """BadUpdate unless every norm of `tensor_norms(state, keys, ...)` (a list of them or one
    tensor) is finite (a NaN or Inf in a tensor makes its norm one; so do values whose norm
    overflows)."""
    if not isinstance(norms, torch.Tensor):
        norms = torch.stack(list(norms)) if len(norms) else torch.zeros(0)
    finite = torch.isfinite(norms)
    if not finite.all():
        k = keys[int((~finite).nonzero()[0])]
        count = int((~torch.isfinite(state[k])).sum())
        if count:
            raise BadUpdate("non-finite", f"{prefix}'{k}' has {count} NaN/Inf value(s)")
        raise BadUpdate("norm", f"{prefix}'{k}' holds values too large to aggregate (its norm "
                                "overflows)")


def check_layout(state: State, expected: State, whose: str, prefix: str = "") -> None:
    """BadUpdate unless `state` has exactly the keys of `expected`, with their shapes and dtypes."""
    if state.keys() != expected.keys():
        missing = sorted(expected.keys() - state.keys())
        extra = sorted(state.keys() - expected.keys())
        raise BadUpdate("keys", f"{prefix}array keys differ from {whose} (missing {missing}, "
                                f"extra {extra})")
    for k, ref in expected.items():
        if state[k].shape != ref.shape:
            raise BadUpdate("shape", f"{prefix}'{k}' has shape {tuple(state[k].shape)}, "
                                     f"expected {tuple(ref.shape)}")
        if state[k].dtype != ref.dtype:
            raise BadUpdate("dtype", f"{prefix}'{k}' has dtype {state[k].dtype}, "
                                     f"expected {ref.dtype}")


def views(arrays: ArrayRecord, prefix: str = "") -> State:
    """Read-only tensor views of a record's arrays (no copy), or BadUpdate."""
    try:
        return state_view(arrays)
    except Exception as err:  # undecodable bytes, unknown dtype, ...
        raise BadUpdate("malformed", f"{prefix}arrays cannot be decoded ({type(err).__name__}: "
                                     f"{err})") from None


def is_number(v: object) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def check_metric(metrics, name: str, spec: ReplyMetric) -> None:
    """BadUpdate unless metric `name` is a finite number in [low, high] (whole with integer)."""
    v = metrics.get(name)
    if not (is_number(v) and spec.low <= v <= spec.high
            and (not spec.integer or float(v).is_integer())):
        raise BadUpdate("malformed", f"metric '{name}' = {v!r}, expected a finite "
                        f"{'whole ' if spec.integer else ''}number in [{spec.low:g}, "
                        f"{spec.high:g}] (the server rule reads it)")


def screen_metrics(server_round: int, replies: Sequence[tuple[Message, float]],
                   weight_key: str, describe: Callable[[int], str],
                   declared: Mapping[str, ReplyMetric] = REPORTED_METRICS) -> list[RecordDict]:
    """The replies' metrics as the round's metrics may use them: of each (reply, weight), its
    MetricRecord's numbers that are finite and in their declared range (`records.
    REPORTED_METRICS`; others finite), with `weight_key` set to the screened weight (a claim
    already capped by `limit_influence`; all 1 where every weight is 0, so that the mean is
    defined). A value left out is logged with the node and the key;
    the reply's model is not affected. Lists of numbers and strings are left out too."""
    out, left_out = [], []
    for msg, weight in replies:
        records = list(msg.content.metric_records.values())
        kept: dict[str, float | int] = {}
        for key, value in (records[0].items() if len(records) == 1 else ()):
            spec = declared.get(key, ReplyMetric())
            if key == weight_key:
                continue
            if is_number(value) and spec.low <= value <= spec.high and (
                    not spec.integer or float(value).is_integer()):
                kept[key] = value
            else:
                left_out.append(key)
                log(WARNING, "round %d: %s reported %s = %r: left out of the round's metrics "
                    "(expected a finite number in [%g, %g])", server_round,
                    describe(msg.metadata.src_node_id), key, value, spec.low, spec.high)
        kept[weight_key] = float(weight)
        out.append(kept)
    if out and not any(m[weight_key] > 0 for m in out):  # every claim 0: an unweighted mean
        for m in out:
            m[weight_key] = 1.0
    # A weighted mean over all replies counts every reply's weight: a value left out is filled
    # with the weighted mean of the others', so that the round's value is theirs alone.
    for key in set(left_out):
        good = [(m[key], m[weight_key]) for m in out if key in m]
        total = sum(w for _, w in good)
        for m in out:
            if key not in m and good:
                m[key] = sum(v * w for v, w in good) / total if total else good[0][0]
            elif not good:
                m.pop(key, None)
    return [RecordDict({"metrics": MetricRecord(m)}) for m in out]


def check_reply(content: RecordDict, phi: State, weight_key: str,
                metrics: Mapping[str, ReplyMetric] | None = None) -> tuple[State, float]:
    """The reply's model (read-only views) and weight, or BadUpdate saying why it cannot be
    aggregated (its records, weight, `metrics`: the numbers the server rule reads, keys, shapes,
    dtypes); its values are checked by `check_norms`."""
    if len(content.array_records) != 1 or len(content.metric_records) != 1:
        raise BadUpdate("malformed", f"{len(content.array_records)} ArrayRecord(s) and "
                        f"{len(content.metric_records)} MetricRecord(s), expected one of each")
    record = next(iter(content.metric_records.values()))
    n = record.get(weight_key)
    if not is_number(n) or n < 0:
        raise BadUpdate("malformed",
                        f"metric '{weight_key}' = {n!r}, expected a finite number >= 0")
    for name, spec in (metrics or {}).items():
        check_metric(record, name, spec)
    model = views(next(iter(content.array_records.values())))
    check_layout(model, phi, "the model's")
    return model, float(n)


def check_norms(model: State, phi: State, norm: float, max_norm: float = 0.0) -> float:
    """The update norm ||w - phi|| (`norm`: from `norms_and_sum`), or BadUpdate: non-finite
    values (a NaN or Inf makes the norm one; then each tensor's norm is measured, which names
    it, and the update norm is their norm, in float64), above `max_norm` (> 0)."""
    if not math.isfinite(norm):
        keys = float_keys(phi)
        norms = tensor_norms(model, keys, phi)
        check_finite(model, keys, norms)
        norm = total_norm(norms)
    if max_norm > 0 and norm > max_norm:
        raise BadUpdate("norm", f"update norm ||w - phi|| = {norm:.4g} > "
                                f"max-update-norm = {max_norm:g}")
    return norm


def check_record(name: str, arrays: ArrayRecord, expected: State,
                 center: State | None = None) -> tuple[State, float]:
    """A reply record's views and norm ||r - center|| (||r|| without a center), or BadUpdate
    unless it is as declared (`expected`: from `record_layouts`) and finite."""
    prefix = f"record '{name}': "
    state = views(arrays, prefix)
    check_layout(state, expected, "its declaration", prefix)
    keys = float_keys(expected)
    norms = tensor_norms(state, keys, center)
    check_finite(state, keys, norms, prefix)
    return state, total_norm(norms)


def take_records(content: RecordDict, names: Iterable[str]) -> dict[str, ArrayRecord]:
    """Remove the named ArrayRecords from a reply and return them (the model is what remains)."""
    found = {n: content.array_records[n] for n in names if n in content.array_records}
    for name in found:
        del content[name]
    return found


@dataclass
class Screened:
    """The replies that may be aggregated (in a stable order) and what happened to the others.

    `norms`, `up`, `up_norms`: by reply (`id(message)`), its update norm, its screened records
    and their norms, computed once by `screen_replies` (`limit_influence` computes a missing
    update norm).
    """

    good: list[tuple[Message, State, float]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    norms: dict[int, float] = field(default_factory=dict)
    up: dict[int, dict[str, State]] = field(default_factory=dict)
    up_norms: dict[int, dict[str, float]] = field(default_factory=dict)
    prepared: PreparedMean | None = None

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def drop(self, reason: str) -> None:
        self.counts["dropped"] += 1
        self.count(f"dropped-{reason}")


def screen_replies(
    server_round: int, replies: Iterable[Message], sent: Sequence[Message], phi: State,
    weight_key: str, max_norm: float, describe: Callable[[int], str],
    order: Callable[[int], object], *, records: Mapping[str, State] | None = None,
    centers: Mapping[str, State] | None = None, metrics: Mapping[str, ReplyMetric] | None = None,
    undecodable: Mapping[int, str] | None = None,
    mean_weights: Callable[[list[float]], list[float] | None] | None = None,
    mean_out: State | None = None,
) -> Screened:
    """Split a round's replies into good ones and counted failures.

    `sent`: the round's instructions (a node without a reply timed out). A reply is matched to
    its instruction by message id where the grid set one: an error made by the SuperLink for a
    node that went away carries the SuperLink's node id, not the node's;
    `describe(node_id)` names a node in log lines; `order(node_id)` sorts the good replies, so that
    the aggregate does not depend on the order in which replies arrived. `records`: the server
    rule's extra records, name -> their layout (`record_layouts`), taken out of every reply and
    screened; `centers`: where their norms are measured from (the rule's `up_centers()`, 0 for
    the others); `metrics`: the numbers the rule reads; `undecodable`: id(reply) -> why its model
    could not be decoded (uplink-bits), dropped as malformed.

    The norms are measured in one pass over the models (`server_math.reply_pass.norms_and_sum`);
    with `mean_weights` (the claims of the replies, in their aggregation order -> the weights
    p_i of the rule's mean sum_i p_i w_i - phi, or None) the same pass also computes that
    mean, into `mean_out` when given, kept as `prepared`: what the rule's `aggregate_update` takes
    when no reply is dropped, clipped or reweighted afterwards.
    """
    records, centers, undecodable = records or {}, centers or {}, undecodable or {}
    now = _Round(server_round, describe,
                 Screened(counts={"replies": 0, "errors": 0, "timeouts": 0, "dropped": 0}),
                 {m.metadata.message_id: m.metadata.dst_node_id for m in sent
                  if m.metadata.message_id})
    # 1. what each reply is (error, duplicate) and its layout; 2. every update norm, in one
    # pass over the models (server_math.reply_pass); 3. the values: finite, norm bound, records;
    # 4. the nodes that did not answer
    parsed, answered = _parse_replies(now, replies, phi, weight_key, records, metrics,
                                      undecodable)
    parsed.sort(key=lambda item: order(item[0]))  # the order of the aggregate
    norms = _measure_norms(now.out, parsed, phi, mean_weights, mean_out)
    _check_values(now, parsed, norms, phi, max_norm, records, centers)
    _count_timeouts(now, sent, answered)
    out = now.out
    out.good.sort(key=lambda item: order(now.node(item[0])))
    out.counts["replies"] = len(out.good)
    return out


# (node, message, model, weight, its records): a reply whose structure passed, its values not
# yet checked
_Parsed = tuple[int, Message, State, float, dict[str, ArrayRecord]]


@dataclass
class _Round:
    """What the steps of `screen_replies` share: the round, how a node is named in log lines,
    the outcome, and the node of each instruction (by message id)."""

    number: int
    describe: Callable[[int], str]
    out: Screened
    node_of: dict[str, int]

    def node(self, msg: Message) -> int:
        """The node a reply answers: its instruction's, where the grid set a message id."""
        return self.node_of.get(msg.metadata.reply_to_message_id, msg.metadata.src_node_id)

    def drop(self, node: int, bad: BadUpdate) -> None:
        self.out.drop(bad.reason)
        log(WARNING, "round %d: dropped the reply of %s: %s", self.number, self.describe(node),
            bad.detail)


def _parse_replies(now: _Round, replies: Iterable[Message], phi: State, weight_key: str,
                   records: Mapping[str, State], metrics: Mapping[str, ReplyMetric] | None,
                   undecodable: Mapping[int, str]) -> tuple[list[_Parsed], set]:
    """Step 1, the structure: a second reply of a node dropped, an error reply counted, a reply
    that could not be decoded or whose records, weight, metrics or layout are wrong dropped
    (`check_reply`); the others parsed, with the nodes that answered."""
    parsed, answered = [], set()
    for msg in replies:
        node = now.node(msg)
        if node in answered:  # one reply per instruction: a repeated one is not counted twice
            now.out.drop("duplicate")
            log(WARNING, "round %d: dropped a second reply of %s", now.number,
                now.describe(node))
            continue
        answered.add(node)
        if msg.has_error():
            now.out.counts["errors"] += 1
            log(WARNING, "round %d: %s failed: %s", now.number, now.describe(node),
                short_reason(msg.error.reason))
            continue
        try:
            if id(msg) in undecodable:
                raise BadUpdate("malformed", undecodable[id(msg)])
            taken = take_records(msg.content, records)
            model, n = check_reply(msg.content, phi, weight_key, metrics)
        except BadUpdate as bad:
            now.drop(node, bad)
            continue
        parsed.append((node, msg, model, n, taken))
    return parsed, answered


def _measure_norms(out: Screened, parsed: list[_Parsed], phi: State,
                   mean_weights: Callable[[list[float]], list[float] | None] | None,
                   mean_out: State | None) -> list[float]:
    """Step 2: every update norm in one pass over the models, in their aggregation order, and
    with `mean_weights` the rule's weighted mean in the same pass (kept as `out.prepared`)."""
    models = [model for _, _, model, _, _ in parsed]
    weights = mean_weights([n for _, _, _, n, _ in parsed]) if mean_weights and parsed else None
    norms, mean = norms_and_sum(models, phi, float_keys(phi), weights, mean_out)
    if mean is not None:
        out.prepared = PreparedMean(models, weights, phi, mean)
    return norms


def _check_values(now: _Round, parsed: list[_Parsed], norms: list[float], phi: State,
                  max_norm: float, records: Mapping[str, State],
                  centers: Mapping[str, State]) -> None:
    """Step 3, the values: finite, the update norm at most `max_norm`, every record the rule
    needs present, as declared and finite (`check_norms`, `check_record`); the good replies
    kept in `now.out` with their norms and records, the others dropped."""
    out = now.out
    for (node, msg, model, n, taken), norm in zip(parsed, norms):
        try:
            norm = check_norms(model, phi, norm, max_norm)
            up, up_norms = {}, {}
            for name, layout in records.items():
                if name not in taken:
                    raise BadUpdate("payload", f"it lacks the record '{name}' the server rule "
                                               "needs")
                up[name], up_norms[name] = check_record(name, taken[name], layout,
                                                        centers.get(name))
        except BadUpdate as bad:
            now.drop(node, bad)
            continue
        out.good.append((msg, model, n))
        out.norms[id(msg)], out.up[id(msg)], out.up_norms[id(msg)] = norm, up, up_norms


def _count_timeouts(now: _Round, sent: Sequence[Message], answered: set) -> None:
    """Step 4: each node sent an instruction that did not answer counted and logged."""
    for node in (m.metadata.dst_node_id for m in sent):
        if node not in answered:
            now.out.counts["timeouts"] += 1
            log(WARNING, "round %d: no reply from %s within round-timeout", now.number,
                now.describe(node))
