"""A `datasets.Dataset` (hub format) -> tensors: stored values for training, normalized for
evaluation.

* images (`Image()` features: PIL images or `{"bytes", "path"}` as the hub stores them) are decoded
  once, converted to the spec's mode (L or RGB; Tiny-ImageNet has a few grey images), resized to
  the spec's size where they differ (CelebA 178x218 -> 84x84, as LEAF), and kept as uint8
  [N, C, H, W]: a quarter of the memory of floats; `normalize` or the training transform turn a
  batch into floats on the training device;
* numbers (`Array2D`, digits) are kept as float32 [N, C, H, W];
* text (Shakespeare) becomes LEAF's character indices, uint8 [N, 80]; the model embeds them;
* labels become int64 (ClassLabel ints, booleans such as CelebA's `Smiling`, or characters).
"""

from __future__ import annotations

import numpy as np
import torch

from .specs import LEAF_CHARS, DatasetSpec

_CHAR_TABLE = np.full(256, LEAF_CHARS.index(" "), dtype=np.uint8)
for _i, _c in enumerate(LEAF_CHARS):
    _CHAR_TABLE[ord(_c)] = _i


def char_indices(texts: list[str], length: int) -> np.ndarray:
    """LEAF character indices [len(texts), length]; texts are cut or space-padded to `length`."""
    if not texts:
        return np.zeros((0, length), dtype=np.uint8)
    joined = "".join(t[:length].ljust(length) for t in texts)
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    codes = np.where(codes < 256, codes, ord(" "))
    return _CHAR_TABLE[codes].reshape(len(texts), length)


def _image_array(img, mode: str, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    if isinstance(img, dict):  # undecoded {"bytes", "path"}
        import io

        img = Image.open(io.BytesIO(img["bytes"])) if img.get("bytes") else Image.open(img["path"])
    if img.mode != mode:
        img = img.convert(mode)
    if img.size != size:  # PIL sizes are (width, height)
        img = img.resize(size, Image.BILINEAR)
    arr = np.asarray(img, dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def input_tensor(ds, spec: DatasetSpec) -> torch.Tensor:
    """The stored input values of every example: uint8 images, float32 arrays, uint8 characters."""
    n = len(ds)
    if spec.kind == "chars":
        return torch.from_numpy(char_indices(ds[spec.image], spec.in_shape[0]))
    if spec.kind == "array":
        arrays = ds.with_format("numpy")[spec.image] if n else np.zeros((0,) + spec.in_shape[1:])
        return torch.from_numpy(np.asarray(arrays, dtype=np.float32).reshape(n, *spec.in_shape))
    c, h, w = spec.in_shape
    mode = "L" if c == 1 else "RGB"
    out = np.empty((n, c, h, w), dtype=np.uint8)
    for i, img in enumerate(ds[spec.image] if n else []):
        out[i] = _image_array(img, mode, (w, h))
    return torch.from_numpy(out)


def label_tensor(ds, spec: DatasetSpec) -> torch.Tensor:
    values = ds[spec.label] if len(ds) else []
    if spec.kind == "chars":
        return torch.from_numpy(char_indices(values, 1)[:, 0].astype(np.int64))
    return torch.from_numpy(np.asarray(values).astype(np.int64).reshape(len(ds)))


def normalize(x: torch.Tensor, spec: DatasetSpec) -> torch.Tensor:
    """Stored values -> model input: (x / scale - mean) / std per channel; text is left as it is."""
    if spec.kind == "chars":
        return x
    shape = (1, -1) + (1,) * (x.dim() - 2)
    mean = torch.tensor(spec.mean, dtype=torch.float32, device=x.device).view(shape)
    std = torch.tensor(spec.std, dtype=torch.float32, device=x.device).view(shape)
    return (x.float() / spec.scale - mean) / std
