"""docs/fashion-mnist.md's measured block: GC-Fed's Table 5 on Fashion-MNIST, from the sweep.

    python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml --jobs 2        # the runs (hours)
    python -m pages.fashion_mnist                      # the page's table and plots from them
    python -m pages.fashion_mnist --out-dir /root/fmnist --note '; shared with other jobs'
    python -m pages.fashion_mnist --cells '*/*/0'      # only seed 0's cells in the table
    python -m pages.fashion_mnist --docs /tmp/page     # write the page and plots elsewhere

The block (between `<!-- example:fmnist-table -->` and `<!-- /example:fmnist-table -->`) holds,
per setting, the sweep's table with the paper's EMNIST column beside each row, the plots (copied
to docs/), how many of the cells had finished, the time their ServerApps ran and the machine.
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
from pages.examples import PAGE_LIMIT, ROOT, _number, copy_plot, machine, replace_block

SWEEP_FILE = ROOT / "sweeps" / "gcfed-t5-fmnist.yaml"
PAGE = ROOT / "docs" / "fashion-mnist.md"


class PageError(Exception):
    """The page cannot be made from what was given: the message says what to do."""


def paper_cell(row: list | None) -> str:
    """A reported [acc, std] as the paper writes it ('-' where it has no such row)."""
    if row is None:
        return "-"
    return f"{row[0]:.2f}" + (" (Failed)" if row[1] is None else f" ± {row[1]:.2f}")


def block(out_dir: Path | None, note: str = "", docs: Path = ROOT / "docs",
          cells: str = "") -> str:
    """The page's measured block from the sweep's finished cells (it (re)writes their table),
    only those matching `cells` ('<setting>/<method>/<seed>', as the sweep's --cells) if given;
    the plots are copied into `docs`."""
    from experiments.sweep import cell_name, is_done, load_sweep, slug, write_report
    from reporting.table import header, markdown, md_text, table_rows
    from run_config import load_setup

    sweep = load_sweep(SWEEP_FILE, out_dir=out_dir)
    finished = sum(is_done(c) for c in sweep.cells)
    total = len(sweep.cells)
    if cells:
        chosen = [c for c in sweep.cells if fnmatchcase(cell_name(c), cells)]
        if not chosen:
            raise PageError(f"--cells {cells!r} matches none of the sweep's cells (e.g. "
                            f"'{cell_name(sweep.cells[0])}'; python -m experiments.sweep "
                            f"{SWEEP_FILE.relative_to(ROOT)} --dry-run lists them)")
        sweep.cells = chosen
    done = [c for c in sweep.cells if is_done(c)]
    if not done:
        raise PageError(f"no finished cell in {sweep.dir}" + (f" matches --cells {cells!r}"
                        if cells else "") + ": run the sweep first (python -m experiments.sweep "
                        f"{SWEEP_FILE.relative_to(ROOT)} --out-dir {sweep.dir.parent}), or give "
                        "its --out-dir" + (" or another pattern" if cells else ""))
    report = write_report(sweep)  # table.md, table.csv, runs.csv, the plots
    method_of = {c.method: c.run_config["method"] for c in sweep.cells}
    setup_of = {c.setting: load_setup(c.run_config["setup"]) for c in sweep.cells}
    parts = []
    for setting in sweep.settings:
        runs = [m for m in report.rows if m.setting == setting]
        if not runs:
            continue
        reported = setup_of[setting]["reported"]["rows"]
        rows = [row + [paper_cell(reported.get(method_of[m.method]))] for m, row in
                zip(runs, table_rows(runs, report.acc_at_rounds, report.target_accs))]
        head = header(report.acc_at_rounds, report.target_accs) + ["GC-Fed's EMNIST (%)"]
        stem, name = slug(setting), md_text(setting)
        for kind in ("ema", "acc"):
            copy_plot(sweep.dir / f"{kind}-{stem}.png", docs / f"fashion-mnist-{kind}-{stem}.png")
        parts.append(f"### {name}: {setup_of[setting]['description']}\n\n"
                     f"{markdown(head, rows)}\n\n"
                     f"![EMA test accuracy per round, {name}](fashion-mnist-ema-{stem}.png)\n"
                     f"![test accuracy per round, {name}](fashion-mnist-acc-{stem}.png)")
    summaries = [x for m in report.rows for x in m.summaries]
    seconds = sum(_number(x.get("wall-seconds")) for x in summaries)
    rounds = ", ".join(f"{r}" for r in report.acc_at_rounds)
    return ("\n\n".join(parts)
            + f"\n\nMeasured with `python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml "
            f"--jobs 2`: {finished} of its {total} cells had finished"
            + (f"; the table holds the {len(done)} of them that --cells '{md_text(cells)}' "
               "names" if cells else "") + " (the Seeds column); "
            f"their ServerApps ran {seconds / 3600:.1f} hours in all, two at a time, "
            f"on {machine()}{md_text(note)}. Final acc.: the test accuracy of the last round "
            f"(200), mean ± std over the seeds; Acc. at {rounds}R: its EMA; rounds to X%: the "
            "first round whose EMA reaches X. The last column is GC-Fed's Table 5 EMNIST column (5 "
            "of 1,000 clients, LDA 0.05, 62 classes), for comparison only: another dataset.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pages.fashion_mnist", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, help="the sweep's out-dir, as given to it")
    parser.add_argument("--cells", default="", metavar="PATTERN",
                        help="only the finished cells whose '<setting>/<method>/<seed>' matches "
                             "(e.g. '*/*/0': seed 0 alone)")
    parser.add_argument("--note", default="",
                        help="appended to the machine description, e.g. '; shared with other jobs'")
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
        text = replace_block(text, "fmnist-table",
                             block(args.out_dir, args.note, docs=docs, cells=args.cells))
        write_text_atomic(page, text)
    except FileNotFoundError as err:
        print(f"error: {err.filename} does not exist: give --docs a folder that holds "
              f"{PAGE.name} (this repository's docs/ does)", file=sys.stderr)
        return 2
    except (PageError, SweepError, OSError) as err:  # UnusableFile: a link, another user's, ...
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
