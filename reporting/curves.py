"""A table's per-round test accuracy, one CSV row per cell (`curves_csv`, read back by
`read_curves_csv`): what a page's plots are drawn from, committed beside its cells CSV
(`reporting.cells`) so that the plots, like the table, are rebuilt without the run folders, and
a rerun's curve can be laid over its cell's.

Columns: setting, method, seed, then one per round (1, 2, ..., R): the test accuracy measured
after that round, as a fraction written as Python writes floats (on 10,000 test images, four
decimals: exact); empty past the last round a cell had (a diverged cell stops early) or where a
round was not evaluated. The EMA the tables report is `reporting.metrics.ema_series` of these
values, the same steps the run took.

Read as hostile (docs/security.md#run-folders-and-results-read-back): bounded, no link followed,
every value a finite accuracy in [0, 1]; a bad file is refused naming the line, the column and
the fix.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fileio.reading import read_text_bounded

from .cells import CellsError, cell_name
from .table import csv_text

CURVES_LIMIT = 64 * 2**20  # 1,000 cells of 1,000 rounds is about 8 MB
MAX_ROUNDS = 100_000
MAX_ROWS = 100_000
KEYS = ["setting", "method", "seed"]


def curves_csv(cells: Sequence[dict[str, Any]]) -> str:
    """The CSV of `cells` (each {'setting', 'method', 'seed', 'curve': (rounds, accuracies)}),
    one column per round up to the last any cell has."""
    last = max((max(c["curve"][0], default=0) for c in cells), default=0)
    rows = []
    for c in cells:
        by_round = dict(zip(*c["curve"]))
        rows.append([c["setting"], c["method"], c["seed"]]
                    + [by_round.get(r, "") for r in range(1, last + 1)])
    return csv_text(KEYS + [str(r) for r in range(1, last + 1)], rows)


def read_curves_csv(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """{'<setting>/<method>/<seed>': (rounds, accuracies)} of a curves CSV (`curves_csv`);
    CellsError naming the line, the column and the fix; FileNotFoundError, or UnusableFile for
    a link, a large or foreign file."""
    path = Path(path)
    text = read_text_bounded(path, CURVES_LIMIT)
    fix = ("it was damaged or written by something else: write it again from the run folders "
           "(the page's command with --out-dir) or give the file the page wrote")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    curves: dict[str, tuple[list[int], list[float]]] = {}
    try:
        head = next(reader, None)
        if not head:
            raise CellsError(f"{path} is empty: {fix}")
        rounds = head[len(KEYS):]
        if head[:len(KEYS)] != KEYS or len(rounds) > MAX_ROUNDS or \
                rounds != [str(r) for r in range(1, len(rounds) + 1)]:
            raise CellsError(f"{path} line 1 is not the header of a curves file (it should be "
                             f"{','.join(KEYS)},1,2,...,R): {fix}")
        for line, row in enumerate(reader, 2):
            where = f"{path} line {line}"
            if len(curves) >= MAX_ROWS:
                raise CellsError(f"{path} has more than {MAX_ROWS} cells: {fix}")
            if len(row) != len(head):
                raise CellsError(f"{where} does not have one field per column: {fix}")
            if not re.fullmatch(r"-?\d+", row[2]):
                raise CellsError(f"{where}: seed {row[2]!r} is not a whole number: {fix}")
            name = cell_name({"setting": row[0], "method": row[1], "seed": int(row[2])})
            if name in curves:
                raise CellsError(f"{where}: cell {name} comes twice: {fix}")
            done, accs = [], []
            for r, text in enumerate(row[len(KEYS):], 1):
                if text == "":
                    continue
                try:
                    value = float(text)
                except ValueError:
                    value = math.nan
                if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                    raise CellsError(f"{where}: round {r} is {text!r}, not an accuracy in "
                                     f"[0, 1]: {fix}")
                done.append(r)
                accs.append(value)
            curves[name] = (done, accs)
    except csv.Error as err:
        raise CellsError(f"{path} line {reader.line_num} is no CSV ({err}): {fix}") from None
    return curves
