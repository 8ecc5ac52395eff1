"""docs/fashion-mnist.md's measured block: GC-Fed's Table 5 on Fashion-MNIST, from the sweep.

    python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml --jobs 2        # the runs (hours)
    python -m pages.fashion_mnist                      # the page's table and plots from them
    python -m pages.fashion_mnist --out-dir /root/fmnist --note '; shared with other jobs'
    python -m pages.fashion_mnist --cells '*/*/0'      # only seed 0's cells in the table
    python -m pages.fashion_mnist --docs /tmp/page     # write the page and plots elsewhere
    python -m pages.fashion_mnist --from-csv           # the table from docs/fashion-mnist-cells.csv

The block (between `<!-- example:fmnist-table -->` and `<!-- /example:fmnist-table -->`) holds,
per setting, the sweep's table led by the mean accuracy of the last 10 rounds (what one rerun of
a cell is compared with) and the last round's, with the paper's EMNIST column beside them, the
plots (copied to docs/), how many of the cells had finished, the time their ServerApps ran, the
code version they ran on and the machine. From the run folders it also writes every cell's
numbers to docs/fashion-mnist-cells.csv (reporting.cells), from which `--from-csv` builds the
same table without the run folders; cells of different code versions are refused unless
--mixed-versions.
The text around it (what holds of the paper's orderings) is written by a person from it.
The page and plots are written all or nothing, never through a link, into a docs folder of this
user's own (fileio.folders.trusted_folder); the cells count only from the sweep's own folders;
--cells and --note are written into the page as text (escaped); bad input ends with one line
saying what to do (docs/security.md#run-folders-and-results-read-back).
"""

from __future__ import annotations

import argparse
import sys
from fnmatch import fnmatchcase
from pathlib import Path

from fileio.atomic import write_text_atomic
from fileio.folders import trusted_folder
from fileio.reading import read_text_bounded
from experiments.sweep_file import slug
from pages.examples import PAGE_LIMIT, ROOT, _number, copy_plot, machine, replace_block

SWEEP_FILE = ROOT / "sweeps" / "gcfed-t5-fmnist.yaml"
PAGE = ROOT / "docs" / "fashion-mnist.md"
CELLS_CSV = ROOT / "docs" / "fashion-mnist-cells.csv"  # the page's cells, one row each
PAPER_AT = 3  # the paper's column, after Method, Last 10R and Final acc.


class PageError(Exception):
    """The page cannot be made from what was given: the message says what to do."""


def paper_cell(row: list | None) -> str:
    """A reported [acc, std] as the paper writes it ('-' where it has no such row)."""
    if row is None:
        return "-"
    return f"{row[0]:.2f}" + (" (Failed)" if row[1] is None else f" ± {row[1]:.2f}")


def block(out_dir: Path | None, note: str = "", docs: Path = ROOT / "docs",
          cells: str = "", from_csv: Path | None = None, mixed_versions: bool = False) -> str:
    """The page's measured block (`measured`'s text)."""
    return measured(out_dir, note, docs, cells, from_csv, mixed_versions)[0]


def measured(out_dir: Path | None, note: str = "", docs: Path = ROOT / "docs",
             cells: str = "", from_csv: Path | None = None,
             mixed_versions: bool = False) -> tuple[str, str | None]:
    """(the page's measured block, the CSV of its cells) from the sweep's finished cells (it
    (re)writes their table; the plots are copied into `docs`), or from a cells CSV `from_csv`
    (then no CSV is returned and the plots already in `docs` are shown); only the cells
    matching `cells` ('<setting>/<method>/<seed>', as the sweep's --cells) if given. Cells of
    different code versions are refused (PageError naming them) unless `mixed_versions`."""
    from experiments.sweep import load_sweep
    from reporting.cells import cells_csv

    sweep = load_sweep(SWEEP_FILE, out_dir=out_dir)
    if from_csv is None:
        chosen, total, rounds, targets, where = _from_runs(sweep, cells, mixed_versions)
        csv_out = cells_csv(chosen, rounds, targets)
        for setting in dict.fromkeys(c["setting"] for c in chosen):
            for kind in ("ema", "acc"):
                copy_plot(sweep.dir / f"{kind}-{slug(setting)}.png",
                          docs / f"fashion-mnist-{kind}-{slug(setting)}.png")
    else:
        chosen, total, rounds, targets, where = _from_csv(sweep, from_csv, cells,
                                                          mixed_versions)
        csv_out = None
    return _text(sweep, chosen, total, rounds, targets, where, note, docs, cells), csv_out


