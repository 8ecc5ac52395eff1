"""A simulation SuperLink of our own: free loopback ports, its own FLWR_HOME, stopped for sure.

`flwr run .` (its `local` connection) otherwise submits to whatever answers on
127.0.0.1:$FLWR_LOCAL_SUPERLINK_HTTP_API_PORT (default 39091), another user's SuperLink
included, or starts one there and leaves it running. This one runs `flower-superlink --insecure
--simulation` in a new session and `stop()` (also after an error or Ctrl-C: use it as a context
manager) ends it together with every process it started. That takes more than its process
group: the SuperLink's SuperExec puts itself in a session of its own, and the `flwr-simulation`
process and Ray's processes under it live on (orphaned) when only the SuperLink dies mid-run. So
`stop()` takes the process tree under the SuperLink first, then stops the process groups led by
processes of that tree. Runtime dependency installation is off
(FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1).

From a shell (README.md#run, docs/deployment.md#a-superlink-of-your-own):

    eval "$(python -m experiments.superlink start)"   # exports FLWR_LOCAL_SUPERLINK_HTTP_API_PORT
    flwr run . --stream ...                            # runs on it
    python -m experiments.superlink stop               # stops it: the PID its start recorded
    python -m experiments.superlink status             # it, and who holds the default port

`start` keeps a PID file (the process, its start time, its port and a token) in `--dir`
(default $XDG_STATE_HOME/fedacg-gc/superlink, ~/.local/state/...), a folder only this user may
write (made 0700; another user's, a group- or world-writable one, a link, a file or a path in
/proc is refused). A record is acted on (`stop` signals it, `start` and `status` call it
yours) only while its process is the SuperLink this helper started from it: the same start
time, a `flower-superlink` command line with the recorded port, the record's home as its
working folder and the record's token in its environment (`started_here`, Linux: read bounded
from /proc/<pid>/). Who holds a port is read from the kernel's socket table (Linux:
/proc/net/tcp), so another user's SuperLink on the default port is named without sending it
anything.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from fileio.atomic import write_text_atomic
from fileio.errors import UnusableFile
from fileio.folders import private_folder
from fileio.in_place import fresh_log
from fileio.reading import read_head, read_json_bounded, read_tail

CONNECTION = "sweep"
PORT_VARIABLE = "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"  # flwr's `local` connection goes there
FLOWER_LOCAL_PORT = 39091  # its default: Flower's own local SuperLink, one per machine
TOKEN_VARIABLE = "FEDACG_SUPERLINK_TOKEN"  # in the environment of a SuperLink started here
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


class PortTaken(RuntimeError):
    """The port chosen was taken before the SuperLink could listen on it."""


class LocalSuperLink:
    def __init__(self, home: Path | None = None, start_timeout: float = 90.0):
        self._own_home = home is None
        self.home = Path(home or tempfile.mkdtemp(prefix="flwr-sweep-home-"))
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.token = secrets.token_hex(16)  # names this process in /proc/<pid>/environ
        self.env = {**os.environ, "FLWR_HOME": str(self.home),
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    TOKEN_VARIABLE: self.token}

    @property
    def connection(self) -> str:
        return CONNECTION

    def start(self) -> "LocalSuperLink":
        if shutil.which("flower-superlink") is None:
            raise RuntimeError("flower-superlink not found: install the app (pip install -e .)")
        self.home.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a free port can be taken before the SuperLink binds it
            try:
                return self._start_on(free_port())
            except PortTaken:
                if attempt == 2:
                    raise RuntimeError("the SuperLink did not start: three free ports were "
                                       "taken before it could listen (a busy machine); try "
                                       "again") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_on(self, port: int) -> "LocalSuperLink":
        self.port = port
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
                    # ours, not another user's that took the port first (then ours exits)
                    if r.status == 200 and self.proc.poll() is None and _mine(self.port):
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = read_tail(self.home / "superlink.log", 2000).decode(errors="replace")
                self._stop_process()
                if "address already in use" in text.lower():
                    raise PortTaken(text)
                if self._own_home:
                    shutil.rmtree(self.home, ignore_errors=True)
                raise RuntimeError(f"the SuperLink did not start:\n{text}")
            time.sleep(0.5)

    def _stop_process(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                stop_process_tree(self.proc.pid, child=self.proc)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self._stop_process()
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> "LocalSuperLink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- the command line: a SuperLink of one's own for `flwr run .`, and who holds a port --------
def default_dir() -> Path:
    """Where `start` keeps its PID file and the SuperLink's FLWR_HOME."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "fedacg-gc" / "superlink"


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


