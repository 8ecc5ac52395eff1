"""A node's own data (docs/deployment.md#own-data).

    python -m feddata check <data-path> --dataset <name>
        check a node's own data folder before the node joins a federation: the node's own reader
        and checks (the same key ranges as the run config); prints what the node would train on
        (examples, labels, held-out share) and what it skips, or the problem with the file and
        the fix; exit status 0 when the folder is usable, 1 when it is not, 2 for a bad option.
        --follow-links: as the node config data-follow-links = true (links may leave the
        folder).
    python -m feddata check <dataset-path> --dataset fashion-mnist --dataset-path
        check a run's local copy of its dataset (run config dataset-path) as the run reads it:
        the run's own reader (`sources.load_train_test`: for a folder of IDX files all four
        files, the t10k pair as the server's test set), then every example of both splits
        decoded; prints the sizes of both splits, or the problem and the fix.
    python -m feddata check <data-path> --dataset custom --classes 10 --shape 1,8,8
        the same for data of your own (run config dataset = 'custom', custom-classes,
        custom-shape).
    python -m feddata demo-folders <out> --nodes 3
        make disjoint, label-skewed folders of scikit-learn's digits, one per node
        (<out>/node-<i>, save_to_disk format), for a demo or a test of a deployment on own data;
        prints the folders and the run config that reads them.
    python -m feddata demo-folders <out> --nodes 3 --images
        the same digits as 8x8 grey PNG images, for dataset = 'custom' (custom-classes=10,
        custom-shape='1,8,8'): node i's folder in the formats image folder, save_to_disk,
        parquet in turn, and <out>/server-test, an image folder of held-out digits for the
        server's test-data.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

from .decode import LabelRefused, PixelsRefused
from .digits import load_digits_dataset
from .idx import IdxRefused
from .loading import _quiet_datasets, to_tensors
from .own_data import own_data_partition
from .settings import DataSettings
from .sources import DataSourceError, load_train_test
from .specs import DATASETS, DataSettingError, spec_of


def main(argv: list[str] | None = None) -> int:
    datasets = (*DATASETS, "custom")
    parser = argparse.ArgumentParser(prog="python -m feddata", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a node's own data folder")
    check.add_argument("data_path", help="the folder a SuperNode's node config data-path names")
    check.add_argument("--dataset", required=True, choices=datasets,
                       help="the run's dataset: its label space and input shape")
    check.add_argument("--client-val-fraction", type=float, default=0.1,
                       help="the share held out for federated evaluation (as the run's key)")
    check.add_argument("--classes", type=int, default=0,
                       help="dataset custom: the number of classes (run config custom-classes)")
    check.add_argument("--shape", default="",
                       help="dataset custom: C,H,W of the images (run config custom-shape)")
    check.add_argument("--follow-links", action="store_true",
                       help="follow links that leave the folder (node config "
                       "data-follow-links = true)")
    check.add_argument("--dataset-path", action="store_true",
                       help="check the folder as a run's dataset-path (its local copy of the "
                       "dataset: the train split and the server's test split) instead of a "
                       "node's own data-path")
    demo = sub.add_parser("demo-folders", help="disjoint label-skewed digits folders")
    demo.add_argument("out", help="the folder to write node-0, node-1, ... into")
    demo.add_argument("--nodes", type=int, default=3)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--images", action="store_true",
                      help="PNG images for dataset 'custom', formats in turn, and server-test/")
    args = parser.parse_args(argv)
    if args.command == "check" and args.dataset_path and args.follow_links:
        parser.error("--follow-links is a node's rule (node config data-follow-links), and "
                     "--dataset-path checks the run's reader, which follows none: give one")

    _quiet_datasets()
    if args.command == "demo-folders":
        if not 1 <= args.nodes <= DEMO_MAX_NODES:
            parser.error(f"--nodes {args.nodes}: give 1 to {DEMO_MAX_NODES} (the digits are "
                         "1,797 examples)")
        make = demo_image_folders if args.images else demo_folders
        try:
            folders = make(args.out, args.nodes, args.seed)
        except OSError as err:  # the out folder: a file, no permission, a full disk
            print(f"error: cannot write the demo folders into {args.out} ({err.strerror or err}"
                  f"{f': {err.filename}' if err.filename else ''}): give a folder you can "
                  "write", file=sys.stderr)
            return 1
        for folder in folders:
            print(folder)
        print(f"run config: {demo_run_config(args.out, args.images)}")
        return 0

    settings = DataSettings(  # (the held-out share's size does not depend on the seed: 0)
        dataset=args.dataset, custom_classes=args.classes, custom_shape=args.shape,
        custom_mean="", custom_std="", client_val_fraction=args.client_val_fraction, seed=0,
        dataset_path=args.data_path if args.dataset_path else "")
    try:
        return (check_dataset_path if args.dataset_path else check_data_path)(args, settings)
    except DataSettingError as err:
        print(f"error: {str(err).replace('run config ', '')} (here: {OPTIONS})", file=sys.stderr)
        return 2
    except (DataSourceError, IdxRefused) as err:  # (OwnDataError is a DataSourceError)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # the folder itself: a permission, a name too long, ...
        print(f"error: {args.data_path} cannot be read ({err.strerror or err}): give a folder "
              "you can read", file=sys.stderr)
        return 1


def check_data_path(args, settings: DataSettings) -> int:
    """`check` of a node's own folder: the node's path (`own_data_partition`)."""
    data, part = own_data_partition(settings, args.data_path, follow_links=args.follow_links)
    for line in data.skipped:
        print(f"{args.data_path}: {line}")
    n, held = len(data.y), len(part.val_y)
    counts = data.y.bincount(minlength=part.num_classes).tolist()
    labels = {i: c for i, c in enumerate(counts) if c}
    print(f"{args.data_path}: {n} examples ({data.source}) of dataset '{args.dataset}', "
          f"{len(labels)} of {part.num_classes} labels {labels}; {n - held} to train on, "
          f"{held} held out for federated evaluation: OK")
    if data.source == "IDX files":
        print(f"{args.data_path}: note: that is how a node reads it (one split); as a run's "
              "dataset-path it is read whole, the t10k pair as the server's test set: add "
              "--dataset-path to check that")
    return 0


def check_dataset_path(args, settings: DataSettings) -> int:
    """`check --dataset-path`: the run's own reader of its local copy (`load_train_test`, as the
    server and the simulated clients call it), then every example of both splits decoded as the
    run decodes them (`loading.to_tensors`) and its label checked against the dataset's
    classes."""
    spec = spec_of(settings)
    train, test = load_train_test(spec, args.data_path, test_fraction=settings.test_fraction,
                                  seed=settings.seed, dataset=args.dataset)
    sizes = []
    for split, ds in (("train", train), ("test", test)):
        where = f"dataset-path '{args.data_path}', {split} split" + (
            f" (in the run's order: shuffled with seed {settings.seed})" if split == "train"
            else "")
        try:
            _, y = to_tensors(ds, spec, ready=False)
        except PixelsRefused as err:  # (its message holds the fix)
            raise DataSourceError(f"{where}, {err}") from None
        except LabelRefused as err:
            raise DataSourceError(f"{where}, {err}: labels are the class indices 0 .. "
                                  f"{spec.num_classes - 1}; fix the label column") from None
        bad = ((y < 0) | (y >= spec.num_classes)).nonzero()
        if len(bad):
            first = int(bad[0][0])
            raise DataSourceError(
                f"{where}, example {first}: label "
                f"{int(y[first])} is outside dataset '{args.dataset}''s {spec.num_classes} "
                f"classes [0, {spec.num_classes - 1}]: fix the data")
        counts = y.bincount(minlength=spec.num_classes)
        sizes.append(f"{split} {len(y)} examples ({int((counts > 0).sum())} of "
                     f"{spec.num_classes} labels)")
    print(f"{args.data_path}: dataset-path of dataset '{args.dataset}': {sizes[0]}, "
          f"{sizes[1]}, the server's test set: OK")
    return 0


# the run-config keys `check` takes as options
OPTIONS = ("--client-val-fraction for client-val-fraction, --classes for custom-classes, "
           "--shape for custom-shape")


def _owners(labels, nodes: int, rng):
    """Each example's node: each label mostly (80 %) to one node, the rest spread."""
    owner = np.empty(len(labels), dtype=np.int64)
    for label in range(10):
        idx = np.flatnonzero(labels == label)
        main = label % nodes
        others = rng.integers(0, nodes, len(idx))
        owner[idx] = np.where(rng.random(len(idx)) < 0.8, main, others)
    return owner


