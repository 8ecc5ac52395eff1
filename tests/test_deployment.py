"""A secured deployment on loopback with the scripts of deploy/: the SuperLink (TLS, SuperNode
authentication) on a loopback port of its own, the fleet proxy (nginx) in front of it forwarding
only the Fleet API and health, two registered SuperNodes as real processes that connect through
the proxy, one unregistered node that is refused, and a 2-round FedACG run on digits through
`flwr run . <connection> --stream`. From the nodes' side (the proxy's address) node registration,
`flwr ls` and run submission are refused; from the operator's side (the SuperLink's loopback
port) they work.

Every process is started in its own session and stopped by its process group (the SuperLink's
and the SuperNodes' SuperExecs and app processes with it), also when the test fails. The TLS
run starts with the test session, in a thread of its own (tests/background.py): its minutes of
processes starting and refusals retried pass beside the in-process tests.
"""

import contextlib
import json
import os
import tempfile
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Popen in new sessions; `stop()` ends each process group, newest first."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, cmd: list[str], env: dict) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=self.folder)
        log.close()
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(15)
                    # the group may outlive its leader (SuperExec, app processes)
                    time.sleep(0.5)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
                break


def run(cmd, env, timeout=120, **kw):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kw)


def wait_until(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def node_ids(env, conn) -> dict[str, str]:
    """name -> status of the registered SuperNodes, from `flwr supernode list --format json`."""
    out = run(["flwr", "supernode", "list", conn, "--format", "json"], env)
    assert out.returncode == 0, out.stdout + out.stderr
    nodes = json.loads(out.stdout)["nodes"]
    return {str(n["node-id"]): n["status"] for n in nodes}


@contextlib.contextmanager
def deployed(tmp_path: Path):
    """The SuperLink, the fleet proxy and the connections, in `tmp_path`: `(procs, creds, port,
    user)`; every process stopped at the end, also on failure."""
    if not shutil.which("flower-superlink"):
        pytest.skip("flwr is not installed")
    creds = tmp_path / "creds"
    py = sys.executable
    out = run([py, str(DEPLOY / "credentials.py"), "tls", "--out", str(creds)], os.environ)
    assert out.returncode == 0, out.stderr
    out = run([py, str(DEPLOY / "credentials.py"), "node-key", "--out", str(creds),
               "supernode-0", "supernode-1", "intruder"], os.environ)
    assert out.returncode == 0, out.stderr
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        pytest.skip("the fleet proxy needs nginx (apt-get install nginx-light)")
    link_port, port = free_port(), free_port()  # SuperLink (operator) / fleet proxy (nodes)
    base = {**os.environ, "OMP_NUM_THREADS": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    procs = Processes(tmp_path)
    proxy_dir = tempfile.mkdtemp(prefix="fleet-proxy-")  # private (0700): left as it is
    try:
        procs.start("superlink", ["bash", str(DEPLOY / "superlink.sh"), "--credentials",
                                  str(creds), "--port", str(link_port)],
                    {**base, "FLWR_HOME": str(tmp_path / "link-home")})
        procs.start("fleet-proxy", ["bash", str(DEPLOY / "fleet-proxy.sh"), "--credentials",
                                    str(creds), "--listen", f"127.0.0.1:{port}",
                                    f"--superlink={link_port}", "--run-dir", proxy_dir], base)

        def healthy():
            for i, name in enumerate(("superlink", "fleet-proxy")):
                assert procs.procs[i][1].poll() is None, procs.log(name)
            try:
                return httpx.get(f"https://127.0.0.1:{port}/health", verify=str(creds / "ca.crt"),
                                 timeout=2).is_success
            except httpx.HTTPError:
                return False

        wait_until(healthy, 90, "the SuperLink behind the fleet proxy")
        with pytest.raises(httpx.HTTPError):  # TLS only: plain HTTP is not answered
            httpx.get(f"http://127.0.0.1:{link_port}/health", timeout=5)
        # nginx answers plain HTTP on its TLS port with an error page, never the health check
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 400
        user = {**base, "FLWR_HOME": str(tmp_path / "user-home")}
        for name, p in (("secure", link_port), ("nodes-side", port)):
            out = run(["sh", str(DEPLOY / "add-connection.sh"), name, f"127.0.0.1:{p}",
                       str(creds / "ca.crt")], user)
            assert out.returncode == 0, out.stderr
        yield procs, creds, port, user
    finally:
        procs.stop()
        shutil.rmtree(proxy_dir, ignore_errors=True)


@pytest.fixture
def deployment(tmp_path):
    with deployed(tmp_path) as running:
        yield running


def test_superlink_script_refuses_to_open_the_control_api(tmp_path):
    out = run(["bash", str(DEPLOY / "superlink.sh"), "--credentials", str(tmp_path), "--host",
               "0.0.0.0"], os.environ)
    assert out.returncode == 2 and "refusing --host 0.0.0.0" in out.stderr, out.stderr


def supernode(port: int, creds: Path, key: str, *options: str) -> list[str]:
    """deploy/supernode.sh to the fleet proxy on `port` with the key `key`, on a free port."""
    return ["bash", str(DEPLOY / "supernode.sh"), "--superlink", f"127.0.0.1:{port}", "--ca",
            str(creds / "ca.crt"), "--key", str(creds / key), "--runtime-port", str(free_port()),
            *options]


def refused_from_the_nodes_side(creds, port, user) -> list[subprocess.Popen]:
    """Start `flwr supernode register`, `flwr ls` and `flwr run` against the proxy's address."""
    cmds = {"register": ["flwr", "supernode", "register", str(creds / "intruder.pub"), "nodes-side",
                         "--name", "intruder"],
            "ls": ["flwr", "ls", "nodes-side"],
            "run": ["flwr", "run", ".", "nodes-side", "--run-config", "num-server-rounds=1"]}
    return {name: subprocess.Popen(cmd, env=user, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
            for name, cmd in cmds.items()}


def tls_deployment_runs_fedacg(tmp_path: Path) -> str:
    """The whole test in `tmp_path` (started with the session: tests/background.py); returns
    its summary line."""
    with deployed(tmp_path) as deployment:
        return tls_deployment_checks(deployment, tmp_path)


def tls_deployment_checks(deployment, tmp_path: Path) -> str:
    procs, creds, port, user = deployment
    conn = "secure"
    # the Control and Runtime APIs are not served on the nodes' port, however the path is spelled
    ca = str(creds / "ca.crt")
    for path in ("/v1/control/list-runs", "/v1/runtime/get-run", "/docs", "/openapi.json",
                 "/v1/fleet/../control/list-runs", "/v1/fleet/%2e%2e/control/list-runs",
                 "//v1/control/list-runs"):
        url = httpx.URL(f"https://127.0.0.1:{port}").copy_with(raw_path=path.encode())
        assert httpx.post(url, verify=ca, timeout=10).status_code == 403, path
    nodes_side = refused_from_the_nodes_side(creds, port, user)  # (each takes ~30 s of retries)
    out = run(["sh", str(DEPLOY / "register-supernodes.sh"), conn,
               str(creds / "supernode-0.pub"), str(creds / "supernode-1.pub")], user)
    assert out.returncode == 0, out.stdout + out.stderr
    registered = node_ids(user, conn)
    assert len(registered) == 2 and set(registered.values()) == {"registered"}, registered
    # re-running the registration is harmless
    again = run(["sh", str(DEPLOY / "register-supernodes.sh"), conn,
                 str(creds / "supernode-0.pub")], user)
    assert again.returncode == 0 and "already registered" in again.stdout, (
        again.stdout + again.stderr)

    cache = tmp_path / "partition-cache"
    node_env = {**user, "FEDACG_CACHE_DIR": str(cache)}
    intruder = procs.start("intruder", supernode(port, creds, "intruder", "--client-id", "0",
                                                 "--num-clients", "2"),
                           {**node_env, "FLWR_HOME": str(tmp_path / "intruder-home")})
    # node 0 names its cache folder (--cache-dir), node 1 takes it from the environment
    node_extra = [(["--cache-dir", str(cache)], {"FEDACG_CACHE_DIR": str(tmp_path / "unused")}),
                  ([], {})]
    for i in range(2):
        procs.start(f"supernode-{i}", supernode(port, creds, f"supernode-{i}", "--client-id",
                                                str(i), "--num-clients", "2", *node_extra[i][0]),
                    {**node_env, **node_extra[i][1], "FLWR_HOME": str(tmp_path / f"node{i}-home")})

    # the unregistered key is refused: the SuperNode exits with Flower's activation error
    intruder.wait(90)
    assert intruder.returncode != 0
    assert "Failed to activate SuperNode" in procs.log("intruder"), procs.log("intruder")
    wait_until(lambda: set(node_ids(user, conn).values()) == {"online"}, 60,
               "both SuperNodes online")
    assert set(node_ids(user, conn)) == set(registered)  # the intruder never became a node
    for name, proc in nodes_side.items():
        text = proc.communicate(timeout=300)[0]
        assert proc.returncode != 0 and "403" in text, (name, text[-2000:])
    assert set(node_ids(user, conn)) == set(registered)  # its registration did not get through
    out = run(["flwr", "ls", conn], user)
    assert out.returncode == 0 and "Run ID" in out.stdout, out.stdout + out.stderr

    runs = tmp_path / "runs"
    t0 = time.monotonic()
    out = run(["flwr", "run", ".", conn, "--stream", "--run-config",
               f"method='fedacg' num-server-rounds=2 fraction-train=1.0 min-train-nodes=2 "
               f"out-dir='{runs}' run-name='deployed'"], user, timeout=420, cwd=ROOT)
    wall = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "[round 2/2] test-acc" in out.stdout, out.stdout[-4000:]
    results = json.loads((runs / "deployed" / "results.json").read_text())
    rows = results["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert rows[0]["test-acc"] < 0.3  # chance is 0.1
    assert results["summary"]["final-test-acc"] > 0.5, results["summary"]
    assert all(r["train-replies"] == 2 for r in rows[1:]), rows
    # each node prepared its partition once and kept it on disk for the next rounds
    cached = sorted(p.name.split("-")[1] for p in cache.glob("*.pt"))
    assert cached == ["p0of2", "p1of2"], cached
    assert not (tmp_path / "unused").exists()
    return (f"deployment on loopback: wall {wall:.1f} s, round seconds "
            f"{[round(r['seconds'], 2) for r in rows[1:]]}")


@pytest.mark.long  # (2-2.5 min; the default run checks the scripts alone: test_deploy_scripts.py)
@pytest.mark.background(scenario=tls_deployment_runs_fedacg)
def test_tls_authenticated_deployment_runs_fedacg(background_result):
    print(f"\n{background_result}")  # (shown with -s)


@pytest.mark.long
def test_own_data_deployment_fedacg_and_scaffold_learn(deployment, tmp_path):
    """Four registered SuperNodes on loopback (TLS, node authentication, the fleet proxy), each
    with only its own folder (node config data-path): three disjoint label-skewed folders of
    digits as PNG images (an image folder, a save_to_disk folder, the hub's parquet layout;
    dataset 'custom') and one empty folder; the server reads its own test folder (test-data).
    FedACG and SCAFFOLD (per-client state keyed by the node's client id) learn from the three;
    the fourth node's reply is an error naming its folder in every round, and both runs
    complete."""
    from feddata.__main__ import DEMO_CUSTOM, demo_image_folders

    procs, creds, port, user = deployment
    conn, py = "secure", sys.executable
    names = [f"own-{i}" for i in range(4)]
    out = run([py, str(DEPLOY / "credentials.py"), "node-key", "--out", str(creds), *names],
              os.environ)
    assert out.returncode == 0, out.stderr
    out = run(["sh", str(DEPLOY / "register-supernodes.sh"), conn,
               *[str(creds / f"{n}.pub") for n in names]], user)
    assert out.returncode == 0, out.stdout + out.stderr
    folders = demo_image_folders(str(tmp_path / "data"), 3)  # image folder, save_to_disk, parquet
    assert (folders[0] / "0").is_dir() and (folders[2] / "data").is_dir()
    empty = tmp_path / "data" / "empty"
    empty.mkdir()
    custom = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                      for k, v in DEMO_CUSTOM.items())
    for i, folder in enumerate([*folders, empty]):
        procs.start(names[i], supernode(port, creds, names[i], "--data-path", str(folder),
                                        "--client-id", str(i), "--num-clients", "4"),
                    {**user, "FEDACG_CACHE_DIR": str(tmp_path / "cache"),
                     "FLWR_HOME": str(tmp_path / f"{names[i]}-home")})
    wait_until(lambda: list(node_ids(user, conn).values()).count("online") >= 4, 90,
               "the four own-data SuperNodes online")
    runs = tmp_path / "runs"
    for method in ("fedacg", "scaffold"):
        out = run(["flwr", "run", ".", conn, "--stream", "--run-config",
                   f"method='{method}' num-server-rounds=4 fraction-train=1.0 min-train-nodes=3 "
                   f"local-iterations=10 model='mlp' out-dir='{runs}' run-name='{method}' "
                   f"{custom} test-data='{tmp_path / 'data' / 'server-test'}'"],
                  user, timeout=600, cwd=ROOT)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
        results = json.loads((runs / method / "results.json").read_text())
        rows = results["rounds"]
        assert results["status"] == "complete", results.get("error")
        assert all(r["train-replies"] == 3 and r["train-errors"] == 1 for r in rows[1:]), rows
        assert results["summary"]["final-test-acc"] > 0.5, (method, results["summary"])
        assert f"data-path '{empty}' is empty" in out.stdout + out.stderr, out.stdout[-4000:]
