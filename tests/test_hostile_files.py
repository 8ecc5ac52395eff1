"""Files from the outside world (issue 44, docs/security.md#files-from-outside): what a careless or
hostile user, node operator or neighbour on a shared out-dir can put where the app reads or
writes. Five classes, each case asserting the exact outcome (read as meant, or refused naming
the file and the fix), that nothing under the test's folder changed outside out-dir (`guarded`:
a snapshot of every entry's type, size, time, link target and bytes, before and after, and of
the datasets cache), and a time bound (`time_bound`: SIGALRM), so that a read that hangs fails
the test instead of blocking the suite.

* data read as its owner means: a node's folder read exactly as stored or refused, and
  `python -m feddata check` agreeing with the node (the ClientApp's own setup) on every folder;
* writes through links: run folders, run.lock, results, the final model, sweep cells and logs;
* reads that hang or flood: named pipes, sockets, YAML aliases, huge files and headers;
* errors instead of tracebacks: malformed YAML and sweeps, results of unexpected shape;
* checks that pass what the run refuses: key ranges, re-signed checkpoints, write errors.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import signal
import socket
import stat
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

ROOT = Path(__file__).resolve().parents[1]
CASE_SECONDS = 120  # a hang fails the case; no case comes near it (not a timing assertion)


class Hung(Exception):
    """The case ran past its time bound: something blocked (a named pipe, a huge read)."""


@contextlib.contextmanager
def time_bound(seconds: int = CASE_SECONDS):
    """Raise Hung in the main thread after `seconds` (SIGALRM interrupts a blocked open/read)."""
    def hung(signum, frame):
        raise Hung(f"the case did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def snapshot(root: Path, allowed: tuple[Path, ...]) -> dict[str, tuple]:
    """Every entry under `root` but the `allowed` folders: its type, size, mtime, link target and
    (regular files) a hash of its bytes. Named pipes and sockets are only lstat'ed."""
    out = {}
    if not root.exists():
        return out
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if Path(folder, d) not in allowed]
        for name in dirs + files:
            path = Path(folder, name)
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            entry = (kind, st.st_mtime_ns)
            if stat.S_ISLNK(st.st_mode):
                entry += (os.readlink(path),)
            elif stat.S_ISREG(st.st_mode):
                entry += (st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
            out[str(path.relative_to(root))] = entry
    return out


@contextlib.contextmanager
def guarded(root: Path, *allowed: Path):
    """The case, under its time bound; afterwards nothing under `root` outside `allowed` (the
    out-dir) differs, nor the datasets cache (a node's reader writes none)."""
    cache = Path(os.environ["HF_DATASETS_CACHE"])
    before = snapshot(root, allowed), snapshot(cache, ())
    with time_bound():
        yield
    assert snapshot(root, allowed) == before[0], "a file outside out-dir changed"
    assert snapshot(cache, ()) == before[1], "the datasets cache changed"


# --- files made by hand (independent of the code under test) -------------------------------------
def png(pixels: np.ndarray, bits: int = 8, color: int | None = None,
        size: tuple[int, int] | None = None) -> bytes:
    """A PNG written from its specification: `pixels` [H, W] or [H, W, C], `bits` per sample,
    colour type 0 / 2 / 4 / 6 by the channels; `size` overrides the header's (W, H)."""
    h, w = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    color = {1: 0, 3: 2, 2: 4, 4: 6}[channels] if color is None else color
    dtype = ">u2" if bits == 16 else "u1"
    raw = b"".join(b"\0" + pixels[i].astype(dtype).tobytes() for i in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    width, height = size or (w, h)
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bits, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def pil_bytes(img, fmt: str = "PNG", **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def grey(value: int, shape=(4, 4)) -> np.ndarray:
    return np.full(shape, value, dtype=np.uint8)


def parquet_folder(folder: Path, images: list, labels: list, image_type=None) -> Path:
    """The hub's parquet layout written with pyarrow itself: `image` (struct<bytes, path> unless
    `image_type`) and `label` columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    struct_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array(images, type=image_type or struct_type),
                      "label": pa.array(labels)})
    (folder / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "data" / "train-00000-of-00001.parquet")
    return folder


def cell(data: bytes) -> dict:
    return {"bytes": data, "path": None}


def plant_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock  # (closed by the garbage collector; the file stays)


# --- a node's data: `python -m feddata check` and the ClientApp, on the same folder -------------
def custom(classes: int = 3, shape: str = "1,4,4") -> dict:
    return {"dataset": "custom", "custom-classes": classes, "custom-shape": shape}


def settings_of(keys: dict):
    """The data settings of these run-config keys, the others at their defaults."""
    from feddata import DataSettings

    return DataSettings.from_config({**DataSettings().as_config(), **keys})


@dataclass
class Read:
    """The folder is read: these labels (in the folder's order) and, where given, pixels; the
    skipped-lines patterns the check prints."""

    y: list
    x: np.ndarray | None = None
    skipped: tuple[str, ...] = ()


@dataclass
class Refused:
    """The folder is refused with a message matching `pattern` that names `file`."""

    pattern: str
    file: str


@dataclass
class DataCase:
    name: str
    make: Callable[[Path], tuple[Path, dict, object]]
    follow_links: bool = False


def cli(folder: Path, keys: dict, follow_links: bool = False) -> tuple[int, str, str]:
    """`python -m feddata check` in this process: (exit status, stdout, stderr)."""
    from feddata.__main__ import main

    args = ["check", str(folder), "--dataset", keys["dataset"]]
    if keys["dataset"] == "custom":
        args += ["--classes", str(keys["custom-classes"]), "--shape", keys["custom-shape"]]
    if "client-val-fraction" in keys:
        args += ["--client-val-fraction", str(keys["client-val-fraction"])]
    args += ["--follow-links"] if follow_links else []
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def node(folder: Path, keys: dict, follow_links: bool = False):
    """The ClientApp's own setup of a train message on a node whose data-path is `folder`: its
    PreparedPartition, or the exception it raises."""
    from client_app.app import setup
    from feddata.specs import spec_of
    from models import build_model

    rc = {**keys, "client-data": "own", "test-data": str(folder), "model": "mlp",
          "fraction-evaluate": 0.0}
    ctx = Context(run_id=1, node_id=1, state=RecordDict(), run_config=rc,
                  node_config={"data-path": str(folder), "data-follow-links": follow_links})
    spec = spec_of(settings_of(keys))
    arrays = ArrayRecord(build_model("mlp", spec.in_shape, spec.num_classes, 2).state_dict())
    msg = Message(RecordDict({"arrays": arrays, "config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=1, message_type="train")
    try:
        return setup(msg, ctx)[2]
    except Exception as err:
        return err


def folder_of_images(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        write(root / name, data)
    return root


def case_png16(root):
    values = np.array([[0, 255, 256, 4095], [4096, 32767, 32768, 65535]] * 2, dtype=np.uint16)
    folder = folder_of_images(root / "d", {"1/a.png": png(values, bits=16)})
    # 16-bit samples by their high byte: value // 256 (not clipped to 255 by an 8-bit convert)
    return folder, custom(), Read([1], (values.astype(np.int64) // 256)[None, None])


def case_rgb16(root):
    values = (np.arange(48).reshape(4, 4, 3) * 1361).astype(np.uint16)
    folder = folder_of_images(root / "d", {"0/a.png": png(values, bits=16)})
    return folder, custom(shape="3,4,4"), Read([0], (values // 256).transpose(2, 0, 1)[None])


def case_float_tiff(root):
    from PIL import Image

    img = Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32))
    folder = folder_of_images(root / "d", {"0/f.tif": pil_bytes(img, "TIFF")})
    return folder, custom(), Refused(r"0/f.tif: its pixels are 32-bit floats .*convert it",
                                     "0/f.tif")


def case_int32_png_free_range(root):
    from PIL import Image

    img = Image.fromarray(np.full((4, 4), 70000, dtype=np.int32), "I")
    folder = folder_of_images(root / "d", {"2/i.tif": pil_bytes(img, "TIFF")})
    return folder, custom(), Refused(r"2/i.tif: its pixels are 32-bit integers", "2/i.tif")


def case_transparent(root):
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    rgba[0, 0, 3] = 10  # one pixel not opaque
    folder = folder_of_images(root / "d", {"0/t.png": png(rgba)})
    return folder, custom(shape="3,4,4"), Refused(r"0/t.png: it has transparent pixels", "0/t.png")


def case_opaque_alpha(root):
    rgba = np.dstack([np.full((4, 4), v, np.uint8) for v in (10, 20, 30, 255)])
    folder = folder_of_images(root / "d", {"2/o.png": png(rgba)})
    expected = np.array([10, 20, 30], dtype=np.uint8)[:, None, None] * np.ones((1, 4, 4), np.uint8)
    return folder, custom(shape="3,4,4"), Read([2], expected[None])


def case_grey_palette(root):
    from PIL import Image

    img = Image.new("P", (4, 4))
    img.putpalette([c for v in range(256) for c in (v, v, v)])
    img.putdata([7, 9] * 8)
    folder = folder_of_images(root / "d", {"1/p.png": pil_bytes(img)})
    return folder, custom(), Read([1], np.array([7, 9] * 8, np.uint8).reshape(1, 1, 4, 4))


def case_stray_file_keeps_the_layout(root):
    # a README beside class folders 0, 1, 2, 10: still an image folder, every label its folder's
    folder = folder_of_images(root / "d", {"README.md": b"my data",
                                           **{f"{c}/x.png": png(grey(c)) for c in (0, 1, 2, 10)}})
    # (listed in name order: '0', '1', '10', '2')
    return folder, custom(classes=11), Read([0, 1, 10, 2], np.stack(
        [grey(c)[None] for c in (0, 1, 10, 2)]), (r"skipped 1 file\(s\) beside the label "
                                                  r"folders: README.md",))


def case_zero_padded_label(root):
    folder = folder_of_images(root / "d", {"01/x.png": png(grey(1))})
    return folder, custom(), Refused(r"d/01: an image folder's subfolders are the label indices "
                                     r".* not '01': rename it", "d/01")


def case_subfolders_and_skips(root):
    folder = folder_of_images(root / "d", {
        "0/a.png": png(grey(3)), "0/more/b.png": png(grey(4)), "0/notes.txt": b"text",
        "0/.hidden.png": b"not even an image", "1/c.png": png(grey(5))})
    return folder, custom(), Read([0, 0, 1], np.stack([grey(v)[None] for v in (3, 4, 5)]), (
        r"skipped 1 hidden or system file\(s\) or folder\(s\): 0/.hidden.png",
        r"skipped 1 file\(s\) without an image suffix .*: 0/notes.txt"))


def case_label_out_of_range(root):
    folder = folder_of_images(root / "d", {"3/x.png": png(grey(1))})
    return folder, custom(), Refused(r"d/3: label 3 is outside dataset 'custom''s 3 classes",
                                     "d/3")


def case_header_bomb(root):
    # a 20000 x 20000 header: refused from the header, before anything is decoded
    folder = folder_of_images(root / "d", {"0/big.png": png(grey(0), size=(20000, 20000))})
    return folder, custom(), Refused(r"0/big.png: its header declares too many pixels", "big.png")


def case_large_header_refused_before_decoding(root):
    # 12000 x 12000 in the header, 4 x 4 of data: a decoder would fail on the missing rows, the
    # size check (from the header) comes first and says what is wrong
    folder = folder_of_images(root / "d", {"0/l.png": png(grey(0), size=(12000, 12000))})
    return folder, custom(), Refused(r"0/l.png: a 12000x12000 image with 1 channel\(s\), and "
                                     r"dataset 'custom' takes 4x4 with 1", "l.png")


def case_multi_frame(root):
    from PIL import Image

    frames = [Image.new("L", (4, 4), v) for v in (1, 2)]
    data = pil_bytes(frames[0], "TIFF", save_all=True, append_images=frames[1:])
    folder = folder_of_images(root / "d", {"0/stack.tif": data})
    return folder, custom(), Refused(r"0/stack.tif: it holds 2 frames", "stack.tif")


def case_fifo_image(root):
    folder = folder_of_images(root / "d", {"0/a.png": png(grey(1))})
    os.mkfifo(folder / "0" / "b.png")
    return folder, custom(), Refused(r"0/b.png is a named pipe \(FIFO\), not a regular file: "
                                     r"remove it", "b.png")


def case_socket_in_folder(root):
    folder = folder_of_images(root / "d", {"0/a.png": png(grey(1))})
    case_socket_in_folder.sock = plant_socket(folder / "0" / "s.png")
    return folder, custom(), Refused(r"0/s.png is a socket, not a regular file", "s.png")


def case_link_leaving_refused(root):
    write(root / "elsewhere" / "e.png", png(grey(9)))
    folder = folder_of_images(root / "d", {"0/a.png": png(grey(1))})
    os.symlink(root / "elsewhere" / "e.png", folder / "0" / "e.png")
    return folder, custom(), Refused(r"0/e.png is a link to .*elsewhere/e.png, outside the data "
                                     r"folder .*data-follow-links=true", "0/e.png")


def case_link_leaving_allowed(root):
    folder, keys, _ = case_link_leaving_refused(root)
    return folder, keys, Read([0, 0], np.stack([grey(1)[None], grey(9)[None]]))


def case_link_inside_followed(root):
    folder = folder_of_images(root / "d", {"0/a.png": png(grey(1))})
    (folder / "1").mkdir()
    os.symlink(folder / "0" / "a.png", folder / "1" / "same.png")
    return folder, custom(), Read([0, 1], np.stack([grey(1)[None]] * 2))


def case_link_loop(root):
    folder = folder_of_images(root / "d", {"0/a.png": png(grey(1))})
    os.symlink(folder / "0", folder / "0" / "again")
    return folder, custom(), Refused(r"0/again is a folder the reader has been in already", "again")


def case_parquet_16bit(root):
    values = (np.arange(16).reshape(4, 4) * 4000).astype(np.uint16)
    folder = parquet_folder(root / "d", [cell(png(values, bits=16))], [2])
    return folder, custom(), Read([2], (values // 256)[None, None])


def case_parquet_float_labels(root):
    folder = parquet_folder(root / "d", [cell(png(grey(v))) for v in (1, 2)], [1.0, 2.7])
    return folder, custom(), Refused(r"train-00000-of-00001.parquet, row 1: its label 2.7 is not "
                                     r"a class index", "train-00000-of-00001.parquet, row 1")


def case_parquet_whole_float_labels(root):
    folder = parquet_folder(root / "d", [cell(png(grey(v))) for v in (1, 2)], [2.0, 0.0])
    return folder, custom(), Read([2, 0], np.stack([grey(1)[None], grey(2)[None]]))


def case_parquet_null_label(root):
    folder = parquet_folder(root / "d", [cell(png(grey(1))), cell(png(grey(2)))], [0, None])
    return folder, custom(), Refused(r"parquet, row 1: it has no label \(null\)", "row 1")


def case_parquet_null_image(root):
    folder = parquet_folder(root / "d", [cell(png(grey(1))), None], [0, 1])
    return folder, custom(), Refused(r"parquet, row 1: it has no image \(null\)", "row 1")


def case_parquet_raw_bytes(root):
    import pyarrow as pa

    folder = parquet_folder(root / "d", [bytes(16)], [0], image_type=pa.binary())
    return folder, custom(), Refused(r"parquet, row 0: not a readable image", "row 0")


def case_parquet_nested_lists(root):
    import pyarrow as pa

    folder = parquet_folder(root / "d", [[[1, 2], [3, 4]]], [0],
                            image_type=pa.list_(pa.list_(pa.int64())))
    return folder, custom(), Refused(r"parquet, row 0: the image column holds nested lists of "
                                     r"numbers, not the bytes of an image file", "row 0")


def case_parquet_corrupt_image(root):
    folder = parquet_folder(root / "d", [cell(png(grey(1))[:40])], [0])
    return folder, custom(), Refused(r"parquet, row 0: (cannot be decoded|not a readable image)",
                                     "row 0")


def case_parquet_path_only(root):
    folder = parquet_folder(root / "d", [{"bytes": None, "path": "/etc/passwd"}], [0])
    return folder, custom(), Refused(r"parquet, row 0: the image is not in the file, only its "
                                     r"path '/etc/passwd'", "row 0")


def case_parquet_string_label(root):
    folder = parquet_folder(root / "d", [cell(png(grey(1)))], ["cat"])
    return folder, custom(), Refused(r"parquet, row 0: its label 'cat' is not a class index",
                                     "row 0")


def case_save_to_disk_split_escaping(root):
    folder = root / "d"
    write(folder / "dataset_dict.json", json.dumps({"splits": ["../../elsewhere"]}).encode())
    return folder, custom(), Refused(r"dataset_dict.json: 'splits' is \['../../elsewhere'\], not "
                                     r"a list of split names", "dataset_dict.json")


def case_save_to_disk_file_escaping(root):
    folder = root / "d"
    write(folder / "state.json", json.dumps({"_data_files": [
        {"filename": "../../outside.arrow"}]}).encode())
    return folder, custom(), Refused(r"state.json: '_data_files' is .*, not a list of .arrow "
                                     r"file names in its folder", "state.json")


def case_save_to_disk_digits(root):
    from feddata.digits import load_digits_dataset

    ds = load_digits_dataset().select(range(6))
    ds.save_to_disk(str(root / "d"))
    x = np.asarray(ds["image"], dtype=np.float32).reshape(6, 1, 8, 8)
    return root / "d", {"dataset": "digits"}, Read(list(ds["label"]), x)


DATA_CASES = [DataCase(f.__name__[5:], f) for f in (
    case_png16, case_rgb16, case_float_tiff, case_int32_png_free_range, case_transparent,
    case_opaque_alpha, case_grey_palette, case_stray_file_keeps_the_layout,
    case_zero_padded_label, case_subfolders_and_skips, case_label_out_of_range,
    case_header_bomb, case_large_header_refused_before_decoding, case_multi_frame,
    case_fifo_image, case_socket_in_folder, case_link_leaving_refused, case_link_inside_followed,
    case_link_loop, case_parquet_16bit, case_parquet_float_labels,
    case_parquet_whole_float_labels, case_parquet_null_label, case_parquet_null_image,
    case_parquet_raw_bytes, case_parquet_nested_lists, case_parquet_corrupt_image,
    case_parquet_path_only, case_parquet_string_label, case_save_to_disk_split_escaping,
    case_save_to_disk_file_escaping, case_save_to_disk_digits)] + [
    DataCase("link_leaving_allowed", case_link_leaving_allowed, follow_links=True)]


@pytest.mark.parametrize("case", DATA_CASES, ids=lambda c: c.name)
def test_a_nodes_folder_is_read_as_stored_or_refused_and_the_check_agrees(tmp_path, case):
    from feddata.own_data import read_own_data
    from feddata.specs import spec_of

    folder, keys, expect = case.make(tmp_path)
    with guarded(tmp_path, tmp_path / "out"):
        code, out, err = cli(folder, keys, case.follow_links)
        prepared = node(folder, keys, case.follow_links)
    if isinstance(expect, Refused):
        assert code == 1 and out == "", (code, out, err)
        assert re.search(expect.pattern, err) and expect.file in err, err
        assert isinstance(prepared, Exception)
        assert err == f"error: {prepared}\n"  # the node refuses with the very same message
        return
    assert code == 0, err
    assert not isinstance(prepared, Exception), prepared
    n = len(expect.y)
    counts = {label: expect.y.count(label) for label in sorted(set(expect.y))}
    assert f"{n} examples" in out and f"labels {counts}" in out, out
    assert f"{n - len(prepared.val_y)} to train on" in out  # the node holds out what it says
    assert len(prepared.train_y) + len(prepared.val_y) == n
    got = sorted(prepared.train_y.tolist() + prepared.val_y.tolist())
    assert got == sorted(expect.y)
    for pattern in expect.skipped:
        assert re.search(pattern, out), out
    spec = spec_of(settings_of(keys))
    data = read_own_data(str(folder), spec, keys["dataset"], follow_links=case.follow_links)
    assert data.y.tolist() == expect.y
    if expect.x is not None:
        assert data.x.shape == expect.x.shape and np.array_equal(data.x.numpy(), expect.x)


def test_the_check_and_the_run_config_refuse_the_same_ranges(tmp_path):
    """client-val-fraction 1.5 (and 1.0, the open end) passed `feddata check` before; the check
    now refuses what the run config refuses, with one definition of the range."""
    from feddata.specs import CLIENT_VAL_FRACTION
    from run_config import ConfigError, resolve
    from run_config.schema import KEYS_BY_NAME

    folder = folder_of_images(tmp_path / "d", {"0/a.png": png(grey(1))})
    key = KEYS_BY_NAME["client-val-fraction"]
    assert (key.low, key.high, key.high_open) == (0.0, 1.0, True) == (
        CLIENT_VAL_FRACTION.low, CLIENT_VAL_FRACTION.high, CLIENT_VAL_FRACTION.high_open)
    with guarded(tmp_path, tmp_path / "out"):
        for value, refused in ((1.5, True), (1.0, True), (-0.1, True), (0.99, False)):
            code, _, err = cli(folder, {**custom(), "client-val-fraction": value})
            assert code == (2 if refused else 0), err
            if refused:
                assert f"'client-val-fraction' = {value}: out of range" in err
                assert "--client-val-fraction" in err
            rc = {**custom(), "client-data": "own", "test-data": "none",
                  "fraction-evaluate": 0.5, "client-val-fraction": value}
            if refused:
                with pytest.raises(ConfigError, match="client-val-fraction"):
                    resolve(rc)
            else:
                resolve(rc)
        code, _, err = cli(folder, custom(classes=2_000_000))
        assert code == 2 and "at most 1,000,000" in err
        with pytest.raises(ConfigError, match="custom-classes"):
            resolve({**custom(classes=2_000_000), "client-data": "own", "test-data": "none",
                     "fraction-evaluate": 0.5})


def test_the_check_command_does_not_wait_on_a_named_pipe(tmp_path):
    """As a separate process, as an operator runs it: a FIFO where an image should be."""
    folder = folder_of_images(tmp_path / "d", {"0/a.png": png(grey(1))})
    os.mkfifo(folder / "0" / "pipe.png")
    with guarded(tmp_path, tmp_path / "out"):
        done = subprocess.run([sys.executable, "-m", "feddata", "check", str(folder),
                               "--dataset", "custom", "--classes", "3", "--shape", "1,4,4"],
                              cwd=ROOT, capture_output=True, text=True, timeout=CASE_SECONDS)
    assert done.returncode == 1 and "pipe.png is a named pipe (FIFO)" in done.stderr


def test_a_named_pipe_at_the_nodes_cache_files_name_is_replaced_not_waited_on(tmp_path):
    """A FIFO where a node's cached copy of its data should be: rebuilt, never opened."""
    from feddata import disk_cache

    folder = folder_of_images(tmp_path / "d", {"0/a.png": png(grey(1)), "1/b.png": png(grey(2)),
                                               "2/c.png": png(grey(3))})
    from feddata import DataSettings
    from run_config import resolve

    cfg = DataSettings.from_config(resolve({**custom(), "client-data": "own", "test-data": "none",
                                            "fraction-evaluate": 0.5}))
    cache = tmp_path / "cache"
    cache.mkdir()
    target = disk_cache.own_data_file(cache, disk_cache.own_data_key(cfg, str(folder)))
    os.mkfifo(target)
    disk_cache._memory.clear()
    with time_bound(), guarded(tmp_path, cache):
        part = disk_cache.load_prepared_own_data(cfg, str(folder), cache)
    assert target.is_file() and sorted(part.train_y.tolist() + part.val_y.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("marker, says", [
    (json.dumps({"splits": ["train", "../../elsewhere"]}).encode(), "not a list of split names"),
    (json.dumps({"splits": "train"}).encode(), "not a list of split names"),
    (b"{not json", "dataset_dict.json is not valid JSON"),
    (b" " * (17 * 2**20), "more than the 16.0 MiB"),
    ("fifo", "is a named pipe (FIFO)"),
], ids=["a-path", "a-string", "not-json", "huge", "fifo"])
def test_a_servers_dataset_path_marker_is_read_bounded_and_its_splits_checked(tmp_path, marker,
                                                                               says):
    """The server's copy of a hub dataset (`dataset-path`): its save_to_disk marker."""
    from feddata.sources import DataSourceError, local_copy_kwargs

    folder = tmp_path / "copy"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "data-00000-of-00001.arrow").write_bytes(b"")
    if marker == "fifo":
        os.mkfifo(folder / "dataset_dict.json")
    else:
        (folder / "dataset_dict.json").write_bytes(marker)
    with time_bound(), pytest.raises(DataSourceError, match=re.escape(says)):
        local_copy_kwargs(str(folder))
    (folder / "dataset_dict.json").unlink()
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    assert local_copy_kwargs(str(folder))["data_files"] == {
        "train": [str(folder / "train" / "data-00000-of-00001.arrow")]}


def hub_copy_with_a_path(folder: Path, path: Path, feature: str) -> Path:
    """A local copy in the hub's parquet layout (`data/train-*`, `data/test-*`) of 28x28 grey
    PNGs whose training row 3 holds no bytes, only `path`: as a plain struct<bytes, path>
    column, or as datasets' own `Image` feature (which `datasets` decodes itself)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import ClassLabel, Dataset, Features, Image

    (folder / "data").mkdir(parents=True)
    for split, n in (("train", 6), ("test", 3)):
        rows = [cell(png(grey(10 * i, (28, 28)))) for i in range(n)]
        if split == "train":
            rows[3] = {"bytes": None, "path": str(path)}
        file = folder / "data" / f"{split}-00000-of-00001.parquet"
        if feature == "struct":
            struct_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
            pq.write_table(pa.table({"image": pa.array(rows, type=struct_type),
                                     "label": pa.array(range(n))}), file)
        else:
            Dataset.from_dict({"image": rows, "label": list(range(n))}, features=Features(
                {"image": Image(), "label": ClassLabel(num_classes=10)})).to_parquet(str(file))
    return folder


@pytest.mark.parametrize("feature", ["struct", "image-feature"])
@pytest.mark.parametrize("target", ["image-elsewhere", "fifo"])
def test_a_dataset_path_image_held_only_as_a_path_is_refused_never_opened(tmp_path, target,
                                                                          feature):
    """A server's (and a simulated client's) copy of a hub dataset (`dataset-path`) whose image
    is not in the data, only a path to it: refused naming the example, as a node's own folder
    refuses it (`case_parquet_path_only`). It was opened wherever it pointed, outside the copy,
    through links (an image elsewhere became training data), and a named pipe there blocked the
    run for ever."""
    from feddata.__main__ import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if target == "fifo":
        path = elsewhere / "pipe.png"
        os.mkfifo(path)
    else:
        path = write(elsewhere / "a.png", png(grey(7, (28, 28))))
    folder = hub_copy_with_a_path(tmp_path / "copy", path, feature)
    out, err = io.StringIO(), io.StringIO()
    with time_bound(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", str(folder), "--dataset", "fashion-mnist", "--dataset-path"])
    assert code == 1 and out.getvalue() == "", (code, out.getvalue(), err.getvalue())
    assert re.fullmatch(rf"error: dataset-path '{re.escape(str(folder))}', train split .*"
                        rf"example \d+: the image is not in the data, only its path "
                        rf"'{re.escape(str(path))}': .*feddata\.save.*\n", err.getvalue()), \
        err.getvalue()


# --- run folders, the ServerApp's writes and reads ---------------------------------------------
SMALL = {"num-server-rounds": 1, "local-iterations": 1, "fraction-train": 1.0,
         "checkpoint-every": 1}


def run_server(out: Path, grid=None, **overrides) -> None:
    import server_app.app as server
    from fakegrid import FakeGrid, client_app_handler

    rc = {"out-dir": str(out), **SMALL, **overrides}
    grid = grid or FakeGrid(2, client_app_handler(rc, 2))
    server.main(grid, Context(run_id=7, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside out-dir that a planted link points to: it must never change."""
    return write(tmp_path / "home" / "precious.txt", b"the user's own file\n")


@pytest.mark.parametrize("planted", ["run.lock", "final_model.pt", "results.json",
                                     "checkpoint.pt", "metrics.csv"])
def test_a_link_planted_in_a_named_run_folder_is_never_written_through(tmp_path, victim,
                                                                       planted):
    """A neighbour on a shared out-dir makes out/exp1 and plants a link to the user's file; the
    run refuses it (run.lock) or replaces the link with its own file (the atomic writer)."""
    from run_config import ConfigError

    out = tmp_path / "out"
    (out / "exp1").mkdir(parents=True)
    os.symlink(victim, out / "exp1" / planted)
    with guarded(tmp_path, out):
        if planted == "run.lock":
            with pytest.raises(ConfigError, match=r"run.lock is a link .*precious.txt.*Remove"):
                run_server(out, **{"run-name": "exp1"})
        else:
            run_server(out, **{"run-name": "exp1"})
    if planted != "run.lock":
        assert not (out / "exp1" / planted).is_symlink()
        assert (out / "exp1" / planted).is_file()


def test_a_hard_linked_run_lock_is_refused(tmp_path, victim):
    from run_config import ConfigError

    out = tmp_path / "out"
    (out / "exp1").mkdir(parents=True)
    os.link(victim, out / "exp1" / "run.lock")
    with guarded(tmp_path, out):
        with pytest.raises(ConfigError, match=r"run.lock has 2 names \(a hard link"):
            run_server(out, **{"run-name": "exp1"})


def test_a_run_folder_that_is_a_link_is_refused(tmp_path):
    from run_config import ConfigError

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "exp1")
    with guarded(tmp_path, out):
        with pytest.raises(ConfigError, match=r"'run-name' = 'exp1': .*exp1 is a link .*not a "
                                              r"folder"):
            run_server(out, **{"run-name": "exp1"})
    assert list(elsewhere.iterdir()) == []


def test_a_tensorboard_folder_that_is_a_link_is_refused(tmp_path):
    from fileio.errors import UnusableFile

    pytest.importorskip("torch.utils.tensorboard")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (out / "exp1").mkdir(parents=True)
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "exp1" / "tensorboard")
    with guarded(tmp_path, out):
        with pytest.raises(UnusableFile, match=r"tensorboard is a link"):
            run_server(out, **{"run-name": "exp1", "tensorboard": True})
    assert list(elsewhere.iterdir()) == []


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory) -> Path:
    """An out-dir holding one unfinished run without a run-name, with a checkpoint of round 1 of
    2 (its server died when round 2's instructions went out)."""
    from fakegrid import FakeGrid, client_app_handler
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1

    class Dies(FakeGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and messages[0].metadata.message_type == "train" and \
                    messages[0].content["config"]["server-round"] == 2:
                raise KeyboardInterrupt  # (as a killed process: the folder says 'running')
            return super().send_and_receive(messages, timeout=timeout)

    out = tmp_path_factory.mktemp("unfinished") / "out"
    rc = {"out-dir": str(out), **SMALL, "num-server-rounds": 2}
    with pytest.raises(KeyboardInterrupt):
        run_server(out, grid=Dies(2, client_app_handler(rc, 2)), **{"num-server-rounds": 2})
    return out


def _sibling(out: Path, name: str, results: bytes | None) -> Path:
    folder = out / name
    folder.mkdir()
    write(folder / "checkpoint.pt", b"fedacg-gc checkpoint sha256=" + b"0" * 64 + b"\n")
    if results is not None:
        write(folder / "results.json", results)
    return folder


UNNAMED = {"config": {"run-name": "", "method": "fedacg", "num-server-rounds": 2},
           "summary": {"complete": False}}


def plant_fifo_results(out):
    os.mkfifo(_sibling(out, "a-fifo", None) / "results.json")


def plant_bad_json(out):
    _sibling(out, "b-json", b'{"config": {"run-name": ""}, "summary": ')


def plant_summary_null(out):
    _sibling(out, "c-null", json.dumps({**UNNAMED, "summary": None}).encode())


def plant_round_minus_one(out):
    _sibling(out, "d-minus", json.dumps({**UNNAMED, "rounds": [{"round": -1}]}).encode())


def plant_fifo_checkpoint(out):
    folder = out / "e-pipe"
    folder.mkdir()
    write(folder / "results.json", json.dumps(UNNAMED).encode())
    os.mkfifo(folder / "checkpoint.pt")


def plant_linked_folder(out):
    target = out.parent / "linked-target"
    target.mkdir(exist_ok=True)
    write(target / "results.json", json.dumps(UNNAMED).encode())
    write(target / "checkpoint.pt", b"x")
    os.symlink(target, out / "f-link")


def plant_other_users_folder(out):
    """Another user's unfinished run, its files as this app writes them (issue 58): not this
    run's to resume (before, two unfinished runs made 'latest' ambiguous, or it was resumed)."""
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    folder = _sibling(out, "g-others", json.dumps(UNNAMED).encode())
    for path in (folder, *folder.iterdir()):
        os.chown(path, 65534, 65534)


@pytest.mark.parametrize("plant", [plant_fifo_results, plant_bad_json, plant_summary_null,
                                   plant_round_minus_one, plant_fifo_checkpoint,
                                   plant_linked_folder, plant_other_users_folder],
                         ids=lambda f: f.__name__[6:])
def test_resume_latest_is_never_stopped_by_a_siblings_bad_files(tmp_path, unfinished, plant,
                                                                caplog):
    import shutil

    from server_app.checkpoint import find_checkpoint

    out = tmp_path / "out"
    shutil.copytree(unfinished, out)
    (mine,) = [p for p in out.iterdir()]
    plant(out)
    with guarded(tmp_path, out / mine.name):  # (the siblings may not change either)
        found = find_checkpoint("latest", str(out), "", "fedacg")
        assert found == mine / "checkpoint.pt"
        run_server(out, **{"resume": "latest", "num-server-rounds": 2})
    results = json.loads((mine / "results.json").read_text())
    assert results["status"] == "complete" and [r["round"] for r in results["rounds"]] == [0, 1, 2]
    assert "passed over" in caplog.text or plant is plant_linked_folder


# --- checkpoints and results read back --------------------------------------------------------
def test_a_re_signed_checkpoint_of_round_minus_one_is_refused(tmp_path):
    from server_app.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

    (tmp_path / "out").mkdir()
    save_checkpoint(tmp_path / "out", -1, {}, {}, [{"round": 0}])  # (signed, as a forger would)
    with guarded(tmp_path, tmp_path / "out"):
        with pytest.raises(CheckpointError, match=r"its round is -1, not a whole number in "
                                                  r"\[0, 1e\+06\]"):
            load_checkpoint(tmp_path / "out" / "checkpoint.pt")


def test_a_checkpoint_whose_rows_go_past_its_round_is_refused(tmp_path):
    from server_app.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

    (tmp_path / "out").mkdir()
    save_checkpoint(tmp_path / "out", 1, {}, {}, [{"round": r} for r in range(4)])
    with guarded(tmp_path, tmp_path / "out"):
        with pytest.raises(CheckpointError, match=r"its rows go on past its round 1"):
            load_checkpoint(tmp_path / "out" / "checkpoint.pt")


def test_a_checkpoint_whose_rng_states_are_not_the_processs_is_refused(tmp_path):
    """Re-signed with a made-up RNG state: refused when read, not a bare error at resume."""
    import io as _io

    from fileio.atomic import checksum_line
    from server_app.checkpoint import (CHECKSUM_PREFIX, CheckpointError, load_checkpoint,
                                       rng_state)

    rng = {**rng_state(), "numpy": ("MT19937", torch.zeros(5, dtype=torch.int64), 0, 0, 0.0)}
    buf = _io.BytesIO()
    torch.save({"format": 1, "round": 1, "config": {}, "strategy": {}, "rng": rng,
                "rows": [{"round": 0}, {"round": 1}]}, buf)
    data = buf.getvalue()
    path = write(tmp_path / "out" / "checkpoint.pt", checksum_line(CHECKSUM_PREFIX, data) + data)
    with guarded(tmp_path, tmp_path / "out"):
        with pytest.raises(CheckpointError, match=r"its random-number states are not those of "
                                                  r"Python, NumPy and torch"):
            load_checkpoint(path)


def test_a_checkpoint_that_is_a_named_pipe_is_refused(tmp_path):
    from server_app.checkpoint import CheckpointError, load_checkpoint

    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "checkpoint.pt")
    with guarded(tmp_path, tmp_path / "out"):
        with pytest.raises(CheckpointError, match=r"is a named pipe \(FIFO\), not a regular"):
            load_checkpoint(tmp_path / "out" / "checkpoint.pt")


