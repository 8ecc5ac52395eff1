"""Sweeps: the grid file, and a real sweep (flwr run on a SuperLink the sweep starts and stops)."""

import csv
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.sweep import SweepError, cells_to_run, load_sweep
from run_config import resolve
from test_reporting import assert_plot

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, obj) -> Path:
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


def test_grid_expands_methods_settings_seeds_and_files(tmp_path):
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "acg.toml").write_text('method = "fedacg"\nlam = 0.9\n')
    write(tmp_path / "presets" / "iid.yaml",
          {"run-config": {"partitioner": "iid"}, "federation-config": {"num-supernodes": 50}})
    sweep = load_sweep(write(tmp_path / "grid.yaml", {
        "out-dir": str(tmp_path / "out"),
        "run-config": {"num-server-rounds": 7, "lr": 0.1, "seed": 99},
        "federation-config": {"num-supernodes": 10},
        "seeds": [3, 4],
        "methods": {"FedAvg": {"method": "fedavg"}, "FedACG 0.9": "presets/acg.toml",
                    "FedACG beta": {"run-config-file": "presets/acg.toml", "beta": 0.1}},
        "settings": {"dir0.3": {"dirichlet-alpha": 0.3}, "iid": "presets/iid.yaml"},
        "target-accs": [30, 38],
    }))
    assert sweep.dir == tmp_path / "out" / "grid"
    assert len(sweep.cells) == 2 * 3 * 2
    by = {(c.setting, c.method, c.seed): c for c in sweep.cells}
    c = by["iid", "FedACG beta", 4]
    assert c.run_config == {
        "num-server-rounds": 7, "lr": 0.1, "partitioner": "iid", "method": "fedacg", "lam": 0.9,
        "beta": 0.1, "target-accs": "30,38", "seed": 4,
        "out-dir": str(tmp_path / "out" / "grid" / "runs" / "iid" / "FedACG_beta"),
        "run-name": "seed-4"}
    assert c.federation_config == {"num-supernodes": 50}  # the setting's file wins
    assert by["dir0.3", "FedAvg", 3].federation_config == {"num-supernodes": 10}
    assert by["dir0.3", "FedACG 0.9", 3].run_config["lam"] == 0.9
    assert len({c.run_dir for c in sweep.cells}) == 12  # one run folder per cell
    assert sweep.target_accs == [30.0, 38.0] and sweep.acc_at_rounds is None


@pytest.mark.parametrize("bad,words", [
    ({"methods": {"a": {"method": "fedacg"}}, "seed": [1]}, ["unknown key", "'seed'"]),
    ({"run-config": {"lr": 0.1}}, ["'methods'"]),
    ({"methods": {"a": {"method": "fedacgg"}}},
     ["cell (default, a, seed 0)", "did you mean 'fedacg'"]),
    ({"methods": {"a": {"lrr": 0.1}}}, ["'lrr'", "did you mean 'lr'"]),
    ({"methods": {"a": "nowhere.toml"}}, ["nowhere.toml", "not found"]),
    ({"methods": {"a": {}}, "seeds": "x"}, ["seeds", "int"]),
    ({"methods": {"A B": {}, "A/B": {}}}, ["same folder name", "A_B"]),
])
def test_bad_grid_is_refused_before_anything_runs(tmp_path, bad, words):
    with pytest.raises(SweepError) as err:
        load_sweep(write(tmp_path / "grid.yaml", bad))
    for w in words:
        assert w in str(err.value), (w, str(err.value))


@pytest.mark.parametrize("seeds, words", [
    ([0.5], ["seeds", "whole number", "not a fraction", "0.5"]),  # ran as seed 0 before
    ([1, 2.5], ["seeds", "not a fraction", "2.5"]),
    ([-0.5], ["seeds", "not a fraction"]),
    ([float("nan")], ["seeds", "list of ints", "nan"]),
    ([float("inf")], ["seeds", "list of ints", "inf"]),
    ([True], ["seeds", "list of ints", "True"]),
    ([0, False], ["seeds", "list of ints"]),
    ("0.5", ["seeds", "list of ints"]),
    ("1,x", ["seeds", "list of ints"]),
    (7, ["seeds", "list of ints", "7"]),
])
def test_sweep_seeds_are_whole_numbers(tmp_path, seeds, words):
    with pytest.raises(SweepError) as err:
        load_sweep(write(tmp_path / "grid.yaml", {"methods": {"a": {}}, "seeds": seeds}))
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_sweep_seeds_written_as_whole_floats_or_text_are_those_numbers(tmp_path):
    for seeds, want in (([2.0, 0, 3], [2, 0, 3]), ("4, 5", [4, 5])):
        sweep = load_sweep(write(tmp_path / "grid.yaml", {"methods": {"a": {}}, "seeds": seeds}))
        assert [c.seed for c in sweep.cells] == want
        assert all(type(c.seed) is int for c in sweep.cells)


