"""Gradient centralization P (docs/algorithms.md#gradient-centralization) and the local/global GC
layer sets (docs/algorithms.md#gc-layer-sets).

`centralize_` is the one implementation of P, used by the client on gradients (local GC,
GC-Fed Def. 1) and by the server on the aggregated update (global GC, GC-Fed Def. 2).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import nn

# Floating-point arrays of a state dict that are statistics, not parameters (BatchNorm's).
STATISTICS = (".running_mean", ".running_var")


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


def find_classifier(named: Sequence[tuple[str, torch.Tensor]],
                    given: str | Sequence[str] | None = None) -> tuple[str, ...]:
    """The classifier's parameter names among `named` (a model's parameters in order).

    `given`: parameter names or module names (a module stands for every parameter under it,
    e.g. 'classifier' for 'classifier.0.weight', ...); they must be the last parameters.
    None: the last weight/bias pair, i.e. the last parameter is `<m>.bias` right after
    `<m>.weight` of 2 or more dimensions (or the last is such a weight, without bias). Any
    other ending (a norm layer's 1-D weight, a buffer-like name) is refused as ambiguous.
    """
    names = [name for name, _ in named]
    if given is not None:
        wanted = [given] if isinstance(given, str) else list(given)
        under = lambda n, w: n == w or n.startswith(w + ".")  # noqa: E731
        unknown = [w for w in wanted if not any(under(n, w) for n in names)]
        if unknown or not wanted:
            raise ValueError(f"classifier {wanted} names no parameter of the model (its last "
                             f"parameters: {names[-4:]})")
        chosen = tuple(n for n in names if any(under(n, w) for w in wanted))
        if names[len(names) - len(chosen):] != list(chosen):
            raise ValueError(f"the classifier {list(chosen)} must be the model's last "
                             f"parameters, which are {names[-len(chosen):]}")
        return chosen
    shapes = dict(named)
    last = names[-1] if names else ""
    module, _, leaf = last.rpartition(".")
    weight = f"{module}.weight" if module else "weight"
    if leaf == "bias" and len(names) >= 2 and names[-2] == weight and shapes[weight].dim() >= 2:
        return (weight, last)
    if leaf == "weight" and shapes[last].dim() >= 2:
        return (last,)
    raise ValueError(
        f"cannot tell the classifier from the parameters' names: the last ones are {names[-2:]}"
        ", not a weight of 2 or more dimensions and its bias. Name it: classifier='<module>' "
        "(e.g. 'fc' or 'head') or classifier=['<parameter>', ...]")


class ModelLayout:
    """What the GC layer sets and the server rules read of a model, without the module: its
    parameters in registration order (`named_parameters()`) and its classifier's names
    (`classifier_names`: the given names, else `find_classifier`'s rule, found when first
    read; ValueError when ambiguous).

    `from_arrays(state)`: from a state dict alone (a Flower ArrayRecord's), where the
    parameters are its floating-point arrays other than BatchNorm statistics (names ending in
    `.running_mean` / `.running_var`): a model's state dict lists its parameters in their
    registration order, each module's buffers after its parameters.
    """

    def __init__(self, named: Sequence[tuple[str, torch.Tensor]],
                 classifier: str | Sequence[str] | None = None) -> None:
        self._named = list(named)
        self._given = classifier
        self._classifier: tuple[str, ...] | None = None

    @classmethod
    def from_arrays(cls, state: Mapping[str, torch.Tensor],
                    classifier: str | Sequence[str] | None = None) -> ModelLayout:
        return cls([(k, v) for k, v in state.items()
                    if v.is_floating_point() and not k.endswith(STATISTICS)], classifier)

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self._named)

    def parameters(self) -> Iterator[torch.Tensor]:
        return (p for _, p in self._named)

    @property
    def classifier_names(self) -> tuple[str, ...]:
        if self._classifier is None:
            self._classifier = find_classifier(self._named, self._given)
        return self._classifier
