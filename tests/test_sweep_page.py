"""A results page built in parts (docs/results.md#a-table-in-parts): the curves CSV
(`reporting.curves`) read back as written and refused one fault at a time, the page's `--merge`
of the committed CSVs with new run folders, and the sweep's `--done-in`, which leaves out the
cells a CSV holds and refuses to run them on other code."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from reporting.cells import CellsError
from reporting.curves import curves_csv, read_curves_csv

COMMIT = "c" * 40
ROOT = Path(__file__).resolve().parents[1]


def finish(cell, accs: list[float], wall: float = 60.0, commit: str = COMMIT,
           diverged: bool = False, norms: dict[int, dict] | None = None) -> None:
    """A finished cell's results.json and sweep-cell.json, as a run writes them: test accuracy
    `accs[r-1]` after round r, its EMA as the run computes it (and round r's `norms[r]`)."""
    ema, rows = None, [{"round": 0, "test-acc": 0.1}]
    for r, acc in enumerate(accs, 1):
        ema = acc if ema is None else 0.9 * ema + 0.1 * acc
        rows.append({"round": r, "test-acc": acc, "ema-acc": ema, "seconds": 1.0,
                     **(norms or {}).get(r, {})})
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    from run_config import resolve

    (cell.run_dir / "results.json").write_text(json.dumps({  # (the config: resolved, as a run's)
        "config": resolve(cell.run_config), "status": "failed" if diverged else "complete",
        **({"failure": "diverged"} if diverged else {}),
        "summary": {"complete": not diverged, "wall-seconds": wall}, "rounds": rows}))
    (cell.run_dir / "sweep-cell.json").write_text(json.dumps(
        cell.description() | {"code-version": {"commit": commit, "dirty": False}}))


# --- the curves CSV ---------------------------------------------------------------------------

CELLS = [{"setting": "a", "method": "FedAvg", "seed": 0, "curve": ([1, 2, 3], [0.5, 0.25, 0.75])},
         {"setting": "a", "method": "FedACG", "seed": 1, "curve": ([1, 2], [0.1, 0.2])},
         {"setting": "", "method": "M, \"quoted\"", "seed": -2, "curve": ([2], [1.0])}]


def test_the_curves_csv_reads_back_what_it_wrote(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text(curves_csv(CELLS))
    assert path.read_text().splitlines()[:2] == ["setting,method,seed,1,2,3",
                                                 "a,FedAvg,0,0.5,0.25,0.75"]
    assert read_curves_csv(path) == {"a/FedAvg/0": ([1, 2, 3], [0.5, 0.25, 0.75]),
                                     "a/FedACG/1": ([1, 2], [0.1, 0.2]),
                                     '-/M, "quoted"/-2': ([2], [1.0])}


# one fault at a time, each side of each boundary: (how the good file is changed, refused?)
FAULTS = [
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,1.0"), False),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,1.0000001"), True),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,0.0"), False),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,-0.0001"), True),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,nan"), True),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,inf"), True),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0,x"), True),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,zero,0.5"), True),
    (lambda t: t.replace("a,FedAvg,0,0.5", "a,FedAvg,0.0,0.5"), True),
    (lambda t: t.replace("a,FedACG,1,", "a,FedAvg,0,"), True),  # a cell twice
    (lambda t: t.replace("a,FedACG,1,", "a,FedACG,0,"), False),  # (another seed: fine)
    (lambda t: t.replace("0.25,0.75", "0.25,0.75,0.5"), True),  # a field more
    (lambda t: t.replace("0.25,0.75", "0.25"), True),  # a field less
    (lambda t: t.replace("seed,1,2,3", "seed,1,3,2"), True),
    (lambda t: t.replace("seed,1,2,3", "seed,0,1,2"), True),
    (lambda t: t.replace("setting,method", "method,setting"), True),
    (lambda t: "", True),
]


@pytest.mark.parametrize("change, refused", FAULTS)
def test_a_curves_csv_with_one_fault_is_refused_naming_it(tmp_path, change, refused):
    path = tmp_path / "c.csv"
    path.write_text(change(curves_csv(CELLS)))
    if not refused:
        read_curves_csv(path)
        return
    with pytest.raises(CellsError, match=r"c\.csv( line \d+| is empty).*write it again"):
        read_curves_csv(path)


