"""The node-local partition cache and the light ClientApp import path (deployment cost)."""

import subprocess
import sys
from pathlib import Path

import torch

from feddata import DATA_KEYS, load_client_data
from feddata import disk_cache
from feddata.disk_cache import (CACHE_KEY_NAMES, cache_dir, cache_file, cache_key,
                                 load_prepared_partition)
from run_config import resolve

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("datasets", "flwr_datasets", "sklearn", "pandas", "pyarrow", "feddata.loading")


def test_every_data_key_is_part_of_the_cache_key():
    from run_config.schema import KEYS

    assert set(DATA_KEYS) <= set(CACHE_KEY_NAMES)
    # the schema's data group, in order, and the seed: a data key added there is keyed here too
    assert CACHE_KEY_NAMES == tuple(k.name for k in KEYS if k.group == "data") + ("seed",)
    cfg = resolve({})
    base = cache_file(Path("/c"), cache_key(cfg, 0, 4))
    for key, value in (("dirichlet-alpha", 0.7), ("seed", 3), ("client-val-fraction", 0.25)):
        assert cache_file(Path("/c"), cache_key(resolve({key: value}), 0, 4)) != base, key
    assert cache_file(Path("/c"), cache_key(cfg, 1, 4)) != base
    assert cache_file(Path("/c"), cache_key(cfg, 0, 5)) != base
    # training keys do not split the cache: the next run with another lr reuses the files
    assert cache_file(Path("/c"), cache_key(resolve({"lr": 0.3, "method": "gcfed"}), 0, 4)) == base


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDACG_CACHE_DIR", str(tmp_path / "env"))
    assert cache_dir({"cache-dir": str(tmp_path / "node")}) == tmp_path / "node"
    assert cache_dir({}) == tmp_path / "env"
    assert cache_dir({"cache-dir": "off"}) is None
    monkeypatch.delenv("FEDACG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir(None) == tmp_path / "xdg" / "fedacg-gc" / "partitions"


def test_miss_writes_and_a_fresh_process_reads_without_heavy_imports(tmp_path):
    cfg = resolve({"partitioner": "lda", "lda-alpha": 0.5, "seed": 4})
    part = load_prepared_partition(cfg, 2, 6, tmp_path)
    ref = load_client_data(cfg, 2, 6)
    files = list(tmp_path.glob("*.pt"))
    assert len(files) == 1 and files[0].name.startswith("digits-p2of6-")
    assert torch.equal(part.train_x, ref.train_x) and torch.equal(part.val_y, ref.val_y)
    assert part.in_shape == (1, 8, 8) and part.num_classes == 10

    code = (
        "import sys, torch\n"
        "from feddata.disk_cache import load_prepared_partition\n"
        "from run_config import resolve\n"
        f"cfg = resolve({{'partitioner': 'lda', 'lda-alpha': 0.5, 'seed': 4}})\n"
        f"p = load_prepared_partition(cfg, 2, 6, __import__('pathlib').Path({str(tmp_path)!r}))\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], "
        "len(p.train_y), float(p.train_x.sum()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "[]", out  # a hit imports none of the data libraries
    assert int(out[1]) == len(ref.train_y)
    assert abs(float(out[2]) - float(ref.train_x.sum())) < 1e-3


def test_corrupt_or_foreign_file_is_rebuilt(tmp_path):
    cfg = resolve({})
    path = cache_file(tmp_path, cache_key(cfg, 0, 3))
    path.write_bytes(b"not a torch file")
    disk_cache._memory.clear()
    part = load_prepared_partition(cfg, 0, 3, tmp_path)
    assert len(part.train_y) > 0
    blob = torch.load(path, weights_only=True)
    assert torch.equal(blob["train_y"], part.train_y)
    # a file whose stored key differs (e.g. written by other code) is not trusted either
    blob["key"] = "{}"
    blob["train_y"] = torch.zeros_like(blob["train_y"])
    torch.save(blob, path)
    disk_cache._memory.clear()
    assert torch.equal(load_prepared_partition(cfg, 0, 3, tmp_path).train_y, part.train_y)


def test_client_app_import_is_light():
    code = f"import sys, client_app.app; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out
