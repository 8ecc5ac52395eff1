"""The fast balanced Dirichlet split equals the plain `rng.choice` loop it replaced, bit for bit.

`_reference_split` below is the original implementation (one numpy call per draw, about 5 s for
50k labels); the partitioner must produce the same index arrays for every seed and shape,
including the fall-back draw (a client whose classes ran out) and the last-client draws
(`integers(0, 1)` draws nothing).
"""

import time

import numpy as np
import pytest
from datasets import Dataset

from feddata.partitioners import BalancedDirichletPartitioner, _Draws


def _reference_split(labels, k: int, alpha: float, seed: int) -> list[np.ndarray]:
    classes, labels = np.unique(np.asarray(labels), return_inverse=True)
    n, c = len(labels), len(classes)
    per_client = n // k
    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == j)).tolist() for j in range(c)]
    priors = rng.dirichlet(np.full(c, alpha), size=k)
    quota = np.full(k, per_client)
    out = [[] for _ in range(k)]
    left = np.array([len(p) for p in pools], dtype=float)
    while quota.any():
        client = rng.choice(np.flatnonzero(quota))
        p = priors[client] * (left > 0)
        if p.sum() == 0:
            p = left.copy()
        j = rng.choice(c, p=p / p.sum())
        out[client].append(pools[j].pop())
        left[j] -= 1
        quota[client] -= 1
    return [np.asarray(ix, dtype=np.int64) for ix in out]


def _split(labels, k: int, alpha: float, seed: int) -> list[np.ndarray]:
    part = BalancedDirichletPartitioner(k, "label", alpha, seed=seed)
    part.dataset = Dataset.from_dict({"label": list(map(int, labels))})
    return part._split()


@pytest.mark.parametrize("n,k,c,alpha", [
    (200, 10, 10, 0.1), (1000, 7, 3, 0.5), (500, 50, 10, 0.01), (300, 3, 10, 1.0),
    (97, 97, 5, 0.3), (400, 1, 10, 0.3), (2000, 40, 100, 0.05), (600, 600, 10, 0.001),
])
def test_same_split_as_the_plain_loop(n, k, c, alpha):
    data = np.random.default_rng(n + k).integers(0, c, n)
    for seed in (0, 1, 7):
        fast, ref = _split(data, k, alpha, seed), _reference_split(data, k, alpha, seed)
        assert len(fast) == k
        for a, b in zip(fast, ref):
            np.testing.assert_array_equal(a, b)


def test_fallback_draws_happen_in_the_cases_above():
    """(600 clients, alpha 0.001): some client's prior has no class left, so the fall-back path
    (draw by what is left) is exercised by the equality test, not only the prior path."""
    data = np.random.default_rng(600 + 600).integers(0, 10, 600)
    classes, labels = np.unique(data, return_inverse=True)
    rng = np.random.default_rng(0)
    for j in range(len(classes)):
        rng.permutation(np.flatnonzero(labels == j))
    priors = rng.dirichlet(np.full(len(classes), 0.001), size=600)
    assert (priors == 0).any()  # exact zeros: those clients fall back once their classes empty


def test_draws_equal_numpys_calls():
    """`_Draws` against `Generator.integers(0, m)` / `.random()` interleaved in random order,
    with ranges whose rejection rate is high (m = 3 * 2**30: a quarter of the draws rejected)."""
    plan = np.random.default_rng(5)
    ms = [1, 2, 3, 10, 999, 2**31 + 1, 3 * 2**30, 2**32 - 2]
    for seed in range(3):
        ref, fast_rng = np.random.default_rng(seed), np.random.default_rng(seed)
        ref.permutation(11), fast_rng.permutation(11)  # leave half a 64-bit word buffered
        draws = _Draws(fast_rng)
        for _ in range(3000):
            if plan.random() < 0.5:
                m = int(plan.choice(ms))
                assert draws.below(m) == int(ref.integers(0, m))
            else:
                assert draws.uniform() == ref.random()


def test_cifar_sized_split_is_fast():
    """50k labels, 10k clients: the plain loop took about 5 s here; allow a loaded machine."""
    data = np.random.default_rng(0).integers(0, 10, 50_000)
    part = BalancedDirichletPartitioner(10_000, "label", 0.3, seed=0)
    part.dataset = Dataset.from_dict({"label": data.tolist()})
    t = time.perf_counter()
    parts = part._split()
    assert time.perf_counter() - t < 4.0
    assert all(len(p) == 5 for p in parts)
    assert len(np.unique(np.concatenate(parts))) == 50_000


@pytest.mark.parametrize("overrides,clients", [
    ({"partitioner": "dirichlet-balanced"}, 10), ({"partitioner": "iid"}, 7),
    ({"partitioner": "lda", "lda-alpha": 0.5, "lda-min-size": 5}, 6),
    ({"partitioner": "shards", "shards-per-client": 2}, 10), ("femnist", 4), ("shakespeare", 5),
])
def test_partition_labels_equal_loading_each_partition(overrides, clients, tmp_path):
    """The summary's labels (one column read and the split's indices) against the labels of each
    loaded partition read the plain way."""
    from feddata import DataSettings, load_partition
    from feddata.summary import partition_labels
    from run_config import resolve

    if isinstance(overrides, str):  # a natural split of a small copy in the hub's format
        import hubformats

        path = getattr(hubformats, overrides)(tmp_path, np.random.default_rng(0))
        overrides = {"dataset": overrides, "dataset-path": str(path), "partitioner": "natural"}
    cfg = DataSettings.from_config(resolve({**overrides, "seed": 3}))
    label = {"femnist": "character", "shakespeare": "y"}.get(cfg.dataset, "label")
    fast = list(partition_labels(cfg, clients))
    assert len(fast) == clients
    for pid, labels in enumerate(fast):
        plain = np.asarray(list(load_partition(cfg, pid, clients)[label]))
        np.testing.assert_array_equal(labels, plain)
