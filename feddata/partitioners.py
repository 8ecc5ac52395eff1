"""Client splits, seeded so every process computes the same; docs/data.md#partitioners.

Every partitioner computes its whole split once, on first use (`Partitioner`), and keeps the row
indices of each partition. `iid`, `natural` and `shards` give the partitions flwr-datasets 0.6's
IidPartitioner, NaturalIdPartitioner and ShardPartitioner give for the same data and seed (the same
arithmetic and the same draws of the same generator; tests/test_flwr_datasets_equal.py holds them
equal), without importing flwr-datasets, whose package pulls matplotlib, seaborn and scipy into
every process that loads data (docs/performance.md#the-simulations-memory).

* `iid`: contiguous blocks of the (shuffled) training split, `datasets.Dataset.shard`'s sizes.
* `lda` (GC-Fed): `LdaPartitioner`, FedLab's hetero Dirichlet: each class is spread over the
  clients with proportions ~ Dir(lda-alpha); unequal sizes; re-drawn until every client has
  lda-min-size (flwr-datasets' DirichletPartitioner's draws, without its limit of 10 draws).
* `dirichlet-balanced` (FedACG/FedAGM, after FedDyn's split): every client gets the same number
  of examples and its own class prior ~ Dir(dirichlet-alpha); examples are drawn by that prior from
  the classes that still have examples left.
* `natural` (LEAF): every client holds the examples of one natural id (FEMNIST writer, Shakespeare
  speaking role, CelebA celebrity), ids in sorted order; with fewer clients than ids, a seeded
  random sample of the ids is used (LEAF's user sampling), the rest is unused.
* `shards` (McMahan et al.'s pathological split): the examples sorted by label are cut into equal
  shards and every client gets shards-per-client of them, drawn at random.

Nothing here imports `datasets`: a partitioner only calls its dataset's `select`, `__len__` and
the column reads of `column`.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from datasets import Dataset


def column(dataset: Dataset, name: str) -> np.ndarray:
    """`np.asarray(dataset[name])`, read through Arrow (`datasets` 4 formats row by row, decoding
    every image of the row: seconds to minutes for 50k rows, against a fraction of a second)."""
    values = dataset.select_columns([name]).with_format("arrow")[:][name]
    if values.null_count:
        return np.asarray(dataset[name])
    out = values.to_numpy()
    if out.dtype == object:  # strings: as numpy makes them from the Python values
        out = np.asarray(values.to_pylist())
    return out


class Partitioner:
    """The split of `dataset` (assigned once) into `num_partitions` partitions, computed once on
    first use: `_split()` gives the dataset's row indices of every partition, in partition order
    (kept; `partition_indices()`)."""

    def __init__(self, num_partitions: int):
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        self._num_partitions = num_partitions
        self._dataset: Dataset | None = None
        self._indices: list | None = None

    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            raise AttributeError("the partitioner has no dataset yet: assign `dataset` first")
        return self._dataset

    @dataset.setter
    def dataset(self, value: Dataset) -> None:
        if self._dataset is not None:  # the split kept would no longer be the dataset's
            raise ValueError("a partitioner's dataset is assigned once")
        self._dataset = value

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def partition_indices(self) -> list:
        """The dataset's row indices of every partition, in partition order."""
        if self._indices is None:
            self._indices = self._split()
        return self._indices

    def load_partition(self, partition_id: int) -> Dataset:
        if not 0 <= partition_id < self._num_partitions:
            raise ValueError(f"partition_id {partition_id} not in [0, {self._num_partitions})")
        return self.dataset.select(self.partition_indices()[partition_id])

    def _split(self) -> list:
        raise NotImplementedError


class IidPartitioner(Partitioner):
    """Contiguous blocks, the first `n % k` of them one example longer (`Dataset.shard(k, i,
    contiguous=True)`, which flwr-datasets' IidPartitioner calls); the randomness is the shuffle
    of the training split before (feddata/sources.py)."""

    def _split(self) -> list[range]:
        size, longer = divmod(len(self.dataset), self._num_partitions)
        starts = [size * i + min(i, longer) for i in range(self._num_partitions + 1)]
        return [range(starts[i], starts[i + 1]) for i in range(self._num_partitions)]