def test_a_curves_csv_behind_a_link_is_not_read(tmp_path):
    import os

    (tmp_path / "real.csv").write_text(curves_csv(CELLS))
    os.symlink(tmp_path / "real.csv", tmp_path / "c.csv")
    with pytest.raises(OSError, match="link"):
        read_curves_csv(tmp_path / "c.csv")


# --- the page built in parts ------------------------------------------------------------------

def _page(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "fedacg-fmnist.md"
    page.write_text("# p\n\n<!-- example:fedacg-table -->\n<!-- /example:fedacg-table -->\n")
    return docs, page


def _table(page) -> list[str]:
    """The rows of the page's results tables (not of its orderings)."""
    return [line for line in page.read_text().splitlines() if line.startswith("| Fed")
            and " > " not in line and " < " not in line]


def test_a_page_merges_the_committed_cells_with_a_later_part(tmp_path):
    """Part 1 (two cells, one diverged) written to the CSVs; its run folders removed; part 2 (a
    third cell, and seed 0 of FedAvg again with other numbers) merged in: the table holds all
    three rows' cells, part 2's FedAvg/0 replacing part 1's, and the curves CSV every round of
    every cell. The statistics are checked against a hand computation."""
    import shutil

    from experiments.sweep import load_sweep
    from pages.fedacg_fmnist import FEDACG, main

    docs, page = _page(tmp_path)
    one = load_sweep(FEDACG.sweep_file, out_dir=tmp_path / "one")
    cell = {(c.method, c.seed): c for c in one.cells if c.setting == "5of100-dir0.3"}
    finish(cell["FedAvg", 0], [0.5] * 490 + [0.8] * 10)
    finish(cell["FedCM", 0], [0.3, 0.2], diverged=True)
    assert main(["--merge", "--out-dir", str(tmp_path / "one"), "--docs", str(docs)]) == 0
    rows = list(csv.DictReader(io.StringIO((docs / "fedacg-fmnist-cells.csv").read_text())))
    assert [(r["method"], r["seed"], r["status"], r["rounds"]) for r in rows] == [
        ("FedAvg", "0", "complete", "500"), ("FedCM", "0", "diverged", "2")]
    assert float(rows[0]["last10-acc"]) == pytest.approx(0.8)
    assert _table(page)[0].startswith("| FedAvg | 80.00 | 80.00 | 74.36 / 82.53 |")
    assert "2 of its 84 cells had finished" in page.read_text()
    shutil.rmtree(tmp_path / "one")

    two = load_sweep(FEDACG.sweep_file, out_dir=tmp_path / "two")
    cell = {(c.method, c.seed): c for c in two.cells if c.setting == "5of100-dir0.3"}
    finish(cell["FedAvg", 0], [0.6] * 500)
    finish(cell["FedACG", 1], [0.7] * 500)
    assert main(["--merge", "--out-dir", str(tmp_path / "two"), "--docs", str(docs)]) == 0
    rows = list(csv.DictReader(io.StringIO((docs / "fedacg-fmnist-cells.csv").read_text())))
    assert [(r["method"], r["seed"], r["final-test-acc"]) for r in rows] == [
        ("FedAvg", "0", "0.6"), ("FedCM", "0", "0.2"), ("FedACG", "1", "0.7")]
    assert [line.split(" | ")[:3] for line in _table(page)] == [
        ["| FedAvg", "60.00", "60.00"], ["| FedCM", "Failed (1/1)", "Failed (1/1)"],
        ["| FedACG", "70.00", "70.00"]]
    assert "3 of its 84 cells had finished" in page.read_text()
    assert "| FedACG > FedAvg | +10.77 | - | - | - | - |" in page.read_text()  # (85.13 - 74.36)
    curves = read_curves_csv(docs / "fedacg-fmnist-curves.csv")
    assert curves["5of100-dir0.3/FedCM/0"] == ([1, 2], [0.3, 0.2])
    assert curves["5of100-dir0.3/FedAvg/0"] == (list(range(1, 501)), [0.6] * 500)
    assert sorted(p.name for p in docs.glob("*.png")) == [
        "fedacg-fmnist-acc-5of100-dir0.3.png", "fedacg-fmnist-ema-5of100-dir0.3.png"]

    # from the CSVs alone: the same table, the CSVs untouched
    written = (docs / "fedacg-fmnist-cells.csv").read_text()
    table = _table(page)
    shutil.rmtree(tmp_path / "two")
    assert main(["--from-csv", "--docs", str(docs)]) == 0
    assert _table(page) == table and (docs / "fedacg-fmnist-cells.csv").read_text() == written


def test_a_merge_of_cells_of_another_commit_is_refused(tmp_path):
    from experiments.sweep import load_sweep
    from pages.fedacg_fmnist import FEDACG, main

    docs, page = _page(tmp_path)
    one = load_sweep(FEDACG.sweep_file, out_dir=tmp_path / "one")
    finish(one.cells[0], [0.5] * 3)
    assert main(["--out-dir", str(tmp_path / "one"), "--docs", str(docs)]) == 0
    before = page.read_text(), (docs / "fedacg-fmnist-cells.csv").read_text()
    two = load_sweep(FEDACG.sweep_file, out_dir=tmp_path / "two")
    finish(two.cells[1], [0.5] * 3, commit="d" * 40)
    assert main(["--merge", "--out-dir", str(tmp_path / "two"), "--docs", str(docs)]) == 2
    assert (page.read_text(), (docs / "fedacg-fmnist-cells.csv").read_text()) == before
    assert main(["--merge", "--out-dir", str(tmp_path / "two"), "--docs", str(docs),
                 "--mixed-versions"]) == 0
    assert "2 code versions" in page.read_text()


def _csv_with(sweep, names: set[str], version: str) -> str:
    from reporting.cells import cells_csv, cell_name

    cells = [{"setting": c.setting, "method": c.method, "seed": c.seed, "code-version": version,
              "summary": {"rounds": 500, "acc-at-round": {}, "rounds-to-acc": {},
                          "bytes-total": 1}}
             for c in sweep.cells if cell_name({"setting": c.setting, "method": c.method,
                                                "seed": c.seed}) in names]
    return cells_csv(cells, [], [])


def test_the_sweep_leaves_out_the_cells_a_csv_holds_on_their_code_only(tmp_path, capsys):
    from experiments.sweep import load_sweep, main
    from pages.fedacg_fmnist import FEDACG
    from reporting.code_version import APP_ROOT, code_version, version_label

    sweep = load_sweep(FEDACG.sweep_file, out_dir=tmp_path / "out")
    here = version_label(code_version(APP_ROOT))
    done = {"5of100-dir0.3/FedAvg/0", "5of100-dir0.3/FedAvg/2", "10of500-dir0.3/FedACG/1"}
    (tmp_path / "cells.csv").write_text(_csv_with(sweep, done, here))
    args = [str(FEDACG.sweep_file), "--out-dir", str(tmp_path / "out"), "--dry-run",
            "--done-in", str(tmp_path / "cells.csv")]
    assert main(args) == 0
    out = capsys.readouterr().out
    listed = {"/".join(p.strip() for p in line[8:].split("|")[:3]).replace("seed ", "")
              for line in out.splitlines() if line.startswith("to run")}
    assert "3 of the cells are in" in out and len(listed) == 84 - 3
    assert not listed & done and "5of100-dir0.3/FedAvg/1" in listed

    (tmp_path / "cells.csv").write_text(_csv_with(sweep, done, "e" * 40))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "ran on eeeeeeeeeeee" in err and "git worktree add" in err and "e" * 40 in err
    assert main(args + ["--mixed-versions"]) == 0
    assert "3 of the cells are in" in capsys.readouterr().out

    (tmp_path / "cells.csv").write_text(_csv_with(sweep, {
        f"{c.setting}/{c.method}/{c.seed}" for c in sweep.cells}, here))
    assert main(args) == 0 and "nothing to run" in capsys.readouterr().out
    assert main(args[:-1] + [str(tmp_path / "none.csv")]) == 2
    assert "none.csv does not exist" in capsys.readouterr().err


# --- the momentum grid ------------------------------------------------------------------------

def _cell(setting, method, seed, ema, diverged=False, ratio=None, cos=None, term=None):
    return {"setting": setting, "method": method, "seed": seed,
            "summary": {"final-ema-acc": ema, "diverged": diverged, "step-ratio": ratio,
                        "momentum-cos": cos, "momentum-ratio": term}}


def test_the_grid_pairs_each_gain_by_seed_and_counts_diverged_seeds_apart():
    """By hand: column a, FedAvg 0.50 / 0.60 / 0.70 on seeds 0-2; M at 0.5: 0.55 / 0.50 /
    diverged -> gains +5 and -10 paired (mean -2.5, 2 paired), 1 of 3 diverged; M at 0.9 in
    column a: seed 2 only, 0.9 against FedAvg's 0.70 -> +20 (1 paired, 0/1); column b has no
    FedAvg seed 1, so M's seed 1 there is not paired."""
    from reporting.grid import knob_grid

    cells = [_cell("a", "FedAvg", 0, 0.5), _cell("a", "FedAvg", 1, 0.6),
             _cell("a", "FedAvg", 2, 0.7), _cell("a", "M 0.5", 0, 0.55),
             _cell("a", "M 0.5", 1, 0.5, ratio=2.0, cos=-0.5, term=0.5),
             _cell("a", "M 0.5", 2, 0.1, diverged=True, ratio=3.0, cos=0.1, term=1.5),
             _cell("a", "M 0.9", 2, 0.9), _cell("b", "FedAvg", 0, 0.4),
             _cell("b", "M 0.5", 0, 0.3), _cell("b", "M 0.5", 1, 0.9),
             _cell("b", "FedAvg", 2, 0.5, diverged=True), _cell("b", "M 0.9", 2, 0.6)]
    grid = knob_grid(cells, {"M 0.9": ("M", 0.9), "M 0.5": ("M", 0.5)}, "FedAvg", ["a", "b"])
    assert grid.values == {"M": [0.5, 0.9]}
    assert grid.gain["M"][0.5]["a"] == pytest.approx(-2.5)
    assert grid.gain["M"][0.9]["a"] == pytest.approx(20.0)
    assert grid.gain["M"][0.5]["b"] == pytest.approx(-10.0)  # seed 0 alone
    assert grid.gain["M"][0.9]["b"] is None  # its baseline seed diverged
    assert grid.paired["M"][0.5] == {"a": 2, "b": 1}
    assert grid.diverged["M"][0.5] == {"a": (1, 3), "b": (0, 2)}
    assert grid.diverged["M"][0.9] == {"a": (0, 1), "b": (0, 1)}
    assert grid.ratio["M"][0.5] == {"a": 2.5, "b": None}  # (a diverged seed's ratio counts)
    assert grid.cos["M"][0.5]["a"] == pytest.approx(-0.2) and grid.cos["M"][0.5]["b"] is None
    assert grid.term["M"][0.5]["a"] == pytest.approx(1.0) and grid.term["M"][0.9]["a"] is None


def test_the_grid_counts_a_seed_at_chance_as_collapsed_and_still_pairs_its_gain():
    """The page's rule (run_config.collapses.collapsed, 10 classes: the last 10 rounds' mean
    under 0.15): M's seed 1 ended at 0.10 without NaN -> collapsed, 2 of 2 with the diverged seed
    0; its gain is paired (0.10 - 0.60 = -50); seed 0 diverged -> not paired. Without the rule
    the count is 1 of 2."""
    from reporting.grid import knob_grid
    from run_config.collapses import collapsed

    cells = [_cell("a", "FedAvg", 0, 0.5), _cell("a", "FedAvg", 1, 0.6),
             _cell("a", "M", 0, 0.1, diverged=True), _cell("a", "M", 1, 0.1)]
    for c in cells:
        c["summary"]["last10-acc"] = c["summary"]["final-ema-acc"]
    rows = {"M": ("M", 0.95)}
    grid = knob_grid(cells, rows, "FedAvg", ["a"], collapsed=lambda s: collapsed(s, 10))
    assert grid.diverged["M"][0.95] == {"a": (2, 2)}
    assert grid.gain["M"][0.95]["a"] == pytest.approx(-50.0) and grid.paired["M"][0.95]["a"] == 1
    assert knob_grid(cells, rows, "FedAvg", ["a"]).diverged["M"][0.95] == {"a": (1, 2)}


def test_the_grid_seed_table_gives_each_seeds_gain_over_the_baseline_of_its_seed():
    """By hand, column a: FedAvg 0.50 / 0.60 / diverged; M 0.55 at step 0.97 -> +5.00
    (0.97x); M's seed 1 at 0.10, at chance -> -50.00; M's seed 2 has no baseline -> '-', so M
    is ahead on 1 of 2 seeds; N diverged on seed 0 (behind a baseline that completed) and has
    not run seed 1 -> 0 of 1. Column b's cells are not in column a's table."""
    from reporting.grid import seed_table
    from run_config.collapses import collapsed

    cells = [_cell("a", "FedAvg", 0, 0.5), _cell("a", "FedAvg", 1, 0.6),
             _cell("a", "FedAvg", 2, 0.7, diverged=True), _cell("a", "M", 0, 0.55, ratio=0.97),
             _cell("a", "M", 1, 0.1), _cell("a", "M", 2, 0.9), _cell("a", "N", 0, 0.2,
                                                                      diverged=True),
             _cell("b", "FedAvg", 0, 0.9), _cell("b", "N", 1, 0.9)]
    for c in cells:
        c["summary"]["last10-acc"] = c["summary"]["final-ema-acc"]
    table = seed_table(cells, ["M", "N"], "FedAvg", "a", [0, 1, 2],
                       collapsed=lambda s: collapsed(s, 10)).splitlines()
    assert table[0] == "| row | seed 0 | seed 1 | seed 2 | ahead on |"
    assert table[2] == "| FedAvg (its final EMA, %) | 50.00 | 60.00 | diverged |  |"
    assert table[3] == "| M | +5.00 (0.97x) | -50.00, at chance | - | 1 of 2 seeds |"
    assert table[4] == "| N | diverged | - | - | 0 of 1 seeds |"
    assert len(table) == 5
    # a name from a sweep file is text: its '|' does not open a cell
    cells += [_cell("a", "P|Q", 0, 0.6)]
    assert seed_table(cells, ["P|Q"], "FedAvg", "a", [0]).splitlines()[-1] == (
        "| P\\|Q | +10.00 | 1 of 1 seeds |")


def test_the_grid_page_draws_its_heatmaps_from_the_cells(tmp_path):
    from experiments.sweep import load_sweep
    from pages.momentum_grid import GRID, main, rows_of

    sweep = load_sweep(GRID.sweep_file, out_dir=tmp_path / "out")
    rows = rows_of(sweep)
    assert rows["FedAvgM lam 0.95"] == ("FedAvgM", 0.95)
    assert rows["FedACG lam 0.0"] == ("FedACG", 0.0)
    assert rows["FedACG + GC-Fed lam 0.85"] == ("FedACG + GC-Fed", 0.85)
    assert "FedAvg" not in rows and len(rows) == 11
    for cell in sweep.cells:
        if cell.seed == 0 and cell.setting == "5of100-mom0.9" and cell.method in (
                "FedAvg", "FedACG lam 0.85"):
            # by hand: round 2's momentum term is 0.85 * round 1's step (1), its update 1 and
            # its step^2 0.85^2 + 1 + 2 * 0.85 * 1 * (-0.5): cos -0.5, the term 0.85x the
            # update; round 3 holds no update norm (not counted)
            norms = {1: {"train-server-step-norm": 1.0, "train-client-update-norm": 1.0},
                     2: {"train-server-step-norm": (0.85**2 + 1 - 0.85) ** 0.5,
                         "train-client-update-norm": 1.0},
                     3: {"train-server-step-norm": 2.0}}
            finish(cell, [0.5 if cell.method == "FedAvg" else 0.6] * 3, norms=norms)
        if cell.seed < 2 and cell.setting == "5of100-mom0" and cell.method == "FedAvgM lam 0.95":
            finish(cell, [0.3, 0.1], diverged=True)  # every seed run diverged: an entry
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "momentum-grid.md").write_text(
        "<!-- example:momentum-grid -->\n<!-- /example:momentum-grid -->\n")
    assert main(["--out-dir", str(tmp_path / "out"), "--docs", str(docs)]) == 0
    text = (docs / "momentum-grid.md").read_text()
    assert "![final EMA gain over FedAvg" in text and "4 of its 156 cells" in text
    from run_config.collapses import load

    (entry,) = load(docs / "collapses.json")  # (beside a page built outside docs/)
    assert (entry["page"], entry["cell"], entry["seeds"], entry["diverged"]) == (
        "docs/momentum-grid.md", "5of100-mom0/FedAvgM lam 0.95", 2, 2)
    assert (entry["config"]["lam"], entry["config"]["local-momentum"]) == (0.95, 0.0)
    for name in ("momentum-grid-gain.png", "momentum-grid-diverged.png",
                 "momentum-grid-step.png", "momentum-grid-cos.png"):
        assert (docs / name).read_bytes().startswith(b"\x89PNG")
    assert "| FedACG lam 0.85 | 60.00 |" in text
    # seed by seed: 0.60 against FedAvg's 0.50 on seed 0, the other seeds not run
    assert "| FedAvg (its final EMA, %) | 50.00 | - | - |  |" in text
    assert "| FedACG lam 0.85 | +10.00 (0.97x) | - | - | 1 of 1 seeds |" in text
    with open(docs / "momentum-grid-cells.csv", newline="") as f:
        written = {row["method"]: row for row in csv.DictReader(f)}
    assert float(written["FedACG lam 0.85"]["momentum-cos"]) == pytest.approx(-0.5)
    assert float(written["FedACG lam 0.85"]["momentum-ratio"]) == pytest.approx(0.85)
    assert written["FedAvg"]["momentum-cos"] == written["FedAvg"]["momentum-ratio"] == ""


