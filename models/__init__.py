"""Models (plain PyTorch, no torchvision); each names its classifier parameters for GC."""

from __future__ import annotations

import torch
from torch import nn

from .cnn import CNN
from .leaf import CelebaCNN, CharLSTM, FemnistCNN
from .mlp import MLP
from .resnet import ResNet18GN
from .vgg import VGG11

MODELS = ("mlp", "cnn", "resnet18", "vgg11", "femnist-cnn", "celeba-cnn", "char-lstm")
IMAGE_MODELS = MODELS[:-1]  # char-lstm takes character indices


def build_model(
    name: str, in_shape: tuple[int, ...], num_classes: int, gn_groups: int = 2,
    seed: int | None = None
) -> nn.Module:
    """Build `name` for inputs of shape `in_shape` (C, H, W) and `num_classes` outputs.

    With `seed`, the initial weights are the same in every process.
    """
    if seed is not None:
        torch.manual_seed(seed)
    if name == "mlp":
        return MLP(in_shape, num_classes)
    if name == "cnn":
        return CNN(in_shape, num_classes)
    if name == "resnet18":
        return ResNet18GN(in_shape, num_classes, gn_groups)
    if name == "vgg11":
        return VGG11(in_shape, num_classes)
    if name == "femnist-cnn":
        return FemnistCNN(in_shape, num_classes)
    if name == "celeba-cnn":
        return CelebaCNN(in_shape, num_classes, gn_groups)
    if name == "char-lstm":
        return CharLSTM(in_shape, num_classes)
    raise ValueError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")


__all__ = ["CNN", "CelebaCNN", "CharLSTM", "FemnistCNN", "IMAGE_MODELS", "MLP", "MODELS",
           "ResNet18GN", "VGG11", "build_model"]
