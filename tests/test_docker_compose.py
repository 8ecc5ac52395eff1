"""The docker compose demo, run for real: build the images, `up`, a 2-round run, `down`.

Not in the default test run (marker `docker`; `.ci/run` runs it with
`python -m pytest -q -s -m docker tests/test_docker_compose.py`). Flower's official images
cannot be pulled here, so the images are built FROM a stand-in base (tests/compose_harness.py).
All services use the host's network (docker/test/compose.host-network.yml) on free loopback ports,
so no traffic leaves 127.0.0.1. It skips, printing why, only where no engine can be started.
"""

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from compose_harness import Engine, EngineUnavailable, base_image

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
pytestmark = pytest.mark.docker
NODES = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env, timeout=600, cwd=None):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def online_nodes(env, conn) -> int:
    out = run(["flwr", "supernode", "list", conn, "--format", "json"], env, timeout=60)
    if out.returncode != 0:
        return 0
    return sum(n["status"] == "online" for n in json.loads(out.stdout)["nodes"])


def test_compose_demo_runs_two_rounds(tmp_path):
    t_start = time.monotonic()
    phases = {}
    engine = Engine(tmp_path)
    try:
        engine.start()
    except EngineUnavailable as why:
        print(f"\nSKIP docker compose test: {why}")
        pytest.skip(f"no Docker engine: {why}")
    compose = None
    env = None
    try:
        phases["engine"] = time.monotonic() - t_start
        t = time.monotonic()
        base, key = base_image(tmp_path / "base-image.log")
        phases["base image"] = time.monotonic() - t

        creds = tmp_path / "credentials"
        env = {
            **os.environ,
            "CREDENTIALS_DIR": str(creds),
            "FEDACG_IMAGE_TAG": f"test-{key}",
            "SUPERLINK_BASE_IMAGE": base, "SUPERNODE_BASE_IMAGE": base,
            "SUPEREXEC_BASE_IMAGE": base,
            "BIND_HOST": "127.0.0.1",
            "SUPERLINK_PORT": str(free_port()),
            **{f"SUPERNODE_{i}_PORT": str(free_port()) for i in range(NODES)},
            "FLWR_HOME": str(tmp_path / "flwr-home"),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        }
        out = run(["bash", str(DOCKER / "make-credentials.sh"), str(NODES)], env)
        assert out.returncode == 0, out.stdout + out.stderr
        compose = [*engine.compose, "-p", f"fedacg-gc-test-{os.getpid()}",
                   "-f", str(DOCKER / "compose.yml"),
                   "-f", str(DOCKER / "test" / "compose.host-network.yml")]

        t = time.monotonic()
        out = run([*compose, "build"], env, timeout=1800, cwd=DOCKER)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        phases["compose build"] = time.monotonic() - t

        t = time.monotonic()
        out = run([*compose, "up", "-d"], env, timeout=600, cwd=DOCKER)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        port = env["SUPERLINK_PORT"]
        out = run(["sh", str(ROOT / "deploy" / "add-connection.sh"), "compose-test",
                   f"127.0.0.1:{port}",
                   str(creds / "ca.crt")], env)
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 240
        while online_nodes(env, "compose-test") < NODES:
            assert time.monotonic() < deadline, (
                "SuperNodes not online after 240 s:\n" + logs(compose, env))
            time.sleep(2)
        phases["compose up"] = time.monotonic() - t

        t = time.monotonic()
        out = run(["flwr", "run", ".", "compose-test", "--stream", "--run-config",
                   "num-server-rounds=2 fraction-train=1.0 run-name='compose-test'"], env,
                  timeout=900, cwd=ROOT)
        phases["flwr run (2 rounds)"] = time.monotonic() - t
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:] + logs(compose, env)
        assert "[round 2/2] test-acc" in out.stdout, out.stdout[-4000:] + logs(compose, env)

        # the ServerApp wrote its outputs into the `runs` volume of the serverapp executor
        out = run([*compose, "exec", "-T", "serverapp", "cat",
                   "/app/fedacg-gc-runs/compose-test/results.json"],
                  env, cwd=DOCKER)
        assert out.returncode == 0, out.stdout + out.stderr
        results = json.loads(out.stdout)
        rows = results["rounds"]
        assert [r["round"] for r in rows] == [0, 1, 2]
        assert all(r["train-replies"] == NODES for r in rows[1:]), rows
        assert results["summary"]["final-test-acc"] > 0.5, results["summary"]
        print(f"\ncompose demo: round seconds {[round(r['seconds'], 1) for r in rows[1:]]}, "
              f"final test-acc {results['summary']['final-test-acc']:.4f}")
    finally:
        if compose is not None:
            t = time.monotonic()
            down = run([*compose, "down", "-v", "--remove-orphans", "--timeout", "10"], env,
                       cwd=DOCKER)
            phases["compose down"] = time.monotonic() - t
            left = run(["docker", "ps", "-aq", "--filter",
                        f"label=com.docker.compose.project=fedacg-gc-test-{os.getpid()}"],
                       env).stdout.split()
        engine.stop()
        phases["total"] = time.monotonic() - t_start
        print("\ncompose test wall times: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
    assert down.returncode == 0, down.stdout + down.stderr
    assert left == [], f"containers left after down: {left}"


def logs(compose, env) -> str:
    out = run([*compose, "logs", "--no-color", "--tail", "60"], env, cwd=DOCKER)
    return "\n--- compose logs ---\n" + out.stdout[-8000:]
