"""Every `python -m feddata ...` entry point (`check`, `demo-folders`, `feddata.save`) ends bad
input, an option or a folder, with one message and the fix: a non-zero exit, one 'error:' line,
never a traceback (issue 58). One fault per case; the folders are made here, small.

Each case runs in this process (`main(argv)` of the entry point, its exit as the interpreter
would make it: no Python start and torch import per case). Each case runs as `python -m` as well:
one case per entry point in the default run (the `__main__` wiring, and the null-image row whose
parquet read once aborted the interpreter at exit), every case behind `long`."""

import gzip
import io
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

from entry_points import HOW, python_m, run_module

ROOT = Path(__file__).resolve().parents[1]


def idx_pair(folder: Path, prefix: str, n: int, dims=(28, 28)) -> None:
    """A gzipped IDX pair of `n` blank images, labels 0..9 in turn, written by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    images = b"\0\0\x08\x03" + struct.pack(">III", n, *dims) + bytes(n * dims[0] * dims[1])
    labels = b"\0\0\x08\x01" + struct.pack(">I", n) + bytes(i % 10 for i in range(n))
    for what, data in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
        (folder / f"{prefix}-{what}.gz").write_bytes(gzip.compress(data))


def null_image_parquet(folder: Path, splits=("train",)) -> Path:
    """The hub's parquet layout, 5 rows of 28x28 PNGs, row 2 with no image (null), in each of
    `splits`."""
    from datasets import ClassLabel, Dataset, Features, Image
    from PIL import Image as PILImage

    rows = []
    for i in range(5):
        buf = io.BytesIO()
        PILImage.new("L", (28, 28), i).save(buf, format="PNG")
        rows.append({"bytes": buf.getvalue(), "path": None})
    rows[2] = None
    (folder / "data").mkdir(parents=True)
    ds = Dataset.from_dict({"image": rows, "label": [0, 1, 2, 3, 4]},
                           features=Features({"image": Image(),
                                              "label": ClassLabel(num_classes=10)}))
    for split in splits:
        ds.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return folder


def make(tmp_path: Path, kind: str) -> Path:
    """A folder (or a file) with one fault."""
    path = tmp_path / kind
    if kind == "missing":
        return path
    if kind == "a-file":
        path.write_text("not a folder\n")
        return path
    path.mkdir()
    if kind == "train-only":
        idx_pair(path, "train", 30)
    elif kind == "both-pairs":
        idx_pair(path, "train", 30)
        idx_pair(path, "t10k", 10)
    elif kind == "overflowing-dims":
        idx_pair(path, "t10k", 10)
        (path / "train-images-idx3-ubyte").write_bytes(
            b"\0\0\x08\x03" + struct.pack(">III", 2**32 - 1, 2**32 - 1, 2**32 - 1))
        idx_pair(path, "train", 0)
        (path / "train-images-idx3-ubyte.gz").unlink()
    elif kind == "null-image":
        null_image_parquet(path)
    elif kind == "null-image-both-splits":
        null_image_parquet(path, ("train", "test"))
    elif kind == "readme-only":
        (path / "README.txt").write_text("the data will come later\n")
    elif kind == "fifo":
        idx_pair(path, "t10k", 10)
        idx_pair(path, "train", 30)
        (path / "train-labels-idx1-ubyte.gz").unlink()
        os.mkfifo(path / "train-labels-idx1-ubyte.gz")
    return path


def assert_one_message(out: subprocess.CompletedProcess, code: int, *words: str) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    assert out.returncode == code, (out.returncode, text)
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, out.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


CHECK = ("feddata", "check")
FM = ("--dataset", "fashion-mnist")

# (arguments, folder made by `make` (None: none), exit code, words of the one message)
CASES = {
    "check-no-folder": (CHECK, None, 2, ["required"]),
    "check-unknown-dataset": (CHECK + ("--dataset", "mnist"), "both-pairs", 2, ["mnist"]),
    "check-val-fraction-1": (CHECK + FM + ("--client-val-fraction", "1.0"), "both-pairs", 2,
                             ["client-val-fraction", "[0, 1)"]),
    "check-custom-one-class": (CHECK + ("--dataset", "custom", "--classes", "1", "--shape",
                                        "1,28,28"), "both-pairs", 2, ["custom-classes"]),
    "check-missing": (CHECK + FM, "missing", 1, ["does not exist"]),
    "check-a-file": (CHECK + FM, "a-file", 1, ["is a file, not a folder"]),
    "check-empty": (CHECK + FM, "empty", 1, ["is empty", "IDX files"]),
    "check-null-image": (CHECK + FM, "null-image", 1, ["row 2", "no image (null)"]),
    "check-overflowing-dims": (CHECK + FM, "overflowing-dims", 1,
                               ["train-images-idx3-ubyte", "4294967295x4294967295 images"]),
    "check-fifo": (CHECK + FM, "fifo", 1, ["train-labels-idx1-ubyte.gz", "named pipe"]),
    "dataset-path-empty": (CHECK + FM + ("--dataset-path",), "empty", 1,
                           ["is empty", "t10k-images-idx3-ubyte[.gz]", "feddata.save"]),
    "dataset-path-train-only": (CHECK + FM + ("--dataset-path",), "train-only", 1,
                                ["no t10k-images-idx3-ubyte[.gz]"]),
    "dataset-path-readme-only": (CHECK + FM + ("--dataset-path",), "readme-only", 1,
                                 ["no column 'image'", "feddata.save"]),
    "dataset-path-null-image": (CHECK + FM + ("--dataset-path",), "null-image-both-splits", 1,
                                ["train split", "it has no image (null)"]),
    "dataset-path-follow-links": (CHECK + FM + ("--dataset-path", "--follow-links"),
                                  "both-pairs", 2, ["--follow-links"]),
    "demo-no-nodes": (("feddata", "demo-folders", "--nodes", "0"), "empty", 2, ["--nodes 0"]),
    "demo-too-many-nodes": (("feddata", "demo-folders", "--nodes", "101"), "empty", 2,
                            ["--nodes 101", "1 to 100"]),
    "save-no-args": (("feddata.save",), None, 2, ["required"]),
    "save-idx-for-cifar10": (("feddata.save", "cifar10", "out", "--from-idx"), "both-pairs", 2,
                             ["--from-idx is for emnist and fashion-mnist"]),
    "save-idx-missing": (("feddata.save", "fashion-mnist", "out", "--from-idx"), "missing", 1,
                         ["no train-images-idx3-ubyte[.gz]"]),
    "save-emnist-idx-missing": (("feddata.save", "emnist", "out", "--from-idx"), "empty", 1,
                                ["no emnist-byclass-train-images-idx3-ubyte[.gz]"]),
    "save-from-missing": (("feddata.save", "cifar10", "out", "--from"), "missing", 1,
                          ["does not exist"]),
    "save-from-empty": (("feddata.save", "fashion-mnist", "out", "--from"), "empty", 1,
                        ["is empty"]),
}


def case_args(tmp_path: Path, case: str) -> tuple:
    """The case's arguments with its folder made in `tmp_path`."""
    args, kind, _, _ = CASES[case]
    if kind is not None:
        path = str(make(tmp_path, kind))
        args = args[:2] + (path,) + args[2:] if args[0] == "feddata" else args + (path,)
    return args


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_ends_with_one_message_and_no_traceback(tmp_path, case):
    _, _, code, words = CASES[case]
    assert_one_message(run_module("here", *case_args(tmp_path, case), cwd=tmp_path), code,
                       *words)


