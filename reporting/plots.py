"""PNG plots of a run (accuracy vs round, accuracy vs bytes) and of a sweep (every method's EMA).

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no display needed), imported
when a plot is drawn: a process that draws none does not pay for it
(docs/performance.md#the-simulations-memory). Every plot is FIGSIZE inches at DPI, i.e. 640 x 400
pixels; the label distribution is wider with many clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fileio.atomic import write_atomic

from .metrics import curve

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure

FIGSIZE = (6.4, 4.0)
DPI = 100


def _figure(title: str, xlabel: str, ylabel: str, width: float = FIGSIZE[0]):
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(width, FIGSIZE[1]), dpi=DPI)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if xlabel == "round":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig, ax


def _save(fig: Figure, path: Path, bbox: str | None = None) -> Path:
    """`fig` as a PNG at `path`; `bbox=None` keeps the figure's size fixed, 'tight' grows it
    to hold a legend outside the axes."""
    fig.tight_layout()
    write_atomic(Path(path), lambda f: fig.savefig(f, dpi=DPI, bbox_inches=bbox, format="png"))
    return Path(path)


METRIC_LABELS = {"test-acc": "test accuracy",
                 "fed-acc": "federated evaluation accuracy"}  # clients' held-out data


def plot_run(rows: Sequence[dict[str, Any]], run_dir: Path, title: str = "",
             metric: str = "test-acc") -> list[Path]:
    """accuracy.png (the run's metric, test-acc or fed-acc, and its EMA vs round) and
    accuracy_vs_bytes.png (vs cumulative megabytes sent down + up) in `run_dir`."""
    run_dir = Path(run_dir)
    tested = [r for r in rows if r.get(metric) is not None]
    rounds, test = [r["round"] for r in tested], [100 * r[metric] for r in tested]
    ema_rounds, ema = curve(rows, "ema-acc")
    ema = [100 * v for v in ema]
    label = METRIC_LABELS[metric]

    fig, ax = _figure(title, "round", f"{label} (%)")
    ax.plot(rounds, test, "o-", ms=2.5, lw=0.8, alpha=0.6, label=label)
    ax.plot(ema_rounds, ema, "-", lw=2.0, label="EMA (0.9)")
    ax.legend(loc="lower right")
    out = [_save(fig, run_dir / "accuracy.png")]

    def mb(r):
        return (r.get("bytes-down-total", 0) + r.get("bytes-up-total", 0)) / 1e6

    fig, ax = _figure(title, "megabytes sent (down + up, cumulative)", f"{label} (%)")
    ax.plot([mb(r) for r in tested], test, "o-", ms=2.5, lw=0.8, alpha=0.6, label=label)
    by_round = {r["round"]: r for r in rows}
    ax.plot([mb(by_round[r]) for r in ema_rounds], ema, "-", lw=2.0, label="EMA (0.9)")
    ax.legend(loc="lower right")
    out.append(_save(fig, run_dir / "accuracy_vs_bytes.png"))
    return out


def mean_curve(runs: Sequence[tuple[Sequence[int], Sequence[float]]]):
    """Mean and sample std over seeds on the rounds every seed has."""
    common = sorted(set.intersection(*(set(r) for r, _ in runs))) if runs else []
    mean, std = [], []
    for rnd in common:
        vals = [v[list(r).index(rnd)] for r, v in runs]
        m = sum(vals) / len(vals)
        mean.append(m)
        std.append((sum((x - m) ** 2 for x in vals) / (len(vals) - 1)) ** 0.5
                   if len(vals) > 1 else 0.0)
    return common, mean, std


def plot_ema_curves(curves: dict[str, Sequence[tuple[Sequence[int], Sequence[float]]]], path: Path,
                    title: str = "", target_accs: Sequence[float] = (),
                    ylabel: str = "EMA test accuracy (%)") -> Path:
    """One line per method: EMA accuracy (or what `ylabel` names) vs round, mean over seeds,
    shaded +- one std, on the rounds every seed has.

    `curves[method]` holds one (rounds, values as fractions) pair per seed.
    """
    many = len(curves) > 10  # more methods than the default colours: 20 of them, and room
    fig, ax = _figure(title, "round", ylabel, width=FIGSIZE[0] * 1.6 if many else FIGSIZE[0])
    if many:
        from matplotlib import colormaps

        ax.set_prop_cycle(color=colormaps["tab20"].colors)
    top = 0.0
    for method, runs in curves.items():
        rounds, mean, std = mean_curve(runs)
        if not rounds:
            continue
        mean_pct = [100 * m for m in mean]
        top = max(top, max(mean_pct))
        line, = ax.plot(rounds, mean_pct, lw=1.8,
                        label=f"{method} ({len(runs)} seed{'s' * (len(runs) > 1)})")
        if len(runs) > 1:
            ax.fill_between(rounds, [m - 100 * s for m, s in zip(mean_pct, std)],
                            [m + 100 * s for m, s in zip(mean_pct, std)],
                            color=line.get_color(), alpha=0.15, lw=0)
    for t in target_accs:  # the targets the curves come near (far ones would squash them)
        if t <= top + 10:
            ax.axhline(t, color="grey", ls=":", lw=0.8)
    if many:  # the legend beside the axes, not over the curves
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        return _save(fig, Path(path), bbox="tight")
    ax.legend(loc="best", fontsize=8)
    return _save(fig, Path(path))


def plot_label_distribution(counts: np.ndarray, label_names: Sequence[str], path: Path,
                            title: str = "") -> Path:
    """Examples of each label in each client's partition: one bar per client (`counts[i, j]`:
    client i's examples of label j), stacked by label, the legend outside on the right."""
    from matplotlib import colormaps

    clients, labels = counts.shape
    fig, ax = _figure(title or "Examples per label in each client's partition",
                      "client (partition id)", "examples",
                      width=max(FIGSIZE[0], 0.25 * clients + 2))
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    colors = colormaps["RdYlGn"]([j / max(labels - 1, 1) for j in range(labels)])
    bottom = [0] * clients
    handles = []
    for j in range(labels):  # one collection of bars per label (a patch a bar: 1.8 s, not 1.0)
        top = [b + int(c) for b, c in zip(bottom, counts[:, j])]
        ax.add_collection(PolyCollection(
            [[(i - 0.4, b), (i + 0.4, b), (i + 0.4, t), (i - 0.4, t)]
             for i, (b, t) in enumerate(zip(bottom, top)) if t > b],
            facecolors=[colors[j]], edgecolors="none"))
        handles.append(Patch(facecolor=colors[j], label=str(label_names[j])))
        bottom = top
    ax.set_xlim(-0.6, clients - 0.4)
    ax.set_ylim(0, max(max(bottom), 1) * 1.05)
    ax.grid(False)
    ax.set_xticks(range(0, clients, 1 if clients <= 20 else 2))  # every other one named past 20
    fig.legend(handles[::-1], [h.get_label() for h in handles[::-1]], title="labels",
               loc="center left",  # top label on top
               bbox_to_anchor=(1.0, 0.5), fontsize=8, ncols=1 + (labels - 1) // 25)
    return _save(fig, path, bbox="tight")
