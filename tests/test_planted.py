"""Nothing pasted, nothing planted (issue 58, docs/security.md#run-folders-and-results-read-back):
the sweep, its resume and the generated pages against folders another user made or may write,
numbers out of range in the files they read back, sweep files that make millions of cells,
bad arguments and folders given to every `python -m` entry point of theirs, and user text
written into a page. One fault at a time, each side of each boundary; expected outcomes are
written here by hand (modes, uids, messages, rendered HTML by markdown-it, not by our code).

The cases with another user's folder chown it to `nobody` (65534): they need root, and are
skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from entry_points import HOW, run_module

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
BASE_SWEEP = "run-config: {num-server-rounds: 1, local-iterations: 1}\nmethods: {fedavg: {}}\n"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- 1. one rule for every folder: trusted_folder ---------------------------------------------
def _plain(tmp, mode=0o755):
    folder = tmp / "f"
    folder.mkdir()
    folder.chmod(mode)
    return folder


def _link(tmp):
    (tmp / "real").mkdir()
    os.symlink(tmp / "real", tmp / "f")
    return tmp / "f"


def _file(tmp):
    (tmp / "f").write_text("x")
    return tmp / "f"


def _others(tmp, mode=0o755):
    folder = _plain(tmp, mode)
    os.chown(folder, NOBODY, NOBODY)
    return folder


# (make the folder, refused: a pattern of the message or None, warned: a pattern or None)
FOLDERS = {
    "own-0755": (lambda t: _plain(t, 0o755), None, None),
    "own-0700": (lambda t: _plain(t, 0o700), None, None),
    "own-0775-group-may-write": (lambda t: _plain(t, 0o775), None, r"may be written by its group"),
    "own-0757-every-user-may-write": (lambda t: _plain(t, 0o757), r"may be written by every user "
                                      r"\(mode 757\).*chmod o-w", None),
    "own-0777": (lambda t: _plain(t, 0o777), r"may be written by every user \(mode 777\)", None),
    "own-1777-sticky": (lambda t: _plain(t, 0o1777), None, r"every user \(sticky"),
    "link-to-own": (_link, r"is a link \(to .*real\), not a folder.*Remove the link", None),
    "regular-file": (_file, r"is a regular file, not a folder", None),
    "in-proc": (lambda t: Path("/proc/self"), r"is in /proc, the kernel's view", None),
    "others-0755": (lambda t: _others(t, 0o755), r"belongs to another user \(uid 65534\)", None),
    "others-0777-planted": (lambda t: _others(t, 0o777), r"belongs to another user \(uid 65534\)",
                            None),
}


@pytest.mark.parametrize("case", FOLDERS)
def test_a_folder_is_its_own_or_refused_and_nothing_is_chmodded(tmp_path, case):
    from fileio.errors import UnusableFile
    from fileio.folders import trusted_folder

    make, refused, warned = FOLDERS[case]
    if case.startswith("others") and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    folder = make(tmp_path)
    before = os.lstat(folder)
    said = []
    if refused:
        with pytest.raises(UnusableFile, match=refused):
            trusted_folder(folder, warn=said.append)
    else:
        assert trusted_folder(folder, warn=said.append) == folder
    assert len(said) == (1 if warned else 0), said
    if warned:
        assert re.search(warned, said[0]) and str(folder) in said[0], said
        trusted_folder(folder, warn=said.append)
        assert len(said) == 1  # once per folder and process
    after = os.lstat(folder)  # nothing chowned or chmodded that the app did not make
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid,
                                                           before.st_gid)


def test_a_folder_the_app_makes_is_0755_whatever_the_umask_and_parents_too(tmp_path):
    from fileio.folders import trusted_folder

    old = os.umask(0)
    try:
        made = trusted_folder(tmp_path / "a" / "b" / "c", parents=True)
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert mode_of(folder) == 0o755, oct(mode_of(folder))


def test_a_missing_folder_is_not_made_when_only_read_and_a_file_on_the_way_is_named(tmp_path):
    from fileio.errors import UnusableFile
    from fileio.folders import folders_inside, trusted_folder

    with pytest.raises(FileNotFoundError):
        trusted_folder(tmp_path / "nothing", make=False)
    assert not (tmp_path / "nothing").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnusableFile, match=r"cannot be made \(Not a directory\)"):
        trusted_folder(tmp_path / "file" / "sub", parents=True)
    with pytest.raises(UnusableFile, match=r"cannot be used \(Not a directory\)"):
        trusted_folder(tmp_path / "file" / "sub", make=False)
    with pytest.raises(FileNotFoundError):  # a reader walks down without making anything
        folders_inside(tmp_path, "x", "y", make=False)
    assert not (tmp_path / "x").exists()


# --- 2. cells planted in the sweep's folders ----------------------------------------------------
def write_sweep(folder: Path, text: str = BASE_SWEEP) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(text)
    return folder / "s.yaml"


def finish(cell, acc: float = 0.99, wall: float = 3600.0, **row) -> None:
    """A finished cell's results.json and sweep-cell.json, as a run writes them."""
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"round": 0, "test-acc": 0.1},
            {"round": 1, "test-acc": acc, "ema-acc": acc, "seconds": 1.0, **row}]
    from run_config import resolve

    (cell.run_dir / "results.json").write_text(json.dumps({
        "config": resolve(cell.run_config), "status": "complete",  # (resolved, as a run's)
        "summary": {"complete": True, "wall-seconds": wall}, "rounds": rows}))
    (cell.run_dir / "sweep-cell.json").write_text(json.dumps(cell.description()))


