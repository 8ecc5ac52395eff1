"""Runs a person (and a script) can follow: run folders, the status command, the console, the
config check, too few simulated nodes, resume 'latest', plots during the run, tracking.

In-process (FakeGrid instead of the Flower runtime); the real `flwr run` versions are in
test_simulation.py (the console) and test_runs_flwr.py (too few nodes; slow).
"""

import json
import logging
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from pins_helpers import virtual_node_wait_clock
from reporting.status import main as status_main
from reporting.status import run_state
from run_config import ConfigError, resolve
from server_app import console
from server_app.checkpoint import CheckpointError, find_checkpoint, save_checkpoint
from server_app.results import make_run_dir, mark_running

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"num-server-rounds": 2, "local-iterations": 1, "fraction-train": 1.0}


class Lines(logging.Handler):
    """Collects what Flower's logger lets through (after the console filter)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    @property
    def text(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def lines():
    handler = Lines()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    console.install("info")


def run_app(tmp_path, num_nodes=4, grid=None, **overrides):
    rc = {"out-dir": str(tmp_path), **SMALL, **overrides}
    grid = grid or FakeGrid(num_nodes, client_app_handler(rc, num_nodes))
    server.main(grid, Context(run_id=4242, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    return grid


def only_dir(base: Path) -> Path:
    dirs = [p for p in base.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


# --- run folders ----------------------------------------------------------------------------
def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    cfg = resolve({"out-dir": str(tmp_path)})
    now = time.time()
    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(make_run_dir(cfg, now=now)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 6 and all(p.is_dir() for p in made)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    assert sorted(p.name for p in made) == sorted(
        [f"fedacg-{stamp}"] + [f"fedacg-{stamp}-{i}" for i in range(2, 7)])


def test_a_finished_run_name_is_not_overwritten(tmp_path, lines):
    cfg = resolve({"out-dir": str(tmp_path), "run-name": "exp1"})
    run_dir = make_run_dir(cfg)
    mark_running(run_dir, cfg, 7)
    assert make_run_dir(cfg) == run_dir  # unfinished: started afresh, with a warning
    assert any("holds an unfinished run" in t for t in lines.text)
    results = json.loads((run_dir / "results.json").read_text())
    results["summary"]["complete"], results["status"] = True, "complete"
    (run_dir / "results.json").write_text(json.dumps(results))
    with pytest.raises(ConfigError, match="'run-name' = 'exp1': .* holds a finished run"):
        make_run_dir(cfg)


def test_results_hold_the_flower_run_id_and_say_complete(tmp_path):
    run_app(tmp_path)
    run_dir = only_dir(tmp_path)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "complete" and results["summary"]["complete"] is True
    assert results["flower-run-id"] == 4242 and results["flower-run-ids"] == [4242]
    assert results["error"] is None and results["ended-at"]
    assert (run_dir / "labels.png").is_file()  # the clients' label distribution
    assert status_main([str(run_dir)]) == 0


# --- one run per folder: run.lock (server_app/run_lock.py) ---------------------------------
HOLDER = """
import sys, time
from server_app.run_lock import hold_run_dir
hold_run_dir(sys.argv[1], 77, "run-name", "exp")
print("held", flush=True)
time.sleep(600)
"""


def test_a_held_run_folder_is_refused_and_freed_when_its_holder_dies(tmp_path):
    """Two processes: the second is refused, naming the folder, the holder and the fix; after
    the holder is killed (SIGKILL: no clean-up) its lock file stays but blocks nothing."""
    from server_app.run_lock import LOCK_NAME, RunFolderBusy, hold_run_dir

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusy, match=(
                f"'run-name' = 'exp': the run folder {tmp_path} is in use by another run "
                rf"\(process {holder.pid} on .*, Flower run 77, since .*\); two runs .* another "
                "run-name")):
            hold_run_dir(tmp_path, 1, "run-name", "exp")
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / LOCK_NAME).is_file()  # stale: left by the killed process
    lock = hold_run_dir(tmp_path, 2, "run-name", "exp")
    assert "Flower run 2," in (tmp_path / LOCK_NAME).read_text()
    lock.release()


def test_two_handles_in_one_process_exclude_each_other_until_released(tmp_path):
    from server_app.run_lock import RunFolderBusy, hold_run_dir

    first = hold_run_dir(tmp_path, 1, "resume", "latest")
    with pytest.raises(RunFolderBusy, match="'resume' = 'latest': .* stop it before resuming"):
        hold_run_dir(tmp_path, 2, "resume", "latest")
    first.release()
    first.release()  # idempotent
    hold_run_dir(tmp_path, 2, "resume", "latest").release()


def test_a_second_run_with_the_same_run_name_is_refused_and_the_first_keeps_its_folder(
        tmp_path, lines):
    """The first run holds its folder (as its ServerApp process does while running); a second
    run with the same run-name, fresh or resuming, is refused before it touches the folder."""
    from server_app.run_lock import RunFolderBusy, hold_run_dir

    run_app(tmp_path, **{"run-name": "exp", "num-server-rounds": 1, "checkpoint-every": 1})
    run_dir = tmp_path / "exp"
    results = json.loads((run_dir / "results.json").read_text())
    results["summary"]["complete"], results["status"] = False, "running"  # the first, running
    (run_dir / "results.json").write_text(json.dumps(results))
    first = hold_run_dir(run_dir, 4242, "run-name", "exp")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    try:
        for extra in ({}, {"resume": "latest"}):
            with pytest.raises(RunFolderBusy, match=f"the run folder {run_dir} is in use"):
                run_app(tmp_path, **{"run-name": "exp", "num-server-rounds": 2, **extra})
            failed = [t for t in lines.text if t.startswith("Run failed")][-1]
            assert "in use by another run" in failed and "marked failed" not in failed
    finally:
        first.release()
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before  # not marked failed, not started afresh over
    run_app(tmp_path, **{"run-name": "exp", "num-server-rounds": 2, "resume": "latest"})
    assert json.loads((run_dir / "results.json").read_text())["status"] == "complete"


# --- failures: one line, results.json says so, the status command exits non-zero ------------
def test_too_few_simulated_nodes_fail_at_once_and_the_status_says_failed(tmp_path, lines,
                                                                          monkeypatch):
    rc = {"out-dir": str(tmp_path), **SMALL, "min-train-nodes": 5, "run-name": "small"}
    grid = FakeGrid(3, client_app_handler(rc, 3))
    grid.fixed_size = True  # as the simulation's grid: 3 nodes, never more
    clock = virtual_node_wait_clock(monkeypatch)
    with pytest.raises(Exception, match="simulated federation has 3 node") as err:
        run_app(tmp_path, grid=grid, **{"min-train-nodes": 5, "run-name": "small"})
    # the server gave up after one poll of the fixed-size grid (the count did not change), not
    # after node-wait-timeout (120 s): read off the node wait's virtual clock, not the wall
    assert clock.slept == [1.0]
    # one ERROR line naming the fix; Flower's "ServerApp raised an exception" + traceback
    # is dropped for it
    failed = [r for r in lines.records if r.levelno == logging.ERROR]
    assert failed[0].getMessage().startswith("Run failed: the simulated federation has 3 node(s)")
    assert "num-supernodes" in failed[0].getMessage()
    flower = logging.getLogger("flwr")
    before = len(lines.records)
    flower.error("ServerApp raised an exception", exc_info=err.value)
    assert len(lines.records) == before
    results = json.loads((tmp_path / "small" / "results.json").read_text())
    assert results["status"] == "failed" and results["summary"]["complete"] is False
    assert "simulated federation has 3 node" in results["error"]
    state = run_state(tmp_path / "small")
    assert state["state"] == "failed"
    out = subprocess.run([sys.executable, "-m", "reporting.status", str(tmp_path / "small")],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout.startswith("failed"), out


def test_an_unexpected_error_keeps_its_traceback(tmp_path, lines):
    def handler(i, msg):
        raise RuntimeError("boom")

    grid = FakeGrid(4, handler)
    grid.get_node_ids = lambda: (_ for _ in ()).throw(KeyError("grid broke"))
    with pytest.raises(KeyError) as err:
        run_app(tmp_path, grid=grid, **{"run-name": "x"})
    before = len(lines.records)
    logging.getLogger("flwr").error("ServerApp raised an exception", exc_info=err.value)
    assert len(lines.records) == before + 1  # not one of ours: the traceback stays
    assert json.loads((tmp_path / "x" / "results.json").read_text())["error"].startswith("KeyError")


def test_status_exit_codes(tmp_path, capsys):
    assert status_main([str(tmp_path / "nothing")]) == 4
    cfg = resolve({"out-dir": str(tmp_path), "run-name": "r"})
    run_dir = make_run_dir(cfg)
    mark_running(run_dir, cfg, 1)
    assert status_main([str(run_dir)]) == 3  # running, or killed without a word
    assert status_main([str(run_dir), str(tmp_path / "nothing")]) == 4  # the worst of them
    out = capsys.readouterr().out
    assert out.startswith("missing") and "incomplete" in out


# --- the console --------------------------------------------------------------------------
def test_one_line_per_round_and_one_at_the_end(tmp_path, lines):
    run_app(tmp_path, **{"num-server-rounds": 3})
    text = [t for t in lines.text if t.strip()]
    rounds = [t for t in text if t.startswith("[round ")]
    assert len(rounds) == 4  # rounds 0..3
    assert re.search(r"\| ETA \d+ s$", rounds[1]) and "ETA" not in rounds[-1]
    for noise in ("[ROUND", "configure_train", "aggregate_train", "Aggregated MetricRecord",
                  "fraction_evaluate", "Checkpoint of round", "├"):
        assert not any(noise in t for t in text), noise
    done = [t for t in text if t.startswith("Done:")]
    assert len(done) == 1 and not re.search(r"\d\.\d{5,}", done[0]), done  # rounded
    assert re.search(r"test-acc \d+\.\d%, ema-acc \d+\.\d%", done[0])


def test_log_level_debug_shows_the_detail(tmp_path, lines):
    run_app(tmp_path, **{"log-level": "debug"})
    text = lines.text
    assert any(t.startswith("[ROUND 1/2]") for t in text)
    assert any(t.startswith("aggregate_train") for t in text)


def test_ray_future_warning_is_silenced():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        console.quiet_warnings()
        warnings.warn("Tip: In future versions of Ray, Ray will no longer override accelerator "
                      "visible devices env var if num_gpus=0", FutureWarning)
        warnings.warn("something else", FutureWarning)
    assert [str(w.message) for w in caught] == ["something else"]


# --- run_config check ---------------------------------------------------------------------
def test_check_names_a_misspelled_key_with_a_did_you_mean():
    out = subprocess.run([sys.executable, "-m", "run_config", "check", "--run-config",
                          "num-server-round=5 lr=0.1"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1
    assert "'num-server-round' (did you mean 'num-server-rounds'?)" in out.stderr
    ok = subprocess.run([sys.executable, "-m", "run_config", "check", "-c", "lr=0.1", "-c",
                         "method='gcfed'"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and "run config OK" in ok.stdout, ok


def test_check_knows_the_federation_size():
    from run_config.check import main

    assert main(["-q", "--run-config", "min-train-nodes=5", "--federation-config",
                 "num-supernodes=5"]) == 0
    assert main(["-q", "--run-config", "min-train-nodes=5", "--federation-config",
                 "num-supernodes=3"]) == 1
    assert main(["-q", "--run-config", "fraction-train=1.0 lr='x'"]) == 1


# --- resume 'latest' ----------------------------------------------------------------------
def _run_folder(base: Path, name: str, run_name: str, complete: bool, mtime: float,
                method: str = "fedacg") -> Path:
    d = base / name
    d.mkdir()
    save_checkpoint(d, 1, {}, {}, [])
    (d / "results.json").write_text(json.dumps({
        "config": {"run-name": run_name, "method": method}, "summary": {"complete": complete}}))
    import os

    os.utime(d / "checkpoint.pt", (mtime, mtime))
    return d


def test_resume_latest_takes_only_the_same_run_name_or_refuses(tmp_path):
    _run_folder(tmp_path, "fedacg-1", "", complete=True, mtime=300)
    _run_folder(tmp_path, "[ab]", "[ab]", complete=False, mtime=400)
    _run_folder(tmp_path, "a", "a", complete=False, mtime=500)
    only = _run_folder(tmp_path, "fedacg-2", "", complete=False, mtime=100)
    _run_folder(tmp_path, "fedavg-1", "", complete=False, mtime=600, method="fedavg")
    # no run-name: the one unfinished run started without one (finished and named ones and
    # other methods' are not candidates, however new)
    assert find_checkpoint("latest", str(tmp_path), "", "fedacg") == only / "checkpoint.pt"
    # a run-name is a folder name, not a glob pattern ('[ab]' would match 'a')
    assert find_checkpoint("latest", str(tmp_path), "[ab]") == tmp_path / "[ab]" / "checkpoint.pt"
    with pytest.raises(CheckpointError, match="no checkpoint of run 'b'"):
        find_checkpoint("latest", str(tmp_path), "b")
    _run_folder(tmp_path, "fedacg-3", "", complete=False, mtime=200)
    with pytest.raises(CheckpointError, match="ambiguous: 2 unfinished runs"):
        find_checkpoint("latest", str(tmp_path), "", "fedacg")


# --- plots during the run, tracking -------------------------------------------------------
def test_plots_are_redrawn_every_plot_every_rounds(tmp_path, monkeypatch):
    import server_app.results

    drawn = []
    monkeypatch.setattr(server_app.results, "plot_run",  # (the name the results writer calls)
                        lambda rows, run_dir, title="", metric="test-acc":
                        drawn.append(rows[-1]["round"]))
    run_app(tmp_path, **{"num-server-rounds": 5, "plot-every": 2})
    assert drawn == [2, 4, 5]  # every 2 rounds, and at the end


def tensorboard_scalars(folder: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def wandb_history(path: Path) -> list[dict]:
    """The history rows of a W&B offline transaction log (.wandb: the LevelDB log format, 32 KiB
    blocks of records with 7-byte headers, after a 7-byte ':W&B' file header)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunk, rows = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            rec = pb.Record()
            rec.ParseFromString(chunk)
            chunk = b""
            if rec.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                             for i in rec.history.item})
    return rows


