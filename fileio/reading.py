"""Read back a file the app or a person wrote, bounded (docs/security.md#files-from-outside):
regular files only (a named pipe would block the reader, a device would never end), no link
followed unless the caller names the file itself, a size limit checked before anything is
read, text as UTF-8 and JSON as strict JSON. Every refusal is an `UnusableFile` naming the file
and the fix; a missing file stays `FileNotFoundError`."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from .errors import UnusableFile

# a file a person writes and the app reads whole: a run-config, set-up or sweep file (the
# shipped ones are a few KB)
CONFIG_FILE_LIMIT = 2**20

KINDS = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFSOCK: "a socket",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFDIR: "a folder", stat.S_IFLNK: "a link", stat.S_IFREG: "a regular file"}


def kind_of(mode: int) -> str:
    """'a named pipe (FIFO)', 'a folder', 'a regular file', ... for a stat mode."""
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: Path, *, follow_links: bool = False) -> BinaryIO:
    """`path` opened for reading when it is a regular file: opened without blocking (a named
    pipe with no writer would wait for ever) and, unless `follow_links`, without following a
    link at its name; UnusableFile otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise UnusableFile(f"{path} is a link (to {os.readlink(path)}), and links are not "
                               "followed there: put the file itself in its place") from None
        if err.errno == errno.ENXIO:  # a socket
            raise UnusableFile(f"{path} is a socket, not a regular file: remove it") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnusableFile(f"{path} is {kind_of(mode)}, not a regular file: remove it, or "
                               "put the file that belongs there in its place")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _size_text(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"


def read_bounded(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The bytes of the regular file `path` (`open_regular`), refused before reading when it
    holds more than `limit` bytes."""
    with open_regular(path, follow_links=follow_links) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise UnusableFile(f"{path} is {_size_text(size)}, more than the "
                               f"{_size_text(limit)} such a file may have: it is not one this "
                               "app wrote; remove it or give the right file")
        data = f.read(size)
        if f.read(1):  # (it grew while read)
            raise UnusableFile(f"{path} grew while it was read: give a file that is not being "
                               "written")
    return data


def read_tail(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The last `limit` bytes (at most) of the regular file `path` (a log)."""
    with open_regular(path, follow_links=follow_links) as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit)


def read_head(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The first `limit` bytes (at most) of the regular file `path`: also of a file whose size
    the system does not report (/proc/<pid>/cmdline, whose size reads as 0)."""
    with open_regular(path, follow_links=follow_links) as f:
        return f.read(limit)


def read_text_bounded(path: Path, limit: int, *, follow_links: bool = False) -> str:
    """`read_bounded` decoded as UTF-8; UnusableFile naming the first bad byte otherwise."""
    data = read_bounded(path, limit, follow_links=follow_links)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnusableFile(f"{path} is not UTF-8 text (byte {err.start} is {data[err.start]:#04x})"
                           ": save it as UTF-8") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def read_json_bounded(path: Path, limit: int, *, follow_links: bool = False) -> Any:
    """`read_text_bounded` parsed as strict JSON (no NaN or Infinity); UnusableFile saying where
    it is not JSON otherwise."""
    text = read_text_bounded(path, limit, follow_links=follow_links)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # (also numbers of too many digits, deep nests)
        raise UnusableFile(f"{path} is not valid JSON ({str(err) or type(err).__name__}): it "
                           "is not one this app wrote, or it was damaged; remove it or give the "
                           "right file") from None


def memory_bytes() -> int:
    """This machine's memory: the most a file that is read whole into memory can hold (a larger
    checkpoint could not be loaded anyway)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - no sysconf
        return 2**40
