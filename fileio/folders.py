"""Folders the app writes into (run folders, a sweep's cell folders, the trackers' folders):
made where missing, and never a link, so that what is written into them stays inside the
folder the user chose (docs/security.md#files-from-outside). `trusted_folder` is the one rule
for every folder the app writes into or reads its own files back from (out-dir, run folders,
sweep cells, docs/): its own or refused. `private_folder`: a folder whose files this user alone
may put or replace (a node's data cache, the SuperLink helper's record)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
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


def folders_inside(base: Path, *names: str, make: bool = True,
                   warn: Callable[[str], None] | None = None) -> Path:
    """base/names[0]/names[1]/..., each made where missing (`make`; otherwise a missing one is
    FileNotFoundError) and each held to `trusted_folder` (no link, this user's, no one else may
    write it); each name must be one safe path component (`safe_name`). `base` itself is the
    caller's to check."""
    path = Path(base)
    for name in names:
        if safe_name(name) != name:
            raise UnusableFile(f"{name!r} cannot be a folder name inside {path}: use "
                               f"{safe_name(name)!r}")
        path = trusted_folder(path / name, make=make, warn=warn)
    return path


KERNEL_FOLDERS = ("/proc", "/sys")  # the kernel's views, no place for files
MADE_MODE = 0o755  # a folder the app makes: no one but this user may add or replace its files
_warned: set[tuple[str, str]] = set()  # (folder, why): each warning once per process


def _kernel_folder(path: Path) -> str | None:
    real = os.path.realpath(path)
    return next((k for k in KERNEL_FOLDERS if real == k or real.startswith(k + "/")), None)


def _warn_stderr(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def trusted_folder(path: Path, what: str = "folder", *, make: bool = True,
                   parents: bool = False, warn: Callable[[str], None] | None = None) -> Path:
    """THE rule for every folder the app writes into or whose files it reads back as its own
    (out-dir, run folders, a sweep's cell folders, docs/ for the generated pages): `path`,
    made where missing (`make`, mode 0755 less the umask; with its missing parents too when
    `parents`), or UnusableFile naming `what`, the problem and the fix where it is

    * in /proc or /sys (the kernel's views, no place for files),
    * a link (never followed: what the app wrote or read there would be elsewhere),
    * not a folder,
    * another user's (whoever made it chose what is in it: a planted results.json, a link),
    * writable by others without the sticky bit (anyone could replace what the app wrote).

    A folder writable by its group, or by others with the sticky bit (others may add entries
    but not replace this user's: /tmp), is used with a warning naming it (`warn`, once per
    folder and process; default: a line on stderr). Nothing is chowned or chmodded: a folder
    the app did not make is taken as it is or refused. A missing folder without `make` stays
    FileNotFoundError."""
    path = Path(path)
    label = f"{what} {path}" if what != "folder" else str(path)
    kernel = _kernel_folder(path)
    if kernel:
        raise UnusableFile(f"{label} is in {kernel}, the kernel's view of the system, not a "
                           "folder for files: give a folder of your own")
    if make:
        missing = [path]
        while parents and not os.path.lexists(missing[-1].parent) and \
                missing[-1].parent != missing[-1]:
            missing.append(missing[-1].parent)
        for folder in reversed(missing):  # (each made 0755 less the umask, as `path` is)
            try:
                folder.mkdir(mode=MADE_MODE)
            except FileExistsError:
                pass
            except FileNotFoundError:
                raise UnusableFile(f"{label} cannot be made: its parent folder {folder.parent} "
                                   "does not exist; make it first, or give another folder"
                                   ) from None
            except OSError as err:  # a file on the way, no permission, read-only, too long
                raise UnusableFile(f"{label} cannot be made ({err.strerror or err}): give a "
                                   "folder you may write") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as err:  # a file on the way (ENOTDIR), a name too long, no permission
        raise UnusableFile(f"{label} cannot be used ({err.strerror or err}): give a folder you "
                           "may write") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnusableFile(f"{label} is a link (to {os.readlink(path)}), not a folder: what the "
                           "app writes or reads there would be elsewhere. Remove the link, or "
                           "choose another name or folder")
    if not stat.S_ISDIR(st.st_mode):
        raise UnusableFile(f"{label} is {kind_of(st.st_mode)}, not a folder: remove it, or "
                           "choose another name or folder")
    if st.st_uid != os.geteuid():
        raise UnusableFile(f"{label} belongs to another user (uid {st.st_uid}), who chose what "
                           "is in it: the app neither trusts nor writes into it. Give a folder "
                           "of your own (or remove that one)")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002 and not mode & stat.S_ISVTX:
        raise UnusableFile(f"{label} may be written by every user (mode {mode:o}): anyone could "
                           f"replace what the app writes there. Make it yours alone (chmod o-w "
                           f"{path}), or give another folder")
    why = ("may be written by every user (sticky: others may add files, not replace yours)"
           if mode & 0o002 else "may be written by its group" if mode & 0o020 else "")
    if why and (str(path), why) not in _warned:
        _warned.add((str(path), why))
        (warn or _warn_stderr)(f"{label} {why} (mode {mode:o}): they could put files the app "
                               f"reads there; chmod go-w {path} to keep them out")
    return path


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
