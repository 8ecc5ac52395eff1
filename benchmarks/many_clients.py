"""Simulation cost against the population size: 20, 1,000 and 10,000 simulated clients.

    python -m benchmarks.many_clients                          # 20, 1000, 10000 clients
    python -m benchmarks.many_clients --clients 1000,10000 --per-round 100
    python -m benchmarks.many_clients --tiny                   # a smoke run (seconds)

Every population runs the same work per round, so only the population size differs: the app
through `flwr run` on a simulation SuperLink of its own (Ray, one CPU per ClientApp), FedAvg with
`--per-round` sampled clients (default 10), each doing `--local-iterations` SGD steps of batch 5
(the smallest partition has 5 examples: 50,000 examples over 10,000 clients) of the GC-Fed CNN;
FedACG's balanced Dirichlet split (alpha 0.3) of a CIFAR-shaped local copy (random 3x32x32 PNG
images in the hub's CIFAR-10 format, 10 classes, `--examples` training examples; made once and
kept in `--data`). Every run starts with an empty partition cache, so round 1 includes preparing
the data of the sampled clients in the Ray actors (reading the copy, the split, decoding).

`--poll flower,fast` runs every population twice: with Flower's own simulation message poll
(`simulation-fast-poll=false`) and with the app's (server_app/sim_poll.py), to compare the two in
one run.

Printed per population (and written with --json):
  round 1 s           round 1 of the results: the first sampling (node identification
                      included), the actors' data set-up and the first training round
  median round s      the median of rounds 2..R
  set-up s            from `flwr run` to the start of round 1 (SuperLink run start, Ray start,
                      the ServerApp's test set and partition summary)
  wall s              the whole `flwr run`
  peak MB             the peak resident memory of the SuperLink's process tree (the
                      simulation, Ray and its actors), sampled every 0.5 s
and, for each population after the first, the round-1 time per client above the first one, and
the median round over that of the `--ref` population (default 1,000).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

from benchmarks.run_memory import flwr_run_peak
from benchmarks.sim_vs_loop import make_cifar_copy

BATCH = 5


def cifar_copy(folder: Path, examples: int, test: int) -> Path:
    """The CIFAR-shaped local copy in `folder`, made on first use (a marker says it is whole)."""
    done = folder / "made.json"
    want = {"train": examples, "test": test, "format": 1}
    if done.exists() and json.loads(done.read_text()) == want:
        return folder
    print(f"making a CIFAR-shaped copy with {examples} training images in {folder} ...",
          flush=True)
    make_cifar_copy(folder, examples, test)
    done.write_text(json.dumps(want))
    return folder


def run_population(clients: int, per_round: int, rounds: int, iterations: int, data: Path,
                   work: Path, poll: str = "fast") -> dict:
    from experiments.superlink import LocalSuperLink

    out = work / "runs"
    name = f"pop-{clients}-{poll}"
    run_config = " ".join([
        "method='fedavg'", "dataset='cifar10'", f"dataset-path='{data}'",
        "partitioner='dirichlet-balanced'", "dirichlet-alpha=0.3", "model='cnn'",
        f"local-iterations={iterations}", f"batch-size={BATCH}", "lr=0.01", "weight-decay=0.0",
        "grad-clip=0.0", "augment='none'", "client-val-fraction=0.0",
        # a fraction that rounds down to 0 nodes: min-train-nodes sets the sample size
        "fraction-train=1e-9", f"min-train-nodes={per_round}", "fraction-evaluate=0.0",
        f"num-server-rounds={rounds}", f"eval-every={rounds}", "test-max-examples=500",
        "checkpoint-every=0", f"out-dir='{out}'", f"run-name='{name}'",
        f"simulation-fast-poll={'true' if poll == 'fast' else 'false'}",
    ])
    federation = f"num-supernodes={clients} client-resources-num-cpus=1"
    cache = work / f"partition-cache-{clients}"  # empty: round 1 prepares the data
    link = LocalSuperLink()
    link.env["FEDACG_CACHE_DIR"] = str(cache)  # the SuperLink's environment reaches the actors
    with link:
        proc, wall, peak_mb = flwr_run_peak(link, run_config, federation)
    if proc.returncode != 0 or not (out / name / "results.json").exists():
        raise RuntimeError(f"flwr run failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}")
    rows = json.loads((out / name / "results.json").read_text())["rounds"]
    seconds = [r["seconds"] for r in rows if r["round"] > 0]
    sampled = [r.get("clients-sampled") for r in rows if r["round"] > 0]
    return {"clients": clients, "poll": poll, "round-seconds": seconds, "round-1-s": seconds[0],
            "median-round-s": statistics.median(seconds[1:] or seconds),
            "setup-s": wall - sum(r["seconds"] for r in rows), "wall-s": wall,
            "peak-mb": peak_mb, "clients-sampled": sampled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="20,1000,10000", help="comma-separated populations")
    parser.add_argument("--per-round", type=int, default=10, help="clients sampled per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--local-iterations", type=int, default=2)
    parser.add_argument("--examples", type=int, default=50_000, help="training images")
    parser.add_argument("--data", type=Path, default=None,
                        help="folder of the CIFAR-shaped copy (made there once); default: "
                             "~/.cache/fedacg-gc/bench-cifar-<examples>")
    parser.add_argument("--tiny", action="store_true",
                        help="smoke run: 4 and 40 clients, 2 rounds")
    parser.add_argument("--poll", default="fast",
                        help="the simulation's message poll: fast (the app's), flower (Flower's "
                             "own, simulation-fast-poll=false) or flower,fast to compare both")
    parser.add_argument("--ref", type=int, default=1000,
                        help="the population whose median round the others are compared with")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.tiny:
        args.clients, args.per_round, args.rounds, args.examples = "4,40", 2, 2, 400
    populations = [int(c) for c in args.clients.split(",")]
    polls = args.poll.split(",")
    if not set(polls) <= {"fast", "flower"}:
        parser.error(f"--poll {args.poll}: use fast, flower or flower,fast")
    if args.examples < BATCH * max(populations):
        parser.error(f"--examples {args.examples} gives some of {max(populations)} clients fewer "
                     f"than {BATCH} examples: raise it to at least {BATCH * max(populations)}")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedacg-gc"
    import flwr
    import torch

    info = {"cpus": os.cpu_count(), "machine": platform.machine(), "torch": torch.__version__,
            "flwr": flwr.__version__, "python": platform.python_version(),
            "per-round": args.per_round, "rounds": args.rounds,
            "local-iterations": args.local_iterations, "examples": args.examples}
    print("{cpus} CPUs ({machine}) | torch {torch} | flwr {flwr} | python {python} | "
          "{per-round} clients per round, {rounds} rounds, {local-iterations} local iterations "
          "of batch 5 | {examples} training images".format(**info), flush=True)
    results = {"info": info, "populations": []}
    with tempfile.TemporaryDirectory(prefix="bench-many-") as tmp:
        data = args.data or (cache / f"bench-cifar-{args.examples}")
        if args.tiny and args.data is None:
            data = Path(tmp) / "data"
        cifar_copy(data, args.examples, 500)
        for poll in polls:
            for n in populations:
                print(f"{n} clients, {poll} poll ...", flush=True)
                r = run_population(n, args.per_round, args.rounds, args.local_iterations, data,
                                   Path(tmp) / f"work-{n}-{poll}", poll)
                results["populations"].append(r)
                print(f"  round 1 {r['round-1-s']:.2f} s, median round "
                      f"{r['median-round-s']:.2f} s, peak {r['peak-mb']:.0f} MB", flush=True)
    ref = args.ref if args.ref in populations else None
    print(f"\n| poll | clients | round 1 s | round 1 ms per client above {populations[0]} | "
          f"median round s | median vs {ref or '-'} | set-up s | wall s | peak MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for poll in polls:
        rows = [r for r in results["populations"] if r["poll"] == poll]
        base, by_n = rows[0], {r["clients"]: r for r in rows}
        for r in rows:
            extra, versus = "-", "-"
            if r is not base:
                r["round-1-ms-per-client"] = ((r["round-1-s"] - base["round-1-s"]) * 1000
                                              / (r["clients"] - base["clients"]))
                extra = f"{r['round-1-ms-per-client']:+.3f}"
            if ref is not None:
                r["median-vs-ref"] = r["median-round-s"] / by_n[ref]["median-round-s"]
                versus = f"{r['median-vs-ref']:.2f}x"
            print(f"| {poll} | {r['clients']} | {r['round-1-s']:.2f} | {extra} | "
                  f"{r['median-round-s']:.2f} | {versus} | {r['setup-s']:.1f} | "
                  f"{r['wall-s']:.1f} | {r['peak-mb']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
