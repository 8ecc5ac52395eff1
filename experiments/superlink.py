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
working folder and the record's token in its environment (`not_started_here` says which does
not hold; Linux: read bounded from /proc/<pid>/). `stop` ends that SuperLink and nothing else:
no other process, whatever port it listens on, is ever signalled. Who holds a port, a
process's start and command line, and the stop of a process tree are
`experiments.processes`'s (the kernel's socket table, so another user's SuperLink on the
default port is named without sending it anything).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from fileio.atomic import write_text_atomic
from fileio.errors import UnusableFile
from fileio.folders import private_folder
from fileio.in_place import fresh_log
from fileio.reading import read_head, read_json_bounded, read_tail

from .processes import (PROC_LIMIT, PortHolder, arguments, free_port, listens_as_me,
                        port_holder, port_number, process_start, stop_process_tree, user_name)

CONNECTION = "sweep"
PORT_VARIABLE = "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"  # flwr's `local` connection goes there
FLOWER_LOCAL_PORT = 39091  # its default: Flower's own local SuperLink, one per machine
TOKEN_VARIABLE = "FEDACG_SUPERLINK_TOKEN"  # in the environment of a SuperLink started here


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
                    if r.status == 200 and self.proc.poll() is None and listens_as_me(self.port):
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


def not_started_here(rec: dict) -> str | None:
    """None when the recorded process is the SuperLink this helper started from `rec`: it runs
    (`recorded_alive`), its command line is flower-superlink's with the recorded port, and
    (Linux) its working folder is the record's home and its environment holds the record's
    token; otherwise the first of these that does not hold, in words. What is read of the
    process is read bounded; a process this user may not look into is not one this helper
    started."""
    if not recorded_alive(rec):
        return "it no longer runs"
    args = arguments(int(rec["pid"]))
    if not any(Path(a).name == "flower-superlink" for a in args[:2]):
        return "its command line is not flower-superlink's"
    if "--port" not in args or args[args.index("--port") + 1:][:1] != [str(rec["port"])]:
        return f"its command line does not give the recorded port {rec['port']}"
    if not Path("/proc/self/environ").exists():  # (not Linux: the command line says it)
        return None
    proc = Path(f"/proc/{int(rec['pid'])}")
    try:
        cwd = os.readlink(proc / "cwd")
        env = read_head(proc / "environ", PROC_LIMIT).split(b"\0")
    except OSError:
        return "this user may not read its working folder or environment"
    if cwd != os.path.realpath(rec["home"]):
        return f"its working folder is {cwd}, not the record's {rec['home']}"
    if f"{TOKEN_VARIABLE}={rec['token']}".encode() not in env:
        return "its environment does not hold the record's token"
    return None


def started_here(rec: dict) -> bool:
    """Whether the recorded process is the SuperLink this helper started from `rec`."""
    return not_started_here(rec) is None


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
        user = user_name(holder.uid)
        return (f"{where}: held by another user, {user}: a plain `flwr run .` (with "
                f"{PORT_VARIABLE} unset) would submit your app to it, to run as {user}, and "
                f"`flwr ls` would show you {user}'s runs. Use a SuperLink of your own "
                "(eval \"$(python -m experiments.superlink start)\"), and leave theirs alone")
    what = f"PID {holder.pid}: {holder.command[:120]}" if holder.pid else "PID not known"
    if recorded is not None and holder.pid == recorded:
        return (f"{where}: yours ({what}), started by `python -m experiments.superlink "
                "start`; stop it with python -m experiments.superlink stop")
    return (f"{where}: held by a process of your user account ({what}), not a SuperLink "
            "this helper started: a plain `flwr run .` would submit your app to it. This "
            "helper never stops it; use a SuperLink of your own (eval \"$(python -m "
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


def stop(folder: Path) -> int:
    """Stop the SuperLink `start` recorded in `folder`, and only it: a recorded process that is
    not the SuperLink started from the record, and whatever listens on a port, are never
    signalled."""
    rec = read_record(folder)
    if rec is None:
        print(f"no SuperLink started by `python -m experiments.superlink start` (PID file: "
              f"{folder / 'superlink.json'})", file=sys.stderr)
        return 0
    why = not_started_here(rec)
    if why is None:
        stop_process_tree(int(rec["pid"]))
        print(f"stopped your SuperLink on 127.0.0.1:{rec['port']} (PID {rec['pid']})",
              file=sys.stderr)
    elif recorded_alive(rec):
        print(f"PID {rec['pid']} is not the SuperLink this helper started from "
              f"{folder / 'superlink.json'} ({why}): left running; the record is removed",
              file=sys.stderr)
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
    args = ap.parse_args(argv)
    folder = Path(os.path.abspath((args.dir or default_dir()).expanduser()))
    try:  # the record is trusted only in a folder no one else may write
        if args.command == "start" or os.path.lexists(folder):
            private_folder(folder, "--dir")
        if args.command == "start":
            return start(folder)
        if args.command == "stop":
            return stop(folder)
        return status(folder)
    except UnusableFile as err:
        print(f"error: {err}", file=sys.stderr)
        if args.command == "start":
            print(NOT_STARTED)
        return 2


if __name__ == "__main__":
    sys.exit(main())
