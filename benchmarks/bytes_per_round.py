"""Bytes per round of every registered method, measured on the real messages.

    python -m benchmarks.bytes_per_round                 # every method, markdown table
    python -m benchmarks.bytes_per_round --methods fedavg,fedcm --json out.json

Each method runs two rounds of its preset on digits (4 clients, 2 per round, 2 local steps)
through the real ServerApp and ClientApp in this process (`server_app.inprocess`); the byte meter
of the ServerApp (`server_app.traffic`: the serialized arrays and their keys of every train
instruction and reply) gives round 2's bytes down and up, divided by the clients of the round.
`x` is that over one fp32 copy of the model as an ArrayRecord (1x). The methods are read from
the registry, so methods added later are measured too. Round 2, because some methods send their
extra records only once they have state.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

CLIENTS = 4


def measure(method: str, folder: Path, extra: dict | None = None) -> dict:
    """{'down', 'up'}: bytes per client of round 2 of `method`'s preset."""
    from server_app.inprocess import run_in_process

    rc = {"method": method, "dataset": "digits", "num-server-rounds": 2, "local-iterations": 2,
          "fraction-train": 0.5, "out-dir": str(folder), "run-name": method.replace("+", "_"),
          "checkpoint-every": 0, "plot-every": 0, **(extra or {})}
    run_in_process(rc, CLIENTS)
    results = json.loads((folder / rc["run-name"] / "results.json").read_text())
    row = results["rounds"][2]
    clients = row["clients-sampled"]
    return {"down": row["bytes-down"] / clients, "up": row["bytes-up"] / clients,
            "clients": clients}


def one_copy() -> int:
    """Bytes of one fp32 copy of the digits model as an ArrayRecord (what 1x means)."""
    from flwr.app import ArrayRecord

    from feddata import spec_of
    from models import build_model
    from run_config import resolve

    cfg = resolve({"dataset": "digits"})
    spec = spec_of(cfg)
    model = build_model(cfg["model"], spec.in_shape, spec.num_classes, cfg["gn-groups"])
    return ArrayRecord(model.state_dict()).count_bytes()


def table(rows: dict[str, dict], unit: int) -> str:
    lines = ["| Method | down per client (bytes) | down (x) | up per client (bytes) | up (x) |",
             "| --- | --- | --- | --- | --- |"]
    for method, r in rows.items():
        if "error" in r:
            lines.append(f"| {method} | failed: {r['error']} | | | |")
            continue
        lines.append(f"| {method} | {r['down']:,.0f} | {r['down'] / unit:.2f} | "
                     f"{r['up']:,.0f} | {r['up'] / unit:.2f} |")
    return "\n".join(lines) + f"\n\n1x = {unit:,} bytes (one fp32 copy of the digits model).\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bytes_per_round",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", help="comma-separated (default: every registered method)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    import logging

    import methods

    logging.getLogger("flwr").setLevel(logging.WARNING)  # the runs' round lines
    names = args.methods.split(",") if args.methods else list(methods.method_names())
    from flwr.supercore.task_identity import TaskIdentity  # messages outside a Flower runtime

    if TaskIdentity._run_id is None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    folder = Path(tempfile.mkdtemp(prefix="bytes-per-round-"))
    rows = {}
    try:
        for name in names:
            try:
                rows[name] = measure(name, folder)
            except Exception as err:  # one method's failure is a row, not the end
                rows[name] = {"error": f"{type(err).__name__}: {err}"[:200]}
            print(f"{name}: {rows[name]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    unit = one_copy()
    print(table(rows, unit))
    if args.json:
        args.json.write_text(json.dumps({"one-copy-bytes": unit, "methods": rows}, indent=2))
    return 1 if any("error" in r for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
