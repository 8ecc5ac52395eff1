"""The simulation on a Ray cluster of two nodes (docs/performance.md, "On a Ray cluster").

On loopback: `ray start --head` and `ray start --address=...` as two processes, one CPU each
(so one ClientApp actor each), in a Ray temp folder of the test's own (`RAY_TMPDIR`: other Ray
users on this machine never see this cluster, and it never sees theirs). A SuperLink of the
test's own with `RAY_ADDRESS` set runs 3 rounds through `flwr run`; the ClientApp (the real one,
wrapped by tests/where_client_app.py) writes where each call ran. The ClientApps must have run on
both nodes; every process the test started is stopped, also when it fails.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import fedacg_gc
from experiments.processes import free_port, stop_process_tree
from experiments.superlink import CONNECTION, LocalSuperLink

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.long]


def app_copy(dest: Path) -> Path:
    """The app with `where_client_app:app` as its ClientApp."""
    for pkg in fedacg_gc.PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "fedacg_gc.py", dest)
    shutil.copy(ROOT / "README.md", dest)
    shutil.copy(ROOT / "tests" / "where_client_app.py", dest)
    pyproject, n = re.subn(r'clientapp = "client_app.app:app"',
                           'clientapp = "where_client_app:app"',
                           (ROOT / "pyproject.toml").read_text())
    assert n == 1
    pyproject, n = re.subn(r'fab-include = \[',  # (the FAB holds only the listed files)
                           'fab-include = ["/where_client_app.py", ', pyproject)
    assert n == 1
    (dest / "pyproject.toml").write_text(pyproject)
    return dest


class RayNode:
    """One `ray start --block` process (and the Ray processes under it), in a session of its
    own."""

    def __init__(self, args: list[str], env: dict, log: Path):
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(["ray", "start", "--block", *args], env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def wait_started(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process_tree(self.proc.pid, child=self.proc)
        self.proc.wait()


def ports(*names: str) -> list[str]:
    return [f"--{name}={free_port()}" for name in names]


def leftovers(marker: str) -> list[int]:
    """Processes whose command line names the test's Ray folder (ours, still running)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                out.append(int(entry))
    return out


def test_simulation_runs_on_a_two_node_ray_cluster(tmp_path):
    # short: Ray puts Unix sockets under it (at most 107 characters a path)
    ray_tmp = Path(tempfile.mkdtemp(prefix="fedacg-ray-", dir="/tmp"))
    where = tmp_path / "where.jsonl"
    port = free_port()
    base = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "FEDACG_TEST_WHERE": str(where),
            "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0",
              "--object-store-memory=100000000", "--disable-usage-stats"]
    per_node = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
                "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")
    nodes: list[RayNode] = []
    link = None
    try:
        head = RayNode(["--head", f"--port={port}", "--include-dashboard=false",
                        f"--temp-dir={ray_tmp}", *ports("ray-client-server-port", *per_node),
                        *common], {**base, "FEDACG_TEST_NODE": "head"}, tmp_path / "head.log")
        nodes.append(head)
        head.wait_started()
        worker = RayNode([f"--address=127.0.0.1:{port}", *ports(*per_node), *common],
                         {**base, "FEDACG_TEST_NODE": "worker"}, tmp_path / "worker.log")
        nodes.append(worker)
        worker.wait_started()

        link = LocalSuperLink(home=tmp_path / "home")
        link.env.update({"RAY_ADDRESS": f"127.0.0.1:{port}", "RAY_TMPDIR": str(ray_tmp)})
        link.start()
        app = app_copy(tmp_path / "app")
        run_config = (f"num-server-rounds=3 fraction-train=1.0 min-train-nodes=4 local-epochs=1 "
                      f"out-dir='{tmp_path}/runs' run-name='cluster'")
        out = subprocess.run(
            ["flwr", "run", str(app), CONNECTION, "--stream", "--federation-config",
             "num-supernodes=4 client-resources-num-cpus=1", "--run-config", run_config],
            env=link.env, capture_output=True, text=True, timeout=480, check=False)
        log = out.stdout + out.stderr
        assert out.returncode == 0, log[-4000:]
        assert "[round 3/3] test-acc" in out.stdout, log[-4000:]
        rows = json.loads((tmp_path / "runs" / "cluster" / "results.json").read_text())["rounds"]
        assert [r["round"] for r in rows] == [0, 1, 2, 3]
        assert all(r["train-replies"] == 4 for r in rows[1:])

        calls = [json.loads(line) for line in where.read_text().splitlines()]
        assert sum(c["type"] == "train" for c in calls) == 12  # 4 clients x 3 rounds
        assert {c["tag"] for c in calls} == {"head", "worker"}, calls
        assert len({c["ray-node"] for c in calls}) == 2
        # simulated nodes: one QUERY in all, and every round trains partitions 0..3
        assert "Simulated nodes: partition p is trained by the p-th node by id" in log, log[-4000:]
        trained = sorted(c["trained"] for c in calls if c["type"] == "train")
        assert trained == sorted(list(range(4)) * 3)
        print("calls per node:", {t: sum(c["tag"] == t for c in calls) for t in ("head", "worker")})
    finally:
        if link is not None:
            link.stop()
        for node in reversed(nodes):
            node.stop()
        left = leftovers(str(ray_tmp))
        for pid in left:  # a Ray process that left our process groups: still ours (our folder)
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not left, f"Ray processes outlived their node's process group: {left}"