@pytest.mark.parametrize("flag, stem, block, cells, changed", [
    ("--cnn", "fedacg-fmnist-cnn", "cnn-table", 12,
     "MLP, 500 rounds; the sweep overrides it with model cnn, num-server-rounds 60"),
    ("--fedagm", "fedagm-fmnist", "fedagm-table", 24, "MLP, 500 rounds")])
def test_each_table_of_the_fedacg_page_writes_its_own_block_and_files(tmp_path, flag, stem,
                                                                      block, cells, changed):
    """Each block of docs/fedacg-fmnist.md from its own sweep, into its own files; a table's
    heading says what its sweep runs other than its set-up's description."""
    from experiments.sweep import load_sweep
    from pages.fedacg_fmnist import TABLES, main

    sweep = load_sweep(TABLES[flag].sweep_file, out_dir=tmp_path / "out")
    finish(sweep.cells[0], [0.5] * 3)
    docs, page = _page(tmp_path)
    page.write_text(page.read_text() + f"<!-- example:{block} -->\n<!-- /example:{block} -->\n")
    assert main([flag, "--out-dir", str(tmp_path / "out"), "--docs", str(docs)]) == 0
    text = page.read_text()
    assert f"1 of its {cells} cells had finished" in text
    heading = next(line for line in text.splitlines() if line.startswith("### "))
    assert heading.endswith(changed), heading
    assert "<!-- example:fedacg-table -->\n<!-- /example:fedacg-table -->" in text  # untouched
    assert sorted(p.name for p in docs.iterdir() if p.name.startswith(stem + "-")) == [
        f"{stem}-acc-{sweep.cells[0].setting}.png", f"{stem}-cells.csv",
        f"{stem}-curves.csv", f"{stem}-ema-{sweep.cells[0].setting}.png"]


