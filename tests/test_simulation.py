"""End to end with the real Flower runtime: `flwr run` against a SuperLink of the test's own.

The SuperLink (tests/conftest.py's `superlink`, one per test run) runs on its own ports with its
own FLWR_HOME (so a SuperLink a user left on the default port is neither used nor disturbed) and
every process it started is stopped, also on failure. FedACG's run is conftest's
`fedacg_flwr_run`, which the console test reads as well: one run for both, as long as both are
in this file (`--dist loadfile` gives a file to one worker, and each worker has its own session).
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.superlink import CONNECTION

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", ["fedacg", pytest.param("gcfed", marks=pytest.mark.long)])
def test_flwr_run_reaches_accuracy(superlink, method, request):
    env, home = superlink
    if method == "fedacg":  # the session's run (conftest), read by the console test below
        out, home, _, wall = request.getfixturevalue("fedacg_flwr_run")
    else:  # the same run described by a paper-style set-up file: one command
        setup = home / "small-setup.yaml"
        setup.write_text("paper: test\nmethod: gcfed\nfederation: {num-supernodes: 10}\n"
                         "run-config: {num-server-rounds: 12}\n"
                         "reported: {columns: [acc], rows: {gcfed: [90.0]}}\n")
        run_config = f"setup='{setup}' out-dir='{home}/runs' run-name='{method}'"
        t = time.monotonic()
        out = subprocess.run(
            ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config",
             "num-supernodes=10", "--run-config", run_config],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
        wall = time.monotonic() - t
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[round 12/12] test-acc" in out.stdout, out.stdout[-3000:]
    assert "Partitions: balanced Dirichlet split of digits" in out.stdout, out.stdout[-3000:]
    assert "over 10 clients" in out.stdout and "Set-up" not in out.stdout  # no size warning
    results = json.loads((home / "runs" / method / "results.json").read_text())
    assert results["config"]["method"] == method and results["config"]["num-server-rounds"] == 12
    assert json.loads((home / "runs" / method / "partitions.json").read_text())["clients"] == 10
    assert results["summary"]["final-test-acc"] > 0.5, results["summary"]
    print(f"\nflwr run, 12 rounds of {method}: {wall:.0f} s")  # shown with -s, never asserted


def test_console_is_one_line_per_round(fedacg_flwr_run):
    """The console of the session's FedACG run (tests/conftest.py: 12 rounds, the default
    method): one line per round, Flower's per-round lines and the warnings nobody can act on
    gone."""
    out, _, run_dir, _ = fedacg_flwr_run
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    rounds = re.findall(r"\[round \d+/12\] test-acc [^\n]*", text)
    assert len(rounds) == 13, text[-3000:]  # round 0 (the initial model) and 1..12
    for noise in ("[ROUND", "configure_train", "aggregate_train", "Aggregated MetricRecord",
                  "fraction_evaluate", "FutureWarning", "Starting LookaheadFedAvg"):
        assert noise not in text, noise
    done = re.findall(r"Done: [^\n]*", text)
    assert len(done) == 1 and not re.search(r"\d\.\d{5,}", done[0]), done
    results = json.loads((run_dir / "results.json").read_text())
    started = re.search(r"started run (\d+)", text)
    assert started and results["flower-run-id"] == int(started.group(1))
    status = subprocess.run([sys.executable, "-m", "reporting.status", str(run_dir)], cwd=ROOT,
                            capture_output=True, text=True)
    assert status.returncode == 0, status
