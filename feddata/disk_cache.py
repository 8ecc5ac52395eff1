"""A node's prepared partition kept on its local disk, so a fresh ClientApp process loads it
cheaply.

In deployment every message runs in a new `flwr-clientapp` process: without this, each round
would import `datasets` (with pandas and pyarrow) and rebuild the split before training. Here
the first process of a node builds its partition with `feddata.loading.load_client_data`, saves
the tensors with `torch.save`, and every later process (next rounds, next runs with the same data
config) reads them back with `torch.load(weights_only=True)` and imports nothing heavier than
torch. This module must stay light: `feddata.loading` is imported only on a miss.

Where: node config `cache-dir` (`flower-supernode --node-config "... cache-dir='/data/cache'"`),
else the environment variable FEDACG_CACHE_DIR, else `$XDG_CACHE_HOME/fedacg-gc/partitions`
(default `~/.cache/fedacg-gc/partitions`). The value `off` disables the disk cache.

In a Ray simulation the ServerApp, which reads the training split for the split summary
anyway, writes every partition's file before round 1 (`prepare_partitions`, in the same
folder: a simulated node has no node config of its own), so the ClientApp's actors load files
and import no `datasets` (docs/performance.md#the-simulations-memory).

Key: every run-config key of the `data` group of `run_config/schema.py` plus `seed`
(`CACHE_KEY_NAMES`, a superset of `feddata.loading.DATA_KEYS`; a test keeps it equal to the
schema's data group, so a data key added there must be added here), the partition id and
count, the versions of the data libraries and a hash of the data code (`feddata/*.py`), so a
changed split or preprocessing never reads a stale file.

Repair: a file that cannot be read (or is no regular file), has another key, lacks a tensor,
or holds tensors that do not fit the run's dataset (`specs.spec_of`: input shape and type,
labels int64 in [0, classes)) is rebuilt and replaced (logged); temporary files left by a
writer that was killed are removed by `fileio.atomic` when the folder is next written to.

Trust: the cache folder is private (`fileio.folders.private_folder`: made 0700, its files
0600); one that is a link, another user's, or writable by its group or others is not used (a
file planted there would be trained on): the node logs why and trains from the data as
decoded, as it does when a file cannot be written (a full disk).

A node's own data (node config `data-path`, docs/deployment.md#own-data) is kept the same way
(`load_prepared_own_data`): the first process decodes and checks the folder
(`feddata.own_data.prepared_own_data`) and saves the result as `own-<folder>-<key>.pt`; later
processes load it while the folder holds the same entries. Its key is what the folder holds,
listed without opening a file or following a link (`folder_listing`: every entry's relative
name, kind, size, modification and change times; a link by its own entry and target text,
never what it points to; hidden entries are neither keyed nor read, and the reader refuses a
link into a hidden entry of the folder), the folder's real path, the data settings
`OWN_DATA_KEY_NAMES`, the library versions and the code hash. A changed folder is read again
and its older file removed. The file holds a copy of the node's examples: delete the cache
folder with the data (docs/deployment.md#teardown).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import stat
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from fileio.atomic import write_torch_atomic
from fileio.errors import UnusableFile
from fileio.folders import private_folder
from fileio.reading import open_regular

from .partition import PreparedPartition
from .settings import DataSettings
from .specs import DatasetSpec, spec_of

FORMAT = 1  # bump when the file layout changes
# The run-config keys of the schema's data group, in its order, and the seed (tests hold them
# equal, and equal to DataSettings' fields): the data package takes their values as the
# caller's DataSettings and imports no run config.
CACHE_KEY_NAMES: tuple[str, ...] = (
    "dataset", "dataset-path", "client-data", "test-data", "num-clients", "custom-classes",
    "custom-shape", "custom-mean", "custom-std", "partitioner", "dirichlet-alpha", "lda-alpha",
    "lda-min-size", "lda-self-balancing", "shards-per-client", "test-fraction",
    "test-max-examples", "client-val-fraction", "augment", "augment-padding",
    "augment-rotation", "seed")
# What a node's own data depends on besides its folder (feddata.own_data.prepared_own_data
# reads these; a test holds it): the label space and input shape, the normalization, the
# held-out share and the seed of its draw.
OWN_DATA_KEY_NAMES: tuple[str, ...] = (
    "dataset", "custom-classes", "custom-shape", "custom-mean", "custom-std",
    "client-val-fraction", "seed")
_DATA_LIBRARIES = ("datasets", "numpy", "pillow")  # what reads, decodes and splits the data
_FEDDATA = Path(__file__).resolve().parent


def cache_dir(node_config: Mapping[str, Any] | None = None) -> Path | None:
    """The node's cache folder (see the module doc), or None when the disk cache is off."""
    value = (node_config or {}).get("cache-dir") or os.environ.get("FEDACG_CACHE_DIR")
    if not value:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        value = Path(base) / "fedacg-gc" / "partitions"
    if str(value) == "off":
        return None
    return Path(str(value)).expanduser()


