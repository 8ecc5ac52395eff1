"""Models (plain PyTorch, no torchvision); each names its classifier parameters for GC."""

from __future__ import annotations

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

import torch
from torch import nn

from .cnn import CNN
from .initialization import INITS, initialize_
from .leaf import CelebaCNN, CharLSTM, FemnistCNN
from .mlp import MLP
from .resnet import ResNet18GN
from .vgg import VGG11, VGG11Torchvision

MODELS = ("mlp", "mlp-gcfed", "cnn", "resnet18", "vgg11", "vgg11-gcfed", "femnist-cnn",
          "celeba-cnn", "char-lstm")
IMAGE_MODELS = MODELS[:-1]  # char-lstm takes character indices


def build_model(
    name: str, in_shape: tuple[int, ...], num_classes: int, gn_groups: int = 2,
    seed: int | None = None, init: str = "default",
) -> nn.Module:
    """Build `name` for inputs of shape `in_shape` (C, H, W) and `num_classes` outputs, its
    weights initialised by rule `init` (models/initialization.py).

    With `seed`, the initial weights are the same in every process.
    """
    if seed is not None:
        torch.manual_seed(seed)
    return initialize_(_build(name, in_shape, num_classes, gn_groups), init)


def _build(name: str, in_shape: tuple[int, ...], num_classes: int, gn_groups: int) -> nn.Module:
    if name == "mlp":
        return MLP(in_shape, num_classes)
    if name == "mlp-gcfed":
        return MLP(in_shape, num_classes, hidden=(512, 256))
    if name == "cnn":
        return CNN(in_shape, num_classes)
    if name == "resnet18":
        return ResNet18GN(in_shape, num_classes, gn_groups)
    if name == "vgg11":
        return VGG11(in_shape, num_classes)
    if name == "vgg11-gcfed":
        return VGG11Torchvision(in_shape, num_classes)
    if name == "femnist-cnn":
        return FemnistCNN(in_shape, num_classes)
    if name == "celeba-cnn":
        return CelebaCNN(in_shape, num_classes, gn_groups)
    if name == "char-lstm":
        return CharLSTM(in_shape, num_classes)
    raise ValueError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")


__all__ = ["CNN", "CelebaCNN", "CharLSTM", "FemnistCNN", "IMAGE_MODELS", "INITS", "MLP", "MODELS",
           "ResNet18GN", "VGG11", "VGG11Torchvision", "build_model", "initialize_"]