class BalancedDirichletPartitioner(Partitioner):
    """Equal-size partitions whose label distributions are drawn from Dir(alpha)."""

    def __init__(self, num_partitions: int, partition_by: str, alpha: float, seed: int = 42):
        super().__init__(num_partitions)
        self._partition_by = partition_by
        self._alpha = alpha
        self._seed = seed

    def _split(self) -> list[np.ndarray]:
        """FedDyn's loop: while clients lack examples, a random client (uniform over those below
        quota) draws a class from its prior restricted to the classes with examples left (all
        of them by size when none of its classes has any) and takes that class's next example.

        One draw of each kind per example, in numpy's order and with numpy's arithmetic (see
        `_Draws`), so the split equals the plain `rng.choice` loop bit for bit, about 30 times
        faster; the class probabilities of a client are computed once per set of non-empty
        classes instead of once per example.
        """
        classes, labels = np.unique(column(self.dataset, self._partition_by), return_inverse=True)
        n, k, c = len(labels), self._num_partitions, len(classes)
        per_client = n // k
        if per_client == 0:
            raise ValueError(f"{n} examples cannot fill {k} equal partitions")
        rng = np.random.default_rng(self._seed)
        pools = [rng.permutation(np.flatnonzero(labels == j)).tolist() for j in range(c)]
        priors = rng.dirichlet(np.full(c, self._alpha), size=k)
        draws = _Draws(rng)
        active = list(range(k))  # clients below quota, ascending (np.flatnonzero(quota))
        quota = [per_client] * k
        left = [len(p) for p in pools]
        nonempty = np.array(left) > 0
        out: list[list[int]] = [[] for _ in range(k)]
        cdfs: dict[int, list[float]] = {}  # client -> class CDF for the current `nonempty`
        while active:
            i = draws.below(len(active))  # rng.choice(np.flatnonzero(quota))
            client = active[i]
            cdf = cdfs.get(client)
            if cdf is None:
                p = priors[client] * nonempty
                if p.sum() == 0:  # the client's classes ran out: fall back to what is left
                    cdf = _choice_cdf(np.array(left, dtype=float))  # this draw only
                else:
                    cdf = cdfs[client] = _choice_cdf(p)
            j = bisect_right(cdf, draws.uniform())  # rng.choice(c, p=p / p.sum())
            out[client].append(pools[j].pop())
            left[j] -= 1
            if left[j] == 0:
                nonempty[j] = False
                cdfs.clear()
            quota[client] -= 1
            if quota[client] == 0:
                del active[i]
        return [np.asarray(ix, dtype=np.int64) for ix in out]


def _choice_cdf(p: np.ndarray) -> list[float]:
    """The CDF `Generator.choice(c, p=p / p.sum())` searches (same operations, same rounding)."""
    cdf = (p / p.sum()).cumsum()
    cdf /= cdf[-1]
    return cdf.tolist()


class _Draws:
    """`Generator.integers(0, m)` and `Generator.random()` of a PCG64 generator, computed from its
    raw 64-bit outputs (fetched in blocks) the way numpy does, without a numpy call per draw.

    numpy (1.17+, checked on 2.x): a bounded integer below 2**32 is Lemire's multiply-and-reject
    on a 32-bit draw (nothing drawn when m = 1); PCG64 serves 32-bit draws as the low then the
    high half of one 64-bit output (`has_uint32`/`uinteger` in its state); a double is the top
    53 bits of a 64-bit output times 2**-53. tests/test_data.py pins the equality with the
    numpy calls, so a numpy that changes this fails there rather than changing splits silently.
    The generator must not be used for anything else afterwards (blocks are fetched ahead).
    """

    _BLOCK = 1 << 15

    def __init__(self, rng: np.random.Generator):
        state = rng.bit_generator.state
        if state["bit_generator"] != "PCG64":
            raise TypeError(f"_Draws needs a PCG64 generator, got {state['bit_generator']}")
        self._bits = rng.bit_generator
        self._has32, self._buf32 = int(state["has_uint32"]), int(state["uinteger"])
        self._words: list[int] = []
        self._pos = 0

    def _word(self) -> int:
        if self._pos == len(self._words):
            self._words, self._pos = self._bits.random_raw(self._BLOCK).tolist(), 0
        self._pos += 1
        return self._words[self._pos - 1]

    def _uint32(self) -> int:
        if self._has32:
            self._has32 = 0
            return self._buf32
        word = self._word()
        self._has32, self._buf32 = 1, word >> 32
        return word & 0xFFFFFFFF

    def below(self, m: int) -> int:
        """rng.integers(0, m), 1 <= m < 2**32."""
        if m == 1:
            return 0
        x = self._uint32() * m
        if (x & 0xFFFFFFFF) < m:
            threshold = (0xFFFFFFFF - (m - 1)) % m
            while (x & 0xFFFFFFFF) < threshold:
                x = self._uint32() * m
        return x >> 32

    def uniform(self) -> float:
        """rng.random()"""
        return (self._word() >> 11) * (1.0 / 9007199254740992.0)


