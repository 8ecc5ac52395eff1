"""A sweep's table and plots from its finished cells (`write_report`): table.md, table.csv,
cells.csv (one row per cell: `reporting.cells`) and the EMA and accuracy curves, in the sweep
folder. A table holds cells of one code version (the "code-version" their sweep-cell.json
records: `cell_version`) unless `mixed_versions` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fileio.atomic import write_text_atomic
from reporting.cells import CELLS_CSV, cells_csv, method_runs, versions_problem
from reporting.metrics import curve, momentum_terms, run_summary
from reporting.plots import plot_ema_curves
from reporting.table import MethodRuns, comparison
from run_config import acc_at_rounds, resolve, target_accs

from .sweep_cells import cell_version, finished_cells, sweep_folder
from .sweep_file import Sweep, SweepError, slug


@dataclass
class Report:
    """The table of a sweep's finished cells: one `MethodRuns` per row (setting, method), the
    columns' rounds and targets, and `md`, the Markdown table written to table.md."""

    rows: list[MethodRuns]
    acc_at_rounds: list[int]
    target_accs: list[float]
    md: str
    cells: list[dict] = field(default_factory=list)  # reporting.cells' cells, in table order
    versions: list[str] = field(default_factory=list)  # their code versions, most cells first


MIXED_FIX = ("Run the cells of the other version(s) again on one code (python -m "
             "experiments.sweep <sweep file> --cells PATTERN), or tabulate them anyway with "
             "--mixed-versions")


def wall_seconds(results: dict, round_seconds: float) -> float | None:
    """A finished run's ServerApp seconds: its summary's, but at least the sum of its rounds'
    seconds (`round_seconds`). A run resumed from a checkpoint by code before the checkpoint
    kept the time (2026-11-29) counted only its last process's seconds; its rounds' are then
    the closer figure (a lower bound: the stopped processes' start-up is left out)."""
    wall = (results.get("summary") or {}).get("wall-seconds")
    return None if wall is None else max(wall, round_seconds)


def write_report(sweep: Sweep, mixed_versions: bool = False) -> Report:
    """table.md, table.csv, cells.csv, ema*.png and acc*.png in the sweep folder, from the
    finished cells (`finished_cells`: results made from the cell as the sweep file and this
    code make it, in folders that are the sweep's own); SweepError naming the versions and
    cells when they ran on different code, unless `mixed_versions`."""
    done = finished_cells(sweep)
    if not done:
        raise SweepError(f"no finished cell in {sweep.dir}: nothing to tabulate")
    first_cfg = resolve(done[0][0].run_config)  # (the cell's own config: checked at load)
    rounds = sweep.acc_at_rounds or acc_at_rounds(first_cfg)
    targets = sweep.target_accs or target_accs(first_cfg)
    order = {(s, m): i for i, (s, m) in enumerate(
        (s, m) for s in sweep.settings for m in sweep.methods)}
    done.sort(key=lambda cr: order[cr[0].setting, cr[0].method])  # (stable: seeds in order)
    cells, curves = [], {}
    for cell, results in done:
        cfg = resolve(cell.run_config)
        summary = run_summary(results.get("rounds", []), acc_at_rounds=rounds,
                              target_accs=targets, total_rounds=cfg["num-server-rounds"],
                              momentum=momentum_terms(cfg))
        summary["diverged"] = results.get("status") != "complete"
        summary["wall-seconds"] = wall_seconds(results, summary["train-seconds"])
        cells.append({"setting": cell.setting, "method": cell.method, "seed": cell.seed,
                      "summary": summary,
                      "code-version": cell_version(cell)})
        for key in ("ema-acc", "test-acc"):
            curves.setdefault(key, {}).setdefault(cell.setting, {}).setdefault(
                cell.method, []).append(curve(results.get("rounds", []), key))
    mixed = versions_problem(cells, MIXED_FIX)
    if mixed and not mixed_versions:
        raise SweepError(f"{sweep.dir}: {mixed}")
    rows: list[MethodRuns] = method_runs(cells)
    md, csv_text = comparison(rows, rounds, targets)
    sweep_folder(sweep)
    write_text_atomic(sweep.dir / "table.md", md)
    write_text_atomic(sweep.dir / "table.csv", csv_text)
    write_text_atomic(sweep.dir / CELLS_CSV, cells_csv(cells, rounds, targets))

    for key, what, stem in (("ema-acc", "EMA test accuracy", "ema"),
                            ("test-acc", "test accuracy", "acc")):
        for setting, per_method in curves.get(key, {}).items():
            name = f"{stem}-{slug(setting)}.png" if setting else f"{stem}.png"
            plot_ema_curves(per_method, sweep.dir / name, title=f"{sweep.dir.name}"
                            + (f" / {setting}" if setting else "") + f": {what}",
                            target_accs=targets, ylabel=f"{what[0].upper()}{what[1:]} (%)")
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["code-version"]] = counts.get(c["code-version"], 0) + 1
    return Report(rows, list(rounds), list(targets), md, cells,
                  sorted(counts, key=lambda v: -counts[v]))
