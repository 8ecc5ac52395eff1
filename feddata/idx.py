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

Sizes before reads (docs/security.md#dataset-files-sizes-before-reads): both headers of a split
are read first and checked, in Python integers (no 64-bit product to overflow), against the
dataset named: its image size exactly, at most its published split's count of images
(`DatasetSpec.split_sizes`: Fashion-MNIST's 60,000 and 10,000), and as many labels as images.
Only then is a body read, and a gzipped one is decompressed as a stream bounded by the size its
header implies (the values, plus gzip's own 8 KiB read-ahead that sees whether more follows).
A 1 MB gzip that declares 256x256 images, a million of them or more labels than images costs
its header's bytes, not gigabytes.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fileio.reading import open_regular

from .specs import DATASET_BY_NAME

UNSIGNED_BYTE = 0x08
SPLIT_PREFIXES = {"train": "train", "test": "t10k"}  # split -> file prefix
IMAGES, LABELS = "images-idx3-ubyte", "labels-idx1-ubyte"
_GZIP_ERRORS = (OSError, EOFError, zlib.error)  # a bad gzip header, CRC, a cut stream


class IdxRefused(ValueError):
    """An IDX file or folder that cannot be read as a dataset: the message names the file and
    the fix."""


def _read_exactly(f: BinaryIO, n: int, path: Path, what: str) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise IdxRefused(f"{path} ends after {len(data)} of the {n} bytes of its {what}: the "
                         "file is truncated; download it again")
    return data


def _gzip_refused(path: Path, err: BaseException) -> IdxRefused:
    return IdxRefused(f"{path} is not a readable gzip file ({err or type(err).__name__}): it "
                      "is damaged; download it again")


class IdxFile:
    """An IDX file open as `f` (named `path` in messages), gzipped or not, with its header read
    and checked (`shape`: the dimensions it declares, Python ints); `values()` reads the body."""

    def __init__(self, f: BinaryIO, path: Path, ndim: int):
        self.path = path
        head = f.read(2)
        f.seek(0)
        self.stream: BinaryIO = (gzip.GzipFile(fileobj=f, mode="rb") if head == b"\x1f\x8b"
                                 else f)
        try:
            zero, kind, dims = struct.unpack(">HBB", _read_exactly(self.stream, 4, path,
                                                                   "magic number"))
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
            self.shape: tuple[int, ...] = struct.unpack(
                ">" + "I" * dims, _read_exactly(self.stream, 4 * dims, path, "dimensions"))
        except _GZIP_ERRORS as err:
            raise _gzip_refused(path, err) from None

    def values(self) -> np.ndarray:
        """The body: exactly the values the (checked) header declares, read or decompressed
        up to that size and no further; IdxRefused for a short body or bytes past it."""
        size = math.prod(self.shape)  # (a Python int: bounded by the caller's check)
        text = "x".join(map(str, self.shape))
        try:
            data = _read_exactly(self.stream, size, self.path, f"{text} values")
            if self.stream.read(1):
                raise IdxRefused(f"{self.path} holds more bytes than the {text} values its "
                                 "header declares: it is damaged or not this dataset's file; "
                                 "download it again")
        except _GZIP_ERRORS as err:
            raise _gzip_refused(self.path, err) from None
        return np.frombuffer(bytearray(data), dtype=np.uint8).reshape(self.shape)  # writable


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


def split_size(dataset: str, split: str) -> int:
    """The most images an IDX file of `split` may declare for `dataset`: its published split's
    size (`DatasetSpec.split_sizes`)."""
    sizes = dict(DATASET_BY_NAME[dataset].split_sizes)
    if split not in sizes:  # (a programming error: only datasets published as IDX files)
        raise ValueError(f"dataset '{dataset}' has no published size of split '{split}'")
    return sizes[split]


def read_idx_pair(image_path: Path, label_path: Path, split: str, dataset: str,
                  opener: Callable[[Path], BinaryIO] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N, H, W], labels int64 [N]) of the images and labels files of `split` of
    `dataset`, each opened with `opener` (default: a regular file, no link followed). Both
    headers are checked against the dataset before either body is read (module docstring):
    its image size, at most its split's size, as many labels as images; then the labels are
    checked to lie in its classes. IdxRefused naming the file otherwise."""
    spec = DATASET_BY_NAME[dataset]
    shape, limit, classes = tuple(spec.in_shape[1:]), split_size(dataset, split), spec.num_classes
    opener = opener or (lambda p: open_regular(p))
    with ExitStack() as stack:
        files = []
        for path, ndim in ((image_path, 3), (label_path, 1)):
            try:
                files.append(IdxFile(stack.enter_context(opener(path)), path, ndim))
            except IdxRefused:
                raise
            except OSError as err:  # fileio's UnusableFile (a link, a pipe), a permission
                raise IdxRefused(f"{path} cannot be read: {err.strerror or err}") from None
        images, labels = files
        count, *size = images.shape
        if tuple(size) != shape:
            raise IdxRefused(f"{image_path} holds {'x'.join(map(str, size))} images, and "
                             f"dataset '{dataset}' takes {shape[0]}x{shape[1]}: give its own "
                             "files")
        if count > limit:
            raise IdxRefused(f"{image_path} declares {count:,} images, more than the {limit:,} "
                             f"of dataset '{dataset}''s {split} split: it is not that "
                             "dataset's file; give its own files")
        if labels.shape[0] != count:
            raise IdxRefused(f"{image_path} holds {count:,} images and {label_path} "
                             f"{labels.shape[0]:,} labels: they are not one split's pair of "
                             "files")
        pixels, values = images.values(), labels.values()
    bad = np.flatnonzero(values >= classes)
    if len(bad):
        raise IdxRefused(f"{label_path}: example {bad[0]} has label {values[bad[0]]}, outside "
                         f"dataset '{dataset}''s {classes} classes [0, {classes - 1}]: "
                         "give the dataset's own labels file")
    return pixels, values.astype(np.int64)


def read_idx_split(folder: Path, split: str, dataset: str,
                   opener: Callable[[Path], BinaryIO] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N, H, W], labels int64 [N]) of `split` in the IDX folder `folder`, read
    by `read_idx_pair` against `dataset`'s spec; IdxRefused naming the file otherwise."""
    prefix = SPLIT_PREFIXES[split]
    paths = []
    for what in (IMAGES, LABELS):
        path = idx_file(folder, prefix, what)
        if path is None:
            raise IdxRefused(f"{folder} has no {prefix}-{what}[.gz]: the {split} split of an "
                             f"IDX folder is {prefix}-{IMAGES}[.gz] and {prefix}-{LABELS}[.gz]")
        paths.append(path)
    return read_idx_pair(*paths, split, dataset, opener)