class LdaPartitioner(Partitioner):
    """GC-Fed's split, FedLab's hetero Dirichlet (`hetero_dir_partition`): the examples of each
    class are cut among the clients by proportions p ~ Dir(alpha); with `self_balancing` a
    client already above the mean size gets no more (its p is set to 0, the rest renormalized).
    The whole draw is repeated until every client holds `min_partition_size` examples.

    The generator calls and the arithmetic are flwr-datasets' DirichletPartitioner's (seeded
    PCG64, one Dir draw per class in sorted class order, the same float operations, each
    partition shuffled at the end), so wherever that one finds a split this is the same split.
    It gives up after 10 draws; FedLab's loop never does, and sparse set-ups need hundreds:
    CIFAR-10 over 200 clients at alpha 0.05 leaves no client empty about once in 650 draws.
    Here a draw costs only its sizes (the indices are cut once, for the draw that is kept), and
    after `max_draws` a ValueError names the problem.
    """

    def __init__(self, num_partitions: int, partition_by: str, alpha: float, *,
                 min_partition_size: int = 10, self_balancing: bool = False, seed: int = 42,
                 max_draws: int = 10_000):
        super().__init__(num_partitions)
        if not alpha > 0:
            raise ValueError(f"the Dirichlet concentration must be positive, got {alpha}")
        self._partition_by = partition_by
        self._alpha = float(alpha)
        self._min_size = int(min_partition_size)
        self._self_balancing = self_balancing
        self._seed = seed
        self._max_draws = max_draws

    def _split(self) -> list[list[int]]:
        targets = column(self.dataset, self._partition_by)
        n, k = len(targets), self._num_partitions
        if n < k * max(self._min_size, 1):
            raise ValueError(f"{n} examples cannot give {k} partitions "
                             f"{max(self._min_size, 1)} examples each")
        by_class = [np.nonzero(targets == c)[0] for c in np.unique(targets)]
        rng = np.random.default_rng(self._seed)
        cuts, best = self._draw(by_class, k, self._alpha, rng, self._max_draws)
        if cuts is None:
            raise ValueError(
                f"no split of {self._max_draws:,} Dirichlet draws (alpha {self._alpha:g}) gave "
                f"each of {k} partitions at least {self._min_size} examples (the best draw left "
                f"{best[1]} below it, the smallest holding {best[0]}). "
                + self._what_splits(by_class, k))
        out: list[list[int]] = [[] for _ in range(k)]
        for members, cut in zip(by_class, cuts):
            for i, part in enumerate(np.split(members, cut)):
                out[i].extend(part.tolist())
        for indices in out:
            rng.shuffle(indices)
        return out

    def _draw(self, by_class: list[np.ndarray], k: int, alpha: float, rng, draws: int):
        """(the cuts of each class of the first of `draws` draws that gives every one of `k`
        partitions `min_size` examples, or None; (smallest, number below min_size) of the best
        draw)."""
        n = sum(len(members) for members in by_class)
        mean_size = n / k
        concentration = np.full(k, alpha)
        best = (-1, k)
        for _ in range(draws):
            sizes = np.zeros(k, dtype=np.int64)
            cuts = []
            for members in by_class:
                p = rng.dirichlet(concentration)  # p ~ Dir(alpha), one share per client
                if self._self_balancing:
                    p = np.where(sizes > mean_size, 0.0, p)
                    p = p / p.cumsum()[-1]  # (a left-to-right sum, as Python's sum())
                cut = (np.cumsum(p) * len(members)).astype(int)[:-1]
                sizes += np.diff(cut, prepend=0, append=len(members))
                cuts.append(cut)
            if sizes.min() >= self._min_size:
                return cuts, (int(sizes.min()), 0)
            best = max(best, (int(sizes.min()), -int((sizes < self._min_size).sum())))
        return None, (best[0], -best[1])

    def _what_splits(self, by_class: list[np.ndarray], k: int, draws: int = 200) -> str:
        """What would split this data with this seed: the most partitions (halving) at this
        alpha, and the smallest alpha (doubling, up to 100) for `k` partitions, each tried with
        `draws` draws; the search is bounded (a few seconds)."""
        found = []
        fewer = k // 2
        while fewer >= 1:
            if self._draw(by_class, fewer, self._alpha, np.random.default_rng(self._seed),
                          draws)[0] is not None:
                found.append(f"{fewer} partitions (clients) at lda-alpha {self._alpha:g}")
                break
            fewer //= 2
        alpha = self._alpha * 2
        while alpha <= 100:
            if self._draw(by_class, k, alpha, np.random.default_rng(self._seed),
                          draws)[0] is not None:
                found.append(f"{k} partitions at lda-alpha {alpha:g}")
                break
            alpha *= 2
        if not found:
            return "No smaller split or larger alpha tried finds one: lower lda-min-size."
        return (f"With this data and seed, {' or '.join(found)} split with lda-min-size "
                f"{self._min_size}.")