def table_only(sweep_file: Path, out: Path, capsys) -> tuple[int, str, str]:
    from experiments.sweep import main

    code = main([str(sweep_file), "--out-dir", str(out), "--table-only"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_cell_of_the_sweeps_own_counts(tmp_path, capsys):
    from experiments.sweep import is_done, load_sweep

    sweep_file = write_sweep(tmp_path / "in")
    (cell,) = load_sweep(sweep_file, tmp_path / "out").cells
    finish(cell)
    assert is_done(cell)
    code, out, err = table_only(sweep_file, tmp_path / "out", capsys)
    assert code == 0 and "| fedavg | 99.00 |" in out, (out, err)


@needs_root
@pytest.mark.parametrize("level", ["seed-0", "fedavg", "runs"])
def test_a_cell_folder_another_user_made_is_not_counted_and_named(tmp_path, capsys, level):
    from experiments.sweep import is_done, load_sweep

    sweep_file = write_sweep(tmp_path / "in")
    (cell,) = load_sweep(sweep_file, tmp_path / "out").cells
    finish(cell)
    planted = next(p for p in [cell.run_dir, *cell.run_dir.parents] if p.name == level)
    os.chown(planted, NOBODY, NOBODY)
    os.chmod(planted, 0o777)
    assert not is_done(cell)
    code, out, err = table_only(sweep_file, tmp_path / "out", capsys)
    assert code == 1 and "99.00" not in out, (out, err)
    assert f"{planted} belongs to another user (uid 65534)" in err, err
    assert "no finished cell" in err, err


@needs_root
def test_a_sweep_folder_planted_in_a_shared_out_dir_is_refused_before_anything(tmp_path, capsys):
    """out-dir like /tmp (sticky, every user may add): a warning; the sweep's folder another
    user made there, 0777, with a fake 99 % cell: refused, the table never written."""
    from experiments.sweep import load_sweep, main

    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o1777)
    sweep_file = write_sweep(tmp_path / "in")
    sweep = load_sweep(sweep_file, out)
    finish(sweep.cells[0])
    for folder in [sweep.dir, *sweep.dir.rglob("*")]:
        os.chown(folder, NOBODY, NOBODY)
    sweep.dir.chmod(0o777)
    for args in (["--table-only"], ["--dry-run"], ["--in-process"]):
        code = main([str(sweep_file), "--out-dir", str(out), *args])
        captured = capsys.readouterr()
        assert code == 2 and "99.00" not in captured.out, (args, captured)
        assert f"error: {sweep.dir} belongs to another user (uid 65534)" in captured.err
    assert not (sweep.dir / "table.md").exists()


def test_the_sweeps_own_folder_a_link_or_a_file_is_one_error_line(tmp_path, capsys):
    from experiments.sweep import main

    sweep_file = write_sweep(tmp_path / "in")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "s")
    code = main([str(sweep_file), "--out-dir", str(out), "--in-process"])
    err = capsys.readouterr().err
    assert code == 2 and re.search(r"error: .*/out/s is a link \(to .*elsewhere\)", err), err
    assert list(elsewhere.iterdir()) == []
    os.unlink(out / "s")
    (out / "s").write_text("a file")
    code = main([str(sweep_file), "--out-dir", str(out), "--in-process"])
    err = capsys.readouterr().err
    assert code == 2 and "out/s is a regular file, not a folder" in err, err


def test_the_page_never_copies_a_plot_through_a_link(tmp_path):
    from experiments.sweep import load_sweep
    from pages.fashion_mnist import SWEEP_FILE, block

    sweep = load_sweep(SWEEP_FILE, out_dir=tmp_path / "out")
    cell = next(c for c in sweep.cells if c.seed == 0 and c.method == "FedAvg"
                and c.setting == "5of200-lda0.05")
    finish(cell)
    docs, victim = tmp_path / "docs", tmp_path / "victim.png"
    docs.mkdir()
    victim.write_bytes(b"someone else's file")
    os.symlink(victim, docs / "fashion-mnist-ema-5of200-lda0.05.png")
    block(tmp_path / "out", docs=docs)
    assert victim.read_bytes() == b"someone else's file"
    made = docs / "fashion-mnist-ema-5of200-lda0.05.png"
    assert not made.is_symlink() and made.read_bytes().startswith(b"\x89PNG")


