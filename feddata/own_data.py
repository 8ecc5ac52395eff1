"""A node's own data (docs/data.md#own-data-folders, docs/deployment.md#own-data): the folder its
SuperNode's node config `data-path` names, read whole, checked against the run's dataset (its
label space and input shape), with `client-val-fraction` of it held out for federated
evaluation. No partitioner runs: on a real device the node's examples are all it has.

One reader, one rule per layout. The layout is decided by what the folder's top holds, never by
guessing from its other files:

* `dataset_dict.json`: a `save_to_disk` DatasetDict; its `splits` are folders of `.arrow` files
  listed in their `state.json`;
* `state.json`: a `save_to_disk` Dataset, one split (`_data_files` lists its `.arrow` files);
* a `data/` folder: the hub's parquet layout, `data/<split>-*.parquet`;
* IDX files, for a dataset published so (Fashion-MNIST): `train-images-idx3-ubyte[.gz]` and
  `train-labels-idx1-ubyte[.gz]`, the `t10k-` pair for the test split (`idx.py`);
* anything else: an image folder, `<label>/<image file>` as torchvision's `ImageFolder` (also in
  sub-folders of a label folder), whose folder names are the label indices `0`, `1`, ... of the
  run's dataset, written plainly (no '01', no '+1').

Every example is read as stored or refused with the file (or file and row) and the fix: images
by `decode.pixels_8bit` with their size checked from the header before decoding, labels whole
numbers in range (`decode.class_indices`). Only regular files are read (no named pipe, device or
socket); a link is followed only when its target lies inside the data folder (and not in a
hidden entry of it, which is never read nor in the node cache's key), or anywhere when
the user allows it (`follow_links`: node config `data-follow-links = true`, `python -m feddata
check --follow-links`). What is not read (hidden files, files beside the label folders, files
without an image suffix) is listed in `OwnData.skipped`, one line per reason.

    python -m feddata check <data-path> --dataset cifar10     # an operator, before joining
"""

from __future__ import annotations

import io
import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fileio.names import plain_name
from fileio.reading import kind_of, memory_bytes, open_regular, read_json_bounded

from .decode import (IMAGE_SUFFIXES, LabelRefused, PixelsRefused, char_indices, class_indices,
                     normalize, open_image, pixels_8bit, shown_size)
from .idx import (IMAGES, LABELS, SPLIT_PREFIXES, IdxRefused, idx_splits, is_idx_folder,
                  read_idx_split)
from .partition import PreparedPartition, held_out_size
from .settings import DataSettings
from .sources import MARKER_LIMIT, DataSourceError, split_names
from .specs import LEAF_CHARS, DatasetSpec, own_data_settings

LABEL_FOLDER = re.compile(r"0|[1-9][0-9]*")  # a label index written plainly
SYSTEM_FILES = {"thumbs.db", "desktop.ini"}  # (hidden ones: any name starting with '.')


class OwnDataError(DataSourceError):
    """A node's own data cannot be used as configured: the message names the file and the fix."""


@dataclass(frozen=True)
class OwnData:
    """The node's examples as stored (uint8 images / float arrays) and their labels; `skipped`:
    one line per reason a file of the folder was not read."""

    x: torch.Tensor
    y: torch.Tensor
    source: str  # 'image folder' or 'local copy'
    skipped: tuple[str, ...] = ()


