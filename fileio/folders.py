"""Folders the app writes into (run folders, a sweep's cell folders, the trackers' folders):
made where missing, and never a link, so that what is written into them stays inside the
folder the user chose (docs/security.md#files-from-outside)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import UnusableFile
from .names import safe_name
from .reading import kind_of


def own_folder(path: Path) -> Path:
    """`path` when it is a folder itself, not a link to one; UnusableFile naming it otherwise."""
    path = Path(path)
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise UnusableFile(f"{path} is a link (to {os.readlink(path)}), not a folder: what the "
                           "app writes there would land elsewhere. Remove the link, or choose "
                           "another name or folder")
    if not stat.S_ISDIR(mode):
        raise UnusableFile(f"{path} is {kind_of(mode)}, not a folder: remove it, or choose "
                           "another name or folder")
    return path


def folders_inside(base: Path, *names: str) -> Path:
    """base/names[0]/names[1]/..., each made where missing and none of them a link (`own_folder`);
    each name must be one safe path component (`safe_name`)."""
    path = Path(base)
    for name in names:
        if safe_name(name) != name:
            raise UnusableFile(f"{name!r} cannot be a folder name inside {path}: use "
                               f"{safe_name(name)!r}")
        path = path / name
        try:
            path.mkdir()
        except FileExistsError:
            pass
        own_folder(path)
    return path
