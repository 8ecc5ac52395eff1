"""Smoke run of the benchmark (tiny sizes): it runs end to end and prints its table.

No timing is asserted: the figures are for people (docs/performance.md), not for CI.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.mark.long
def test_benchmark_smoke(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.sim_vs_loop", "--tiny",
         "--json", str(tmp_path / "b.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert ("| workload | plain s/round | app s/round | app training s/round | app round 1 s "
            "| eta (median of pairs) | eta spread (min-max) | pairs |") in out.stdout
    assert "server aggregation of 10 ResNet-18 updates" in out.stdout
    figures = json.loads((tmp_path / "b.json").read_text())
    tiny = figures["workloads"]["tiny"]
    # --tiny: 2 blocks of 1 plain round and 1 + 1 app rounds, interleaved -> 2 pairs
    assert [len(b) for b in tiny["app"]["round-seconds"]] == [1, 1]
    assert [len(b) for b in tiny["plain"]["round-seconds"]] == [1, 1]
    assert len(tiny["app"]["first-round-seconds"]) == 2
    pairs = tiny["pair-ratios"]
    assert len(pairs) == 2 and all(r > 0 for r in pairs)
    assert min(pairs) <= tiny["eta"] <= max(pairs) and tiny["eta-spread"] == [min(pairs),
                                                                             max(pairs)]
    assert figures["info"]["torch"] and figures["aggregation-10-resnet18"]["app-ms"] > 0


@pytest.mark.long
def test_ray_cost_smoke(tmp_path):
    """benchmarks/ray_cost.py: the plain loop, the plain loop in a Ray actor and the app
    in-process, one block of 1 + 1 rounds each: one pair per side."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.ray_cost", "--tiny", "--json", str(tmp_path / "r.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert ("| workload | plain s/round | plain in a Ray actor s/round | ray eta (min-max) "
            "| app in-process s/round | app eta (min-max) | pairs |") in out.stdout
    figures = json.loads((tmp_path / "r.json").read_text())
    assert {side: [len(b) for b in blocks] for side, blocks in figures["round-seconds"].items()
            } == {"plain": [1], "ray": [1], "app": [1]}
    for side in ("ray", "app"):
        (pair,) = figures[f"{side}-pair-ratios"]
        assert pair > 0 and figures[f"{side}-eta"] == pair
        assert figures[f"{side}-eta-spread"] == [pair, pair]


def test_pss_of_a_process_and_names_summed():
    """The proportional size of this process is positive and at most its resident size; the
    breakdown sums the processes of one name."""
    from benchmarks.run_memory import _by_name, _pss_mb, _tree_rss_by_process

    pid = os.getpid()
    rss = _tree_rss_by_process(pid)[next(k for k in _tree_rss_by_process(pid)
                                         if k.endswith(f" {pid}"))]
    assert 0 < _pss_mb(pid) <= rss * 1.01
    assert _pss_mb(2**22 + 7) == 0.0  # no such process
    assert _by_name({"raylet 1": 10.0, "raylet 2": 5.5, "gcs_server 3": 1.0}) == {
        "raylet": 15.5, "gcs_server": 1.0}


def test_each_process_names_own_peak_is_its_largest_process_across_samples():
    from benchmarks.run_memory import _raise_own_peaks

    own: dict = {}
    _raise_own_peaks(own, {"actor 1": 5.0, "actor 2": 3.0, "raylet 3": 1.0, "gcs 4": 2.0})
    _raise_own_peaks(own, {"actor 1": 2.0, "actor 5": 4.5, "raylet 3": 4.0, "gcs 4": 0.5})
    assert own == {"actor": 5.0, "raylet": 4.0, "gcs": 2.0}  # summed, actor would be 8


