"""The partition summary printed at the start of a run: clients, sizes, labels per client."""

from __future__ import annotations

import functools
from itertools import islice
from typing import Any

import numpy as np

from .loading import _source, load_partition, spec_of
from .partition import held_out_size
from .partitioners import column
from .settings import DataSettings


def partition_labels(settings: DataSettings, num_partitions: int):
    """The label array of every partition, in partition order: one read of the label column
    (through Arrow, `column`: reading it row by row decodes every image) and the split's
    indices."""
    label = spec_of(settings).label
    load_partition(settings, 0, num_partitions)  # the checks of the split, and the split itself
    part = _source(settings, num_partitions).partitioner
    every = column(part.dataset, label)
    for indices in part.partition_indices():
        yield every[np.asarray(indices, dtype=np.int64)]


def label_counts(settings: DataSettings, num_partitions: int, max_partitions: int = 100):
    """(label names, counts): `counts[i, j]` is partition i's examples of label j, for the first
    `max_partitions` partitions; the labels are the dataset's classes (a ClassLabel's names) or
    else the values found in its training split, sorted."""
    label = spec_of(settings).label
    labels = list(islice(partition_labels(settings, num_partitions), max_partitions))
    train = _source(settings, num_partitions).train_split()
    names = getattr(train.features[label], "names", None)  # a ClassLabel's
    values = np.arange(len(names)) if names is not None else np.unique(column(train, label))
    counts = np.stack([np.bincount(np.searchsorted(values, part), minlength=len(values))
                       for part in labels])
    return (list(names) if names is not None else [str(v) for v in values]), counts


@functools.lru_cache(maxsize=8)  # (the settings are hashable, equal for equal values)
def training_sizes(settings: DataSettings, num_partitions: int) -> tuple[int, ...]:
    """n_j: the training examples of every partition (its held-out part removed), in partition
    order; for the client parts that weigh clients by them (FedDC)."""
    sizes = (len(labels) for labels in partition_labels(settings, num_partitions))
    return tuple(n - held_out_size(n, settings.client_val_fraction) for n in sizes)


def partition_summary(settings: DataSettings, num_partitions: int) -> dict[str, Any]:
    """Sizes and label counts of every client's partition for `num_partitions` clients."""
    spec = spec_of(settings)
    sizes, labels_per_client = [], []
    seen: set = set()
    for labels in partition_labels(settings, num_partitions):
        sizes.append(len(labels))
        uniq = np.unique(labels)
        labels_per_client.append(len(uniq))
        seen.update(uniq.tolist())
    source = _source(settings, num_partitions)
    part = source.partitioner
    out = {
        "dataset": settings.dataset, "partitioner": settings.partitioner,
        "clients": num_partitions,
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