# as `python -m`: one case per entry point in the default run, all of them in the long set
BY_PYTHON_M = ("check-null-image", "demo-no-nodes", "save-no-args")


@pytest.mark.parametrize("case", [c if c in BY_PYTHON_M else pytest.param(c, marks=pytest.mark.long)
                                  for c in CASES])
def test_a_bad_input_ends_with_one_message_and_no_traceback_as_python_m(tmp_path, case):
    _, _, code, words = CASES[case]
    assert_one_message(python_m(*case_args(tmp_path, case), cwd=tmp_path), code, *words)


@pytest.mark.parametrize("how", HOW)
def test_a_demo_written_into_a_file_names_it(tmp_path, how):
    """demo-folders' out given as a file: the message names it."""
    out = make(tmp_path, "a-file")
    ran = run_module(how, "feddata", "demo-folders", str(out), "--nodes", "1", cwd=tmp_path)
    assert_one_message(ran, 1, str(out), "cannot write")


@pytest.mark.parametrize("how", HOW)
def test_save_into_a_file_is_one_message(tmp_path, how):
    source = make(tmp_path, "both-pairs")
    out = make(tmp_path, "a-file")
    ran = run_module(how, "feddata.save", "fashion-mnist", str(out), "--from-idx", str(source),
                     cwd=tmp_path)
    assert_one_message(ran, 1, "cannot write")


