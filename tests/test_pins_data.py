"""Pins of the client splits' seeds: for every partitioner the same seed gives the same split and
another seed another split, with the train/test split held fixed (so the test can fail)."""

import hashlib

import numpy as np
import pytest
from datasets import Dataset

import hubformats
from pins_helpers import partition_rows, partitioner, server_test_rows

# --- the partitioner alone, on one fixed dataset ---------------------------------------------

FIXED = Dataset.from_dict({
    "uid": list(range(240)),
    "label": [(7 * i) % 10 for i in range(240)],
    "writer": [f"w{i % 12:02d}" for i in range(240)],  # 12 natural ids, 20 examples each
})


def split_of(name: str, seed: int) -> list[list[int]]:
    """The example ids of each of 5 partitions of FIXED."""
    p = partitioner(name, 5, "label", seed, natural_id="writer")
    p.dataset = FIXED
    return [sorted(p.load_partition(i)["uid"]) for i in range(5)]


@pytest.mark.parametrize("name", ["dirichlet-balanced", "lda", "natural", "shards"])
def test_a_partitioner_follows_its_seed(name):
    first = split_of(name, 1)
    assert first == split_of(name, 1)
    others = [split_of(name, s) for s in (2, 3)]
    assert all(o != first for o in others), "another seed must give another split"
    used = sorted(u for part in first for u in part)
    assert len(used) == len(set(used)) > 0  # a split: no example twice


def test_iid_has_no_seed_of_its_own():
    """flwr-datasets' IidPartitioner cuts contiguous blocks: the seed acts through the shuffle
    of the training split (next test)."""
    assert split_of("iid", 1) == split_of("iid", 2) == \
        [list(range(48 * i, 48 * (i + 1))) for i in range(5)]


# --- through the run config, on datasets whose test split is their own -----------------------


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-copies")
    rng = np.random.default_rng(0)
    return {"cifar10": hubformats.cifar10(root, rng), "celeba": hubformats.celeba(root, rng)}


def fingerprints(rows, column: str) -> list[str]:
    """One hash per example (the images are random, so each is unique)."""
    return [hashlib.sha1(img["bytes"] if isinstance(img, dict) else img.tobytes()).hexdigest()
            for img in rows.with_format(None)[column]]


# partitioner, dataset, image column, clients
SPLITS = [("iid", "cifar10", "img", 4), ("dirichlet-balanced", "cifar10", "img", 4),
          ("lda", "cifar10", "img", 4), ("shards", "cifar10", "img", 4),
          ("natural", "celeba", "image", 4)]  # 4 of the copy's 6 celebrities


@pytest.mark.parametrize("name,dataset,column,clients", SPLITS)
def test_the_run_config_seed_gives_the_split(copies, name, dataset, column, clients):
    def config(seed):
        return {"dataset": dataset, "dataset-path": str(copies[dataset]), "partitioner": name,
                "lda-min-size": 1, "seed": seed}

    def split(seed):
        return [sorted(fingerprints(partition_rows(config(seed), i, clients), column))
                for i in range(clients)]

    def test_split(seed):
        return fingerprints(server_test_rows(config(seed)), column)

    assert test_split(1) == test_split(2) == test_split(3)  # the test set does not move
    first = split(1)
    assert first == split(1)
    assert split(2) != first and split(3) != first
