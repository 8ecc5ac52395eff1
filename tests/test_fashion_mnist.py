"""dataset = 'fashion-mnist': a folder of its four IDX files (Debian's dataset-fashion-mnist, or
the files as Zalando publishes them, gzipped or not) reads into the same tensors as the hub copy's
layout, for the server (dataset-path), a node's own folder and `python -m feddata check`; a bad
file is refused naming the file. IDX files are made here, small; one test reads Debian's files
when the package is installed."""

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from entry_points import HOW, run_module
from feddata import DataSettings, load_client_data, load_test_data
from feddata.idx import IdxRefused, read_idx_split
from feddata.own_data import OwnDataError, read_own_data
from feddata.save import main as save_main
from feddata.sources import DataSourceError
from feddata.specs import DATASET_BY_NAME, FASHION_MNIST_CLASSES
from run_config import resolve

ROOT = Path(__file__).resolve().parents[1]
DEBIAN = Path("/usr/share/datasets/fashion-mnist")
FMNIST = DATASET_BY_NAME["fashion-mnist"]
SIZES = {"train": 60, "test": 20}


def idx_bytes(values: np.ndarray, magic: bytes | None = None) -> bytes:
    """An IDX file of uint8 `values`, written by hand: 0, 0, 0x08, ndim, the dims, the values."""
    head = magic if magic is not None else bytes([0, 0, 8, values.ndim])
    return head + struct.pack(">" + "I" * values.ndim, *values.shape) + values.tobytes()


def make_arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in SIZES.items():
        labels = (np.arange(n) % 10).astype(np.uint8)
        rng.shuffle(labels)
        # brightness by label: a learnable toy
        images = np.clip(rng.normal(20 * labels[:, None, None] + 30, 30, (n, 28, 28)), 0, 255)
        out[split] = (images.astype(np.uint8), labels)
    return out


def write_idx_folder(folder: Path, arrays, gz: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images, labels = arrays[split]
        for what, values in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
            data = idx_bytes(values)
            path = folder / f"{prefix}-{what}{'.gz' if gz else ''}"
            path.write_bytes(gzip.compress(data) if gz else data)
    return folder


def write_hub_copy(folder: Path, arrays) -> Path:
    """The hub's layout of zalando-datasets/fashion_mnist: README.md with its config and
    fashion_mnist/{train,test}-00000-of-00001.parquet, images as PNG in Image() features."""
    from datasets import ClassLabel, Dataset, Features, Image
    from PIL import Image as PILImage

    features = Features({"image": Image(), "label": ClassLabel(names=list(FASHION_MNIST_CLASSES))})
    (folder / "fashion_mnist").mkdir(parents=True)
    for split, (images, labels) in arrays.items():
        Dataset.from_dict({"image": [PILImage.fromarray(i, mode="L") for i in images],
                           "label": labels.astype(np.int64)}, features=features) \
            .to_parquet(str(folder / "fashion_mnist" / f"{split}-00000-of-00001.parquet"))
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: fashion_mnist\n  data_files:\n  - split: train\n"
        "    path: fashion_mnist/train-*\n  - split: test\n    path: fashion_mnist/test-*\n"
        "---\n# test copy\n")
    return folder


def cfg_for(path: Path, **more) -> DataSettings:
    """The data settings of a Fashion-MNIST run on the copy at `path`."""
    return DataSettings.from_config(resolve(
        {"dataset": "fashion-mnist", "dataset-path": str(path), "model": "mlp-gcfed",
         "partitioner": "iid", **more}))


@pytest.fixture(scope="module")
def arrays():
    return make_arrays()


