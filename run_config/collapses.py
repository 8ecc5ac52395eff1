"""Combinations a results page saw collapse on every seed, and the warning a run of one gets.

`collapses.json` beside this module lists them; a results page writes its own entries when it
writes its cells (pages/sweep_page.py, from `entries`), and nothing else does. An entry is a
(setting, method) of a page's sweep whose every seed (two or more) diverged or ended at chance
(the mean accuracy of its last 10 rounds under 1.5 / classes), with the cell's resolved config:
every key that changes the maths (`combination`). `collapse_warnings(cfg)` names each entry a
run config matches, with a link to its page: `python -m run_config check` prints them and the
ServerApp logs them with its first lines (docs/results.md#combinations-that-collapse).

The file ships with the app and is read bounded; one that cannot be read gives no warning and
says why once (a run is never stopped for it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fileio.atomic import write_text_atomic
from fileio.reading import read_text_bounded

from .schema import KEYS_BY_NAME

COLLAPSES = Path(__file__).with_name("collapses.json")
LIMIT = 4 * 2**20
# keys that do not make a combination: where a run is written, what it reports, its length,
# its data's path and seed, and how a set-up was named (its values are in the config)
NOT_COMBINATION = {"seed", "out-dir", "run-name", "setup", "setup-overrides", "dataset-path",
                   "acc-at-rounds", "target-accs", "num-server-rounds"}
CHANCE_FACTOR = 1.5  # "ended at chance": the last 10 rounds' mean under 1.5 / classes


def combination(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a resolved config that make its combination: every key that changes the
    maths (not `resume_may_differ`), less `NOT_COMBINATION`."""
    return {k: cfg[k] for k in sorted(cfg) if k in KEYS_BY_NAME
            and not KEYS_BY_NAME[k].resume_may_differ and k not in NOT_COMBINATION}


def collapsed(summary: Mapping[str, Any], classes: int) -> bool:
    """A cell's summary (reporting.cells) diverged or ended at chance."""
    if summary.get("diverged"):
        return True
    last = summary.get("last10-acc")
    return last is not None and last < CHANCE_FACTOR / classes


def entries(page: str, cells: Sequence[Mapping[str, Any]],
            configs: Mapping[tuple[str, str], Mapping[str, Any]],
            classes: Mapping[tuple[str, str], int]) -> list[dict[str, Any]]:
    """The page's entries: each (setting, method) of `cells` (reporting.cells' cells) with two
    or more seeds, every one collapsed; `configs` and `classes` give each one's resolved config
    and its dataset's class count."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["setting"], c["method"]), []).append(c["summary"])
    out = []
    for (setting, method), summaries in groups.items():
        k = classes[setting, method]
        if len(summaries) >= 2 and all(collapsed(s, k) for s in summaries):
            diverged = sum(bool(s.get("diverged")) for s in summaries)
            out.append({"page": page, "cell": f"{setting}/{method}",
                        "seeds": len(summaries), "diverged": diverged,
                        "at-chance": len(summaries) - diverged,
                        "config": combination(configs[setting, method])})
    return out


def load(path: Path | None = None) -> list[dict[str, Any]]:
    """The entries of `path` (default `COLLAPSES`; none when it is missing); ValueError saying
    what is wrong."""
    path = path or COLLAPSES
    try:
        data = json.loads(read_text_bounded(path, LIMIT))
    except FileNotFoundError:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("collapses"), list) or any(
            not isinstance(e, dict) or not isinstance(e.get("config"), dict)
            or not isinstance(e.get("page"), str) or not isinstance(e.get("cell"), str)
            for e in data["collapses"]):
        raise ValueError(f"{path} is not a list of collapses as the pages write it")
    return data["collapses"]


def replace_page(page: str, new: list[dict[str, Any]], path: Path | None = None) -> None:
    """`path` (default `COLLAPSES`) with `page`'s entries replaced by `new` (the other pages'
    kept), written all or nothing."""
    path = path or COLLAPSES
    kept = [e for e in load(path) if e["page"] != page]
    text = json.dumps({"collapses": kept + new}, indent=1, sort_keys=True) + "\n"
    write_text_atomic(path, text)


def collapse_warnings(cfg: Mapping[str, Any], path: Path | None = None) -> list[str]:
    """One line for each entry (of `path`, default `COLLAPSES`) whose combination `cfg`
    (resolved) is."""
    try:
        known = load(path)
    except (OSError, ValueError) as err:
        return [f"the list of combinations that collapsed could not be read ({err})"]
    mine = combination(cfg)
    lines = []
    for e in known:
        if all(mine.get(k, object()) == v for k, v in e["config"].items()) and \
                set(e["config"]) == set(mine):
            how = " and ".join(part for part in (
                f"diverged on {e.get('diverged', 0)}" if e.get("diverged") else "",
                f"ended at chance on {e.get('at-chance', 0)}" if e.get("at-chance") else "")
                if part)
            lines.append(f"this combination {how} of {e.get('seeds')} seeds in {e['page']} "
                         f"(its cell {e['cell']}): read the page before spending a run on it")
    return lines
