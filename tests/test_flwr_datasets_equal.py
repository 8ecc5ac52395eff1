"""Our partitioners and data loading against flwr-datasets 0.6's (a test dependency only, the
independent reference): the same rows in the same order for the same data and seed, so the runs
of before the switch (docs/performance.md#the-simulations-memory) keep their splits."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import (IidPartitioner as TheirIid,
                                       NaturalIdPartitioner as TheirNatural,
                                       ShardPartitioner as TheirShards)

import hubformats
from feddata import DataSettings, load_partition, load_test_split
from feddata.partitioners import IidPartitioner, NaturalIdSamplePartitioner, ShardPartitioner
from feddata.sources import local_copy_kwargs, train_test
from feddata.specs import DATASET_BY_NAME
from run_config import resolve


def rows(partitioner, data: Dataset) -> list[list[int]]:
    """The `uid`s of every partition, in the partition's row order."""
    partitioner.dataset = data
    return [partitioner.load_partition(i)["uid"] for i in range(partitioner.num_partitions)]


def labelled(n: int, labels, seed: int = 0, **more) -> Dataset:
    """n rows: uid 0..n-1 and a label column drawn from `labels` (uneven counts, mixed order)."""
    rng = np.random.default_rng(seed)
    picked = [labels[i] for i in rng.integers(0, len(labels), n)]
    return Dataset.from_dict({"uid": list(range(n)), "label": picked, **more})


@pytest.mark.parametrize("n,k", [(1, 1), (7, 3), (10, 10), (100, 7), (1797, 20), (503, 1)])
def test_iid_equals_flwr_datasets(n, k):
    data = labelled(n, [0, 1])
    assert rows(IidPartitioner(k), data) == rows(TheirIid(k), data)


@pytest.mark.parametrize("n,k,per_client,seed", [
    (100, 5, 2, 0), (100, 5, 2, 1), (101, 7, 3, 4), (1797, 20, 2, 0), (1797, 10, 1, 3),
    (64, 4, 4, 9), (30, 30, 1, 2)])
@pytest.mark.parametrize("labels", [list(range(10)), ["b", "a", "c"], [True, False]])
def test_shards_equal_flwr_datasets(n, k, per_client, seed, labels):
    data = labelled(n, labels, seed)
    ours = ShardPartitioner(k, "label", per_client, seed=seed)
    theirs = TheirShards(k, "label", num_shards_per_partition=per_client, shuffle=True,
                         seed=seed)
    assert rows(ours, data) == rows(theirs, data)


@pytest.mark.parametrize("ids", [
    [f"w{i % 7}" for i in range(60)],  # strings, interleaved
    [3, 1, 2, 1, 3, 3, 0, 2] * 5,  # ints, uneven counts
    ["écrivain", "Zoe", "adam", "Émile", "zoe"] * 3,  # sort order beyond ASCII
])
def test_natural_with_every_id_equals_flwr_datasets(ids):
    data = Dataset.from_dict({"uid": list(range(len(ids))), "writer": ids})
    k = len(set(ids))
    assert rows(NaturalIdSamplePartitioner(k, "writer", seed=5), data) == \
        rows(TheirNatural("writer"), data)


@pytest.mark.parametrize("k,seed", [(2, 0), (4, 1), (6, 7)])
def test_natural_with_a_sample_of_ids_equals_flwr_datasets_on_that_sample(k, seed):
    """More ids than clients: k ids drawn with the seed (the rule, computed here with numpy),
    then flwr-datasets' NaturalIdPartitioner over the examples of those ids."""
    ids = [f"w{(5 * i) % 9}" for i in range(90)]
    data = Dataset.from_dict({"uid": list(range(90)), "writer": ids})
    unique, inverse = np.unique(ids, return_inverse=True)
    chosen = np.random.default_rng(seed).choice(len(unique), k, replace=False)
    sample = data.select(np.flatnonzero(np.isin(inverse, chosen)))
    assert rows(NaturalIdSamplePartitioner(k, "writer", seed=seed), data) == \
        rows(TheirNatural("writer"), sample)


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """Local copies in the hub's formats: CIFAR-10 (train and test) and FEMNIST (train only)."""
    folder, rng = tmp_path_factory.mktemp("hub-copies"), np.random.default_rng(1)
    return {name: getattr(hubformats, name)(folder, rng) for name in ("cifar10", "femnist")}


def same_rows(ours, theirs) -> bool:
    """Every column of every row equal, in the same row order (read as Arrow: images as stored)."""
    return ours.with_format("arrow")[:].equals(theirs.with_format("arrow")[:])


@pytest.mark.parametrize("dataset,name,clients,seed", [
    ("cifar10", "iid", 1, 0), ("cifar10", "iid", 4, 3), ("cifar10", "shards", 3, 2),
    ("femnist", "iid", 1, 1), ("femnist", "natural", 6, 0)])
def test_a_local_copy_loads_as_flwr_datasets_federated_dataset_loaded_it(copies, dataset, name,
                                                                        clients, seed):
    """The run's loading (feddata.sources, our partitioner) against FederatedDataset with
    `shuffle=False`, the same preprocessing and flwr-datasets' partitioner of the same kind (one
    iid client: the whole training split)."""
    cfg = resolve({"dataset": dataset, "dataset-path": str(copies[dataset]), "partitioner": name,
                   "seed": seed, "shards-per-client": 2})
    spec = DATASET_BY_NAME[dataset]
    theirs = {"iid": lambda: TheirIid(clients),
              "shards": lambda: TheirShards(clients, spec.label, num_shards_per_partition=2,
                                            shuffle=True, seed=seed),
              "natural": lambda: TheirNatural(spec.natural_id)}[name]()
    load_args = local_copy_kwargs(str(copies[dataset]))  # a save_to_disk folder: `arrow`
    fds = FederatedDataset(
        dataset=load_args.pop("path"), **load_args, shuffle=False, partitioners={"train": theirs},
        preprocessor=lambda dd: DatasetDict(zip(("train", "test"),
                                                train_test(dd, spec, cfg["test-fraction"], seed))))
    data = DataSettings.from_config(cfg)
    assert same_rows(load_test_split(data), fds.load_split("test"))
    for i in range(clients):
        assert same_rows(load_partition(data, i, clients), fds.load_partition(i))
