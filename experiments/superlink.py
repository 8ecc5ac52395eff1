"""A simulation SuperLink of our own: free loopback ports, its own FLWR_HOME, stopped for sure.

`flwr run` would otherwise submit to (or start, and leave running) the shared local SuperLink on
127.0.0.1:39091. This one runs `flower-superlink --insecure --simulation` in a new session and
`stop()` (also after an error or Ctrl-C: use it as a context manager) ends it together with every
process it started. That takes more than its process group: the SuperLink's SuperExec puts
itself in a session of its own, and the `flwr-simulation` process and Ray's processes under it
live on (orphaned) when only the SuperLink dies mid-run. So `stop()` takes the process tree under
the SuperLink first, then stops the process groups led by processes of that tree.
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

from fileio.atomic import write_text_atomic
from fileio.in_place import fresh_log
from fileio.reading import read_tail

CONNECTION = "sweep"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_table() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process (`ps`, on Linux and macOS)."""
    out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,pgid="], capture_output=True, text=True)
    rows = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return rows


def process_groups_under(root: int) -> set[int]:
    """The process groups led by `root` or by any process under it."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, ppid, _ in table:
        children.setdefault(ppid, []).append(pid)
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return {pgid for pid, _, pgid in table if pid in tree and pgid in tree}


def _alive(groups: set[int]) -> set[int]:
    out = set()
    for g in groups:
        try:
            os.killpg(g, 0)
            out.add(g)
        except (ProcessLookupError, PermissionError):
            pass
    return out


def stop_process_tree(root: int, grace: float = 15.0,
                      child: subprocess.Popen | None = None) -> None:
    """SIGTERM the process groups led by `root` and the processes under it; SIGKILL what is
    left after `grace` seconds. `child`: the Popen of `root` when it is ours (to reap it)."""
    groups = process_groups_under(root) | {root}
    for g in groups:
        try:
            os.killpg(g, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # a dead child stays a zombie, and its group alive, until reaped
        if not _alive(groups):
            break
        time.sleep(0.5)
    for g in _alive(groups):
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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
        write_text_atomic(
            self.home / "config.toml",
            '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n\n'
            f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
        log = fresh_log(self.home / "superlink.log")  # (never through a link)
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
                text = read_tail(self.home / "superlink.log", 2000).decode(errors="replace")
                self.stop()
                raise RuntimeError(f"the SuperLink did not start:\n{text}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                stop_process_tree(self.proc.pid, child=self.proc)
            self.proc.wait()
        self.proc = None
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> "LocalSuperLink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