def read_record(folder: Path) -> dict | None:
    """The PID file `start` wrote in `folder`, None when there is none or it is not one `start`
    wrote: read bounded, never through a link or from a pipe, every field checked (`stop`
    removes `home`, which must be `folder/home`)."""
    try:
        rec = read_json_bounded(folder / "superlink.json", 4096)
    except (OSError, ValueError):  # (UnusableFile is an OSError)
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("start"), str):
        return None
    if type(rec.get("pid")) is not int or rec["pid"] <= 1:
        return None
    if type(rec.get("port")) is not int or port_number(rec["port"]) is None:
        return None
    if not isinstance(rec.get("token"), str) or not re.fullmatch(r"[0-9a-f]{32}", rec["token"]):
        return None
    return rec if rec.get("home") == str(folder / "home") else None


def recorded_alive(rec: dict) -> bool:
    """Whether the recorded process still runs: the same PID and the same start."""
    return process_start(int(rec["pid"])) == rec["start"]


def started_here(rec: dict) -> bool:
    """Whether the recorded process is the SuperLink this helper started from `rec`: it runs
    (`recorded_alive`), its command line is flower-superlink's with the recorded port, and
    (Linux) its working folder is the record's home and its environment holds the record's
    token. What is read of the process is read bounded; a process this user may not look
    into is not one this helper started."""
    if not recorded_alive(rec):
        return False
    args = _arguments(int(rec["pid"]))
    if not any(Path(a).name == "flower-superlink" for a in args[:2]) or \
            "--port" not in args or args[args.index("--port") + 1:][:1] != [str(rec["port"])]:
        return False
    if not Path("/proc/self/environ").exists():  # (not Linux: the command line says it)
        return True
    proc = Path(f"/proc/{int(rec['pid'])}")
    try:
        cwd = os.readlink(proc / "cwd")
        env = read_head(proc / "environ", PROC_LIMIT).split(b"\0")
    except OSError:
        return False
    token = f"{TOKEN_VARIABLE}={rec['token']}".encode()
    return cwd == os.path.realpath(rec["home"]) and token in env


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


def _arguments(pid: int | None) -> list[str]:
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


def _command(pid: int | None) -> str:
    return " ".join(_arguments(pid)).strip()


def _mine(port: int) -> bool:
    """Whether the socket listening on `port` is this user's (True where the system does
    not say)."""
    if not Path("/proc/net/tcp").exists():
        return True
    return any(uid == os.getuid() for uid, _ in listening(port))


