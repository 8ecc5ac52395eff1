"""Processes and the loopback ports they listen on, as seen by this user: who listens on a
port (the kernel's socket table, Linux: /proc/net/tcp; nothing is sent to it), a process's start
time and command line (read bounded from /proc/<pid>/), the process tree under a process, and
the stop of that tree. The SuperLink's life cycle that uses them is `experiments.superlink`.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from fileio.reading import read_head

PROC_LIMIT = 2**20  # the most read of a process's command line or environment
SOCKET_TABLE_LIMIT = 2**26  # of /proc/net/tcp (about 150 bytes a socket)


def port_number(value: object) -> int | None:
    """`value` as a TCP port (a whole number 1-65535, an int or its plain ASCII digits; no
    bool), None otherwise."""
    if type(value) is int:
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value):
        number = int(value)
    else:
        return None
    return number if 1 <= number <= 65535 else None


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


def _alive(groups: set[int], root: int | None = None) -> set[int]:
    """The groups of `groups` that still have a process; `-root` stands for `root` itself
    while it runs."""
    out = set()
    for g in groups:
        try:
            os.killpg(g, 0)
            out.add(g)
        except (ProcessLookupError, PermissionError):
            pass
    if root is not None and _signal(root, 0):
        out.add(-root)
    return out


def _signal(pid: int, sig: int) -> bool:
    """Send `sig` to the process `pid`; whether it was there (and ours)."""
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_process_tree(root: int, grace: float = 15.0,
                      child: subprocess.Popen | None = None) -> None:
    """SIGTERM `root` itself and the process groups led by it and the processes under it;
    SIGKILL what is left after `grace` seconds (`root` need not lead a group: a SuperLink that
    `flwr run .` started does not). `child`: the Popen of `root` when it is ours (to reap it)."""
    groups = process_groups_under(root) | {root}
    for g in groups:
        try:
            os.killpg(g, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    _signal(root, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # a dead child stays a zombie, and its group alive, until reaped
        if not _alive(groups, None if child is not None and child.returncode is not None
                      else root):
            break
        time.sleep(0.5)
    left = _alive(groups, None if child is not None and child.poll() is not None else root)
    for g in left - {-root}:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if -root in left:
        _signal(root, signal.SIGKILL)


def process_start(pid: int) -> str | None:
    """When process `pid` started (Linux: clock ticks since boot, from /proc; elsewhere `ps`'s
    lstart), None when there is no such process: with the PID it names one process for good."""
    if Path("/proc/self/stat").exists():
        try:
            line = read_head(Path(f"/proc/{pid}/stat"), 4096).decode(errors="replace")
            return line.rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            return None
    out = subprocess.run(["ps", "-p", str(pid), "-o", "lstart="], capture_output=True,
                         text=True)
    return out.stdout.strip() or None


@dataclass(frozen=True)
class PortHolder:
    """Who listens on a loopback port: the socket's uid and, where this user may see it, the
    process; None where the system does not say (no /proc/net/tcp: only that it answers)."""

    uid: int | None
    pid: int | None
    command: str

    @property
    def mine(self) -> bool:
        return self.uid == os.getuid()


def listening(port: int, tables: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")
              ) -> list[tuple[int, int]]:
    """(uid, socket inode) of each socket listening on `port` (any local address), from the
    kernel's socket tables."""
    rows = []
    for table in tables:
        try:
            text = read_head(Path(table), SOCKET_TABLE_LIMIT).decode(errors="replace")
            lines = text.splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                rows.append((int(f[7]), int(f[9])))
    return rows


def _socket_pid(inode: int) -> int | None:
    """The process holding socket `inode`, among those whose files this user may list."""
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    return None


def arguments(pid: int | None) -> list[str]:
    """The command line of process `pid` (Linux: /proc/<pid>/cmdline, read bounded; elsewhere
    `ps`, split at spaces), [] where there is none."""
    if pid is None:
        return []
    if not Path("/proc/self/cmdline").exists():
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True,
                             text=True)
        return out.stdout.split()
    try:
        raw = read_head(Path(f"/proc/{pid}/cmdline"), PROC_LIMIT)
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1] if raw.endswith(b"\0") else \
        raw.decode(errors="replace").split("\0")


def command_line(pid: int | None) -> str:
    return " ".join(arguments(pid)).strip()


def listens_as_me(port: int) -> bool:
    """Whether the socket listening on `port` is this user's (True where the system does
    not say)."""
    if not Path("/proc/net/tcp").exists():
        return True
    return any(uid == os.getuid() for uid, _ in listening(port))


def answers_health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def port_holder(port: int) -> PortHolder | None:
    """Who listens on `port`, None when no one does."""
    if Path("/proc/net/tcp").exists():
        rows = listening(port)
        if not rows:
            return None
        uid, inode = rows[0]
        pid = _socket_pid(inode)
        return PortHolder(uid, pid, command_line(pid))
    return PortHolder(None, None, "") if answers_health(port) else None  # (not Linux)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