def fifo_results(folder):
    os.mkfifo(folder / "results.json")
    return r"results.json is a named pipe \(FIFO\)"


def huge_results(folder):
    with open(folder / "results.json", "wb") as f:  # sparse: no disk used, 300 MiB long
        f.truncate(300 * 2**20)
    return r"results.json is 300.0 MiB, more than the 256.0 MiB"


def summary_null(folder):
    write(folder / "results.json", json.dumps({**UNNAMED, "summary": None}).encode())
    return r"'summary' is None, not an object"


def rounds_not_a_list(folder):
    write(folder / "results.json", json.dumps({**UNNAMED, "rounds": {"0": 1}}).encode())
    return r"'rounds' is dict, not a list"


def status_not_text(folder):
    write(folder / "results.json", json.dumps({**UNNAMED, "status": ["failed"]}).encode())
    return r"'status' is \['failed'\], not one of running, complete, failed"


def nan_in_results(folder):
    write(folder / "results.json", b'{"config": {}, "rounds": [{"round": 0, "acc": NaN}]}')
    return r"results.json is not valid JSON \(NaN is not a JSON number"


def linked_results(folder):
    target = write(folder.parent.parent / "somewhere.json", json.dumps(UNNAMED).encode())
    os.symlink(target, folder / "results.json")
    return r"results.json is a link .*links are not followed"


