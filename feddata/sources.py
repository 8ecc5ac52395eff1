"""Where the examples come from: the Hugging Face hub or a local copy, read with `datasets`.

`load_train_test(...)` gives the two splits a run uses, `train` (partitioned) and `test` (the
server's held-out set), of

* a hub dataset (`dataset-path` empty): `datasets.load_dataset(<hub id>, <subset>)`;
* a local copy (`dataset-path`), with the same preprocessing, loading
  - a folder of IDX files (Fashion-MNIST as Zalando publishes it or Debian installs it:
    `idx.py`), into the hub copy's columns and splits (`image` as uint8 arrays, `label` with the
    hub's class names), or
  - a `save_to_disk` folder (`dataset_dict.json` + one folder of `.arrow` files per split,
    or a single saved split) through the `arrow` builder, or
  - any other folder the way `datasets.load_dataset(folder)` reads it: the hub's parquet layout
    (`data/train-00000-of-00001.parquet`, `<config>/test-*.parquet`, a README with `configs`)
    or csv files (Shakespeare's hub copy is `shakespeare.csv`).

The test set is the dataset's own test split (`test`; Tiny-ImageNet: `valid`). Datasets with only a
`train` split (FEMNIST, Shakespeare) keep `test-fraction` of every natural id's examples as the
test set (LEAF's per-user split: random examples for FEMNIST, the last ones for Shakespeare's
text, so test lines do not sit inside training windows); all clients train on the rest. The
training split is then shuffled with `seed` (the iid split takes contiguous blocks).

These are the steps flwr-datasets' FederatedDataset took with `shuffle=False` and this
preprocessing (load, check, preprocess), so the splits are the ones it gave; `datasets` is
imported only here, when a run reads such data (docs/performance.md#the-simulations-memory).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import numpy as np

from fileio.names import plain_name
from fileio.reading import read_json_bounded

from .idx import IMAGES, LABELS, SPLIT_PREFIXES, IdxRefused, is_idx_folder, read_idx_split
from .specs import DatasetSpec

MARKER_LIMIT = 16 * 2**20  # dataset_dict.json / state.json: a few hundred bytes when written


class DataSourceError(ValueError):
    """A dataset (or its local copy) cannot be loaded as configured."""


def local_copy_kwargs(path: str) -> dict[str, Any]:
    """`datasets.load_dataset` keyword arguments that load the local copy at `path`."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise DataSourceError(f"dataset-path '{path}' does not exist")
    if (folder / "dataset_dict.json").exists():  # DatasetDict.save_to_disk
        splits = _split_names(folder / "dataset_dict.json")
        files = {s: sorted(glob.glob(str(folder / s / "*.arrow"))) for s in splits}
    elif (folder / "state.json").exists():  # Dataset.save_to_disk: one split, taken as train
        files = {"train": sorted(glob.glob(str(folder / "*.arrow")))}
    elif folder.is_dir():
        return {"path": str(folder)}
    else:
        raise DataSourceError(f"dataset-path '{path}' is not a folder")
    empty = [s for s, f in files.items() if not f]
    if empty:
        raise DataSourceError(f"dataset-path '{path}': no .arrow files for split(s) {empty}")
    return {"path": "arrow", "data_files": files}


def copy_formats(spec: DatasetSpec, dataset: str) -> str:
    """The layouts a local copy of `dataset` may have, for messages."""
    names = ", ".join(f"{p}-{w}[.gz]" for p in SPLIT_PREFIXES.values() for w in (IMAGES, LABELS))
    idx = f"its four IDX files ({names}), " if spec.idx else ""
    return (f"{idx}a save_to_disk folder or the hub's parquet layout (data/<split>-*.parquet), "
            f"as `python -m feddata.save {dataset or '<dataset>'} <folder>` writes them")


def load_local_copy(path: str, spec: DatasetSpec, dataset: str):
    """`datasets.load_dataset` of the local copy at `path` (`local_copy_kwargs`); an empty
    folder, or one `datasets` finds no data in or cannot build, is a DataSourceError naming
    the folder, the layouts a copy may have and how to write one (never `datasets`' own
    traceback)."""
    import datasets

    folder = Path(path).expanduser()
    try:
        empty = folder.is_dir() and not any(not n.startswith(".") for n in os.listdir(folder))
    except OSError as err:
        raise DataSourceError(f"dataset-path '{path}' cannot be read ({err.strerror or err}): "
                              "fix its permissions") from None
    if empty:
        raise DataSourceError(f"dataset-path '{path}' is empty: put the local copy of dataset "
                              f"'{dataset}' there, {copy_formats(spec, dataset)}")
    source = local_copy_kwargs(path)
    try:
        return datasets.load_dataset(**source)
    except (datasets.exceptions.DatasetsError, FileNotFoundError, ValueError) as err:
        why = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise DataSourceError(f"dataset-path '{path}' holds no dataset `datasets` can load "
                              f"({type(err).__name__}: {why}): give a local copy of dataset "
                              f"'{dataset}', {copy_formats(spec, dataset)}") from None


def _split_names(path: Path) -> list[str]:
    """The `splits` of a save_to_disk `dataset_dict.json`, read bounded (a few hundred bytes
    when `datasets` writes it)."""
    try:
        saved = read_json_bounded(path, MARKER_LIMIT, follow_links=True)
    except OSError as err:  # UnusableFile: too large, not JSON, not a regular file
        raise DataSourceError(f"dataset-path: {err}") from None
    return split_names(saved, path)


