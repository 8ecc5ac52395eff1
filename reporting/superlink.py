"""A simulation SuperLink of our own: free loopback ports, its own FLWR_HOME, stopped for sure.

`flwr run` would otherwise submit to (or start, and leave running) the shared local SuperLink on
127.0.0.1:39091. This one runs `flower-superlink --insecure --simulation` in a new session
(process group) and is stopped by that group - the SuperLink, its SuperExec and the simulation
processes they started - on `stop()`, also after an error or Ctrl-C (use it as a context manager).
Runtime dependency installation is off (FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

CONNECTION = "sweep"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class LocalSuperLink:
    def __init__(self, home: Path | None = None, start_timeout: float = 90.0):
        self._own_home = home is None
        self.home = Path(home or tempfile.mkdtemp(prefix="flwr-sweep-home-"))
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.env = {**os.environ, "FLWR_HOME": str(self.home),
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}

    @property
    def connection(self) -> str:
        return CONNECTION

    def start(self) -> "LocalSuperLink":
        if shutil.which("flower-superlink") is None:
            raise RuntimeError("flower-superlink not found: install the app (pip install -e .)")
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n\n'
            f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
        log = open(self.home / "superlink.log", "w")
        self.proc = subprocess.Popen(
            ["flower-superlink", "--insecure", "--simulation", "--host", "127.0.0.1",
             "--port", str(self.port), "--disable-runtime-dependency-installation"],
            env=self.env, cwd=self.home, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = (self.home / "superlink.log").read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"the SuperLink did not start:\n{text}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            except ProcessLookupError:
                pass
        if self.proc is not None:  # what is left of the group (SuperExec, simulation) gets killed
            deadline = time.monotonic() + 10
            while _group_alive(self.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _group_alive(self.proc.pid):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> "LocalSuperLink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
