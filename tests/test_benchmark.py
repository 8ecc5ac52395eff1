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
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "| workload | plain s/round | app s/round | app training s/round |" in out.stdout
    assert "server aggregation of 10 ResNet-18 updates" in out.stdout
    figures = json.loads((tmp_path / "b.json").read_text())
    tiny = figures["workloads"]["tiny"]
    assert tiny["eta"] > 0 and len(tiny["app"]["round-seconds"]) == 2
    assert figures["info"]["torch"] and figures["aggregation-10-resnet18-ms"] > 0
