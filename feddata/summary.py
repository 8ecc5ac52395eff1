"""The partition summary printed at the start of a run: clients, sizes, labels per client."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from flwr_datasets.partitioner import IidPartitioner

from .loading import _source, data_key, load_partition, spec_of
from .partitioners import NaturalIdSamplePartitioner, SplitOnce, column


def _split_indices(part) -> tuple[Any, Any] | None:
    """(dataset, partition id -> indices into it) where the partitioner keeps its split, else
    None."""
    if isinstance(part, NaturalIdSamplePartitioner):
        part = part._inner
    if isinstance(part, SplitOnce):  # ours: the balanced Dirichlet and the LDA split
        return part.dataset, part._indices
    if isinstance(part, IidPartitioner):  # datasets' contiguous shards
        n, k = len(part.dataset), part.num_partitions
        div, mod = divmod(n, k)
        starts = [div * i + min(i, mod) for i in range(k + 1)]
        return part.dataset, [range(starts[i], starts[i + 1]) for i in range(k)]
    mapping = getattr(part, "_partition_id_to_indices", None)  # flwr-datasets' own partitioners
    return (part.dataset, mapping) if isinstance(mapping, dict) else None


def partition_labels(cfg: dict[str, Any], num_partitions: int):
    """The label array of every partition, in partition order: one read of the label column
    when the partitioner keeps its split (ours and flwr-datasets'), else partition by partition.
    Labels are read through Arrow (`column`): reading them row by row decodes every image."""
    label = spec_of(cfg).label
    load_partition(cfg, 0, num_partitions)  # prepares the split (and the partitioner's dataset)
    split = _split_indices(_source(data_key(cfg), num_partitions).partitioner)
    if split is not None and len(split[1]) == num_partitions:
        every = column(split[0], label)
        for pid in range(num_partitions):
            yield every[np.asarray(split[1][pid], dtype=np.int64)]
        return
    for pid in range(num_partitions):
        yield column(load_partition(cfg, pid, num_partitions), label)


@functools.lru_cache(maxsize=8)
def _training_sizes(frozen_cfg: tuple, num_partitions: int) -> tuple[int, ...]:
    from .partition import held_out_size

    cfg = dict(frozen_cfg)
    sizes = (len(labels) for labels in partition_labels(cfg, num_partitions))
    return tuple(n - held_out_size(n, cfg["client-val-fraction"]) for n in sizes)


def training_sizes(cfg: dict[str, Any], num_partitions: int) -> tuple[int, ...]:
    """n_j: the training examples of every partition (its held-out part removed), in partition
    order; for the client parts that weigh clients by them (FedDC)."""
    return _training_sizes(tuple(sorted(cfg.items())), num_partitions)


def partition_summary(cfg: dict[str, Any], num_partitions: int) -> dict[str, Any]:
    """Sizes and label counts of every client's partition for `num_partitions` clients."""
    spec = spec_of(cfg)
    sizes, labels_per_client = [], []
    seen: set = set()
    for labels in partition_labels(cfg, num_partitions):
        sizes.append(len(labels))
        uniq = np.unique(labels)
        labels_per_client.append(len(uniq))
        seen.update(uniq.tolist())
    source = _source(data_key(cfg), num_partitions)
    part = source.partitioner
    out = {
        "dataset": cfg["dataset"], "partitioner": cfg["partitioner"], "clients": num_partitions,
        "train-examples": len(source.train_split()), "partitioned-examples": int(sum(sizes)),
        "size-min": int(min(sizes)), "size-median": float(np.median(sizes)),
        "size-max": int(max(sizes)), "labels-min": int(min(labels_per_client)),
        "labels-median": float(np.median(labels_per_client)),
        "labels-max": int(max(labels_per_client)), "labels-seen": len(seen),
        "num-classes": spec.num_classes,
    }
    if getattr(part, "num_ids", None) is not None:
        out["natural-ids"] = part.num_ids
    return out


def format_summary(s: dict[str, Any]) -> str:
    what = {"dirichlet-balanced": "balanced Dirichlet", "lda": "LDA", "iid": "iid",
            "natural": "natural", "shards": "shards"}[s["partitioner"]]
    text = (f"Partitions: {what} split of {s['dataset']} ({s['partitioned-examples']} of "
            f"{s['train-examples']} training examples) over {s['clients']} clients")
    if "natural-ids" in s:
        text += f" ({s['natural-ids']} natural ids)"
    return text + (
        f"; examples per client min {s['size-min']} / median {s['size-median']:g} / max "
        f"{s['size-max']}; labels per client min {s['labels-min']} / median "
        f"{s['labels-median']:g} / max {s['labels-max']} (of {s['num-classes']})")
