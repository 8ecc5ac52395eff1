"""A run folder's results.json read back (docs/results.md#reading-a-run-folder): bounded and
never through a link (`fileio.reading`), and every field its readers use checked for type and
range before use, so that a damaged or foreign file (another run's, a person's, a planted one)
is refused with the reason instead of stopping whoever reads it, or being shown as a number:
`reporting.status`, the sweep and its resume, the generated pages, the ServerApp's
`resume = 'latest'` looking through out-dir. The numbers' ranges are one schema
(`value_problem`: accuracies in [0, 1], times finite and >= 0, counts whole and >= 0, every
number finite; docs/security.md#run-folders-and-results-read-back). The checks of the
per-round rows (`rows_problem`) also hold a checkpoint's rows (server_app/checkpoint.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from fileio.errors import UnusableFile
from fileio.reading import read_json_bounded

from .code_version import version_problem

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


# The one schema of the numbers read back from a results file (its rows, a checkpoint's rows,
# its summary): every number finite; the numbers the app measures itself have their range. A
# value outside is no value this app wrote: the file is refused, never shown ('inf ± nan',
# -700 %, "ran inf hours"). The clients' own metrics in a row (`train-<key>`, `fed-loss`) are
# only finite: their names come from the clients (the server screens each reply's values,
# server_math/records.py), so a name must never make a run's own results.json unreadable.
ACC_ROUNDING = 1e-12  # an average of accuracies of 1 may round to 1 + 2e-16; 1.0000001 is none
FRACTION_KEYS = frozenset({"test-acc", "ema-acc", "fed-acc", "train-acc", "final-test-acc",
                           "final-ema-acc", "final-fed-acc", "last10-acc"})
SECONDS_KEYS = frozenset({"seconds", "eval-seconds", "train-seconds", "wall-seconds"})
COSINE_KEYS = frozenset({"momentum-cos"})
COUNT_KEYS = re.compile(r"^(round|rounds|(eval-)?clients-(sampled|replied|failed)|"
                        r"(eval-)?bytes-(down|up)(-total)?|bytes-total)$")


def _kind(key: str) -> str:
    """'fraction' (an accuracy: in [0, 1]), 'seconds' (finite, >= 0), 'count' (a whole number
    >= 0, not a bool), 'cosine' (in [-1, 1]) or 'number' (finite) for a key of a row or
    summary."""
    if COUNT_KEYS.match(key):
        return "count"
    if key in FRACTION_KEYS:
        return "fraction"
    if key in COSINE_KEYS:
        return "cosine"
    if key in SECONDS_KEYS:
        return "seconds"
    return "number"


def value_problem(key: str, value: Any) -> str | None:
    """What makes `value` no value of `key` (None: nothing): null is allowed (a value not
    measured, or NaN written as null); a number must be finite and in the key's range."""
    if value is None:
        return None
    kind = _kind(key)
    if kind == "count":
        return None if _is_int(value) and value >= 0 else f"{value!r}, not a whole number >= 0"
    if not _is_number(value) or not math.isfinite(value):
        return f"{value!r}, not a finite number"
    if kind == "fraction" and not 0 <= value <= 1 + ACC_ROUNDING:
        return f"{value!r}, not an accuracy in [0, 1]"
    if kind == "seconds" and value < 0:
        return f"{value!r}, not a time >= 0"
    if kind == "cosine" and not -1 <= value <= 1:
        return f"{value!r}, not a cosine in [-1, 1]"
    return None


def summary_problem(summary: dict[str, Any]) -> str | None:
    """What makes a results file's `summary` unusable (None: nothing): its flags and names of
    their types, every number of the schema (`value_problem`), 'acc-at-round' a mapping to
    accuracies, 'rounds-to-acc' a mapping to rounds or 'T+'."""
    if not isinstance(summary.get("complete", False), bool):
        return f"summary 'complete' is {summary['complete']!r}, not true or false"
    if not isinstance(summary.get("metric", ""), str):
        return f"summary 'metric' is {summary['metric']!r}, not a string"
    for key, value in summary.items():
        if key in ("complete", "metric"):
            continue
        if key in ("acc-at-round", "rounds-to-acc"):
            if not isinstance(value, dict):
                return f"summary '{key}' is {value!r}, not an object"
            for at, v in value.items():
                if key == "acc-at-round":
                    why = value_problem("ema-acc", v)  # (the EMA at a round)
                elif isinstance(v, str):
                    why = None if re.fullmatch(r"\d+\+", v) else f"{v!r}, not a round or 'T+'"
                else:
                    why = value_problem("rounds", v)
                if why:
                    return f"summary '{key}' of {at!r} is {why}"
            continue
        why = value_problem(key, value)
        if why:
            return f"summary '{key}' is {why}"
    return None


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
    if data.get("code-version") is not None:
        why = version_problem(data["code-version"])
        if why:
            return f"'code-version' {why}"
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
    why = summary_problem(summary)
    if why:
        return why
    return rows_problem(data.get("rounds", []))


def rows_problem(rows: Any) -> str | None:
    """What makes `rows` no list of per-round rows (None: nothing): objects whose 'round' is a
    whole number >= 0, rising from row to row, and whose other values are null or numbers in
    their key's range (`value_problem`: accuracies in [0, 1], times >= 0, counts whole, every
    number finite)."""
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
            why = value_problem(str(key), value)
            if why:
                return f"row {i} (round {number}) has '{key}' = {why}"
    return None
