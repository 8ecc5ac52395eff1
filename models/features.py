"""The features a loss term reads besides the logits (docs/baselines.md#moon, #feddecorr): the
input of one linear layer of the model, taken from the same forward pass as the logits.

* `penultimate`: the input of the model's last linear layer (the one `classifier_names` ends
  with): the pooled features of ResNet-18, the 512-d hidden layer of the CNN, ...
* `conv-map`: for a model that names a `conv_map_layer` (the CNN), the input of that layer,
  i.e. the flattened convolutional map (what GC-Fed's FedDecorr decorrelates); the penultimate
  features for every other model.

`FeatureTap` keeps them from every forward pass of the trained model (a forward pre-hook, set
up in a part's `begin` and removed in its `end`); `forward_with_features` runs a model once and
returns its logits and features (for frozen copies such as the teacher, under `no_grad`).
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = ("penultimate", "conv-map")


def feature_layer(model: nn.Module, where: str = "penultimate") -> nn.Linear:
    """The linear layer whose input is the features `where` of `model`."""
    if where not in FEATURES:
        raise ValueError(f"features '{where}': choose one of {', '.join(FEATURES)}")
    names = getattr(model, "classifier_names", ())
    if not names:
        raise ValueError(f"{type(model).__name__} names no classifier (classifier_names), so its "
                         "penultimate features are unknown")
    name = names[-1].rsplit(".", 1)[0]  # 'fc2.bias' -> 'fc2'
    if where == "conv-map":
        name = getattr(model, "conv_map_layer", name)
    layer = model.get_submodule(name)
    if not isinstance(layer, nn.Linear):
        raise ValueError(f"{type(model).__name__}.{name} is a {type(layer).__name__}, not the "
                         "linear layer whose input are the features")
    return layer


class FeatureTap:
    """The features `where` of the last forward pass of `model` (`.features`, with their graph)
    until `remove()`.

    A deep copy of the model made while the tap is on (e.g. the teacher) carries an inert copy
    of the hook that keeps nothing.
    """

    def __init__(self, model: nn.Module, where: str = "penultimate") -> None:
        self.features: torch.Tensor | None = None
        self._active = True
        self._handle = feature_layer(model, where).register_forward_pre_hook(self._keep)

    def _keep(self, module: nn.Module, args: tuple) -> None:
        if self._active:
            self.features = args[0]

    def remove(self) -> None:
        self._handle.remove()
        self._active, self.features = False, None

    def __deepcopy__(self, memo: dict) -> FeatureTap:
        inert = object.__new__(FeatureTap)
        inert.features, inert._active, inert._handle = None, False, None
        return inert


def forward_with_features(model: nn.Module, x: torch.Tensor,
                          where: str = "penultimate") -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, features `where`) of one forward pass of `model` on `x`."""
    tap = FeatureTap(model, where)
    try:
        logits = model(x)
        return logits, tap.features
    finally:
        tap.remove()
