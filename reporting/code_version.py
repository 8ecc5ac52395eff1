"""The version of the code a run ran on (`code_version`), recorded in its results.json as
"code-version" (docs/results.md#the-code-a-run-ran-on) and compared by the sweep's table.

* In a git checkout: the commit of HEAD, read from `.git` itself (HEAD, the loose ref, or
  packed-refs; a worktree's `.git` file is followed to its git folder), bounded and never
  through a link, without running git. Whether the tracked files differ from it (`dirty`) and
  the SHA-256 of that difference (`diff-sha256`: two dirty runs of one commit are one version
  only when their changes are the same) come from `git diff HEAD --no-ext-diff --no-textconv`,
  run with a timeout and only in a folder of this user's own (fileio.folders.trusted_folder:
  git reads that folder's config, and whoever may write it chooses what git runs). No git, a
  refused folder, a timeout: `dirty` is null (unknown), never a failed run.
* Elsewhere (the FAB a SuperLink installed): `files-sha256`, the SHA-256 of the app's `.py`
  and `.toml` files (their paths and bytes, in order; hidden folders and `__pycache__`
  skipped, no link followed), bounded in files and bytes (null past the bounds), only in an
  app's folder (one holding pyproject.toml, as a checkout and a FAB do; not site-packages,
  where a non-editable install puts this app's packages among every other).

`version_label` is the one text of a version: the commit, `<commit>+dirty.<16 hex>`,
`<commit>+dirty?` (git could not say), `files.<16 hex>`, or `unknown` (nothing recorded: a run
of an older app). Two cells are of one version when their labels are equal.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

from fileio.folders import trusted_folder
from fileio.reading import read_bounded, read_text_bounded

APP_ROOT = Path(__file__).resolve().parents[1]  # this app: its repository, or its FAB's folder
GIT_TIMEOUT = 20  # seconds for `git diff HEAD`
REF_LIMIT = 64 * 1024  # HEAD, a loose ref, `.git` as a file, commondir
PACKED_REFS_LIMIT = 16 * 2**20
DIFF_LIMIT = 256 * 2**20  # bytes of `git diff` hashed; past it dirty stays true, its hash null
HASH_FILES_LIMIT = 20_000  # entries walked for files-sha256
HASH_BYTES_LIMIT = 128 * 2**20
HASHED_SUFFIXES = (".py", ".toml")
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 repositories
SHA256 = re.compile(r"[0-9a-f]{64}")
REF_NAME = re.compile(r"refs/[A-Za-z0-9._/+-]+")
KEYS = ("commit", "dirty", "diff-sha256", "files-sha256")
UNKNOWN = "unknown"


def code_version(folder: Path = APP_ROOT) -> dict[str, Any]:
    """{'commit', 'dirty', 'diff-sha256', 'files-sha256'} of the code in `folder` (module
    docstring); a value that cannot be known is None."""
    folder = Path(folder)
    out: dict[str, Any] = dict.fromkeys(KEYS)
    git_dir = _git_dir(folder)
    out["commit"] = _head_commit(git_dir) if git_dir else None
    if out["commit"]:
        out["dirty"], out["diff-sha256"] = _diff(folder, git_dir)
    elif (folder / "pyproject.toml").is_file():
        out["files-sha256"] = files_sha256(folder)
    return out


def version_label(version: Any) -> str:
    """The one text of a recorded version (module docstring); `unknown` for None."""
    if not isinstance(version, dict):
        return UNKNOWN
    commit = version.get("commit")
    if commit:
        if version.get("dirty") is None:
            return f"{commit}+dirty?"
        if version["dirty"]:
            return f"{commit}+dirty.{(version.get('diff-sha256') or '?')[:16]}"
        return commit
    if version.get("files-sha256"):
        return f"files.{version['files-sha256'][:16]}"
    return UNKNOWN


def short_label(label: str) -> str:
    """A label for a message: the commit's first 12 hex digits and what follows it."""
    return label[:12] + label[40:] if OBJECT_ID.match(label) and len(label) >= 40 else label


def version_problem(version: Any) -> str | None:
    """What makes `version` no recorded code version (None: nothing): an object of the four
    keys only, the commit 40 or 64 lowercase hex digits or null, dirty true / false / null, the
    hashes 64 hex digits or null."""
    if not isinstance(version, dict):
        return f"{version!r}, not an object"
    extra = sorted(set(version) - set(KEYS))
    if extra:
        return f"has key(s) {', '.join(map(repr, extra))} (only {', '.join(KEYS)})"
    commit = version.get("commit")
    if commit is not None and not (isinstance(commit, str) and OBJECT_ID.fullmatch(commit)):
        return f"'commit' is {commit!r}, not a commit id (40 or 64 hex digits) or null"
    if version.get("dirty") is not None and not isinstance(version["dirty"], bool):
        return f"'dirty' is {version['dirty']!r}, not true, false or null"
    for key in ("diff-sha256", "files-sha256"):
        value = version.get(key)
        if value is not None and not (isinstance(value, str) and SHA256.fullmatch(value)):
            return f"'{key}' is {value!r}, not 64 hex digits or null"
    return None


