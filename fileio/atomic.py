"""Write a file all or nothing, and a checksum header that tells a damaged file (flipped bytes,
cut short) from a good one (client state, checkpoints).

`write_atomic` is the one writer of every file the app writes (results, metrics, configs,
checkpoints, plots, the final model, client state, the partition cache, FedVARP's rows): the
bytes go to a temporary file of a unique name beside the target (created exclusively, never
through a link), are flushed to disk, and the file is renamed over the target, whose folder is
then flushed too. A reader, or a crash while writing, sees the old file or the whole new one; a
link at the target's name is replaced, never written through.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


def temporary_name(path: Path) -> Path:
    """`.<name>.<pid>.<random>.tmp` beside `path`: unique per writer, so that two processes (or
    threads) writing the same file never share one; the pid tells a dead writer's leftover
    (`remove_stale_tmp` of the partition cache)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")


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
    tmp = temporary_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, mode)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists() or tmp.is_symlink():
            tmp.unlink()
    _sync_folder(path.parent)


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o666) -> None:
    write_atomic(path, lambda f: f.write(data), mode)


def write_text_atomic(path: Path, text: str, mode: int = 0o666) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_torch_atomic(path: Path, obj, mode: int = 0o666) -> None:
    """`torch.save(obj)` to `path`, all or nothing (torch is imported by the caller's code)."""
    import torch

    write_atomic(path, lambda f: torch.save(obj, f), mode)


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
