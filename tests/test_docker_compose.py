"""The docker compose demo, run for real: build the images, `up`, a 2-round run, `down`.

Not in the default test run (marker `docker`; `.ci/run` runs it with
`python -m pytest -q -s -m docker tests/test_docker_compose.py`). Flower's official images
cannot be pulled here, so the images are built FROM a stand-in base (tests/compose_harness.py);
the fleet proxy's image installs Debian's nginx-light from the machine's Debian mirror.
The demo's own files are used (compose.yml + compose.override.yml): the services on the
compose networks, the SuperLink and the fleet proxy published on the host's 127.0.0.1 only, on
free ports. Checked: from the nodes' side (inside a SuperNode container, and through the fleet
proxy's published port) the SuperLink itself cannot be reached and node registration, `flwr ls`
and run submission are refused (403); from the operator's side they work and a run trains.
Each node trains on its own folder (disjoint label-skewed digits), which only its ClientApp's
container sees, read-only.
It skips, printing why, only where no engine can be started.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from compose_harness import DEBIAN_IMAGE, Engine, EngineUnavailable, base_image

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


def node_list(env, conn) -> list[dict]:
    out = run(["flwr", "supernode", "list", conn, "--format", "json"], env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["nodes"]


def refused_from_the_nodes_side(creds, env) -> dict[str, subprocess.Popen]:
    """Start `flwr supernode register`, `flwr ls` and `flwr run` against the fleet proxy."""
    cmds = {"register": ["flwr", "supernode", "register", str(creds / "intruder.pub"),
                         "nodes-side", "--name", "intruder"],
            "ls": ["flwr", "ls", "nodes-side"],
            "run": ["flwr", "run", ".", "nodes-side", "--run-config", "num-server-rounds=1"]}
    return {name: subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
            for name, cmd in cmds.items()}


# run inside a SuperNode container: python -c IN_NODE SUPERLINK_IP SUPERLINK_PORT FLEET_PORT
IN_NODE = """
import socket, ssl, sys, urllib.error, urllib.request
ip, link_port, fleet_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    socket.getaddrinfo("superlink", link_port)
    print("superlink-named")
except socket.gaierror:
    print("superlink-unnamed")
try:
    socket.create_connection((ip, link_port), timeout=5).close()
    print("superlink-reachable")
except OSError:
    print("superlink-unreachable")
ctx = ssl.create_default_context(cafile="/credentials/ca.crt")
for name, path in (("health", "/health"), ("control", "/v1/control/list-runs")):
    req = urllib.request.Request(f"https://fleet-proxy:{fleet_port}{path}",
                                 data=None if name == "health" else b"{}")
    try:
        code = urllib.request.urlopen(req, context=ctx, timeout=10).status
    except urllib.error.HTTPError as e:
        code = e.code
    print(f"{name}-{code}")
