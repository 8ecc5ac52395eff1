"""Did a run finish? `python -m reporting.status RUN_DIR [RUN_DIR ...]`: one line per run, and
an exit status a script can test (`flwr run` itself exits 0 also when the run failed).

    0  complete: every round ran and the final model was saved
    1  failed: the run stopped with an error (results.json holds it)
    3  incomplete: still running, or stopped without a word (killed, `flwr stop`, power loss)
    4  cannot read: no results.json (the run failed before it had a folder, e.g. a config
       error, or the path is wrong: state `missing`), or one that cannot be read (a link, a
       named pipe, too large, not JSON, fields of the wrong type: state `unreadable`, with why)

With several folders the exit status is the highest of theirs. `--json` prints the state of
each folder as one JSON object per line instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .results_file import read_results

# 'failed' (the run stopped with an error) and 'cannot read' (missing / unreadable) never share
# a status
EXIT = {"complete": 0, "failed": 1, "incomplete": 3, "missing": 4, "unreadable": 4}


def run_state(run_dir: Path) -> dict[str, Any]:
    """{'state': complete | failed | incomplete | missing | unreadable, 'rounds', 'of', 'error',
    ...}."""
    run_dir = Path(run_dir)
    try:
        results = read_results(run_dir)
    except FileNotFoundError:
        return {"run-dir": str(run_dir), "state": "missing",
                "error": "no results.json (not a run folder, or the run failed before it had "
                "one)"}
    except OSError as err:  # UnusableFile (a link, a pipe, bad JSON or fields), no permission
        return {"run-dir": str(run_dir), "state": "unreadable",
                "error": f"results.json cannot be read: {err}"}
    summary = results.get("summary") or {}
    rows = results.get("rounds") or []
    status = results.get("status")
    if summary.get("complete") and status in (None, "complete"):  # None: written before status
        state = "complete"
    elif status == "failed":
        state = "failed"
    else:
        state = "incomplete"
    config = results.get("config") or {}
    return {"run-dir": str(run_dir), "state": state, "status": status,
            "rounds": max((r.get("round", 0) for r in rows), default=0),
            "of": config.get("num-server-rounds"), "error": results.get("error"),
            "metric": summary.get("metric", "test-acc"),
            "final-test-acc": summary.get("final-test-acc"),
            "final-fed-acc": summary.get("final-fed-acc"),
            "final-ema-acc": summary.get("final-ema-acc"),
            "flower-run-id": results.get("flower-run-id")}


def describe(s: dict[str, Any]) -> str:
    where = s["run-dir"]
    if s["state"] in ("missing", "unreadable"):
        return f"{s['state']:<11s} {where}: {s['error']}"
    progress = f"{s['rounds']}/{s['of']} rounds"
    if s["state"] == "complete":
        metric = s.get("metric") or "test-acc"  # fed-acc: no server test set
        acc = s.get(f"final-{metric}")
        ema = s["final-ema-acc"]
        accs = (f", {metric} {acc:.4f}" if isinstance(acc, (int, float)) else "") + \
               (f", ema-acc {ema:.4f}" if isinstance(ema, (int, float)) else "")
        return f"complete    {where}: {progress}{accs}"
    if s["state"] == "failed":
        return f"failed      {where}: after {progress}: {s['error']}"
    return (f"incomplete  {where}: {progress} (status '{s['status']}': still running, or "
            "stopped without an error)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reporting.status", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--json", action="store_true", help="one JSON object per folder")
    args = parser.parse_args(argv)
    worst = 0
    for run_dir in args.run_dirs:
        s = run_state(run_dir)
        print(json.dumps(s) if args.json else describe(s), flush=True)
        worst = max(worst, EXIT[s["state"]])
    return worst


if __name__ == "__main__":
    sys.exit(main())
