"""The rehearsal's stand-in datasets (benchmarks/standins.py) at a tiny scale, read back through
feddata's real path, and benchmarks/rehearse.py's --json shape (a `runs` list, a `status` per
run) from a real `flwr run` of a small set-up (marked slow: it starts Flower processes)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import standins
from feddata import DataSettings, load_partition, load_test_split
from feddata.specs import DATASET_BY_NAME
from run_config import resolve

ROOT = Path(__file__).resolve().parents[1]
SCALE = 0.0005  # 25 CIFAR training images, 407 FEMNIST rows of 2 writers, ...


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    root = tmp_path_factory.mktemp("standins")
    return {name: standins.ensure(name, SCALE, root, log=lambda *_: None)
            for name in standins.DATASETS}


@pytest.mark.parametrize("name", standins.DATASETS)
def test_standin_has_the_real_row_counts_and_loads_through_feddata(copies, name):
    """Every split holds round(real rows x scale) rows; feddata reads the copy as a hub copy:
    the test split (or the held-out part of each id) and the partitions add up to the train
    split; images decode to the spec's input shape."""
    real = standins.REAL[name]
    info = json.loads((copies[name] / "standin.json").read_text())
    assert info["rows"] == {s: max(2, round(n * SCALE)) for s, n in real.splits.items()}
    spec = DATASET_BY_NAME[name]
    natural = spec.natural_id is not None
    clients = 2
    cfg = DataSettings.from_config(resolve(
        {"dataset": name, "dataset-path": str(copies[name]),
         "partitioner": "natural" if natural else "iid", "client-val-fraction": 0.0}))
    test = load_test_split(cfg)
    parts = [load_partition(cfg, i, clients) for i in range(clients)]
    train_rows = info["rows"]["train"]
    if spec.test_splits and any(s in real.splits for s in spec.test_splits):
        test_split = next(s for s in spec.test_splits if s in real.splits)
        assert len(test) == info["rows"][test_split]
        if not natural:
            assert sum(len(p) for p in parts) == train_rows
    else:  # FEMNIST, Shakespeare: test-fraction of every id held out
        assert 0 < len(test) < train_rows
        assert sum(len(p) for p in parts) + len(test) == train_rows
    if natural:  # one natural id per client, as many ids as the copy says
        assert all(len(set(p[spec.natural_id])) == 1 for p in parts)
        ids = info["natural-ids"].get("ids") or info["natural-ids"]["train"]["ids"]
        column = parts[0].column_names
        assert spec.natural_id in column and ids >= clients
    if spec.kind == "image":
        from feddata.decode import input_tensor

        assert tuple(input_tensor(test.select([0]), spec).shape[1:]) == spec.in_shape
        if real.image:
            from PIL import Image as PILImage

            raw = load_test_split(cfg).cast_column(spec.image, _raw_image())[0][spec.image]
            h, w, _, fmt = real.image
            img = PILImage.open(__import__("io").BytesIO(raw["bytes"]))
            assert img.size == (w, h) and img.format == fmt


def _raw_image():
    from datasets import Image

    return Image(decode=False)


def test_natural_id_counts_are_realistic():
    """Per-id counts sum to the rows and follow LEAF's shapes: FEMNIST writers near 227, CelebA
    celebrities at most 35, Shakespeare speakers heavy-tailed (mean far above the median)."""
    rng = np.random.default_rng(0)
    femnist = standins.id_counts(814_277, 3_597, rng, "femnist")
    assert femnist.sum() == 814_277 and 150 < femnist.mean() < 300 and femnist.min() >= 2
    celeba = standins.id_counts(162_770, 8_192, rng, "celeba")
    assert celeba.sum() == 162_770 and celeba.max() <= 40
    shakes = standins.id_counts(4_226_158, 1_129, rng, "shakespeare")
    assert shakes.sum() == 4_226_158 and shakes.mean() > 1.3 * np.median(shakes)


def test_a_complete_copy_is_reused_and_an_incomplete_one_rebuilt(tmp_path):
    made = []
    folder = standins.ensure("cifar10", SCALE, tmp_path, log=made.append)
    stamp = (folder / "standin.json").stat().st_mtime_ns
    standins.ensure("cifar10", SCALE, tmp_path, log=made.append)
    assert len(made) == 2 and (folder / "standin.json").stat().st_mtime_ns == stamp  # reused
    (folder / "standin.json").unlink()  # a writer killed before the end
    standins.ensure("cifar10", SCALE, tmp_path, log=made.append)
    assert len(made) == 4 and (folder / "standin.json").exists()


