"""Federated data: datasets (hub or local copies), client partitions, input pipeline, caches.

The names below are imported on first use (PEP 562), so that `import feddata.disk_cache` in a
fresh ClientApp process does not pay for `datasets` (with pandas and pyarrow).
"""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

from importlib import import_module

PARTITIONERS = ("iid", "dirichlet-balanced", "lda", "natural", "shards")

_EXPORTS = {
    "AUGMENTATIONS": "augment", "TrainTransform": "augment",
    "DATA_KEYS": "settings", "DataSettings": "settings", "SplitSettings": "settings",
    "ClientData": "loading", "load_client_data": "loading",
    "load_partition": "loading", "load_test_data": "loading", "load_test_split": "loading",
    "spec_of": "specs",
    "DATASETS": "specs", "DATASET_BY_NAME": "specs", "DatasetSpec": "specs",
    "BalancedDirichletPartitioner": "partitioners", "build_partitioner": "partitioners",
    "PreparedPartition": "partition", "load_prepared_partition": "disk_cache",
}

__all__ = sorted([*_EXPORTS, "PARTITIONERS"])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'feddata' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
