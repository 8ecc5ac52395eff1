"""A secured deployment on this machine, from deploy/'s scripts: the SuperLink (TLS, SuperNode
authentication) and the fleet proxy on free loopback ports, SuperNodes that reach it through
the proxy, a `flwr` connection of its own. For measurements (benchmarks.deploy_rounds) and the
tests that follow docs/deployment.md; what the scripts do: docs/deployment.md.

Every process starts in a session of its own and `Background.stop()` (also after an error)
ends each one's whole process tree, SuperExecs and ClientApps included (`stop_process_tree`).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from fileio.in_place import fresh_log
from fileio.reading import read_tail

from .processes import free_port, stop_process_tree

LOG_TAIL = 2**20  # the end of a command's log that errors show

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def default_sigint() -> None:
    """SIGINT back to its default in a child: a command started from a process that ignores it
    (any started in the background, `cmd &`) would ignore it too, and a shell script could not
    trap it, so stop(signal.SIGINT), a Ctrl-C, would not reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Background:
    """Long-running commands in new sessions, each logging to `<folder>/<name>.log`."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, cmd: list[str], env: dict, cwd: Path | None = None
              ) -> subprocess.Popen:
        with fresh_log(self.folder / f"{name}.log") as log:  # (never through a link)
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=cwd or self.folder, start_new_session=True,
                                    preexec_fn=default_sigint)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return read_tail(self.folder / f"{name}.log", LOG_TAIL).decode(errors="replace")

    def check(self, names: tuple[str, ...] | None = None) -> None:
        """Raise, with its log, if a command (of `names`, default all) has ended."""
        for name, proc in self.procs.items():
            if (names is None or name in names) and proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log(name)[-3000:]}")

    def stop_one(self, name: str, sig: int = signal.SIGTERM) -> int:
        """End command `name`'s process tree (`sig` first, then SIGTERM and SIGKILL; SIGKILL:
        a crash, nothing may say goodbye) and forget it; its exit status."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            if sig != signal.SIGTERM:
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            stop_process_tree(proc.pid, child=proc)
        return proc.wait()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """End every command's process tree, newest first (`sig` first, then SIGKILL)."""
        for name in reversed(list(self.procs)):
            self.stop_one(name, sig)