def split_names(saved: Any, path: Path, error: type[DataSourceError] = DataSourceError
                ) -> list[str]:
    """The `splits` of a `dataset_dict.json` whose JSON is `saved` (read from `path`): a
    non-empty list of plain folder names (never '..' or a path), else `error` naming the
    file; the one rule for a server's `dataset-path` and a node's own folder."""
    splits = saved.get("splits") if isinstance(saved, dict) else None
    if not isinstance(splits, list) or not splits or not all(plain_name(s) for s in splits):
        raise error(f"{path}: 'splits' is {splits!r}, not a list of split names (plain folder "
                    "names): save the data again with save_to_disk")
    return splits


def _grouped_holdout(ids: np.ndarray, fraction: float, seed: int, temporal: bool) -> np.ndarray:
    """Indices of the held-out examples: round(fraction * n) of each id's n examples (>= 1 kept)."""
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    order = np.argsort(inverse, kind="stable")  # examples grouped by id, in dataset order
    rng = np.random.default_rng(seed)
    held, start = [], 0
    for n in counts:
        members = order[start:start + n]
        start += n
        k = min(int(round(fraction * n)), n - 1)
        if k > 0:
            held.append(members[n - k:] if temporal else rng.choice(members, k, replace=False))
    return np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)


def train_test(dd, spec: DatasetSpec, test_fraction: float, seed: int):
    """The preprocessing step: (the `train` split shuffled with `seed`, the `test` split)."""
    if "train" not in dd:
        raise DataSourceError(f"the data has no 'train' split (splits: {list(dd)})")
    for col in (spec.image, spec.label) + ((spec.natural_id,) if spec.natural_id else ()):
        if col not in dd["train"].column_names:
            raise DataSourceError(
                f"the data has no column '{col}' (columns: {dd['train'].column_names}); "
                "expected the hub format of this dataset (`python -m feddata.save` writes a "
                "local copy in it)"
            )
    train = dd["train"]
    test_name = next((s for s in spec.test_splits if s in dd), None)
    if test_name is not None:
        test = dd[test_name]
    elif spec.natural_id:
        held = _grouped_holdout(np.asarray(train[spec.natural_id]), test_fraction, seed,
                                spec.temporal)
        keep = np.ones(len(train), dtype=bool)
        keep[held] = False
        train, test = train.select(np.flatnonzero(keep)), train.select(held)
    elif spec.test_splits:
        raise DataSourceError(
            f"the data has none of the test splits {list(spec.test_splits)} (splits: {list(dd)})")
    else:
        split = train.train_test_split(test_size=test_fraction, seed=seed)
        train, test = split["train"], split["test"]
    return train.shuffle(seed=seed), test


def idx_dataset_dict(folder: Path, spec: DatasetSpec, dataset: str):
    """The train and test splits of the IDX folder `folder` as a `datasets.DatasetDict` with the
    hub copy's columns: `image` (uint8 arrays H x W: the pixels as stored, which the hub keeps as
    PNG) and `label` (ClassLabel with the spec's class names); DataSourceError naming the file."""
    from datasets import Array2D, ClassLabel, Dataset, DatasetDict, Features

    h, w = spec.in_shape[1:]
    features = Features({spec.image: Array2D((h, w), "uint8"),
                         spec.label: ClassLabel(names=list(spec.class_names))})
    splits = {}
    for split in SPLIT_PREFIXES:
        try:
            images, labels = read_idx_split(folder, split, dataset)
        except IdxRefused as err:
            raise DataSourceError(f"dataset-path: {err}") from None
        splits[split] = Dataset.from_dict({spec.image: _nested_lists(images),
                                           spec.label: labels}, features=features)
    return DatasetDict(splits)


def _nested_lists(images: np.ndarray):
    """uint8 [N, H, W] as the Arrow lists of rows an Array2D column stores, built from the one
    buffer (`datasets` converts an array row by row: seconds for 60,000 images)."""
    import pyarrow as pa

    n, h, w = images.shape
    rows = pa.ListArray.from_arrays(pa.array(np.arange(n * h + 1, dtype=np.int64) * w),
                                    pa.array(images.reshape(-1)))
    return pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int64) * h), rows)


def load_train_test(spec: DatasetSpec, dataset_path: str, *, test_fraction: float, seed: int,
                    dataset: str = ""):
    """(train, test) `datasets.Dataset`s of the hub copy of `spec` or the local copy at
    `dataset_path`: loaded, checked and split by `train_test`."""
    import datasets

    folder = Path(dataset_path).expanduser()
    try:
        idx = bool(dataset_path) and spec.idx and folder.is_dir() and is_idx_folder(folder)
    except IdxRefused as err:  # both x and x.gz
        raise DataSourceError(f"dataset-path: {err}") from None
    if idx:
        dd = idx_dataset_dict(folder, spec, dataset)
        return train_test(dd, spec, test_fraction, seed)
    if dataset_path:
        dd = load_local_copy(dataset_path, spec, dataset)
    elif spec.hub:
        dd = datasets.load_dataset(spec.hub, spec.subset)
    else:
        raise DataSourceError(
            "this dataset has no hub copy: set dataset-path to a local copy "
            "(see `python -m feddata.save --help`)")
    if not isinstance(dd, datasets.DatasetDict):  # (a builder argument that returns one split)
        raise DataSourceError(f"the data loads as {type(dd).__name__}, not as a dataset with "
                              "splits: give the folder that holds the splits")
    return train_test(dd, spec, test_fraction, seed)
