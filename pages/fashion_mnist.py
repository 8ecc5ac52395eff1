"""docs/fashion-mnist.md's measured block: GC-Fed's Table 5 on Fashion-MNIST, from the sweep.

    python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml --jobs 2        # the runs (hours)
    python -m pages.fashion_mnist                      # the page's table and plots from them
    python -m pages.fashion_mnist --out-dir /root/fmnist --note '; shared with other jobs'
    python -m pages.fashion_mnist --cells '*/*/0'      # only seed 0's cells in the table

The block (between `<!-- example:fmnist-table -->` and `<!-- /example:fmnist-table -->`) holds,
per setting, the sweep's table with the paper's EMNIST column beside each row, the plots (copied
to docs/), how many of the cells had finished, the time their ServerApps ran and the machine.
The text around it (what holds of the paper's orderings) is written by a person from it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from fnmatch import fnmatchcase
from pathlib import Path

from pages.examples import ROOT, _number, machine, replace_block

SWEEP_FILE = ROOT / "sweeps" / "gcfed-t5-fmnist.yaml"
PAGE = ROOT / "docs" / "fashion-mnist.md"


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
    from reporting.table import header, markdown, table_rows
    from run_config import load_setup

    sweep = load_sweep(SWEEP_FILE, out_dir=out_dir)
    finished = sum(is_done(c) for c in sweep.cells)
    total = len(sweep.cells)
    if cells:
        sweep.cells = [c for c in sweep.cells if fnmatchcase(cell_name(c), cells)]
    report = write_report(sweep)  # table.md, table.csv, runs.csv, the plots
    done = [c for c in sweep.cells if is_done(c)]
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
        stem = slug(setting)
        for kind in ("ema", "acc"):
            shutil.copy(sweep.dir / f"{kind}-{stem}.png", docs / f"fashion-mnist-{kind}-{stem}.png")
        parts.append(f"### {setting}: {setup_of[setting]['description']}\n\n"
                     f"{markdown(head, rows)}\n\n"
                     f"![EMA test accuracy per round, {setting}](fashion-mnist-ema-{stem}.png)\n"
                     f"![test accuracy per round, {setting}](fashion-mnist-acc-{stem}.png)")
    summaries = [x for m in report.rows for x in m.summaries]
    seconds = sum(_number(x.get("wall-seconds")) for x in summaries)
    rounds = ", ".join(f"{r}" for r in report.acc_at_rounds)
    return ("\n\n".join(parts)
            + f"\n\nMeasured with `python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml "
            f"--jobs 2`: {finished} of its {total} cells had finished"
            + (f"; the table holds the {len(done)} of them that `--cells '{cells}'` names"
               if cells else "") + " (the Seeds column); "
            f"their ServerApps ran {seconds / 3600:.1f} hours in all, two at a time, "
            f"on {machine()}{note}. Final acc.: the test accuracy of the last round (200), "
            f"mean ± std over the seeds; Acc. at {rounds}R: its EMA; rounds to X%: the first "
            "round whose EMA reaches X. The last column is GC-Fed's Table 5 EMNIST column (5 "
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
    args = parser.parse_args(argv)
    text = replace_block(PAGE.read_text(), "fmnist-table",
                         block(args.out_dir, args.note, cells=args.cells))
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