# --- 3. one schema for what is read back ----------------------------------------------------------
# (key, value, refused?) one value at a time in a round's row; by hand from the rule: accuracies
# in [0, 1], times finite and >= 0, counts whole numbers >= 0 (not bools), every number finite
ROW_VALUES = [
    ("test-acc", 1.0, False), ("test-acc", 1.0000001, True), ("test-acc", 0.0, False),
    ("test-acc", -0.0, False), ("test-acc", -1e-9, True), ("ema-acc", 5.0, True),
    ("test-acc", -7.0, True), ("fed-acc", float("inf"), True), ("test-acc", float("nan"), True),
    ("test-acc", True, True), ("test-acc", "0.5", True), ("test-acc", None, False),
    ("seconds", 0.0, False), ("seconds", -0.0, False), ("seconds", -0.001, True),
    ("seconds", float("inf"), True), ("eval-seconds", 1e9, False),
    ("bytes-down", 0, False), ("bytes-down", 2.5, True), ("bytes-down", 3.0, True),
    ("bytes-down", -1, True), ("clients-sampled", True, True), ("clients-failed", 5, False),
    ("test-loss", -3.5, False), ("test-loss", float("-inf"), True), ("train-loss", 1e300, False),
    ("train-acc", 1.5, True), ("train-seconds", -1.0, True),
    # a client's own metric (its name is the client's): finite only, whatever its name says
    ("train-my-acc", 5.0, False), ("train-load-seconds", -1.0, False),
    ("train-my-acc", float("inf"), True),
]


@pytest.mark.parametrize("key, value, refused", ROW_VALUES,
                         ids=[f"{k}={v!r}" for k, v, _ in ROW_VALUES])
def test_every_number_of_a_row_is_in_its_range(key, value, refused):
    from reporting.results_file import results_problem, rows_problem

    rows = [{"round": 0}, {"round": 1, key: value}]
    problem = rows_problem(rows)
    assert (problem is not None) == refused, problem
    if refused:
        assert f"row 1 (round 1) has '{key}' = {value!r}" in problem
    full = {"config": {"num-server-rounds": 1}, "rounds": rows}
    assert (results_problem(full) is not None) == refused


SUMMARY_VALUES = [
    ({"final-test-acc": 1.0}, False), ({"final-test-acc": 1.0000001}, True),
    ({"final-ema-acc": -0.5}, True), ({"final-test-acc": None}, False),
    ({"wall-seconds": 0}, False), ({"wall-seconds": -1}, True),
    ({"wall-seconds": float("inf")}, True), ({"train-seconds": float("nan")}, True),
    ({"rounds": 200}, False), ({"rounds": 2.5}, True), ({"rounds": False}, True),
    ({"bytes-total": -10}, True), ({"acc-at-round": {"100": 0.5, "200": None}}, False),
    ({"acc-at-round": {"100": 5.0}}, True), ({"acc-at-round": [0.5]}, True),
    ({"rounds-to-acc": {"60": 12, "70": "200+"}}, False), ({"rounds-to-acc": {"60": 2.5}}, True),
    ({"rounds-to-acc": {"60": "soon"}}, True), ({"rounds-to-acc": {"60": -3}}, True),
    ({"complete": 1}, True), ({"final-test-loss": 12.0}, False),
]


@pytest.mark.parametrize("summary, refused", SUMMARY_VALUES,
                         ids=[json.dumps(s, default=str) for s, _ in SUMMARY_VALUES])
def test_every_number_of_the_summary_is_in_its_range(summary, refused):
    from reporting.results_file import results_problem

    problem = results_problem({"config": {}, "summary": summary, "rounds": []})
    assert (problem is not None) == refused, problem


HEX40, HEX64 = "0123456789abcdef" * 2 + "01234567", "ab" * 32
VERSION_VALUES = [  # a results.json's code-version (reporting.code_version), refused?
    ({"commit": HEX40, "dirty": False, "diff-sha256": None, "files-sha256": None}, False),
    ({"commit": HEX64, "dirty": True, "diff-sha256": HEX64, "files-sha256": None}, False),
    ({"commit": None, "dirty": None, "diff-sha256": None, "files-sha256": HEX64}, False),
    ({}, False), ({"commit": HEX40.upper()}, True), ({"commit": HEX40[:39]}, True),
    ({"commit": "HEAD"}, True), ({"commit": HEX40 + "; rm -rf ~"}, True),
    ({"commit": 12}, True), ({"dirty": 1}, True), ({"dirty": "no"}, True),
    ({"diff-sha256": HEX40}, True), ({"files-sha256": "x" * 64}, True),
    ({"commit": HEX40, "note": "mine"}, True), ("abc", True), ([HEX40], True),
]


