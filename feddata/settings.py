"""The data package's settings: the run-config keys it reads, as one typed value (issue 51).

`DataSettings.from_config(cfg)` is the one place that reads a run config's dict: the apps, the
drivers and the tests call it at their edge, and every function of the package takes the
settings (or the few values it needs), so that a signature shows what a function reads.

A field is the run-config key of the same name with '_' for '-' (`config_name`). Values are
taken as the resolved run config holds them (`run_config.resolve` gives each key its schema
type); custom-shape, custom-mean and custom-std stay the run config's text, which
`specs.spec_of` parses so that its errors name the key and the value as written. The defaults
are the schema's (a test holds them equal), for callers without a run config (`python -m
feddata check`, tests). Plain data, no heavy imports (the ClientApp imports it on every message).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


def config_name(field: str) -> str:
    """The run-config key of a settings field: `dataset_path` -> 'dataset-path'."""
    return field.replace("_", "-")


@dataclass(frozen=True)
class SplitSettings:
    """What shapes the data a client or the server loads from a dataset: the dataset and its
    copy, the split, the server's test subset, the held-out share and the seed. The key of the
    per-process caches of `loading` (hashable, equal for settings that load the same data)."""

    dataset: str = "digits"
    dataset_path: str = ""  # '' = the Hugging Face hub
    partitioner: str = "dirichlet-balanced"
    dirichlet_alpha: float = 0.3
    lda_alpha: float = 0.1
    lda_min_size: int = 10
    lda_self_balancing: bool = False
    shards_per_client: int = 2
    test_fraction: float = 0.2
    test_max_examples: int = 0
    client_val_fraction: float = 0.1
    seed: int = 0

    def split(self) -> SplitSettings:
        """These settings' SplitSettings part (the caches' key: a DataSettings that differs in
        another field loads the same data)."""
        return SplitSettings(**{f.name: getattr(self, f.name) for f in fields(SplitSettings)})


@dataclass(frozen=True)
class DataSettings(SplitSettings):
    """Every run-config key of the schema's data group and the seed: what the data package
    reads (the SplitSettings fields, and those below) and keys its disk cache with."""

    client_data: str = "partitions"
    test_data: str = "dataset"  # 'dataset', 'none' or the server's folder
    num_clients: int = 0
    custom_classes: int = 0
    custom_shape: str = ""  # 'C,H,W', the run config's text
    custom_mean: str = ""  # comma-separated, the run config's text
    custom_std: str = ""
    augment: str = "auto"
    augment_padding: int = 4
    augment_rotation: float = 0.0

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> DataSettings:
        """The settings of a resolved run config: the edge, the one read of its dict (a
        KeyError names a key it lacks)."""
        return cls(**{f.name: cfg[config_name(f.name)] for f in fields(cls)})

    def as_config(self) -> dict[str, Any]:
        """{run-config key: value} of every field (the disk cache's key)."""
        return {config_name(f.name): getattr(self, f.name) for f in fields(self)}


# The run-config keys of the data a client or the server sees (SplitSettings), in its order.
DATA_KEYS: tuple[str, ...] = tuple(config_name(f.name) for f in fields(SplitSettings))
