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

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_FEDERATION = "num-supernodes=20"
MEASURED = ROOT / "runs" / "examples"  # the latest measured blocks (not in git)


def _number(value) -> float:
    """A results file's optional number (0 where it is missing or not a number)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else 0.0


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with the lines between the markers of block `name` replaced by `body`."""
    start, end = f"<!-- example:{name} -->", f"<!-- /example:{name} -->"
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no block {start} ... {end}: add the two markers")
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
    from experiments.sweep import is_done, load_sweep, run_sweep, write_report
    from reporting.results_file import read_results

    out = MEASURED / "sweep"
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    sweep = load_sweep(ROOT / "sweeps" / "digits.yaml", out_dir=out)
    # Seed by seed, so that a sweep cut short has every method at least once.
    for cell in sorted(sweep.cells, key=lambda c: c.seed):
        if is_done(cell) or not run:
            continue
        with open(lock, "a") if lock else open(os.devnull) as held:
            if lock:
                fcntl.flock(held, fcntl.LOCK_EX)
            run_sweep(dataclasses.replace(sweep, cells=[cell]))
    finished = [c for c in sweep.cells if is_done(c)]
    seconds = sum(_number(read_results(c.run_dir)["summary"].get("wall-seconds"))
                  for c in finished)
    if sweep.failed:
        raise SystemExit(f"{len(sweep.failed)} sweep cell(s) failed; see {sweep.dir}")
    table = write_report(sweep).md
    partial = "" if len(finished) == len(sweep.cells) else \
        f"; {len(finished)} of its {len(sweep.cells)} runs had finished (see the Seeds column)"
    shutil.copy(sweep.dir / "ema.png", ROOT / "docs" / "sweep-digits-ema.png")
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

    # Measured blocks are saved under runs/examples/ first, so that a long measurement survives a
    # failure further on; the README takes the latest saved measurement of each block.
    MEASURED.mkdir(parents=True, exist_ok=True)
    if not args.check:
        if args.round_line or args.all:
            with open(args.lock, "a") if args.lock else open(os.devnull) as held:
                if args.lock:
                    fcntl.flock(held, fcntl.LOCK_EX)
                block = round_line(args.note)
            (MEASURED / "round-line.md").write_text(block)
            print("measured the round line")
        if args.sweep or args.all or args.sweep_table:
            (MEASURED / "sweep-digits.md").write_text(sweep_table(
                args.note, args.lock, args.fresh, run=not args.sweep_table))
            print("measured the example sweep")

    from pages.generated import generated_files, stale_files, write_files

    expected = generated_files()
    readme = README.read_text()
    for saved in sorted(MEASURED.glob("*.md")):
        readme = replace_block(readme, saved.stem, saved.read_text())
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
