"""The server's passes over a round's models, one cache-sized block at a time.

Reading the replies is what a round costs: each model is ~45 MB for ResNet-18 and has to come
from memory. `norms_and_sum` reads each reply once for both things the server needs: its update
norm ||w_i - phi|| (the screen) and the weighted mean sum_i p_i w_i - phi (the rule), block by
block, so that a block of phi and of the sum stay in the CPU's cache while the same block of
every reply is read; the only temporary is one block's difference w_i - phi. The weights are
those the rule will use if no reply is dropped, clipped or reweighted afterwards
(`ServerRule.mean_weights`); the result (`PreparedMean`) is taken by `aggregate_update` only
for those very models and weights, else the mean is computed again (`weighted_sum_minus`), so
a round with a dropped reply costs one more pass and nothing else changes.

A block is a list of pieces (index of the tensor, start, stop) of the flattened tensors, about
`BLOCK` elements in all: small tensors are grouped, large ones split. The mean goes through the
same floating-point operations, element by element, as a whole-tensor pass (zeros, one
`add_(alpha=p_i)` per reply in order, `sub_(phi)`): the same bits. The squares are summed per
block in float32 (a dot product) and across blocks in float64 (closer to the exact norm than
one float32 reduction over a whole tensor). A clipped update (`ScaledUpdate`) is summed as its
model and phi, reweighted, without being computed.

Everything here is PyTorch's own operations: nothing is compiled at run time
(docs/performance.md#the-servers-pass).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence

import torch

State = dict[str, torch.Tensor]

BLOCK = 1 << 18  # elements per block (1 MiB of float32): the blocks of phi, of the sum, of
# the difference and of the reply just read stay in the cache for the dot product and the
# weighted add, which with 2M-element blocks (8 MiB each) read them from memory again
# (docs/performance.md#the-servers-pass)


class ScaledUpdate(Mapping):
    """`model` with its update scaled: center + scale * (model - center) on float tensors (the
    others as they are), computed when a tensor is read. The weighted mean takes it as the
    weight scale * w of `model` and (1 - scale) * w of `center`, without computing it."""

    def __init__(self, model: Mapping[str, torch.Tensor], center: State, scale: float):
        self.model, self.center, self.scale = model, center, scale

    def __getitem__(self, key: str) -> torch.Tensor:
        v = self.model[key]
        if not v.is_floating_point():
            return v
        return self.center[key] + (v - self.center[key]) * self.scale

    def __iter__(self) -> Iterator[str]:
        return iter(self.model)

    def __len__(self) -> int:
        return len(self.model)


@functools.lru_cache(maxsize=64)
def plan(sizes: tuple[int, ...], block: int = BLOCK) -> tuple[tuple[tuple[int, int, int], ...],
                                                             ...]:
    """Blocks of (tensor index, start, stop) covering tensors of these `sizes` (numel) in order."""
    blocks, current, fill = [], [], 0
    for i, size in enumerate(sizes):
        start = 0
        while start < size:
            stop = min(size, start + block - fill)
            current.append((i, start, stop))
            fill += stop - start
            start = stop
            if fill >= block:
                blocks.append(tuple(current))
                current, fill = [], 0
    if current:
        blocks.append(tuple(current))
    return tuple(blocks)


def flat(state: State, keys: Sequence[str]) -> list[torch.Tensor]:
    """The tensors of `keys`, flattened (views when contiguous)."""
    return [state[k].reshape(-1) for k in keys]


def pieces(flats: Sequence[torch.Tensor], block, sizes: Sequence[int]) -> list[torch.Tensor]:
    """The views of one block of `flats`."""
    return [flats[i] if start == 0 and stop == sizes[i] else flats[i][start:stop]
            for i, start, stop in block]


class PreparedMean:
    """The weighted mean sum_i p_i w_i - phi computed by the screen's pass (`norms_and_sum`)
    with the weights the rule was expected to use; `aggregate_update` returns it when asked for
    the very same models, weights and phi (the same numbers, bit for bit), else computes."""

    def __init__(self, models: Sequence, weights: Sequence[float], center: State, mean: State):
        self.models, self.weights = tuple(models), tuple(weights)
        self.center, self.mean = center, mean

    def matches(self, center: State, models: Sequence, weights: Sequence[float]) -> bool:
        return (center is self.center and len(models) == len(self.models)
                and all(a is b for a, b in zip(models, self.models))
                and tuple(weights) == self.weights)


def norms_and_sum(models: Sequence[State], center: State, keys: Sequence[str],
                  weights: Sequence[float] | None = None, out: State | None = None
                  ) -> tuple[list[float], State | None]:
    """(||model - center|| over `keys` for each model, in float64: NaN or Inf where a tensor
    holds one or a block's float32 norm overflows; with `weights`, sum_i weights_i *
    models_i - center as `weighted_sum_minus` computes it), in one pass over the models: a
    block of each model is read once for both, while the block of `center` and of the sum
    stay in cache. The difference of one block is the only temporary."""
    if not models:
        return [], None
    sizes = tuple(center[k].numel() for k in keys)
    ref = flat(center, keys)
    flats = [flat(m, keys) for m in models]
    acc = None
    if weights is not None:
        out = _buffer(out, center, keys)
        acc = flat(out, keys)
    blocks = plan(sizes)
    scratch = torch.empty(max((sum(b - a for _, a, b in block) for block in blocks), default=0),
                          dtype=torch.float64 if any(center[k].dtype == torch.float64
                                                     for k in keys) else torch.float32)
    found: list[list[torch.Tensor]] = [[] for _ in models]
    for block in blocks:
        ref_block = pieces(ref, block, sizes)
        parts, fill = [], 0
        for _, start, stop in block:
            parts.append(scratch[fill:fill + stop - start])
            fill += stop - start
        acc_block = None
        if acc is not None:
            acc_block = pieces(acc, block, sizes)
            torch._foreach_zero_(acc_block)
        for w_i, out_i, model in zip(weights or [None] * len(models), found, flats):
            model_block = pieces(model, block, sizes)
            for x, y, diff in zip(model_block, ref_block, parts):
                torch.sub(x, y, out=diff)
            diffs = scratch[:fill]
            out_i.append(torch.dot(diffs, diffs))  # ||w_i - phi||^2 on the block
            if acc_block is not None:
                torch._foreach_add_(acc_block, model_block, alpha=w_i)
        if acc_block is not None:
            torch._foreach_sub_(acc_block, ref_block)
    norms = [math.sqrt(float(torch.stack(n).double().sum())) for n in found]
    return norms, (None if acc is None else {k: out[k] for k in keys})


def _buffer(out: State | None, like: State, keys: Sequence[str]) -> State:
    """`out` when it fits `like` (keys, shapes, dtypes, contiguous), else new tensors."""
    if out is None or any(k not in out or out[k].shape != like[k].shape
                          or out[k].dtype != like[k].dtype or not out[k].is_contiguous()
                          for k in keys):
        return {k: torch.empty_like(like[k], memory_format=torch.contiguous_format)
                for k in keys}
    return out


def weighted_sum_minus(models: Sequence[State], weights: Sequence[float], minus: State,
                       keys: Sequence[str], out: State | None = None,
                       minus_scale: float = 1.0) -> State:
    """sum_i weights_i * models_i[k] - minus_scale * minus[k] for each of `keys`, into `out`
    (reused when given: same keys, shapes and dtypes) or new tensors; element by element the
    same operations, in the same order, as zeros + one `add_(alpha=w_i)` per model, then
    `sub_`. A `ScaledUpdate` around `minus` is summed as its model and `minus`, reweighted."""
    out = _buffer(out, minus, keys)
    raw, weights = list(models), list(weights)
    for i, model in enumerate(raw):  # w * (c + s (m - c)) = s w * m + (1 - s) w * c
        if isinstance(model, ScaledUpdate) and model.center is minus:
            w, scale = weights[i], model.scale
            raw[i], weights[i] = model.model, w * scale
            minus_scale -= w * (1.0 - scale)
    sizes = tuple(minus[k].numel() for k in keys)
    acc = flat(out, keys)
    ref = flat(minus, keys)
    flats = [flat(m, keys) for m in raw]
    for block in plan(sizes):
        acc_block = pieces(acc, block, sizes)
        torch._foreach_zero_(acc_block)
        for w, model in zip(weights, flats):
            torch._foreach_add_(acc_block, pieces(model, block, sizes), alpha=w)
        if minus_scale == 1.0:
            torch._foreach_sub_(acc_block, pieces(ref, block, sizes))
        elif minus_scale != 0.0:
            torch._foreach_add_(acc_block, pieces(ref, block, sizes), alpha=-minus_scale)
    return {k: out[k] for k in keys}
