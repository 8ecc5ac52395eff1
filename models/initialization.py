"""Initial weights of the global model (run config `init`), on top of the layers' own defaults.

* `default`: PyTorch's default initialisation of each layer (what `build_model` gives).
* `kaiming`: GC-Fed's `init_weights(model, "kaiming", 1.0)` (its CNN and MLP): every module whose
  class name contains "Conv" or "Linear" gets Kaiming-normal weights (fan-in, gain sqrt(2):
  std = sqrt(2 / fan_in)) and zero biases; BatchNorm2d / InstanceNorm2d weights ~ N(1, 1) with
  zero biases (none of this project's models has one); everything else keeps its default.
* `torchvision`: what torchvision's VGG and ResNet constructors do (GC-Fed's VGG-11 and
  ResNet-18): Conv2d weights Kaiming-normal (fan-out, ReLU gain: std = sqrt(2 / fan_out)),
  Linear weights ~ N(0, 0.01), biases 0, GroupNorm / BatchNorm scales 1 and shifts 0; the layers
  a model lists in `torchvision_default_layers` (those GC-Fed's code replaces after torchvision
  built the network: ResNet-18's stem and classifier, VGG-11's last linear layer) keep PyTorch's
  default.

The draws use torch's global generator, right after the model is built (`build_model(seed=...)`
seeds it), so the initial model is the same in every process.
"""

from __future__ import annotations

import torch
from torch import nn

INITS = ("default", "kaiming", "torchvision")


@torch.no_grad()
def initialize_(model: nn.Module, init: str) -> nn.Module:
    """Re-initialise `model` in place by rule `init` (see the module's docstring); returns it."""
    if init not in INITS:
        raise ValueError(f"unknown init '{init}'; choose one of {', '.join(INITS)}")
    if init == "kaiming":
        for module in model.modules():
            kind = type(module).__name__
            if ("Conv" in kind or "Linear" in kind) and getattr(module, "weight", None) is not None:
                nn.init.kaiming_normal_(module.weight, a=0, mode="fan_in")
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif kind in ("BatchNorm2d", "InstanceNorm2d") and module.weight is not None:
                nn.init.normal_(module.weight, 1.0, 1.0)
                nn.init.zeros_(module.bias)
    elif init == "torchvision":
        keep = set(getattr(model, "torchvision_default_layers", ()))
        for name, module in model.named_modules():
            if name in keep:
                continue
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, 0.01)
            elif isinstance(module, (nn.GroupNorm, nn.BatchNorm2d)):
                nn.init.ones_(module.weight)
            else:
                continue
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model