def sweep_cmd(path, *extra):
    return subprocess.run([sys.executable, "-m", "experiments.sweep", str(path), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_sweep_writes_the_table_and_plot_and_resumes(tmp_path, capsys):
    """The 4 cells run in-process (fast); one cell's results are then removed and the default
    backend runs that cell again through `flwr run` on a SuperLink the sweep starts and stops.
    The table covers the 4 cells whichever backend ran them; a rerun runs nothing."""
    from experiments.sweep import main

    grid = write(tmp_path / "two.yaml", {
        "out-dir": str(tmp_path / "out"),
        "federation-config": {"num-supernodes": 4},
        "run-config": {"num-server-rounds": 3, "local-iterations": 10, "fraction-train": 0.5},
        "seeds": [0, 1],
        "methods": {"FedAvg": {"method": "fedavg"}, "FedACG": {"method": "fedacg"}},
        "acc-at-rounds": [2, 3],
        "target-accs": [1, 99.5],
    })
    assert main([str(grid), "--in-process", "--quiet"]) == 0
    assert "4 cells, 0 done, 4 to run" in capsys.readouterr().out
    sweep_dir = tmp_path / "out" / "two"
    by_flwr = sweep_dir / "runs" / "FedACG" / "seed-1"
    (by_flwr / "results.json").unlink()  # this cell is not done any more

    out = sweep_cmd(grid, "--quiet")  # backend flwr (the default): only that cell runs
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "4 cells, 3 done, 1 to run" in out.stdout
    port = int(re.search(r"SuperLink on 127\.0\.0\.1:(\d+)", out.stdout).group(1))
    with socket.socket() as s:  # the sweep's SuperLink is gone
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert "started run" in (by_flwr / "flwr-run.log").read_text()

    lines = (sweep_dir / "table.md").read_text().strip().splitlines()
    assert lines[0] == ("| Method | Last 10R (%) | Final acc. (%) | Acc. at 2R (%) "
                        "| Acc. at 3R (%) | Rounds to 1% | Rounds to 99.5% | MB per round "
                        "| Seeds |")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert [r[0] for r in rows] == ["FedAvg", "FedACG"]  # one row per method, in the file's order
    for r in rows:
        assert all(re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", c) for c in r[1:5])
        assert r[5] == "1 ± 0"  # every seed is above 1% after round 1
        assert r[6] == "3+"  # nobody reaches 99.5% in 3 rounds
        assert r[8] == "2"
    assert rows[0][7] == rows[1][7]  # FedACG sends what FedAvg sends
    with open(sweep_dir / "table.csv") as f:
        table = list(csv.reader(f))
    assert table[0][0] == "Method" and [r[0] for r in table[1:]] == ["FedAvg", "FedACG"]
    assert table[1:] == rows
    with open(sweep_dir / "cells.csv") as f:
        runs = list(csv.DictReader(f))
    assert [(r["method"], r["seed"]) for r in runs] == [
        ("FedAvg", "0"), ("FedAvg", "1"), ("FedACG", "0"), ("FedACG", "1")]
    assert_plot(sweep_dir / "ema.png")

    result_files = sorted(sweep_dir.glob("runs/*/seed-*/results.json"))
    assert len(result_files) == 4
    for path in result_files:
        results = json.loads(path.read_text())
        assert results["summary"]["complete"] and results["summary"]["rounds"] == 3
        assert (path.parent / "accuracy.png").exists()
    stamps = [p.stat().st_mtime_ns for p in result_files]

    again = sweep_cmd(grid, "--quiet")  # resumes: nothing left to run, no SuperLink started
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 cells, 4 done, 0 to run" in again.stdout and "SuperLink" not in again.stdout
    assert [p.stat().st_mtime_ns for p in result_files] == stamps
    assert (sweep_dir / "table.md").read_text().strip().splitlines() == lines

    changed = yaml.safe_load(grid.read_text())
    changed["methods"]["FedACG"]["lam"] = 0.9  # a changed cell is not taken for done
    dry = sweep_cmd(write(grid, changed), "--dry-run")
    states = [line.split()[0:2] for line in dry.stdout.splitlines()]
    assert [s[0] for s in states] == ["done", "done", "to", "to"], dry.stdout


def test_stop_process_tree_reaches_processes_in_sessions_of_their_own(tmp_path):
    """Like the SuperLink's SuperExec (a session of its own) and Ray under it."""
    import os
    import time

    from experiments.processes import stop_process_tree

    pids = tmp_path / "pids"
    grandchild = ("import os, subprocess, sys, time; "
                  "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
                  f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}'); time.sleep(300)")
    child = ("import subprocess, sys, time; "
             f"subprocess.Popen([sys.executable, '-c', {grandchild!r}], start_new_session=True); "
             "time.sleep(300)")
    root = subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
    session = sleeper = None
    try:
        deadline = time.monotonic() + 30
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        session, sleeper = map(int, pids.read_text().split())
        assert os.getsid(session) == session != os.getsid(root.pid)
        stop_process_tree(root.pid, grace=10, child=root)
        assert root.poll() is not None
        for pid in (session, sleeper):  # gone, or a zombie waiting for whoever adopted it
            state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                                   text=True).stdout.strip()
            assert state in ("", "Z") or state.startswith("Z"), (pid, state)
    finally:  # whatever the outcome, nothing of it is left running
        for pid in (root.pid, session, sleeper):
            try:
                if pid:
                    os.kill(pid, 9)
            except ProcessLookupError:
                pass
        root.wait()


def test_in_process_sweep_runs_the_real_apps_and_resumes(tmp_path, capsys):
    """backend in-process: every cell runs the ServerApp and ClientApp in this process and
    leaves the run folder a `flwr run` cell leaves (results.json, run-config.toml, its log)."""
    from experiments.sweep import main

    grid = write(tmp_path / "tiny.yaml", {
        "out-dir": str(tmp_path / "out"),
        "federation-config": {"num-supernodes": 4},
        "run-config": {"num-server-rounds": 2, "local-iterations": 2, "fraction-train": 0.5},
        "seeds": [0],
        "methods": {"FedAvg": {"method": "fedavg"}, "FedACG": {"method": "fedacg"}},
        "acc-at-rounds": [1, 2],
    })
    assert main([str(grid), "--in-process", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 cells, 0 done, 2 to run" in out and "SuperLink" not in out
    sweep_dir = tmp_path / "out" / "tiny"
    rows = (sweep_dir / "table.md").read_text().strip().splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["FedAvg", "FedACG"]
    for run_dir in sorted(sweep_dir.glob("runs/*/seed-*")):
        results = json.loads((run_dir / "results.json").read_text())
        assert results["summary"]["complete"] and results["summary"]["rounds"] == 2
        assert results["config"]["num-server-rounds"] == 2
        assert results["config"]["seed"] == int(run_dir.name.split("-")[1])
        assert [r["clients-replied"] for r in results["rounds"][1:]] == [2, 2]  # of 4
        assert "[round 2/2]" in (run_dir / "in-process.log").read_text()
        assert 'method = "' in (run_dir / "run-config.toml").read_text()  # also for flwr run
    assert main([str(grid), "--in-process", "--quiet"]) == 0  # resumes: nothing to run
    assert "2 cells, 2 done, 0 to run" in capsys.readouterr().out


def test_in_process_sweep_refuses_a_connection_and_an_unknown_backend(tmp_path):
    spec = {"methods": {"a": {"method": "fedavg"}}, "connection": "mine"}
    with pytest.raises(SweepError, match="'connection' is for backend flwr"):
        load_sweep(write(tmp_path / "grid.yaml", spec), backend="in-process")
    with pytest.raises(SweepError, match="backend 'ray'"):
        load_sweep(write(tmp_path / "grid.yaml", {**spec, "backend": "ray"}))


def test_cells_side_by_side_and_a_diverged_method_is_a_result(tmp_path, capsys):
    """--jobs 2: the cells run in two worker processes, seed by seed, one progress line per cell.
    A method whose training diverges (its replies end non-finite) is a result, never
    dropped: its run folder says failed / diverged, the table writes it 'Failed (2/2)', cells.csv
    'diverged', and a rerun runs nothing (it is done)."""
    from experiments.sweep import main

    grid = write(tmp_path / "par.yaml", {
        "out-dir": str(tmp_path / "out"),
        "federation-config": {"num-supernodes": 4},
        "run-config": {"num-server-rounds": 6, "local-iterations": 20, "fraction-train": 0.5,
                       "model": "mlp"},
        "seeds": [0, 1],
        # FedAvgM with every step at its largest: the weights grow 1e4-fold a round until the
        # replies are not finite (dropped), and then the run stops (max-skipped-rounds 1)
        "methods": {"FedAvg": {"method": "fedavg"},
                    "Broken": {"method": "fedavgm", "lam": 0.99, "eta": 1000.0, "lr": 1000.0,
                               "update-norm-ratio": 0.0, "max-skipped-rounds": 1}},
        "acc-at-rounds": [2],
    })
    assert main([str(grid), "--in-process", "--jobs", "2"]) == 0  # (a diverged cell: a result)
    out = capsys.readouterr().out
    ends = re.findall(r"^\[(\d)/4 cells, .*\] (\w+) / seed (\d): (.*)$", out, re.M)
    assert sorted(e[0] for e in ends) == ["1", "2", "3", "4"]
    assert {(m, s): why.split(" ")[0] for _, m, s, why in ends} == {
        ("FedAvg", "0"): "done,", ("FedAvg", "1"): "done,", ("Broken", "0"): "diverged",
        ("Broken", "1"): "diverged"}
    sweep_dir = tmp_path / "out" / "par"
    # the order they were handed out: seed by seed (a stopped sweep leaves whole seeds)
    sweep = load_sweep(grid)
    for cell in sweep.cells:
        (cell.run_dir / "sweep-cell.json").unlink()
    assert [(c.method, c.seed) for c in cells_to_run(sweep)] == [
        ("FedAvg", 0), ("Broken", 0), ("FedAvg", 1), ("Broken", 1)]
    results = json.loads((sweep_dir / "runs" / "Broken" / "seed-1" / "results.json").read_text())
    assert results["status"] == "failed" and results["failure"] == "diverged"
    rows = [[c.strip() for c in r.strip("|").split("|")]
            for r in (sweep_dir / "table.md").read_text().strip().splitlines()[2:]]
    assert rows[1][:2] == ["Broken", "Failed (2/2)"] and rows[1][-1] == "2"
    assert re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", rows[0][1])
    with open(sweep_dir / "cells.csv") as f:
        status = {(r["method"], r["seed"]): r["status"] for r in csv.DictReader(f)}
    assert status[("Broken", "0")] == "diverged" and status[("FedAvg", "1")] == "complete"
    assert_plot(sweep_dir / "acc.png")
    for cell in sweep.cells:  # (made again: the cells were run from these descriptions)
        (cell.run_dir / "sweep-cell.json").write_text(json.dumps(cell.description()))
    assert main([str(grid), "--in-process", "--jobs", "2"]) == 0
    assert "4 cells, 4 done, 0 to run" in capsys.readouterr().out


def test_a_failed_cell_that_did_not_diverge_runs_again(tmp_path):
    """Only a diverged run is a result: a run that stopped on an error (here: marked so by
    hand) or was killed (status running) is run again."""
    from experiments.sweep import is_result

    run_dir = tmp_path / "cell"
    run_dir.mkdir()
    for status, failure, result in (("failed", "error", False), ("failed", None, False),
                                    ("running", None, False), ("failed", "diverged", True),
                                    ("complete", None, True)):
        (run_dir / "results.json").write_text(json.dumps({
            "config": {"num-server-rounds": 1}, "status": status, "failure": failure,
            "summary": {"complete": status == "complete"},
            "rounds": [{"round": 0}, {"round": 1, "test-acc": 0.5}]}))
        assert is_result(run_dir) is result, (status, failure)


def test_a_run_that_broke_down_is_marked_diverged_any_other_error_not():
    from server_app.app import failure_kind
    from strategies.round_loop import NothingLearned
    from strategies.state_check import ServerStateNotFinite

    assert failure_kind(ServerStateNotFinite("NaN in theta")) == "diverged"
    assert failure_kind(NothingLearned("no round aggregated a reply")) == "diverged"
    for other in (ValueError("bad key"), RuntimeError("a bug"), OSError("disk full")):
        assert failure_kind(other) == "error"


def test_cells_picks_cells_by_setting_method_and_seed(tmp_path, capsys):
    """--cells: a shell pattern over '<setting>/<method>/<seed>' ('-': the unnamed setting);
    one that matches nothing is an error naming a cell that exists."""
    from experiments.sweep import main

    grid = write(tmp_path / "g.yaml", {
        "out-dir": str(tmp_path / "out"), "seeds": [0, 1, 2],
        "methods": {"FedAvg": {"method": "fedavg"}, "GC-Fed": {"method": "gcfed"}},
        "settings": {"a": {}, "b": {"dirichlet-alpha": 0.1}}})
    for pattern, want in (("a/GC-Fed/1", [("a", "GC-Fed", "1")]),
                          ("*/FedAvg/2", [("a", "FedAvg", "2"), ("b", "FedAvg", "2")]),
                          ("b/*/[01]", [("b", "FedAvg", "0"), ("b", "FedAvg", "1"),
                                        ("b", "GC-Fed", "0"), ("b", "GC-Fed", "1")])):
        assert main([str(grid), "--dry-run", "--cells", pattern]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert [re.match(r"to run\s+(\S+) \| (.+?) \| seed (\d)", line).groups()
                for line in lines] == want
    assert main([str(grid), "--dry-run", "--cells", "a/FedAvg/3"]) == 2
    assert "matches none of the sweep's cells (e.g. 'a/FedAvg/0'" in capsys.readouterr().err
    unnamed = write(tmp_path / "u.yaml", {"methods": {"FedAvg": {"method": "fedavg"}}})
    assert main([str(unnamed), "--dry-run", "--cells=-/FedAvg/0"]) == 0


def test_a_worker_that_dies_stops_the_parallel_sweep_with_what_to_do(tmp_path, monkeypatch,
                                                                     capsys):
    """--jobs: when a worker process dies (killed, out of memory) the pool is broken; the cell
    it ran is FAILED, the cells not started are named, and nothing is handed to the broken pool
    (a stand-in executor plays the pool)."""
    import concurrent.futures as cf

    from experiments import sweep_cells
    from experiments.sweep_cells import run_parallel

    class DeadPool:
        def __init__(self, *args, **kwargs):
            self._broken, self._processes, self.submitted = False, {}, 0

        def submit(self, *args):
            assert not self._broken, "a cell handed to a broken pool"
            self.submitted += 1
            self._broken = True
            future = cf.Future()
            future.set_exception(cf.process.BrokenProcessPool("a worker died"))
            return future

        def shutdown(self, **kwargs):
            pass

    monkeypatch.setattr(sweep_cells, "ProcessPoolExecutor", DeadPool)  # (the name it calls)
    grid = write(tmp_path / "g.yaml", {"out-dir": str(tmp_path / "out"), "seeds": [0, 1, 2],
                                       "methods": {"FedAvg": {"method": "fedavg"}}})
    sweep = load_sweep(grid, backend="in-process")
    run_parallel(sweep, list(sweep.cells), jobs=1)
    out = capsys.readouterr().out
    assert "FedAvg / seed 0: FAILED" in out
    assert "2 cell(s) not started: run the same command to go on" in out
    assert [c.seed for c in sweep.failed] == [0, 1, 2]


# --- every cell checkable: its code version, its CSV row, a rerun's equal numbers (issue 56) ---


def timing(key: str) -> bool:
    """A time (seconds, eval-seconds, train-load-seconds, ...): never the same twice."""
    return key == "seconds" or key.endswith("-seconds")


def test_one_cell_run_twice_on_one_thread_gives_the_same_numbers(tmp_path, capsys):
    """One short digits cell, in-process, run twice on one thread on this machine: every number
    of every round (accuracies, losses, EMA, bytes) and of the summary is the same, bit for bit;
    only the times differ. Its cells.csv row holds the mean of the last rounds' test accuracy
    (computed here from its results.json) and the commit results.json records."""
    import torch

    from experiments.sweep import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what docs/results.md says is exact: this machine, one thread
    try:
        runs = []
        for name in ("first", "again"):
            grid = write(tmp_path / f"{name}.yaml", {
                "out-dir": str(tmp_path / "out"),
                "federation-config": {"num-supernodes": 4},
                "run-config": {"num-server-rounds": 3, "local-iterations": 2,
                               "fraction-train": 0.5},
                "seeds": [0], "methods": {"FedACG": {"method": "fedacg"}},
                "acc-at-rounds": [2]})
            assert main([str(grid), "--in-process", "--quiet"]) == 0
            run_dir = tmp_path / "out" / name / "runs" / "FedACG" / "seed-0"
            runs.append(json.loads((run_dir / "results.json").read_text()))
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    first, again = ({"rounds": [{k: v for k, v in r.items() if not timing(k)}
                                for r in run["rounds"]],
                     "summary": {k: v for k, v in run["summary"].items() if not timing(k)}}
                    for run in runs)
    assert len(first["rounds"]) == 4 and first["rounds"][3]["test-acc"] > 0
    assert first == again
    assert runs[0]["code-version"] == runs[1]["code-version"]
    recorded = json.loads((tmp_path / "out" / "first" / "runs" / "FedACG" / "seed-0"
                           / "sweep-cell.json").read_text())["code-version"]
    assert recorded["commit"] == runs[0]["code-version"]["commit"]  # (the checkout, both)
    with open(tmp_path / "out" / "first" / "cells.csv") as f:
        (row,) = list(csv.DictReader(f))
    accs = [r["test-acc"] for r in runs[0]["rounds"] if r["round"] in (1, 2, 3)]
    assert float(row["last10-acc"]) == pytest.approx(sum(accs) / 3, abs=1e-15)
    assert float(row["final-test-acc"]) == accs[-1]
    assert row["code-version"].startswith(runs[0]["code-version"]["commit"] or "files.")


def test_a_stopped_cell_continues_from_its_checkpoint_as_if_never_stopped(tmp_path, capsys,
                                                                          monkeypatch):
    """A cell whose run stopped on an error in round 3 (checkpoint after round 2) continues
    from its checkpoint when the sweep is run again, and ends as the same cell run without a
    stop ends, bit for bit but the times (one thread, this machine: docs/results.md). A cell
    starts afresh, its checkpoint removed first, when its resumed run stopped too, when its
    record names other code, and when its run had no rounds left (and when its results.json
    is gone: test_sweep_writes_the_table_and_plot_and_resumes)."""
    import torch

    import inprocess
    from experiments.sweep import main

    def grid(name):
        return write(tmp_path / f"{name}.yaml", {
            "out-dir": str(tmp_path / "out"), "federation-config": {"num-supernodes": 4},
            "run-config": {"num-server-rounds": 4, "local-iterations": 2,
                           "fraction-train": 0.5, "checkpoint-every": 2},
            "seeds": [0], "methods": {"FedACG": {"method": "fedacg"}}})

    def rounds(name):
        results = json.loads((tmp_path / "out" / name / "runs" / "FedACG" / "seed-0"
                              / "results.json").read_text())
        return [{k: v for k, v in r.items() if not timing(k)} for r in results["rounds"]]

    real = inprocess.InProcessGrid.send_and_receive

    def stop_in_round_3(self, messages, *, timeout=None):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train" and \
                messages[0].content["config"]["server-round"] == 3:
            raise RuntimeError("stopped in round 3")
        return real(self, messages, timeout=timeout)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([str(grid("whole")), "--in-process", "--quiet"]) == 0
        with monkeypatch.context() as patch:
            patch.setattr(inprocess.InProcessGrid, "send_and_receive", stop_in_round_3)
            assert main([str(grid("stopped")), "--in-process", "--quiet"]) != 0
        run_dir = tmp_path / "out" / "stopped" / "runs" / "FedACG" / "seed-0"
        assert not (run_dir / "sweep-cell.json").exists()
        assert len(rounds("stopped")) == 3  # rounds 0..2, then the stop
        capsys.readouterr()
        assert main([str(grid("stopped")), "--in-process"]) == 0
        assert "continuing its stopped run from the checkpoint" in capsys.readouterr().out
        assert rounds("stopped") == rounds("whole") and len(rounds("whole")) == 5

        def run_stopped(name):  # the cell of `name`, stopped in round 3
            with monkeypatch.context() as patch:
                patch.setattr(inprocess.InProcessGrid, "send_and_receive", stop_in_round_3)
                return main([str(grid(name)), "--in-process"])

        def next_run(name):  # (resume, a checkpoint there?) as the next run starts the cell
            seen = []
            with monkeypatch.context() as patch:
                patch.setattr(inprocess, "run_in_process", lambda rc, n: seen.append(
                    (rc.get("resume", ""), (tmp_path / "out" / name / "runs" / "FedACG"
                                            / "seed-0" / "checkpoint.pt").exists())))
                main([str(grid(name)), "--in-process", "--quiet"])
            return seen

        # stopped again after its resume (the app refused the checkpoint, or the run failed
        # again): the next run starts it afresh
        assert run_stopped("twice") != 0 and run_stopped("twice") != 0
        out = capsys.readouterr().out
        assert "continuing its stopped run" in out and "starts this cell afresh" in out
        assert next_run("twice") == [("", False)]
        # stopped, then its record names other code: afresh, its checkpoint removed first
        assert run_stopped("other") != 0
        started_file = tmp_path / "out" / "other" / "runs" / "FedACG" / "seed-0" / \
            "sweep-cell-started.json"
        started = json.loads(started_file.read_text())
        started["code-version"] = {"commit": "a" * 40, "dirty": False, "diff-sha256": None,
                                   "files-sha256": None}
        started_file.write_text(json.dumps(started))
        assert next_run("other") == [("", False)]
        # a run that did its last round but was not marked complete (its checkpoint at the
        # last round: nothing to continue): afresh
        results = json.loads((run_dir / "results.json").read_text())
        results["status"], results["summary"]["complete"] = "running", False
        (run_dir / "results.json").write_text(json.dumps(results))
        (run_dir / "sweep-cell.json").unlink()
        assert next_run("stopped") == [("", False)]
    finally:
        torch.set_num_threads(threads)


def finish_cell(cell, accs, version=None, diverged=False):
    """A finished cell as a sweep leaves it: results.json with a row per accuracy (EMA as the
    run computes it); sweep-cell.json with the `code-version` given (none: an older sweep's)."""
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    rows, ema = [{"round": 0, "test-acc": 0.1}], None
    for r, acc in enumerate(accs, 1):
        ema = acc if ema is None else 0.9 * ema + 0.1 * acc
        rows.append({"round": r, "test-acc": acc, "ema-acc": ema, "seconds": 1.0,
                     "bytes-down-total": 1000 * r, "bytes-up-total": 500 * r})
    results = {"config": resolve(cell.run_config),  # (resolved, as a run's)
               "status": "failed" if diverged else "complete",
               "failure": "diverged" if diverged else None,
               "summary": {"complete": not diverged, "wall-seconds": 60.0}, "rounds": rows}
    (cell.run_dir / "results.json").write_text(json.dumps(results))
    record = cell.description() | ({} if version is None else {"code-version": version})
    (cell.run_dir / "sweep-cell.json").write_text(json.dumps(record))


def commit(hex_digit, dirty=False):
    return {"commit": hex_digit * 40, "dirty": dirty,
            "diff-sha256": "e" * 64 if dirty else None, "files-sha256": None}


def two_cell_sweep(tmp_path):
    grid = write(tmp_path / "mix.yaml", {
        "out-dir": str(tmp_path / "out"), "run-config": {"num-server-rounds": 12},
        "seeds": [0, 1], "methods": {"FedAvg": {"method": "fedavg"},
                                     "Fed <b>|x": {"method": "fedacg"}},
        "acc-at-rounds": [4, 12], "target-accs": [35, 95]})
    return grid, load_sweep(grid)


def test_cells_of_different_code_versions_are_refused_unless_told(tmp_path, capsys):
    """The table of cells that ran on two commits (or a commit and a dirty checkout of it, or
    an older app's cells that recorded none) is refused with one message naming each version
    and its cells and the fix, and nothing is written; --mixed-versions tabulates them.
    --dry-run shows each finished cell's version. Every such cell counts as done (a resume
    runs none of them); one whose recorded version is no version (planted, damaged) does not."""
    from experiments.sweep import main

    grid, sweep = two_cell_sweep(tmp_path)
    accs = [0.3, 0.5, 0.6, 0.7] * 3
    for cell in sweep.cells:
        finish_cell(cell, accs, commit("a"))
    assert main([str(grid), "--table-only"]) == 0  # one version: tabulated
    table = tmp_path / "out" / "mix" / "table.md"
    table.unlink()
    for cell, version in zip(sweep.cells, (commit("a"), commit("b"), commit("a", dirty=True),
                                           None)):
        finish_cell(cell, accs, version)
    capsys.readouterr()
    assert main([str(grid), "--table-only"]) == 1
    err = capsys.readouterr().err
    assert "the cells ran on 4 code versions (" in err
    assert "aaaaaaaaaaaa: -/FedAvg/0" in err and "bbbbbbbbbbbb: -/FedAvg/1" in err
    assert "aaaaaaaaaaaa+dirty.eeeeeeeeeeeeeeee: -/Fed <b>|x/0" in err
    assert "unknown: -/Fed <b>|x/1" in err and "--mixed-versions" in err
    assert len(err.strip().splitlines()) == 1 and not table.exists()
    assert main([str(grid), "--table-only", "--mixed-versions"]) == 0
    with open(tmp_path / "out" / "mix" / "cells.csv") as f:
        versions = [r["code-version"] for r in csv.DictReader(f)]
    assert versions == ["a" * 40, "b" * 40, "a" * 40 + "+dirty.eeeeeeeeeeeeeeee", "unknown"]
    capsys.readouterr()
    assert main([str(grid), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [re.search(r"\| code (\S+) \|", line).group(1) for line in lines] == [
        "aaaaaaaaaaaa", "bbbbbbbbbbbb", "aaaaaaaaaaaa+dirty.eeeeeeeeeeeeeeee", "unknown"]
    assert cells_to_run(sweep) == []
    finish_cell(sweep.cells[1], accs, {"commit": "HEAD", "dirty": False})
    assert cells_to_run(sweep) == [sweep.cells[1]]


def test_the_table_built_from_cells_csv_is_the_table_built_from_the_run_folders(tmp_path):
    """cells.csv written by the sweep, read back through its checks (reporting.cells), makes
    the same table, row for row, as the run folders did: also for a diverged cell, a target
    not reached ('12+') and a name with Markdown in it; its numbers are the runs' own (the
    last 10 rounds' mean and the EMA at round 4, computed here by hand)."""
    from experiments.sweep import write_report
    from reporting.cells import method_runs, read_cells_csv
    from reporting.table import comparison

    grid, sweep = two_cell_sweep(tmp_path)
    runs = {0: [0.3, 0.5, 0.6, 0.7] * 3, 1: [0.2, 0.4, 0.6, 0.8] * 3}
    for cell in sweep.cells:
        finish_cell(cell, runs[cell.seed], commit("c"),
                    diverged=cell.method != "FedAvg" and cell.seed == 1)
    report = write_report(sweep)
    folder_md = (tmp_path / "out" / "mix" / "table.md").read_text()
    cells, rounds, targets = read_cells_csv(tmp_path / "out" / "mix" / "cells.csv")
    assert (rounds, targets) == ([4, 12], [35.0, 95.0])
    md, csv_text = comparison(method_runs(cells), rounds, targets)
    assert md == folder_md and md == report.md
    assert csv_text == (tmp_path / "out" / "mix" / "table.csv").read_text()
    seed0 = cells[0]["summary"]
    # the last 10 of 12 rounds, 3 .. 12: 0.6, 0.7, then 0.3, 0.5, 0.6, 0.7 twice
    assert seed0["last10-acc"] == pytest.approx((0.6 + 0.7 + 2 * (0.3 + 0.5 + 0.6 + 0.7)) / 10)
    ema3 = 0.9 * (0.9 * 0.3 + 0.1 * 0.5) + 0.1 * 0.6  # 0.348: below 35 %
    ema4 = 0.9 * ema3 + 0.1 * 0.7  # 0.3832: the first at or above it
    assert seed0["acc-at-round"]["4"] == pytest.approx(ema4)
    assert seed0["rounds-to-acc"] == {"35": 4, "95": "12+"}
    assert [c["summary"]["diverged"] for c in cells] == [False, False, False, True]
    assert "| Fed &lt;b&gt;\\|x |" in md  # (the name as text: markdown's escapes)


def test_a_cell_whose_setup_changed_since_it_ran_runs_again_and_leaves_the_table(
        tmp_path, capsys):
    """A cell's description names its set-up, not the set-up's values: when the set-up file
    changes after a cell finished (here: a row-config gives FedAvgM another lr), the config
    its run was made from (results.json) is not the one the cell resolves to now, so the cell
    is not done, the sweep lists it to run, and the table leaves it out, naming it and the key
    that changed. The unchanged row stays done."""
    from experiments.sweep import main, write_report
    from run_config import load_setup

    setup = tmp_path / "mine.yaml"
    head = ("paper: a test\nmethod: fedavg\nfederation: {num-supernodes: 4}\n"
            "run-config: {lr: 0.1, num-server-rounds: 3}\n")
    tail = "reported: {metric: m, columns: [acc], rows: {fedavg: [1.0]}}\n"
    setup.write_text(head + tail)
    grid = write(tmp_path / "grid.yaml", {
        "out-dir": str(tmp_path / "out"), "seeds": [0],
        "settings": {"s": {"setup": str(setup), "federation-config": {"num-supernodes": 4}}},
        "methods": {"FedAvg": {"method": "fedavg"}, "FedAvgM": {"method": "fedavgm"}}})
    load_setup.cache_clear()
    sweep = load_sweep(grid)
    for cell in sweep.cells:
        finish_cell(cell, [0.5, 0.6, 0.7], version=commit("a"))
    assert cells_to_run(sweep) == []
    assert len(write_report(sweep).cells) == 2

    setup.write_text(head + "row-config: {fedavgm: {lr: 0.05}}\n" + tail)
    load_setup.cache_clear()
    try:
        sweep = load_sweep(grid)
        assert [(c.method, c.seed) for c in cells_to_run(sweep)] == [("FedAvgM", 0)]
        capsys.readouterr()
        assert main([str(grid), "--dry-run"]) == 0  # (warned once, by the first to look)
        out, err = capsys.readouterr()
        assert "done    s | FedAvg | seed 0" in out and "to run  s | FedAvgM | seed 0" in out
        assert "s/FedAvgM/0 is left out of the table" in err
        assert "'lr' = 0.05 (the run's: 0.1)" in err
        assert [c["method"] for c in write_report(sweep).cells] == ["FedAvg"]
    finally:
        load_setup.cache_clear()


def test_a_cells_wall_seconds_are_at_least_its_rounds_seconds():
    """A run resumed by code that counted only its last process's seconds: its rounds' sum is
    the closer figure (experiments.sweep_report.wall_seconds); otherwise the summary's."""
    from experiments.sweep_report import wall_seconds

    assert wall_seconds({"summary": {"wall-seconds": 375.0}}, 1762.5) == 1762.5
    assert wall_seconds({"summary": {"wall-seconds": 1800.0}}, 1762.5) == 1800.0
    assert wall_seconds({"summary": {}}, 1762.5) is None
