"""A run folder's results.json read back (docs/results.md#reading-a-run-folder): bounded and
never through a link (`fileio.reading`), and every field its readers use checked for type and
range before use, so that a damaged or foreign file (another run's, a person's, a planted one)
is refused with the reason instead of stopping whoever reads it: `reporting.status`, the sweep,
the ServerApp's `resume = 'latest'` looking through out-dir. The checks of the per-round rows
(`rows_problem`) also hold a checkpoint's rows (server_app/checkpoint.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fileio.errors import UnusableFile
from fileio.reading import read_json_bounded

RESULTS = "results.json"
# 256 MiB: a row is about 1 KB, so over 200,000 rounds; the papers' longest runs have 2,000
RESULTS_LIMIT = 256 * 2**20
STATUSES = ("running", "complete", "failed")
# a failed run's kind: 'diverged' (the training broke down: a result, as the papers' "Failed")
# or 'error' (anything else: a result of nothing)
FAILURES = ("diverged", "error")


def read_results(run_dir: Path) -> dict[str, Any]:
    """`run_dir`'s results.json, checked (`results_problem`); FileNotFoundError when there is
    none, UnusableFile naming the file and what is wrong otherwise."""
    path = Path(run_dir) / RESULTS
    data = read_json_bounded(path, RESULTS_LIMIT)
    problem = results_problem(data)
    if problem:
        raise UnusableFile(f"{path} is not a results file of this app ({problem}): it was "
                           "damaged or written by something else; remove it, or the folder")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def results_problem(data: Any) -> str | None:
    """What makes `data` no results.json of this app (None: nothing). Only `config` must be
    there (a file written before `status` existed lacks it; readers take what is missing as
    empty); every field present must have its type and range."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    config = data.get("config")
    if not isinstance(config, dict):
        return "'config' is not an object"
    rounds = config.get("num-server-rounds", 0)
    if not _is_int(rounds) or rounds < 0:
        return f"config 'num-server-rounds' is {rounds!r}, not a whole number >= 0"
    for key in ("method", "run-name"):
        if key in config and not isinstance(config[key], str):
            return f"config '{key}' is {config[key]!r}, not a string"
    if data.get("status") not in (None, *STATUSES):
        return f"'status' is {data.get('status')!r}, not one of {', '.join(STATUSES)}"
    for key in ("error", "run-uid", "started-at", "ended-at"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"'{key}' is {data[key]!r}, not a string"
    if data.get("failure") not in (None, *FAILURES):
        return f"'failure' is {data.get('failure')!r}, not one of {', '.join(FAILURES)}"
    if data.get("flower-run-id") is not None and not _is_int(data["flower-run-id"]):
        return f"'flower-run-id' is {data['flower-run-id']!r}, not a whole number"
    ids = data.get("flower-run-ids", [])
    if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
        return f"'flower-run-ids' is {ids!r}, not a list of whole numbers"
    summary = data.get("summary", {})
    if not isinstance(summary, dict):
        return f"'summary' is {summary!r}, not an object"
    if not isinstance(summary.get("complete", False), bool):
        return f"summary 'complete' is {summary['complete']!r}, not true or false"
    if not isinstance(summary.get("metric", ""), str):
        return f"summary 'metric' is {summary['metric']!r}, not a string"
    for key, value in summary.items():
        if key.startswith("final-") and value is not None and not _is_number(value):
            return f"summary '{key}' is {value!r}, not a number"
    return rows_problem(data.get("rounds", []))


def rows_problem(rows: Any) -> str | None:
    """What makes `rows` no list of per-round rows (None: nothing): objects whose 'round' is a
    whole number >= 0, rising from row to row, and whose other values are numbers or null."""
    if not isinstance(rows, list):
        return f"'rounds' is {type(rows).__name__}, not a list"
    last = -1
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"row {i} is {row!r}, not an object"
        number = row.get("round")
        if not _is_int(number) or number <= last:
            return (f"row {i} has round {number!r}, not a whole number above the row before's "
                    f"({last})" if last >= 0 else f"row {i} has round {number!r}, not a whole "
                    "number >= 0")
        last = number
        for key, value in row.items():
            if value is not None and not _is_number(value):
                return f"row {i} (round {number}) has '{key}' = {value!r}, not a number"
    return None