def test_tensorboard_and_wandb_offline_hold_every_rounds_accuracy(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="the 'tensorboard' extra is not installed")
    pytest.importorskip("wandb", reason="the 'wandb' extra is not installed")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))  # nothing outside the test's folder
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    run_app(tmp_path / "runs", **{"num-server-rounds": 3, "tensorboard": True,
                                  "wandb": "offline", "run-name": "tracked"})
    run_dir = tmp_path / "runs" / "tracked"
    rows = json.loads((run_dir / "results.json").read_text())["rounds"]
    acc = {r["round"]: r["test-acc"] for r in rows}
    assert list(acc) == [0, 1, 2, 3]

    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    tb = tensorboard_scalars(run_dir / "tensorboard", "test-acc")
    assert tb == pytest.approx(acc, abs=1e-6)  # stored as float32

    logs = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 1, list((run_dir / "wandb").iterdir())
    history = {h["round"]: h["test-acc"] for h in wandb_history(logs[0]) if "test-acc" in h}
    assert history == acc


def test_a_tracker_that_is_not_installed_is_a_config_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ConfigError, match=r"'wandb' = 'offline' needs Weights & Biases: pip "
                                          r"install -e \"\.\[wandb\]\""):
        run_app(tmp_path, **{"wandb": "offline", "run-name": "t"})
    assert run_state(tmp_path / "t")["state"] == "failed"
