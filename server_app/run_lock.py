"""One run per run folder: the ServerApp process holds `<run folder>/run.lock` while it runs.

The lock is `fcntl.flock` on that file, held through an open file descriptor: the ServerApp
releases it when its `main` returns or raises, and the kernel drops it when the process ends in
any other way (killed, even with SIGKILL), so a lock file left by a dead run never blocks the
next one. So it holds in simulation and deployment (one ServerApp process per run) and in
in-process runs (several runs in one process: two descriptors of one file exclude each other
too). While held, the file says who holds it (process, host, Flower run, since when) for the
error a second run gets. The descriptor is not inherited by programs the ServerApp starts
(close-on-exec). The file is opened by `fileio.in_place.open_lock_file`: never through a link,
and only as a regular file of one name, so writing the lock changes no other file.

Where `fcntl` is missing (Windows) runs are not locked. On a network file system the lock is as
good as that file system's locks.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks
    fcntl = None

from fileio.errors import UnusableFile
from fileio.in_place import open_lock_file
from fileio.reading import read_bounded
from run_config import ConfigError

LOCK_NAME = "run.lock"


class RunFolderBusy(ConfigError):
    """Another live run holds the run folder."""


class RunLock:
    """The held lock of one run folder; `release()` (idempotent) or the process's end frees it."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def hold_run_dir(run_dir: Path, flower_run_id: int | None, key: str, value: str) -> RunLock:
    """Lock `run_dir` for this process, or RunFolderBusy naming the run-config `key` = `value`
    that chose the folder, the run holding it and the fix."""
    path = Path(run_dir) / LOCK_NAME
    if fcntl is None:  # pragma: no cover
        return RunLock(path, None)
    try:
        fd = open_lock_file(path)
    except UnusableFile as err:
        raise ConfigError(f"run config '{key}' = '{value}': {err} (it may have been planted: "
                          "check who else writes in that folder).") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held by a live process
        os.close(fd)
        holder = holder_of(path) or "another process"
        fix = ("wait for it to end (python -m reporting.status <folder>) or stop it before "
               "resuming it; for a new run instead, drop resume" if key == "resume" else
               "wait for it to end (python -m reporting.status <folder>) or stop it, or give "
               "this run another run-name (or none: a new folder)")
        raise RunFolderBusy(
            f"run config '{key}' = '{value}': the run folder {run_dir} is in use by another run "
            f"({holder}); two runs in one folder would overwrite each other's results. Either "
            f"{fix}.") from None
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()} on {socket.gethostname()}, Flower run "
                 f"{flower_run_id}, since {since}\n".encode())
    return RunLock(path, fd)


def holder_of(lock_file: Path) -> str:
    """What the holder wrote into the lock file ('' when unreadable)."""
    try:
        text = read_bounded(Path(lock_file), 4096).decode(errors="replace")
    except OSError:
        return ""
    return " ".join(text.split())[:300]
