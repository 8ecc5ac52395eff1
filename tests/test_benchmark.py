"""Smoke run of the benchmark (tiny sizes): it runs end to end and prints its table.

No timing is asserted: the figures are for people (docs/performance.md), not for CI.
"""

import json
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