@pytest.mark.parametrize("gz", [True, False])
def test_an_idx_folder_reads_as_the_hub_layout(tmp_path, arrays, gz):
    idx = write_idx_folder(tmp_path / "idx", arrays, gz)
    hub = write_hub_copy(tmp_path / "hub", arrays)
    images, labels = arrays["test"]
    # the server's test set: normalized by the training set's mean and std, computed here
    want = (images.astype(np.float64) / 255 - 0.2860) / 0.3530
    for folder in (idx, hub):
        x, y = load_test_data(cfg_for(folder))
        assert x.shape == (20, 1, 28, 28)
        np.testing.assert_allclose(x[:, 0].double().numpy(), want, atol=1e-5)
        assert y.tolist() == labels.tolist()
    # every client's partition: the same stored pixels and labels from both copies
    for pid in range(3):
        a, b = (load_client_data(cfg_for(f), pid, 3) for f in (idx, hub))
        assert str(a.train_x.dtype) == str(b.train_x.dtype) == "torch.uint8"
        assert a.train_x.equal(b.train_x) and a.train_y.equal(b.train_y)
        assert a.val_x.equal(b.val_x) and a.val_y.equal(b.val_y)


def test_the_save_command_turns_an_idx_folder_into_the_hub_format(tmp_path, arrays):
    idx = write_idx_folder(tmp_path / "idx", arrays, gz=True)
    assert save_main(["fashion-mnist", str(tmp_path / "saved"), "--from-idx", str(idx)]) == 0
    a, b = (load_client_data(cfg_for(f), 1, 2) for f in (idx, tmp_path / "saved"))
    assert a.train_x.equal(b.train_x) and a.train_y.equal(b.train_y)


def damage(folder: Path, name: str, how):
    path = folder / name
    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(how(data)))


# (file, change to its uncompressed bytes, words the message must hold)
BAD_FILES = [
    ("train-images-idx3-ubyte.gz", lambda d: d[:-1], ["truncated"]),
    ("train-images-idx3-ubyte.gz", lambda d: d[:3], ["truncated"]),
    ("train-images-idx3-ubyte.gz", lambda d: d + b"\0", ["more bytes"]),
    ("train-images-idx3-ubyte.gz", lambda d: b"\0\0\x0d\x03" + d[4:], ["magic number"]),
    ("train-images-idx3-ubyte.gz", lambda d: b"\x08\x03\0\0" + d[4:], ["magic number"]),
    ("train-labels-idx1-ubyte.gz", lambda d: b"\0\0\x08\x03" + d[4:], ["3-dimensional",
                                                                       "swapped"]),
    ("train-images-idx3-ubyte.gz", lambda d: b"\0\0\x08\x01" + d[4:], ["1-dimensional",
                                                                       "swapped"]),
    ("t10k-labels-idx1-ubyte.gz", lambda d: d[:8] + b"\x0a" + d[9:], ["label 10", "classes"]),
    ("t10k-labels-idx1-ubyte.gz", lambda d: d[:4] + struct.pack(">I", 19) + d[8:-1],
     ["20 images", "19 labels"]),
    ("train-images-idx3-ubyte.gz",
     lambda d: d[:4] + struct.pack(">III", 0x7FFFFFFF, 28, 28) + d[16:],
     ["2,147,483,647 images", "60,000"]),
]


@pytest.mark.parametrize("name,how,words", BAD_FILES)
def test_a_bad_idx_file_is_refused_naming_it(tmp_path, arrays, name, how, words):
    folder = write_idx_folder(tmp_path / "idx", arrays, gz=True)
    damage(folder, name, how)
    with pytest.raises(DataSourceError) as err:
        load_test_data(cfg_for(folder, seed=zlib.crc32(name.encode()) % 1000))  # fresh key
    text = str(err.value)
    assert name in text
    for word in words:
        assert word in text


def test_images_of_another_size_are_refused(tmp_path, arrays):
    other = dict(arrays)
    other["train"] = (np.zeros((60, 32, 32), np.uint8), arrays["train"][1])
    folder = write_idx_folder(tmp_path / "idx", other, gz=False)
    with pytest.raises(IdxRefused, match="32x32 images.*28x28"):
        read_idx_split(folder, "train", "fashion-mnist")


