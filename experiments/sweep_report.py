"""A sweep's table and plots from its finished cells (`write_report`): table.md, table.csv,
runs.csv and the EMA and accuracy curves, in the sweep folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from fileio.atomic import write_text_atomic
from reporting.metrics import curve, run_summary
from reporting.plots import plot_ema_curves
from reporting.table import MethodRuns, comparison, runs_csv
from run_config import acc_at_rounds, resolve, target_accs

from .sweep_cells import is_result, results_of, sweep_folder, trusted_cell
from .sweep_file import Sweep, SweepError, slug


@dataclass
class Report:
    """The table of a sweep's finished cells: one `MethodRuns` per row (setting, method), the
    columns' rounds and targets, and `md`, the Markdown table written to table.md."""

    rows: list[MethodRuns]
    acc_at_rounds: list[int]
    target_accs: list[float]
    md: str


def write_report(sweep: Sweep) -> Report:
    """table.md, table.csv, runs.csv, ema*.png and acc*.png in the sweep folder, from the
    finished cells (`is_result`) whose folders are the sweep's own (`trusted_cell`)."""
    done = [(c, results_of(c.run_dir)) for c in sweep.cells if trusted_cell(c)]
    done = [(c, r) for c, r in done if r and is_result(c.run_dir)]
    if not done:
        raise SweepError(f"no finished cell in {sweep.dir}: nothing to tabulate")
    first_cfg = resolve(done[0][0].run_config)  # (the cell's own config: checked at load)
    rounds = sweep.acc_at_rounds or acc_at_rounds(first_cfg)
    targets = sweep.target_accs or target_accs(first_cfg)
    by_row: dict[tuple[str, str], MethodRuns] = {}
    cells, curves = [], {}
    for setting in sweep.settings:
        for method in sweep.methods:
            by_row[setting, method] = MethodRuns(method, setting=setting)
    for cell, results in done:
        summary = run_summary(results.get("rounds", []), acc_at_rounds=rounds,
                              target_accs=targets,
                              total_rounds=resolve(cell.run_config)["num-server-rounds"])
        summary["diverged"] = results.get("status") != "complete"
        summary["wall-seconds"] = (results.get("summary") or {}).get("wall-seconds")
        by_row[cell.setting, cell.method].summaries.append(summary)
        cells.append({"setting": cell.setting, "method": cell.method, "seed": cell.seed,
                      "summary": summary, "run-dir": str(cell.run_dir)})
        for key in ("ema-acc", "test-acc"):
            curves.setdefault(key, {}).setdefault(cell.setting, {}).setdefault(
                cell.method, []).append(curve(results.get("rounds", []), key))
    rows = [m for m in by_row.values() if m.summaries]
    md, csv_text = comparison(rows, rounds, targets)
    sweep_folder(sweep)
    write_text_atomic(sweep.dir / "table.md", md)
    write_text_atomic(sweep.dir / "table.csv", csv_text)
    write_text_atomic(sweep.dir / "runs.csv", runs_csv(cells, rounds, targets))

    for key, what, stem in (("ema-acc", "EMA test accuracy", "ema"),
                            ("test-acc", "test accuracy", "acc")):
        for setting, per_method in curves.get(key, {}).items():
            name = f"{stem}-{slug(setting)}.png" if setting else f"{stem}.png"
            plot_ema_curves(per_method, sweep.dir / name, title=f"{sweep.dir.name}"
                            + (f" / {setting}" if setting else "") + f": {what}",
                            target_accs=targets, ylabel=f"{what[0].upper()}{what[1:]} (%)")
    return Report(rows, list(rounds), list(targets), md)
