"""MOON, FedLC, FedNTD and FedDecorr (docs/baselines.md), each once through `flwr run`
against a simulation SuperLink of the test's own: 2 rounds on digits, 4 nodes."""

import json
import subprocess
from pathlib import Path

import pytest

from experiments.superlink import CONNECTION

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.each_method]


# one run per method (the variants differ in knobs only, run in-process in
# test_local_objectives.py); a flwr run costs about 25 s, mostly Ray's start
@pytest.mark.parametrize("method", ["moon", "fedlc-gcfed", "fedntd-fedacg", "feddecorr-gcfed"])
def test_flwr_run_each_variant(superlink, method):
    env, home = superlink
    run_config = (f"method='{method}' num-server-rounds=2 local-iterations=2 fraction-train=0.5 "
                  f"out-dir='{home}/runs' run-name='{method}'")
    out = subprocess.run(
        ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config", "num-supernodes=4",
         "--run-config", run_config],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[round 2/2] test-acc" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads((Path(home) / "runs" / method / "results.json").read_text())
    assert results["status"] == "complete"
    assert results["config"]["method"] == method
    assert results["config"]["client-objective"] == method.split("-")[0]
