"""A table's cells, one CSV row each (`cells_csv`, read back by `read_cells_csv`): what a table
is built from, so that a table can be committed with the numbers behind it and rebuilt from
them (`method_runs`), and a rerun of one cell compared with its row.

Columns: setting, method, seed, status (complete or diverged: a diverged cell is a result,
written "Failed"), rounds (the rounds it had), last10-acc (the mean accuracy of its last 10
rounds), final-test-acc, final-ema-acc, acc-at-<R> (the EMA at round R), rounds-to-<X> (the
first round whose EMA reaches X %, or "T+"), bytes-down-total, bytes-up-total, bytes-total,
train-seconds, wall-seconds (the ServerApp's), step-ratio (the median of the server's step
against the clients' mean update: reporting.metrics.step_ratio; empty for runs that did not
record it), momentum-cos and momentum-ratio (the medians of cos(lambda m, d) and of
||lambda m|| / ||eta d||: reporting.metrics.momentum_alignment; empty where the rule's step is
not lambda m + eta d; a file written before these two columns existed lacks both, and its
cells read as empty there), code-version (`reporting.code_version`'s label:
the commit it ran on). Accuracies are fractions, written as Python writes floats, so a table
built from the file equals the table built from the run folders.

The file is read as hostile (docs/security.md#run-folders-and-results-read-back): bounded,
no link followed, every value checked by the results file's schema
(`reporting.results_file.value_problem`); a bad file is refused with the line, the column and
the fix. `versions_problem` is the rule that a table holds cells of one code version.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fileio.reading import read_text_bounded

from .code_version import OBJECT_ID, UNKNOWN, short_label
from .metrics import round_key
from .results_file import value_problem
from .table import MethodRuns, csv_text

CELLS_CSV = "cells.csv"
CELLS_LIMIT = 16 * 2**20  # about 1,000 cells per MB
MAX_ROWS = 100_000
LEADING = ["setting", "method", "seed", "status", "rounds", "last10-acc", "final-test-acc",
           "final-ema-acc"]
TRAILING = ["bytes-down-total", "bytes-up-total", "bytes-total", "train-seconds",
            "wall-seconds", "step-ratio", "momentum-cos", "momentum-ratio", "code-version"]
ADDED = ("momentum-cos", "momentum-ratio")  # columns an older file lacks (read as empty)
STATUSES = ("complete", "diverged")
LABEL = re.compile(rf"(?:{OBJECT_ID.pattern})(?:\+dirty(?:\?|\.[0-9a-f]{{16}}))?"
                   rf"|files\.[0-9a-f]{{16}}|{UNKNOWN}")
ROUNDS_TO = re.compile(r"\d+\+")
SHOWN_CELLS = 5  # cells named per version in versions_problem's message


class CellsError(ValueError):
    """A cells CSV that is not one this app wrote; the message names the line and the fix."""


def cell_name(cell: dict[str, Any]) -> str:
    """'<setting>/<method>/<seed>' ('-' for no setting), as the sweep's --cells matches."""
    return f"{cell['setting'] or '-'}/{cell['method']}/{cell['seed']}"


def cells_csv(cells: Sequence[dict[str, Any]], acc_at_rounds: Sequence[int],
              target_accs: Sequence[float]) -> str:
    """The CSV of `cells` (each {'setting', 'method', 'seed', 'summary', 'code-version'}; the
    summary as `reporting.metrics.run_summary` makes it, with 'diverged' and 'wall-seconds')."""
    head = (LEADING + [f"acc-at-{round_key(r)}" for r in acc_at_rounds]
            + [f"rounds-to-{round_key(t)}" for t in target_accs] + TRAILING)
    rows = []
    for c in cells:
        s = c["summary"]
        rows.append([c["setting"], c["method"], c["seed"],
                     "diverged" if s.get("diverged") else "complete", s["rounds"],
                     s.get("last10-acc"), s.get("final-test-acc"), s.get("final-ema-acc")]
                    + [s["acc-at-round"].get(round_key(r)) for r in acc_at_rounds]
                    + [s["rounds-to-acc"][round_key(t)] for t in target_accs]
                    + [s.get("bytes-down-total"), s.get("bytes-up-total"), s.get("bytes-total"),
                       s.get("train-seconds"), s.get("wall-seconds"), s.get("step-ratio"),
                       s.get("momentum-cos"), s.get("momentum-ratio"), c["code-version"]])
    return csv_text(head, [["" if v is None else v for v in r] for r in rows])