def _answers(port: int) -> bool:
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
        return PortHolder(uid, pid, _command(pid))
    return PortHolder(None, None, "") if _answers(port) else None  # (not Linux)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def describe_port(port: int, holder: PortHolder | None, recorded: int | None = None) -> str:
    """What a plain `flwr run .` would meet on `port`, and what to do; `recorded`: the PID of
    the SuperLink this helper started (`started_here`), the only one called yours."""
    where = f"127.0.0.1:{port}"
    if holder is None:
        return (f"{where}: free (a plain `flwr run .` would start Flower's own local SuperLink "
                "there and leave it running)")
    if holder.uid is None:
        return (f"{where}: something answers there, whose is not known on this system: a plain "
                "`flwr run .` would submit your app to it. Use a SuperLink of your own "
                "(eval \"$(python -m experiments.superlink start)\")")
    if not holder.mine:
        user = _user(holder.uid)
        return (f"{where}: held by another user, {user}: a plain `flwr run .` (with "
                f"{PORT_VARIABLE} unset) would submit your app to it, to run as {user}, and "
                f"`flwr ls` would show you {user}'s runs. Use a SuperLink of your own "
                "(eval \"$(python -m experiments.superlink start)\"), and leave theirs alone")
    what = f"PID {holder.pid}: {holder.command[:120]}" if holder.pid else "PID not known"
    if recorded is not None and holder.pid == recorded:
        return (f"{where}: yours ({what}), started by `python -m experiments.superlink "
                "start`; stop it with python -m experiments.superlink stop")
    said = (f"{where}: held by a process of your user account ({what}), not the SuperLink "
            "this helper started: a plain `flwr run .` would submit your app to it")
    if holder.pid is not None and "flower-superlink" in holder.command:
        return (f"{said}. If it is a SuperLink a plain `flwr run .` left running and you no "
                f"longer use it, stop it with python -m experiments.superlink stop --port "
                f"{port}")
    return (f"{said}. Leave it, and use a SuperLink of your own (eval \"$(python -m "
            "experiments.superlink start)\")")


# What `start` prints on stdout when it fails: `eval "$(... start)"` then fails too, so the
# README's `eval "$(python -m experiments.superlink start)" && flwr run .` does not submit to
# whatever holds Flower's default port
NOT_STARTED = "false"


def start(folder: Path) -> int:
    rec = read_record(folder)
    if rec and started_here(rec):
        print(f"export {PORT_VARIABLE}={rec['port']}")
        print(f"your SuperLink already runs on 127.0.0.1:{rec['port']} (PID {rec['pid']})",
              file=sys.stderr)
        return 0
    given = os.environ.get(PORT_VARIABLE, "")
    if given and port_number(given) is None:
        print(f"error: {PORT_VARIABLE}={given!r} is not a port number (a whole number "
              f"1-65535): unset it (unset {PORT_VARIABLE}) and start again", file=sys.stderr)
        print(NOT_STARTED)
        return 2
    default = port_number(given) or FLOWER_LOCAL_PORT
    holder = port_holder(default)
    if holder is not None and not holder.mine:
        print("note: " + describe_port(default, holder), file=sys.stderr)
    home = folder / "home"
    shutil.rmtree(home, ignore_errors=True)
    try:
        link = LocalSuperLink(home=home).start()
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        print(f"no SuperLink of yours runs: a plain `flwr run .` would go to 127.0.0.1:"
              f"{default}, whoever holds it", file=sys.stderr)
        print(NOT_STARTED)
        return 1
    try:
        write_text_atomic(folder / "superlink.json", json.dumps({
            "pid": link.proc.pid, "start": process_start(link.proc.pid), "port": link.port,
            "home": str(home), "token": link.token}))
    except OSError as err:  # no record: stopped, as `stop` could not find it
        link.stop()
        print(f"error: {err}", file=sys.stderr)
        print(NOT_STARTED)
        return 1
    if port_number(link.port) is None:  # pragma: no cover - free_port() gives one
        raise AssertionError(f"not a port: {link.port!r}")
    print(f"export {PORT_VARIABLE}={link.port}")
    print(f"your SuperLink: 127.0.0.1:{link.port} (PID {link.proc.pid}, log "
          f"{home / 'superlink.log'}). `flwr run .` in a shell with {PORT_VARIABLE}="
          f"{link.port} runs there. While it runs, any user of this machine can submit an app "
          "to that port, which then runs as you (Flower's Control API has no login): stop it "
          "when done with: python -m experiments.superlink stop", file=sys.stderr)
    return 0