@pytest.mark.long
def test_sim_floor_runs_the_floor_app(tmp_path):
    """benchmarks/sim_floor.py: the floor app runs through flwr run; its peak is the sum of its
    processes, with both PyTorch processes and Ray's own among them; proportional <= resident."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.sim_floor", "--clients", "2", "--rounds", "2",
         "--json", str(tmp_path / "f.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    floor = json.loads((tmp_path / "f.json").read_text())
    parts = floor["peak-breakdown-mb"]
    assert {"flwr-simulation", "ray::ClientAppActor", "raylet", "gcs_server"} <= set(parts)
    assert abs(sum(parts.values()) - floor["peak-host-mb"]) < 1e-6
    assert abs(sum(floor["peak-pss-breakdown-mb"].values()) - floor["peak-pss-mb"]) < 1e-6
    assert 0 < floor["peak-pss-mb"] <= floor["peak-host-mb"]
    assert "the simulation's floor (2 nodes, 2 rounds)" in out.stdout


@pytest.mark.long
@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                    reason="needs Debian's dataset-fashion-mnist (apt-get install "
                           "dataset-fashion-mnist)")
def test_real_cell_smoke(tmp_path):
    """benchmarks/real_cell.py: the cell in-process and the plain loop, as processes, with the
    cell's own schedule; its ratios are the medians of the pairs' figures written beside them."""
    scratch = tmp_path / "scratch"  # the benchmark's temporary folder goes here, and goes
    scratch.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.real_cell", "--tiny", "--json",
         str(tmp_path / "c.json")], cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "TMPDIR": str(scratch)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # its runs' folders removed (torch may leave its own compile cache there)
    assert [p.name for p in scratch.glob("real-cell-*")] == []
    figures = json.loads((tmp_path / "c.json").read_text())
    (app,), (plain,) = figures["runs"]["app"], figures["runs"]["plain"]
    assert len(app["rounds"]) == len(plain["rounds"]) == 3  # --tiny: 3 rounds, the same clients
    assert len(app["cpu-rounds"]) == len(plain["cpu-rounds"]) == 3
    assert figures["app"]["whole"] == pytest.approx(plain["wall"] / app["wall"])
    assert figures["app"]["cpu"] == pytest.approx(plain["cpu"] / app["cpu"])
    by_round = sorted(p / a for a, p in zip(app["rounds"][1:], plain["rounds"][1:]))
    assert figures["app"]["rounds"] == pytest.approx(sum(by_round) / 2)  # median of two
    assert 0.1 < plain["acc"] <= 1 and 0.1 < app["acc"] <= 1  # both learned something
    assert "app against the plain loop: speed ratio (plain/app) whole process" in out.stdout


@pytest.mark.long
def test_sweep_projection_adds_each_cells_start_and_rounds_and_leaves_no_folder(tmp_path):
    """benchmarks/sweep_projection.py: each sampled cell's start and end plus R times its mean
    round, summed over every cell of the sweep (each seed costs what seed 0 does), divided by
    --jobs; its sample's run folders are removed."""
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text("name: tiny\nfederation-config: {num-supernodes: 4}\n"
                     "run-config: {num-server-rounds: 30}\nseeds: [0, 1]\n"
                     "methods:\n  FedAvg: {method: fedavg}\n  FedACG: {method: fedacg}\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.sweep_projection", str(sweep), "--rounds", "3",
         "--jobs", "2", "--json", str(tmp_path / "p.json")], cwd=ROOT, capture_output=True,
        text=True, timeout=600, env={**os.environ, "TMPDIR": str(scratch)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    figures = json.loads((tmp_path / "p.json").read_text())
    assert sorted(figures["cells"]) == ["-/FedACG", "-/FedAvg"]  # seed 0 of each, sampled
    by_hand = sum(2 * (c["fixed"] + 30 * c["round"]) for c in figures["cells"].values())
    assert figures["cell-hours"] * 3600 == pytest.approx(by_hand, rel=1e-9)
    assert figures["wall-hours"] == pytest.approx(figures["cell-hours"] / 2, rel=1e-9)
    assert [p.name for p in scratch.glob("sweep-projection-*")] == []