def _column_number(name: str, prefix: str) -> float:
    text = name[len(prefix):]
    if not re.fullmatch(r"\d+(\.\d+)?", text):
        raise ValueError(name)
    return float(text)


def _value(column: str, text: str) -> Any:
    """A CSV field as the number (or None, or 'T+') the summary holds; ValueError saying why."""
    if text == "":
        return None
    if column.startswith("rounds-to-"):
        if ROUNDS_TO.fullmatch(text):
            return text
        column = "rounds"
    if column in ("rounds", "bytes-down-total", "bytes-up-total", "bytes-total"):
        if not re.fullmatch(r"\d+", text):
            raise ValueError(f"{text!r}, not a whole number >= 0")
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r}, not a number") from None
    why = value_problem("ema-acc" if column.startswith("acc-at-") else column, value)
    if why:
        raise ValueError(why)
    return value


def read_cells_csv(path: Path) -> tuple[list[dict[str, Any]], list[int], list[float]]:
    """(cells, acc-at rounds, targets) of a cells CSV (`cells_csv`), every field checked;
    CellsError naming the line, the column and the fix; FileNotFoundError, or UnusableFile for
    a link, a large or foreign file."""
    path = Path(path)
    text = read_text_bounded(path, CELLS_LIMIT)
    fix = (f"it was damaged or written by something else: write it again (python -m "
           f"experiments.sweep <sweep file> --table-only writes {CELLS_CSV}) or give the file "
           "the sweep wrote")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        head = next(reader, None)
        if not head:
            raise CellsError(f"{path} is empty: {fix}")
        n_rounds = [c for c in head if c.startswith("acc-at-")]
        n_targets = [c for c in head if c.startswith("rounds-to-")]
        expected = LEADING + n_rounds + n_targets + TRAILING
        older = [c for c in expected if c not in ADDED]
        if head not in (expected, older) or len(set(head)) != len(head):
            raise CellsError(f"{path} line 1 is not the header of a cells file (it should be "
                             f"{','.join(LEADING)},acc-at-<R>...,rounds-to-<X>...,"
                             f"{','.join(TRAILING)}): {fix}")
        try:
            rounds = [int(_column_number(c, "acc-at-")) for c in n_rounds]
            targets = [_column_number(c, "rounds-to-") for c in n_targets]
        except ValueError as err:
            raise CellsError(f"{path} line 1: column {err} names no round or target: "
                             f"{fix}") from None
        cells = []
        for line, row in enumerate(reader, 2):
            if len(cells) >= MAX_ROWS:
                raise CellsError(f"{path} has more than {MAX_ROWS} cells: {fix}")
            cells.append(_cell(path, line, dict(zip(head, row)), len(row) == len(head), fix))
    except csv.Error as err:
        raise CellsError(f"{path} line {reader.line_num} is no CSV ({err}): {fix}") from None
    return cells, rounds, targets


def cell_names_csv(path: Path) -> list[dict[str, Any]]:
    """The cells of a cells CSV by name and code version alone ({'setting', 'method', 'seed',
    'code-version'}): what a sweep run in parts needs from the committed CSV
    (experiments.sweep --done-in), read from any version of the file's columns, so that the
    commit a table's first cells ran on reads the CSV a later page wrote. Bounded, no link
    followed; CellsError naming the line and the fix."""
    path = Path(path)
    text = read_text_bounded(path, CELLS_LIMIT)
    fix = "give the cells CSV a results page wrote (e.g. docs/fedacg-fmnist-cells.csv)"
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    names = ("setting", "method", "seed", "code-version")
    try:
        if not reader.fieldnames or any(n not in reader.fieldnames for n in names):
            raise CellsError(f"{path} line 1 names no {', '.join(names)} columns: {fix}")
        cells = []
        for line, row in enumerate(reader, 2):
            if len(cells) >= MAX_ROWS:
                raise CellsError(f"{path} has more than {MAX_ROWS} cells: {fix}")
            if None in row or any(row[n] is None for n in names):
                raise CellsError(f"{path} line {line} does not have one field per column: {fix}")
            if not re.fullmatch(r"-?\d+", row["seed"]):
                raise CellsError(f"{path} line {line}: seed {row['seed']!r} is not a whole "
                                 f"number: {fix}")
            if not LABEL.fullmatch(row["code-version"]):
                raise CellsError(f"{path} line {line}: code-version {row['code-version']!r} is "
                                 f"no version label: {fix}")
            cells.append({"setting": row["setting"], "method": row["method"],
                          "seed": int(row["seed"]), "code-version": row["code-version"]})
    except csv.Error as err:
        raise CellsError(f"{path} line {reader.line_num} is no CSV ({err}): {fix}") from None
    return cells


