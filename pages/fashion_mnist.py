"""docs/fashion-mnist.md's measured block: GC-Fed's Table 5 on Fashion-MNIST, from the sweep.

    python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml --jobs 2        # the runs (hours)
    python -m pages.fashion_mnist                      # the page's table and plots from them
    python -m pages.fashion_mnist --out-dir /root/fmnist --note '; shared with other jobs'

The block (between `<!-- example:fmnist-table -->` and `<!-- /example:fmnist-table -->`) holds,
per setting, the sweep's table with the paper's EMNIST column beside each row, the plots (copied
to docs/), how many of the cells had finished, the time their ServerApps ran and the machine.
The text around it (what holds of the paper's orderings) is written by a person from it.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
from pathlib import Path

from pages.examples import ROOT, _number, machine, replace_block

SWEEP_FILE = ROOT / "sweeps" / "gcfed-t5-fmnist.yaml"
PAGE = ROOT / "docs" / "fashion-mnist.md"


def _time(text) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None


def block(out_dir: Path | None, note: str = "") -> str:
    """The page's measured block from the sweep's finished cells (it (re)writes their table)."""
    from experiments.sweep import is_done, load_sweep, slug, write_report
    from reporting.metrics import round_key
    from reporting.results_file import read_results
    from reporting.table import MethodRuns, header, markdown, table_rows
    from run_config import load_setup, resolve

    sweep = load_sweep(SWEEP_FILE, out_dir=out_dir)
    write_report(sweep)  # table.md, table.csv, runs.csv, the plots
    done = [c for c in sweep.cells if is_done(c)]
    results = {id(c): read_results(c.run_dir) for c in done}
    parts = []
    for setting in sweep.settings:
        cells = [c for c in done if c.setting == setting]
        if not cells:
            continue
        cfg = resolve(cells[0].run_config)
        reported = load_setup(cfg["setup"])["reported"]["rows"]
        rows = []
        for method in sweep.methods:
            mine = [c for c in cells if c.method == method]
            if not mine:
                continue
            from reporting.metrics import run_summary

            runs = MethodRuns(method, setting=setting)
            for c in mine:
                r = results[id(c)]
                summary = run_summary(r.get("rounds", []), acc_at_rounds=sweep.acc_at_rounds,
                                      target_accs=sweep.target_accs,
                                      total_rounds=cfg["num-server-rounds"])
                summary["diverged"] = r.get("status") != "complete"
                runs.summaries.append(summary)
            paper = reported.get(mine[0].run_config["method"])
            row = table_rows([runs], sweep.acc_at_rounds, sweep.target_accs)[0]
            row.append("-" if paper is None else
                       f"{paper[0]:.2f}" + ("" if paper[1] is None else f" ± {paper[1]:.2f}")
                       + (" (Failed)" if paper[1] is None else ""))
            rows.append(row)
        head = header(sweep.acc_at_rounds, sweep.target_accs) + ["GC-Fed's EMNIST (%)"]
        stem = slug(setting)
        for kind in ("acc", "ema"):
            shutil.copy(sweep.dir / f"{kind}-{stem}.png",
                        ROOT / "docs" / f"fashion-mnist-{kind}-{stem}.png")
        parts.append(f"### {setting}: {load_setup(cfg['setup'])['description']}\n\n"
                     f"{markdown(head, rows)}\n\n"
                     f"![test accuracy per round, {setting}](fashion-mnist-acc-{stem}.png)\n"
                     f"![EMA test accuracy per round, {setting}](fashion-mnist-ema-{stem}.png)")
    seconds = sum(_number(results[id(c)]["summary"].get("wall-seconds")) for c in done)
    starts = [_time(results[id(c)].get("started-at")) for c in done]
    ends = [_time(results[id(c)].get("ended-at")) for c in done]
    span = ""
    if done and all(starts) and all(ends):
        hours = (max(ends) - min(starts)).total_seconds() / 3600
        span = f", {hours:.1f} hours from the first cell's start to the last one's end"
    rounds_keys = ", ".join(round_key(r) for r in sweep.acc_at_rounds)
    return ("\n\n".join(parts)
            + f"\n\nMeasured with `python -m experiments.sweep sweeps/gcfed-t5-fmnist.yaml "
            f"--jobs 2`: {len(done)} of its {len(sweep.cells)} cells had finished (the Seeds "
            f"column); their ServerApps ran {seconds / 3600:.1f} hours in all (two at a "
            f"time){span}, on {machine()}{note}. Final acc.: the test accuracy of round 200; "
            f"Acc. at {rounds_keys}R: its EMA. The last column is GC-Fed's Table 5 EMNIST "
            "column (5 of 1,000 clients, LDA 0.05, 62 classes), beside ours for comparison "
            "only: it is another dataset.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pages.fashion_mnist", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, help="the sweep's out-dir, as given to it")
    parser.add_argument("--note", default="",
                        help="appended to the machine description, e.g. '; shared with other jobs'")
    args = parser.parse_args(argv)
    text = replace_block(PAGE.read_text(), "fmnist-table", block(args.out_dir, args.note))
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
