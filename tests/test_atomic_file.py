"""The one atomic write (fileio.atomic) as the client state and the checkpoint use it: the
client's state files are owner-only (0600, folders 0700) whatever the umask, a checkpoint gets the
usual mode (0666 less the umask), and a write that dies half way leaves the old file and no
temporary file."""

import os
import stat
from contextlib import contextmanager

import pytest
import torch

from client_app.client_state_store import DiskVersions
from fileio.atomic import write_atomic
from server_app.checkpoint import load_checkpoint, save_checkpoint


@contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_client_state_files_are_owner_only_whatever_the_umask(tmp_path):
    folder = tmp_path / "client-state" / ("0" * 32) / "p3"
    state = {"c": torch.arange(4.0)}
    with umask(0):  # nothing masked: the mode is the one the file is created with
        DiskVersions(folder, "0" * 32, 3).write("scaffold-c", 2, state)
    path = folder / "scaffold-c.r2.pt"
    assert mode(path) == 0o600
    assert [mode(f) for f in (folder, folder.parent, folder.parent.parent)] == [0o700] * 3
    assert torch.equal(DiskVersions(folder, "0" * 32, 3).read("scaffold-c", 2)["c"], state["c"])


def test_a_checkpoint_has_the_usual_mode(tmp_path):
    with umask(0o022):
        path = save_checkpoint(tmp_path, 1, {}, {}, [])
    assert mode(path) == 0o644 and load_checkpoint(path)["round"] == 1


def test_a_write_that_dies_half_way_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.pt"
    write_atomic(path, lambda f: f.write(b"old"), mode=0o600)

    def dies_half_way(f):
        f.write(b"half of the new")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, dies_half_way, mode=0o600)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["state.pt"]
    write_atomic(path, lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["state.pt"]


def test_a_name_near_the_limit_is_written_and_no_temporary_file_is_left(tmp_path):
    """The temporary name adds about 22 bytes: a target name of 250 bytes still gets one, and
    a name the system refuses is an error naming the file, with nothing left behind."""
    from fileio.errors import UnusableFile

    path = tmp_path / ("r" * 250)
    write_atomic(path, lambda f: f.write(b"ok"))
    assert path.read_bytes() == b"ok" and os.listdir(tmp_path) == [path.name]
    with pytest.raises(UnusableFile, match="cannot write .*File name too long"):
        write_atomic(tmp_path / ("r" * 300), lambda f: f.write(b"no"))
    assert os.listdir(tmp_path) == [path.name]


def test_a_dead_writers_temporary_files_are_removed_at_the_next_write_there(tmp_path):
    """Only names of the writer's own form, whose process is gone or which are old; a live
    writer's, a person's own .tmp file and a link are kept."""
    import subprocess
    import sys
    import time

    from fileio import atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    gone = tmp_path / f".results.json.{dead}.0a1b2c3d.tmp"  # its process has ended
    old = tmp_path / f".m.pt.{os.getpid()}.00ff00ff.tmp"  # this process's, 20 minutes old
    live = tmp_path / f".m.pt.{os.getpid()}.11ff11ff.tmp"  # this process's, just made
    mine = tmp_path / "notes.tmp"  # a person's own file
    link = tmp_path / f".x.{dead}.22ff22ff.tmp"
    for f in (gone, old, live, mine):
        f.write_bytes(b"partial")
    link.symlink_to(mine)
    long_ago = time.time() - 1200
    os.utime(old, (long_ago, long_ago))
    os.utime(mine, (long_ago, long_ago))
    atomic._swept.discard(str(tmp_path))
    write_atomic(tmp_path / "results.json", lambda f: f.write(b"{}"))
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["results.json", live.name, mine.name, link.name])


# --- issue 50: a full disk under torch's writer, /proc files read bounded, private folders ---
@pytest.mark.parametrize("after", [0, 100, 10_000])
def test_a_full_disk_under_torch_save_is_the_writers_error_naming_the_fix(tmp_path,
                                                                          disk_full_after, after):
    """torch's writer turns an OSError of the file's write into a bare RuntimeError once it
    has written something: write_torch_atomic gives the OSError back (an UnusableFile naming
    the folder and the fix), and leaves no file."""
    import fileio.atomic as atomic
    from fileio.errors import UnusableFile

    disk_full_after(after)
    with pytest.raises(UnusableFile, match=r"No space left on device: free space on the disk "
                                           rf"that holds {tmp_path}"):
        atomic.write_torch_atomic(tmp_path / "t.pt", {"x": torch.zeros(50_000)})
    assert list(tmp_path.iterdir()) == []


class _Unsaveable:
    def __reduce__(self):
        raise RuntimeError("a bug in what is saved")


def test_a_bug_in_what_torch_saves_stays_its_own_error(tmp_path):
    """Only a write's OSError is turned back: torch's other RuntimeErrors are not a full
    disk."""
    from fileio.atomic import write_torch_atomic

    with pytest.raises(RuntimeError, match="a bug in what is saved"):
        write_torch_atomic(tmp_path / "t.pt", {"x": _Unsaveable()})
    assert list(tmp_path.iterdir()) == []


def test_read_head_reads_a_proc_file_whose_size_reads_as_zero():
    from fileio.errors import UnusableFile
    from fileio.reading import read_bounded, read_head

    path = "/proc/self/cmdline"
    if not os.path.exists(path):
        pytest.skip("no /proc")
    assert os.stat(path).st_size == 0
    with open(path, "rb") as f:
        whole = f.read()
    assert whole and read_head(path, 1 << 20) == whole and read_head(path, 3) == whole[:3]
    assert read_head(path, 0) == b""
    with pytest.raises(UnusableFile, match="grew while it was read"):  # why read_head exists
        read_bounded(path, 1 << 20)


def test_read_head_refuses_a_link_and_a_pipe(tmp_path):
    from fileio.errors import UnusableFile
    from fileio.reading import read_head

    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UnusableFile, match="is a link"):
        read_head(tmp_path / "link", 10)
    with pytest.raises(UnusableFile, match=r"is a named pipe \(FIFO\)"):
        read_head(tmp_path / "pipe", 10)  # (opened without blocking)
    assert read_head(tmp_path / "f", 2) == b"ab"


@pytest.mark.parametrize("mode, refused", [
    (0o700, None), (0o755, None), (0o710, None), (0o720, "mode 720"), (0o702, "mode 702"),
    (0o777, "mode 777"), (0o1777, "mode 1777"), (0o2770, "mode 2770"),
])
def test_private_folder_refuses_a_folder_others_may_write(tmp_path, mode, refused):
    from fileio.errors import UnusableFile
    from fileio.folders import private_folder

    folder = tmp_path / "f"
    folder.mkdir()
    folder.chmod(mode)
    if refused is None:
        assert private_folder(folder, "the folder") == folder
    else:
        with pytest.raises(UnusableFile, match=rf"the folder {folder} may be written by its "
                                               rf"group or others \({refused}\).*chmod 700"):
            private_folder(folder, "the folder")


def test_private_folder_makes_a_missing_one_0700_with_its_parents(tmp_path):
    from fileio.folders import private_folder

    old = os.umask(0)
    try:
        made = private_folder(tmp_path / "a" / "b", "the folder")
    finally:
        os.umask(old)
    assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o700
