"""Client splits through flwr-datasets partitioners, seeded so every process computes the same one.

* `iid`: flwr-datasets' IidPartitioner.
* `lda` (GC-Fed): flwr-datasets' DirichletPartitioner: each class is spread over the clients with
  proportions ~ Dir(lda-alpha); unequal sizes; re-drawn until every client has lda-min-size.
* `dirichlet-balanced` (FedACG/FedAGM, after FedDyn's split): every client gets the same number
  of examples and its own class prior ~ Dir(dirichlet-alpha); examples are drawn by that prior from
  the classes that still have examples left.
"""

from __future__ import annotations

import numpy as np
from datasets import Dataset
from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner, Partitioner


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


def build_partitioner(
    name: str, num_partitions: int, label: str, *, dirichlet_alpha: float, lda_alpha: float,
    lda_min_size: int, seed: int,
) -> Partitioner:
    if name == "iid":
        return IidPartitioner(num_partitions)
    if name == "dirichlet-balanced":
        return BalancedDirichletPartitioner(num_partitions, label, dirichlet_alpha, seed=seed)
    if name == "lda":
        return DirichletPartitioner(
            num_partitions, label, lda_alpha, min_partition_size=lda_min_size,
            self_balancing=False, shuffle=True, seed=seed,
        )
    raise ValueError(f"unknown partitioner '{name}'")