def wait_until(check, timeout: float, what: str, background: Background | None = None,
               names: tuple[str, ...] | None = None) -> None:
    """Until check(); raises if one of `background`'s commands `names` (default all) ends."""
    deadline = time.monotonic() + timeout
    while not check():
        if background is not None:
            background.check(names)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def healthy(port: int, ca: Path) -> bool:
    """Whether https://127.0.0.1:`port`/health answers (TLS verified against `ca`)."""
    context = ssl.create_default_context(cafile=str(ca))  # (it names 127.0.0.1)
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", timeout=2,
                                    context=context) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class LocalDeployment:
    """deploy/'s SuperLink, fleet proxy and one SuperNode per entry of `nodes` (each entry: that
    node's further deploy/supernode.sh options, e.g. ["--client-id", "0", "--num-clients",
    "2"]), in `folder`; `flwr(...)` runs the operator's `flwr` on connection `CONNECTION`."""

    CONNECTION = "local-deployment"

    def __init__(self, folder: Path, nodes: list[list[str]], env: dict | None = None,
                 database: Path | None = None):
        """`database`: the SuperLink's state file (`deploy/superlink.sh --database`), which
        keeps registered nodes and runs across `restart_superlink()`; None: memory."""
        self.folder = folder
        self.nodes = nodes
        self.database = database
        self.creds = folder / "credentials"
        self.env = {**(env or os.environ), "OMP_NUM_THREADS": os.environ.get(
            "OMP_NUM_THREADS", "1"), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
        self.user = {**self.env, "FLWR_HOME": str(folder / "operator")}
        self.background = Background(folder)
        self.link_port = self.proxy_port = 0
        self.node_options: dict[str, tuple[list[str], str | None]] = {}  # start_node's
        self.port_clashes: dict[str, int] = {}  # node -> restarts for a taken runtime port

    def _run(self, cmd: list[str], env: dict, timeout: float = 180) -> str:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                             cwd=ROOT)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        return out.stdout

    def flwr(self, *args: str, timeout: float = 1800) -> str:
        return self._run(["flwr", *args], self.user, timeout)

    def online(self) -> int:
        out = self.flwr("supernode", "list", self.CONNECTION, "--format", "json", timeout=60)
        return sum(n["status"] == "online" for n in json.loads(out)["nodes"])

    def make_keys(self, *names: str) -> None:
        """A key pair per node name, `<credentials>/<name>` and `.pub` (not registered)."""
        self._run([sys.executable, str(DEPLOY / "credentials.py"), "node-key", "--out",
                   str(self.creds), *names], self.env)

    def register(self, *names: str) -> None:
        """Register the public keys of `names` with the SuperLink (the operator's `flwr`)."""
        self._run(["sh", str(DEPLOY / "register-supernodes.sh"), self.CONNECTION,
                   *[str(self.creds / f"{n}.pub") for n in names]], self.user)

    def start_superlink(self) -> subprocess.Popen:
        """deploy/superlink.sh on `link_port` (on `database` when given), until healthy behind
        the fleet proxy once the proxy runs."""
        db = ["--database", str(self.database)] if self.database else []
        return self.background.start(
            "superlink", ["bash", str(DEPLOY / "superlink.sh"), "--credentials", str(self.creds),
                          "--port", str(self.link_port), *db],
            {**self.env, "FLWR_HOME": str(self.folder / "superlink-home")})

    def restart_superlink(self, sig: int = signal.SIGTERM) -> subprocess.Popen:
        """Stop the SuperLink's process tree (`sig` first: SIGKILL is a crash) and start it again
        on the same port and database; returns once it answers behind the proxy."""
        self.background.stop_one("superlink", sig)
        proc = self.start_superlink()
        wait_until(lambda: healthy(self.proxy_port, self.creds / "ca.crt"), 120,
                   "the restarted SuperLink behind the fleet proxy", self.background,
                   ("superlink", "fleet-proxy"))  # (a node may have ended: not this one's say)
        return proc

    def start_node(self, name: str, options: list[str], key: str | None = None
                   ) -> subprocess.Popen:
        """deploy/supernode.sh as `name` (its key `key`, default `name`; FLWR_HOME of its own)
        with its further `options`, at the fleet proxy, on a free runtime port."""
        self.node_options[name] = (options, key)
        return self.background.start(
            name, ["bash", str(DEPLOY / "supernode.sh"), "--superlink",
                   f"127.0.0.1:{self.proxy_port}", "--ca", str(self.creds / "ca.crt"),
                   "--key", str(self.creds / (key or name)), "--runtime-port", str(free_port()),
                   *options],
            {**self.env, "FLWR_HOME": str(self.folder / f"{name}-home")})

    def restart_port_clashes(self, tries: int = 5) -> None:
        """Start again, on another free port, each node that exited because its runtime port
        was taken between `free_port()` and its bind (outgoing connections take ports of the
        same range); at most `tries` times a node."""
        for name, (options, key) in list(self.node_options.items()):
            proc = self.background.procs.get(name)
            if (proc is None or proc.poll() is None or self.port_clashes.get(name, 0) >= tries
                    or "address already in use" not in self.background.log(name)[-5000:]):
                continue
            self.port_clashes[name] = self.port_clashes.get(name, 0) + 1
            self.background.stop_one(name)
            self.start_node(name, options, key)

    def start(self) -> "LocalDeployment":
        self.folder.mkdir(parents=True, exist_ok=True)
        names = [f"supernode-{i}" for i in range(len(self.nodes))]
        self._run([sys.executable, str(DEPLOY / "credentials.py"), "tls", "--out",
                   str(self.creds)], self.env)
        self.make_keys(*names)
        self.link_port, self.proxy_port = free_port(), free_port()
        bg = self.background
        try:
            self.start_superlink()
            bg.start("fleet-proxy", ["bash", str(DEPLOY / "fleet-proxy.sh"), "--credentials",
                                     str(self.creds), "--listen", f"127.0.0.1:{self.proxy_port}",
                                     "--superlink", str(self.link_port), "--run-dir",
                                     str(self.folder / "proxy")], self.env)
            wait_until(lambda: healthy(self.proxy_port, self.creds / "ca.crt"), 120,
                       "the SuperLink behind the fleet proxy", bg)
            self._run(["sh", str(DEPLOY / "add-connection.sh"), self.CONNECTION,
                       f"127.0.0.1:{self.link_port}", str(self.creds / "ca.crt")], self.user)
            self.register(*names)
            for name, options in zip(names, self.nodes):
                self.start_node(name, options)
            wait_until(lambda: self.restart_port_clashes() or self.online() == len(names), 180,
                       "every SuperNode online", bg)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.background.stop()

    def __enter__(self) -> "LocalDeployment":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
