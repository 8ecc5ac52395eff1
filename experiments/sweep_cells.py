"""A sweep's cells run: which are done (`is_done`, `cells_to_run`), one cell with `flwr run`
(`run_cell`) or in this process (`run_cell_in_process`), several side by side in worker
processes (`run_parallel`), and the whole sweep on one SuperLink (`run_sweep`).

Each cell writes inside the sweep's own folder, never through a link (`sweep_folder`), and a
cell's results count only from folders that are the sweep's own (`trusted_cell`: this user's,
no link, no one else may write them; fileio.folders.trusted_folder). The sweep file is read by
`experiments.sweep_file`; `experiments.sweep` is the command line.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from fileio.atomic import write_text_atomic
from fileio.folders import folders_inside, trusted_folder
from fileio.in_place import fresh_log
from fileio.reading import CONFIG_FILE_LIMIT, read_json_bounded, read_tail
from reporting.cells import cell_name as name_of
from reporting.code_version import APP_ROOT, code_version, version_label, version_problem
from reporting.results_file import read_results
from reporting.status import describe, run_state

from .superlink import LocalSuperLink
from .sweep_file import Cell, Sweep, toml_value

LOGS = {"flwr": "flwr-run.log", "in-process": "in-process.log"}  # each cell's output


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


_refused: set[str] = set()  # the cell folders already named in a warning


def trusted_cell(cell: Cell) -> bool:
    """Whether the cell's folders, from the sweep's folder down to its run folder, are the
    sweep's own (`trusted_folder`: no link, this user's, no one else may write them), so that
    what is in them was written by this user's runs. A missing one: False. One that is refused
    (another user's, a link, ...): False, with a warning naming it once per process: its cell
    counts as not done, and running it stops the sweep with the same reason."""
    base = cell.sweep_dir or cell.run_dir
    try:
        folders_inside(base.parent, base.name, *cell.run_dir.relative_to(base).parts,
                       make=False)
        return True
    except FileNotFoundError:
        return False
    except OSError as err:  # UnusableFile: a link, another user's, writable by every user
        if str(cell.run_dir) not in _refused:
            _refused.add(str(cell.run_dir))
            print(f"warning: {err} (its cell is not counted as done)", file=sys.stderr,
                  flush=True)
        return False


def made_from(cell: Cell) -> dict[str, Any] | None:
    """The cell's sweep-cell.json: the description it was run from and, as "code-version", the
    code it ran on (reporting.code_version; absent in a cell of an older sweep); None when
    there is none, it cannot be read or its code-version is no version."""
    try:
        record = read_json_bounded(cell.run_dir / "sweep-cell.json", CONFIG_FILE_LIMIT)
    except OSError:
        return None
    if not isinstance(record, dict) or (record.get("code-version") is not None
                                        and version_problem(record["code-version"])):
        return None
    return record


def cell_version(cell: Cell) -> str:
    """The label of the code a finished cell ran on (`version_label`; 'unknown' when its
    sweep-cell.json records none)."""
    return version_label((made_from(cell) or {}).get("code-version"))


def is_done(cell: Cell) -> bool:
    """A result (`is_result`) made from this very cell description and resolved as this code
    resolves it (`config_changes`), in folders that are the sweep's own (`trusted_cell`). The
    code it ran on does not matter here: the table refuses cells of different code
    (experiments.sweep_report)."""
    if not trusted_cell(cell) or not is_result(cell.run_dir):
        return False
    return not_current(cell, results_of(cell.run_dir)) is None


def not_current(cell: Cell, results: dict[str, Any] | None) -> str | None:
    """Why the cell's finished run (`results`) is not this cell as the sweep file and this code
    make it; None when it is."""
    record = made_from(cell)
    if record is None:
        return "its sweep-cell.json is missing or unreadable"
    record = {k: v for k, v in record.items() if k != "code-version"}
    if record != json.loads(json.dumps(cell.description())):
        return "it was run from another cell description (the sweep file changed)"
    changes = config_changes(cell, results)
    if changes:
        return "its config resolves differently now: " + "; ".join(changes[:4]) + (
            f"; ... ({len(changes)} in all)" if len(changes) > 4 else "")
    return None


_stale: set[str] = set()  # the cell folders already named in a warning


def finished_cells(sweep: Sweep) -> list[tuple[Cell, dict[str, Any]]]:
    """(cell, its results) of each cell that is done (`is_done`), in the sweep's order. A cell
    whose folder holds a result of another description or config (`not_current`) is left out,
    with a warning naming it and why, once per process: the sweep runs it again."""
    out = []
    for cell in sweep.cells:
        if not trusted_cell(cell) or not is_result(cell.run_dir):
            continue
        results = results_of(cell.run_dir)
        why = not_current(cell, results) if results else "its results.json is unreadable"
        if why is None:
            out.append((cell, results))
        elif str(cell.run_dir) not in _stale:
            _stale.add(str(cell.run_dir))
            print(f"warning: {cell_name(cell)} is left out of the table: {why}; the "
                  "sweep runs it again", file=sys.stderr, flush=True)
    return out


def config_changes(cell: Cell, results: dict[str, Any] | None) -> list[str]:
    """What this code would run differently from the cell's finished run (`results`, its
    results.json): each key that changes the maths or the sampling (run_config.run_differences)
    and the number of rounds, where the config this code resolves from the cell's run config
    differs from the one the run was made from. A set-up file or a method's preset changed
    since the run leaves its description as it was, and shows here. Empty when none."""
    from run_config import ConfigError, resolve, run_differences

    saved = (results or {}).get("config")
    if not isinstance(saved, dict):
        return ["its results.json holds no config"]
    try:
        now = resolve(cell.run_config)
    except ConfigError as err:
        return [f"its run config no longer resolves ({err})"]
    changes = run_differences(saved, now)
    if saved.get("num-server-rounds") != now["num-server-rounds"]:
        changes.append(f"'num-server-rounds' = {now['num-server-rounds']} "
                       f"(the run's: {saved.get('num-server-rounds')!r})")
    return changes


def sweep_folder(sweep: Sweep, *names: str, make: bool = True) -> Path:
    """sweep.dir/names..., made inside the sweep's out-dir (`make`), every folder from out-dir
    down held to `trusted_folder` (no link, this user's, no one else may write it);
    UnusableFile naming the folder and the fix otherwise."""
    trusted_folder(sweep.dir.parent, "out-dir", make=make, parents=True)
    return folders_inside(sweep.dir.parent, sweep.dir.name, *names, make=make)


STARTED = "sweep-cell-started.json"  # the description and code a cell's run was started from


def resumable(cell: Cell, version: dict[str, Any]) -> bool:
    """Whether the cell's folder holds a stopped run of this very cell on this very code, which
    the app can continue (`resume`): its results.json that of a run with rounds left (killed,
    or stopped on an error), a checkpoint.pt, and a STARTED record equal to the cell's
    description and `version`, a version that names the code (a commit, with the hash of the
    checkout's changes if any, or the hash of the app's files: not 'unknown', not 'dirty?').
    The app checks the checkpoint itself (its checksum, its config against the cell's, its
    folder: server_app/checkpoint.py)."""
    label = version_label(version)
    if not trusted_cell(cell) or label == "unknown" or label.endswith("?"):
        return False
    state = run_state(cell.run_dir)
    if state["state"] not in ("incomplete", "failed") or not (
            isinstance(state["rounds"], int) and isinstance(state["of"], int)
            and state["rounds"] < state["of"]):
        return False
    try:
        if not stat.S_ISREG(os.lstat(cell.run_dir / "checkpoint.pt").st_mode):
            return False
        record = read_json_bounded(cell.run_dir / STARTED, CONFIG_FILE_LIMIT)
    except (OSError, ValueError):
        return False
    return record == json.loads(json.dumps({**cell.description(), "code-version": version}))


def start_cell(cell: Cell, sweep: Sweep,
               echo: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cell's folder made and its run-config.toml written (it also serves `flwr run`):
    to continue the stopped run in it from its checkpoint when that run is this cell's on this
    code (`resumable`: its run config then has resume = 'latest'), else to start afresh, its
    stale results and checkpoint removed. Returns the version of the code the cell runs on, as
    it starts (reporting.code_version: of the app folder `flwr run` builds its FAB from, or of
    the code this process imported for the in-process backend), and the run config written."""
    sweep_folder(sweep, *cell.run_dir.relative_to(sweep.dir).parts)
    version = code_version(sweep.app if sweep.backend == "flwr" else APP_ROOT)
    run_config = dict(cell.run_config)
    if resumable(cell, version):
        run_config["resume"] = "latest"
        (cell.run_dir / "sweep-cell.json").unlink(missing_ok=True)
        if echo:
            print("    continuing its stopped run from the checkpoint", flush=True)
    else:
        for stale in ("results.json", "sweep-cell.json", "checkpoint.pt"):
            (cell.run_dir / stale).unlink(missing_ok=True)
        write_text_atomic(cell.run_dir / STARTED, json.dumps(
            {**cell.description(), "code-version": version}, indent=2))
    write_text_atomic(cell.run_dir / "run-config.toml",
                      "".join(f"{k} = {toml_value(v)}\n" for k, v in run_config.items()))
    return version, run_config


def command(cell: Cell, sweep: Sweep, connection: str) -> list[str]:
    cmd = ["flwr", "run", str(sweep.app), connection, "--stream",
           "--run-config", str(cell.run_dir / "run-config.toml")]
    if cell.federation_config:
        cmd += ["--federation-config",
                " ".join(f"{k}={toml_value(v)}" for k, v in cell.federation_config.items())]
    return cmd


def run_cell(cell: Cell, sweep: Sweep, connection: str, env: dict[str, str], echo: bool) -> bool:
    """Run one cell with `flwr run`; True when it left a complete results.json."""
    version, run_config = start_cell(cell, sweep, echo)
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
    return finished(cell, echo, version, resumed="resume" in run_config)


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

    version, run_config = start_cell(cell, sweep, echo)
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
            run_in_process(run_config, num_nodes_of(cell.federation_config))
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
    return finished(cell, echo, version, resumed="resume" in run_config)


def finished(cell: Cell, echo: bool, version: dict[str, Any] | None = None,
             resumed: bool = False) -> bool:
    """True when the cell's run folder holds a result (`is_result`; then sweep-cell.json is
    written: its description and `version`, the code it ran on); else, with `echo`, print what
    results.json says and the end of the log. A `resumed` run that ended without a result
    ended by itself (a stop by the user or the machine never gets here): the app refused the
    checkpoint or the run failed again, so the cell's STARTED record goes and its next run
    starts afresh."""
    state = run_state(cell.run_dir)  # `flwr run` exits 0 also when the run failed
    result = is_result(cell.run_dir)
    if resumed and not result:
        (cell.run_dir / STARTED).unlink(missing_ok=True)
        if echo:
            print("    its stopped run was not continued to the end: the next run of the sweep "
                  "starts this cell afresh", flush=True)
    if result:
        write_text_atomic(cell.run_dir / "sweep-cell.json", json.dumps(
            {**cell.description(), "code-version": version}, indent=2))
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
    return name_of({"setting": cell.setting, "method": cell.method, "seed": cell.seed})


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
            if getattr(pool, "_broken", False):  # a worker died: no cell can be handed out
                print(f"a worker process died (killed, out of memory?); {len(queue)} cell(s) "
                      "not started: run the same command to go on", flush=True)
                sweep.failed += queue
                break
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
