"""Save a dataset as a local copy for offline runs (`dataset-path`).

    python -m feddata.save cifar10 ~/data/cifar10                  # from the hub, save_to_disk
    # hub layout: data/<split>-*.parquet
    python -m feddata.save femnist ~/data/femnist --format parquet
    python -m feddata.save emnist ~/data/emnist --from-idx ~/Downloads/gzip   # NIST's EMNIST files
    python -m feddata.save fashion-mnist ~/data/fmnist --from-idx /usr/share/datasets/fashion-mnist
    python -m feddata.save cifar10 /scratch/cifar10 --from ~/data/cifar10      # convert a copy

The copy keeps the hub's columns, feature types (Image, ClassLabel) and splits, so a run with
`dataset-path` set to it reads exactly what it would read from the hub. Run it where the hub is
reachable, then move the folder to the machines without internet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


from . import idx
from .sources import DataSourceError, load_local_copy
from .specs import DATASET_BY_NAME

# EMNIST ByClass: 10 digits, 26 upper-case, 26 lower-case letters (emnist-byclass-mapping.txt).
EMNIST_CLASSES = [str(d) for d in range(10)] + [chr(c) for c in range(65, 91)] + \
    [chr(c) for c in range(97, 123)]


def emnist_from_idx(folder: str, variant: str = "byclass"):
    """EMNIST from NIST's IDX files
    (emnist-<variant>-{train,test}-{images-idx3,labels-idx1}-ubyte[.gz]) as a DatasetDict with
    the hub-style columns `image` (Image, 28x28 L) and `label` (ClassLabel)."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image
    from PIL import Image as PILImage

    root = Path(folder).expanduser()

    def find(split: str, what: str) -> Path:
        for suffix in ("-ubyte.gz", "-ubyte"):
            p = root / f"emnist-{variant}-{split}-{what}{suffix}"
            if p.exists():
                return p
        raise idx.IdxRefused(f"{root} has no emnist-{variant}-{split}-{what}-ubyte[.gz]: "
                             "give the folder of NIST's EMNIST files (gzip.zip, unpacked)")

    features = Features({"image": Image(), "label": ClassLabel(names=EMNIST_CLASSES)})
    splits = {}
    for split in ("train", "test"):
        images, labels = idx.read_idx_pair(find(split, "images-idx3"),
                                           find(split, "labels-idx1"), split, "emnist")
        # NIST stores EMNIST transposed relative to MNIST; .T gives upright characters.
        pil = [PILImage.fromarray(np.ascontiguousarray(img.T), mode="L") for img in images]
        splits[split] = Dataset.from_dict({"image": pil, "label": labels.astype(np.int64)},
                                          features=features)
    return DatasetDict(splits)


def images_from_idx(folder: str, name: str):
    """A dataset published as IDX files (Fashion-MNIST: `idx.py`'s folder layout) as a
    DatasetDict in its hub format: `image` (Image, PNG as the hub stores it), `label`."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image
    from PIL import Image as PILImage

    spec = DATASET_BY_NAME[name]
    features = Features({spec.image: Image(), spec.label: ClassLabel(names=list(spec.class_names))})
    splits = {}
    for split in idx.SPLIT_PREFIXES:
        images, labels = idx.read_idx_split(Path(folder).expanduser(), split, name)
        splits[split] = Dataset.from_dict(
            {spec.image: [PILImage.fromarray(img, mode="L") for img in images],
             spec.label: labels}, features=features)
    return DatasetDict(splits)


def load_source(name: str, source: str | None = None, idx_folder: str | None = None):
    """The DatasetDict to save: from IDX files (NIST's EMNIST, Fashion-MNIST), a local copy, or
    the hub."""
    import datasets

    spec = DATASET_BY_NAME[name]
    if idx_folder:
        return emnist_from_idx(idx_folder) if name == "emnist" else \
            images_from_idx(idx_folder, name)
    if source:
        return load_local_copy(source, spec, name)
    if not spec.hub:
        raise SystemExit(f"{name} has no hub copy: give --from-idx (EMNIST) or --from")
    return datasets.load_dataset(spec.hub, spec.subset)


def save(dd, out: str, fmt: str) -> list[Path]:
    """Write `dd` to `out` as a save_to_disk folder or in the hub's parquet layout."""
    folder = Path(out).expanduser()
    if fmt == "disk":
        dd.save_to_disk(str(folder))
        return [folder]
    written = []
    for split, ds in dd.items():
        path = folder / "data" / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(path))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m feddata.save", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=[n for n in DATASET_BY_NAME if n != "digits"])
    parser.add_argument("out", help="folder to write (it becomes the run's dataset-path)")
    parser.add_argument("--format", choices=("disk", "parquet"), default="disk",
                        help="save_to_disk folder (default) or parquet files in the hub's layout")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--from", dest="source", help="read a local copy instead of the hub")
    group.add_argument("--from-idx", dest="idx", help="EMNIST: folder of NIST's IDX files; "
                       "fashion-mnist: folder of its four IDX files")
    args = parser.parse_args(argv)
    if args.idx and args.dataset != "emnist" and not DATASET_BY_NAME[args.dataset].idx:
        parser.error("--from-idx is for emnist and fashion-mnist only")
    import datasets

    datasets.disable_progress_bars()
    try:
        dd = load_source(args.dataset, args.source, args.idx)
    except (idx.IdxRefused, DataSourceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (ConnectionError, datasets.exceptions.DatasetsError) as err:  # the hub
        why = (str(err).strip() or type(err).__name__).splitlines()[0]
        print(f"error: {args.dataset} could not be loaded from the Hugging Face hub "
              f"({type(err).__name__}: {why}): run it where the hub is reachable, or give "
              "--from / --from-idx", file=sys.stderr)
        return 1
    spec = DATASET_BY_NAME[args.dataset]
    first = next(iter(dd.values()))
    missing = [c for c in (spec.image, spec.label, spec.natural_id)
               if c and c not in first.column_names]
    if missing:
        print(f"error: the data lacks the column(s) {missing} of {args.dataset}'s hub format "
              f"(columns: {first.column_names})", file=sys.stderr)
        return 1
    try:
        written = save(dd, args.out, args.format)
    except OSError as err:  # the out folder: a file, no permission, a full disk
        print(f"error: cannot write {args.out} ({err.strerror or err}"
              f"{f': {err.filename}' if err.filename else ''}): give a folder you can write",
              file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(f"{args.dataset}: " + ", ".join(f"{s} {len(d)}" for s, d in dd.items())
          + f". Run with --run-config \"dataset='{args.dataset}' dataset-path='"
          f"{Path(args.out).expanduser().resolve()}'\"")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