@functools.lru_cache(maxsize=1)  # per process: neither changes while it runs
def _versions() -> dict[str, str]:
    out = {}
    for name in _DATA_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out


@functools.lru_cache(maxsize=1)
def _code_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(_FEDDATA.glob("*.py")):
        if path.name != "disk_cache.py":
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _config(settings: DataSettings, names: tuple[str, ...]) -> dict[str, Any]:
    """{run-config key: value} of `names` (the key names a file's settings as the run config
    does)."""
    config = settings.as_config()
    return {k: config[k] for k in names}


def cache_key(settings: DataSettings, partition_id: int, num_partitions: int
              ) -> dict[str, Any]:
    """Everything that determines a client's prepared partition."""
    return {
        "format": FORMAT,
        "config": _config(settings, CACHE_KEY_NAMES),
        "partition-id": int(partition_id),
        "num-partitions": int(num_partitions),
        "libraries": dict(_versions()),
        "code": _code_hash(),
    }


def cache_file(folder: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    name = f"{key['config']['dataset']}-p{key['partition-id']}of{key['num-partitions']}-{digest}.pt"
    return folder / name


def _build(settings: DataSettings, partition_id: int, num_partitions: int
           ) -> PreparedPartition:
    from .loading import load_client_data  # loads the data: datasets

    data = load_client_data(settings, partition_id, num_partitions)
    spec = spec_of(settings)
    return PreparedPartition(data.train_x, data.train_y, data.val_x, data.val_y,
                             tuple(spec.in_shape), int(spec.num_classes))


def _log() -> logging.Logger:
    return logging.getLogger("flwr")  # (the node's log, as own_data's skipped files)


def _read(path: Path, key: dict[str, Any]) -> PreparedPartition | None:
    try:  # a regular file, never a link put at its name nor a pipe (which would block)
        f = open_regular(path)
    except (OSError, UnusableFile):  # missing, a link, a pipe: rebuild (the writer replaces it)
        return None
    try:
        with f:
            blob = torch.load(f, weights_only=True)
    except Exception:  # a truncated or foreign file: rebuild it
        return None
    if not isinstance(blob, dict) or blob.get("key") != json.dumps(key, sort_keys=True):
        return None
    try:  # the right key but missing or wrong fields (a foreign or hand-edited file): rebuild
        tensors = [blob[k] for k in ("train_x", "train_y", "val_x", "val_y")]
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            return None
        shape, classes = blob["in_shape"], blob["num_classes"]
        if not isinstance(shape, list) or not all(type(d) is int for d in shape) or \
                type(classes) is not int:
            return None
        return PreparedPartition(*tensors, tuple(shape), classes)
    except (KeyError, TypeError, ValueError):
        return None


def misfit(part: PreparedPartition, spec: DatasetSpec) -> str | None:
    """Why `part` is not a partition of the dataset `spec` as the readers make one (None when
    it is): its input shape and classes, every tensor's type and shape (inputs [N, *in_shape]:
    uint8 images and text, float32 arrays, float32 normalized held-out inputs, int64 labels
    [N]), labels in [0, classes), float inputs finite."""
    stored = torch.float32 if spec.kind == "array" else torch.uint8
    ready = torch.uint8 if spec.kind == "chars" else torch.float32
    if part.in_shape != tuple(spec.in_shape) or part.num_classes != spec.num_classes:
        return (f"input shape {part.in_shape} with {part.num_classes} classes, not "
                f"{tuple(spec.in_shape)} with {spec.num_classes}")
    for name, want in (("train_x", stored), ("val_x", ready), ("train_y", torch.int64),
                       ("val_y", torch.int64)):
        t = getattr(part, name)
        if t.dtype != want:
            return f"{name} is {t.dtype}, not {want}"
        rows = len(part.train_y if name == "train_x" else part.val_y)
        want_shape = (rows, *spec.in_shape) if name.endswith("_x") else (len(t),)
        if tuple(t.shape) != want_shape:
            return f"{name} has shape {tuple(t.shape)}, not {want_shape}"
        if name.endswith("_y") and len(t) and not (0 <= int(t.min()) and
                                                   int(t.max()) < spec.num_classes):
            return (f"{name} holds labels from {int(t.min())} to {int(t.max())}, outside "
                    f"[0, {spec.num_classes})")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return f"{name} holds NaN or infinite values"
    return None


def _write(path: Path, key: dict[str, Any], part: PreparedPartition) -> None:
    blob = {
        "key": json.dumps(key, sort_keys=True),
        "train_x": part.train_x.contiguous(), "train_y": part.train_y.contiguous(),
        "val_x": part.val_x.contiguous(), "val_y": part.val_y.contiguous(),
        "in_shape": list(part.in_shape), "num_classes": part.num_classes,
    }
    # atomic: a concurrent reader sees the old file or the whole new one; only this user reads
    # it (a copy of the node's examples)
    write_torch_atomic(path, blob, mode=0o600)


_memory: dict[Path, PreparedPartition] = {}  # a Ray actor serves many rounds in one process
_MEMORY_ITEMS = 256


def load_prepared_partition(
    settings: DataSettings, partition_id: int, num_partitions: int, folder: Path | None,
) -> PreparedPartition:
    """Client `partition_id`'s tensors: from memory, else from `folder`, else built and saved.

    `folder=None` builds without touching the disk.
    """
    if folder is None:
        return _build(settings, partition_id, num_partitions)
    key = cache_key(settings, partition_id, num_partitions)
    return _cached(cache_file(folder, key), key,
                   lambda: _build(settings, partition_id, num_partitions), settings)


def prepare_partitions(settings: DataSettings, num_partitions: int, folder: Path) -> int:
    """Every partition's file in `folder`, built where none is there, none kept in this
    process's memory; returns how many were built. The ServerApp of a Ray simulation, whose
    process has read the data for the split summary, calls it before round 1, so that the
    ClientApp's actors load their files and never import `datasets` (with pandas and pyarrow:
    docs/performance.md#the-simulations-memory). A file there is checked by the client that
    reads it (rebuilt when it does not fit); a folder that is not private or a failed write
    only leaves the building to the clients (logged)."""
    from .loading import forget_client_data

    built = 0
    try:
        private_folder(folder, "the data cache folder")
        for partition_id in range(num_partitions):
            key = cache_key(settings, partition_id, num_partitions)
            path = cache_file(folder, key)
            if path.is_file():
                continue
            _write(path, key, _build(settings, partition_id, num_partitions))
            forget_client_data()  # (a decoded copy: the clients hold theirs)
            built += 1
    except OSError as err:  # (UnusableFile) the clients build what is missing
        _log().warning("partitions not prepared for the clients (%s)", err)
    return built

def folder_listing(folder: Path) -> tuple[str, int]:
    """(sha256 of the listing, entries) of everything under `folder` that the reader may read:
    each entry's path relative to it, kind, size and modification and change times (ns), from
    `lstat` only: no file is opened, no link followed (a link is listed with its target text;
    what it points to is not visited). Hidden entries (a name starting with '.', which the
    reader skips: `.DS_Store`, a `.cache` folder) are left out, so that they cannot make every
    load a miss. `folder` itself may be a link to the folder: its real path names it."""
    h = hashlib.sha256()
    count = 0
    todo = [("", folder)]
    while todo:
        rel, where = todo.pop()
        with os.scandir(where) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name.startswith("."):  # hidden: the reader skips it
                    continue
                st = entry.stat(follow_symlinks=False)
                name = f"{rel}/{entry.name}" if rel else entry.name
                if stat.S_ISLNK(st.st_mode):
                    kind = "link:" + os.readlink(entry.path)
                elif stat.S_ISDIR(st.st_mode):
                    kind = "dir"
                    todo.append((name, Path(entry.path)))
                else:
                    kind = "file" if stat.S_ISREG(st.st_mode) else f"mode:{st.st_mode:o}"
                # five fields, each ended by NUL, which no file name or link target holds
                h.update(f"{name}\0{kind}\0{st.st_size}\0{st.st_mtime_ns}\0"
                         f"{st.st_ctime_ns}\0".encode(errors="surrogateescape"))
                count += 1
    return h.hexdigest(), count


def own_data_key(settings: DataSettings, path: str) -> dict[str, Any] | None:
    """Everything that determines a node's prepared own data, or None where the folder cannot
    be listed (missing, not a folder, unreadable: the reader then names the problem)."""
    folder = Path(path).expanduser()
    try:
        real = folder.resolve(strict=True)
        if not real.is_dir():
            return None
        listing, entries = folder_listing(real)
    except (OSError, RuntimeError):  # RuntimeError: a link loop at the folder's own name
        return None
    return {
        "format": FORMAT,
        "own-data": str(real),
        "listing": listing,
        "entries": entries,
        "config": _config(settings, OWN_DATA_KEY_NAMES),
        "libraries": dict(_versions()),
        "code": _code_hash(),
    }


def own_data_file(folder: Path, key: dict[str, Any]) -> Path:
    """`own-<data folder>-<its listing>-<key>.pt`: the file of a data folder that has changed
    since (another listing) is found by name and removed."""
    where = hashlib.sha256(key["own-data"].encode()).hexdigest()[:12]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return folder / f"own-{where}-{key['listing'][:12]}-{digest}.pt"


def load_prepared_own_data(settings: DataSettings, path: str, folder: Path | None, *,
                           follow_links: bool = False) -> PreparedPartition:
    """The node's own data (`data-path` = `path`) as it trains on it: from memory, else from
    the cache `folder` while the data folder is unchanged, else decoded and checked
    (`feddata.own_data.prepared_own_data`) and saved. `folder=None`, a data folder that cannot
    be listed, or `follow_links` (node config data-follow-links: what a link points to out of
    the folder is not in the listing, so a change there would go unseen) reads without the
    cache."""
    def read() -> PreparedPartition:
        from .own_data import prepared_own_data  # (its readers' imports: on a miss only)

        return prepared_own_data(settings, path, follow_links=follow_links)

    key = own_data_key(settings, path) if folder is not None and not follow_links else None
    if key is None:
        return read()
    _refuse_cache_inside(folder, Path(key["own-data"]))
    target = own_data_file(folder, key)
    return _cached(target, key, read, settings, written=_remove_older_copies)


def _remove_older_copies(target: Path) -> None:
    """After `target` was written (a miss): the copies of the same data folder with another
    listing are stale for good (the folder changed)."""
    where, listing = target.name.split("-")[1:3]
    for older in target.parent.glob(f"own-{where}-*.pt"):
        if older.name.split("-")[2] != listing:
            older.unlink(missing_ok=True)
            _memory.pop(older, None)


def _refuse_cache_inside(cache: Path, data: Path) -> None:
    """A cache folder inside the data folder (not under a hidden folder there) would be read
    as data, and change the folder's listing on every write: refused, naming the fix."""
    try:
        inside = Path(os.path.realpath(cache)).relative_to(data)
    except ValueError:
        return
    if not any(part.startswith(".") for part in inside.parts):
        raise ValueError(f"the data cache folder {cache} is inside the node's data folder "
                         f"{data}: give the node a cache-dir outside it (--node-config "
                         "\"cache-dir='<folder>'\", deploy/supernode.sh --cache-dir)")


def _checked_read(path: Path, key: dict[str, Any], settings: DataSettings
                  ) -> PreparedPartition | None:
    """`_read`, and None (a miss, logged) where its tensors do not fit the run's dataset."""
    part = _read(path, key)
    if part is None:
        return None
    try:
        spec = spec_of(settings)
    except (ValueError, KeyError, TypeError):  # bad data settings: the reader names them
        return None
    why = misfit(part, spec)
    if why is not None:
        _log().warning("data cache file %s does not fit dataset '%s' (%s): the data is read "
                       "again and the file replaced", path, settings.dataset, why)
        return None
    return part


def _cached(path: Path, key: dict[str, Any], build: Callable[[], PreparedPartition],
            settings: DataSettings, written: Callable[[Path], None] | None = None
            ) -> PreparedPartition:
    """`path`'s tensors when it holds `key`'s and they fit the settings' dataset, else
    `build()`'s, saved there (then `written(path)`). A cache folder that is not private (or
    cannot be made) is neither read nor written: logged, built (and kept in this process's
    memory)."""
    part = _memory.get(path)
    private = True
    if part is None:
        try:
            private_folder(path.parent, "the data cache folder")
        except OSError as err:  # (UnusableFile)
            _log().warning("%s; training on the data as read, without the cache", err)
            private = False
        part = _checked_read(path, key, settings) if private else None
    if part is None:
        part = build()
        try:
            if private:
                _write(path, key, part)
                if written is not None:
                    written(path)
        except OSError as err:  # a read-only or full disk only costs speed
            _log().warning("data cache not written (%s); training on the data as read", err)
    _memory.pop(path, None)
    _memory[path] = part  # most recent last
    while len(_memory) > _MEMORY_ITEMS:
        _memory.pop(next(iter(_memory)))
    return part