def test_a_damaged_gzip_stream_and_a_missing_file_are_refused(tmp_path, arrays):
    folder = write_idx_folder(tmp_path / "idx", arrays, gz=True)
    path = folder / "train-images-idx3-ubyte.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the gzip stream cut
    with pytest.raises(IdxRefused, match="train-images-idx3-ubyte.gz.*(gzip|truncated)"):
        read_idx_split(folder, "train", "fashion-mnist")
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(IdxRefused, match="no t10k-labels-idx1-ubyte"):
        read_idx_split(folder, "test", "fashion-mnist")


def test_both_a_plain_and_a_gzipped_copy_of_one_file_are_refused(tmp_path, arrays):
    folder = write_idx_folder(tmp_path / "idx", arrays, gz=True)
    plain = gzip.decompress((folder / "train-labels-idx1-ubyte.gz").read_bytes())
    (folder / "train-labels-idx1-ubyte").write_bytes(plain)
    with pytest.raises(IdxRefused, match="both train-labels-idx1-ubyte and .*keep one"):
        read_idx_split(folder, "train", "fashion-mnist")


def test_a_link_in_the_folder_is_not_followed(tmp_path, arrays):
    folder = write_idx_folder(tmp_path / "idx", arrays, gz=False)
    real = tmp_path / "elsewhere"
    (folder / "train-labels-idx1-ubyte").rename(real)
    os.symlink(real, folder / "train-labels-idx1-ubyte")
    with pytest.raises(IdxRefused, match="train-labels-idx1-ubyte.*link"):
        read_idx_split(folder, "train", "fashion-mnist")


def test_a_node_reads_its_own_idx_folder(tmp_path, arrays):
    folder = write_idx_folder(tmp_path / "node", arrays, gz=True)
    data = read_own_data(str(folder), FMNIST, "fashion-mnist")
    images, labels = arrays["train"]
    assert data.source == "IDX files"
    assert data.x.shape == (60, 1, 28, 28) and data.x[:, 0].numpy().tobytes() == images.tobytes()
    assert data.y.tolist() == labels.tolist()
    assert any("t10k-images-idx3-ubyte.gz" in line for line in data.skipped)
    test = read_own_data(str(folder), FMNIST, "fashion-mnist", split="test", key="test-data")
    assert test.y.tolist() == arrays["test"][1].tolist()
    # a node's folder holding the training pair only: its one split
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (folder / name).unlink()
    assert len(read_own_data(str(folder), FMNIST, "fashion-mnist", split="test").y) == 60
    # a link out of the folder is refused by the node's rule, with the way to allow it
    (folder / "train-labels-idx1-ubyte.gz").rename(tmp_path / "labels.gz")
    os.symlink(tmp_path / "labels.gz", folder / "train-labels-idx1-ubyte.gz")
    with pytest.raises(OwnDataError, match="outside the data folder.*data-follow-links"):
        read_own_data(str(folder), FMNIST, "fashion-mnist")
    assert len(read_own_data(str(folder), FMNIST, "fashion-mnist", follow_links=True).y) == 60


@pytest.mark.parametrize("how", HOW)  # (in this process; as `python -m` in the long set)
def test_feddata_check_reads_an_idx_folder_and_names_a_bad_file(tmp_path, arrays, how):
    folder = write_idx_folder(tmp_path / "node", arrays, gz=True)

    def check():
        return run_module(how, "feddata", "check", str(folder), "--dataset", "fashion-mnist")

    ok = check()
    assert ok.returncode == 0, ok.stderr
    assert "60 examples (IDX files) of dataset 'fashion-mnist'" in ok.stdout
    damage(folder, "train-labels-idx1-ubyte.gz", lambda d: d[:-5])
    bad = check()
    assert bad.returncode == 1
    assert "train-labels-idx1-ubyte.gz" in bad.stderr and "truncated" in bad.stderr


def _read_gz_idx(path: Path) -> np.ndarray:
    """An independent reader: the whole file, its header by hand."""
    data = gzip.decompress(path.read_bytes())
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data[4 + 4 * ndim:], np.uint8).reshape(shape)