class _Folder:
    """The data folder as the reader walks it: entries by name, only folders and regular files,
    links followed only into the folder (or anywhere, with `follow_links`), no folder twice."""

    def __init__(self, root: Path, key: str, follow_links: bool):
        self.root, self.key, self.follow_links = root, key, follow_links
        self.real = os.path.realpath(root)
        st = os.stat(root)
        self.seen: set[tuple[int, int]] = {(st.st_dev, st.st_ino)}
        self.skipped: dict[str, list[str]] = {}

    def skip(self, path: Path, why: str) -> None:
        self.skipped.setdefault(why, []).append(str(path.relative_to(self.root)))

    def lines(self) -> tuple[str, ...]:
        """One line per reason: how many, which (the first five)."""
        return tuple(f"skipped {len(names)} {why}: {', '.join(names[:5])}"
                     f"{', ...' if len(names) > 5 else ''}" for why, names in self.skipped.items())

    def entries(self, folder: Path) -> list[Path]:
        return sorted(folder / name for name in os.listdir(folder))

    def kind(self, path: Path) -> str:
        """'dir' or 'file' (what a link points to); OwnDataError for anything else, a link
        leaving the folder (unless allowed), a dangling link, or a folder reached twice."""
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            target = os.path.realpath(path)
            inside = target == self.real or target.startswith(self.real + os.sep)
            if not inside and not self.follow_links:
                allow = (", or allow links that leave it (node config data-follow-links=true; "
                         "python -m feddata check --follow-links)" if self.key == "data-path"
                         else "")
                raise OwnDataError(f"{path} is a link to {target}, outside the data folder "
                                   f"{self.root}: copy what it points to into the folder{allow}")
            hidden = [p for p in Path(os.path.relpath(target, self.real)).parts
                      if p.startswith(".")] if inside else []
            if hidden:  # skipped by the reader, and not in the node cache's listing
                raise OwnDataError(f"{path} is a link to {target}, into the hidden entry "
                                   f"'{hidden[0]}' of the data folder, which is never read: "
                                   "move what it points to out of the hidden entry, or remove "
                                   "the link")
            try:
                mode = os.stat(path).st_mode
            except OSError:
                raise OwnDataError(f"{path} is a link to {target}, which does not exist: "
                                   "remove it") from None
        if stat.S_ISDIR(mode):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in self.seen:
                raise OwnDataError(f"{path} is a folder the reader has been in already (a link "
                                   "loop, or two links to one folder): remove the link")
            self.seen.add((st.st_dev, st.st_ino))
            return "dir"
        if stat.S_ISREG(mode):
            return "file"
        raise OwnDataError(f"{path} is {kind_of(mode)}, not a regular file: remove it from the "
                           "data folder (only folders and regular files are read)")

    def open(self, path: Path):
        """The regular file `path` (checked by `kind`), opened without blocking on a swap."""
        try:
            return open_regular(path, follow_links=os.path.islink(path))
        except OSError as err:
            raise OwnDataError(f"{path} cannot be read ({err.strerror or err}): fix its "
                               "permissions, or remove it") from None


def read_own_data(path: str, spec: DatasetSpec, dataset: str, split: str = "train",
                  key: str = "data-path", *, follow_links: bool = False) -> OwnData:
    """Every example of the folder at `path`, checked: labels in [0, classes), inputs of the
    dataset's shape. OwnDataError naming the file and the fix otherwise. A local copy gives its
    `split` (or its only split); `key` names the setting in messages; `follow_links` lets links
    leave the folder."""
    folder = Path(path).expanduser()
    if not folder.exists():
        where = ("its node config (--node-config \"data-path='/data/mine'\")" if key == "data-path"
                 else f"the run config ({key}='/data/test')")
        raise OwnDataError(f"{key} '{path}' does not exist: give the folder in {where}")
    if not folder.is_dir():
        raise OwnDataError(f"{key} '{path}' is a file, not a folder: give the folder that "
                           "holds the data")
    tree = _Folder(folder, key, follow_links)
    top = tree.entries(folder)
    if not any(not p.name.startswith(".") for p in top):
        raise OwnDataError(f"{key} '{path}' is empty: put the examples there "
                           f"({_formats(spec)})")
    names = {p.name for p in top}
    if names & {"dataset_dict.json", "state.json", "data"}:
        x, y = _local_copy(tree, spec, dataset, split)
        source = "local copy"
    elif spec.idx and _idx_layout(folder):
        x, y = _idx_copy(tree, spec, dataset, split)
        source = "IDX files"
    elif spec.kind == "image":
        x, y = _image_folder(tree, spec, dataset)
        source = "image folder"
    else:
        raise OwnDataError(f"{key} '{path}' holds no dataset_dict.json, state.json or data/ "
                           f"folder: dataset '{dataset}' is read from {_formats(spec)}")
    if len(y) == 0:
        raise OwnDataError(f"{key} '{path}' holds no example: put the examples there "
                           f"({_formats(spec)})"
                           + "".join(f"; {line}" for line in tree.lines()))
    bad = (y < 0) | (y >= spec.num_classes)
    if bad.any():
        first = int(bad.nonzero()[0][0])
        raise OwnDataError(
            f"{key} '{path}': example {first} has label {int(y[first])}, outside "
            f"dataset '{dataset}''s {spec.num_classes} classes [0, {spec.num_classes - 1}]: "
            "relabel it, or declare the dataset the data belongs to")
    return OwnData(torch.from_numpy(x), torch.from_numpy(y), source, tree.lines())


