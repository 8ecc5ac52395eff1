"""Client splits through flwr-datasets partitioners, seeded so every process computes the same one.

* `iid`: flwr-datasets' IidPartitioner.
* `lda` (GC-Fed): flwr-datasets' DirichletPartitioner: each class is spread over the clients with
  proportions ~ Dir(lda-alpha); unequal sizes; re-drawn until every client has lda-min-size.
* `dirichlet-balanced` (FedACG/FedAGM, after FedDyn's split): every client gets the same number
  of examples and its own class prior ~ Dir(dirichlet-alpha); examples are drawn by that prior from
  the classes that still have examples left.
* `natural` (LEAF): every client holds the examples of one natural id (FEMNIST writer, Shakespeare
  speaking role, CelebA celebrity) through flwr-datasets' NaturalIdPartitioner; with fewer clients
  than ids, a seeded random sample of the ids is used (LEAF's user sampling), the rest is unused.
* `shards` (McMahan et al.'s pathological split): flwr-datasets' ShardPartitioner; the examples
  sorted by label are cut into equal shards and every client gets shards-per-client of them.
"""

from __future__ import annotations

import numpy as np
from datasets import Dataset
from flwr_datasets.partitioner import (
    DirichletPartitioner, IidPartitioner, NaturalIdPartitioner, Partitioner, ShardPartitioner,
)



class BalancedDirichletPartitioner(Partitioner):
    """Equal-size partitions whose label distributions are drawn from Dir(alpha)."""

    def __init__(self, num_partitions: int, partition_by: str, alpha: float, seed: int = 42):
        super().__init__()
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        self._num_partitions = num_partitions
        self._partition_by = partition_by
        self._alpha = alpha
        self._seed = seed
        self._indices: list[np.ndarray] | None = None

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def load_partition(self, partition_id: int) -> Dataset:
        if not 0 <= partition_id < self._num_partitions:
            raise ValueError(f"partition_id {partition_id} not in [0, {self._num_partitions})")
        if self._indices is None:
            self._indices = self._split()
        return self.dataset.select(self._indices[partition_id])

    def _split(self) -> list[np.ndarray]:
        labels = np.asarray(self.dataset[self._partition_by])
        classes, labels = np.unique(labels, return_inverse=True)
        n, k, c = len(labels), self._num_partitions, len(classes)
        per_client = n // k
        if per_client == 0:
            raise ValueError(f"{n} examples cannot fill {k} equal partitions")
        rng = np.random.default_rng(self._seed)
        pools = [rng.permutation(np.flatnonzero(labels == j)).tolist() for j in range(c)]
        priors = rng.dirichlet(np.full(c, self._alpha), size=k)
        quota = np.full(k, per_client)
        out: list[list[int]] = [[] for _ in range(k)]
        left = np.array([len(p) for p in pools], dtype=float)
        while quota.any():
            client = rng.choice(np.flatnonzero(quota))
            p = priors[client] * (left > 0)
            if p.sum() == 0:  # the client's classes ran out: fall back to what is left
                p = left.copy()
            j = rng.choice(c, p=p / p.sum())
            out[client].append(pools[j].pop())
            left[j] -= 1
            quota[client] -= 1
        return [np.asarray(ix, dtype=np.int64) for ix in out]


class NaturalIdSamplePartitioner(Partitioner):
    """One natural id per partition (flwr-datasets' NaturalIdPartitioner, ids in sorted order).

    With more ids than partitions, `num_partitions` ids are drawn at random with `seed` and only
    their examples are partitioned; with fewer ids than partitions it raises a clear error.
    """

    def __init__(self, num_partitions: int, partition_by: str, seed: int = 42):
        super().__init__()
        self._num_partitions = num_partitions
        self._partition_by = partition_by
        self._seed = seed
        self._inner: NaturalIdPartitioner | None = None
        self.num_ids: int | None = None  # distinct ids in the whole split (for the summary)

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def _prepare(self) -> NaturalIdPartitioner:
        ids = np.asarray(self.dataset[self._partition_by])
        unique, inverse = np.unique(ids, return_inverse=True)
        self.num_ids = len(unique)
        if len(unique) < self._num_partitions:
            raise ValueError(
                f"the natural split has one client per '{self._partition_by}' value, and the "
                f"dataset has only {len(unique)} of them for {self._num_partitions} clients: use "
                f"at most {len(unique)} clients (num-supernodes) or another partitioner."
            )
        inner = NaturalIdPartitioner(partition_by=self._partition_by)
        if len(unique) == self._num_partitions:
            inner.dataset = self.dataset
        else:
            rng = np.random.default_rng(self._seed)
            chosen = np.zeros(len(unique), dtype=bool)
            chosen[rng.choice(len(unique), self._num_partitions, replace=False)] = True
            inner.dataset = self.dataset.select(np.flatnonzero(chosen[inverse]))
        return inner

    def load_partition(self, partition_id: int) -> Dataset:
        if not 0 <= partition_id < self._num_partitions:
            raise ValueError(f"partition_id {partition_id} not in [0, {self._num_partitions})")
        if self._inner is None:
            self._inner = self._prepare()
        return self._inner.load_partition(partition_id)


def build_partitioner(
    name: str, num_partitions: int, label: str, *, dirichlet_alpha: float, lda_alpha: float,
    lda_min_size: int, seed: int, lda_self_balancing: bool = False,
    natural_id: str | None = None, shards_per_client: int = 2,
) -> Partitioner:
    if name == "iid":
        return IidPartitioner(num_partitions)
    if name == "dirichlet-balanced":
        return BalancedDirichletPartitioner(num_partitions, label, dirichlet_alpha, seed=seed)
    if name == "lda":
        return DirichletPartitioner(
            num_partitions, label, lda_alpha, min_partition_size=lda_min_size,
            self_balancing=lda_self_balancing, shuffle=True, seed=seed,
        )
    if name == "natural":
        if natural_id is None:
            raise ValueError("the natural split needs a dataset with a natural client id "
                             "(femnist: writer_id, shakespeare: character_id, celeba: celeb_id)")
        return NaturalIdSamplePartitioner(num_partitions, natural_id, seed=seed)
    if name == "shards":
        return ShardPartitioner(num_partitions, label, num_shards_per_partition=shards_per_client,
                                shuffle=True, seed=seed)
    raise ValueError(f"unknown partitioner '{name}'")
