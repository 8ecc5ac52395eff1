"""docs/momentum-grid.md's measured block: where server momentum breaks (FedAvgM, FedACG and
FedACG + GC-Fed at server momentum lambda 0-0.95 against local momentum and participation on
Fashion-MNIST), from `sweeps/momentum-grid-fmnist.yaml`.

    python -m experiments.sweep sweeps/momentum-grid-fmnist.yaml --jobs 2   # the runs (hours)
    python -m pages.momentum_grid --out-dir runs/sweeps       # heatmaps, tables, CSVs
    python -m pages.momentum_grid --merge --out-dir D         # the committed cells and D's
    python -m pages.momentum_grid --from-csv                  # from docs/momentum-grid-cells.csv

The block holds the per-column tables, then four heatmaps (`reporting.grid`: the mean final
EMA gain over FedAvg, paired by seed, the share of seeds that collapsed (diverged or ended at
chance), the server's step against the clients' update, and the server's momentum term against
the clients' update, for each family and lambda against each column), then each column's
gains over FedAvg seed by seed (`reporting.grid.seed_table`); where its numbers come from and
how it is written: `pages.sweep_page`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pages.examples import ROOT
from pages.sweep_page import SweepPage

FAMILIES = {"fedavgm": "FedAvgM", "fedacg": "FedACG", "fedacg+gcfed": "FedACG + GC-Fed"}
BASELINE = "FedAvg"
CLASSES = 10  # the grid's data, Fashion-MNIST


def rows_of(sweep) -> dict[str, tuple[str, float]]:
    """{sweep method name: (family, server momentum lambda)} of the grid's rows (not FedAvg)."""
    from run_config import resolve

    rows = {}
    for cell in sweep.cells:
        family = FAMILIES.get(cell.run_config["method"])
        if family and cell.method not in rows:
            rows[cell.method] = (family, float(resolve(cell.run_config)["lam"]))
    return rows


def heatmaps(sweep, cells: list, docs: Path) -> str:
    """The four heatmaps, drawn into `docs`, and their Markdown."""
    from reporting.grid import knob_grid, plot_grid
    from run_config.collapses import collapsed

    # diverged, or ended at chance: the rule of run_config.collapses (Fashion-MNIST: 10 classes)
    grid = knob_grid(cells, rows_of(sweep), BASELINE, list(sweep.settings),
                     collapsed=lambda summary: collapsed(summary, CLASSES))
    plot_grid(grid, docs / "momentum-grid-gain.png", "gain",
              "final EMA minus FedAvg's (points; seeds paired)")
    plot_grid(grid, docs / "momentum-grid-diverged.png", "diverged",
              "seeds that collapsed (diverged or ended at chance)")
    plot_grid(grid, docs / "momentum-grid-step.png", "ratio",
              "server step / clients' mean update (median over rounds)")
    plot_grid(grid, docs / "momentum-grid-cos.png", "cos",
              "cos(server momentum term, clients' update) (its length / the update's)")
    return ("### The grid\n\n"
            "![final EMA gain over FedAvg, by server momentum and column](momentum-grid-gain.png)"
            "\n![share of seeds that collapsed](momentum-grid-diverged.png)"
            "\n![the server's step against the clients' update](momentum-grid-step.png)"
            "\n![the server's momentum term against the clients' update](momentum-grid-cos.png)"
            "\n\n"
            "Each square: the mean over seeds of the final EMA test accuracy minus FedAvg's in "
            "the same column and seed (percentage points; the number of seeds paired under it; "
            "a diverged seed is not paired), the seeds that collapsed of those run (diverged, "
            "or ended at chance: the last 10 rounds' mean under 1.5 / 10, `python -m "
            "run_config check`'s rule), and the "
            "median over rounds of the server's step against the clients' mean update "
            "(`train-server-step-norm / train-client-update-norm`, mean over seeds): 1 for "
            "FedAvg, up to 1 / (1 - lambda) where the server's momentum keeps adding updates "
            "of one direction. The last map splits that step, lambda m + d, into its two "
            "terms: the median over rounds of the cosine between the server's momentum term "
            "lambda m (FedACG's look-ahead) and the clients' mean update d, blue where the "
            "clients go on in the momentum's direction and red where they pull back against "
            "it, and under it the term's length against the update's "
            "(`momentum-cos`, `momentum-ratio`: "
            "[docs/results.md](results.md#the-servers-step-and-its-momentum); mean over seeds). "
            "FedACG + GC-Fed has no panel there: its global GC changes d after d's norm was "
            "recorded, so "
            "the recorded norms do not split its step." + by_seed(sweep, cells))


def by_seed(sweep, cells: list) -> str:
    """Per column that has run, its gains over FedAvg seed by seed (`reporting.grid`)."""
    from reporting.grid import seed_table
    from reporting.table import md_text
    from run_config.collapses import collapsed

    seeds = sorted({c.seed for c in sweep.cells})
    parts = []
    for setting in sweep.settings:
        if not any(c["setting"] == setting for c in cells):
            continue
        methods = list(dict.fromkeys(c.method for c in sweep.cells
                                     if c.setting == setting and c.method != BASELINE))
        table = seed_table(cells, methods, BASELINE, setting, seeds,
                           collapsed=lambda summary: collapsed(summary, CLASSES))
        parts.append(f"#### {md_text(setting)}\n\n{table}")
    if not parts:
        return ""
    return ("\n\n### Seed by seed\n\n"
            "Each row's final EMA test accuracy minus FedAvg's in the same column and seed "
            "(points; FedAvg's own in the first row), with the server's step against the "
            "clients' update in brackets (the median over rounds, as in the third map); "
            "'at chance' by the rule above, '-' where a seed has not run. The last column "
            "says on how many of the seeds run the row ends ahead of FedAvg.\n\n"
            + "\n\n".join(parts))


def explain(rounds: list[int]) -> str:
    at = ", ".join(f"{r}" for r in rounds)
    return ("Last 10R: the mean test accuracy of the last 10 rounds; Final acc.: the test "
            "accuracy of the last round (200), mean ± std over the seeds; Acc. at "
            f"{at}R: its EMA (0.9); rounds to X%: the first round whose EMA reaches X. No paper "
            "has this grid.")


GRID = SweepPage(
    module="pages.momentum_grid", sweep_file=ROOT / "sweeps" / "momentum-grid-fmnist.yaml",
    page=ROOT / "docs" / "momentum-grid.md", block="momentum-grid", stem="momentum-grid",
    paper_header=None, paper_cell=str, explain=explain,
    extra=heatmaps)


def main(argv: list[str] | None = None) -> int:
    return GRID.main(argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
