"""A failed run with the real Flower runtime (`flwr run` against a SuperLink of the test's own):
too few simulated nodes fail at once, and the status command, not `flwr run`'s exit status, says
so. (The console of a run through `flwr run` is checked in test_simulation.py, on the session's
FedACG run.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.superlink import CONNECTION

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def flwr_run(env, run_config: str, supernodes: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config",
         f"num-supernodes={supernodes}", "--run-config", run_config],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)


def status(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reporting.status", str(run_dir)], cwd=ROOT,
                          capture_output=True, text=True)


@pytest.mark.long  # (25-45 s; test_runs.py pins the rule in-process on a fixed-size grid)
def test_too_few_simulated_nodes_fail_at_once(superlink):
    """With node-wait-timeout = 3600 s, a server that waited for nodes could not end the run
    within flwr_run's 400 s: the run ends failed, so it did not wait (no wall-clock bound).
    The default run checks the same in-process (test_runs.py,
    test_too_few_simulated_nodes_fail_at_once_and_the_status_says_failed: FakeGrid of a fixed
    size, the node wait's virtual clock, the status command); here Flower's own grid."""
    env, home = superlink
    out = flwr_run(env, "min-train-nodes=5 node-wait-timeout=3600.0 "
                   f"out-dir='{home}/runs' run-name='few'", 3)
    text = out.stdout + out.stderr
    # Flower's `flwr run` exits 0 for a failed run: the status command is what a script reads
    assert "Run failed: the simulated federation has 3 node(s), 5 needed" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    run_dir = Path(home) / "runs" / "few"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "failed" and "num-supernodes" in results["error"]
    checked = status(run_dir)
    assert checked.returncode == 1 and checked.stdout.startswith("failed"), checked
