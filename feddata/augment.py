"""Training-time input pipeline as batched tensor operations on the training device.

For a mini-batch of stored values (uint8 images, already on the device):

1. random rotation by an angle ~ U(-deg, deg) per image (FedACG's code: RandomRotation(10)),
   nearest pixel, black outside the image;
2. random crop with zero padding (torchvision's RandomCrop(size, padding)): pad by `padding`
   pixels of black, cut a window of the original size at a random offset per image;
3. horizontal flip of each image with probability 1/2;
4. per-channel normalization (the same as at test time).

Every random number comes from the caller's `torch.Generator` (on the CPU, so a seed gives the
same batch on any device); no randomness at test time, where inputs are only normalized (and
evaluation tensors are normalized once when they are loaded). Text (Shakespeare) is passed through.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .decode import normalize
from .specs import DatasetSpec

AUGMENTATIONS = ("auto", "none", "crop-flip")


def rotate(x: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
    """Rotate each image of x [B, C, H, W] about its centre by `degrees` [B]; zeros outside."""
    rad = degrees.to(x.device, torch.float32) * (math.pi / 180)
    cos, sin = torch.cos(rad), torch.sin(rad)
    zero = torch.zeros_like(cos)
    theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def random_crop(x: torch.Tensor, padding: int, offsets: torch.Tensor) -> torch.Tensor:
    """Zero-pad x [B, C, H, W] by `padding` and cut the H x W window at `offsets` [B, 2]
    (dy, dx)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    offsets = offsets.to(x.device)
    # every window as a view [B, C, 2p+1, 2p+1, H, W]; one gather copies each image's own
    windows = padded.unfold(2, h, 1).unfold(3, w, 1)
    return windows[torch.arange(b, device=x.device), :, offsets[:, 0], offsets[:, 1]]


def hflip(x: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror the images of x [B, C, H, W] where `flip` [B] is true."""
    return torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)


class TrainTransform:
    """Stored batch -> augmented, normalized model input (a callable for the local update)."""

    def __init__(self, spec: DatasetSpec, augment: str = "auto", padding: int = 4,
                 rotation: float = 0.0):
        if augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be one of {AUGMENTATIONS}, got '{augment}'")
        self.spec = spec
        mode = spec.augment if augment == "auto" else augment
        self.crop_flip = mode == "crop-flip" and spec.kind != "chars"
        self.padding = padding
        self.rotation = rotation if self.crop_flip else 0.0

    @property
    def augments(self) -> bool:
        return self.crop_flip

    def prepare(self, x: torch.Tensor, max_bytes: int = 256 * 2**20
                ) -> tuple[torch.Tensor, TrainTransform | None]:
        """(the training inputs, the transform left for each mini-batch, None for none).

        Without augmentation the transform is the normalization alone, elementwise: then the
        whole partition `x` is normalized here, once per local update, unless its float copy
        would take more than `max_bytes`. The batches hold the same values as when normalized
        one by one, for one pass over the data instead of one per epoch and one set of
        parallel kernels instead of one per step (on a CPU shared with other work each is a
        wait for a descheduled thread: the plain loop of `benchmarks/` pays none).
        """
        if self.crop_flip:
            return x, self
        if self.spec.kind == "chars":
            return x, None
        if x.numel() * 4 > max_bytes:
            return x, self
        return normalize(x, self.spec), None

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.spec.kind == "chars":
            return x
        if not self.crop_flip:
            return normalize(x, self.spec)
        b, _, h, w = x.shape
        out = x.float()
        if self.rotation > 0:
            angles = (torch.rand(b, generator=generator) * 2 - 1) * self.rotation
            out = rotate(out, angles)
        if self.padding > 0:
            offsets = torch.randint(0, 2 * self.padding + 1, (b, 2), generator=generator)
            out = random_crop(out, self.padding, offsets)
        out = hflip(out, torch.rand(b, generator=generator) < 0.5)
        return normalize(out, self.spec)
