"""A grid of one knob against the columns of a sweep (`knob_grid`): for each family of rows (e.g.
FedAvgM, FedACG) and each value of its knob (server momentum lambda), per column (setting), the
mean over seeds of the final EMA's gain over the baseline row of the same column and seed, the
share of seeds that collapsed (diverged; with `collapsed`, also ended at chance), the server's
step against the clients' update and its momentum term against that update; drawn as heatmaps
by `plot_grid`. `seed_table` writes one column's gains seed by seed, unaveraged.

A gain is paired by seed (a seed is the same split, client sampling and initial model in every
row), over the seeds where both the cell and the baseline completed; a diverged cell counts in
the share, never in the gain (a cell at chance has an accuracy: it counts in both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fileio.atomic import write_atomic
from reporting.table import markdown


@dataclass
class Grid:
    """gain[family][value][column] (percentage points, None where no seed pairs) and
    diverged[family][value][column] (k, n): k of the n seeds present collapsed (knob_grid's
    `collapsed`)."""

    columns: list[str]
    values: dict[str, list[float]] = field(default_factory=dict)  # each family's knob values
    gain: dict[str, dict[float, dict[str, float | None]]] = field(default_factory=dict)
    paired: dict[str, dict[float, dict[str, int]]] = field(default_factory=dict)
    diverged: dict[str, dict[float, dict[str, tuple[int, int]]]] = field(default_factory=dict)
    # the mean over seeds of each cell's step-ratio (reporting.metrics.step_ratio), None: none
    ratio: dict[str, dict[float, dict[str, float | None]]] = field(default_factory=dict)
    # the means over seeds of each cell's momentum-cos and momentum-ratio
    # (reporting.metrics.momentum_alignment), None where no seed has them
    cos: dict[str, dict[float, dict[str, float | None]]] = field(default_factory=dict)
    term: dict[str, dict[float, dict[str, float | None]]] = field(default_factory=dict)


def knob_grid(cells: Sequence[dict[str, Any]], rows: dict[str, tuple[str, float]],
              baseline: str, columns: Sequence[str],
              collapsed: Callable[[dict[str, Any]], bool] | None = None) -> Grid:
    """The grid of `cells` (reporting.cells' cells: setting, method, seed, summary), whose
    method names map by `rows` to (family, knob value); `baseline` is the method name of the
    reference row; `columns` the settings in order; `collapsed(summary)` says which cells the
    `diverged` counts take (default: those that diverged; a page passes
    run_config.collapses.collapsed, which also takes those that ended at chance)."""
    if collapsed is None:
        collapsed = lambda s: bool(s.get("diverged"))  # noqa: E731
    base = {(c["setting"], c["seed"]): c["summary"] for c in cells if c["method"] == baseline}
    grid = Grid(list(columns))
    by_cell: dict[tuple[str, float, str], list[dict]] = {}
    for c in cells:
        if c["method"] not in rows:
            continue
        family, value = rows[c["method"]]
        by_cell.setdefault((family, value, c["setting"]), []).append(c)
    for family, value in dict.fromkeys(rows.values()):
        grid.values.setdefault(family, []).append(value)
        for column in columns:
            group = by_cell.get((family, value, column), [])
            gains = []
            for c in group:
                b = base.get((column, c["seed"]))
                s = c["summary"]
                if s.get("diverged") or not b or b.get("diverged") or \
                        s.get("final-ema-acc") is None or b.get("final-ema-acc") is None:
                    continue
                gains.append(100 * (s["final-ema-acc"] - b["final-ema-acc"]))
            k = sum(bool(collapsed(c["summary"])) for c in group)
            for table, key in ((grid.ratio, "step-ratio"), (grid.cos, "momentum-cos"),
                               (grid.term, "momentum-ratio")):
                seen = [c["summary"][key] for c in group
                        if c["summary"].get(key) is not None]
                table.setdefault(family, {}).setdefault(value, {})[column] = (
                    sum(seen) / len(seen) if seen else None)
            grid.gain.setdefault(family, {}).setdefault(value, {})[column] = (
                sum(gains) / len(gains) if gains else None)
            grid.paired.setdefault(family, {}).setdefault(value, {})[column] = len(gains)
            grid.diverged.setdefault(family, {}).setdefault(value, {})[column] = (k, len(group))
    for family in grid.values:
        grid.values[family] = sorted(grid.values[family])
    return grid


def plot_grid(grid: Grid, path: Path, what: str, title: str = "") -> Path:
    """One heatmap a family, side by side: knob values (rows) x columns; `what` 'gain' (the
    mean gain in points, red below 0, blue above, the seeds paired written under it),
    'diverged' (the share of seeds that diverged, k/n written), 'ratio' (the mean step-ratio:
    the server's step against the clients' mean update) or 'cos' (the mean momentum-cos, blue
    where the clients' update goes with the server's momentum term, red against it, the
    term's length against the update written under it; only the families that have it)."""
    from matplotlib.figure import Figure

    families = list(grid.values)
    if what == "cos":  # a family whose step does not split (global GC) has no panel
        families = [f for f in families if any(
            q is not None for per in grid.cos[f].values() for q in per.values())] or families
    fig = Figure(figsize=(3.2 * len(families) + 1.2, 0.55 * max(
        len(grid.values[f]) for f in families) + 1.6), dpi=100)
    axes = fig.subplots(1, len(families), squeeze=False)[0]
    for ax, family in zip(axes, families):
        values = grid.values[family]
        data, labels = [], []
        for v in values:
            row, row_labels = [], []
            for col in grid.columns:
                if what == "gain":
                    g = grid.gain[family][v][col]
                    n = grid.paired[family][v][col]
                    row.append(float("nan") if g is None else g)
                    row_labels.append("-" if g is None else f"{g:+.1f}\n({n})")
                elif what == "ratio":
                    q = grid.ratio[family][v][col]
                    row.append(float("nan") if q is None else q)
                    row_labels.append("-" if q is None else f"{q:.2f}")
                elif what == "cos":
                    q, length = grid.cos[family][v][col], grid.term[family][v][col]
                    row.append(float("nan") if q is None else q)
                    row_labels.append("-" if q is None or length is None
                                      else f"{q:+.2f}\n({length:.2f}x)")
                else:
                    k, n = grid.diverged[family][v][col]
                    row.append(float("nan") if n == 0 else k / n)
                    row_labels.append("-" if n == 0 else f"{k}/{n}")
            data.append(row)
            labels.append(row_labels)
        if what == "gain":
            top = max([abs(x) for r in data for x in r if x == x] + [1.0])
            image = ax.imshow(data, cmap="RdBu", vmin=-top, vmax=top, aspect="auto")
        elif what == "ratio":
            top = max([x for r in data for x in r if x == x] + [2.0])
            image = ax.imshow(data, cmap="Purples", vmin=0.0, vmax=top, aspect="auto")
        elif what == "cos":
            image = ax.imshow(data, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto")
        else:
            image = ax.imshow(data, cmap="Reds", vmin=0.0, vmax=1.0, aspect="auto")
        for i, row_labels in enumerate(labels):
            for j, text in enumerate(row_labels):
                ax.text(j, i, text, ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(grid.columns)), grid.columns, rotation=30, ha="right",
                      fontsize=7)
        ax.set_yticks(range(len(values)), [f"{v:g}" for v in values], fontsize=7)
        ax.set_ylabel("server momentum lambda", fontsize=8)
        ax.set_title(family, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    write_atomic(Path(path), lambda f: fig.savefig(f, format="png"))
    return Path(path)


def seed_table(cells: Sequence[dict[str, Any]], methods: Sequence[str], baseline: str,
               column: str, seeds: Sequence[int],
               collapsed: Callable[[dict[str, Any]], bool] | None = None) -> str:
    """The Markdown table of one column, seed by seed: a first row with the baseline's final
    EMA (%), then for each of `methods` each seed's final EMA minus the baseline's on that seed
    (points), with its step-ratio in brackets ('(0.97x)') where it has one; 'diverged' where
    the cell diverged, ', at chance' after it where `collapsed` takes a cell that did not
    diverge, '-' where the seed or its baseline has not run (or the baseline diverged); last,
    on how many of the seeds where both ran the row ends ahead of the baseline (a gain above
    0; a diverged cell is behind a baseline that completed)."""
    mine = {(c["method"], c["seed"]): c["summary"] for c in cells if c["setting"] == column}

    def ema(summary: dict[str, Any] | None) -> float | None:
        if not summary or summary.get("diverged"):
            return None
        return summary.get("final-ema-acc")

    head = ["row", *(f"seed {s}" for s in seeds), "ahead on"]
    first = [f"{baseline} (its final EMA, %)"]
    for s in seeds:
        b = mine.get((baseline, s))
        first.append("diverged" if b and b.get("diverged") else
                     "-" if ema(b) is None else f"{100 * ema(b):.2f}")
    rows = [first + [""]]
    for method in methods:
        row, ahead, paired = [method], 0, 0
        for s in seeds:
            summary, base = mine.get((method, s)), ema(mine.get((baseline, s)))
            if summary and summary.get("diverged"):
                row.append("diverged")
                paired += base is not None  # behind a baseline that completed
                continue
            if ema(summary) is None or base is None:
                row.append("-")
                continue
            gain = 100 * (ema(summary) - base)
            paired += 1
            ahead += gain > 0
            text = f"{gain:+.2f}"
            if summary.get("step-ratio") is not None:
                text += f" ({summary['step-ratio']:.2f}x)"
            if collapsed is not None and collapsed(summary):
                text += ", at chance"
            row.append(text)
        rows.append(row + [f"{ahead} of {paired} seeds" if paired else "-"])
    return markdown(head, rows)  # (every cell escaped: names come from a sweep file)