@pytest.mark.parametrize("version, refused", VERSION_VALUES,
                         ids=[json.dumps(v) for v, _ in VERSION_VALUES])
def test_a_code_version_read_back_is_a_commit_a_flag_and_hashes(version, refused):
    from reporting.results_file import results_problem

    problem = results_problem({"config": {}, "code-version": version})
    assert (problem is not None) == refused, problem
    if refused:
        assert problem.startswith("'code-version' "), problem


CELLS_HEAD = ("setting,method,seed,status,rounds,last10-acc,final-test-acc,final-ema-acc,"
              "acc-at-100,rounds-to-60,bytes-down-total,bytes-up-total,bytes-total,"
              "train-seconds,wall-seconds,step-ratio,momentum-cos,momentum-ratio,code-version")
CELLS_ROW = (f"a,FedAvg,0,complete,200,0.7,0.71,0.69,0.6,80,10,20,30,5.5,60.0,1.5,-0.4,0.9,"
             f"{HEX40}")
CELLS_CASES = {  # (the file's text, or what replaces one field: what the refusal says)
    "accuracy-above-1": ({"last10-acc": "1.5"}, r"last10-acc is 1.5, not an accuracy"),
    "accuracy-nan": ({"final-test-acc": "nan"}, r"final-test-acc is nan, not a finite"),
    "ema-inf": ({"acc-at-100": "inf"}, r"acc-at-100 is inf, not a finite number"),
    "ema-above-1": ({"acc-at-100": "7"}, r"acc-at-100 is 7.0, not an accuracy"),
    "time-negative": ({"wall-seconds": "-1"}, r"wall-seconds is -1.0, not a time >= 0"),
    "ratio-inf": ({"step-ratio": "inf"}, r"step-ratio is inf, not a finite number"),
    "cos-above-1": ({"momentum-cos": "1.5"}, r"momentum-cos is 1.5, not a cosine in \[-1, 1\]"),
    "rounds-half": ({"rounds": "2.5"}, r"rounds is '2.5', not a whole number"),
    "rounds-to-soon": ({"rounds-to-60": "soon"}, r"rounds-to-60 is 'soon', not a whole"),
    "rounds-to-empty": ({"rounds-to-60": ""}, r"rounds-to-60 is empty"),
    "bytes-negative": ({"bytes-total": "-30"}, r"bytes-total is '-30', not a whole"),
    "seed-text": ({"seed": "zero"}, r"seed 'zero' is not a whole number"),
    "status-other": ({"status": "running"}, r"status 'running' is not one of complete"),
    "version-command": ({"code-version": "$(reboot)"}, r"code-version '\$\(reboot\)' is no"),
    "version-upper": ({"code-version": HEX40.upper()}, r"is no version label"),
    "header-changed": (CELLS_HEAD.replace("last10-acc", "best-acc") + "\n" + CELLS_ROW,
                       r"line 1 is not the header of a cells file"),
    "header-one-added-column": (CELLS_HEAD.replace("momentum-ratio,", "") + "\n"
                                + CELLS_ROW.replace("0.9,", ""),
                                r"line 1 is not the header of a cells file"),
    "header-round-text": (CELLS_HEAD.replace("acc-at-100", "acc-at-x") + "\n" + CELLS_ROW,
                          r"column acc-at-x names no round"),
    "row-short": (CELLS_HEAD + "\n" + CELLS_ROW.rsplit(",", 1)[0],
                  r"line 2 does not have one field per column"),
    "empty": ("", r"is empty"),
    "not-utf8": (b"\xff\xfe", r"is not UTF-8 text"),
}


@pytest.mark.parametrize("case", list(CELLS_CASES))
def test_a_cells_csv_read_back_is_refused_at_its_bad_field(tmp_path, case):
    """reporting.cells.read_cells_csv: the row written here by hand is read back (accepted);
    each fault, one at a time, is refused naming the line, the field and the fix."""
    from reporting.cells import CellsError, read_cells_csv

    good = tmp_path / "good.csv"
    good.write_text(CELLS_HEAD + "\n" + CELLS_ROW + "\n")
    (cell,), rounds, targets = read_cells_csv(good)
    assert (rounds, targets) == ([100], [60.0]) and cell["seed"] == 0
    assert cell["summary"]["rounds-to-acc"] == {"60": 80}
    assert cell["summary"]["acc-at-round"] == {"100": 0.6} and cell["code-version"] == HEX40
    change, says = CELLS_CASES[case]
    path = tmp_path / "bad.csv"
    if isinstance(change, dict):
        fields = dict(zip(CELLS_HEAD.split(","), CELLS_ROW.split(",")))
        fields.update(change)
        path.write_text(CELLS_HEAD + "\n" + ",".join(fields.values()) + "\n")
    elif isinstance(change, bytes):
        path.write_bytes(change)
    else:
        path.write_text(change)
    with pytest.raises(OSError if case == "not-utf8" else CellsError, match=says) as err:
        read_cells_csv(path)
    if case != "not-utf8":
        assert str(path) in str(err.value) and "write it again" in str(err.value)