@pytest.mark.skipif(not DEBIAN.is_dir(), reason="Debian's dataset-fashion-mnist is not installed "
                    "(apt-get install dataset-fashion-mnist): the real files cannot be read")
def test_debians_fashion_mnist_reads_whole_with_its_stated_normalization():
    cfg = cfg_for(DEBIAN, **{"partitioner": "lda", "lda-alpha": 0.1, "lda-min-size": 10,
                             "lda-self-balancing": True})
    x, y = load_test_data(cfg)
    test_labels = _read_gz_idx(DEBIAN / "t10k-labels-idx1-ubyte.gz")
    assert x.shape == (10_000, 1, 28, 28) and y.tolist() == test_labels.tolist()
    train = _read_gz_idx(DEBIAN / "train-images-idx3-ubyte.gz").astype(np.float64) / 255
    assert train.shape == (60_000, 28, 28)
    # the spec's normalization is the training set's mean and std, to the digits it states
    assert abs(train.mean() - FMNIST.mean[0]) < 5e-5 and abs(train.std() - FMNIST.std[0]) < 5e-5
    counts = np.bincount(_read_gz_idx(DEBIAN / "train-labels-idx1-ubyte.gz"), minlength=10)
    assert counts.tolist() == [6000] * 10
    parts = [load_client_data(cfg, pid, 100) for pid in (0, 99)]
    assert all(len(p.train_y) >= 10 for p in parts)


def test_the_table_sweep_runs_every_method_of_gcfeds_table_five_and_six_more():
    """sweeps/gcfed-t5-fmnist.yaml: 19 methods x 2 set-ups x 3 seeds, every cell's config valid;
    the thirteen rows of GC-Fed's Table 5 run as its code runs them (the set-up's reported row
    names), the six others by their own presets; every cell reads Debian's folder."""
    from experiments.sweep import load_sweep

    sweep = load_sweep(ROOT / "sweeps" / "gcfed-t5-fmnist.yaml", out_dir=Path("/nonexistent"))
    assert len(sweep.cells) == 19 * 2 * 3 and len(sweep.methods) == 19
    assert {c.seed for c in sweep.cells} == {0, 1, 2}
    paper = set(load_setup_rows("gcfed-t5-fmnist-5of200-lda0.05"))
    ours = {c.run_config["method"] for c in sweep.cells}
    assert paper <= ours and len(paper) == 13
    assert ours - paper == {"fedagm", "fedacg+gcfed", "fedavgm", "fedadam", "fedcm", "moon"}
    for cell in sweep.cells:
        cfg = resolve(cell.run_config)
        assert cfg["dataset"] == "fashion-mnist" and cfg["dataset-path"] == str(DEBIAN)
        assert cfg["num-server-rounds"] == 200 and cfg["model"] == "mlp-gcfed"
        clients = cell.federation_config["num-supernodes"]
        assert round(cfg["fraction-train"] * clients) == 5


def load_setup_rows(name: str) -> dict:
    from run_config import load_setup

    return load_setup(name)["reported"]["rows"]


