"""How far honest replies stray from their round's median: the numbers behind the influence
limits' defaults (docs/security.md#honest-runs).

    python -m benchmarks.honest_norms                       # every preset x every split, markdown
    python -m benchmarks.honest_norms --methods fedacg,scaffold --splits default --json out.json
    python -m benchmarks.honest_norms --splits default --seeds 0,1,2 --rounds 100 --methods ...
    python -m benchmarks.honest_norms --from-json a.json,b.json   # the table of earlier runs

Each run is a preset on digits through the real ServerApp and ClientApp in this process
(`inprocess`), as the README's main command runs it: 20 clients, 5 sampled per round,
30 rounds, no attacker, with every influence limit off (`update-norm-ratio`,
`update-clip-ratio`, `record-norm-ratio`, `num-examples-ratio` = 0) so that nothing is changed
before it is measured. Before each aggregation the server rule's input is read: per reply its
update norm ||w_i - phi||, the norm of each extra record it sends (SCAFFOLD's `scaffold-dc`,
FedDC's `feddc-dg`; from the point the rule's `up_centers()` gives, as the screen measures it)
and its claimed num-examples n_i, each over the round's median of the same quantity. The table
gives, per preset and split, over all rounds, the largest update ratio (what `update-norm-ratio`
must stay above to leave honest runs alone) and the smallest (a reply scaled by 1e3 is 1e3 x
that over the median), then the largest ratio of each extra record (`record-norm-ratio`) and of
the claims (`num-examples-ratio`).

Splits: `default` (FedACG's balanced Dirichlet 0.3, the app's default), `iid`, `shards` (2
label-sorted shards per client), and GC-Fed's unbalanced LDA at 0.1 and 0.05 with its local
update (5 local epochs of batches of 50: clients run as many steps as they hold examples).
Presets that cannot run on digits' CNN (FedMLB's part runs on ResNet-18 only) are left out.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLIENTS, ROUNDS = 20, 30
BASE = {"dataset": "digits", "num-server-rounds": ROUNDS, "fraction-train": 0.25,
        "eval-every": ROUNDS, "checkpoint-every": 0, "plot-every": 0,
        "update-norm-ratio": 0.0, "update-clip-ratio": 0.0, "record-norm-ratio": 0.0,
        "num-examples-ratio": 0.0}
GCFED_LOCAL = {"lda-min-size": 1, "lda-self-balancing": True, "local-epochs": 5,
               "batch-size": 50}
SPLITS = {
    "default": {},
    "iid": {"partitioner": "iid"},
    "shards": {"partitioner": "shards"},
    "lda-0.1": {"partitioner": "lda", "lda-alpha": 0.1, **GCFED_LOCAL},
    "lda-0.05": {"partitioner": "lda", "lda-alpha": 0.05, **GCFED_LOCAL},
}


def _norm(tensors) -> float:
    """||x|| over the float tensors, in float64 (an independent computation, not the screen's)."""
    return sum(float(t.double().square().sum()) for t in tensors if t.is_floating_point()) ** 0.5


def _state(value) -> dict:
    return value.to_torch_state_dict() if hasattr(value, "to_torch_state_dict") else value


def watch(rounds: list):
    """A stand-in for `strategies.build_strategy` that records, before each aggregation, every
    reply's ratios to the round's median (appended to `rounds`, one dict per round)."""
    import server_app.app as server

    build = server.build_strategy

    def build_and_watch(*args, **kwargs):
        strategy = build(*args, **kwargs)
        rule = strategy.rule
        aggregate = rule.aggregate

        def watched(server_round, good, phi, up):
            if len(good) >= 2:
                measured = {"update": [_norm(m[k] - phi[k] for k in phi if k in m)
                                       for _, m, _ in good],
                            "examples": [n for _, _, n in good]}
                centers = rule.up_centers()  # measured as the screen does: from the center
                for name in sorted(up[0]) if up else ():
                    c = centers.get(name, {})
                    measured[name] = [_norm(v - c[k] if k in c else v
                                            for k, v in _state(u[name]).items()) for u in up]
                rounds.append({k: [v / statistics.median(vs) if statistics.median(vs) else 1.0
                                   for v in vs] for k, vs in measured.items()})
            return aggregate(server_round, good, phi, up)

        rule.aggregate = watched
        return strategy

    server.build_strategy = build_and_watch
    return lambda: setattr(server, "build_strategy", build)


def measure(method: str, split: str, folder: Path, seed: int = 0, rounds: int = ROUNDS) -> dict:
    """{quantity: [ratios of every reply of every round]} of one clean run."""
    import torch

    from inprocess import run_in_process

    seen: list = []  # one dict of ratios per round
    undo = watch(seen)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: threads only contend on a shared machine
    try:
        run_in_process({**BASE, **SPLITS[split], "method": method, "seed": seed,
                        "num-server-rounds": rounds, "eval-every": rounds,
                        "out-dir": str(folder), "run-name": "run"}, CLIENTS)
    finally:
        undo()
        torch.set_num_threads(threads)
        shutil.rmtree(folder / "run", ignore_errors=True)
    out: dict = {}
    for row in seen:
        for k, v in row.items():
            out.setdefault(k, []).extend(v)
    return out


def summary(ratios: dict) -> dict:
    records = {k: max(v) for k, v in ratios.items() if k not in ("update", "examples")}
    return {"update-max": max(ratios["update"]), "update-min": min(ratios["update"]),
            "examples-max": max(ratios["examples"]), "records": records}


def runs_on_digits(method: str) -> str | None:
    """None, or why the preset cannot run on digits' default model (FedMLB: ResNet-18 only)."""
    from run_config import ConfigError, resolve

    try:
        resolve({**BASE, "method": method})
    except ConfigError as err:
        return str(err)
    return None


def pivot(rows: dict, methods: list[str], splits: list[str]) -> str:
    """The doc's table: one row per preset, one column per split, each cell `max / min` of its
    update ratios; then each extra record's largest ratio, and the largest claim ratio."""
    head = ["| preset | " + " | ".join(splits) + " |", "| --- " * (len(splits) + 1) + "|"]
    lines, records = list(head), {}
    for method in methods:
        cells = []
        for split in splits:
            s = rows.get(f"{method} {split}")
            cells.append("-" if s is None else f"{s['update-max']:.2f} / {s['update-min']:.2f}")
            for name, v in (s or {}).get("records", {}).items():
                records.setdefault(f"{method}: `{name}`", {})[split] = v
        if any(c != "-" for c in cells):
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "largest ratio of an extra record's norm to the round's median:", "", *head]
    for name, by_split in records.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{by_split[s]:.2f}" if s in by_split else "-" for s in splits) + " |")
    claims = [max((r["examples-max"] for k, r in rows.items() if k.endswith(f" {s}")),
                  default=float("nan")) for s in splits]
    lines += ["", "largest claim of num-examples over the round's median claim: "
              + ", ".join(f"{s} {c:.2f}" for s, c in zip(splits, claims))]
    return "\n".join(lines)