def _read_small(path: Path, limit: int = REF_LIMIT) -> str | None:
    """A small git file's text, stripped: bounded, no link followed; None when it cannot be."""
    try:
        return read_text_bounded(path, limit).strip()
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _git_dir(folder: Path) -> Path | None:
    """`folder`'s git folder: `.git` when it is a folder, the folder a `.git` file names (a
    worktree), None otherwise (or where `.git` is a link)."""
    dot_git = folder / ".git"
    try:
        mode = os.lstat(dot_git).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return dot_git
    if not stat.S_ISREG(mode):
        return None
    text = _read_small(dot_git)
    if not text or not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:"):].strip())
    return target if target.is_absolute() else folder / target


def _common_dir(git_dir: Path) -> Path:
    """The git folder of the refs and config: a worktree's `commondir`, else `git_dir`."""
    pointer = _read_small(git_dir / "commondir")
    if not pointer:
        return git_dir
    return Path(pointer) if Path(pointer).is_absolute() else git_dir / pointer


def _head_commit(git_dir: Path) -> str | None:
    """The commit HEAD names: detached, a loose ref, or a line of packed-refs (in the common
    git folder for a worktree); None when none of them says."""
    head = _read_small(git_dir / "HEAD")
    if head is None:
        return None
    if OBJECT_ID.fullmatch(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head[len("ref:"):].strip()
    if not REF_NAME.fullmatch(ref) or ".." in ref.split("/") or "//" in ref:
        return None
    common = _common_dir(git_dir)
    for where in dict.fromkeys((git_dir, common)):
        loose = _read_small(where / ref)
        if loose and OBJECT_ID.fullmatch(loose):
            return loose
    packed = _read_small(common / "packed-refs", PACKED_REFS_LIMIT) or ""
    for line in packed.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and OBJECT_ID.fullmatch(parts[0]):
            return parts[0]
    return None


def _diff(folder: Path, git_dir: Path) -> tuple[bool | None, str | None]:
    """(dirty, diff-sha256) from `git diff HEAD` in `folder`; (None, None) where git is missing,
    the folder or its git folders (whose config git reads) are not this user's own, git fails
    or takes longer than GIT_TIMEOUT."""
    git = shutil.which("git")
    if git is None:
        return None, None
    try:
        for where in dict.fromkeys((folder, git_dir, _common_dir(git_dir))):
            trusted_folder(where, "a git folder", make=False, warn=lambda text: None)
    except OSError:
        return None, None
    cmd = [git, "-C", str(folder), "-c", "core.fsmonitor=false", "diff", "HEAD",
           "--no-ext-diff", "--no-textconv", "--binary", "--no-color"]
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0",
           "GIT_PAGER": "cat", "LC_ALL": "C"}
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=GIT_TIMEOUT, env=env,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if done.returncode != 0:
        return None, None
    if not done.stdout:
        return False, None
    if len(done.stdout) > DIFF_LIMIT:
        return True, None
    return True, hashlib.sha256(done.stdout).hexdigest()


def files_sha256(folder: Path) -> str | None:
    """SHA-256 of the `.py` and `.toml` files under `folder` (module docstring); None when the
    folder cannot be read or is past HASH_FILES_LIMIT entries or HASH_BYTES_LIMIT bytes."""
    digest, entries, size = hashlib.sha256(), 0, 0
    todo = [Path(folder)]
    files: list[Path] = []
    try:
        while todo:
            here = todo.pop()
            with os.scandir(here) as listing:
                for entry in listing:
                    entries += 1
                    if entries > HASH_FILES_LIMIT:
                        return None
                    if entry.name.startswith(".") or entry.name == "__pycache__":
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False) and \
                            entry.name.endswith(HASHED_SUFFIXES):
                        files.append(Path(entry.path))
        for path in sorted(files, key=lambda p: p.relative_to(folder).as_posix()):
            data = read_bounded(path, HASH_BYTES_LIMIT - size)
            size += len(data)
            name = path.relative_to(folder).as_posix().encode()
            digest.update(b"%d:%s%d:" % (len(name), name, len(data)) + data)
    except OSError:
        return None
    return digest.hexdigest()