def test_every_shipped_sweep_loads_and_every_cell_resolves():
    """Each sweep file in sweeps/ makes its cells (counted here by hand for the real-data
    tables), and every cell's run config passes the run config's checks."""
    from pathlib import Path

    from experiments.sweep import load_sweep
    from run_config import resolve

    counts = {"fedacg-t1-fmnist": 84, "fedacg-t1-fmnist-cnn": 12, "fedagm-t6-fmnist": 24,
              "momentum-grid-fmnist": 156, "gcfed-t5-fmnist": 114}
    files = sorted((Path(__file__).resolve().parents[1] / "sweeps").glob("*.yaml"))
    assert len(files) >= 12
    for path in files:
        sweep = load_sweep(path)
        if path.stem in counts:
            assert len(sweep.cells) == counts[path.stem], path.name
        for cell in sweep.cells:
            resolve(cell.run_config)
    grid = load_sweep(files[0].parent / "momentum-grid-fmnist.yaml")
    got = {(c.setting, c.method): resolve(c.run_config) for c in grid.cells if c.seed == 0}
    assert (got["5of100-mom0", "FedACG lam 0.7"]["lr"],
            got["5of100-mom0", "FedACG lam 0.7"]["local-momentum"],
            got["5of100-mom0", "FedACG lam 0.7"]["lam"]) == (0.1, 0.0, 0.7)
    assert (got["20of100-mom0.9", "FedAvgM lam 0.95"]["lr"],
            got["20of100-mom0.9", "FedAvgM lam 0.95"]["local-momentum"],
            got["20of100-mom0.9", "FedAvgM lam 0.95"]["fraction-train"]) == (0.01, 0.9, 0.2)
    agm = load_sweep(files[0].parent / "fedagm-t6-fmnist.yaml")
    assert {resolve(c.run_config)["lam"] for c in agm.cells if c.method == "FedAGM"} == {0.9}


