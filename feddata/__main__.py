"""A node's own data (docs/deployment.md#own-data).

    python -m feddata check <data-path> --dataset <name>
        check a node's own data folder before the node joins a federation: prints what the node
        would train on (examples, labels, held-out share) or the problem with the file and the
        fix; exit status 0 when the folder is usable, 1 when it is not.
    python -m feddata demo-folders <out> --nodes 3
        make disjoint, label-skewed folders of scikit-learn's digits, one per node
        (<out>/node-<i>, save_to_disk format), for a demo or a test of a deployment on own data.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from .specs import DATASET_BY_NAME, DATASETS

    parser = argparse.ArgumentParser(prog="python -m feddata", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a node's own data folder")
    check.add_argument("data_path", help="the folder a SuperNode's node config data-path names")
    check.add_argument("--dataset", required=True, choices=DATASETS,
                       help="the run's dataset: its label space and input shape")
    check.add_argument("--client-val-fraction", type=float, default=0.1,
                       help="the share held out for federated evaluation (as the run's key)")
    demo = sub.add_parser("demo-folders", help="disjoint label-skewed digits folders")
    demo.add_argument("out", help="the folder to write node-0, node-1, ... into")
    demo.add_argument("--nodes", type=int, default=3)
    demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from .loading import _quiet_datasets

    _quiet_datasets()
    if args.command == "demo-folders":
        for folder in demo_folders(args.out, args.nodes, args.seed):
            print(folder)
        return 0
    from .own_data import OwnDataError, read_own_data

    spec = DATASET_BY_NAME[args.dataset]
    try:
        data = read_own_data(args.data_path, spec, args.dataset)
    except OwnDataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    from .loading import held_out_size

    n = len(data.y)
    held = held_out_size(n, args.client_val_fraction)
    counts = data.y.bincount(minlength=spec.num_classes).tolist()
    labels = {i: c for i, c in enumerate(counts) if c}
    print(f"{args.data_path}: {n} examples ({data.source}) of dataset '{args.dataset}', "
          f"{len(labels)} of {spec.num_classes} labels {labels}; {n - held} to train on, "
          f"{held} held out for federated evaluation: OK")
    return 0


def demo_folders(out: str, nodes: int, seed: int = 0) -> list:
    """Digits' examples dealt to `nodes` disjoint folders, label-skewed: each label goes mostly
    (80 %) to one node, the rest spread over the others. Returns the folders."""
    from pathlib import Path

    import numpy as np

    from .digits import load_digits_dataset

    if nodes < 1:
        raise SystemExit("--nodes must be at least 1")
    ds = load_digits_dataset()
    rng = np.random.default_rng(seed)
    labels = np.asarray(ds["label"])
    owner = np.empty(len(labels), dtype=np.int64)
    for label in range(10):
        idx = np.flatnonzero(labels == label)
        main = label % nodes
        others = rng.integers(0, nodes, len(idx))
        owner[idx] = np.where(rng.random(len(idx)) < 0.8, main, others)
    folders = []
    for node in range(nodes):
        folder = Path(out) / f"node-{node}"
        ds.select(np.flatnonzero(owner == node)).save_to_disk(str(folder))
        folders.append(folder)
    return folders


if __name__ == "__main__":
    sys.exit(main())
