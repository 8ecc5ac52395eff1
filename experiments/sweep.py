"""Run a grid of simulations (methods x settings x seeds) and write the papers' comparison table.

    python -m experiments.sweep sweeps/digits.yaml             # run what is missing, then the table
    python -m experiments.sweep sweeps/digits.yaml --dry-run   # list the cells and what is done
    python -m experiments.sweep sweeps/digits.yaml --table-only
    python -m experiments.sweep sweeps/digits.yaml --in-process  # no flwr run, no Ray: faster

Each cell is one `flwr run <app> <connection> --stream --run-config <cell.toml>
--federation-config "..."`, run in turn, against a simulation SuperLink the sweep starts on free
loopback ports and stops at the end (also on an error or Ctrl-C), unless `connection` names one
of your own (it must run on this machine: the sweep reads the run folders it writes).
With `backend: in-process` (or `--in-process`) each cell instead runs the real ServerApp and
ClientApp in this process through an in-memory grid (`inprocess`): same apps, same
maths, same run folder, no SuperLink, no Ray, no message serialization.
A cell whose run folder holds a complete results.json made from the same cell description,
resolved to the same config (a set-up file or preset changed since runs it again), is skipped,
so a stopped sweep resumes where it was. The sweep file format is in docs/results.md
("Sweeps"); `SWEEP_KEYS` lists its keys. The sweep file and the config files it names are read
bounded and without YAML aliases, every key's type is checked before anything runs, and the
names of the sweep, its methods and settings become folder names only through `slug` (no '..',
no '/'): the sweep writes inside its own folder under out-dir, never through a link, and
counts a cell as done only from folders that are its own (this user's, writable by no one else;
docs/security.md#run-folders-and-results-read-back). A file that would make more than
--max-cells cells (default 1000) is refused before any cell is made.
Every cell's sweep-cell.json records the code it ran on ("code-version": the commit, and
whether the checkout differed from it); the table refuses cells of different versions, naming them,
unless --mixed-versions; --dry-run shows each finished cell's version. The table comes with
cells.csv, one row per cell (reporting.cells), from which a page can rebuild it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from fnmatch import fnmatchcase
from pathlib import Path

from reporting.cells import CellsError, cell_names_csv
from reporting.code_version import APP_ROOT, code_version, short_label, version_label

from .sweep_cells import (cell_name, cell_version, cells_to_run, command, finished_cells,
                          is_done, is_result, num_nodes_of, run_sweep, start_cell, sweep_folder)
from .sweep_file import MAX_CELLS, SWEEP_KEYS, SweepError, load_sweep, slug
from .sweep_report import write_report

# What the tests and the generated pages import from here (the code is in the modules above).
__all__ = ["SWEEP_KEYS", "SweepError", "cells_to_run", "is_done", "is_result",
           "load_sweep", "main", "run_sweep", "slug", "start_cell", "sweep_folder",
           "write_report"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path, help="the sweep's YAML file")
    parser.add_argument("--out-dir", type=Path, help="overrides the file's out-dir")
    parser.add_argument("--connection",
                        help="use this SuperLink connection instead of starting one")
    parser.add_argument("--in-process", action="store_true",
                        help="backend in-process: run the cells in this process (no flwr run, "
                             "no Ray), whatever the file's backend")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and their state")
    parser.add_argument("--table-only", action="store_true",
                        help="only (re)write the table and plot")
    parser.add_argument("--quiet", action="store_true", help="do not echo the runs' round lines")
    parser.add_argument("--cells", metavar="PATTERN",
                        help="only the cells whose '<setting>/<method>/<seed>' matches this "
                             "shell pattern (e.g. '5of100-lda0.1/GC-Fed/1', '*/FedAvg/*'): "
                             "one cell run again, or a part of the sweep")
    parser.add_argument("--jobs", type=int, default=1,
                        help="in-process cells run side by side, each in a process of its own "
                             "with cpu-count / jobs threads (default 1: in turn, in this "
                             "process); a cell's round lines then go to its log only")
    parser.add_argument("--mixed-versions", action="store_true",
                        help="tabulate finished cells that ran on different code versions "
                             "(refused by default: the message names the versions and cells)")
    parser.add_argument("--done-in", type=Path, metavar="CELLS_CSV",
                        help="do not run the cells a page's cells CSV holds: a table run in "
                             "parts, on the code version the CSV's cells ran on (refused on "
                             "another unless --mixed-versions; docs/results.md#a-table-in-parts)")
    parser.add_argument("--max-cells", type=int, default=MAX_CELLS,
                        help=f"refuse a sweep file that makes more cells than this (default "
                             f"{MAX_CELLS}; counted before any cell is made)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more cells at a time")
    if args.max_cells < 1:
        parser.error(f"--max-cells {args.max_cells}: give 1 or more")
    try:
        sweep = load_sweep(args.sweep, args.out_dir, args.connection,
                           "in-process" if args.in_process else None, max_cells=args.max_cells)
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.cells:
        chosen = [c for c in sweep.cells if fnmatchcase(cell_name(c), args.cells)]
        if not chosen:
            print(f"error: --cells {args.cells!r} matches none of the sweep's cells (e.g. "
                  f"'{cell_name(sweep.cells[0])}'; --dry-run lists them)", file=sys.stderr)
            return 2
        sweep.cells = chosen
    if args.done_in:
        problem = _skip_done(sweep, args.done_in, args.mixed_versions)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        if not sweep.cells:
            print(f"every cell of the sweep is in {args.done_in}: nothing to run")
            return 0
    try:  # the sweep's folders before anything is listed, run or tabulated
        sweep_folder(sweep, make=not (args.dry_run or args.table_only))
    except FileNotFoundError:
        pass  # (nothing made yet: nothing done)
    except OSError as err:  # UnusableFile: a link, a file, another user's, /proc, ...
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        return _go(sweep, args)
    except OSError as err:  # a folder or file planted while the sweep ran
        print(f"error: {err}", file=sys.stderr)
        return 1


def _skip_done(sweep, path: Path, mixed_versions: bool) -> str | None:
    """Drop from `sweep.cells` the cells the cells CSV at `path` holds (reporting.cells), after
    checking that they ran on the code this sweep runs on; the problem, or None."""
    try:
        rows = cell_names_csv(path)
    except FileNotFoundError:
        return (f"--done-in {path} does not exist: give a page's cells CSV (e.g. "
                "docs/fedacg-fmnist-cells.csv)")
    except (CellsError, OSError) as err:
        return str(err)
    here = version_label(code_version(sweep.app if sweep.backend == "flwr" else APP_ROOT))
    theirs = sorted({r["code-version"] for r in rows})
    if theirs and theirs != [here] and not mixed_versions:
        return (f"the cells of {path} ran on {', '.join(map(short_label, theirs))}, this "
                f"checkout is {short_label(here)}: run the rest on their commit (git worktree "
                f"add /tmp/at-{short_label(theirs[0])} {theirs[0].split('+')[0]}; run the sweep "
                "there), or mix versions with --mixed-versions")
    have = {f"{r['setting'] or '-'}/{r['method']}/{r['seed']}" for r in rows}
    skipped = [c for c in sweep.cells if cell_name(c) in have]
    sweep.cells = [c for c in sweep.cells if cell_name(c) not in have]
    print(f"{len(skipped)} of the cells are in {path}: not run", flush=True)
    return None


def _go(sweep, args) -> int:
    """The listing, the runs and the table, on a sweep whose folders were checked."""
    finished_cells(sweep)  # (a warning for each cell whose result is stale: it runs again)
    if args.dry_run:
        for cell in sweep.cells:
            done = is_done(cell)
            state = "done" if done else "to run"
            how = " ".join(command(cell, sweep, sweep.connection or "<own SuperLink>")) \
                if sweep.backend == "flwr" else "in-process, %d nodes" % num_nodes_of(
                    cell.federation_config)
            version = f" | code {short_label(cell_version(cell))}" if done else ""
            print(f"{state:7s} {cell.setting or '-'} | {cell.method} | seed {cell.seed}"
                  f"{version} | {how}")
        return 0
    if not args.table_only:
        if sweep.backend == "flwr" and not shutil.which("flwr"):
            print("error: the flwr command is not installed (pip install -e .)", file=sys.stderr)
            return 2
        if args.jobs > 1 and sweep.backend != "in-process":
            print("error: --jobs runs in-process cells side by side: add --in-process (or "
                  "backend: in-process in the sweep file)", file=sys.stderr)
            return 2
        try:
            run_sweep(sweep, echo=not args.quiet, jobs=args.jobs)
        except KeyboardInterrupt:
            print("interrupted" + (": the SuperLink was stopped" if sweep.backend == "flwr"
                                   else "") + "; run the same command to resume", file=sys.stderr)
            return 130
    try:
        md = write_report(sweep, mixed_versions=args.mixed_versions).md
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(md)
    plots = sorted(sweep.dir.glob("ema*.png")) + sorted(sweep.dir.glob("acc*.png"))
    print(f"table: {sweep.dir / 'table.md'} and table.csv; per cell: cells.csv; plots: "
          f"{', '.join(p.name for p in plots)}")
    if sweep.failed:
        print(f"{len(sweep.failed)} cell(s) failed: " + ", ".join(
            f"{c.method}/seed {c.seed}" for c in sweep.failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
