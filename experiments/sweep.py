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
A cell whose run folder holds a complete results.json made from the same cell description is
skipped, so a stopped sweep resumes where it was. The sweep file format is in docs/results.md
("Sweeps"); `SWEEP_KEYS` lists its keys. The sweep file and the config files it names are read
bounded and without YAML aliases, every key's type is checked before anything runs, and the
names of the sweep, its methods and settings become folder names only through `slug` (no '..',
no '/'): the sweep writes inside its own folder under out-dir, never through a link
(docs/security.md#files-from-outside).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from fileio.atomic import write_text_atomic
from fileio.folders import folders_inside
from fileio.in_place import fresh_log
from fileio.names import safe_name
from fileio.reading import CONFIG_FILE_LIMIT, read_json_bounded, read_tail, read_text_bounded
from fileio.yaml_file import read_yaml
from reporting.metrics import curve, run_summary
from reporting.results_file import read_results
from reporting.status import describe, run_state
from reporting.table import MethodRuns, comparison, runs_csv
from run_config import ConfigError, acc_at_rounds, resolve, target_accs

from .superlink import LocalSuperLink

APP_DIR = Path(__file__).resolve().parents[1]  # this repository is the Flower app
SWEEP_KEYS = {
    "name": "folder name of the sweep under out-dir (default: the YAML file's name)",
    "out-dir": "where sweeps are written (default: runs/sweeps, relative to the current folder)",
    "app": "the Flower app folder (default: this repository)",
    "connection": "a SuperLink connection of your own (default: start one for the sweep)",
    "run-config": "run-config keys of every cell: a mapping, or a .toml / .yaml file",
    "federation-config": "--federation-config of every cell, e.g. {num-supernodes: 20}",
    "seeds": "list of seeds (default [0])",
    "methods": "name -> run-config keys or a file: one table row each (required)",
    "settings": "name -> run-config keys or a file: one table and plot each (optional)",
    "acc-at-rounds": "rounds of the 'Acc. at R' columns (default: the runs' acc-at-rounds)",
    "target-accs": "targets (%) of the 'Rounds to X%' columns (default: the runs' target-accs)",
    "cell-timeout": "seconds one cell may take before it is stopped (default: no limit)",
    "backend": "flwr (default: each cell is a `flwr run`) or in-process (the real ServerApp and "
               "ClientApp in the sweep's own process, through an in-memory grid)",
}
BACKENDS = ("flwr", "in-process")
LOGS = {"flwr": "flwr-run.log", "in-process": "in-process.log"}  # each cell's output
NOT_IN_CELLS = ("out-dir", "run-name", "seed")  # set by the sweep for every cell
# Where a run is written and what its summary reports do not change the run: a finished cell
# stays finished when only these change (the table is computed again from the rounds).
NOT_IN_DESCRIPTION = ("out-dir", "run-name", "acc-at-rounds", "target-accs")


class SweepError(ValueError):
    """The sweep file is wrong."""


@dataclass
class Cell:
    setting: str
    method: str
    seed: int
    run_config: dict[str, Any]
    federation_config: dict[str, Any]
    run_dir: Path

    def description(self) -> dict[str, Any]:
        """What the run is made from (not where it is written): a finished cell is reused only
        when this has not changed."""
        run = {k: v for k, v in self.run_config.items() if k not in NOT_IN_DESCRIPTION}
        return {"run-config": run, "federation-config": self.federation_config}


@dataclass
class Sweep:
    path: Path
    dir: Path
    app: Path
    connection: str | None
    cells: list[Cell]
    methods: list[str]
    settings: list[str]
    acc_at_rounds: list[int] | None = None
    target_accs: list[float] | None = None
    cell_timeout: float | None = None
    backend: str = "flwr"
    failed: list[Cell] = field(default_factory=list)


# --- the sweep file ----------------------------------------------------------------------
def slug(name: str) -> str:
    """A sweep's, method's or setting's name as a folder name: letters, digits and ._+=- kept,
    the rest '_', then made one safe path component (`safe_name`: '..' is no folder name)."""
    return safe_name(re.sub(r"[^A-Za-z0-9._+=-]+", "_", str(name)).strip("_"))


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """`value` as a dict (None: empty); SweepError naming `where` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SweepError(f"{where}: expected a mapping of keys to values, got {value!r}")
    return dict(value)


def _read(path: Path, what: str) -> Any:
    """A YAML or TOML file the sweep names, read bounded (fileio): SweepError otherwise."""
    try:
        if path.suffix == ".toml":
            text = read_text_bounded(path, CONFIG_FILE_LIMIT, follow_links=True)
            try:
                return tomllib.loads(text)
            except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
                raise SweepError(f"{what} {path} is not valid TOML ({err})") from None
        return read_yaml(path, follow_links=True)
    except FileNotFoundError:
        raise SweepError(f"{what} {path} not found") from None
    except OSError as err:  # UnusableFile: a named pipe, too large, not UTF-8, YAML aliases
        raise SweepError(f"{what}: {err.strerror or err}") from None


def load_config_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run config, federation config) of a .toml file (flat keys, or a pyproject's
    [tool.flwr.app.config]) or a .yaml file (flat keys, or `run-config:` / `federation-config:`)."""
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise SweepError(f"config file {path}: expected a .toml, .yaml or .yml file")
    data = _mapping(_read(path, "config file"), f"config file {path}")
    if path.suffix == ".toml" and "tool" in data:  # a pyproject: its [tool.flwr.app.config]
        for key in ("tool", "flwr", "app", "config"):
            data = _mapping(data.get(key), f"config file {path}: [tool.flwr.app.config]")
    if "run-config" in data or "federation-config" in data:
        return (_mapping(data.get("run-config"), f"config file {path}: run-config"),
                _mapping(data.get("federation-config"), f"config file {path}: federation-config"))
    return data, {}


def part(spec: Any, where: str, base: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A method / setting / the common part: a mapping of run-config keys (which may name a
    `run-config-file` and hold a `federation-config` mapping), or the path of a config file."""
    if spec is None:
        return {}, {}
    if isinstance(spec, str):
        return load_config_file((base / spec).expanduser())
    if not isinstance(spec, dict):
        raise SweepError(
            f"{where}: expected a mapping of run-config keys or a file name, got {spec!r}")
    spec = dict(spec)
    run, fed = {}, {}
    if "run-config-file" in spec:
        run, fed = load_config_file((base / str(spec.pop("run-config-file"))).expanduser())
    fed.update(_mapping(spec.pop("federation-config", None), f"{where}: federation-config"))
    run.update(spec)
    return run, fed


def _numbers(value: Any, kind: type, where: str) -> list:
    if isinstance(value, str):
        value = [v for v in value.replace(" ", "").split(",") if v]
    if not isinstance(value, list) or any(isinstance(v, bool) for v in value):
        raise SweepError(f"{where}: expected a list of {kind.__name__}s, got {value!r}")
    if kind is int and any(isinstance(v, float) and math.isfinite(v) and not v.is_integer()
                           for v in value):  # (int() would cut 0.5 to 0)
        raise SweepError(f"{where}: expected a list of ints, got {value!r}: write each as a "
                         "whole number (0, 1, 2), not a fraction")
    try:
        numbers = [kind(v) for v in value]
    except (TypeError, ValueError, OverflowError):
        raise SweepError(f"{where}: expected a list of {kind.__name__}s, got {value!r}") from None
    if not all(math.isfinite(v) for v in numbers):
        raise SweepError(f"{where}: expected finite numbers, got {value!r}")
    return numbers


def _cell_timeout(value: Any, where: str) -> float | None:
    """cell-timeout: None, or seconds > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 < value < math.inf:
        raise SweepError(f"{where}: cell-timeout must be a number of seconds > 0, got {value!r}")
    return float(value)


def load_sweep(path: Path, out_dir: Path | None = None, connection: str | None = None,
               backend: str | None = None) -> Sweep:
    path = Path(path).resolve()
    spec = _mapping(_read(path, "sweep file"), str(path))
    unknown = sorted(set(spec) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(f"{path}: unknown key(s) {unknown}; the keys are {sorted(SWEEP_KEYS)}")
    if not spec.get("methods") or not isinstance(spec["methods"], dict):
        raise SweepError(f"{path}: 'methods' must map each method's name to its run-config keys")
    backend = backend or spec.get("backend") or "flwr"
    if backend not in BACKENDS:
        raise SweepError(f"{path}: backend {backend!r} is not one of {list(BACKENDS)}")
    if backend == "in-process" and (connection or spec.get("connection")):
        raise SweepError(f"{path}: 'connection' is for backend flwr; an in-process sweep runs "
                         "no SuperLink (drop one of the two)")
    for key in ("name", "out-dir", "app", "connection"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise SweepError(f"{path}: '{key}' must be a string, got {spec[key]!r}")
    base = path.parent
    name = slug(spec.get("name") or path.stem)
    root = Path(out_dir or spec.get("out-dir") or "runs/sweeps").expanduser()
    sweep_dir = (root if root.is_absolute() else Path.cwd() / root).resolve() / name
    common_run, common_fed = part(spec.get("run-config"), "run-config", base)
    common_fed.update(_mapping(spec.get("federation-config"), f"{path}: federation-config"))
    settings = spec.get("settings") or {"": {}}
    if not isinstance(settings, dict):
        raise SweepError(f"{path}: 'settings' must map each setting's name to its run-config keys")
    seeds = _numbers(spec.get("seeds", [0]), int, "seeds")
    report = {}
    if "acc-at-rounds" in spec:
        report["acc-at-rounds"] = ",".join(str(r) for r in _numbers(spec["acc-at-rounds"], int,
                                                                   "acc-at-rounds"))
    if "target-accs" in spec:
        report["target-accs"] = ",".join(f"{t:g}" for t in _numbers(spec["target-accs"], float,
                                                                   "target-accs"))
    cells = []
    for s_name, s_spec in settings.items():
        s_run, s_fed = part(s_spec, f"settings.{s_name}", base)
        for m_name, m_spec in spec["methods"].items():
            m_run, m_fed = part(m_spec, f"methods.{m_name}", base)
            for seed in seeds:
                out = sweep_dir / "runs" / (slug(s_name) if s_name else "") / slug(m_name)
                run_dir = out / f"seed-{seed}"
                run = {**common_run, **s_run, **m_run, **report}
                for key in NOT_IN_CELLS:
                    run.pop(key, None)
                run.update({"seed": seed, "out-dir": str(out), "run-name": run_dir.name})
                where = f"cell ({s_name or 'default'}, {m_name}, seed {seed})"
                try:
                    resolve(run)  # every cell's config is checked before anything runs
                except ConfigError as err:
                    raise SweepError(f"{where}: {err}") from None
                federation = {**common_fed, **s_fed, **m_fed}
                for value in federation.values():
                    toml_value(value, f"{where}: federation-config")
                cells.append(Cell(str(s_name), str(m_name), seed, run, federation, run_dir))
    dirs = [c.run_dir for c in cells]
    if len(set(dirs)) != len(dirs):
        raise SweepError(f"{path}: two method or setting names give the same folder name "
                         f"({sorted({d for d in dirs if dirs.count(d) > 1})[0]}); rename one")
    app = Path(spec.get("app") or APP_DIR)
    return Sweep(
        path=path, dir=sweep_dir, app=(app if app.is_absolute() else base / app).resolve(),
        connection=connection or spec.get("connection"), cells=cells,
        methods=[str(m) for m in spec["methods"]], settings=[str(s) for s in settings],
        acc_at_rounds=_numbers(spec["acc-at-rounds"], int, "acc-at-rounds")
        if "acc-at-rounds" in spec else None,
        target_accs=_numbers(spec["target-accs"], float, "target-accs")
        if "target-accs" in spec else None,
        cell_timeout=_cell_timeout(spec.get("cell-timeout"), str(path)), backend=backend,
    )


# --- cells -------------------------------------------------------------------------------
def toml_value(value: Any, where: str = "run-config") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    raise SweepError(f"{where} value {value!r}: expected a bool, finite number or string")


def results_of(run_dir: Path) -> dict[str, Any] | None:
    """The cell's results.json, checked (reporting.results_file); None when there is none or it
    cannot be read (the cell then counts as not done)."""
    try:
        return read_results(run_dir)
    except OSError:
        return None


def is_result(run_dir: Path) -> bool:
    """The run folder holds a result: a complete run, or one whose training diverged (a method's
    result, which the table writes as failed, as the papers write "Failed"), not a run that
    stopped on an error or was killed."""
    state = run_state(run_dir)["state"]
    if state == "complete":
        return True
    results = results_of(run_dir) if state == "failed" else None
    return bool(results) and results.get("failure") == "diverged"


def is_done(cell: Cell) -> bool:
    """A result (`is_result`) made from this very cell description."""
    if not is_result(cell.run_dir):
        return False
    try:
        made_from = read_json_bounded(cell.run_dir / "sweep-cell.json", CONFIG_FILE_LIMIT)
    except OSError:
        return False
    return made_from == json.loads(json.dumps(cell.description()))


def sweep_folder(sweep: Sweep, *names: str) -> Path:
    """sweep.dir/names..., made inside the sweep's out-dir, no folder on the way a link."""
    sweep.dir.parent.mkdir(parents=True, exist_ok=True)
    return folders_inside(sweep.dir.parent, sweep.dir.name, *names)


def start_cell(cell: Cell, sweep: Sweep) -> None:
    """The cell's folder made, its stale results removed, its run-config.toml written (it also
    serves `flwr run`)."""
    sweep_folder(sweep, *cell.run_dir.relative_to(sweep.dir).parts)
    for stale in ("results.json", "sweep-cell.json"):
        (cell.run_dir / stale).unlink(missing_ok=True)
    write_text_atomic(cell.run_dir / "run-config.toml",
                      "".join(f"{k} = {toml_value(v)}\n" for k, v in cell.run_config.items()))


def command(cell: Cell, sweep: Sweep, connection: str) -> list[str]:
    cmd = ["flwr", "run", str(sweep.app), connection, "--stream",
           "--run-config", str(cell.run_dir / "run-config.toml")]
    if cell.federation_config:
        cmd += ["--federation-config",
                " ".join(f"{k}={toml_value(v)}" for k, v in cell.federation_config.items())]
    return cmd


def run_cell(cell: Cell, sweep: Sweep, connection: str, env: dict[str, str], echo: bool) -> bool:
    """Run one cell with `flwr run`; True when it left a complete results.json."""
    start_cell(cell, sweep)
    cmd = command(cell, sweep, connection)
    run_id = None
    with fresh_log(cell.run_dir / LOGS["flwr"]) as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, cwd=sweep.app, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.monotonic() + sweep.cell_timeout if sweep.cell_timeout else None
        try:
            for line in proc.stdout:
                log.write(line)
                found = re.search(r"started run (\d+)", line)
                run_id = run_id or (found.group(1) if found else None)
                if echo and re.search(r"\[round \d+/\d+\]|Done:|Run failed:", line):
                    print("   ", line.rstrip(), flush=True)
                if deadline and time.monotonic() > deadline:
                    print(f"    cell took longer than cell-timeout = {sweep.cell_timeout} s: "
                          "stopped")
                    break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                if run_id:  # the run goes on in the SuperLink otherwise
                    subprocess.run(["flwr", "stop", run_id, connection], cwd=sweep.app, env=env,
                                   capture_output=True, timeout=60)
            proc.wait()
    return finished(cell, echo)


def num_nodes_of(federation_config: dict[str, Any]) -> int:
    """The federation size of an in-process cell: `num-supernodes` (the one federation-config
    key that means something without Ray; Flower's simulation default is 2)."""
    for key in ("num-supernodes", "options.num-supernodes"):
        if key in federation_config:
            return int(federation_config[key])
    return 2


class CellTimeout(Exception):
    """An in-process cell ran past cell-timeout."""


class _EchoRounds(logging.Handler):
    """Prints the round lines, the end line and a failure, as the flwr backend echoes them."""

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if re.search(r"\[round \d+/\d+\]|Done:|Run failed:", line):
            print("   ", line.rstrip(), flush=True)


def run_cell_in_process(cell: Cell, sweep: Sweep, echo: bool) -> bool:
    """Run one cell in this process (`inprocess`); True when it left a complete
    results.json. The ServerApp's log goes to the cell's in-process.log (and its round lines to
    the console with `echo`); the run-config.toml it writes also serves `flwr run`."""
    from inprocess import run_in_process

    start_cell(cell, sweep)
    logger = logging.getLogger("flwr")
    saved = logger.handlers[:], logger.level
    with fresh_log(cell.run_dir / LOGS["in-process"]) as log_file:
        to_file = logging.StreamHandler(log_file)
        to_file.setFormatter(logging.Formatter("%(levelname)s %(asctime)s: %(message)s"))
        logger.handlers = [to_file] + ([_EchoRounds()] if echo else [])
        logger.setLevel(logging.DEBUG)

        def timed_out(signum, frame):
            raise CellTimeout(f"cell took longer than cell-timeout = {sweep.cell_timeout} s")

        if sweep.cell_timeout:
            previous = signal.signal(signal.SIGALRM, timed_out)
            signal.setitimer(signal.ITIMER_REAL, float(sweep.cell_timeout))
        try:
            run_in_process(cell.run_config, num_nodes_of(cell.federation_config))
        except KeyboardInterrupt:
            raise
        except Exception as err:  # the ServerApp marked the run folder failed (if it made one)
            log_file.write(f"{type(err).__name__}: {err}\n")
            if isinstance(err, CellTimeout):
                print(f"    {err}: stopped", flush=True)
        finally:
            if sweep.cell_timeout:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
            logger.handlers = saved[0]
            logger.setLevel(saved[1])
    return finished(cell, echo)


def finished(cell: Cell, echo: bool) -> bool:
    """True when the cell's run folder holds a result (`is_result`; then sweep-cell.json is
    written); else, with `echo`, print what results.json says and the end of the log."""
    state = run_state(cell.run_dir)  # `flwr run` exits 0 also when the run failed
    if is_result(cell.run_dir):
        write_text_atomic(cell.run_dir / "sweep-cell.json",
                          json.dumps(cell.description(), indent=2))
        if state["state"] != "complete" and echo:
            print("    diverged (a result: the table writes it as failed): "
                  + describe(state), flush=True)
        return True
    if echo:  # what results.json says, and the end of the log
        print("    " + describe(state), flush=True)
        logs = [cell.run_dir / name for name in LOGS.values() if (cell.run_dir / name).exists()]
        try:
            tail = read_tail(logs[0], 64 * 1024).decode(errors="replace").splitlines()[-12:] \
                if logs else []
        except OSError as err:
            tail = [str(err)]
        print("\n".join("    | " + line for line in tail), flush=True)
    return False


def cell_name(cell: Cell) -> str:
    """'<setting>/<method>/<seed>' ('-' for the one unnamed setting): what --cells matches."""
    return f"{cell.setting or '-'}/{cell.method}/{cell.seed}"


def cells_to_run(sweep: Sweep) -> list[Cell]:
    """The cells not done, seed by seed (every method and setting of the first seed, then of the
    next): a sweep stopped early leaves whole seeds, a table of every row."""
    seeds = list(dict.fromkeys(c.seed for c in sweep.cells))
    return sorted((c for c in sweep.cells if not is_done(c)), key=lambda c: seeds.index(c.seed))


def _cell_in_worker(cell: Cell, sweep: Sweep, threads: int) -> bool:
    """One in-process cell in a worker process of `run_parallel`, on `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    return run_cell_in_process(cell, sweep, echo=False)


def _progress(done: int, total: int, started: float, last: float) -> str:
    """'12/114 cells, 0:41:10 so far, about 5:50:00 to go' (the pace of the cells so far)."""
    spent = time.monotonic() - started
    left = spent / done * (total - done) if done else None

    def hms(t: float) -> str:
        return f"{int(t // 3600)}:{int(t % 3600 // 60):02d}:{int(t % 60):02d}"

    return (f"{done}/{total} cells, {hms(spent)} so far"
            + (f", about {hms(left)} to go" if left is not None and done < total else "")
            + f" (this cell {last:.0f} s)")


def run_parallel(sweep: Sweep, todo: list[Cell], jobs: int) -> None:
    """In-process cells, `jobs` at a time, each in a worker process of its own with
    cpu-count / jobs threads; one line per cell as it ends."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    threads = max(1, (os.cpu_count() or 1) // jobs)
    print(f"in-process: {jobs} cells at a time, {threads} thread(s) each; each cell's round "
          f"lines are in its {LOGS['in-process']}", flush=True)
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
    started, pending, queue = time.monotonic(), {}, list(todo)
    done = 0
    try:
        while queue or pending:
            while queue and len(pending) < jobs:
                cell = queue.pop(0)
                pending[pool.submit(_cell_in_worker, cell, sweep, threads)] = (
                    cell, time.monotonic())
            finished_now, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished_now:
                cell, t = pending.pop(future)
                try:
                    ok = future.result()
                except Exception as err:  # the worker died (killed, out of memory)
                    print(f"    worker: {type(err).__name__}: {err}", flush=True)
                    ok = False
                done += 1
                status = cell_line(cell, ok, sweep)
                print(f"[{_progress(done, len(todo), started, time.monotonic() - t)}] "
                      f"{cell.setting + ' / ' if cell.setting else ''}{cell.method} / seed "
                      f"{cell.seed}: {status}", flush=True)
                if not ok:
                    sweep.failed.append(cell)
    finally:
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()  # (a stop: the cells running now are run again next time)
        pool.shutdown(wait=True, cancel_futures=True)


def cell_line(cell: Cell, ok: bool, sweep: Sweep) -> str:
    """What became of a cell: its final accuracy, diverged, or failed with where to look."""
    if not ok:
        return f"FAILED (see {cell.run_dir / LOGS[sweep.backend]})"
    results = results_of(cell.run_dir) or {}
    if results.get("status") != "complete":
        return "diverged (a result: written as failed in the table)"
    acc = (results.get("summary") or {}).get("final-test-acc")
    return "done" + (f", test-acc {100 * acc:.2f} %" if isinstance(acc, (int, float)) else "")


def run_sweep(sweep: Sweep, echo: bool = True, jobs: int = 1) -> None:
    """Run every cell that is not done (`cells_to_run`), on one SuperLink, or in-process
    `jobs` at a time."""
    todo = cells_to_run(sweep)
    print(f"sweep {sweep.dir}: {len(sweep.cells)} cells, {len(sweep.cells) - len(todo)} done, "
          f"{len(todo)} to run", flush=True)
    if not todo:
        return
    link = None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in previous:  # also when started in the background, where SIGINT is ignored
        signal.signal(sig, interrupted)
    try:
        if sweep.backend == "in-process" and jobs > 1:
            run_parallel(sweep, todo, jobs)
            return
        if sweep.backend == "in-process":
            connection, env = None, None
            print("in-process: the ServerApp and ClientApp run in this process", flush=True)
        elif sweep.connection:
            connection = sweep.connection
            env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
        else:
            link = LocalSuperLink().start()
            connection, env = link.connection, link.env
            print(f"started a SuperLink on 127.0.0.1:{link.port} (stopped at the end)", flush=True)
        for i, cell in enumerate(todo, 1):
            label = f"[{i}/{len(todo)}] {cell.setting + ' / ' if cell.setting else ''}" \
                    f"{cell.method} / seed {cell.seed}"
            print(label, flush=True)
            t = time.monotonic()
            ok = run_cell_in_process(cell, sweep, echo) if sweep.backend == "in-process" \
                else run_cell(cell, sweep, connection, env, echo)
            print(f"    {cell_line(cell, ok, sweep)} in {time.monotonic() - t:.0f} s",
                  flush=True)
            if not ok:
                sweep.failed.append(cell)
    finally:
        if link is not None:
            link.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- table and plot ----------------------------------------------------------------------
@dataclass
class Report:
    """The table of a sweep's finished cells: one `MethodRuns` per row (setting, method), the
    columns' rounds and targets, and `md`, the Markdown table written to table.md."""

    rows: list[MethodRuns]
    acc_at_rounds: list[int]
    target_accs: list[float]
    md: str


def write_report(sweep: Sweep) -> Report:
    """table.md, table.csv, runs.csv, ema*.png and acc*.png in the sweep folder, from the
    finished cells (`is_result`)."""
    done = [(c, results_of(c.run_dir)) for c in sweep.cells]
    done = [(c, r) for c, r in done if r and is_result(c.run_dir)]
    if not done:
        raise SweepError(f"no finished cell in {sweep.dir}: nothing to tabulate")
    first_cfg = resolve(done[0][0].run_config)  # (the cell's own config: checked at load)
    rounds = sweep.acc_at_rounds or acc_at_rounds(first_cfg)
    targets = sweep.target_accs or target_accs(first_cfg)
    by_row: dict[tuple[str, str], MethodRuns] = {}
    cells, curves = [], {}
    for setting in sweep.settings:
        for method in sweep.methods:
            by_row[setting, method] = MethodRuns(method, setting=setting)
    for cell, results in done:
        summary = run_summary(results.get("rounds", []), acc_at_rounds=rounds,
                              target_accs=targets,
                              total_rounds=resolve(cell.run_config)["num-server-rounds"])
        summary["diverged"] = results.get("status") != "complete"
        summary["wall-seconds"] = (results.get("summary") or {}).get("wall-seconds")
        by_row[cell.setting, cell.method].summaries.append(summary)
        cells.append({"setting": cell.setting, "method": cell.method, "seed": cell.seed,
                      "summary": summary, "run-dir": str(cell.run_dir)})
        for key in ("ema-acc", "test-acc"):
            curves.setdefault(key, {}).setdefault(cell.setting, {}).setdefault(
                cell.method, []).append(curve(results.get("rounds", []), key))
    rows = [m for m in by_row.values() if m.summaries]
    md, csv_text = comparison(rows, rounds, targets)
    sweep_folder(sweep)
    write_text_atomic(sweep.dir / "table.md", md)
    write_text_atomic(sweep.dir / "table.csv", csv_text)
    write_text_atomic(sweep.dir / "runs.csv", runs_csv(cells, rounds, targets))
    from reporting.plots import plot_ema_curves

    for key, what, stem in (("ema-acc", "EMA test accuracy", "ema"),
                            ("test-acc", "test accuracy", "acc")):
        for setting, per_method in curves.get(key, {}).items():
            name = f"{stem}-{slug(setting)}.png" if setting else f"{stem}.png"
            plot_ema_curves(per_method, sweep.dir / name, title=f"{sweep.dir.name}"
                            + (f" / {setting}" if setting else "") + f": {what}",
                            target_accs=targets, ylabel=f"{what} (%)".capitalize())
    return Report(rows, list(rounds), list(targets), md)


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
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more cells at a time")
    try:
        sweep = load_sweep(args.sweep, args.out_dir, args.connection,
                           "in-process" if args.in_process else None)
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.cells:
        from fnmatch import fnmatchcase

        chosen = [c for c in sweep.cells if fnmatchcase(cell_name(c), args.cells)]
        if not chosen:
            print(f"error: --cells '{args.cells}' matches none of the sweep's cells (e.g. "
                  f"'{cell_name(sweep.cells[0])}'; --dry-run lists them)", file=sys.stderr)
            return 2
        sweep.cells = chosen
    if args.dry_run:
        for cell in sweep.cells:
            state = "done" if is_done(cell) else "to run"
            how = " ".join(command(cell, sweep, sweep.connection or "<own SuperLink>")) \
                if sweep.backend == "flwr" else "in-process, %d nodes" % num_nodes_of(
                    cell.federation_config)
            print(f"{state:7s} {cell.setting or '-'} | {cell.method} | seed {cell.seed} | {how}")
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
        md = write_report(sweep).md
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(md)
    plots = sorted(sweep.dir.glob("ema*.png")) + sorted(sweep.dir.glob("acc*.png"))
    print(f"table: {sweep.dir / 'table.md'} and table.csv; per run: runs.csv; plots: "
          f"{', '.join(p.name for p in plots)}")
    if sweep.failed:
        print(f"{len(sweep.failed)} cell(s) failed: " + ", ".join(
            f"{c.method}/seed {c.seed}" for c in sweep.failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
