"""Files the app writes in place rather than all at once (a run's log as it goes, the run lock):
never opened through a link, and only as regular files (docs/security.md#files-from-outside).
Every other file goes through `atomic.write_atomic`."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TextIO

from .errors import UnusableFile
from .reading import kind_of

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fresh_log(path: Path) -> TextIO:
    """A new, empty text file at `path` to write as one goes (a log): whatever has that name is
    removed first (a link is removed, never followed), then the file is created exclusively."""
    path = Path(path)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise UnusableFile(f"{path} is a folder: remove it (the log is written there)") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666)
    return os.fdopen(fd, "w", encoding="utf-8")


def open_lock_file(path: Path) -> int:
    """A descriptor of the regular file `path` for reading and writing, created where missing; a
    link, a hard link (a second name of another file) or anything but a regular file at `path`
    is refused, so that writing the lock never changes another file."""
    flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if os.path.islink(path):
            raise UnusableFile(f"{path} is a link (to {os.readlink(path)}): the run lock is never "
                               "written through one. Remove the link") from None
        raise
    st = os.fstat(fd)
    why = (f"is {kind_of(st.st_mode)}, not a regular file" if not stat.S_ISREG(st.st_mode) else
           f"has {st.st_nlink} names (a hard link of another file)" if st.st_nlink != 1 else "")
    if why:
        os.close(fd)
        raise UnusableFile(f"{path} {why}: the run lock is written into it. Remove it")
    os.set_blocking(fd, True)
    return fd
