"""A sweep's wall time projected from a sample: every cell of one seed, cut to a few rounds.

    python -m benchmarks.sweep_projection                               # Table 5 on Fashion-MNIST
    python -m benchmarks.sweep_projection sweeps/digits.yaml --rounds 5 --jobs 2

Each (setting, method) of the sweep runs once, seed 0, for `--rounds` rounds, in-process, `--jobs`
at a time, as `python -m experiments.sweep --jobs` runs them (one process a cell, cpu-count / jobs
threads each), in a temporary folder of its own, removed at the end. A cell's full length is then
projected from its sample:

    projected cell = its start and end (run wall - the rounds' seconds) + R * (mean round s)

with R the sweep's rounds and the mean over the sample's rounds after the first (which loads the
clients' data); every seed of a cell is taken to cost what seed 0 does. The sweep's projected wall
time is the sum over its cells divided by `--jobs`: cells of unequal length leave a core idle at
the end, so it is a lower bound by at most one cell. The figures are this machine's, at its load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[1] / "sweeps" / "gcfed-t5-fmnist.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_projection",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path, nargs="?", default=SWEEP)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each sampled cell")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    if args.rounds < 3 or args.jobs < 1:
        parser.error("give --rounds 3 or more and --jobs 1 or more")
    out = Path(tempfile.mkdtemp(prefix="sweep-projection-"))
    try:
        return _project(args, out)
    finally:  # the sample's run folders are only the projection's means
        shutil.rmtree(out, ignore_errors=True)


def _project(args: argparse.Namespace, out: Path) -> int:
    from experiments.sweep_cells import cell_name, run_sweep
    from experiments.sweep_file import SweepError, load_sweep

    try:
        sweep = load_sweep(args.sweep, out, None, "in-process")
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    full = {cell_name(c): c for c in sweep.cells}
    first_seed = min(c.seed for c in sweep.cells)
    sample = [dataclasses.replace(c, run_config={**c.run_config,
                                                 "num-server-rounds": args.rounds,
                                                 "acc-at-rounds": ""})
              for c in sweep.cells if c.seed == first_seed]
    rounds_of = {cell_name(c): int(_rounds(c)) for c in sweep.cells}
    print(f"{args.sweep.name}: {len(sweep.cells)} cells; sampling {len(sample)} (seed "
          f"{first_seed}, {args.rounds} rounds, {args.jobs} at a time) in {out} | "
          f"{os.cpu_count()} CPUs | load average {os.getloadavg()[0]:.2f}", flush=True)
    t = time.monotonic()
    sweep.cells = sample
    run_sweep(sweep, echo=False, jobs=args.jobs)
    sample_wall = time.monotonic() - t
    per_cell = {}
    for cell in sample:
        results = json.loads((cell.run_dir / "results.json").read_text())
        rows = [r for r in results["rounds"] if r["round"] > 0]
        seconds = [r["seconds"] for r in rows]
        # the run from its start (before its data is loaded) to its end; the process's own
        # start (Python, the imports) is not in it
        wall = (datetime.fromisoformat(results["ended-at"])
                - datetime.fromisoformat(results["started-at"])).total_seconds()
        per_cell[cell_name(cell).rsplit("/", 1)[0]] = {
            "fixed": max(wall - sum(seconds), 0.0), "round": statistics.mean(seconds[1:])}
    total = 0.0
    for name, cell in full.items():
        p = per_cell[name.rsplit("/", 1)[0]]
        total += p["fixed"] + rounds_of[name] * p["round"]
    print("| cell | s a round (rounds 2+) | start and end s |\n| --- | --- | --- |")
    for name, p in sorted(per_cell.items(), key=lambda kv: -kv[1]["round"]):
        print(f"| {name} | {p['round']:.2f} | {p['fixed']:.1f} |")
    wall = total / args.jobs
    print(f"sample: {len(sample)} cells in {sample_wall / 60:.1f} min; projected sweep: "
          f"{len(full)} cells, {total / 3600:.2f} h of cells, {wall / 3600:.2f} h wall at "
          f"--jobs {args.jobs}")
    if args.json:
        args.json.write_text(json.dumps({"cells": per_cell, "cell-hours": total / 3600,
                                         "wall-hours": wall / 3600, "jobs": args.jobs,
                                         "sample-rounds": args.rounds}, indent=1))
    return 0


def _rounds(cell) -> int:
    """The cell's rounds: its run config's, else its set-up's."""
    from run_config import resolve

    return resolve(cell.run_config)["num-server-rounds"]


if __name__ == "__main__":
    sys.exit(main())