@pytest.mark.slow
@pytest.mark.long  # about 40 s on an idle 2-core box, over a minute on a busy one
def test_rehearse_json_has_a_status_per_run(tmp_path):
    """One quick rehearsal of a GC-Fed CNN set-up (100 clients) on a small stand-in through
    `flwr run` on a SuperLink of its own: the --json file lists the run with status 'ok' and its
    figures; a set-up that cannot run (its method unknown) is listed as failed, not dropped."""
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.rehearse", "--quick", "--scale", "0.1",
         "--data-dir", str(tmp_path / "data"), "--work-dir", str(tmp_path),
         "--setups", "gcfed-t5-cifar10-5of100-lda0.1", "--methods", "gcfed,no-such-method",
         "--test-subset", "64", "--timeout", "300", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    doc = json.loads(out.read_text())
    assert [r["status"] for r in doc["runs"]] == ["ok", "failed"], proc.stdout[-3000:]
    ok = doc["runs"][0]
    assert ok["clients"] == 100 and ok["rounds-run"] == 2 and ok["local-steps"] == 2
    for key in ("round-seconds", "train-seconds", "eval-seconds", "step-seconds", "peak-host-mb",
                "disk-mb", "mb-per-round", "projected-hours"):
        assert ok[key] >= 0, key
    assert ok["peak-host-mb"] > 100 and ok["mb-per-round"] > 0
    assert doc["runs"][1]["error"]
    assert proc.returncode == 1  # not every run ok


def test_projection_and_docs_table_from_a_round_row(tmp_path):
    """The figures of a run from its results.json rows: the round split into training (mean
    client seconds x clients), evaluation and the rest; the full run projected from the quick
    cuts (full local steps, the whole test set); the docs table lists every set-up, 'not run'
    where there is no figure, and a failed run with the line that says why."""
    from argparse import Namespace

    from benchmarks.rehearse import figures, markdown_section
    from run_config.setups import load_setup, setup_names

    data = standins.ensure("cifar10", SCALE, tmp_path, log=lambda *_: None)
    setup = load_setup("fedacg-t1a-cifar10")  # 100 clients, 5 a round, batch 50, 5 epochs
    rows = [{"round": 1, "seconds": 30.0}, {"round": 2, "seconds": 20.0, "train-seconds": 3.0,
                                            "train-local-steps": 2, "eval-seconds": 4.0,
                                            "clients-replied": 5, "bytes-down": 2e6,
                                            "bytes-up": 1e6}]
    args = Namespace(quick=True, test_subset=2)
    f = figures(rows, setup, "fedacg", data, args)
    assert (f["train-seconds"], f["eval-seconds"], f["server-seconds"]) == (15.0, 4.0, 1.0)
    assert f["step-seconds"] == 1.5 and f["mb-per-round"] == 3.0
    n_train, n_test = (max(2, round(n * SCALE)) for n in (50_000, 10_000))
    steps = 5 * math.ceil(n_train / 100 / 50)  # 5 epochs of n / 100 clients in batches of 50
    assert f["full-local-steps"] == steps
    full_round = 5 * steps * 1.5 + 4.0 * n_test / 2 + 1.0
    assert f["projected-round-seconds"] == round(full_round, 1)
    assert f["projected-hours"] == round(1000 * full_round / 3600, 1)
    doc = {"runs": [{"setup": "fedacg-t1a-cifar10", "method": "fedacg", "status": "ok", **f,
                     "peak-host-mb": 4191, "disk-mb": 57.5},
                    {"setup": "fedacg-t7-femnist", "method": "fedacg", "status": "failed",
                     "error": "INFO: x\n\x1b[91mERROR\x1b[0m: Run failed: out of memory\nmore"}]}
    page = markdown_section(doc)
    rows_md = [ln for ln in page.splitlines() if ln.startswith("| `")]
    assert len(rows_md) == len(setup_names())
    assert "| `fedacg-t1a-cifar10` | fedacg | 100 | ok | 20.0 (15.0, 4.0, 1.0) |" in page
    assert "| `fedacg-t7-femnist` | fedacg | 2000 | failed (ERROR: Run failed: out of memory)" \
        in page
    assert sum("| not run |" in ln for ln in rows_md) == len(setup_names()) - 2