@pytest.mark.parametrize("keys, refused", [
    ({"local-momentum": 0.0}, True), ({"local-momentum": 0.0, "setup-overrides":
                                       "local-momentum"}, False),
    ({"local-momentum": 0.5}, False), ({"model": "cnn"}, True), ({"model": "cnn",
                                       "setup-overrides": "model"}, False),
    ({"weight-decay": 0.00001}, False)])  # (the set-up's own value: nothing replaced)
def test_a_sweep_refuses_a_value_a_set_up_would_replace(tmp_path, keys, refused):
    import yaml

    from experiments.sweep import SweepError, load_sweep

    spec = {"name": "s", "backend": "in-process", "settings": {"a": {
        "setup": "gcfed-t5-fmnist-5of100-lda0.1", **keys}}, "methods": {"M": {"method":
                                                                             "fedavg"}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    if not refused:
        (cell,) = load_sweep(tmp_path / "s.yaml", out_dir=tmp_path / "out").cells
        return
    with pytest.raises(SweepError, match=rf"'{next(iter(keys))}' = .* is its default, so the "
                                          r"set-up 'gcfed-t5-fmnist-5of100-lda0.1' replaces "
                                          r"it with .*add setup-overrides"):
        load_sweep(tmp_path / "s.yaml", out_dir=tmp_path / "out")


# --- the paper's orderings --------------------------------------------------------------------

def test_the_papers_orderings_are_checked_seed_by_seed_against_a_hand_count():
    """FedACG 0.80 / 0.70 / diverged, FedAvg 0.75 / 0.72 / 0.60, FedDyn 0.70 / diverged /
    diverged; the paper: FedACG 89.10 > FedDyn 88.10 > FedAvg 82.53. FedACG > FedAvg: +5 yes,
    -2 no, FedACG diverged no -> 1 of 3; FedACG > FedDyn: +10 yes, FedDyn diverged yes, both
    diverged no order -> 2 of 2."""
    from reporting.orderings import orderings, orderings_table

    finals = {"FedACG": [0.80, 0.70, None], "FedAvg": [0.75, 0.72, 0.60],
              "FedDyn": [0.70, None, None]}
    cells = [{"setting": "s", "method": m, "seed": s,
              "summary": {"final-ema-acc": v, "diverged": v is None}}
             for m, values in finals.items() for s, v in enumerate(values)]
    found = orderings(cells, "s", "FedACG", {"FedAvg": 82.53, "FedDyn": 88.10,
                                              "FedACG": 89.10}, [0, 1, 2])
    assert [(o.other, round(o.paper_gap, 2)) for o in found] == [("FedAvg", 6.57),
                                                                  ("FedDyn", 1.0)]
    avg, dyn = found
    assert avg.gaps[0] == pytest.approx(5.0) and avg.gaps[1] == pytest.approx(-2.0)
    assert [avg.holds(s) for s in (0, 1, 2)] == [True, False, False]
    assert [dyn.holds(s) for s in (0, 1, 2)] == [True, True, None]
    table = orderings_table(found, [0, 1, 2]).splitlines()
    assert table[2] == ("| FedACG > FedAvg | +6.57 | +5.00 | -2.00 | no (it diverged) "
                        "| 1 of 3 seeds |")
    assert table[3] == ("| FedACG > FedDyn | +1.00 | +10.00 | yes (the other diverged) | - "
                        "| 2 of 2 seeds |")
    # a paper that has the other row ahead: FedACG < FedDC there, so a seed with FedACG ahead
    # does not hold
    (dc,) = orderings([*cells, {"setting": "s", "method": "FedDC", "seed": 0,
                                "summary": {"final-ema-acc": 0.5, "diverged": False}}],
                      "s", "FedACG", {"FedACG": 85.13, "FedDC": 86.52}, [0])
    assert dc.paper_gap < 0 and dc.holds(0) is False


def test_done_in_reads_the_names_from_any_version_of_the_csvs_columns(tmp_path):
    """The commit a table's first cells ran on reads the CSV a later page wrote: only the
    names and the code version are read; a file without them, or with a bad one, is refused."""
    from reporting.cells import CellsError, cell_names_csv

    path = tmp_path / "c.csv"
    path.write_text(f"setting,method,seed,a-later-column,code-version\n"
                    f"a,FedAvg,2,1.5,{COMMIT}\n-,M,0,,unknown\n")
    assert cell_names_csv(path) == [
        {"setting": "a", "method": "FedAvg", "seed": 2, "code-version": COMMIT},
        {"setting": "-", "method": "M", "seed": 0, "code-version": "unknown"}]
    for text, says in (("setting,method,seed\na,M,0\n", "names no"),
                       (f"setting,method,seed,code-version\na,M,x,{COMMIT}\n", "seed 'x'"),
                       ("setting,method,seed,code-version\na,M,0,$(reboot)\n", "no version"),
                       (f"setting,method,seed,code-version\na,M,0,{COMMIT},9\n", "one field"),
                       ("setting,method,seed,code-version\na,M,0\n", "one field")):
        path.write_text(text)
        with pytest.raises(CellsError, match=says):
            cell_names_csv(path)


@pytest.mark.parametrize("sweep_file", ["fedacg-t1-fmnist", "fedacg-t1-fmnist-cnn",
                                        "fedagm-t6-fmnist"])
def test_the_fedacg_protocol_pages_run_each_server_at_its_papers_momentum(sweep_file, tmp_path):
    """Server momentum of the rows of docs/fedacg-fmnist.md, resolved as the cells run: FedAvgM
    0.4 (FedACG's code, configs/server/FedAvgM.yaml; its paper's grid {0.4, 0.6, 0.8}), not the
    fedavgm preset's 0.85; FedACG 0.85 (its paper); FedAGM 0.9 (its paper); FedAvg none."""
    from experiments.sweep import load_sweep
    from run_config import resolve

    sweep = load_sweep(ROOT / "sweeps" / f"{sweep_file}.yaml", out_dir=tmp_path)
    expected = {"FedAvgM": 0.4, "FedACG": 0.85, "FedAGM": 0.9, "FedAvg": 0.0}
    seen = {}
    for cell in sweep.cells:
        if cell.method in expected:
            seen[cell.method] = resolve(cell.run_config)["lam"]
    assert "FedAvgM" in seen and seen == {m: expected[m] for m in seen}


def test_the_cnn_column_runs_the_cnn_for_the_rounds_its_sweep_names(tmp_path):
    """docs/fedacg-fmnist.md#the-cnn-column: every cell of the CNN column resolves to the CNN and
    60 rounds (the column's budget), not its set-up's MLP and 500 rounds, and its table reports
    the EMA at the last of them."""
    from experiments.sweep import load_sweep
    from run_config import resolve

    sweep = load_sweep(ROOT / "sweeps" / "fedacg-t1-fmnist-cnn.yaml", out_dir=tmp_path)
    resolved = [resolve(cell.run_config) for cell in sweep.cells]
    assert len(resolved) == 12
    assert {(c["model"], c["num-server-rounds"]) for c in resolved} == {("cnn", 60)}
    assert sweep.acc_at_rounds[-1] == 60