"""


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
        node_data = tmp_path / "node-data"  # each node's own folder (docs/deployment.md)
        out = run([sys.executable, "-m", "feddata", "demo-folders", str(node_data), "--nodes",
                   str(NODES)], os.environ, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        env = {
            **os.environ,
            "CREDENTIALS_DIR": str(creds),
            "NODE_DATA_DIR": str(node_data),
            "FEDACG_IMAGE_TAG": f"test-{key}",
            "SUPERLINK_BASE_IMAGE": base, "SUPERNODE_BASE_IMAGE": base,
            "SUPEREXEC_BASE_IMAGE": base,
            "FLEET_PROXY_BASE_IMAGE": DEBIAN_IMAGE,
            "SUPERLINK_PORT": str(free_port()),
            "FLEET_PORT": str(free_port()),
            **{f"SUPERNODE_{i}_PORT": str(free_port()) for i in range(NODES)},
            "FLWR_HOME": str(tmp_path / "flwr-home"),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        }
        out = run(["bash", str(DOCKER / "make-credentials.sh"), str(NODES)], env)
        assert out.returncode == 0, out.stdout + out.stderr
        out = run([sys.executable, str(ROOT / "deploy" / "credentials.py"), "node-key", "--out",
                   str(creds), "intruder"], env)  # a key no node was given
        assert out.returncode == 0, out.stderr
        compose = [*engine.compose, "-p", f"fedacg-gc-test-{os.getpid()}",
                   "-f", str(DOCKER / "compose.yml"),
                   "-f", str(DOCKER / "compose.override.yml")]

        t = time.monotonic()
        out = run([*compose, "build"], env, timeout=1800, cwd=DOCKER)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        phases["compose build"] = time.monotonic() - t

        t = time.monotonic()
        out = run([*compose, "up", "-d"], env, timeout=600, cwd=DOCKER)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        for name, port in (("compose-test", env["SUPERLINK_PORT"]),
                           ("nodes-side", env["FLEET_PORT"])):
            out = run(["sh", str(ROOT / "deploy" / "add-connection.sh"), name,
                       f"127.0.0.1:{port}", str(creds / "ca.crt")], env)
            assert out.returncode == 0, out.stderr
        nodes_side = refused_from_the_nodes_side(creds, env)  # (each takes ~30 s of retries)
        deadline = time.monotonic() + 240
        while online_nodes(env, "compose-test") < NODES:
            assert time.monotonic() < deadline, (
                "SuperNodes not online after 240 s:\n" + logs(compose, env))
            time.sleep(2)
        phases["compose up"] = time.monotonic() - t

        t = time.monotonic()
        # through the fleet proxy's published port: health yes, Control and Runtime API no
        proxy, ca = f"https://127.0.0.1:{env['FLEET_PORT']}", str(creds / "ca.crt")
        assert httpx.get(f"{proxy}/health", verify=ca, timeout=10).status_code == 200
        for path in ("/v1/control/list-runs", "/v1/runtime/get-run", "/docs",
                     "/v1/fleet/../control/list-runs"):
            url = httpx.URL(proxy).copy_with(raw_path=path.encode())
            assert httpx.post(url, verify=ca, timeout=10).status_code == 403, path
        # inside a SuperNode's container: the SuperLink is neither named nor reachable, the
        # fleet proxy answers health and refuses the Control API
        link_ip = run(["docker", "inspect", "-f",
                       "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                       run([*compose, "ps", "-q", "superlink"], env, cwd=DOCKER).stdout.strip()],
                      env).stdout.split()
        assert link_ip, "no address of the SuperLink container"
        out = run([*compose, "exec", "-T", "supernode-0", "python", "-c", IN_NODE, link_ip[0],
                   env["SUPERLINK_PORT"], env["FLEET_PORT"]], env, timeout=120, cwd=DOCKER)
        assert out.returncode == 0 and out.stdout.split() == [
            "superlink-unnamed", "superlink-unreachable", "health-200", "control-403"], (
            out.stdout + out.stderr)
        # each ClientApp container sees its own node's folder, read-only, and no other node's
        for i in range(NODES):
            out = run([*compose, "exec", "-T", f"clientapp-{i}", "python", "-c", IN_CLIENTAPP],
                      env, timeout=120, cwd=DOCKER)
            assert out.returncode == 0, out.stdout + out.stderr
            assert json.loads(out.stdout) == {
                "files": sorted(os.listdir(node_data / f"node-{i}")), "writable": False}, out.stdout
            container = run([*compose, "ps", "-q", f"clientapp-{i}"], env, cwd=DOCKER)
            mounts = run(["docker", "inspect", "-f", "{{json .Mounts}}",
                          container.stdout.strip()], env).stdout
            sources = [m["Source"] for m in json.loads(mounts) if m["Destination"] == "/data"]
            assert sources == [str(node_data / f"node-{i}")], mounts
            assert all(str(node_data / f"node-{j}") not in mounts for j in range(NODES) if j != i)
        for name, proc in nodes_side.items():
            text = proc.communicate(timeout=300)[0]
            assert proc.returncode != 0 and "403" in text, (name, text[-2000:])
        nodes = node_list(env, "compose-test")
        assert len(nodes) == NODES, nodes  # the refused registration did not get through
        # the operator's side: registration and `flwr ls` work
        out = run(["flwr", "supernode", "register", str(creds / "intruder.pub"), "compose-test",
                   "--name", "operator-added"], env, timeout=120)
        assert out.returncode == 0 and "registered" in out.stdout.lower(), out.stdout + out.stderr
        assert len(node_list(env, "compose-test")) == NODES + 1
        out = run(["flwr", "ls", "compose-test"], env, timeout=120)
        assert out.returncode == 0 and "Run ID" in out.stdout, out.stdout + out.stderr
        phases["control plane checks"] = time.monotonic() - t

        t = time.monotonic()
        out = run(["flwr", "run", ".", "compose-test", "--stream", "--run-config",
                   "num-server-rounds=2 fraction-train=1.0 run-name='compose-test' "
                   "client-data='own'"], env,
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


IN_CLIENTAPP = """
import json, os
try:
    open("/data/written-by-the-node", "w").close()
    writable = True
except OSError:
    writable = False
print(json.dumps({"files": sorted(os.listdir("/data")), "writable": writable}))
"""


def logs(compose, env) -> str:
    out = run([*compose, "logs", "--no-color", "--tail", "60"], env, cwd=DOCKER)
    return "\n--- compose logs ---\n" + out.stdout[-8000:]
