"""The example app (examples/quickstart-fedacg-gcfed): Flower's quickstart-pytorch shape with
FedACG + GC-Fed from this project, offline. Its README's diff must be the way from FedAvg (at most
15 lines); `flwr run` of the app on a SuperLink of the test's own must learn."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.superlink import CONNECTION, LocalSuperLink

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart-fedacg-gcfed"


def readme_diff() -> str:
    text = (EXAMPLE / "README.md").read_text()
    return re.search(r"```diff\n(.*?)```", text, re.S).group(1)


def fedavg_copy(dest: Path) -> Path:
    """The example as its README says it was with FedAvg (the diff applied in reverse)."""
    shutil.copytree(EXAMPLE, dest / "examples" / EXAMPLE.name,
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(["git", "apply", "-R", "-"], input=readme_diff(), cwd=dest, text=True,
                         capture_output=True)
    assert out.returncode == 0, out.stderr
    return dest / "examples" / EXAMPLE.name


def test_readme_diff_is_the_way_from_fedavg_in_at_most_15_lines(tmp_path):
    diff = readme_diff()
    added = [line for line in diff.splitlines() if re.match(r"\+(?!\+\+ )", line)]
    removed = [line for line in diff.splitlines() if re.match(r"-(?!-- )", line)]
    assert len(added) + len(removed) <= 15, (added, removed)
    app = fedavg_copy(tmp_path)
    server = (app / "pytorchexample" / "server_app.py").read_text()
    assert "strategy = FedAvg(" in server and "strategies" not in server
    for name in ("server_app", "client_app", "task"):
        source = (app / "pytorchexample" / f"{name}.py").read_text()
        assert "LocalMethod" not in source and "method." not in source, name
        compile(source, name, "exec")
    assert "from strategies import FedACGGCFed" in (EXAMPLE / "pytorchexample" /
                                                   "server_app.py").read_text()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The example's local copy of the data, in the hub's format (its own script)."""
    out = tmp_path_factory.mktemp("digits")
    subprocess.run([sys.executable, "prepare_data.py", "--out", str(out)], cwd=EXAMPLE,
                   check=True, capture_output=True)
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "test-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
    return out


def final_accuracy(log: str) -> float:
    found = re.findall(r"Final test accuracy: ([0-9.]+)", log)
    assert found, log[-3000:]
    return float(found[-1])


@pytest.mark.slow
def test_flwr_run_of_the_example_learns_offline(digits, tmp_path):
    """`flwr run examples/quickstart-fedacg-gcfed` against a SuperLink of the test's own (free
    ports, its own FLWR_HOME, stopped at the end), the library from this tree."""
    if not shutil.which("flower-superlink"):
        pytest.skip("flwr is not installed")
    link = LocalSuperLink(home=tmp_path / "flwr-home")
    link.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          link.env.get("PYTHONPATH")]))
    with link:
        out = subprocess.run(
            ["flwr", "run", str(EXAMPLE), CONNECTION, "--stream",
             "--federation-config", "num-supernodes=10",
             "--run-config", f"dataset-path='{digits}' num-server-rounds=5 "
             f"model-dir='{tmp_path / 'models'}'"],
            cwd=tmp_path, env=link.env, capture_output=True, text=True, timeout=420)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "FedACGGCFed: method 'fedacg+gcfed'" in log, log[-3000:]
    assert "[ROUND 5/5]" in log and " 0 errors" in log, log[-3000:]
    assert final_accuracy(log) > 0.5  # 10 classes: chance is 0.1
    assert (tmp_path / "models" / "final_model.pt").is_file()  # the run config's model-dir


@pytest.mark.slow
@pytest.mark.long  # (in CI's -m "each_method or long"; the default run checks the diff applies)
def test_the_fedavg_version_of_the_readme_runs(digits, tmp_path):
    """The FedAvg app the README's diff starts from is a working app (in this process's
    in-memory grid, 3 rounds): the diff is the whole way."""
    app = fedavg_copy(tmp_path)
    code = f"""
import sys
sys.path[:0] = [{str(app)!r}, {str(ROOT)!r}]
from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from inprocess import InProcessGrid
from pytorchexample import client_app, server_app
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
run_config = {{"num-server-rounds": 3, "fraction-train": 0.5, "fraction-evaluate": 0.0,
               "local-epochs": 2, "lr": 0.1, "batch-size": 32, "dataset-path": {str(digits)!r},
               "model-dir": {str(tmp_path / "models")!r}}}
nodes = [Context(run_id=1, node_id=i, node_config={{"partition-id": i, "num-partitions": 10}},
                 state=RecordDict(), run_config=run_config) for i in range(10)]
grid = InProcessGrid(10, lambda i, msg: client_app.train(msg, nodes[i]), fixed_size=True)
server_app.main(grid, Context(run_id=1, node_id=0, node_config={{}}, state=RecordDict(),
                              run_config=run_config))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "Starting FedAvg strategy" in log, log[-3000:]
    assert final_accuracy(log) > 0.2
    assert (tmp_path / "models" / "final_model.pt").is_file()


@pytest.mark.slow
def test_the_examples_client_runs_unchanged_under_flowers_strategies_and_ours(digits, tmp_path):
    """The example's ClientApp, as it is, under Flower's FedAvg, FedProx and FedAvgM and this
    project's FedACGGCFed (in-process grid, 4 rounds each): every round aggregates all sampled
    replies and each strategy learns (docs/own-app.md#flowers-own-strategies)."""
    code = f"""
import sys
sys.path[:0] = [{str(EXAMPLE)!r}, {str(ROOT)!r}]
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.serverapp.strategy import FedAvg, FedAvgM, FedProx
from flwr.supercore.task_identity import TaskIdentity
from inprocess import InProcessGrid
from pytorchexample import client_app
from pytorchexample.server_app import global_evaluate
from pytorchexample.task import Net
from strategies import FedACGGCFed
import torch
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
run_config = {{"local-epochs": 2, "batch-size": 32, "dataset-path": {str(digits)!r}}}
nodes = [Context(run_id=1, node_id=i, node_config={{"partition-id": i, "num-partitions": 10}},
                 state=RecordDict(), run_config=run_config) for i in range(10)]
kw = dict(fraction_train=0.5, fraction_evaluate=0.0, min_available_nodes=10)
for strategy in (FedAvg(**kw), FedProx(proximal_mu=0.01, **kw), FedAvgM(server_momentum=0.5, **kw),
                 FedACGGCFed(**kw)):
    torch.manual_seed(0)
    grid = InProcessGrid(10, lambda i, msg: client_app.train(msg, nodes[i]), fixed_size=True)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()),
                            num_rounds=4, train_config=ConfigRecord({{"lr": 0.1}}))
    acc = global_evaluate(4, result.arrays, {str(digits)!r})["accuracy"]
    print("RESULT", type(strategy).__name__, sorted(result.train_metrics_clientapp), acc)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    results = re.findall(r"RESULT (\w+) \[1, 2, 3, 4\] ([0-9.]+)", log)
    assert [name for name, _ in results] == ["FedAvg", "FedProx", "FedAvgM", "FedACGGCFed"], log
    assert all(float(acc) > 0.2 for _, acc in results), results  # 10 classes: chance is 0.1
    assert "training plainly, as FedAvg's client" in log and "'proximal-mu' = 0.01" in log