def main(argv=None) -> None:
    from methods.registry import method_names

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=",".join(method_names()))
    parser.add_argument("--splits", default=",".join(SPLITS))
    parser.add_argument("--seeds", default="0", help="seeds of the runs, e.g. 0,1,2")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", help="also write every run's summary here")
    parser.add_argument("--from-json", help="print the table of summaries written before "
                        "(comma-separated files) instead of running")
    args = parser.parse_args(argv)
    methods, splits = args.methods.split(","), args.splits.split(",")
    if args.from_json:
        rows = {}
        for name in args.from_json.split(","):
            rows.update(json.loads(Path(name).read_text()))
        print(pivot(rows, methods, splits))
        return
    folder = Path(tempfile.mkdtemp(prefix="honest-norms-"))
    rows, t0 = {}, time.time()
    seeds = [int(s) for s in args.seeds.split(",")]
    try:
        for split in splits:
            for method in methods:
                if runs_on_digits(method) is not None:
                    print(f"{method} {split}: not run on digits' CNN (its parts refuse it)",
                          file=sys.stderr)
                    continue
                ratios: dict = {}
                for seed in seeds:
                    for k, v in measure(method, split, folder, seed, args.rounds).items():
                        ratios.setdefault(k, []).extend(v)
                rows[f"{method} {split}"] = s = summary(ratios)
                print(f"{method} {split}: {s}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{args.rounds} rounds, seeds {seeds}; each cell: the largest / the smallest ratio "
          "of an honest update norm to its round's median\n")
    print(pivot(rows, methods, splits))
    print(f"\n({len(rows)} presets x splits, {time.time() - t0:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
