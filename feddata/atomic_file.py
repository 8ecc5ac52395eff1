"""Write a file all or nothing (temporary file, fsync, rename), and a checksum header that tells
a damaged file (flipped bytes, cut short) from a good one: client state and checkpoints."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path, write: Callable[[BinaryIO], None], mode: int = 0o666) -> None:
    """Call `write(f)` on `.<name>.<pid>.tmp` beside `path` (created with `mode`, less the
    umask), flush it to disk, then rename it over `path`: a reader, or a crash while writing,
    sees the old file or the whole new one. The temporary file is removed on failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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
