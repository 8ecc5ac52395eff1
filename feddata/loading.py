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

import numpy as np
import torch

from .decode import (_is_pixel_array, class_indices, input_tensor, label_tensor,
                     normalize, pixel_tensor)
from .digits import load_digits_dataset
from .own_data import read_own_data
from .partition import held_out_size
from .partitioners import build_partitioner
from .settings import DATA_KEYS, DataSettings, SplitSettings  # noqa: F401  (re-exported)
from .sources import DataSourceError, load_train_test
from .specs import DATASET_BY_NAME, DatasetSpec, spec_of  # noqa: F401  (spec_of: re-exported)


@dataclass(frozen=True)
class ClientData:
    train_x: torch.Tensor  # stored values (uint8 images, float arrays, uint8 characters)
    train_y: torch.Tensor
    val_x: torch.Tensor  # normalized, ready for the model
    val_y: torch.Tensor


def _quiet_datasets() -> None:
    import datasets

    datasets.disable_progress_bars()


def _digits_train_test(test_fraction: float, seed: int):
    split = load_digits_dataset().train_test_split(
        test_size=test_fraction, seed=seed, stratify_by_column="label")
    return split["train"], split["test"]


class _Source:
    """One process's view of the configured data: the train partitioner and the test split,
    loaded on first use."""

    def __init__(self, settings: SplitSettings, num_partitions: int):
        self.settings = s = settings
        spec = DATASET_BY_NAME[s.dataset]
        self.partitioner = build_partitioner(
            s.partitioner, num_partitions, spec.label,
            dirichlet_alpha=s.dirichlet_alpha, lda_alpha=s.lda_alpha,
            lda_min_size=s.lda_min_size, lda_self_balancing=s.lda_self_balancing,
            natural_id=spec.natural_id, shards_per_client=s.shards_per_client,
            seed=s.seed,
        )
        self._splits: tuple | None = None  # (train, test)
        self._whole: tuple | bool | None = None  # whole_train(): tensors, False or not yet

    def _load(self) -> tuple:
        if self._splits is None:
            splits = train_test_splits(self.settings)
            self.partitioner.dataset = splits[0]
            self._splits = splits
        return self._splits

    def test(self):
        return self._load()[1]

    def whole_train(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The train split's stored inputs and labels as tensors, in its row order, where
        reading them whole is one copy of a buffer (an IDX folder's pixels); None elsewhere
        (images to decode: each client decodes its own). A partition is then the rows of its
        indices, the same rows as `select` gives, without a `datasets` selection and its
        per-partition Arrow reads (a tenth of a second a client)."""
        if self._whole is None:
            self._whole = _whole_pixels(self._load()[0], DATASET_BY_NAME[self.settings.dataset])
        return self._whole or None

    def train_split(self):
        return self._load()[0]


def _whole_pixels(train, spec: DatasetSpec) -> tuple[torch.Tensor, torch.Tensor] | bool:
    """(inputs, labels) of every row of `train`, an IDX folder's split (False for other data):
    read from the Arrow table under it, then put in its row order (the shuffle's mapping of
    rows to the table's, which `datasets` keeps as `_indices`; reading through the mapping
    gathers row by row: a minute for 60,000 images)."""
    if not _is_pixel_array(train, spec):
        return False
    table = train.data
    labels = table.column(spec.label)
    if labels.null_count:
        return False  # label_tensor names the example that has none
    x = pixel_tensor(table.column(spec.image), spec)
    y = torch.from_numpy(class_indices(labels.to_numpy()).reshape(len(table)))
    mapping = getattr(train, "_indices", None)
    if mapping is not None:
        order = torch.from_numpy(mapping.column(0).to_numpy().astype(np.int64))
        x, y = torch.index_select(x, 0, order), torch.index_select(y, 0, order)
    # the order held against `datasets`' own reading of the first rows (should its internals
    # change, each client reads its rows through `datasets` again)
    first = min(len(train), 32)
    if y[:first].tolist() != class_indices(train.select(range(first))[spec.label]).tolist():
        return False
    return x, y


@functools.lru_cache(maxsize=2)
def train_test_splits(settings: SplitSettings) -> tuple:
    """(train, test) `datasets.Dataset`s of `settings`' data, loaded once per process: the
    server's test set and the clients' split (a source per client count) share them."""
    _quiet_datasets()
    s = settings
    if s.dataset == "digits" and not s.dataset_path:
        return _digits_train_test(s.test_fraction, s.seed)
    name = s.dataset  # the hub, or a local copy
    try:
        return load_train_test(DATASET_BY_NAME[name], s.dataset_path,
                               test_fraction=s.test_fraction, seed=s.seed, dataset=name)
    except (ConnectionError, FileNotFoundError) as err:
        if s.dataset_path:
            raise
        raise DataSourceError(
            f"could not load {name} ('{DATASET_BY_NAME[name].hub}') from the Hugging Face "
            f"hub: {err}. "
            f"Without internet, make a local copy where the hub is reachable (python -m "
            f"feddata.save {name} <folder>) and set dataset-path to it."
        ) from err


@functools.lru_cache(maxsize=4)
def _cached_source(key: SplitSettings, num_partitions: int) -> _Source:
    return _Source(key, num_partitions)


def _source(settings: SplitSettings, num_partitions: int) -> _Source:
    """The process's `_Source` of `settings`' data (cached by its SplitSettings part)."""
    return _cached_source(settings.split(), num_partitions)


def check_shards(settings: SplitSettings, num_partitions: int, train_examples: int) -> None:
    """DataSourceError when the shards split cannot give every client its shards: it cuts the
    training examples into num-partitions * shards-per-client shards of one example or more."""
    shards = num_partitions * settings.shards_per_client
    if shards > train_examples:
        raise DataSourceError(
            f"the shards split needs {shards} shards ({num_partitions} clients x "
            f"shards-per-client = {settings.shards_per_client}) of at least one example, and "
            f"{settings.dataset} has {train_examples} training examples: lower shards-per-client "
            "or use fewer clients.")


def load_partition(settings: SplitSettings, partition_id: int, num_partitions: int):
    """The raw partition (a `datasets.Dataset`) of client `partition_id`."""
    rows = partition_rows(settings, partition_id, num_partitions)
    return _source(settings, num_partitions).partitioner.dataset.select(rows)


def partition_rows(settings: SplitSettings, partition_id: int, num_partitions: int):
    """The train split's row indices of client `partition_id`'s partition, in its order; the
    split's errors explained."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(
            f"partition-id {partition_id} is not in [0, num-partitions={num_partitions})")
    s = settings
    source = _source(s, num_partitions)
    if s.partitioner == "shards":
        check_shards(s, num_partitions, len(source.train_split()))
    source.train_split()  # the partitioner's dataset, assigned on first use
    try:
        return source.partitioner.partition_indices()[partition_id]
    except ValueError as err:
        if s.partitioner == "lda":
            raise ValueError(
                f"the LDA split (lda-alpha={s.lda_alpha}) could not give each of "
                f"{num_partitions} clients at least lda-min-size={s.lda_min_size} examples: "
                f"{err} Lower lda-min-size, raise lda-alpha, set lda-self-balancing or use fewer "
                "clients (num-supernodes)."
            ) from err
        raise


def to_tensors(ds, spec: DatasetSpec, ready: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) of `ds`; inputs normalized for the model when `ready`, else as stored."""
    x = input_tensor(ds, spec)
    return (normalize(x, spec) if ready else x), label_tensor(ds, spec)


@functools.lru_cache(maxsize=256)
def _client_data(key: SplitSettings, partition_id: int, num_partitions: int) -> ClientData:
    rows = partition_rows(key, partition_id, num_partitions)
    spec = DATASET_BY_NAME[key.dataset]
    whole = _source(key, num_partitions).whole_train()
    if whole is not None:
        return _client_data_from(whole, np.asarray(rows, dtype=np.int64), key, spec)
    part = _source(key, num_partitions).partitioner.dataset.select(rows)
    val_n = held_out_size(len(part), key.client_val_fraction)
    if val_n > 0:
        split = part.train_test_split(test_size=val_n, seed=key.seed)
        train, val = split["train"], split["test"]
    else:
        train, val = part, part.select([])
    return ClientData(*to_tensors(train, spec, ready=False), *to_tensors(val, spec, ready=True))


def _client_data_from(whole: tuple[torch.Tensor, torch.Tensor], rows: np.ndarray,
                      key: SplitSettings, spec: DatasetSpec) -> ClientData:
    """`_client_data` cut from the whole train split's tensors: the partition's `rows` (of the
    train split, in the partition's order, as `select` takes them), and its held-out part as
    `datasets`' own `train_test_split` orders them (run on the row numbers)."""
    from datasets import Dataset

    val_n = held_out_size(len(rows), key.client_val_fraction)
    train, val = rows, rows[:0]
    if val_n > 0:
        split = Dataset.from_dict({"row": rows}).train_test_split(test_size=val_n, seed=key.seed)
        train, val = (np.asarray(split[name]["row"], dtype=np.int64) for name in ("train", "test"))
    x, y = whole
    train_i, val_i = torch.from_numpy(train), torch.from_numpy(val)
    take = torch.index_select  # row copies (x[i] gathers element by element: 10x slower)
    return ClientData(take(x, 0, train_i), take(y, 0, train_i), normalize(take(x, 0, val_i), spec),
                      take(y, 0, val_i))


def load_client_data(settings: SplitSettings, partition_id: int,
                     num_partitions: int) -> ClientData:
    """Client `partition_id`'s training (stored) and held-out (normalized) tensors, cached."""
    return _client_data(settings.split(), partition_id, num_partitions)


def forget_client_data() -> None:
    """Drop the partitions `load_client_data` keeps in this process."""
    _client_data.cache_clear()

def load_test_split(settings: SplitSettings, num_partitions: int = 1):
    """The server's test split (a `datasets.Dataset`), cut to test-max-examples if set."""
    test = _source(settings, num_partitions).test()
    limit = settings.test_max_examples
    if 0 < limit < len(test):
        rng = np.random.default_rng(settings.seed)
        test = test.select(np.sort(rng.choice(len(test), limit, replace=False)))
    return test


@functools.lru_cache(maxsize=2)
def _test(key: SplitSettings) -> tuple[torch.Tensor, torch.Tensor]:
    return to_tensors(load_test_split(key), DATASET_BY_NAME[key.dataset], ready=True)


def load_test_data(settings: DataSettings) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The server's held-out test set as normalized tensors (cached per process): the dataset's
    test split (test-data = 'dataset'), a folder of the server's own (read as a node's own data:
    its 'test' split or its only one), or None (test-data = 'none')."""
    source = settings.test_data
    if source == "none":
        return None
    if source == "dataset":
        return _test(settings.split())

    spec = spec_of(settings)
    data = read_own_data(source, spec, settings.dataset, split="test", key="test-data")
    x, y = data.x, data.y
    limit = settings.test_max_examples
    if 0 < limit < len(y):
        rng = np.random.default_rng(settings.seed)
        keep = np.sort(rng.choice(len(y), limit, replace=False))
        x, y = x[torch.from_numpy(keep)], y[torch.from_numpy(keep)]
    return normalize(x, spec), y
