"""Partitions of digits: sizes, label skew, minimum size, shards, the printed summary, same seed ->
same split in any process. (Hub-format datasets and the natural split: test_hub_formats.py.)"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from feddata import DataSettings, load_client_data, load_partition, load_test_data
from feddata.summary import format_summary, partition_summary
from run_config import resolve

ROOT = Path(__file__).resolve().parents[1]


def data(overrides: dict) -> DataSettings:
    """The data settings of the run config `overrides` (resolved), as the apps take them."""
    return DataSettings.from_config(resolve(overrides))


def labels_of(cfg, n):
    return [np.asarray(load_partition(cfg, i, n)["label"]) for i in range(n)]


def max_class_share(parts):
    return float(np.mean([np.bincount(p, minlength=10).max() / len(p) for p in parts]))


@pytest.mark.parametrize("seed", [0, 42, 7])
def test_dirichlet_balanced_equal_sizes_and_skew_grows_as_alpha_falls(seed):
    # A property for any seed: the skew grows as alpha falls, and alpha = 100 is close to the
    # 10% of a uniform class mix. (A fixed cut between alpha = 100 and 1 failed at seed 42.)
    shares = {}
    for alpha in (100.0, 1.0, 0.1):
        parts = labels_of(data({"partitioner": "dirichlet-balanced", "dirichlet-alpha": alpha,
                                "seed": seed}), 10)
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) == 1437 // 10
        assert len(np.unique(np.concatenate(parts))) == 10
        shares[alpha] = max_class_share(parts)
    assert shares[100.0] < 0.2 and shares[100.0] < shares[1.0] < shares[0.1], shares


def test_lda_unequal_sizes_with_the_minimum():
    parts = labels_of(data({"partitioner": "lda", "lda-alpha": 0.3, "lda-min-size": 20}), 10)
    sizes = [len(p) for p in parts]
    assert min(sizes) >= 20 and max(sizes) > 2 * min(sizes)
    assert sum(sizes) == 1437


def test_lda_impossible_minimum_is_a_clear_error():
    with pytest.raises(ValueError, match="lda-min-size"):
        load_partition(data({"partitioner": "lda", "lda-alpha": 0.01, "lda-min-size": 140}),
                       0, 10)


def test_iid_and_test_set_disjoint_sizes():
    cfg = data({"partitioner": "iid"})
    sizes = [len(load_partition(cfg, i, 7)) for i in range(7)]
    assert sum(sizes) == 1437 and max(sizes) - min(sizes) <= 1
    x, y = load_test_data(cfg)
    assert x.shape == (360, 1, 8, 8) and abs(float(x.mean())) < 0.1
    assert len(np.unique(y.numpy())) == 10
    d = load_client_data(cfg, 0, 7)
    assert len(d.train_y) + len(d.val_y) == sizes[0] and len(d.val_y) == round(0.1 * sizes[0])


def test_same_seed_same_partitions_in_two_processes():
    code = ("from feddata import DataSettings, load_partition; from run_config import resolve\n"
            "import hashlib\n"
            "for name in ('dirichlet-balanced', 'lda', 'shards', 'iid'):\n"
            "    cfg = DataSettings.from_config(resolve({'partitioner': name, 'seed': 5}))\n"
            "    print(hashlib.sha1(str([load_partition(cfg, i, 8)['label'] for i in range(8)])"
            ".encode()).hexdigest())")
    out = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split() for _ in range(2)]
    assert out[0] == out[1] and len(out[0]) == 4 and len(set(out[0])) == 4
    a = labels_of(data({"seed": 5}), 8)
    b = labels_of(data({"seed": 6}), 8)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b))


def test_lda_self_balancing_evens_out_sizes():
    sizes = {}
    for balancing in (False, True):
        cfg = data({"partitioner": "lda", "lda-alpha": 0.3, "lda-min-size": 5,
                    "lda-self-balancing": balancing})
        sizes[balancing] = np.array([len(p) for p in labels_of(cfg, 10)])
        assert sizes[balancing].sum() == 1437 and sizes[balancing].min() >= 5
    assert sizes[True].std() < sizes[False].std()
    assert sizes[True].max() <= 1437 / 10 + 144  # no client far above the average


def test_shards_are_equal_and_pathological():
    parts = labels_of(data({"partitioner": "shards", "shards-per-client": 2}), 10)
    assert {len(p) for p in parts} == {142}  # 20 shards of floor(1437 / 20) = 71 examples
    labels = [len(np.unique(p)) for p in parts]
    assert max(labels) <= 4 and np.mean(labels) <= 3  # two label-sorted shards each
    assert max_class_share(parts) > 0.45


def test_natural_split_needs_a_natural_id():
    with pytest.raises(ValueError, match="dataset 'digits' names none"):  # the config refuses it
        resolve({"partitioner": "natural"})
    # and the partitioner, for a config let past
    cfg = DataSettings.from_config({**resolve({}), "partitioner": "natural"})
    with pytest.raises(ValueError, match="natural client id"):
        load_partition(cfg, 0, 4)


def test_partition_summary_numbers():
    s = partition_summary(data({"partitioner": "dirichlet-balanced", "dirichlet-alpha": 0.1}),
                          10)
    assert (s["clients"], s["size-min"], s["size-max"], s["train-examples"]) == (10, 143, 143, 1437)
    assert 1 <= s["labels-min"] <= s["labels-median"] <= s["labels-max"] <= 10
    assert s["labels-median"] < 8  # alpha 0.1: few labels per client
    s = partition_summary(data({"partitioner": "lda", "lda-alpha": 0.5, "lda-min-size": 20}), 5)
    assert s["size-min"] >= 20 and s["partitioned-examples"] == 1437
    text = format_summary(s)
    assert "LDA split of digits (1437 of 1437 training examples) over 5 clients" in text
    assert f"min {s['size-min']} / median {s['size-median']:g} / max {s['size-max']}" in text