def _cell(path: Path, line: int, row: dict[str, str], whole: bool, fix: str) -> dict[str, Any]:
    """One CSV row as a cell ({'setting', 'method', 'seed', 'summary', 'code-version'})."""
    where = f"{path} line {line}"
    if not whole:
        raise CellsError(f"{where} does not have one field per column: {fix}")
    if not re.fullmatch(r"-?\d+", row["seed"]):
        raise CellsError(f"{where}: seed {row['seed']!r} is not a whole number: {fix}")
    if row["status"] not in STATUSES:
        raise CellsError(f"{where}: status {row['status']!r} is not one of "
                         f"{', '.join(STATUSES)}: {fix}")
    if not LABEL.fullmatch(row["code-version"]):
        raise CellsError(f"{where}: code-version {row['code-version']!r} is no version label "
                         f"(a commit id, files.<16 hex> or {UNKNOWN}): {fix}")
    summary: dict[str, Any] = {"diverged": row["status"] == "diverged", "acc-at-round": {},
                               "rounds-to-acc": {}}
    for column, text in row.items():
        if column in ("setting", "method", "seed", "status", "code-version"):
            continue
        try:
            value = _value(column, text)
        except ValueError as err:
            raise CellsError(f"{where}: {column} is {err}: {fix}") from None
        if column.startswith("acc-at-"):
            summary["acc-at-round"][column[len("acc-at-"):]] = value
        elif column.startswith("rounds-to-"):
            if value is None:
                raise CellsError(f"{where}: {column} is empty, not a round or 'T+': {fix}")
            summary["rounds-to-acc"][column[len("rounds-to-"):]] = value
        else:
            summary[column] = value
    for column in ADDED:
        summary.setdefault(column, None)
    if summary["rounds"] is None or summary["bytes-total"] is None:
        raise CellsError(f"{where}: rounds and bytes-total must hold a number: {fix}")
    return {"setting": row["setting"], "method": row["method"], "seed": int(row["seed"]),
            "summary": summary, "code-version": row["code-version"]}


def method_runs(cells: Sequence[dict[str, Any]]) -> list[MethodRuns]:
    """The table's rows: one `MethodRuns` per (setting, method), in the order they first come,
    each holding its cells' summaries in their order."""
    rows: dict[tuple[str, str], MethodRuns] = {}
    for c in cells:
        rows.setdefault((c["setting"], c["method"]),
                        MethodRuns(c["method"], setting=c["setting"])).summaries.append(
                            c["summary"])
    return list(rows.values())


def versions_problem(cells: Sequence[dict[str, Any]], fix: str) -> str | None:
    """None when every cell ran on one code version; else one message naming each version and
    (some of) its cells, and `fix`."""
    by_version: dict[str, list[str]] = {}
    for c in cells:
        by_version.setdefault(c["code-version"], []).append(cell_name(c))
    if len(by_version) < 2:
        return None
    parts = []
    for label, names in sorted(by_version.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(names[:SHOWN_CELLS]) + (f", ... ({len(names)} in all)"
                                                  if len(names) > SHOWN_CELLS else "")
        parts.append(f"{short_label(label)}: {shown}")
    return (f"the cells ran on {len(by_version)} code versions ({'; '.join(parts)}), and a "
            f"table of them would mix code. {fix}")