@pytest.mark.parametrize("make", [fifo_results, huge_results, summary_null, rounds_not_a_list,
                                  status_not_text, nan_in_results, linked_results],
                         ids=lambda f: f.__name__)
def test_status_says_cannot_read_never_failed_for_a_results_file_it_cannot_use(tmp_path, make,
                                                                              capsys):
    from reporting.status import main

    folder = tmp_path / "out" / "run"
    folder.mkdir(parents=True)
    pattern = make(folder)
    with guarded(tmp_path, tmp_path / "out"):
        code = main([str(folder)])
    out = capsys.readouterr().out
    assert code == 4, out  # 'cannot read': never 1, which says the run failed
    assert out.startswith("unreadable") and re.search(pattern, out), out


# --- set-up and sweep files --------------------------------------------------------------------
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))  # 9^9 = 387 million strings, from 400 bytes


def bad_setup(kind: str, path: Path) -> str:
    if kind == "aliases":
        path.write_text(ALIAS_BOMB)
        return r"an anchor or alias \('&' / '\*'\) at line 1"
    if kind == "fifo":
        os.mkfifo(path)
        return r"is a named pipe \(FIFO\)"
    if kind == "not-utf8":
        path.write_bytes("paper: caf\xe9\n".encode("latin-1"))
        return r"is not UTF-8 text \(byte 10 is 0xe9\): save it as UTF-8"
    if kind == "malformed":
        path.write_text("paper: [unclosed\n")
        return r"cannot be read as YAML"
    if kind == "federation-list":
        path.write_text("paper: p\nmethod: fedavg\nfederation: [10]\nrun-config: {}\n"
                        "reported: {columns: [], rows: {}}\n")
        return r"federation must be \{num-supernodes: <int >= 1>\}"
    if kind == "huge-int":
        path.write_text("paper: p\nmethod: fedavg\nfederation: {num-supernodes: "
                        + "9" * 5000 + "}\n")
        return r"holds a value that cannot be read"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["aliases", "fifo", "not-utf8", "malformed", "federation-list",
                                  "huge-int"])
