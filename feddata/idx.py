"""IDX files, the MNIST format: Fashion-MNIST as Zalando publishes it and as Debian's package
`dataset-fashion-mnist` installs it (`/usr/share/datasets/fashion-mnist/`), and NIST's EMNIST.

An IDX file is two zero bytes, a type byte (0x08: unsigned bytes, the only type these datasets
use), the number of dimensions, each dimension as a big-endian 32-bit count, then the values, row
by row. A file is gzipped when its first two bytes say so (1f 8b), whatever its name.

A folder of IDX files holds each split as two files, `<prefix>-images-idx3-ubyte` and
`<prefix>-labels-idx1-ubyte` (either may end in `.gz`), with the prefixes `train` and `t10k`
(the test split). Every file is read bounded and checked before its values are used: a regular
file (a link is refused, unless the caller's own rule allows it), the magic number, the
dimensions a split needs, exactly as many bytes as the header declares (a truncated file or one
with bytes past its end is refused), as many images as labels, the dataset's image size, and
labels in its classes. Each refusal is an `IdxRefused` naming the file and the fix
(docs/data.md#fashion-mnist).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fileio.reading import open_regular

# The largest array an IDX file may declare (EMNIST ByClass's training images are 547 MB).
IDX_MAX_VALUES = 2**30
UNSIGNED_BYTE = 0x08
SPLIT_PREFIXES = {"train": "train", "test": "t10k"}  # split -> file prefix
IMAGES, LABELS = "images-idx3-ubyte", "labels-idx1-ubyte"


class IdxRefused(ValueError):
    """An IDX file or folder that cannot be read as a dataset: the message names the file and
    the fix."""


def _read_exactly(f: BinaryIO, n: int, path: Path, what: str) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise IdxRefused(f"{path} ends after {len(data)} of the {n} bytes of its {what}: the "
                         "file is truncated; download it again")
    return data


def read_idx(f: BinaryIO, path: Path, ndim: int) -> np.ndarray:
    """The unsigned-byte array of `ndim` dimensions in the IDX file open as `f` (named `path` in
    messages), gzipped or not; IdxRefused for anything else."""
    head = f.read(2)
    f.seek(0)
    stream: BinaryIO = gzip.GzipFile(fileobj=f, mode="rb") if head == b"\x1f\x8b" else f
    try:
        zero, kind, dims = struct.unpack(">HBB", _read_exactly(stream, 4, path, "magic number"))
        if zero != 0 or kind != UNSIGNED_BYTE:
            raise IdxRefused(
                f"{path} is not an IDX file of unsigned bytes (its magic number is "
                f"0x{zero:04x}{kind:02x}{dims:02x}, not 0x0000080{ndim}): give the "
                "'-ubyte' file as published (gzipped or not)")
        if dims != ndim:
            raise IdxRefused(
                f"{path} holds a {dims}-dimensional array, and "
                + ("images are 3-dimensional (count, height, width)" if ndim == 3
                   else "labels are 1-dimensional (count)")
                + ": the images and labels files may have been swapped")
        shape = struct.unpack(">" + "I" * dims, _read_exactly(stream, 4 * dims, path,
                                                              "dimensions"))
        size = int(np.prod(shape, dtype=np.int64))
        if size > IDX_MAX_VALUES:
            raise IdxRefused(f"{path} declares {'x'.join(map(str, shape))} = {size:,} values, "
                             f"more than the {IDX_MAX_VALUES:,} an IDX file of these datasets "
                             "holds: it is not one of them")
        data = _read_exactly(stream, size, path, f"{'x'.join(map(str, shape))} values")
        if stream.read(1):
            raise IdxRefused(f"{path} holds more bytes than the {'x'.join(map(str, shape))} "
                             "values its header declares: it is damaged or not this dataset's "
                             "file; download it again")
    except (OSError, EOFError, zlib.error) as err:  # gzip: a bad header, CRC, a cut stream
        raise IdxRefused(f"{path} is not a readable gzip file ({err or type(err).__name__}): "
                         "it is damaged; download it again") from None
    return np.frombuffer(bytearray(data), dtype=np.uint8).reshape(shape)  # (writable)


def idx_file(folder: Path, prefix: str, what: str) -> Path | None:
    """`<prefix>-<what>` or the same name with `.gz` in `folder`; None when neither is there;
    IdxRefused when both are (which one is meant?)."""
    found = [folder / f"{prefix}-{what}{suffix}" for suffix in ("", ".gz")]
    found = [p for p in found if os.path.lexists(p)]
    if len(found) > 1:
        raise IdxRefused(f"{folder} holds both {found[0].name} and {found[1].name}: keep one")
    return found[0] if found else None


def is_idx_folder(folder: Path) -> bool:
    """True when `folder` holds any of the IDX files of a split (the layout's marker)."""
    return any(idx_file(folder, prefix, what) is not None
               for prefix in SPLIT_PREFIXES.values() for what in (IMAGES, LABELS))


def idx_splits(folder: Path) -> list[str]:
    """The splits whose images file is in `folder` ('train', 'test'), in that order."""
    return [s for s, prefix in SPLIT_PREFIXES.items() if idx_file(folder, prefix, IMAGES)]


def read_idx_split(folder: Path, split: str, *, shape: tuple[int, int], num_classes: int,
                   dataset: str, opener: Callable[[Path], BinaryIO] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N, H, W], labels int64 [N]) of `split` in the IDX folder `folder`, each
    file opened with `opener` (default: a regular file, no link followed), checked against the
    dataset's image `shape` (H, W) and its `num_classes`; IdxRefused naming the file otherwise."""
    opener = opener or (lambda p: open_regular(p))
    prefix = SPLIT_PREFIXES[split]
    arrays = []
    for what, ndim in ((IMAGES, 3), (LABELS, 1)):
        path = idx_file(folder, prefix, what)
        if path is None:
            raise IdxRefused(f"{folder} has no {prefix}-{what}[.gz]: the {split} split of an "
                             f"IDX folder is {prefix}-{IMAGES}[.gz] and {prefix}-{LABELS}[.gz]")
        try:
            with opener(path) as f:
                arrays.append((path, read_idx(f, path, ndim)))
        except IdxRefused:
            raise
        except OSError as err:  # fileio's UnusableFile (a link, a pipe), a permission
            raise IdxRefused(f"{path} cannot be read: {err.strerror or err}") from None
    (image_path, images), (label_path, labels) = arrays
    if len(images) != len(labels):
        raise IdxRefused(f"{image_path} holds {len(images):,} images and {label_path} "
                         f"{len(labels):,} labels: they are not one split's pair of files")
    if images.shape[1:] != tuple(shape):
        raise IdxRefused(f"{image_path} holds {images.shape[1]}x{images.shape[2]} images, and "
                         f"dataset '{dataset}' takes {shape[0]}x{shape[1]}: give its own files")
    bad = np.flatnonzero(labels >= num_classes)
    if len(bad):
        raise IdxRefused(f"{label_path}: example {bad[0]} has label {labels[bad[0]]}, outside "
                         f"dataset '{dataset}''s {num_classes} classes [0, {num_classes - 1}]: "
                         "give the dataset's own labels file")
    return images, labels.astype(np.int64)
