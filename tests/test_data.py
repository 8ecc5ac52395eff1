"""Partitions of digits: sizes, label skew, minimum size, same seed -> same split in any process."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from feddata import load_client_data, load_partition, load_test_data
from run_config import resolve

ROOT = Path(__file__).resolve().parents[1]


def labels_of(cfg, n):
    return [np.asarray(load_partition(cfg, i, n)["label"]) for i in range(n)]


def max_class_share(parts):
    return float(np.mean([np.bincount(p, minlength=10).max() / len(p) for p in parts]))


def test_dirichlet_balanced_equal_sizes_and_skew_grows_as_alpha_falls():
    shares = {}
    for alpha in (100.0, 1.0, 0.1):
        parts = labels_of(resolve({"partitioner": "dirichlet-balanced", "dirichlet-alpha": alpha}), 10)
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) == 1437 // 10
        assert len(np.unique(np.concatenate(parts))) == 10
        shares[alpha] = max_class_share(parts)
    assert shares[100.0] < 0.25 < shares[1.0] < shares[0.1], shares


def test_lda_unequal_sizes_with_the_minimum():
    parts = labels_of(resolve({"partitioner": "lda", "lda-alpha": 0.3, "lda-min-size": 20}), 10)
    sizes = [len(p) for p in parts]
    assert min(sizes) >= 20 and max(sizes) > 2 * min(sizes)
    assert sum(sizes) == 1437


def test_lda_impossible_minimum_is_a_clear_error():
    with pytest.raises(ValueError, match="lda-min-size"):
        load_partition(resolve({"partitioner": "lda", "lda-alpha": 0.01, "lda-min-size": 140}), 0, 10)


def test_iid_and_test_set_disjoint_sizes():
    cfg = resolve({"partitioner": "iid"})
    sizes = [len(load_partition(cfg, i, 7)) for i in range(7)]
    assert sum(sizes) == 1437 and max(sizes) - min(sizes) <= 1
    x, y = load_test_data(cfg)
    assert x.shape == (360, 1, 8, 8) and abs(float(x.mean())) < 0.1
    assert len(np.unique(y.numpy())) == 10
    d = load_client_data(cfg, 0, 7)
    assert len(d.train_y) + len(d.val_y) == sizes[0] and len(d.val_y) == round(0.1 * sizes[0])


def test_same_seed_same_partitions_in_two_processes():
    code = ("from feddata import load_partition; from run_config import resolve; import hashlib;"
            "cfg = resolve({'partitioner': '%s', 'seed': 5});"
            "print(hashlib.sha1(str([load_partition(cfg, i, 8)['label'] for i in range(8)])"
            ".encode()).hexdigest())")
    for name in ("dirichlet-balanced", "lda"):
        out = [subprocess.run([sys.executable, "-c", code % name], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout for _ in range(2)]
        assert out[0] == out[1] and len(out[0]) > 30
    a = labels_of(resolve({"seed": 5}), 8)
    b = labels_of(resolve({"seed": 6}), 8)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b))