def test_the_results_page_puts_the_papers_emnist_column_beside_each_row(tmp_path):
    """pages.fashion_mnist: the sweep's finished cells (two made here, one per set-up) become
    the page's table, led by the mean of the last 10 rounds and the last round's accuracy with
    GC-Fed's reported EMNIST number for that method beside them (the set-up's `reported` row of
    its method name), the plots copied, the count of finished cells; the cells' CSV it returns
    builds the same table (--from-csv) without the run folders."""
    import json

    from experiments.sweep import load_sweep
    from pages.fashion_mnist import SWEEP_FILE, block, measured

    sweep = load_sweep(SWEEP_FILE, out_dir=tmp_path / "out")
    chosen = [c for c in sweep.cells if c.seed == 0 and (
        (c.setting, c.method) in {("5of200-lda0.05", "FedAvg"), ("5of100-lda0.1", "FedCM")})]
    for cell, acc in zip(chosen, (0.7, 0.5)):
        cell.run_dir.mkdir(parents=True)
        rows = [{"round": 0, "test-acc": 0.1}] + [
            {"round": r, "test-acc": acc + (0.01 if r == 200 else 0), "ema-acc": acc,
             "seconds": 1.0} for r in range(1, 201)]
        (cell.run_dir / "results.json").write_text(json.dumps({
            "config": resolve(cell.run_config), "status": "complete",  # (as a run's)
            "summary": {"complete": True, "wall-seconds": 1800.0}, "rounds": rows}))
        (cell.run_dir / "sweep-cell.json").write_text(json.dumps(cell.description()))
    docs = tmp_path / "docs"
    docs.mkdir()
    text, cells_csv = measured(tmp_path / "out", docs=docs)
    lines = [line for line in text.splitlines() if line.startswith("| Fed")]
    # last 10 rounds: 9 x acc and acc + 0.01 -> acc + 0.001; the last round: acc + 0.01
    assert lines == [
        "| FedAvg | 70.10 | 71.00 | 59.45 ± 3.72 | 70.00 | 70.00 | 1 | 1 | 0 | 1 |",
        "| FedCM | 50.10 | 51.00 | - | 50.00 | 50.00 | 200+ | 200+ | 0 | 1 |"]
    assert "2 of its 114 cells had finished" in text and "ran 1.0 hours in all" in text
    assert "code unknown" in text  # (these results.json record no code version)
    assert sorted(p.name for p in docs.iterdir()) == [
        f"fashion-mnist-{k}-{s}.png" for k in ("acc", "ema")
        for s in ("5of100-lda0.1", "5of200-lda0.05")]
    (docs / "fashion-mnist-cells.csv").write_text(cells_csv)
    from_csv = block(None, docs=docs, from_csv=docs / "fashion-mnist-cells.csv")
    assert [line for line in from_csv.splitlines() if line.startswith("| Fed")] == lines
    assert "2 of its 114 cells" in from_csv and "ran 1.0 hours in all" in from_csv


@pytest.mark.parametrize("how", HOW)  # feddata check in this process; as `python -m` in long
def test_a_file_there_twice_is_refused_by_every_reader_with_its_error(tmp_path, arrays, how):
    """Both x and x.gz in a folder: the server's dataset-path (DataSourceError), a node's folder
    (OwnDataError) and feddata check (exit 1, no traceback) all name the two files."""
    folder = write_idx_folder(tmp_path / "idx", arrays, gz=True)
    plain = gzip.decompress((folder / "t10k-images-idx3-ubyte.gz").read_bytes())
    (folder / "t10k-images-idx3-ubyte").write_bytes(plain)
    with pytest.raises(DataSourceError, match="both t10k-images-idx3-ubyte and"):
        load_test_data(cfg_for(folder, seed=7))
    with pytest.raises(OwnDataError, match="both t10k-images-idx3-ubyte and"):
        read_own_data(str(folder), FMNIST, "fashion-mnist")
    out = run_module(how, "feddata", "check", str(folder), "--dataset", "fashion-mnist")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "keep one" in out.stderr


