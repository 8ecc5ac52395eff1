"""The documentation's own commands, run as written, so that the docs cannot drift from the
scripts: docs/deployment.md's two-machine example (own data) and teardown on one machine (which
must remove what the steps made, and keep the results), and
the README's Run section; both with another user's SuperLink on the port a plain `flwr run .`
would use (tests/other_user.py), which they must neither reach nor stop.

What one machine and a test change, and nothing else: 192.168.1.10 is 127.0.0.1 and the proxy
listens there, not on 0.0.0.0; the ports 9092 / 9093 are free ones; each SuperNode gets its own
`--runtime-port` (the docs' two machines are one); `scp` has nothing to copy; HOME is a folder
of the test's, so `~` is too; the commands the docs leave running (SuperLink, fleet proxy,
SuperNodes) run in the background and are stopped with Ctrl-C's signal, as the teardown says;
the README's run is shortened to 2 nodes and 2 rounds.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.deployment import Background, healthy, wait_until
from experiments.processes import free_port
from other_user import other_users_superlink

ROOT = Path(__file__).resolve().parents[1]
LEFT_RUNNING = ("deploy/superlink.sh", "deploy/fleet-proxy.sh", "deploy/supernode.sh")


def bash_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks in `text`, in order, without their trailing comments
    (a line ending in a backslash or `&&` continues on the next; no command here has a # in
    quotes)."""
    commands = []
    for indent, body in re.findall(r"^( *)```bash\n(.*?)^\1```", text, re.S | re.M):
        pending = ""
        for line in body.splitlines():
            line = line.strip()
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            command = re.sub(r"\s+#(\s.*)?$", "", pending + line).strip()
            if command.endswith("&&"):
                pending = command + " "
                continue
            if command and not command.startswith("#"):
                commands.append(command)
            pending = ""
    return commands


def section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end)]