def demo_folders(out: str, nodes: int, seed: int = 0) -> list:
    """Digits' examples dealt to `nodes` disjoint folders, label-skewed: each label goes mostly
    (80 %) to one node, the rest spread over the others. Returns the folders."""
    if nodes < 1:
        raise SystemExit("--nodes must be at least 1")
    ds = load_digits_dataset()
    rng = np.random.default_rng(seed)
    owner = _owners(np.asarray(ds["label"]), nodes, rng)
    folders = []
    for node in range(nodes):
        folder = Path(out) / f"node-{node}"
        ds.select(np.flatnonzero(owner == node)).save_to_disk(str(folder))
        folders.append(folder)
    return folders


DEMO_FORMATS = ("image folder", "save_to_disk", "parquet")
DEMO_MAX_NODES = 100  # (each node a folder of the 1,797 digits' share)
# run-config keys of the digits as images (demo_image_folders): dataset 'custom'
DEMO_CUSTOM = {"dataset": "custom", "custom-classes": 10, "custom-shape": "1,8,8",
               "custom-mean": "0.3", "custom-std": "0.38", "client-data": "own"}


def demo_run_config(out: str, images: bool) -> str:
    """The run config that reads the demo folders in `out` (flwr run's --run-config string):
    the digits as they are, or as images (DEMO_CUSTOM, with the server's test folder)."""
    if not images:
        return "client-data='own'"  # dataset 'digits' (the default): the server's test split
    keys = {**DEMO_CUSTOM, "test-data": str(Path(out).resolve() / "server-test")}
    return " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in keys.items())