def _from_runs(sweep, cells: str, mixed_versions: bool) -> tuple:
    """(the chosen finished cells as reporting.cells' cells, the finished count, rounds,
    targets, where they come from) from the sweep's run folders."""
    from experiments.sweep import cell_name, is_done, write_report

    finished = sum(is_done(c) for c in sweep.cells)
    if cells:
        chosen = [c for c in sweep.cells if fnmatchcase(cell_name(c), cells)]
        if not chosen:
            raise PageError(f"--cells {cells!r} matches none of the sweep's cells (e.g. "
                            f"'{cell_name(sweep.cells[0])}'; python -m experiments.sweep "
                            f"{SWEEP_FILE.relative_to(ROOT)} --dry-run lists them)")
        sweep.cells = chosen
    if not any(is_done(c) for c in sweep.cells):
        raise PageError(f"no finished cell in {sweep.dir}" + (f" matches --cells {cells!r}"
                        if cells else "") + ": run the sweep first (python -m experiments.sweep "
                        f"{SWEEP_FILE.relative_to(ROOT)} --out-dir {sweep.dir.parent}), or give "
                        "its --out-dir" + (" or another pattern" if cells else ""))
    try:
        report = write_report(sweep, mixed_versions)  # table.md, table.csv, cells.csv, plots
    except ValueError as err:  # (SweepError: cells of different code versions)
        raise PageError(f"{err} (here: python -m pages.fashion_mnist --mixed-versions)"
                        ) from None
    return (report.cells, finished, report.acc_at_rounds, report.target_accs,
            f"`python -m experiments.sweep {SWEEP_FILE.relative_to(ROOT)} --jobs 2`")


def _from_csv(sweep, path: Path, cells: str, mixed_versions: bool) -> tuple:
    """The same as `_from_runs`, from a cells CSV (reporting.cells), each cell one of the
    sweep file's (setting, method)."""
    from reporting.cells import CellsError, cell_name, read_cells_csv, versions_problem

    try:
        rows, rounds, targets = read_cells_csv(path)
    except FileNotFoundError:
        raise PageError(f"{path} does not exist: give --from-csv a cells CSV (python -m "
                        "pages.fashion_mnist --out-dir <the sweep's out-dir> writes "
                        f"{CELLS_CSV.name} beside the page)") from None
    except CellsError as err:
        raise PageError(str(err)) from None
    known = {(c.setting, c.method) for c in sweep.cells}
    foreign = [cell_name(c) for c in rows if (c["setting"], c["method"]) not in known]
    if foreign:
        raise PageError(f"{path} holds cells of no setting and method of "
                        f"{SWEEP_FILE.relative_to(ROOT)} ({', '.join(foreign[:5])}): give the "
                        "cells CSV this page's sweep wrote")
    total = len(rows)
    if cells:
        rows = [c for c in rows if fnmatchcase(cell_name(c), cells)]
    if not rows:
        raise PageError(f"no cell in {path}" + (f" matches --cells {cells!r}" if cells else "")
                        + ": give the CSV the page wrote from the sweep's run folders "
                        "(python -m pages.fashion_mnist --out-dir <the sweep's out-dir>)")
    mixed = versions_problem(rows, "Give a CSV of one code version, or tabulate it anyway "
                                   "with --mixed-versions")
    if mixed and not mixed_versions:
        raise PageError(f"{path}: {mixed}")
    from reporting.table import md_text

    return rows, total, rounds, targets, md_text(f"{path.name}, the cells' own CSV")