def docs_environment(tmp_path: Path, default_port: int) -> dict:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("FEDACG_CACHE_DIR", "XDG_CACHE_HOME", "XDG_STATE_HOME", "FLWR_HOME")}
    return {**env, "HOME": str(home), "OMP_NUM_THREADS": "1",
            "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(default_port)}


def sh(command: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(["bash", "-c", command], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, (command, out.stdout[-3000:], out.stderr[-3000:])
    return out


def test_the_bash_blocks_are_read_as_a_shell_reads_them():
    text = ("1. step\n   ```bash\n   a --x 1 \\\n       --y 2   # note\n   b\n   ```\n"
            "```bash\nc\nd &&   # then\n  e\n```\n```\nnot bash\n```\n")
    assert bash_commands(text) == ["a --x 1 --y 2", "b", "c", "d && e"]


def test_the_teardown_removes_the_connection_and_the_app_the_steps_made():
    """Without running them (the slow test below does): the teardown's commands remove the
    connection that step 6 adds, by its name, and Flower's unpacked copy of this app, named
    as Flower names it (<publisher>.<app name>.<version>.<hash>, from pyproject.toml)."""
    import tomllib

    text = (ROOT / "docs" / "deployment.md").read_text()
    steps = bash_commands(section(text, "### Example: two machines", "### Teardown"))
    teardown = bash_commands(section(text, "### Teardown", "### Deployment cost"))
    added = [c.split()[1] for c in steps if c.startswith("deploy/add-connection.sh ")]
    assert added and [f"deploy/remove-connection.sh {name}" for name in added] == [
        c for c in teardown if c.startswith("deploy/remove-connection.sh")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    app = f"{project['tool']['flwr']['app']['publisher']}.{project['project']['name']}."
    assert f'rm -rf "${{FLWR_HOME:-$HOME/.flwr}}"/apps/{app}*' in teardown, teardown


@pytest.mark.slow
@pytest.mark.long
def test_the_deployment_example_runs_as_written_on_own_data(tmp_path):
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        pytest.skip("the fleet proxy needs nginx (apt-get install nginx-light)")
    text = (ROOT / "docs" / "deployment.md").read_text()
    commands = bash_commands(section(text, "### Example: two machines", "### Deployment cost"))
    proxy, link = free_port(), free_port()
    default = free_port()  # where a plain `flwr run .` would go: another user's SuperLink
    env = docs_environment(tmp_path, default)
    home = Path(env["HOME"])
    background = Background(tmp_path)
    with other_users_superlink(default) as (theirs, requests, _):
        try:
            for n, command in enumerate(commands):
                command = (command.replace("192.168.1.10", "127.0.0.1")
                           .replace("0.0.0.0:9092", f"127.0.0.1:{proxy}")
                           .replace("9092", str(proxy)).replace("9093", str(link)))
                if command.startswith(("scp ", "ssh ")):
                    continue  # one machine: the files are where the next command reads them
                if command.startswith(LEFT_RUNNING):
                    if command.startswith("deploy/supernode.sh"):
                        command += f" --runtime-port {free_port()}"
                    name = f"{n}-{command.split()[0].split('/')[-1]}"
                    background.start(name, ["bash", "-c", command], env, cwd=ROOT)
                    if command.startswith("deploy/fleet-proxy.sh"):
                        proxy_log = name
                        ca = home / "fedacg-credentials" / "ca.crt"
                        wait_until(lambda: healthy(proxy, ca), 120, "the fleet proxy",
                                   background)
                    continue
                if command.startswith("flwr supernode list"):  # the docs: both "online"
                    wait_until(lambda: sh(command + " --format json", env).stdout.count(
                        '"online"') == 2, 180, "both SuperNodes online", background)
                if command.startswith("flwr run"):
                    run_and_check_the_cache(command, env, home, background)
                    proxy_dir = re.search(r"config (\S+)/nginx\.conf",
                                          background.log(proxy_log)).group(1)
                    assert Path(proxy_dir, "nginx.conf").is_file()
                    background.stop(signal.SIGINT)  # the teardown: Ctrl-C, nodes first
                    continue
                sh(command, env)
        finally:
            background.stop(signal.SIGINT)
        assert theirs.poll() is None and requests.read_text() == ""
    # the teardown removed what the steps made: the nodes' copies of their data, the demo
    # folders, Flower's unpacked app, the connection, the credentials, the proxy's folder
    assert not (home / ".cache" / "fedacg-gc" / "partitions").exists()
    assert not (home / "fedacg-demo").exists()
    assert not list((home / ".flwr" / "apps").glob("*"))
    assert "[superlink.lab]" not in (home / ".flwr" / "config.toml").read_text()
    assert not (home / "fedacg-credentials").exists() and not Path(proxy_dir).exists()
    assert (home / "fedacg-gc-runs").is_dir()  # the results are kept


def run_and_check_the_cache(command: str, env: dict, home: Path, background: Background):
    """Run the docs' `flwr run`; after round 1, note each node's cache file of its own data:
    later rounds must load them, never rebuild them (a rebuild replaces the file)."""
    cache = home / ".cache" / "fedacg-gc" / "partitions"
    runs = home / "fedacg-gc-runs"
    proc = subprocess.Popen(["bash", "-c", command], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    after_round_1 = None
    deadline = time.monotonic() + 900
    while proc.poll() is None:
        rows = [json.loads(p.read_text()).get("rounds", [])
                for p in runs.glob("*/results.json")] if runs.exists() else []
        if after_round_1 is None and rows and len(rows[0]) >= 2:
            after_round_1 = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
                             for p in cache.glob("own-*.pt")}
        assert time.monotonic() < deadline, "the run took more than 15 minutes"
        background.check()
        time.sleep(0.2)
    output = proc.stdout.read()
    assert proc.returncode == 0, output[-4000:]
    results = json.loads(next(runs.glob("*/results.json")).read_text())
    rows = results["rounds"]
    assert results["status"] == "complete" and [r["round"] for r in rows] == list(range(6))
    assert all(r["train-replies"] == 2 and r["train-errors"] == 0 for r in rows[1:]), rows
    assert rows[-1]["test-acc"] > 0.5 > rows[0]["test-acc"], rows
    assert after_round_1 is not None and len(after_round_1) == 2, after_round_1
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in cache.glob("own-*.pt")} == after_round_1
    # what the teardown must remove: the app as Flower unpacked it for the runs
    assert [p.name.split(".")[:2] for p in (home / ".flwr" / "apps").iterdir()] == [
        ["fedacg-gc", "fedacg-gc"]]


@pytest.mark.slow
@pytest.mark.long
def test_the_readme_run_uses_a_superlink_of_ones_own_and_stops_it(tmp_path):
    """The README's Run block, as one shell runs it: `flwr run .` goes to the SuperLink that
    `start` started (never to the one on the default port), and `stop` leaves nothing of it."""
    readme = (ROOT / "README.md").read_text()
    commands = bash_commands(section(readme, "## Run", "## Methods"))
    assert commands[1].startswith('eval "$(python -m experiments.superlink start)" && flwr run')
    assert commands[-1] == "python -m experiments.superlink stop"
    default = free_port()
    env = docs_environment(tmp_path, default)
    script = "set -e\n" + "\n".join(
        c.replace("num-supernodes=20", "num-supernodes=2")
        .replace("--stream", "--stream --run-config num-server-rounds=2") for c in commands)
    with other_users_superlink(default) as (theirs, requests, _):
        out = subprocess.run(["bash", "-c", script], env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "[round 2/2] test-acc" in out.stdout + out.stderr
        assert theirs.poll() is None and requests.read_text() == ""
    state = Path(env["HOME"]) / ".local" / "state" / "fedacg-gc" / "superlink"
    assert not (state / "superlink.json").exists()  # stopped, and its PID file gone
    assert "stopped your SuperLink on 127.0.0.1:" in out.stderr
    port = int(re.search(r"stopped your SuperLink on 127\.0\.0\.1:(\d+)", out.stderr).group(1))
    assert port != default
    assert subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"],
                          capture_output=True).returncode != 0  # nothing listens there now
