"""End to end with the real Flower runtime: `flwr run` against a SuperLink of the test's own.

The SuperLink runs on its own ports with its own FLWR_HOME (so a SuperLink a user left on the
default port is neither used nor disturbed) and is stopped by its process group, also on failure.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def superlink(tmp_path_factory):
    if not shutil.which("flower-superlink"):
        pytest.skip("flwr is not installed")
    home = tmp_path_factory.mktemp("flwr-home")
    port, control = free_port(), free_port()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n\n'
        f'[superlink.test]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    log = open(home / "superlink.log", "w")
    proc = subprocess.Popen(
        ["flower-superlink", "--insecure", "--simulation", "--host", "127.0.0.1", "--port", str(port),
         "--control-api-address", f"127.0.0.1:{control}"],  # no --database: state in memory
        env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (home / "superlink.log").read_text()
            assert time.monotonic() < deadline, "SuperLink did not start in 60 s"
            time.sleep(0.5)
        yield env, home
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the SuperLink and the SuperExec it started
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.parametrize("method", ["fedacg", "gcfed"])
def test_flwr_run_reaches_accuracy(superlink, method):
    env, home = superlink
    if method == "fedacg":
        run_config = f"method='{method}' num-server-rounds=12 out-dir='{home}/runs' run-name='{method}'"
    else:  # the same run described by a paper-style set-up file: one command
        setup = home / "small-setup.yaml"
        setup.write_text("paper: test\nmethod: gcfed\nfederation: {num-supernodes: 10}\n"
                         "run-config: {num-server-rounds: 12}\n"
                         "reported: {columns: [acc], rows: {gcfed: [90.0]}}\n")
        run_config = f"setup='{setup}' out-dir='{home}/runs' run-name='{method}'"
    t = time.monotonic()
    out = subprocess.run(
        ["flwr", "run", ".", "test", "--stream", "--federation-config", "num-supernodes=10",
         "--run-config", run_config],
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
    assert wall < 180, wall
