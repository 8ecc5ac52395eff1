"""Deployment runtime: one SuperLink and three SuperNodes on loopback (insecure); one SuperNode is
killed (SIGKILL, with its SuperExec and ClientApp processes) after round 1, and the run completes.

Every process is started in its own session and stopped by its process group, also on failure.
The scenario starts with the test session, in a thread of its own (tests/background.py): its
minute of processes starting and heartbeats missed passes beside the in-process tests.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from experiments.processes import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# `flower-supernode` whose own heartbeat to the SuperLink uses Flower's shortest interval
# (HEARTBEAT_MIN_INTERVAL, 10 s, instead of the default 30 s; the SuperNode CLI has no option for
# it): the SuperLink declares a node gone after 2 missed intervals (HEARTBEAT_PATIENCE), ~20 s
# after the kill instead of ~60 s. Only the interval the node announces and the one it sends at
# are changed: the SuperNode's patience with its ClientApp processes stays Flower's (their own
# heartbeats run at the default 30 s), or a ClientApp slow to start on a loaded machine (over
# 10 s) was declared "stopped responding" in round 1.
SUPERNODE = [sys.executable, "-c",
             "import sys, flwr.common.constant as c; "
             "from flwr.supernode.cli import flower_supernode; "
             "import flwr.supernode.fleet_http_connection as node, flwr.supercore.heartbeat as hb; "
             "node.HEARTBEAT_DEFAULT_INTERVAL = hb.HEARTBEAT_DEFAULT_INTERVAL = "
             "c.HEARTBEAT_MIN_INTERVAL; sys.argv[0] = 'flower-supernode'; flower_supernode()"]


def start(cmd, home: Path, log: Path, env: dict) -> subprocess.Popen:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(cmd, env={**env, "FLWR_HOME": str(home)}, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=home)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    try:
        os.killpg(proc.pid, sig)
        proc.wait(10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def rows_of(path: Path) -> list:
    try:
        return json.loads(path.read_text())["rounds"]
    except (OSError, ValueError, KeyError):
        return []


def supernode_killed_after_round_1(tmp_path: Path) -> str:
    """The whole test in `tmp_path` (started with the session: tests/background.py); returns
    its summary line."""
    if not shutil.which("flower-supernode"):
        pytest.skip("flwr is not installed")
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    link_port = free_port()
    procs = {}
    try:
        procs["superlink"] = start(
            ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link_port),
             "--disable-runtime-dependency-installation", "--database", ":flwr-in-memory:"],
            tmp_path / "home-link", tmp_path / "superlink.log", env)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{link_port}/health", timeout=1).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert procs["superlink"].poll() is None, (tmp_path / "superlink.log").read_text()
            assert time.monotonic() < deadline, "SuperLink did not start in 60 s"
            time.sleep(0.5)
        for i in range(3):
            procs[f"node{i}"] = start(
                [*SUPERNODE, "--insecure", "--superlink", f"127.0.0.1:{link_port}",
                 "--host", "127.0.0.1", "--port", str(free_port()),
                 "--node-config", f"partition-id={i} num-partitions=3"],
                tmp_path / f"home-node{i}", tmp_path / f"node{i}.log", env)
        user_home = tmp_path / "home-user"
        user_home.mkdir()
        (user_home / "config.toml").write_text(
            '[superlink]\ndefault = "deployment"\n\n'
            f'[superlink.deployment]\naddress = "127.0.0.1:{link_port}"\ninsecure = true\n')
        results = tmp_path / "runs" / "deploy" / "results.json"
        run_config = (f"num-server-rounds=3 fraction-train=1.0 min-train-nodes=2 local-epochs=1 "
                      f"round-timeout=150 node-wait-timeout=120 out-dir='{tmp_path}/runs' "
                      "run-name='deploy'")
        t = time.monotonic()
        procs["flwr-run"] = start(
            ["flwr", "run", str(ROOT), "deployment", "--stream", "--run-config", run_config],
            user_home, tmp_path / "run.log", env)
        killed_at = None
        while procs["flwr-run"].poll() is None:
            assert time.monotonic() - t < 480, (tmp_path / "run.log").read_text()[-4000:]
            if killed_at is None and len(rows_of(results)) >= 2:  # round 1 is done
                stop(procs["node2"], signal.SIGKILL)  # the node dies, no goodbye to the SuperLink
                killed_at = time.monotonic() - t
            time.sleep(0.5)
        log = (tmp_path / "run.log").read_text()
        assert procs["flwr-run"].returncode == 0, log[-4000:]
        assert killed_at is not None, log[-4000:]
        rows = rows_of(results)
        assert [r["round"] for r in rows] == [0, 1, 2, 3], log[-4000:]
        assert (rows[1]["train-replies"], rows[1]["train-errors"],
                rows[1]["train-timeouts"]) == (3, 0, 0)
        # round 2: the dead node's instruction fails (SuperLink: node unavailable) or times out
        assert rows[2]["train-replies"] == 2
        assert rows[2]["train-errors"] + rows[2]["train-timeouts"] == 1
        assert rows[2]["train-skipped"] == 0
        # round 3: only the two live nodes are sampled
        assert (rows[3]["train-replies"], rows[3]["train-errors"],
                rows[3]["train-timeouts"]) == (2, 0, 0)
        assert rows[3]["test-loss"] < rows[0]["test-loss"]
        return (f"deployment run: node killed at {killed_at:.0f} s, "
                f"run done at {time.monotonic() - t:.0f} s, "
                f"rounds {[round(r.get('seconds', 0), 1) for r in rows]} s")
    finally:
        for proc in procs.values():
            stop(proc)


@pytest.mark.long  # (1.5-2 min; test_bad_replies.py pins the rule in-process)
@pytest.mark.background(scenario=supernode_killed_after_round_1)
def test_run_completes_when_a_supernode_is_killed(background_result):
    print(background_result)  # (shown with -s)
