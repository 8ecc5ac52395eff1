"""docs/fedacg-fmnist.md's measured blocks: FedACG's Table 1 protocol (`fedacg-table`), its CNN
column (`cnn-table`) and FedAGM's Table 6 column (`fedagm-table`) on Fashion-MNIST, from their
sweeps.

    python -m experiments.sweep sweeps/fedacg-t1-fmnist.yaml --jobs 2    # the runs (hours)
    python -m pages.fedacg_fmnist --out-dir runs/sweeps     # the FedACG table, its CSVs, plots
    python -m pages.fedacg_fmnist --merge --out-dir D      # the committed cells and D's
    python -m pages.fedacg_fmnist --from-csv               # from docs/fedacg-fmnist-cells.csv
    python -m pages.fedacg_fmnist --fedagm --out-dir runs/sweeps   # FedAGM's column
    python -m pages.fedacg_fmnist --cnn --out-dir runs/sweeps      # the CNN column

What each block holds, where its numbers come from and how it is written: `pages.sweep_page`;
a table run in parts: docs/results.md#a-table-in-parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pages.examples import ROOT
from pages.sweep_page import SweepPage

PAGE = ROOT / "docs" / "fedacg-fmnist.md"


def paper_cell(row: list | None) -> str:
    """A reported [EMA at 500, EMA at 1000, rounds to X, rounds to Y] as 'EMA 500 / EMA 1000'
    ('-' where the paper has no such row)."""
    return "-" if row is None else f"{row[0]:.2f} / {row[1]:.2f}"


def explain(rounds: list[int]) -> str:
    at = ", ".join(f"{r}" for r in rounds)
    return ("Last 10R: the mean test accuracy of the last 10 rounds, the number one rerun of a "
            "cell can be compared with; Final acc.: the test accuracy of the last round "
            f"({rounds[-1]}), mean ± std over the seeds; Acc. at {at}R: its EMA (0.9), the paper's "
            "measure; rounds to X%: the first round whose EMA reaches X, `T+` if none did. The "
            "paper's column: its CIFAR-10 table (ResNet-18-GN, 1,000 rounds), EMA at rounds 500 "
            "and 1,000, for comparison only: another dataset and model.")


def paper_orderings(sweep, cells: list, docs: Path) -> str:
    """Per setting, which of the paper's orderings of its own method against each other row
    (by the paper's EMA at round 500 and ours at the cells' last round) hold on each seed
    (`reporting.orderings`)."""
    from reporting.orderings import orderings, orderings_table
    from reporting.table import md_text
    from run_config import load_setup

    seeds = sorted({c.seed for c in sweep.cells})
    parts = []
    for setting in sweep.settings:
        mine = [c for c in sweep.cells if c.setting == setting]
        setup = load_setup(mine[0].run_config["setup"])
        reported = setup["reported"]["rows"]
        method_of = {c.method: c.run_config["method"] for c in mine}
        paper = {name: float(reported[m][0])  # its EMA at round 500
                 for name, m in method_of.items() if m in reported}
        own = next((n for n, m in method_of.items() if m == setup["method"]), None)
        if own is None or not any(c["setting"] == setting for c in cells):
            continue
        found = orderings(cells, setting, own, paper, seeds)
        table = orderings_table(found, seeds)
        parts.append(f"#### {md_text(setting)}\n\n{table}")
    if not parts:
        return ""
    return ("### The paper's orderings, seed by seed\n\n"
            "The paper's own method against each row it reports, by the EMA at round 500 "
            "(the paper's on CIFAR-10, of its 1,000 rounds; ours, the last): the paper's "
            "gap, and each seed's gap here in points (the rows paired by seed); a diverged "
            "cell is below every completed one.\n\n" + "\n\n".join(parts))


FEDACG = SweepPage(
    module="pages.fedacg_fmnist", sweep_file=ROOT / "sweeps" / "fedacg-t1-fmnist.yaml",
    page=PAGE, block="fedacg-table", stem="fedacg-fmnist",
    paper_header="FedACG's CIFAR-10, EMA 500 / 1000 (%)", paper_cell=paper_cell,
    explain=explain, extra=paper_orderings)
FEDAGM = SweepPage(
    module="pages.fedacg_fmnist --fedagm", sweep_file=ROOT / "sweeps" / "fedagm-t6-fmnist.yaml",
    page=PAGE, block="fedagm-table", stem="fedagm-fmnist",
    paper_header="FedAGM's CIFAR-10, EMA 500 / 1000 (%)", paper_cell=paper_cell,
    explain=explain, extra=paper_orderings)


CNN = SweepPage(
    module="pages.fedacg_fmnist --cnn", sweep_file=ROOT / "sweeps" / "fedacg-t1-fmnist-cnn.yaml",
    page=PAGE, block="cnn-table", stem="fedacg-fmnist-cnn",
    paper_header="FedACG's CIFAR-10, EMA 500 / 1000 (%)", paper_cell=paper_cell,
    explain=explain, extra=paper_orderings)
TABLES = {"--fedagm": FEDAGM, "--cnn": CNN}  # the page's other blocks; FEDACG without a flag


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for flag, table in TABLES.items():
        if flag in argv:
            argv.remove(flag)
            return table.main(argv, __doc__)
    return FEDACG.main(argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
