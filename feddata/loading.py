"""Server test set and client partitions as ready tensors, cached per process.

A Ray actor serves many virtual clients over a run, so partitions are cached by a key of every
config value that shapes them (dataset, split, seed, partition id): a client pays the split and
the conversion to tensors once per process, not once per round.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import datasets
import torch
from datasets import Dataset

from .partitioners import build_partitioner

datasets.disable_progress_bars()


@dataclass(frozen=True)
class DatasetSpec:
    in_shape: tuple[int, int, int]
    num_classes: int
    image: str  # column names
    label: str
    mean: float
    std: float


SPECS = {"digits": DatasetSpec((1, 8, 8), 10, "image", "label", mean=4.88, std=6.02)}

# Config keys that determine the data a client or the server sees.
DATA_KEYS = ("dataset", "partitioner", "dirichlet-alpha", "lda-alpha", "lda-min-size",
             "test-fraction", "client-val-fraction", "seed")


@dataclass(frozen=True)
class ClientData:
    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor


def spec_of(cfg: dict[str, Any]) -> DatasetSpec:
    return SPECS[cfg["dataset"]]


def data_key(cfg: dict[str, Any]) -> tuple:
    return tuple(cfg[k] for k in DATA_KEYS)


@functools.lru_cache(maxsize=2)
def _train_test(dataset: str, test_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    if dataset == "digits":
        from .digits import load_digits_dataset

        full = load_digits_dataset()
    else:  # pragma: no cover - guarded by the config schema
        raise ValueError(f"unknown dataset '{dataset}'")
    split = full.train_test_split(test_size=test_fraction, seed=seed, stratify_by_column="label")
    return split["train"], split["test"]


@functools.lru_cache(maxsize=4)
def _partitioner(key: tuple, num_partitions: int):
    cfg = dict(zip(DATA_KEYS, key))
    train, _ = _train_test(cfg["dataset"], cfg["test-fraction"], cfg["seed"])
    spec = SPECS[cfg["dataset"]]
    part = build_partitioner(
        cfg["partitioner"], num_partitions, spec.label, dirichlet_alpha=cfg["dirichlet-alpha"],
        lda_alpha=cfg["lda-alpha"], lda_min_size=cfg["lda-min-size"], seed=cfg["seed"],
    )
    part.dataset = train
    return part


def to_tensors(ds: Dataset, spec: DatasetSpec) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = ds.with_format("numpy")
    x = torch.from_numpy(np.asarray(arrays[spec.image], dtype=np.float32))
    x = ((x - spec.mean) / spec.std).reshape(len(ds), *spec.in_shape)
    y = torch.from_numpy(np.asarray(arrays[spec.label], dtype=np.int64))
    return x, y


def load_partition(cfg: dict[str, Any], partition_id: int, num_partitions: int) -> Dataset:
    """The raw partition (a `datasets.Dataset`) of client `partition_id`."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} is not in [0, num-partitions={num_partitions})")
    part = _partitioner(data_key(cfg), num_partitions)
    try:
        with warnings.catch_warnings():  # flwr-datasets warns at every LDA re-draw
            warnings.filterwarnings("ignore", message=".*min_partition_size", category=UserWarning)
            return part.load_partition(partition_id)
    except ValueError as err:
        if cfg["partitioner"] == "lda":
            raise ValueError(
                f"the LDA split (lda-alpha={cfg['lda-alpha']}) could not give each of "
                f"{num_partitions} clients at least lda-min-size={cfg['lda-min-size']} examples: "
                "lower lda-min-size, raise lda-alpha or use fewer clients."
            ) from err
        raise


@functools.lru_cache(maxsize=256)
def _client_data(key: tuple, partition_id: int, num_partitions: int) -> ClientData:
    cfg = dict(zip(DATA_KEYS, key))
    part = load_partition(cfg, partition_id, num_partitions)
    spec = SPECS[cfg["dataset"]]
    val_n = int(round(len(part) * cfg["client-val-fraction"]))
    if val_n > 0 and len(part) - val_n > 0:
        split = part.train_test_split(test_size=val_n, seed=cfg["seed"])
        train, val = split["train"], split["test"]
    else:
        train, val = part, part.select([])
    return ClientData(*to_tensors(train, spec), *to_tensors(val, spec))


def load_client_data(cfg: dict[str, Any], partition_id: int, num_partitions: int) -> ClientData:
    """Client `partition_id`'s training and held-out tensors (cached per process)."""
    return _client_data(data_key(cfg), partition_id, num_partitions)


@functools.lru_cache(maxsize=2)
def _test(key: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = dict(zip(DATA_KEYS, key))
    _, test = _train_test(cfg["dataset"], cfg["test-fraction"], cfg["seed"])
    return to_tensors(test, SPECS[cfg["dataset"]])


def load_test_data(cfg: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The server's held-out test set as tensors (cached per process)."""
    return _test(data_key(cfg))