def test_a_cells_csv_written_before_the_momentum_columns_reads_them_as_empty(tmp_path):
    """A committed file of an older page (no momentum-cos, momentum-ratio) still reads: both
    empty, every other field as written."""
    from reporting.cells import read_cells_csv

    path = tmp_path / "older.csv"
    path.write_text(CELLS_HEAD.replace(",momentum-cos,momentum-ratio", "") + "\n"
                    + CELLS_ROW.replace(",-0.4,0.9", "") + "\n")
    (cell,), _, _ = read_cells_csv(path)
    assert cell["summary"]["momentum-cos"] is None and cell["summary"]["momentum-ratio"] is None
    assert cell["summary"]["step-ratio"] == 1.5 and cell["code-version"] == HEX40
    good = tmp_path / "good.csv"
    good.write_text(CELLS_HEAD + "\n" + CELLS_ROW + "\n")
    (cell,), _, _ = read_cells_csv(good)
    assert (cell["summary"]["momentum-cos"], cell["summary"]["momentum-ratio"]) == (-0.4, 0.9)


def test_a_cells_csv_that_is_a_link_is_not_followed(tmp_path):
    from reporting.cells import read_cells_csv

    real = tmp_path / "real.csv"
    real.write_text(CELLS_HEAD + "\n" + CELLS_ROW + "\n")
    os.symlink(real, tmp_path / "link.csv")
    with pytest.raises(OSError, match=r"link.csv is a link"):
        read_cells_csv(tmp_path / "link.csv")


@pytest.mark.parametrize("text, says", [
    ('"wall-seconds": 1e999', r"summary 'wall-seconds' is inf, not a finite number"),
    ('"wall-seconds": -3600', r"summary 'wall-seconds' is -3600, not a time >= 0"),
    ('"final-test-acc": 5.0', r"summary 'final-test-acc' is 5.0, not an accuracy in \[0, 1\]"),
], ids=["inf-hours", "negative-hours", "500-percent"])
def test_status_reads_a_number_out_of_range_as_unreadable(tmp_path, capsys, text, says):
    """JSON has no Infinity, but 1e999 reads as one: the file is refused, never shown."""
    from reporting.status import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text('{"config": {}, "status": "complete", "summary": '
                                      '{"complete": true, ' + text + '}, "rounds": []}')
    assert main([str(run)]) == 4
    out = capsys.readouterr().out
    assert out.startswith("unreadable") and re.search(says, out), out


@pytest.mark.parametrize("row, shown", [
    ({"test-acc": 7.0}, False), ({"test-acc": -7.0}, False), ({"seconds": 1e999}, False),
    ({"bytes-down": 2.5}, False), ({"test-acc": 1.0}, True)],
    ids=["700-percent", "minus-700-percent", "inf-seconds", "half-a-byte", "exactly-1"])
def test_the_sweep_table_shows_only_numbers_in_range(tmp_path, capsys, row, shown):
    from experiments.sweep import is_done, load_sweep

    sweep_file = write_sweep(tmp_path / "in")
    (cell,) = load_sweep(sweep_file, tmp_path / "out").cells
    finish(cell, acc=0.5)
    text = (cell.run_dir / "results.json").read_text()
    data = json.loads(text)
    data["rounds"][1].update(row)
    (cell.run_dir / "results.json").write_text(json.dumps(data).replace("Infinity", "1e999"))
    assert is_done(cell) is shown  # (resume: a cell refused is run again)
    code, out, err = table_only(sweep_file, tmp_path / "out", capsys)
    if shown:
        assert code == 0 and "| fedavg | 100.00 |" in out, (out, err)
    else:
        assert code == 1 and "no finished cell" in err and "fedavg" not in out, (out, err)
        assert "inf" not in out and "700" not in out


# --- 4. work sized before it is done --------------------------------------------------------------
def grid(settings: int, methods: int, seeds: int) -> str:
    text = "run-config: {num-server-rounds: 1}\n"
    if settings:
        text += "settings: {" + ", ".join(f"s{i}: {{}}" for i in range(settings)) + "}\n"
    text += "methods: {" + ", ".join(f"m{i}: {{}}" for i in range(methods)) + "}\n"
    return text + "seeds: [" + ", ".join(str(i) for i in range(seeds)) + "]\n"


