"""Bytes per round of every registered method, measured on the real messages.

    python -m benchmarks.bytes_per_round                 # every method, markdown table
    python -m benchmarks.bytes_per_round --methods fedavg,fedcm --json out.json

Each method runs two rounds of its preset on digits (4 clients, 2 per round, 2 local steps)
through the real ServerApp and ClientApp in this process (`inprocess`); the byte meter
of the ServerApp (`server_app.traffic`: the serialized arrays and their keys of every train
instruction and reply) gives round 2's bytes down and up, divided by the clients of the round.
`x` is that over one fp32 copy of the model as an ArrayRecord (1x). The methods are read from
the registry, so methods added later are measured too. Round 2, because some methods send their
extra records only once they have state.

    OMP_NUM_THREADS=1 python -m benchmarks.bytes_per_round --resnet18   # FedMLB, FedAvg

`--resnet18` measures on FedMLB's only model, ResNet-18-GN, instead: a small CIFAR-shaped local
copy (random 32x32 images, made with `benchmarks.sim_vs_loop.make_cifar_copy` in a temporary
folder), 2 clients, 1 round, 1 local step of 4 images; round 1's bytes (the default methods
keep no state that could add records later). `x` is then over one fp32 copy of ResNet-18-GN, and
the last two columns are over FedAvg's bytes on the same model (fedavg is always measured).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

CLIENTS = 4
RESNET18_METHODS = "fedavg,fedmlb,fedmlb+acg"


def measure(method: str, folder: Path, extra: dict | None = None, rounds: int = 2,
            clients: int = CLIENTS) -> dict:
    """{'down', 'up'}: bytes per client of the last round of `method`'s preset."""
    from inprocess import run_in_process

    rc = {"method": method, "dataset": "digits", "num-server-rounds": rounds,
          "local-iterations": 2, "fraction-train": 0.5, "out-dir": str(folder),
          "run-name": method.replace("+", "_"), "checkpoint-every": 0, "plot-every": 0,
          **(extra or {})}
    run_in_process(rc, clients)
    results = json.loads((folder / rc["run-name"] / "results.json").read_text())
    row = results["rounds"][rounds]
    sampled = row["clients-sampled"]
    return {"down": row["bytes-down"] / sampled, "up": row["bytes-up"] / sampled,
            "clients": sampled}


def resnet18_setting(folder: Path) -> dict:
    """Run-config keys for ResNet-18-GN on a CIFAR-shaped copy in `folder` (2 clients, 1 step
    of 4 images each, a test set of 8 images: only the messages matter here)."""
    import datasets

    from benchmarks.sim_vs_loop import make_cifar_copy

    datasets.disable_progress_bars()
    data = make_cifar_copy(folder / "cifar-copy", n_train=16, n_test=8)
    return {"dataset": "cifar10", "dataset-path": str(data), "model": "resnet18",
            "partitioner": "iid", "fraction-train": 1.0, "local-iterations": 1, "batch-size": 4,
            "augment": "none", "client-val-fraction": 0.0, "test-max-examples": 8}


def one_copy(extra: dict | None = None) -> int:
    """Bytes of one fp32 copy of the model as an ArrayRecord (what 1x means): the digits model,
    or the one `extra` names."""
    from flwr.app import ArrayRecord

    from feddata import DataSettings, spec_of
    from models import build_model
    from run_config import resolve

    cfg = resolve({"dataset": "digits", **(extra or {})})
    spec = spec_of(DataSettings.from_config(cfg))
    model = build_model(cfg["model"], spec.in_shape, spec.num_classes, cfg["gn-groups"])
    return ArrayRecord(model.state_dict()).count_bytes()


def table(rows: dict[str, dict], unit: int, model: str = "the digits model",
          reference: dict | None = None) -> str:
    """Markdown rows; with `reference` (FedAvg's row on the same model) two more columns."""
    head = "| Method | down per client (bytes) | down (x) | up per client (bytes) | up (x) |"
    rule = "| --- | --- | --- | --- | --- |"
    if reference:
        head, rule = head + " down / FedAvg | up / FedAvg |", rule + " --- | --- |"
    lines = [head, rule]
    for method, r in rows.items():
        if "error" in r:
            lines.append(f"| {method} | failed: {r['error']} | | | |" + " |" * bool(reference))
            continue
        line = (f"| {method} | {r['down']:,.0f} | {r['down'] / unit:.2f} | "
                f"{r['up']:,.0f} | {r['up'] / unit:.2f} |")
        if reference:
            line += f" {r['down'] / reference['down']:.2f} | {r['up'] / reference['up']:.2f} |"
        lines.append(line)
    return "\n".join(lines) + f"\n\n1x = {unit:,} bytes (one fp32 copy of {model}).\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bytes_per_round",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", help="comma-separated (default: every registered method)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--resnet18", action="store_true",
                        help="ResNet-18-GN on a small CIFAR-shaped local copy, 2 clients, 1 "
                        f"round (default methods: {RESNET18_METHODS}; fedavg is always added)")
    args = parser.parse_args(argv)

    import methods

    logging.getLogger("flwr").setLevel(logging.WARNING)  # the runs' round lines
    default = RESNET18_METHODS.split(",") if args.resnet18 else list(methods.method_names())
    names = args.methods.split(",") if args.methods else default
    from flwr.supercore.task_identity import TaskIdentity  # messages outside a Flower runtime

    if TaskIdentity._run_id is None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    folder = Path(tempfile.mkdtemp(prefix="bytes-per-round-"))
    rows = {}
    extra, run = None, {}
    try:
        if args.resnet18:
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # a local copy: no hub
            os.environ.setdefault("FEDACG_CACHE_DIR", str(folder / "cache"))  # not ~/.cache
            names = ["fedavg"] + [n for n in names if n != "fedavg"]
            extra, run = resnet18_setting(folder), {"rounds": 1, "clients": 2}
        for name in names:
            try:
                rows[name] = measure(name, folder, extra, **run)
            except Exception as err:  # one method's failure is a row, not the end
                rows[name] = {"error": f"{type(err).__name__}: {err}"[:200]}
            print(f"{name}: {rows[name]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.resnet18:
        unit = one_copy({"dataset": "cifar10", "model": "resnet18"})
        reference = rows["fedavg"] if "error" not in rows["fedavg"] else None
        print(table(rows, unit, "ResNet-18-GN, 10 classes", reference))
    else:
        unit = one_copy()
        print(table(rows, unit))
    if args.json:
        args.json.write_text(json.dumps({"one-copy-bytes": unit, "methods": rows}, indent=2))
    return 1 if any("error" in r for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