def stop(folder: Path, port: int | None = None) -> int:
    """Stop the SuperLink `start` recorded in `folder`; with `port`, the process of this user
    that listens there, if it is a flower-superlink (one `flwr run .` started)."""
    if port is not None:
        holder = port_holder(port)
        if holder is None:
            print(f"127.0.0.1:{port}: no one listens there", file=sys.stderr)
            return 0
        if not holder.mine or holder.pid is None or "flower-superlink" not in holder.command:
            print("not stopped: " + describe_port(port, holder), file=sys.stderr)
            return 1
        stop_process_tree(holder.pid)
        print(f"stopped your SuperLink on 127.0.0.1:{port} (PID {holder.pid})", file=sys.stderr)
        return 0
    rec = read_record(folder)
    if rec is None:
        print(f"no SuperLink started by `python -m experiments.superlink start` (PID file: "
              f"{folder / 'superlink.json'})", file=sys.stderr)
        return 0
    if started_here(rec):
        stop_process_tree(int(rec["pid"]))
        print(f"stopped your SuperLink on 127.0.0.1:{rec['port']} (PID {rec['pid']})",
              file=sys.stderr)
    elif recorded_alive(rec):
        print(f"PID {rec['pid']} is not the SuperLink this helper started from "
              f"{folder / 'superlink.json'} (another command line, working folder or "
              "environment): left running; the record is removed", file=sys.stderr)
    else:
        print(f"your SuperLink (PID {rec['pid']}) had already stopped", file=sys.stderr)
    (folder / "superlink.json").unlink(missing_ok=True)
    shutil.rmtree(rec["home"], ignore_errors=True)
    return 0


def status(folder: Path) -> int:
    rec = read_record(folder)
    if rec and not started_here(rec):
        rec = None
    if rec:
        print(f"yours: 127.0.0.1:{rec['port']} (PID {rec['pid']}); use it with "
              f"export {PORT_VARIABLE}={rec['port']}")
    else:
        print("yours: none running (python -m experiments.superlink start)")
    ports = {FLOWER_LOCAL_PORT}
    given = os.environ.get(PORT_VARIABLE, "")
    if given and port_number(given) is None:
        print(f"{PORT_VARIABLE}={given!r} is not a port number (a whole number 1-65535): a "
              f"plain `flwr run .` fails; unset it (unset {PORT_VARIABLE})")
    elif given:
        ports.add(port_number(given))
    for port in sorted(ports):
        if not (rec and int(rec["port"]) == port):
            print(describe_port(port, port_holder(port), rec["pid"] if rec else None))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.superlink",
        description="A simulation SuperLink of your own for `flwr run .` (README.md#run).")
    ap.add_argument("command", choices=("start", "stop", "status"))
    ap.add_argument("--dir", type=Path, default=None,
                    help=f"PID file and FLWR_HOME (default {default_dir()})")
    ap.add_argument("--port", type=int, default=None,
                    help="stop: the SuperLink of yours listening on this port instead (one a "
                         "plain `flwr run .` started, e.g. 39091); another user's is never "
                         "stopped")
    args = ap.parse_args(argv)
    if args.port is not None and args.command != "stop":
        ap.error("--port goes with stop")
    if args.port is not None and port_number(args.port) is None:
        ap.error(f"--port {args.port}: not a port number (a whole number 1-65535)")
    folder = Path(os.path.abspath((args.dir or default_dir()).expanduser()))
    try:  # the record is trusted only in a folder no one else may write
        if args.command == "start" or os.path.lexists(folder):
            private_folder(folder, "--dir")
        if args.command == "start":
            return start(folder)
        if args.command == "stop":
            return stop(folder, args.port)
        return status(folder)
    except UnusableFile as err:
        print(f"error: {err}", file=sys.stderr)
        if args.command == "start":
            print(NOT_STARTED)
        return 2


if __name__ == "__main__":
    sys.exit(main())
