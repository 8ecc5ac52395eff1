"""A node's own data (docs/deployment.md#own-data): the folder its SuperNode's node config
`data-path` names, read whole, checked against the run's dataset (its label space and input
shape), with `client-val-fraction` of it held out for federated evaluation. No partitioner runs:
on a real device the node's examples are all it has.

Formats: what feddata reads as a local copy (the hub's parquet layout, a `save_to_disk` folder:
its `train` split, or its only split), and an image-folder tree as torchvision's `ImageFolder`,
`<label>/<image file>`, whose folder names are the label indices 0 .. classes-1 of the run's
dataset (`0/`, `1/`, ...).

    python -m feddata check <data-path> --dataset cifar10     # an operator, before joining
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from .sources import DataSourceError
from .specs import DatasetSpec

# files an image folder may hold besides images (skipped)
_IGNORED = {".ds_store", "thumbs.db", "desktop.ini"}


class OwnDataError(DataSourceError):
    """A node's own data cannot be used as configured: the message names the file and the fix."""


@dataclass(frozen=True)
class OwnData:
    """The node's examples as stored (uint8 images / float arrays) and their labels."""

    x: torch.Tensor
    y: torch.Tensor
    source: str  # 'image folder' or 'local copy'


def is_image_folder(folder: Path) -> bool:
    """A tree of class folders (`<label>/<files>`), not a local copy of a dataset."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return bool(entries) and all(p.is_dir() for p in entries) and not (
        (folder / "dataset_dict.json").exists() or (folder / "state.json").exists()
        or (folder / "data").is_dir() and any((folder / "data").glob("*.parquet")))


def read_own_data(path: str, spec: DatasetSpec, dataset: str, split: str = "train",
                  key: str = "data-path") -> OwnData:
    """Every example of the folder at `path`, checked: labels in [0, classes), inputs of the
    dataset's shape. OwnDataError naming the file and the fix otherwise. A local copy gives its
    `split` (or its only split); `key` names the setting in messages."""
    folder = Path(path).expanduser()
    if not folder.exists():
        where = ("its node config (--node-config \"data-path='/data/mine'\")" if key == "data-path"
                 else f"the run config ({key}='/data/test')")
        raise OwnDataError(f"{key} '{path}' does not exist: give the folder in {where}")
    if not folder.is_dir():
        raise OwnDataError(f"{key} '{path}' is a file, not a folder: give the folder that "
                           "holds the data")
    if not any(p for p in folder.iterdir() if not p.name.startswith(".")):
        raise OwnDataError(f"{key} '{path}' is empty: put the examples there "
                           f"({_formats(spec)})")
    if spec.kind == "image" and is_image_folder(folder):
        x, y = _image_folder(folder, spec, dataset)
        data = OwnData(x, y, "image folder")
    else:
        data = OwnData(*_local_copy(folder, spec, dataset, split), "local copy")
    if len(data.y) == 0:
        raise OwnDataError(f"{key} '{path}' holds no example: put the examples there "
                           f"({_formats(spec)})")
    bad = (data.y < 0) | (data.y >= spec.num_classes)
    if bad.any():
        first = int(bad.nonzero()[0, 0])
        raise OwnDataError(
            f"{key} '{path}': example {first} has label {int(data.y[first])}, outside "
            f"dataset '{dataset}''s {spec.num_classes} classes [0, {spec.num_classes - 1}]: "
            "relabel it, or declare the dataset the data belongs to")
    return data


def _formats(spec: DatasetSpec) -> str:
    folders = "an image folder <label>/<image>, " if spec.kind == "image" else ""
    return f"{folders}the hub's parquet layout or a save_to_disk folder"


def _image_folder(folder: Path, spec: DatasetSpec, dataset: str):
    from PIL import Image, UnidentifiedImageError

    c, h, w = spec.in_shape
    mode = "L" if c == 1 else "RGB"
    xs, ys = [], []
    for class_dir in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
        try:
            label = int(class_dir.name)
        except ValueError:
            raise OwnDataError(
                f"{class_dir}: an image folder's subfolders are the label indices of dataset "
                f"'{dataset}' (0 .. {spec.num_classes - 1}), not '{class_dir.name}': rename it "
                "to its label's index") from None
        if not 0 <= label < spec.num_classes:
            raise OwnDataError(
                f"{class_dir}: label {label} is outside dataset '{dataset}''s "
                f"{spec.num_classes} classes [0, {spec.num_classes - 1}]: remove or rename it")
        for file in sorted(class_dir.iterdir()):
            if file.name.startswith(".") or file.name.lower() in _IGNORED or file.is_dir():
                continue
            try:
                with Image.open(file) as img:
                    img.load()
                    bands, size = len(img.getbands()), img.size
                    if size != (w, h) or (bands not in (1, 3, 4) or (c == 1) != (bands == 1)):
                        raise OwnDataError(
                            f"{file}: a {size[0]}x{size[1]} image with {bands} channel(s), and "
                            f"dataset '{dataset}' takes {w}x{h} with {c}: convert it (or "
                            "declare the dataset the data belongs to)")
                    arr = torch.from_numpy(_array(img.convert(mode)))
            except (UnidentifiedImageError, OSError) as err:
                raise OwnDataError(f"{file}: not a readable image ({err}): remove it, or "
                                   "replace it with a PNG or JPEG") from None
            xs.append(arr)
            ys.append(label)
    if not xs:
        return torch.zeros((0, c, h, w), dtype=torch.uint8), torch.zeros(0, dtype=torch.int64)
    return torch.stack(xs), torch.tensor(ys, dtype=torch.int64)


def _array(img):
    import numpy as np

    arr = np.array(img, dtype=np.uint8)  # (a copy: writable)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1).copy()


def _local_copy(folder: Path, spec: DatasetSpec, dataset: str, want: str = "train"):
    import datasets

    from .decode import input_tensor, label_tensor
    from .sources import local_copy_kwargs

    try:
        kwargs = local_copy_kwargs(str(folder))
        dd = datasets.load_dataset(kwargs.pop("dataset"), **kwargs)
    except DataSourceError as err:
        raise OwnDataError(str(err)) from None
    except Exception as err:  # unreadable files, a folder of something else
        raise OwnDataError(f"'{folder}' cannot be read as a dataset ({type(err).__name__}"
                           f": {err}): give {_formats(spec)}") from None
    split = dd[want] if want in dd else dd[next(iter(dd))] if len(dd) == 1 else None
    if split is None:
        raise OwnDataError(f"'{folder}' has the splits {list(dd)} and no '{want}': its "
                           f"'{want}' split (or its only one) is read")
    for col in (spec.image, spec.label):
        if col not in split.column_names:
            raise OwnDataError(f"'{folder}' has no column '{col}' (columns: "
                               f"{split.column_names}): dataset '{dataset}' is read from "
                               f"'{spec.image}' and '{spec.label}'")
    if spec.kind == "image":  # the shapes as stored, before any resizing
        _check_stored_images(split, spec, dataset, folder)
    try:
        return input_tensor(split, spec), label_tensor(split, spec)
    except Exception as err:
        raise OwnDataError(f"'{folder}': its '{spec.image}' values cannot be read as "
                           f"dataset '{dataset}''s inputs ({type(err).__name__}: {err})") from None


def _check_stored_images(split, spec: DatasetSpec, dataset: str, folder: Path) -> None:
    import io

    from PIL import Image

    c, h, w = spec.in_shape
    for i, img in enumerate(split[spec.image]):
        if isinstance(img, dict):
            img = Image.open(io.BytesIO(img["bytes"])) if img.get("bytes") else \
                Image.open(img["path"])
        bands = len(img.getbands())
        if img.size != (w, h) or (c == 1) != (bands == 1):
            raise OwnDataError(
                f"'{folder}', example {i}: a {img.size[0]}x{img.size[1]} image with "
                f"{bands} channel(s), and dataset '{dataset}' takes {w}x{h} with {c}: convert "
                "the data (or declare the dataset it belongs to)")


@functools.lru_cache(maxsize=4)
def _cached(path: str, spec: DatasetSpec, dataset: str, mtime: float) -> OwnData:
    return read_own_data(path, spec, dataset)


def load_own_data(path: str, spec: DatasetSpec, dataset: str) -> OwnData:
    """`read_own_data`, kept in memory while the folder is unchanged."""
    folder = Path(path).expanduser()
    mtime = folder.stat().st_mtime if folder.exists() else 0.0
    return _cached(str(folder), spec, dataset, mtime)


def split_held_out(data: OwnData, spec: DatasetSpec, val_fraction: float, seed: int):
    """(train_x, train_y, val_x, val_y): `val_fraction` of the examples held out at random
    (seeded) for federated evaluation, normalized; the rest as stored, for training."""
    from .decode import normalize
    from .partition import held_out_size

    n = len(data.y)
    val_n = held_out_size(n, val_fraction)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    val, train = order[:val_n], order[val_n:]
    return (data.x[train], data.y[train], normalize(data.x[val], spec), data.y[val])


def prepared_own_data(cfg: dict, path: str):
    """The node's own data as the ClientApp trains on it (a `disk_cache.PreparedPartition`):
    all of the folder, `client-val-fraction` held out (seeded by `seed`)."""
    from .partition import PreparedPartition
    from .specs import spec_of

    spec = spec_of(cfg)
    data = load_own_data(path, spec, cfg["dataset"])
    return PreparedPartition(*split_held_out(data, spec, cfg["client-val-fraction"], cfg["seed"]),
                             tuple(spec.in_shape), int(spec.num_classes))
