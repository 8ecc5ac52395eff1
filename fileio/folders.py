"""Folders the app writes into (run folders, a sweep's cell folders, the trackers' folders):
made where missing, and never a link, so that what is written into them stays inside the
folder the user chose (docs/security.md#files-from-outside). `private_folder`: a folder whose
files this user alone may put or replace (a node's data cache, the SuperLink helper's record)."""

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


KERNEL_FOLDERS = ("/proc", "/sys")  # the kernel's views, no place for files


def private_folder(path: Path, what: str) -> Path:
    """`path` as a folder that only this user may change: made where missing (0700, with its
    parents); UnusableFile naming `what`, the problem and the fix where it is a link, not a
    folder, one of the kernel's (/proc, /sys), another user's, or writable by its group or
    others (then anyone could put a file there that this user's process would trust)."""
    path = Path(path)
    real = os.path.realpath(path)
    kernel = next((k for k in KERNEL_FOLDERS if real == k or real.startswith(k + "/")), None)
    if kernel:
        raise UnusableFile(f"{what} {path} is in {kernel}, the kernel's view of the system, not "
                           "a folder for files: give a folder of your own")
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as err:
        raise UnusableFile(f"{what} {path} cannot be made ({err.strerror or err}): give a "
                           "folder you may write") from None
    try:
        own_folder(path)
        st = os.lstat(path)
    except UnusableFile as err:
        raise UnusableFile(f"{what}: {err}") from None
    if st.st_uid != os.geteuid():
        raise UnusableFile(f"{what} {path} belongs to another user (uid {st.st_uid}): give a "
                           "folder of your own")
    if st.st_mode & 0o022:
        raise UnusableFile(f"{what} {path} may be written by its group or others (mode "
                           f"{stat.S_IMODE(st.st_mode):o}): make it private (chmod 700 {path}), "
                           "or give a folder of your own")
    return path
