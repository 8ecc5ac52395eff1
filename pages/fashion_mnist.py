"""docs/fashion-mnist.md's measured block: GC-Fed's Table 5 on Fashion-MNIST, from the sweep.

    python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml --jobs 2        # the runs (hours)
    python -m pages.fashion_mnist                      # the page's table and plots from them
    python -m pages.fashion_mnist --out-dir /root/fmnist --note '; shared with other jobs'
    python -m pages.fashion_mnist --cells '*/*/0'      # only seed 0's cells in the table
    python -m pages.fashion_mnist --docs /tmp/page     # write the page and plots elsewhere
    python -m pages.fashion_mnist --from-csv           # the table from docs/fashion-mnist-cells.csv
    python -m pages.fashion_mnist --merge --out-dir D  # the CSV's cells and D's, written back

The block (between `<!-- example:fmnist-table -->` and `<!-- /example:fmnist-table -->`) holds,
per setting, the table with the paper's EMNIST column beside it; what it holds, where its
numbers come from and how it is written: `pages.sweep_page`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pages.examples import ROOT
from pages.sweep_page import Measured, PageError, SweepPage

__all__ = ["PAGE", "SWEEP_FILE", "CELLS_CSV", "PageError", "block", "measured", "main"]


def paper_cell(row: list | None) -> str:
    """A reported [acc, std] as the paper writes it ('-' where it has no such row)."""
    if row is None:
        return "-"
    return f"{row[0]:.2f}" + (" (Failed)" if row[1] is None else f" ± {row[1]:.2f}")


def explain(rounds: list[int]) -> str:
    at = ", ".join(f"{r}" for r in rounds)
    return ("Last 10R: the mean test accuracy of the last 10 rounds, the number one rerun of a "
            "cell can be compared with (one round's accuracy is one draw of a noisy curve); "
            "Final acc.: the test accuracy of the last round (200), mean ± std over the seeds; "
            f"Acc. at {at}R: its EMA; rounds to X%: the first round whose EMA reaches X. "
            "GC-Fed's EMNIST: GC-Fed's Table 5 (its final accuracy; 5 of 1,000 clients, LDA "
            "0.05, 62 classes), for comparison only: another dataset.")


GCFED_T5 = SweepPage(
    module="pages.fashion_mnist", sweep_file=ROOT / "sweeps" / "gcfed-t5-fmnist.yaml",
    page=ROOT / "docs" / "fashion-mnist.md", block="fmnist-table", stem="fashion-mnist",
    paper_header="GC-Fed's EMNIST (%)", paper_cell=paper_cell, explain=explain)
SWEEP_FILE = GCFED_T5.sweep_file
PAGE = GCFED_T5.page
CELLS_CSV = PAGE.parent / GCFED_T5.cells_name  # the page's cells, one row each


def measured(out_dir: Path | None, note: str = "", docs: Path = ROOT / "docs",
             cells: str = "", from_csv: Path | None = None,
             mixed_versions: bool = False) -> tuple[str, str | None]:
    """(the page's measured block, the CSV of its cells; None from a CSV): `SweepPage.measured`."""
    got: Measured = GCFED_T5.measured(out_dir, note, docs, cells, from_csv, mixed_versions)
    return got.text, got.cells_csv


def block(out_dir: Path | None, note: str = "", docs: Path = ROOT / "docs",
          cells: str = "", from_csv: Path | None = None, mixed_versions: bool = False) -> str:
    """The page's measured block (`measured`'s text)."""
    return measured(out_dir, note, docs, cells, from_csv, mixed_versions)[0]


def main(argv: list[str] | None = None) -> int:
    return GCFED_T5.main(argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