def _formats(spec: DatasetSpec) -> str:
    folders = "an image folder <label>/<image>, " if spec.kind == "image" else ""
    idx = "its IDX files (train-images-idx3-ubyte[.gz], ...), " if spec.idx else ""
    return (f"{folders}{idx}the hub's parquet layout (data/<split>-*.parquet) or a save_to_disk "
            "folder")


def _hidden(path: Path) -> bool:
    return path.name.startswith(".") or path.name.lower() in SYSTEM_FILES


# --- image folders --------------------------------------------------------------------------
def _image_folder(tree: _Folder, spec: DatasetSpec, dataset: str):
    """(x uint8 [N, C, H, W], y int64 [N]): each label folder's images, in name order."""
    files: list[tuple[Path, int]] = []
    for entry in tree.entries(tree.root):
        if _hidden(entry):
            tree.skip(entry, "hidden or system file(s) or folder(s)")
            continue
        if tree.kind(entry) == "file":
            tree.skip(entry, "file(s) beside the label folders")
            continue
        if not LABEL_FOLDER.fullmatch(entry.name):
            raise OwnDataError(
                f"{entry}: an image folder's subfolders are the label indices of dataset "
                f"'{dataset}' written plainly (0 .. {spec.num_classes - 1}), not "
                f"'{entry.name}': rename it to its label's index")
        label = int(entry.name)
        if label >= spec.num_classes:
            raise OwnDataError(
                f"{entry}: label {label} is outside dataset '{dataset}''s "
                f"{spec.num_classes} classes [0, {spec.num_classes - 1}]: remove or rename it")
        files += [(file, label) for file in _images_under(tree, entry)]
    c, h, w = spec.in_shape
    x = np.empty((len(files), c, h, w), dtype=np.uint8)
    for i, (file, _) in enumerate(files):
        with tree.open(file) as f:
            x[i] = _pixels(f, spec, dataset, str(file))
    return x, np.array([label for _, label in files], dtype=np.int64)


def _images_under(tree: _Folder, folder: Path) -> list[Path]:
    """The image files in `folder` and its sub-folders, in name order (torchvision's rule)."""
    found = []
    for entry in tree.entries(folder):
        if _hidden(entry):
            tree.skip(entry, "hidden or system file(s) or folder(s)")
        elif tree.kind(entry) == "dir":
            found += _images_under(tree, entry)
        elif entry.suffix.lower() in IMAGE_SUFFIXES:
            found.append(entry)
        else:
            tree.skip(entry, f"file(s) without an image suffix ({' '.join(IMAGE_SUFFIXES)})")
    return found


