"""Regenerate the documentation's generated parts and its measured examples in one step.

    python -m pages.examples               # generated tables only (fast, no run)
    python -m pages.examples --round-line  # also rerun the README's main command
    python -m pages.examples --sweep       # also rerun the README's example sweep
    python -m pages.examples --all         # everything
    python -m pages.examples --check       # exit 1 if a generated file is out of date

Generated from the code (no run): every file `python -m pages` writes (`pages.generated`:
docs/configuration.md, docs/methods.md, docs/setups.md, pyproject.toml's config section).

Measured (a real run, written between `<!-- example:NAME -->` and `<!-- /example:NAME -->` in
README.md, with the command, the time it took and the machine it ran on):

* `round-line`: the README's main command (`flwr run . --federation-config "num-supernodes=20"
  --stream`, here on a SuperLink of its own, see `experiments.superlink`): its last round line.
* `sweep-digits`: `python -m experiments.sweep sweeps/digits.yaml`, into `runs/examples/sweep`
  (a stopped sweep goes on where it was; `--fresh` starts over): its table, and its plot copied
  to `docs/sweep-digits-ema.png`.

On a shared machine, `--lock FILE` holds FILE (flock) only while a run goes on.

Run the measured ones on a quiet machine if you can; the text says which machine it was.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fileio.atomic import write_bytes_atomic, write_text_atomic
from fileio.folders import trusted_folder
from fileio.in_place import open_lock_file
from fileio.reading import read_bounded, read_text_bounded

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_FEDERATION = "num-supernodes=20"
MEASURED = ROOT / "runs" / "examples"  # the latest measured blocks (not in git)
PAGE_LIMIT = 4 * 2**20  # a page (README.md, a docs/ page, a saved block) is tens of KB
PLOT_LIMIT = 64 * 2**20  # a plot a sweep drew is about 100 KB


def copy_plot(source: Path, target: Path) -> None:
    """A sweep's plot `source` (read bounded, no link followed) written all or nothing at
    `target` (a link there is replaced, never written through)."""
    write_bytes_atomic(target, read_bounded(source, PLOT_LIMIT))


def read_page(path: Path) -> str:
    """A page or saved block, read bounded and never through a link."""
    return read_text_bounded(path, PAGE_LIMIT)


def _number(value) -> float:
    """A results file's optional number (0 where it is missing or not a number)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else 0.0


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with the lines between the markers of block `name` replaced by `body`."""
    start, end = f"<!-- example:{name} -->", f"<!-- /example:{name} -->"
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"error: the page has no block {start} ... {end}: add the two "
                         "markers")
    return pattern.sub(lambda _: f"{start}\n{body.rstrip()}\n{end}", text, count=1)


def machine() -> str:
    """One line naming the machine: cores, memory, GPU or not, torch and flwr versions."""
    import flwr
    import torch

    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, AttributeError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{os.cpu_count()} CPU cores ({platform.machine()}){mem}, {gpu}, torch "
            f"{torch.__version__}, flwr {flwr.__version__}, Python {platform.python_version()}")


def round_line(note: str) -> str:
    """Run the main command once and return the README block: the last round line and timing."""
    from experiments.superlink import LocalSuperLink

    out = Path(tempfile.mkdtemp(prefix="fedacg-example-"))
    try:
        with LocalSuperLink() as link:
            cmd = ["flwr", "run", str(ROOT), link.connection, "--stream",
                   "--federation-config", MAIN_FEDERATION,
                   "--run-config", f"out-dir='{out}' run-name='example'"]
            t = time.monotonic()
            proc = subprocess.run(cmd, cwd=ROOT, env=link.env, capture_output=True, text=True,
                                  timeout=1800)
            seconds = time.monotonic() - t
        lines = re.findall(r"\[round \d+/\d+\].*", proc.stdout + proc.stderr)
        if proc.returncode or not lines:
            raise SystemExit(f"the main command failed ({proc.returncode}):\n"
                             + (proc.stdout + proc.stderr)[-3000:])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    last = lines[-1].strip()
    acc = re.search(r"test-acc ([0-9.]+)", last).group(1)
    return (f"```\n{last}\n```\n\n"
            f"Measured with `python -m pages.examples --round-line` (the command above on a "
            f"SuperLink of its own): {seconds:.0f} s from submission to the end of round 30, final "
            f"test accuracy {acc}, on {machine()}{note}.")


def sweep_table(note: str, lock: Path | None = None, fresh: bool = False,
                run: bool = True) -> str:
    """Run `sweeps/digits.yaml` into runs/examples/ (finished cells are kept, so a stopped run
    goes on where it was; `fresh` starts over); copy its plot; return the README block.
    `lock`: hold this file (flock) only while a cell runs, so that other heavy jobs on a shared
    machine can run between cells. `run = False`: tabulate the finished cells only."""
    from experiments.sweep import SweepError, is_done, load_sweep, run_sweep, write_report
    from reporting.results_file import read_results

    out = MEASURED / "sweep"
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    sweep = load_sweep(ROOT / "sweeps" / "digits.yaml", out_dir=out)
    # Seed by seed, so that a sweep cut short has every method at least once.
    for cell in sorted(sweep.cells, key=lambda c: c.seed):
        if is_done(cell) or not run:
            continue
        with _held(lock):
            run_sweep(dataclasses.replace(sweep, cells=[cell]))
    finished = [c for c in sweep.cells if is_done(c)]
    seconds = sum(_number(read_results(c.run_dir).get("summary", {}).get("wall-seconds"))
                  for c in finished)
    if sweep.failed:
        raise SystemExit(f"{len(sweep.failed)} sweep cell(s) failed; see {sweep.dir}")
    try:
        table = write_report(sweep).md
    except SweepError as err:  # cells of different code versions
        raise SystemExit(f"error: {err} (here: --fresh runs every cell again on this code)"
                         ) from None
    partial = "" if len(finished) == len(sweep.cells) else \
        f"; {len(finished)} of its {len(sweep.cells)} runs had finished (see the Seeds column)"
    copy_plot(sweep.dir / "ema.png", ROOT / "docs" / "sweep-digits-ema.png")
    return (f"{table.rstrip()}\n\n"
            f"![EMA test accuracy per method on digits](docs/sweep-digits-ema.png)\n\n"
            f"Measured with `python -m pages.examples --sweep` (the command above, one cell "
            f"at a time){partial}: the ServerApps ran {seconds / 60:.0f} minutes in all, on "
            f"{machine()}{note}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pages.examples", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-line", action="store_true", help="rerun the main command")
    parser.add_argument("--sweep", action="store_true", help="rerun sweeps/digits.yaml")
    parser.add_argument("--all", action="store_true", help="both runs and the generated files")
    parser.add_argument("--check", action="store_true",
                        help="only check that the generated files are up to date")
    parser.add_argument("--fresh", action="store_true", help="rerun every sweep cell")
    parser.add_argument("--sweep-table", action="store_true",
                        help="tabulate the sweep's finished runs without running the others")
    parser.add_argument("--lock", type=Path,
                        help="hold this file (flock) only while a run goes on (shared machines)")
    parser.add_argument("--note", default="",
                        help="appended to the machine description, e.g. '; shared with other jobs'")
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except OSError as err:  # UnusableFile: a link, a folder another user made, a named pipe
        print(f"error: {err}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def _held(lock: Path | None):
    """`lock` held (flock) while the block runs: a regular file of its own, never a link
    (fileio.in_place.open_lock_file); nothing held without one."""
    if lock is None:
        yield
        return
    fd = open_lock_file(lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _main(args) -> int:
    # Measured blocks are saved under runs/examples/ first, so that a long measurement survives a
    # failure further on; the README takes the latest saved measurement of each block.
    trusted_folder(MEASURED, "the measured blocks' folder", parents=True)
    if not args.check:
        if args.round_line or args.all:
            with _held(args.lock):
                block = round_line(args.note)
            write_text_atomic(MEASURED / "round-line.md", block)
            print("measured the round line")
        if args.sweep or args.all or args.sweep_table:
            write_text_atomic(MEASURED / "sweep-digits.md", sweep_table(
                args.note, args.lock, args.fresh, run=not args.sweep_table))
            print("measured the example sweep")

    from pages.generated import generated_files, stale_files, write_files

    expected = generated_files()
    readme = read_page(README)
    for saved in sorted(MEASURED.glob("*.md")):
        readme = replace_block(readme, saved.stem, read_page(saved))
    expected[README] = readme
    if args.check:
        stale = stale_files(expected)
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)} (run python -m pages.examples)")
        return 1 if stale else 0
    write_files(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