@pytest.mark.parametrize("how", HOW)
def test_the_run_and_the_check_agree_on_a_train_only_folder(tmp_path, how):
    """A folder of the training pair only: a node may train on it (its one split), the check
    says so and that a run's dataset-path needs the t10k pair; with --dataset-path it is
    refused as the run refuses it; with both pairs both splits are counted."""
    folder = make(tmp_path, "train-only")
    node = run_module(how, *CHECK, str(folder), *FM, cwd=tmp_path)
    assert node.returncode == 0 and "30 examples (IDX files)" in node.stdout
    assert "--dataset-path" in node.stdout and "Traceback" not in node.stderr
    both = make(tmp_path, "both-pairs")
    ok = run_module(how, *CHECK, str(both), *FM, "--dataset-path", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ("train 30 examples (10 of 10 labels), test 10 examples (10 of 10 labels), the "
            "server's test set: OK") in ok.stdout
    node = run_module(how, *CHECK, str(both), *FM, cwd=tmp_path)
    assert node.returncode == 0
    assert ("skipped 2 file(s) of the IDX test split, not read as data-path (it reads the train "
            "split); a run's dataset-path reads both splits") in node.stdout


def test_the_runs_reader_refuses_an_empty_dataset_path_by_name(tmp_path):
    """The server's own path (load_test_data): an empty dataset-path is a DataSourceError (the
    console prints it as one line) naming the IDX files and feddata.save, not datasets'
    EmptyDatasetError."""
    from feddata import DataSettings, load_test_data
    from feddata.sources import DataSourceError
    from run_config import resolve

    empty = make(tmp_path, "empty")
    settings = DataSettings.from_config(resolve(
        {"dataset": "fashion-mnist", "dataset-path": str(empty), "model": "mlp-gcfed",
         "partitioner": "iid"}))
    with pytest.raises(DataSourceError, match=r"is empty.*train-images-idx3-ubyte\[\.gz\].*"
                       r"python -m feddata.save fashion-mnist"):
        load_test_data(settings)


def test_parquet_and_arrow_files_reach_arrow_in_its_own_memory(tmp_path, monkeypatch):
    """The cause of `feddata check`'s abort on a null-image row (exit 134 in some runs):
    pyarrow, given a Python file, holds Python buffers that its thread pool releases after
    read() returned, racing the interpreter's exit. Each file must reach Arrow as a buffer
    Arrow allocated (its memory pool grows by the file's size), never as a Python object."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from feddata.own_data import OwnDataError, read_own_data
    from feddata.specs import DATASET_BY_NAME

    folder = make(tmp_path, "null-image")
    size = (folder / "data" / "train-00000-of-00001.parquet").stat().st_size
    seen = []
    real = pq.ParquetFile

    def spy(source, *args, **kwargs):
        seen.append((type(source), pa.total_allocated_bytes()))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", spy)
    before = pa.total_allocated_bytes()
    with pytest.raises(OwnDataError, match="row 2: it has no image"):
        read_own_data(str(folder), DATASET_BY_NAME["fashion-mnist"], "fashion-mnist")
    assert len(seen) == 1
    kind, allocated = seen[0]
    assert kind is pa.BufferReader and allocated - before >= size


@pytest.mark.parametrize("spare", [0, -1], ids=["fits", "one-byte-over"])
def test_a_parquet_file_larger_than_memory_is_refused_before_it_is_read(tmp_path, monkeypatch,
                                                                        spare):
    """A node's parquet file is read whole into Arrow's memory: one the size of the machine's
    memory is read (and then refused for its null row), one byte more is refused unread."""
    from feddata import own_data
    from feddata.specs import DATASET_BY_NAME

    folder = make(tmp_path, "null-image")
    size = (folder / "data" / "train-00000-of-00001.parquet").stat().st_size
    monkeypatch.setattr(own_data, "memory_bytes", lambda: size + spare)
    words = "no image (null)" if spare == 0 else f"is {size:,} bytes, more than this machine's"
    with pytest.raises(own_data.OwnDataError, match=re.escape(words)):
        own_data.read_own_data(str(folder), DATASET_BY_NAME["fashion-mnist"], "fashion-mnist")
