"""Gradient centralization P (docs/algorithms.md#gradient-centralization) and the local/global GC
layer sets (docs/algorithms.md#gc-layer-sets).

`centralize_` is the one implementation of P, used by the client on gradients (local GC,
GC-Fed Def. 1) and by the server on the aggregated update (global GC, GC-Fed Def. 2).
"""

from __future__ import annotations


import torch
from torch import nn


def centralize_(g: torch.Tensor, vectors: str = "center") -> torch.Tensor:
    """In place: P(G) = G - mean(G over every dim but 0), per output channel (GC-Fed eq. 1-3).

    1-D tensors (biases, norm scales): `vectors="center"` subtracts the mean of the whole vector
    (GC-Fed's reference code), `"skip"` leaves them alone (original GC paper). Scalars are left
    alone.
    """
    if g.dim() >= 2:
        g.sub_(g.mean(dim=tuple(range(1, g.dim())), keepdim=True))
    elif g.dim() == 1 and vectors == "center":
        g.sub_(g.mean())
    return g


def borderline_index(model: nn.Module, borderline: float | str) -> int:
    """Number of leading parameter tensors (registration order) that are 'features'.

    `"classifier"`: every parameter before the model's classifier (`model.classifier_names`,
    which must be the trailing parameters). A fraction gc_lambda: floor(gc_lambda * L), as
    GC-Fed counts `named_parameters()` (weights and biases separately).
    """
    names = [n for n, _ in model.named_parameters()]
    if borderline == "classifier":
        classifier = list(model.classifier_names)
        if names[len(names) - len(classifier):] != classifier:
            raise ValueError(
                f"{type(model).__name__}.classifier_names must be its last parameters "
                f"(got {classifier}, parameters end with {names[-len(classifier):]})."
            )
        return len(names) - len(classifier)
    return int(float(borderline) * len(names))


def gc_layer_names(
    model: nn.Module, mode: str, borderline: float | str
) -> list[str]:
    """Names of the parameters that get GC under `mode`.

    Local GC modes: 'none', 'all', 'features' (before the borderline).
    Global GC modes: 'none', 'all', 'classifier' (from the borderline on).
    """
    names = [n for n, _ in model.named_parameters()]
    if mode == "none":
        return []
    if mode == "all":
        return names
    cut = borderline_index(model, borderline)
    if mode == "features":
        return names[:cut]
    if mode == "classifier":
        return names[cut:]
    raise ValueError(f"unknown GC mode '{mode}'")
