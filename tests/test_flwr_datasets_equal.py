"""Our data loading against flwr-datasets 0.6's FederatedDataset (the independent reference):
the same rows in the same order for the same data and seed."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import DatasetDict
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import (IidPartitioner as TheirIid,
                                       NaturalIdPartitioner as TheirNatural,
                                       ShardPartitioner as TheirShards)

import hubformats
from feddata import load_partition, load_test_split
from feddata.sources import local_copy_kwargs, train_test
from feddata.specs import DATASET_BY_NAME
from run_config import resolve


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-copies")
    rng = np.random.default_rng(1)
    return {"cifar10": hubformats.cifar10(root, rng), "femnist": hubformats.femnist(root, rng)}


def fingerprints(ds, column: str) -> list[bytes]:
    """Each example's image (random pixels: unique), in row order."""
    return [img["bytes"] if isinstance(img, dict) else img.tobytes() for img in ds[column]]


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
    assert fingerprints(load_test_split(cfg), spec.image) == \
        fingerprints(fds.load_split("test"), spec.image)
    for i in range(clients):
        assert fingerprints(load_partition(cfg, i, clients), spec.image) == \
            fingerprints(fds.load_partition(i), spec.image)