class NaturalIdSamplePartitioner(Partitioner):
    """One natural id per partition, the ids in sorted order and each partition's rows in dataset
    order (flwr-datasets' NaturalIdPartitioner).

    With more ids than partitions, `num_partitions` ids are drawn at random with `seed` and only
    their examples are partitioned; with fewer ids than partitions it raises a clear error.
    """

    def __init__(self, num_partitions: int, partition_by: str, seed: int = 42):
        super().__init__(num_partitions)
        self._partition_by = partition_by
        self._seed = seed
        self.num_ids: int | None = None  # distinct ids in the whole split (for the summary)

    def _split(self) -> list[np.ndarray]:
        ids, inverse, counts = np.unique(column(self.dataset, self._partition_by),
                                         return_inverse=True, return_counts=True)
        self.num_ids = len(ids)
        if len(ids) < self._num_partitions:
            raise ValueError(
                f"the natural split has one client per '{self._partition_by}' value, and the "
                f"dataset has only {len(ids)} of them for {self._num_partitions} clients: use "
                f"at most {len(ids)} clients (num-supernodes) or another partitioner."
            )
        chosen = np.arange(len(ids))
        if len(ids) > self._num_partitions:
            rng = np.random.default_rng(self._seed)
            chosen = np.sort(rng.choice(len(ids), self._num_partitions, replace=False))
        rows_by_id = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
        return [rows_by_id[i] for i in chosen]


class ShardPartitioner(Partitioner):
    """McMahan et al.'s shards, as flwr-datasets' ShardPartitioner cuts them with
    `num_shards_per_partition` given (shard size and the rest derived) and `shuffle` on.

    The rows sorted by label (a stable sort, as `Dataset.sort`) are cut into shards of
    floor(n / (k * s)) rows; of the floor(n / shard size) whole shards, the first k * s of a
    seeded permutation go to the partitions, s each in partition order; then each partition's rows
    are shuffled by the same generator, partition after partition.
    """

    def __init__(self, num_partitions: int, partition_by: str, shards_per_partition: int,
                 seed: int = 42):
        super().__init__(num_partitions)
        if shards_per_partition < 1:
            raise ValueError("shards_per_partition must be at least 1")
        self._partition_by = partition_by
        self._shards_per_partition = shards_per_partition
        self._seed = seed

    def _split(self) -> list[np.ndarray]:
        by_label = np.argsort(column(self.dataset, self._partition_by), kind="stable")
        n, k, s = len(by_label), self._num_partitions, self._shards_per_partition
        shard_size = n // (k * s)
        if shard_size == 0:
            raise ValueError(f"{n} examples cannot give {k * s} shards of one example or more")
        rng = np.random.default_rng(self._seed)
        shards = rng.permutation(n // shard_size)[:k * s].reshape(k, s)
        out = []
        for own in shards:
            rows = (own[:, None] * shard_size + np.arange(shard_size)).ravel()
            rng.shuffle(rows)
            out.append(by_label[rows])
        return out


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
        return LdaPartitioner(num_partitions, label, lda_alpha, min_partition_size=lda_min_size,
                              self_balancing=lda_self_balancing, seed=seed)
    if name == "natural":
        if natural_id is None:
            raise ValueError("the natural split needs a dataset with a natural client id "
                             "(femnist: writer_id, shakespeare: character_id, celeba: celeb_id)")
        return NaturalIdSamplePartitioner(num_partitions, natural_id, seed=seed)
    if name == "shards":
        return ShardPartitioner(num_partitions, label, shards_per_client, seed=seed)
    raise ValueError(f"unknown partitioner '{name}'")