def _pixels(source, spec: DatasetSpec, dataset: str, where: str) -> np.ndarray:
    """One image's pixels [C, H, W] uint8, its size checked from the header before decoding;
    OwnDataError naming `where` otherwise."""
    c, h, w = spec.in_shape
    try:
        img = open_image(source)
        size, bands = shown_size(img), len(img.getbands())
        if size == (w, h):
            img = pixels_8bit(img)
            bands = len(img.getbands())
    except PixelsRefused as err:
        raise OwnDataError(f"{where}: {err}") from None
    if size != (w, h) or bands != c:
        raise OwnDataError(
            f"{where}: a {size[0]}x{size[1]} image with {bands} channel(s), and dataset "
            f"'{dataset}' takes {w}x{h} with {c}: convert it (or declare the dataset the data "
            "belongs to)")
    arr = np.asarray(img, dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


# --- local copies ---------------------------------------------------------------------------
def _local_copy(tree: _Folder, spec: DatasetSpec, dataset: str, want: str):
    """(x, y) of the split `want` (or the only one) of a save_to_disk folder or the hub's
    parquet layout, every file and row checked."""
    splits = _splits(tree)
    if not splits:
        raise OwnDataError(f"'{tree.root}' holds no data files of its layout: "
                           f"{_formats(spec)} is read")
    name = want if want in splits else next(iter(splits)) if len(splits) == 1 else None
    if name is None:
        raise OwnDataError(f"'{tree.root}' has the splits {list(splits)} and no '{want}': its "
                           f"'{want}' split (or its only one) is read")
    xs, ys = [], []
    for file, read in splits[name]:
        x, y = _examples(read(file), spec, dataset, file)
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def _splits(tree: _Folder) -> dict[str, list[tuple[Path, Callable]]]:
    """Split name -> [(file, its table reader)] by the folder's layout (module docstring);
    what else the folders hold is listed as skipped."""
    root = tree.root
    if (root / "dataset_dict.json").exists():
        splits = split_names(_json(tree, root / "dataset_dict.json"),
                             root / "dataset_dict.json", OwnDataError)
        _skip_rest(tree, root, {"dataset_dict.json", *splits})
        for split in splits:
            if tree.kind(root / split) != "dir":
                raise OwnDataError(f"{root / split}: split '{split}' is not a folder: save the "
                                   "data again with save_to_disk")
        return {split: _arrow_files(tree, root / split) for split in splits}
    if (root / "state.json").exists():
        return {"train": _arrow_files(tree, root)}
    data = root / "data"
    if tree.kind(data) != "dir":
        raise OwnDataError(f"{data} is a file: the hub's parquet layout keeps its files in a "
                           "data/ folder")
    _skip_rest(tree, root, {"data"})
    out: dict[str, list] = {}
    for file in tree.entries(data):
        if _hidden(file) or file.suffix != ".parquet" or tree.kind(file) != "file":
            tree.skip(file, "entries of data/ that are no .parquet files")
            continue
        split = re.split(r"[-.]", file.name, maxsplit=1)[0]
        out.setdefault(split, []).append((file, lambda f: _parquet(tree, f)))
    return out


def _idx_layout(folder: Path) -> bool:
    """The folder holds IDX files (`idx.is_idx_folder`); OwnDataError when one is there twice
    (plain and gzipped)."""
    try:
        return is_idx_folder(folder)
    except IdxRefused as err:
        raise OwnDataError(str(err)) from None


def _idx_copy(tree: _Folder, spec: DatasetSpec, dataset: str, want: str):
    """(x uint8 [N, 1, H, W], y int64 [N]) of the split `want` (or the only one) of a folder of
    IDX files, each file checked by the folder's rules (links) and `idx.read_idx_split`'s."""
    try:
        splits = idx_splits(tree.root)
    except IdxRefused as err:  # both x and x.gz
        raise OwnDataError(str(err)) from None
    name = want if want in splits else splits[0] if len(splits) == 1 else None
    if name is None:
        raise OwnDataError(f"'{tree.root}' has the IDX splits {splits} and no '{want}': its "
                           f"'{want}' split (or its only one) is read")
    names = {split: {f"{prefix}-{what}{suffix}" for what in (IMAGES, LABELS)
                     for suffix in ("", ".gz")} for split, prefix in SPLIT_PREFIXES.items()}
    for entry in tree.entries(tree.root):
        other = next((split for split in names if entry.name in names[split]), None)
        if other is None:
            tree.skip(entry, "entries the layout does not read")
        elif other != name:  # (not an error: the pair of the split another reader takes)
            tree.skip(entry, f"file(s) of the IDX {other} split, not read as {tree.key} (it "
                      f"reads the {name} split); a run's dataset-path reads both splits "
                      "(`python -m feddata check --dataset-path` checks them)")

    def opener(path: Path):
        if tree.kind(path) != "file":
            raise OwnDataError(f"{path} is a folder, not an IDX file: remove it")
        return tree.open(path)

    try:
        images, labels = read_idx_split(tree.root, name, dataset, opener)
    except IdxRefused as err:
        raise OwnDataError(str(err)) from None
    return images[:, None], labels


def _skip_rest(tree: _Folder, folder: Path, used: set[str]) -> None:
    """List what `folder` holds besides `used` as skipped."""
    for entry in tree.entries(folder):
        if entry.name not in used:
            tree.skip(entry, "entries the layout does not read")


def _json(tree: _Folder, path: Path):
    if tree.kind(path) != "file":
        raise OwnDataError(f"{path} is a folder: save the data again with save_to_disk")
    try:
        return read_json_bounded(path, MARKER_LIMIT, follow_links=os.path.islink(path))
    except OSError as err:  # UnusableFile: too large, not JSON
        raise OwnDataError(f"{err}") from None


def _arrow_files(tree: _Folder, folder: Path) -> list[tuple[Path, Callable]]:
    """The .arrow files `folder/state.json` lists (save_to_disk's `_data_files`)."""
    state_file = folder / "state.json"
    if not state_file.exists():
        raise OwnDataError(f"{folder} has no state.json: save the data again with "
                           "save_to_disk")
    state = _json(tree, state_file)
    listed = state.get("_data_files") if isinstance(state, dict) else None
    names = [f.get("filename") if isinstance(f, dict) else None for f in listed] if isinstance(
        listed, list) else None
    if not names or not all(plain_name(n) and n.endswith(".arrow") for n in names):
        raise OwnDataError(f"{state_file}: '_data_files' is {listed!r}, not a list of .arrow "
                           "file names in its folder: save the data again with save_to_disk")
    _skip_rest(tree, folder, {"state.json", "dataset_info.json", *names})
    for name in names:
        if tree.kind(folder / name) != "file":
            raise OwnDataError(f"{folder / name} is a folder: save the data again with "
                               "save_to_disk")
    return [(folder / name, lambda f: _arrow(tree, f)) for name in names]


def _in_arrow_memory(tree: _Folder, file: Path):
    """The regular file `file` (`_Folder.open`) copied whole into a buffer Arrow allocated, as
    a `pyarrow.BufferReader`.

    Never a Python file object: Arrow would read it as buffers that hold Python objects
    (`PyBuffer`), and its parquet reader drops its last references to them on its own thread
    pool, after `read()` has returned. Dropping one takes the GIL; when the interpreter is
    already finalizing (a `feddata check` that refused a row and exited at once), that thread is
    made to exit inside a C++ destructor, and the process aborts ("terminate called without an
    active exception", exit 134, in about one run of ten). Memory Arrow owns needs no GIL."""
    import pyarrow as pa

    with tree.open(file) as f:
        size = os.fstat(f.fileno()).st_size
        if size > memory_bytes():  # (read whole, as the table it holds would be)
            raise OwnDataError(f"{file} is {size:,} bytes, more than this machine's memory: "
                               "split it into files that fit")
        buffer = pa.allocate_buffer(size)
        with memoryview(buffer) as view:
            got = f.readinto(view)
        if got != size or f.read(1):
            raise OwnDataError(f"{file} changed while it was read: give a file that is not "
                               "being written")
    return pa.BufferReader(buffer)


def _arrow(tree: _Folder, file: Path):
    import pyarrow as pa

    source = _in_arrow_memory(tree, file)
    try:
        return pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError, ValueError) as err:
        raise OwnDataError(f"{file} is not an Arrow stream as save_to_disk writes it "
                           f"({err}): save the data again with save_to_disk") from None


