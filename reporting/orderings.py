"""Which of a paper's orderings hold here, seed by seed (`orderings`): for the paper's own
method M and each other row B the paper reports, the paper's order of M and B by its final EMA,
and on each seed whether this table's M and B (paired by seed: the same split, sampling and
initial model) are in the same order by theirs. A diverged cell is below every cell that
completed; two diverged cells are no order. Written as a Markdown table by `orderings_table`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Ordering:
    """The paper's M vs B (`paper_gap`: M's value minus B's, in points) and, per seed, this
    table's gap (points; None: no order, e.g. both diverged or a seed missing)."""

    own: str
    other: str
    paper_gap: float
    gaps: dict[int, float | None]

    def holds(self, seed: int) -> bool | None:
        gap = self.gaps.get(seed)
        if gap is None:
            return None
        return (gap > 0) == (self.paper_gap > 0) and gap != 0


def _final(summary: Mapping[str, Any]) -> float | None:
    """The final EMA of a cell, -inf for a diverged one."""
    if summary.get("diverged"):
        return float("-inf")
    return summary.get("final-ema-acc")


def orderings(cells: Sequence[Mapping[str, Any]], setting: str, own: str,
              paper: Mapping[str, float], seeds: Sequence[int]) -> list[Ordering]:
    """The orderings of `own` (a row name) against each other row of `setting` that `paper`
    (row name -> the paper's final EMA in %) has, in the paper's order of the other rows."""
    final = {(c["method"], c["seed"]): _final(c["summary"]) for c in cells
             if c["setting"] == setting}
    out = []
    for other, value in paper.items():
        if other == own or own not in paper:
            continue
        gaps: dict[int, float | None] = {}
        for seed in seeds:
            a, b = final.get((own, seed)), final.get((other, seed))
            if a is None or b is None or a == b == float("-inf"):
                gaps[seed] = None
            elif float("-inf") in (a, b):
                gaps[seed] = float("inf") if b == float("-inf") else float("-inf")
            else:
                gaps[seed] = 100 * (a - b)
        out.append(Ordering(own, other, paper[own] - value, gaps))
    return out


def orderings_table(found: Sequence[Ordering], seeds: Sequence[int]) -> str:
    """| ordering (the paper's) | paper | seed s ... | holds on |: each seed's gap in points
    ('diverged' where one side did), '-' where there is no order."""
    def cell(gap: float | None) -> str:
        if gap is None:
            return "-"
        if gap in (float("inf"), float("-inf")):
            return "yes (the other diverged)" if gap > 0 else "no (it diverged)"
        return f"{gap:+.2f}"

    head = ["ordering (the paper's)", "paper (points)"] + [f"seed {s}" for s in seeds] + [
        "holds on"]
    rows = []
    for o in found:
        sign = ">" if o.paper_gap > 0 else "<"
        verdicts = [o.holds(s) for s in seeds]
        known = [v for v in verdicts if v is not None]
        rows.append([f"{o.own} {sign} {o.other}", f"{o.paper_gap:+.2f}"]
                    + [cell(o.gaps[s]) for s in seeds]
                    + [f"{sum(known)} of {len(known)} seeds" if known else "-"])
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * len(head)) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
