"""Write a file all or nothing, and a checksum header that tells a damaged file (flipped bytes,
cut short) from a good one (client state, checkpoints).

`write_atomic` is the one writer of every file the app writes (results, metrics, configs,
checkpoints, plots, the final model, client state, the partition cache, FedVARP's rows): the
bytes go to a temporary file of a unique name beside the target (created exclusively, never
through a link), are flushed to disk, and the file is renamed over the target, whose folder is
then flushed too. A reader, or a crash while writing, sees the old file or the whole new one; a
link at the target's name is replaced, never written through. The temporary files a killed
writer left are removed at the first write into their folder (`remove_stale_tmp`). A write
that fails (a full disk, a read-only file system, no permission) is an `UnusableFile` naming
the file, the folder and the fix.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import UnusableFile

TMP_SUFFIX = ".tmp"
# `.<name>.<pid>.<8 hex>.tmp`: only names of this form are ever removed as leftovers
_TMP_NAME = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$", re.DOTALL)
_NAME_BYTES = 200  # a longer target name is shortened in the temporary one (255 is the limit)
STALE_TMP_SECONDS = 600.0  # a write takes seconds; an older temporary file is a dead write's
_swept: set[str] = set()  # the folders whose leftovers this process has removed


def temporary_name(path: Path) -> Path:
    """`.<name>.<pid>.<random>.tmp` beside `path`: unique per writer, so that two processes (or
    threads) writing the same file never share one; the pid tells a dead writer's leftover
    (`remove_stale_tmp`). A name too long to take the 22 more bytes is shortened to a hash."""
    name = path.name
    if len(os.fsencode(name)) > _NAME_BYTES:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    return path.with_name(f".{name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def _writer_gone(tmp: Path) -> bool:
    """Whether the process named in a temporary name is not running here."""
    match = _TMP_NAME.match(tmp.name)
    pid = int(match.group(1)) if match else os.getpid()
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def remove_stale_tmp(folder: Path) -> list[Path]:
    """Delete the temporary files that killed writers left in `folder` (names of
    `temporary_name`'s form only, whose process is gone or which are older than
    STALE_TMP_SECONDS); returns them. A file that is not a regular file is left alone."""
    removed = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.endswith(TMP_SUFFIX) or not _TMP_NAME.match(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue
            if _writer_gone(Path(entry.path)) or now - st.st_mtime > STALE_TMP_SECONDS:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # another process removed or renamed it, or no permission
            pass
    return removed


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the rename) to disk, where the system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, write: Callable[[BinaryIO], None], mode: int = 0o666) -> None:
    """Call `write(f)` on a new temporary file beside `path` (created with `mode`, less the
    umask), flush it to disk, rename it over `path` and flush the folder: a reader, or a crash
    while writing, sees the old file or the whole new one. The temporary file is removed on
    failure."""
    path = Path(path)
    if str(path.parent) not in _swept:  # once per folder and process: a scan per write is not
        _swept.add(str(path.parent))  # needed, a dead writer's leftovers do not pile up
        remove_stale_tmp(path.parent)
    tmp = temporary_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    created = False
    try:
        fd = os.open(tmp, flags, mode)
        created = True
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except UnusableFile:
        raise
    except OSError as err:
        raise UnusableFile(f"cannot write {path}: {err.strerror or err}: {_fix(err, path)}"
                           ) from None
    finally:
        if created:
            try:
                os.unlink(tmp)  # (after the rename: gone already)
            except OSError:
                pass
    _sync_folder(path.parent)


def _fix(err: OSError, path: Path) -> str:
    """What to do about a write that failed with `err`."""
    folder = path.parent
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return f"free space on the disk that holds {folder} (or raise your quota there)"
    if err.errno == errno.EROFS:
        return f"{folder} is on a read-only file system: write to a folder on another one"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"this process may not write in {folder}: give it write permission there"
    if err.errno == errno.EISDIR:
        return "a folder of that name is in the way: remove it"
    return f"check {folder} (does it exist, can this process write there?)"


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o666) -> None:
    write_atomic(path, lambda f: f.write(data), mode)


def write_text_atomic(path: Path, text: str, mode: int = 0o666) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode)


class _Writes:
    """A file torch.save writes to that keeps the OSError a write raised (a full disk): torch's
    writer turns it into a RuntimeError without it."""

    def __init__(self, f: BinaryIO):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.f.flush()


def write_torch_atomic(path: Path, obj, mode: int = 0o666) -> None:
    """`torch.save(obj)` to `path`, all or nothing (torch is imported by the caller's code); a
    write that fails is an UnusableFile as in `write_atomic`."""
    import torch

    def save(f: BinaryIO) -> None:
        writes = _Writes(f)
        try:
            torch.save(obj, writes)
        except RuntimeError:
            if writes.error is None:
                raise
            raise writes.error from None

    write_atomic(path, save, mode)


def write_torch_checksummed(path: Path, prefix: bytes, obj, mode: int = 0o666) -> None:
    """`torch.save(obj)` to `path`, all or nothing, after its `checksum_line(prefix, ...)`
    (checkpoints, client state): read back with `without_checksum`."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getbuffer()
    write_atomic(path, lambda f: f.writelines((checksum_line(prefix, data), data)), mode)


def checksum_line(prefix: bytes, data) -> bytes:
    """The first line of a file whose rest is `data` (bytes or a buffer): `prefix`, the SHA-256
    of `data` in hex, a newline. Written as `f.writelines((checksum_line(prefix, data), data))`."""
    return prefix + hashlib.sha256(data).hexdigest().encode() + b"\n"


def without_checksum(prefix: bytes, raw: bytes) -> bytes | None:
    """The rest of a file that starts with its `checksum_line(prefix, rest)`; None when `raw`
    does not start with `prefix` or its rest does not match the SHA-256 it was written with."""
    if not raw.startswith(prefix):
        return None
    header, _, data = raw.partition(b"\n")
    return data if hashlib.sha256(data).hexdigest().encode() == header[len(prefix):] else None
