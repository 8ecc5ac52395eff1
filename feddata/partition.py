"""A client's prepared partition (`PreparedPartition`: what a node trains and evaluates on) and
the rule of its held-out share (`held_out_size`). Light: torch only, so that the disk cache, the
readers of a node's own data and the partition loaders all use it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PreparedPartition:
    """A client's train and held-out tensors and the shapes its model needs."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    in_shape: tuple[int, ...]
    num_classes: int


def held_out_size(n: int, val_fraction: float) -> int:
    """How many of a partition's n examples are held out (client-val-fraction); the client
    trains on the other n - held_out_size(n, val_fraction)."""
    val_n = int(round(n * val_fraction))
    return val_n if 0 < val_n < n else 0