@pytest.mark.parametrize("settings, methods, seeds, cap, cells", [
    (2, 3, 1, 6, 6), (2, 3, 1, 5, None), (0, 1, 7, 7, 7), (0, 1, 8, 7, None),
    (0, 4, 1, 4, 4), (1, 1, 1, 1, 1), (2, 2, 2, 7, None), (2, 2, 2, 8, 8)],
    ids=["2x3x1-cap6", "2x3x1-cap5", "no-settings-7-cap7", "no-settings-8-cap7", "1x4x1-cap4",
         "1x1x1-cap1", "2x2x2-cap7", "2x2x2-cap8"])
def test_the_cells_are_counted_and_capped_exactly(tmp_path, settings, methods, seeds, cap, cells):
    from experiments.sweep import SweepError, load_sweep

    path = write_sweep(tmp_path, grid(settings, methods, seeds))
    if cells is None:
        count = max(settings, 1) * methods * seeds
        with pytest.raises(SweepError, match=rf"make {count} cells, more than the {cap} a "
                                             rf"sweep may have: .*--max-cells {count}"):
            load_sweep(path, tmp_path / "out", max_cells=cap)
    else:
        assert len(load_sweep(path, tmp_path / "out", max_cells=cap).cells) == cells


def test_nine_million_cells_are_refused_before_any_is_made(tmp_path, monkeypatch, capsys):
    """3,000 methods x 3,000 seeds, about 40 KB of YAML: refused from the count, no cell's config
    resolved (each takes milliseconds: 9 million of them were hours of --dry-run)."""
    import experiments.sweep_file as sweep_file
    from experiments.sweep import main

    path = write_sweep(tmp_path, grid(0, 3000, 3000))
    assert path.stat().st_size < 64 * 1024
    monkeypatch.setattr(sweep_file, "resolve", lambda run: pytest.fail("a cell was resolved"))
    code = main([str(path), "--out-dir", str(tmp_path / "out"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "make 9,000,000 cells, more than the 1,000" in err, err
    assert "--max-cells 9000000" in err
    assert not (tmp_path / "out").exists()


def test_max_cells_raises_the_cap(tmp_path, capsys):
    from experiments.sweep import main

    path = write_sweep(tmp_path, grid(0, 1, 1001))
    assert main([str(path), "--out-dir", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "1,001 cells, more than the 1,000" in capsys.readouterr().err
    assert main([str(path), "--out-dir", str(tmp_path / "out"), "--dry-run",
                 "--max-cells", "1001"]) == 0
    assert capsys.readouterr().out.count("to run ") == 1001


# --- 5. every entry point: one message and the fix, never a traceback -----------------------------
def bad_folders(tmp: Path) -> dict[str, Path]:
    (tmp / "a-file").write_text("x")
    (tmp / "real").mkdir()
    os.symlink(tmp / "real", tmp / "a-link")
    return {"missing": tmp / "nowhere", "a-file": tmp / "a-file", "a-link": tmp / "a-link",
            "under-a-file": tmp / "a-file" / "sub", "proc": Path("/proc/self/x")}


SWEEP_CASES = {
    "unknown-flag": (["{sweep}", "--nope"], r"unrecognized arguments: --nope"),
    "no-sweep-file": (["{tmp}/nothing.yaml"], r"sweep file .*nothing.yaml not found"),
    "sweep-file-a-folder": (["{tmp}/real"], r"real is a folder, not a regular file"),
    "jobs-0": (["{sweep}", "--jobs", "0"], r"--jobs 0: give 1 or more"),
    "max-cells-0": (["{sweep}", "--max-cells", "0"], r"--max-cells 0: give 1 or more"),
    "max-cells-text": (["{sweep}", "--max-cells", "x"], r"invalid int value: 'x'"),
    "cells-none": (["{sweep}", "--cells", "nope/*", "--dry-run"],
                   r"--cells 'nope/\*' matches none of the sweep's cells"),
    "out-dir-a-file": (["{sweep}", "--in-process", "--out-dir", "{tmp}/a-file"],
                       r"out-dir .*a-file is a regular file, not a folder"),
    "out-dir-under-a-file": (["{sweep}", "--in-process", "--out-dir", "{tmp}/a-file/sub"],
                             r"cannot be made \(Not a directory\)"),
    "out-dir-in-proc": (["{sweep}", "--in-process", "--out-dir", "/proc/self/x"],
                        r"is in /proc, the kernel's view"),
    "sweep-folder-a-link": (["{sweep}", "--in-process", "--out-dir", "{tmp}/linked"],
                            r"linked/s is a link"),
    "out-dir-unknown-user": (["{sweep}", "--out-dir", "~nobody-such-user/x"],
                             r"out-dir '~nobody-such-user/x' is not a usable path"),
}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("case", SWEEP_CASES)
def test_the_sweep_command_ends_bad_input_with_one_message(tmp_path, case, how):
    args, says = SWEEP_CASES[case]
    bad_folders(tmp_path)
    sweep = write_sweep(tmp_path / "in")
    (tmp_path / "linked").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "linked" / "s")
    args = [a.format(tmp=tmp_path, sweep=sweep) for a in args]
    out = run_module(how, "experiments.sweep", *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and re.search(says, out.stderr), out.stderr
    assert list((tmp_path / "real").iterdir()) == []


PAGE_BLOCK = "# page\n\n<!-- example:fmnist-table -->\nold\n<!-- /example:fmnist-table -->\n"


@pytest.mark.parametrize("case", ["docs-missing", "docs-a-file", "docs-a-link", "docs-in-proc",
                                  "page-missing", "page-no-block", "no-finished-cell",
                                  "cells-match-none", "cells-match-no-finished-cell",
                                  "unknown-flag", "csv-missing", "csv-bad", "mixed-versions"])
@pytest.mark.parametrize("how", HOW)
def test_the_page_command_ends_bad_input_with_one_message(tmp_path, case, how):
    from experiments.sweep import load_sweep
    from pages.fashion_mnist import SWEEP_FILE

    folders = bad_folders(tmp_path)
    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    (docs / "fashion-mnist.md").write_text(PAGE_BLOCK)
    sweep = load_sweep(SWEEP_FILE, out_dir=out)
    finish(next(c for c in sweep.cells if c.seed == 0))
    args = {"docs-missing": ["--docs", str(folders["missing"])],
            "docs-a-file": ["--docs", str(folders["a-file"])],
            "docs-a-link": ["--docs", str(folders["a-link"])],
            "docs-in-proc": ["--docs", "/proc/self"],
            "page-missing": ["--docs", str(tmp_path / "real")],
            "page-no-block": ["--docs", str(docs)],
            "no-finished-cell": ["--docs", str(docs), "--out-dir", str(tmp_path / "empty")],
            "cells-match-none": ["--docs", str(docs), "--cells", "x/y/z"],
            "cells-match-no-finished-cell": ["--docs", str(docs), "--cells", "*/*/2"],
            "unknown-flag": ["--nope"],
            "csv-missing": ["--docs", str(docs), "--from-csv"],
            "csv-bad": ["--docs", str(docs), "--from-csv", str(tmp_path / "bad.csv")],
            "mixed-versions": ["--docs", str(docs)]}[case]
    says = {"docs-missing": r"nowhere does not exist: give --docs a folder",
            "docs-a-file": r"the docs folder .*a-file is a regular file, not a folder",
            "docs-a-link": r"the docs folder .*a-link is a link",
            "docs-in-proc": r"is in /proc",
            "page-missing": r"real/fashion-mnist.md does not exist",
            "page-no-block": r"the page has no block <!-- example:fmnist-table -->",
            "no-finished-cell": r"no finished cell in .*empty.*: run the sweep first",
            "cells-match-none": r"--cells 'x/y/z' matches none of the sweep's cells",
            "cells-match-no-finished-cell": r"no finished cell in .* matches --cells '\*/\*/2'",
            "unknown-flag": r"unrecognized arguments: --nope",
            "csv-missing": r"docs/fashion-mnist-cells.csv does not exist: give --from-csv",
            "csv-bad": r"bad.csv line 1 is not the header of a cells file",
            "mixed-versions": r"the cells ran on 2 code versions \(.*\).* --mixed-versions"}[case]
    (tmp_path / "bad.csv").write_text("method,acc\nFedAvg,0.5\n")
    if case == "mixed-versions":  # a second cell, of another commit
        other = next(c for c in sweep.cells if c.seed == 1)
        finish(other)
        data = json.loads((other.run_dir / "sweep-cell.json").read_text())
        data["code-version"] = {"commit": "f" * 40, "dirty": False}
        (other.run_dir / "sweep-cell.json").write_text(json.dumps(data))
    if case == "page-no-block":
        (docs / "fashion-mnist.md").write_text("# a page without the block\n")
    if case != "no-finished-cell":
        args += ["--out-dir", str(out)] if "--out-dir" not in args else []
    ran = run_module(how, "pages.fashion_mnist", *args)
    assert ran.returncode != 0, (ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr and re.search(says, ran.stderr), ran.stderr
    assert sum("error" in line for line in ran.stderr.splitlines()) == 1, ran.stderr
    assert list((tmp_path / "real").iterdir()) == []
    assert sorted(p.name for p in docs.iterdir()) == ["fashion-mnist.md"]  # nothing written


@pytest.mark.parametrize("module, args, says", [
    ("pages", ["--nope"], r"unrecognized arguments: --nope"),
    ("pages", ["--toml", "--methods"], r"not allowed with argument"),
    ("pages.examples", ["--nope"], r"unrecognized arguments: --nope"),
    ("reporting.status", [], r"the following arguments are required: RUN_DIR"),
    ("pages.fashion_mnist", ["--nope"], r"unrecognized arguments: --nope"),
    ("experiments.sweep", ["x.yaml", "--nope"], r"unrecognized arguments: --nope"),
], ids=["pages-flag", "pages-two", "examples-flag", "status-none", "page-flag", "sweep-flag"])
def test_the_other_commands_end_bad_arguments_with_one_message(module, args, says):
    """As `python -m` in the default run (each command's `__main__` wiring; the cases of the
    page and the sweep above run in this process there, as `python -m` in the long set)."""
    ran = run_module("python-m", module, *args)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert re.search(says, ran.stderr), ran.stderr


@pytest.mark.parametrize("how", HOW)
def test_status_names_each_bad_folder_without_a_traceback(tmp_path, how):
    folders = bad_folders(tmp_path)
    ran = run_module(how, "reporting.status", *(str(p) for p in folders.values()), "/proc/self")
    assert ran.returncode == 4 and "Traceback" not in ran.stderr, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == len(folders) + 1
    assert all(line.startswith(("missing", "unreadable")) for line in lines), lines


# --- 6. user text in generated pages is escaped --------------------------------------------------
PATTERNS = ["<script>alert(1)</script>", "*/*/0", "`x` | y", "a|b|c", "line\nbreak",
            "[x](javascript:alert(1))", "&lt;b&gt;", "under_score **bold**", "tab\there",
            "sep\u2028par\u2029", "back\\slash", "5of100-lda0.1/GC-Fed/1", "~~gone~~", "# head"]


def render(markdown_text: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    md = markdown_it.MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    return md.render(markdown_text)


def shown(html: str) -> str:
    """The text a reader sees of rendered HTML: tags dropped, entities read."""
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]+>", "", html)).strip()


def as_seen(text: str) -> str:
    """How md_text shows a control character or separator: as its escape."""
    return "".join(repr(c)[1:-1] if c.isprintable() is False and c != " " else c for c in text)


@pytest.mark.parametrize("text", PATTERNS)
def test_user_text_renders_as_itself_and_never_as_html_or_markup(text):
    from reporting.table import md_text

    escaped = md_text(text)
    assert "\n" not in escaped and "\u2028" not in escaped
    html = render(f"the cells that --cells '{escaped}' names")
    assert "<script" not in html and "<a " not in html and "<em>" not in html
    assert "<strong>" not in html and "<code>" not in html and "<s>" not in html
    assert "<h1>" not in html
    assert shown(html) == f"the cells that --cells '{as_seen(text)}' names"


@pytest.mark.parametrize("name", ["A|B", "<img src=x onerror=alert(1)>", "a\nb", "`c`"])
def test_a_method_name_stays_one_cell_of_the_sweeps_table(name):
    from reporting.table import markdown

    html = render(markdown(["Method", "Final acc. (%)"], [[name, "50.00"]]))
    cells = re.findall(r"<td>(.*?)</td>", html, re.DOTALL)
    assert len(cells) == 2 and "<img" not in html, html
    assert shown(cells[0]) == as_seen(name) and cells[1] == "50.00"


def test_the_page_writes_cells_and_note_as_text(tmp_path):
    """A pattern that still matches seed 0 and carries a script: the page's block holds it as
    text (checked by rendering it)."""
    from experiments.sweep import load_sweep
    from pages.fashion_mnist import SWEEP_FILE, block

    sweep = load_sweep(SWEEP_FILE, out_dir=tmp_path / "out")
    finish(next(c for c in sweep.cells if c.seed == 0))
    docs = tmp_path / "docs"
    docs.mkdir()
    pattern = "*/*/[0<script>alert(1)</script>]"  # ([...]: one of these characters: seed 0)
    text = block(tmp_path / "out", note="; `x` | <b>y</b>", docs=docs, cells="*/*/0*")
    assert "--cells '\\*/\\*/0\\*' names" in text
    text = block(tmp_path / "out", note="; `x` | <b>y</b>\nz", docs=docs, cells=pattern)
    html = render(text)
    assert "<script" not in html and "<b>" not in html and "<code>x" not in html
    assert f"--cells '{pattern}' names" in shown(html)
    assert "; `x` | <b>y</b>\\nz; the cells ran on" in shown(html)


@needs_root
def test_a_named_run_folder_another_user_made_is_refused_before_it_is_read(tmp_path):
    from run_config import ConfigError
    from server_app.results import make_run_dir

    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)
    (out / "mine" / "results.json").write_text("planted")
    cfg = {"out-dir": str(out), "run-name": "mine", "method": "fedavg"}
    assert make_run_dir(cfg) == out / "mine"  # (this user's: taken, its results read)
    os.chown(out / "mine", NOBODY, NOBODY)
    with pytest.raises(ConfigError, match=r"'run-name' = 'mine': .*mine belongs to another "
                                          r"user \(uid 65534\)"):
        make_run_dir(cfg)
    assert (out / "mine" / "results.json").read_text() == "planted"