def _text(sweep, chosen: list, total: int, rounds: list, targets: list, where: str,
          note: str, docs: Path, cells: str) -> str:
    """The block (`where`: Markdown naming the source of the cells, a command in backticks or
    the CSV's name): per setting, the table led by the statistic one rerun is compared with (Last
    10R) beside the paper's column, its plots, and what the numbers are."""
    from reporting.cells import method_runs
    from reporting.code_version import short_label
    from reporting.table import header, markdown, md_text, table_rows
    from run_config import load_setup

    method_of = {c.method: c.run_config["method"] for c in sweep.cells}
    setup_of = {c.setting: load_setup(c.run_config["setup"]) for c in sweep.cells}
    runs = method_runs(chosen)
    parts = []
    for setting in sweep.settings:
        group = [m for m in runs if m.setting == setting]
        if not group:
            continue
        reported = setup_of[setting]["reported"]["rows"]
        rows = [row[:PAPER_AT] + [paper_cell(reported.get(method_of[m.method]))]
                + row[PAPER_AT:] for m, row in zip(group, table_rows(group, rounds, targets))]
        head = header(rounds, targets)
        head = head[:PAPER_AT] + ["GC-Fed's EMNIST (%)"] + head[PAPER_AT:]
        stem, name = slug(setting), md_text(setting)
        parts.append(f"### {name}: {setup_of[setting]['description']}\n\n"
                     f"{markdown(head, rows)}\n\n"
                     f"![EMA test accuracy per round, {name}](fashion-mnist-ema-{stem}.png)\n"
                     f"![test accuracy per round, {name}](fashion-mnist-acc-{stem}.png)")
    seconds = sum(_number(c["summary"].get("wall-seconds")) for c in chosen)
    versions = list(dict.fromkeys(c["code-version"] for c in chosen))
    code = (f"code {short_label(versions[0])}" if len(versions) == 1 else
            f"{len(versions)} code versions (" + ", ".join(map(short_label, versions))
            + "), tabulated together with --mixed-versions")
    at = ", ".join(f"{r}" for r in rounds)
    return ("\n\n".join(parts)
            + f"\n\nMeasured with {where}: {total} of its {len(sweep.cells)} cells "
            "had finished"
            + (f"; the table holds the {len(chosen)} of them that --cells '{md_text(cells)}' "
               "names" if cells else "") + " (the Seeds column); "
            f"their ServerApps ran {seconds / 3600:.1f} hours in all, two at a time, "
            + (f"on {machine()}" if where.startswith("`") else "on the machine the "
               "CSV's cells ran on") + f"{md_text(note)}; the cells ran on {code}. Every "
            f"cell's numbers (and the commit it ran on) are in [{CELLS_CSV.name}]"
            f"({CELLS_CSV.name}). Last 10R: the mean test accuracy of the "
            "last 10 rounds, the number one rerun of a cell can be compared with (one round's "
            "accuracy is one draw of a noisy curve); Final acc.: the test accuracy of the last "
            f"round (200), mean ± std over the seeds; Acc. at {at}R: its EMA; rounds to X%: "
            "the first round whose EMA reaches X. GC-Fed's EMNIST: GC-Fed's Table 5 (its "
            "final accuracy; 5 of 1,000 clients, LDA 0.05, 62 classes), for comparison only: "
            "another dataset.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pages.fashion_mnist", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, help="the sweep's out-dir, as given to it")
    parser.add_argument("--cells", default="", metavar="PATTERN",
                        help="only the finished cells whose '<setting>/<method>/<seed>' matches "
                             "(e.g. '*/*/0': seed 0 alone)")
    parser.add_argument("--note", default="",
                        help="appended to the machine description, e.g. '; shared with other jobs'")
    parser.add_argument("--from-csv", nargs="?", const="", metavar="FILE",
                        help="build the table from a cells CSV instead of the run folders "
                             f"(default FILE: {CELLS_CSV.name} in the docs folder)")
    parser.add_argument("--mixed-versions", action="store_true",
                        help="tabulate cells that ran on different code versions (refused by "
                             "default: the message names the versions and cells)")
    parser.add_argument("--docs", type=Path, default=PAGE.parent,
                        help="the folder of fashion-mnist.md and its plots (default: this "
                             "repository's docs/)")
    args = parser.parse_args(argv)
    from experiments.sweep_file import SweepError

    page = args.docs / PAGE.name
    try:
        docs = trusted_folder(args.docs, "the docs folder", make=False)
        text = read_text_bounded(page, PAGE_LIMIT)
        replace_block(text, "fmnist-table", "")  # (its markers, before anything is written)
        from_csv = None if args.from_csv is None else (
            Path(args.from_csv) if args.from_csv else docs / CELLS_CSV.name)
        body, cells_text = measured(args.out_dir, args.note, docs=docs, cells=args.cells,
                                    from_csv=from_csv, mixed_versions=args.mixed_versions)
        text = replace_block(text, "fmnist-table", body)
        if cells_text is not None:
            write_text_atomic(docs / CELLS_CSV.name, cells_text)
        write_text_atomic(page, text)
    except FileNotFoundError as err:
        print(f"error: {err.filename} does not exist: give --docs a folder that holds "
              f"{PAGE.name} (this repository's docs/ does)", file=sys.stderr)
        return 2
    except (PageError, SweepError, OSError) as err:  # UnusableFile: a link, another user's, ...
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {page}" + (f" and {docs / CELLS_CSV.name}" if cells_text is not None
                             else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
