"""Federated data: datasets, client partitions (flwr-datasets partitioners) and tensor caches."""

from .loading import (
    DATA_KEYS, SPECS, ClientData, DatasetSpec, load_client_data, load_partition, load_test_data,
    spec_of,
)
from .partitioners import BalancedDirichletPartitioner, build_partitioner
from .population import ClientPopulation

__all__ = [
    "BalancedDirichletPartitioner", "ClientData", "ClientPopulation", "DATA_KEYS", "DatasetSpec", "SPECS",
    "build_partitioner", "load_client_data", "load_partition", "load_test_data", "spec_of",
]