def demo_image_folders(out: str, nodes: int, seed: int = 0) -> list:
    """Digits as 8x8 grey PNG images (dataset 'custom': DEMO_CUSTOM), a fifth held out as the
    server's test set (`<out>/server-test`, an image folder), the rest dealt to `nodes` disjoint,
    label-skewed folders in the formats DEMO_FORMATS in turn. Returns the node folders."""
    if nodes < 1:
        raise SystemExit("--nodes must be at least 1")
    ds = load_digits_dataset()
    rng = np.random.default_rng(seed)
    pixels = np.rint(np.asarray(ds["image"], dtype=np.float64).reshape(-1, 8, 8) * 255 / 16)
    pixels = pixels.astype(np.uint8)
    labels = np.asarray(ds["label"])
    test = rng.random(len(labels)) < 0.2
    _write_images(Path(out) / "server-test", pixels[test], labels[test], "image folder")
    owner = np.where(test, -1, _owners(labels, nodes, rng))
    folders = []
    for node in range(nodes):
        keep = owner == node
        folder = Path(out) / f"node-{node}"
        _write_images(folder, pixels[keep], labels[keep], DEMO_FORMATS[node % 3])
        folders.append(folder)
    return folders


def _write_images(folder, pixels, labels, fmt: str) -> None:
    from PIL import Image as PILImage

    images = [PILImage.fromarray(p, mode="L") for p in pixels]
    if fmt == "image folder":
        for i, (img, label) in enumerate(zip(images, labels)):
            (folder / str(int(label))).mkdir(parents=True, exist_ok=True)
            img.save(folder / str(int(label)) / f"{i:05d}.png")
        return
    from datasets import ClassLabel, Dataset, Features, Image

    feats = Features({"image": Image(), "label": ClassLabel(num_classes=10)})
    pngs = []
    for img in images:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        pngs.append({"bytes": buf.getvalue(), "path": None})
    ds = Dataset.from_dict({"image": pngs, "label": [int(v) for v in labels]}, features=feats)
    if fmt == "save_to_disk":
        ds.save_to_disk(str(folder))
    else:
        (folder / "data").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))


if __name__ == "__main__":
    sys.exit(main())
