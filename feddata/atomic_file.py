"""Write a file all or nothing (temporary file, fsync, rename): client state and checkpoints."""

from __future__ import annotations

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
