"""The server state must stay finite: after every server update the round loop checks theta and
the rule's state (`ServerRule.state_to_check`: m, phi, SCAFFOLD's c, ...) for NaN and Inf, and
stops the run when any holds one (docs/results.md#failures-and-bad-updates).

Screening keeps non-finite replies out of the update, so a non-finite state comes from the
server's own arithmetic overflowing (float32 ends at 3.4e38): a huge server step (`eta`), DP noise
(`dp-noise-multiplier` x `dp-clipping-norm`), finite but huge updates let through. Going on would
broadcast the broken model, skip every later round (each reply non-finite, dropped) and end the
run "complete" with a broken final model; stopping keeps the results and the last checkpoint,
which are finite.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch


class ServerStateNotFinite(RuntimeError):
    """theta or another part of the server state holds NaN or Inf: the run stops."""


def _tensors(value: Any, name: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(name, float tensor) pairs of a nested state: tensors, NumPy arrays, dicts, lists."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield name, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _tensors(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{name}[{i}]")


def nonfinite_parts(state: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each top-level entry of `state` holding NaN or Inf -> the names of its tensors that do."""
    found: dict[str, list[str]] = {}
    for part, value in state.items():
        named = list(_tensors(value))
        # one read of each tensor: a NaN or Inf makes the norm non-finite; only a tensor whose
        # norm is not (NaN, Inf, or finite values whose norm overflows) is looked at closely
        real = [t for _, t in named if t.is_floating_point()]
        finite = iter(torch.isfinite(torch.stack(torch._foreach_norm(real))).tolist()
                      if real else [])
        bad = [name for name, t in named
               if not (t.is_floating_point() and next(finite))
               and not bool(torch.isfinite(t).all())]
        if bad:
            found[str(part)] = bad
    return found


def likely_causes(*, eta: float | None = None, dp_noise_multiplier: float = 0.0,
                  dp_clipping_norm: float = 0.0) -> str:
    """What to change, from the rule's settings (`eta`: its server step, None where it has
    none; the DP noise of its robust aggregation)."""
    causes = []
    z, c = dp_noise_multiplier, dp_clipping_norm
    if z and c:
        causes.append(f"the DP noise (std dp-noise-multiplier x dp-clipping-norm / replies = "
                      f"{z:g} x {c:g} / replies): lower them")
    if eta is not None:
        causes.append(f"the server step eta = {eta!r}: lower it")
    causes.append("huge client updates let through: lower lr, keep update-norm-ratio on "
                  "(or set update-clip-ratio)")
    return "; ".join(causes)


def check_server_state(state: Mapping[str, Any], when: str, **causes: Any) -> None:
    """ServerStateNotFinite naming `when` ('after the update of round 3'), the state, its
    tensors and what to change, when any tensor of `state` (name -> tensor, or nested dicts /
    lists of them) holds NaN or Inf; `causes`: `likely_causes`' keywords (the rule's settings)."""
    found = nonfinite_parts(state)
    if not found:
        return
    def listed(names: list[str]) -> str:
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        return ", ".join(names[:3]) + more

    what = "; ".join(f"'{part}' ({listed(names)})" for part, names in found.items())
    raise ServerStateNotFinite(
        f"the server state is not finite {when}: NaN or Inf in {what}. The run stops here (going "
        "on would train from a broken model); results.json keeps the rounds before, no final "
        "model is written and the last checkpoint stays as it was. Likely cause: "
        f"{likely_causes(**causes)}; then start afresh (a resumed run keeps these values).")
