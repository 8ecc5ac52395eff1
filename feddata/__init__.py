"""Federated data: datasets (hub or local copies), client partitions, input pipeline, caches.

Importing the package is light (no `datasets` / `flwr_datasets`); they load with the data.
"""

from .augment import AUGMENTATIONS, TrainTransform
from .loading import (
    DATA_KEYS, ClientData, load_client_data, load_partition, load_test_data, load_test_split,
    spec_of,
)
from .population import ClientPopulation
from .specs import DATASETS, SPECS, DatasetSpec

PARTITIONERS = ("iid", "dirichlet-balanced", "lda", "natural", "shards")

__all__ = [
    "AUGMENTATIONS", "ClientData", "ClientPopulation", "DATASETS", "DATA_KEYS", "DatasetSpec",
    "PARTITIONERS", "SPECS", "TrainTransform", "load_client_data", "load_partition",
    "load_test_data", "spec_of", "load_test_split",
]