def test_a_setup_file_is_read_bounded_or_refused_naming_it(tmp_path, kind):
    from run_config import SetupError, load_setup

    path = tmp_path / "mine.yaml"
    pattern = bad_setup(kind, path)
    with guarded(tmp_path, tmp_path / "out"):
        with pytest.raises(SetupError, match=pattern) as err:
            load_setup(str(path))
    assert "mine.yaml" in str(err.value)


def write_sweep(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


BASE_SWEEP = "run-config: {num-server-rounds: 1, local-iterations: 1}\nmethods: {fedavg: {}}\n"


@pytest.mark.parametrize("text, pattern", [
    (ALIAS_BOMB, r"an anchor or alias"),
    (BASE_SWEEP + "federation-config: [num-supernodes, 2]\n",
     r"federation-config: expected a mapping of keys to values, got \['num-supernodes', 2\]"),
    (BASE_SWEEP + "cell-timeout: abc\n", r"cell-timeout must be a number of seconds > 0, got "
                                         r"'abc'"),
    (BASE_SWEEP + "seeds: [0, .nan]\n", r"seeds: expected a list of ints, got \[0, nan\]"),
    (BASE_SWEEP + "target-accs: [80, .inf]\n", r"target-accs: expected finite numbers"),
    ("methods: {fedavg: {federation-config: 3}}\n", r"methods.fedavg: federation-config: "
                                                    r"expected a mapping"),
    ("run-config: {num-server-rounds: 1}\nmethods: [fedavg]\n", r"'methods' must map"),
    ("methods: {fedavg: nothere.toml}\n", r"config file .*nothere.toml not found"),
    (BASE_SWEEP + "name: [a, b]\n", r"'name' must be a string"),
], ids=["aliases", "federation-list", "cell-timeout-abc", "seed-nan", "target-inf",
        "method-federation-int",
        "methods-list", "missing-file", "name-list"])
def test_a_bad_sweep_file_is_refused_before_anything_is_made(tmp_path, text, pattern, capsys):
    from experiments.sweep import main

    sweep = write_sweep(tmp_path / "in" / "s.yaml", text)
    with guarded(tmp_path, tmp_path / "out"):
        code = main([str(sweep), "--out-dir", str(tmp_path / "out"), "--in-process"])
    err = capsys.readouterr().err
    assert code == 2 and re.search(pattern, err), err
    assert not (tmp_path / "out").exists()  # nothing made: no cell folder before the refusal


def test_sweep_names_become_folders_inside_the_sweep_only(tmp_path):
    from experiments.sweep import load_sweep

    sweep_file = write_sweep(tmp_path / "in" / "s.yaml", (
        "name: ..\nrun-config: {num-server-rounds: 1}\n"
        "methods: {'..': {method: fedavg}, '../../x': {method: fedacg}}\n"
        "settings: {'.': {}, '/etc': {seed: 1}}\n"))
    with guarded(tmp_path, tmp_path / "out"):
        sweep = load_sweep(sweep_file, tmp_path / "out")
    assert sweep.dir == (tmp_path / "out" / "_").resolve()
    for c in sweep.cells:
        rel = c.run_dir.relative_to(sweep.dir)  # (raises when outside)
        assert ".." not in rel.parts and "." not in rel.parts, rel


def test_a_linked_cell_folder_and_a_linked_log_are_never_written_through(tmp_path, victim):
    from experiments.sweep import load_sweep, start_cell, sweep_folder
    from fileio.errors import UnusableFile
    from fileio.in_place import fresh_log

    sweep_file = write_sweep(tmp_path / "in" / "s.yaml", BASE_SWEEP)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    sweep = load_sweep(sweep_file, out)
    (c,) = sweep.cells
    elsewhere.mkdir()
    (sweep.dir / "runs").mkdir(parents=True)
    os.symlink(elsewhere, sweep.dir / "runs" / "fedavg")  # a neighbour's link
    with guarded(tmp_path, out):
        with pytest.raises(UnusableFile, match=r"runs/fedavg is a link .*Remove the link"):
            start_cell(c, sweep)
    assert list(elsewhere.iterdir()) == []
    os.unlink(sweep.dir / "runs" / "fedavg")
    sweep_folder(sweep, *c.run_dir.relative_to(sweep.dir).parts)
    os.symlink(victim, c.run_dir / "flwr-run.log")
    with guarded(tmp_path, out):
        with fresh_log(c.run_dir / "flwr-run.log") as log:
            log.write("the run's log\n")
    assert (c.run_dir / "flwr-run.log").read_text() == "the run's log\n"
    assert not (c.run_dir / "flwr-run.log").is_symlink()


def test_table_only_passes_over_a_cell_whose_results_cannot_be_read(tmp_path, capsys):
    from experiments.sweep import load_sweep, main

    sweep_file = write_sweep(tmp_path / "in" / "s.yaml", BASE_SWEEP)
    sweep = load_sweep(sweep_file, tmp_path / "out")
    (c,) = sweep.cells
    c.run_dir.mkdir(parents=True)
    write(c.run_dir / "results.json", json.dumps({
        "config": {"num-server-rounds": 1}, "status": "complete",
        "summary": {"complete": True}, "rounds": [{"round": 0}, {"round": 1, "ema-acc": "x"}],
    }).encode())
    with guarded(tmp_path, tmp_path / "out"):
        code = main([str(sweep_file), "--out-dir", str(tmp_path / "out"), "--table-only"])
    err = capsys.readouterr().err
    assert code == 1 and "no finished cell" in err, err


def test_a_run_config_file_that_is_a_named_pipe_is_refused_by_the_check(tmp_path, capsys):
    from run_config.check import main

    os.mkfifo(tmp_path / "rc.toml")
    with guarded(tmp_path, tmp_path / "out"):
        code = main(["--run-config", str(tmp_path / "rc.toml")])
    err = capsys.readouterr().err
    assert code == 1 and re.search(r"rc.toml is a named pipe \(FIFO\)", err), err


def test_a_run_config_file_is_read_once_and_parsed_as_flower_parses_it(tmp_path, monkeypatch):
    """The check reads a .toml run config once (bounded) and flattens it as `flwr run` does;
    nothing opens the file a second time."""
    from flwr.common.config import parse_config_args

    from run_config.check import ConfigError, parse

    path = tmp_path / "rc.toml"
    path.write_text('method = "gcfed"\nlr = 0.1\n[a.b]\nc = 3\n')
    expected = parse_config_args([str(path)])
    assert expected == {"method": "gcfed", "lr": 0.1, "a.b.c": 3}
    monkeypatch.setattr(Path, "open", lambda *a, **k: pytest.fail("the file was opened again"))
    assert parse([str(path)]) == expected
    monkeypatch.undo()
    path.write_text("lr = = 1\n")
    with pytest.raises(ConfigError, match="rc.toml is not valid TOML"):
        parse([str(path)])


# --- writes that fail say where and what to do ------------------------------------------------
@pytest.mark.parametrize("code, fix", [
    (errno.ENOSPC, r"free space on the disk that holds .*out"),
    (errno.EROFS, r"out is on a read-only file system: write to a folder on another one"),
    (errno.EACCES, r"this process may not write in .*out: give it write permission there"),
], ids=["disk-full", "read-only", "no-permission"])
def test_a_write_that_fails_names_the_file_the_folder_and_the_fix(tmp_path, monkeypatch, code,
                                                                  fix):
    """As root the tests cannot make a folder unwritable or a disk full: the writer's own
    syscall fails instead, with the error the kernel gives."""
    from fileio.atomic import write_text_atomic
    from fileio.errors import UnusableFile

    out = tmp_path / "out"
    out.mkdir()

    def fails(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", fails)
    with guarded(tmp_path, out):
        with pytest.raises(UnusableFile, match=fix) as err:
            write_text_atomic(out / "results.json", "{}")
    assert f"cannot write {out / 'results.json'}: {os.strerror(code)}" in str(err.value)
    assert list(out.iterdir()) == []  # (no temporary file left)


def test_safe_name_keeps_names_in_their_folder():
    """Against a plain statement of the rule: no separator, control character or surrogate, not
    '', '.' or '..', at most 255 bytes; a safe name is kept as it is."""
    from fileio.names import safe_name

    for name in ["..", ".", "", "a/b", "a\\b", "x\x00y", "n\nl", "\udc80", "é" * 200, "../x",
                 "c1\x85\x9b", "line\u2028par\u2029", "ok name", "résumé", ".hidden"]:
        made = safe_name(name)
        assert made not in ("", ".", "..") and "/" not in made and "\\" not in made
        assert all(ord(c) >= 32 and not 127 <= ord(c) <= 159 for c in made)
        assert "\u2028" not in made and "\u2029" not in made  # (str.splitlines breaks there)
        assert len(made.encode()) <= 255
        if name in ("ok name", "résumé", ".hidden"):
            assert made == name
