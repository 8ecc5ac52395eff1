"""Server test set and client partitions as ready tensors, cached per process.

A Ray actor serves many virtual clients over a run, so partitions are cached by a key of every
config value that shapes them (dataset, local copy, split, seed, partition id): a client pays the
split, the image decoding and the conversion to tensors once per process, not once per round.

Training inputs are kept as stored (uint8 images: a quarter of the memory of floats) and are
augmented and normalized per mini-batch on the training device (`augment.TrainTransform`);
evaluation inputs (a client's held-out part, the server's test set) are normalized once here.
`datasets` is imported only when data is loaded.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .partition import held_out_size
from .specs import DATASET_BY_NAME, DatasetSpec, spec_of  # noqa: F401  (spec_of: re-exported)

# Config keys that determine the data a client or the server sees.
DATA_KEYS = ("dataset", "dataset-path", "partitioner", "dirichlet-alpha", "lda-alpha",
             "lda-min-size", "lda-self-balancing", "shards-per-client", "test-fraction",
             "test-max-examples", "client-val-fraction", "seed")


@dataclass(frozen=True)
class ClientData:
    train_x: torch.Tensor  # stored values (uint8 images, float arrays, uint8 characters)
    train_y: torch.Tensor
    val_x: torch.Tensor  # normalized, ready for the model
    val_y: torch.Tensor


def data_key(cfg: dict[str, Any]) -> tuple:
    return tuple(cfg[k] for k in DATA_KEYS)


def _quiet_datasets() -> None:
    import datasets

    datasets.disable_progress_bars()


def _digits_train_test(test_fraction: float, seed: int):
    from .digits import load_digits_dataset

    split = load_digits_dataset().train_test_split(
        test_size=test_fraction, seed=seed, stratify_by_column="label")
    return split["train"], split["test"]


class _Source:
    """One process's view of the configured data: the train partitioner and the test split,
    loaded on first use."""

    def __init__(self, key: tuple, num_partitions: int):
        from .partitioners import build_partitioner

        self.cfg = cfg = dict(zip(DATA_KEYS, key))
        spec = DATASET_BY_NAME[cfg["dataset"]]
        self.partitioner = build_partitioner(
            cfg["partitioner"], num_partitions, spec.label,
            dirichlet_alpha=cfg["dirichlet-alpha"], lda_alpha=cfg["lda-alpha"],
            lda_min_size=cfg["lda-min-size"], lda_self_balancing=cfg["lda-self-balancing"],
            natural_id=spec.natural_id, shards_per_client=cfg["shards-per-client"],
            seed=cfg["seed"],
        )
        self._splits: tuple | None = None  # (train, test)

    def _load(self) -> tuple:
        if self._splits is None:
            _quiet_datasets()
            cfg = self.cfg
            if cfg["dataset"] == "digits" and not cfg["dataset-path"]:
                splits = _digits_train_test(cfg["test-fraction"], cfg["seed"])
            else:  # the hub, or a local copy
                splits = self._from_hub_or_copy()
            self.partitioner.dataset = splits[0]
            self._splits = splits
        return self._splits

    def _from_hub_or_copy(self) -> tuple:
        """(train, test) of the hub or the local copy; hub failures explained."""
        from .sources import DataSourceError, load_train_test

        cfg = self.cfg
        name = cfg["dataset"]
        try:
            return load_train_test(DATASET_BY_NAME[name], cfg["dataset-path"],
                                   test_fraction=cfg["test-fraction"], seed=cfg["seed"],
                                   dataset=name)
        except (ConnectionError, FileNotFoundError) as err:
            if cfg["dataset-path"]:
                raise
            raise DataSourceError(
                f"could not load {name} ('{DATASET_BY_NAME[name].hub}') from the Hugging Face "
                f"hub: {err}. "
                f"Without internet, make a local copy where the hub is reachable (python -m "
                f"feddata.save {name} <folder>) and set dataset-path to it."
            ) from err

    def load_partition(self, partition_id: int):
        self._load()
        return self.partitioner.load_partition(partition_id)

    def test(self):
        return self._load()[1]

    def train_split(self):
        return self._load()[0]


@functools.lru_cache(maxsize=4)
def _source(key: tuple, num_partitions: int) -> _Source:
    return _Source(key, num_partitions)


def check_shards(cfg: dict[str, Any], num_partitions: int, train_examples: int) -> None:
    """DataSourceError when the shards split cannot give every client its shards: it cuts the
    training examples into num-partitions * shards-per-client shards of one example or more."""
    shards = num_partitions * cfg["shards-per-client"]
    if shards > train_examples:
        from .sources import DataSourceError

        raise DataSourceError(
            f"the shards split needs {shards} shards ({num_partitions} clients x "
            f"shards-per-client = {cfg['shards-per-client']}) of at least one example, and "
            f"{cfg['dataset']} has {train_examples} training examples: lower shards-per-client "
            "or use fewer clients.")


def load_partition(cfg: dict[str, Any], partition_id: int, num_partitions: int):
    """The raw partition (a `datasets.Dataset`) of client `partition_id`."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(
            f"partition-id {partition_id} is not in [0, num-partitions={num_partitions})")
    source = _source(data_key(cfg), num_partitions)
    if cfg["partitioner"] == "shards":
        check_shards(cfg, num_partitions, len(source.train_split()))
    try:
        return source.load_partition(partition_id)
    except ValueError as err:
        if cfg["partitioner"] == "lda":
            raise ValueError(
                f"the LDA split (lda-alpha={cfg['lda-alpha']}) could not give each of "
                f"{num_partitions} clients at least lda-min-size={cfg['lda-min-size']} examples: "
                f"{err} Lower lda-min-size, raise lda-alpha, set lda-self-balancing or use fewer "
                "clients (num-supernodes)."
            ) from err
        raise