@pytest.mark.parametrize("val_fraction", [0.0, 0.25])
def test_a_partition_is_cut_from_the_whole_split_as_datasets_selects_it(tmp_path, arrays,
                                                                       val_fraction):
    """An IDX folder's partitions are cut by index from the whole (shuffled) training split
    (`_Source.whole_train`); each must hold exactly the rows `datasets` gives for the
    partition, read one by one as Python values (and its held-out part as `datasets`'
    train_test_split orders it)."""
    from feddata.loading import forget_client_data, load_partition

    idx = write_idx_folder(tmp_path / "idx", arrays, gz=True)
    cfg = cfg_for(idx, partitioner="dirichlet-balanced", seed=3,
                  **{"client-val-fraction": val_fraction})
    forget_client_data()
    for pid in (0, 3):
        got = load_client_data(cfg, pid, 4)
        part = load_partition(cfg, pid, 4)
        val_n = round(len(part) * val_fraction)
        if val_n:
            split = part.train_test_split(test_size=val_n, seed=3)
            train, val = split["train"], split["test"]
        else:
            train, val = part, part.select([])
        for x, y, rows, scaled in ((got.train_x, got.train_y, train, False),
                                   (got.val_x, got.val_y, val, True)):
            pixels = np.array([np.asarray(r["image"], dtype=np.float64) for r in rows])
            want = (pixels / 255 - 0.2860) / 0.3530 if scaled else pixels
            assert x.shape == (len(rows), 1, 28, 28) and y.tolist() == [r["label"] for r in rows]
            assert np.allclose(x.numpy()[:, 0].astype(np.float64), want.reshape(-1, 28, 28),
                               atol=1e-5 if scaled else 0)
        assert len(got.train_y) + len(got.val_y) == len(part) and len(got.val_y) == val_n
    from feddata.loading import _source

    assert _source(cfg.split(), 4).whole_train() is not None  # the partitions were cut by index


def test_the_page_command_writes_the_cells_csv_and_builds_the_same_table_from_it(tmp_path):
    """python -m pages.fashion_mnist writes the page and fashion-mnist-cells.csv beside it;
    --from-csv rebuilds the page's table from that CSV alone (the run folders removed), and
    writes no CSV."""
    import csv
    import io
    import json
    import shutil

    from experiments.sweep import load_sweep
    from pages.fashion_mnist import SWEEP_FILE, main

    sweep = load_sweep(SWEEP_FILE, out_dir=tmp_path / "out")
    cell = next(c for c in sweep.cells if c.seed == 0 and c.method == "FedAvg")
    cell.run_dir.mkdir(parents=True)
    rows = [{"round": 0, "test-acc": 0.1}] + [
        {"round": r, "test-acc": 0.6, "ema-acc": 0.6, "seconds": 1.0} for r in range(1, 201)]
    (cell.run_dir / "results.json").write_text(json.dumps({
        "config": resolve(cell.run_config), "status": "complete", "rounds": rows,
        "summary": {"complete": True, "wall-seconds": 360.0}}))
    (cell.run_dir / "sweep-cell.json").write_text(json.dumps(
        cell.description() | {"code-version": {"commit": "c" * 40, "dirty": False}}))
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "fashion-mnist.md"
    page.write_text("# p\n\n<!-- example:fmnist-table -->\n<!-- /example:fmnist-table -->\n")
    assert main(["--out-dir", str(tmp_path / "out"), "--docs", str(docs)]) == 0
    written = (docs / "fashion-mnist-cells.csv").read_text()
    (row,) = list(csv.DictReader(io.StringIO(written)))
    assert (row["setting"], row["method"], row["seed"], row["status"], row["rounds"]) == (
        "5of200-lda0.05", "FedAvg", "0", "complete", "200")
    assert float(row["last10-acc"]) == pytest.approx(0.6) and row["final-test-acc"] == "0.6"
    assert (row["rounds-to-60"], row["rounds-to-70"]) == ("1", "200+")
    assert (row["wall-seconds"], row["code-version"]) == ("360.0", "c" * 40)
    table = [line for line in page.read_text().splitlines() if line.startswith("| ")]
    assert table[2] == ("| FedAvg | 60.00 | 60.00 | 59.45 ± 3.72 | 60.00 | 60.00 | 1 | 200+ "
                        "| 0 | 1 |")
    assert "the cells ran on code cccccccccccc" in page.read_text()
    shutil.rmtree(tmp_path / "out")
    assert main(["--docs", str(docs), "--from-csv"]) == 0
    assert [line for line in page.read_text().splitlines() if line.startswith("| ")] == table
    assert (docs / "fashion-mnist-cells.csv").read_text() == written
    assert "fashion-mnist-cells.csv, the cells' own CSV" in page.read_text()
