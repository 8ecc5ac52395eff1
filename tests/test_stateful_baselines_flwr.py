"""SCAFFOLD, FedDyn and FedDC through `flwr run` (a Ray simulation against a SuperLink of the
test's own): each runs end to end on digits, and a resumed FedDyn run, its client state kept on
the virtual nodes' disk, ends bitwise equal to an uninterrupted one."""

import subprocess
from pathlib import Path

import pytest
import torch

from experiments.superlink import CONNECTION

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
SMALL = "model='mlp' local-iterations=2 fraction-train=0.5 min-train-nodes=2 seed=1"


def flwr_run(env, run_config: str) -> str:
    out = subprocess.run(
        ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config", "num-supernodes=4",
         "--run-config", f"{SMALL} {run_config}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    return text


@pytest.mark.each_method
@pytest.mark.parametrize("method", ["scaffold", "feddyn-gcfed", "feddc"])  # feddyn: the resume test
def test_each_method_runs_through_flwr_run(superlink, method):
    env, home = superlink
    text = flwr_run(env, f"method='{method}' num-server-rounds=2 out-dir='{home}/runs' "
                         f"run-name='{method}'")
    assert "[round 2/2] test-acc" in text, text[-3000:]
    assert (Path(home) / "runs" / method / "final_model.pt").is_file()


@pytest.mark.long  # the same rule in-process: tests/test_stateful_baselines.py (default run)
def test_a_resumed_run_is_the_uninterrupted_one(superlink):
    env, home = superlink
    runs = f"{home}/runs"
    flwr_run(env, f"method='feddyn' num-server-rounds=4 out-dir='{runs}' run-name='whole'")
    flwr_run(env, f"method='feddyn' num-server-rounds=2 out-dir='{runs}' run-name='split'")
    text = flwr_run(env, f"method='feddyn' num-server-rounds=4 out-dir='{runs}' "
                         "run-name='split' resume='latest'")
    assert "[round 4/4] test-acc" in text, text[-3000:]
    a = torch.load(Path(runs) / "whole" / "final_model.pt", weights_only=True)
    b = torch.load(Path(runs) / "split" / "final_model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