def to_tensors(ds, spec: DatasetSpec, ready: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) of `ds`; inputs normalized for the model when `ready`, else as stored."""
    from .decode import input_tensor, label_tensor, normalize

    x = input_tensor(ds, spec)
    return (normalize(x, spec) if ready else x), label_tensor(ds, spec)


@functools.lru_cache(maxsize=256)
def _client_data(key: tuple, partition_id: int, num_partitions: int) -> ClientData:
    cfg = dict(zip(DATA_KEYS, key))
    part = load_partition(cfg, partition_id, num_partitions)
    spec = DATASET_BY_NAME[cfg["dataset"]]
    val_n = held_out_size(len(part), cfg["client-val-fraction"])
    if val_n > 0:
        split = part.train_test_split(test_size=val_n, seed=cfg["seed"])
        train, val = split["train"], split["test"]
    else:
        train, val = part, part.select([])
    return ClientData(*to_tensors(train, spec, ready=False), *to_tensors(val, spec, ready=True))


def load_client_data(cfg: dict[str, Any], partition_id: int, num_partitions: int) -> ClientData:
    """Client `partition_id`'s training (stored) and held-out (normalized) tensors, cached."""
    return _client_data(data_key(cfg), partition_id, num_partitions)


def load_test_split(cfg: dict[str, Any], num_partitions: int = 1):
    """The server's test split (a `datasets.Dataset`), cut to test-max-examples if set."""
    test = _source(data_key(cfg), num_partitions).test()
    limit = cfg["test-max-examples"]
    if 0 < limit < len(test):
        rng = np.random.default_rng(cfg["seed"])
        test = test.select(np.sort(rng.choice(len(test), limit, replace=False)))
    return test


@functools.lru_cache(maxsize=2)
def _test(key: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = dict(zip(DATA_KEYS, key))
    return to_tensors(load_test_split(cfg), DATASET_BY_NAME[cfg["dataset"]], ready=True)


def load_test_data(cfg: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The server's held-out test set as normalized tensors (cached per process): the dataset's
    test split (test-data = 'dataset'), a folder of the server's own (read as a node's own data:
    its 'test' split or its only one), or None (test-data = 'none')."""
    source = cfg.get("test-data", "dataset")
    if source == "none":
        return None
    if source == "dataset":
        return _test(data_key(cfg))
    from .decode import normalize
    from .own_data import read_own_data

    spec = spec_of(cfg)
    data = read_own_data(source, spec, cfg["dataset"], split="test", key="test-data")
    x, y = data.x, data.y
    limit = cfg["test-max-examples"]
    if 0 < limit < len(y):
        keep = np.sort(np.random.default_rng(cfg["seed"]).choice(len(y), limit, replace=False))
        x, y = x[torch.from_numpy(keep)], y[torch.from_numpy(keep)]
    return normalize(x, spec), y