def _parquet(tree: _Folder, file: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = _in_arrow_memory(tree, file)
    try:
        return pq.ParquetFile(source).read()
    except (pa.ArrowException, OSError, ValueError) as err:
        raise OwnDataError(f"{file} is not a readable parquet file ({err}): write it again "
                           "(datasets: to_parquet)") from None


def _column(table, name: str, spec: DatasetSpec, dataset: str, file: Path) -> list:
    import pyarrow as pa

    if name not in table.column_names:
        raise OwnDataError(f"{file} has no column '{name}' (columns: {table.column_names}): "
                           f"dataset '{dataset}' is read from '{spec.image}' and "
                           f"'{spec.label}'")
    column = table.column(name).combine_chunks()
    if isinstance(column.type, pa.ExtensionType):  # datasets' Array2D, ...: its lists
        column = column.storage
    return column.to_pylist()


def _examples(table, spec: DatasetSpec, dataset: str, file: Path):
    """(x, y) of one file's rows, each row read by the spec's kind or refused naming it."""
    images = _column(table, spec.image, spec, dataset, file)
    labels = _column(table, spec.label, spec, dataset, file)
    if spec.kind == "chars":
        return _chars(images, labels, spec, file)
    try:
        y = class_indices(labels)
    except LabelRefused as err:
        raise OwnDataError(f"{file}, row {err.index}: {err.why}: labels are the class indices "
                           f"0 .. {spec.num_classes - 1}; fix the label column") from None
    read = _array_row if spec.kind == "array" else _image_row
    x = np.empty((len(images), *spec.in_shape),
                 dtype=np.float32 if spec.kind == "array" else np.uint8)
    for i, value in enumerate(images):
        x[i] = read(value, spec, dataset, f"{file}, row {i}")
    return x, y


def _image_row(value, spec: DatasetSpec, dataset: str, where: str) -> np.ndarray:
    """A row's image: the bytes of an image file (datasets' Image feature, or plain binary)."""
    if isinstance(value, dict):
        data = value.get("bytes")
        if data is None and value.get("path"):
            raise OwnDataError(f"{where}: the image is not in the file, only its path "
                               f"{value['path']!r}: save the data with save_to_disk, which "
                               "stores the images in the files")
        value = data
    if value is None:
        raise OwnDataError(f"{where}: it has no image (null): remove the row, or give it its "
                           "image")
    if not isinstance(value, bytes):
        what = "nested lists of numbers" if isinstance(value, list) else type(value).__name__
        raise OwnDataError(f"{where}: the image column holds {what}, not the bytes of an image "
                           "file: store the images as PNG or JPEG (datasets' Image feature)")
    return _pixels(io.BytesIO(value), spec, dataset, where)


def _array_row(value, spec: DatasetSpec, dataset: str, where: str) -> np.ndarray:
    """A row's numbers (digits' Array2D): the dataset's shape C,H,W (or H,W for one channel),
    finite."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    shape = spec.in_shape
    if arr is None or arr.shape not in (shape, shape[1:] if shape[0] == 1 else shape):
        got = "null" if value is None else f"shape {arr.shape}" if arr is not None else \
            "ragged lists"
        raise OwnDataError(f"{where}: its input is {got}, and dataset '{dataset}' takes an "
                           f"array of shape {shape}: fix the data")
    if not np.isfinite(arr).all():
        raise OwnDataError(f"{where}: its input holds NaN or infinite values: fix the data")
    return arr.reshape(shape)


def _chars(texts: list, labels: list, spec: DatasetSpec, file: Path):
    """Text rows (Shakespeare): the input a string, the label one of LEAF's characters."""
    for i, (text, label) in enumerate(zip(texts, labels)):
        if not isinstance(text, str):
            raise OwnDataError(f"{file}, row {i}: its text is {text!r}, not a string: fix it")
        if not isinstance(label, str) or len(label) != 1 or label not in LEAF_CHARS:
            raise OwnDataError(f"{file}, row {i}: its label {label!r} is not one of the "
                               f"{len(LEAF_CHARS)} characters of the dataset: fix it")
    x = char_indices(texts, spec.in_shape[0])
    return x, char_indices(labels, 1)[:, 0].astype(np.int64)


# --- as the ClientApp uses it ---------------------------------------------------------------
def load_own_data(path: str, spec: DatasetSpec, dataset: str, *,
                  follow_links: bool = False) -> OwnData:
    """`read_own_data`, each file it skipped logged. Read each time: the node keeps what it
    trains on in its cache (`disk_cache.load_prepared_own_data`, keyed by the whole listing)."""
    data = read_own_data(path, spec, dataset, follow_links=follow_links)
    for line in data.skipped:
        logging.getLogger("flwr").warning("data-path %s: %s", path, line)
    return data


def split_held_out(data: OwnData, spec: DatasetSpec, val_fraction: float, seed: int):
    """(train_x, train_y, val_x, val_y): `val_fraction` of the examples held out at random
    (seeded) for federated evaluation, normalized; the rest as stored, for training."""
    n = len(data.y)
    val_n = held_out_size(n, val_fraction)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    val, train = order[:val_n], order[val_n:]
    return (data.x[train], data.y[train], normalize(data.x[val], spec), data.y[val])


def own_data_partition(settings: DataSettings, path: str, *, follow_links: bool = False):
    """(OwnData, PreparedPartition): the folder as read, and as the ClientApp trains on it. The
    one path of a node and of `python -m feddata check`: the data keys checked by their ranges
    (`specs.own_data_settings`), the folder read, `client-val-fraction` held out."""
    spec = own_data_settings(settings)
    data = load_own_data(path, spec, settings.dataset, follow_links=follow_links)
    return data, PreparedPartition(
        *split_held_out(data, spec, settings.client_val_fraction, settings.seed),
        tuple(spec.in_shape), int(spec.num_classes))


def prepared_own_data(settings: DataSettings, path: str, *, follow_links: bool = False):
    """The node's own data as the ClientApp trains on it (a `disk_cache.PreparedPartition`):
    all of the folder, `client-val-fraction` held out (seeded by `seed`); `follow_links`: the
    node config's data-follow-links."""
    return own_data_partition(settings, path, follow_links=follow_links)[1]
