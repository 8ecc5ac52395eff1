"""A real-data sweep cell against a plain PyTorch loop doing the same steps, as whole processes.

    python -m benchmarks.real_cell                          # in-process cell, 20 rounds, 2 pairs
    python -m benchmarks.real_cell --rounds 40 --pairs 3
    python -m benchmarks.real_cell --ray                    # the same cell through `flwr run` too
    python -m benchmarks.real_cell --phases                 # where the cell's time goes
    python -m benchmarks.real_cell --tiny                   # a smoke run (3 rounds, 1 pair)

The cell (default `5of100-lda0.1/FedAvg/0` of `sweeps/gcfed-t5-fmnist.yaml`: Fashion-MNIST from
Debian's `dataset-fashion-mnist`, GC-Fed's MLP, 5 of 100 clients a round, 5 local epochs of
batch 50, SGD lr 0.01 momentum 0.9, crop + flip, the 10,000 test images evaluated every round)
is cut to `--rounds` rounds and run as the sweep runs it: `run_in_process` (backend
in-process), or `flwr run` on a simulation SuperLink of its own (`--ray`, the sweep's default
backend). One thread everywhere (`OMP_NUM_THREADS=1`, as `--jobs 2` gives each cell on 2 cores).

The plain loop (`plain_cell`, below) is written apart from the project: it reads the IDX files
with gzip and numpy, trains the clients the cell sampled, round by round (the cell's own
schedule and partitions, which it takes as given: the split is the cell's work alone), with
`torch.optim.SGD`, the same crop + flip done on the batch tensor, padding to full batches as
GC-Fed's loader, uniform averaging, and evaluates the test set every round. It imports only
torch, numpy and the project's model class.

Each side runs as a fresh process, alternately (app, plain, plain, app, ...), `--pairs` times:
  ratio (whole)   = plain process wall / app process wall (median over pairs; min-max)
  ratio (rounds)  = median over rounds of plain round seconds / app round seconds, rounds
                    paired by number (the same clients train in both), first round left out
  CPU             = the processes' user + system seconds; peak memory: their maximum RSS
`--phases` also runs the cell once under cProfile and prints where its time goes (data and split,
augmentation, local steps, the reply and its screening, aggregation, evaluation, results and
plots, the rest: start-up and imports), beside the plain loop's own phase timers. A profile
slows Python-heavy code more than kernels: its shares are a map, not a measurement.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gzip
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[1] / "sweeps" / "gcfed-t5-fmnist.yaml"
FMNIST = Path("/usr/share/datasets/fashion-mnist")


# ---------------------------------------------------------------- the plain loop (no project)

def read_idx(path: Path):
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def plain_cell(plan: dict, out: Path) -> None:
    """The cell's work as a plain loop; writes its phase and round timings to `out`."""
    t_start = time.perf_counter()
    import numpy as np
    import torch
    import torch.nn.functional as F

    from models.mlp import MLP

    torch.set_num_threads(1)
    phases = dict.fromkeys(("data", "augmentation", "local steps", "aggregation",
                            "evaluation"), 0.0)
    t = time.perf_counter()
    folder = Path(plan["data"])
    train_x = torch.from_numpy(read_idx(folder / "train-images-idx3-ubyte.gz").copy())
    train_y = torch.from_numpy(read_idx(folder / "train-labels-idx1-ubyte.gz").astype(np.int64))
    test_x = torch.from_numpy(read_idx(folder / "t10k-images-idx3-ubyte.gz").copy())
    test_y = torch.from_numpy(read_idx(folder / "t10k-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std, bs, pad = 0.2860, 0.3530, plan["batch-size"], 4
    test_x = ((test_x.float() / 255 - mean) / std).unsqueeze(1)
    clients = {}
    for pid in sorted({p for r in plan["schedule"] for p in r}):
        idx = torch.tensor(plan["partitions"][str(pid)])
        idx = torch.cat([idx, idx[torch.arange(-len(idx) % bs) % len(idx)]])  # full batches
        clients[pid] = (train_x[idx].unsqueeze(1), train_y[idx])
    phases["data"] += time.perf_counter() - t
    torch.manual_seed(plan["seed"])
    model = MLP((1, 28, 28), 10, hidden=(512, 256))
    gen = torch.Generator().manual_seed(plan["seed"])
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    rounds, cpu_rounds = [], []
    for sampled in plan["schedule"]:
        t_round, c_round = time.perf_counter(), time.process_time()
        new = {k: torch.zeros_like(v) for k, v in global_state.items()}
        for pid in sampled:
            x, y = clients[pid]
            model.load_state_dict(global_state)
            opt = torch.optim.SGD(model.parameters(), lr=plan["lr"], momentum=0.9,
                                  weight_decay=1e-5)
            model.train()
            for _ in range(plan["epochs"]):
                perm = torch.randperm(len(y), generator=gen)
                for i in range(0, len(y), bs):
                    t = time.perf_counter()
                    b = perm[i:i + bs]
                    xb = F.pad(x[b].float(), (pad,) * 4)
                    off = torch.randint(0, 2 * pad + 1, (len(b), 2), generator=gen)
                    windows = xb.unfold(2, 28, 1).unfold(3, 28, 1)  # [B, 1, 9, 9, 28, 28]
                    xb = windows[torch.arange(len(b)), :, off[:, 0], off[:, 1]]
                    flip = torch.rand(len(b), generator=gen) < 0.5
                    xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
                    xb = (xb / 255 - mean) / std
                    t2 = time.perf_counter()
                    opt.zero_grad(set_to_none=False)  # no fresh gradient buffers a step
                    F.cross_entropy(model(xb), y[b]).backward()
                    opt.step()
                    t3 = time.perf_counter()
                    phases["augmentation"] += t2 - t
                    phases["local steps"] += t3 - t2
            t = time.perf_counter()
            for k, v in model.state_dict().items():
                new[k].add_(v, alpha=1 / len(sampled))
            phases["aggregation"] += time.perf_counter() - t
        global_state = new
        t = time.perf_counter()
        model.load_state_dict(global_state)
        model.eval()
        with torch.no_grad():
            correct = 0
            for i in range(0, len(test_y), 1024):
                correct += (model(test_x[i:i + 1024]).argmax(1) == test_y[i:i + 1024]).sum()
        phases["evaluation"] += time.perf_counter() - t
        rounds.append(time.perf_counter() - t_round)
        cpu_rounds.append(time.process_time() - c_round)
    phases["total"] = time.perf_counter() - t_start
    out.write_text(json.dumps({"rounds": rounds, "cpu-rounds": cpu_rounds, "phases": phases,
                               "acc": int(correct) / len(test_y)}))


# ---------------------------------------------------------------- the cell (the project)

def the_cell(cell: str, rounds: int, out_dir: Path, backend: str = "in-process"):
    """(sweep, cell) of sweep cell '<setting>/<method>/<seed>', cut to `rounds`."""
    from experiments.sweep_cells import cell_name
    from experiments.sweep_file import load_sweep

    sweep = load_sweep(SWEEP, out_dir, None, backend)
    found = [c for c in sweep.cells if cell_name(c) == cell]
    if not found:
        raise SystemExit(f"error: no cell '{cell}' in {SWEEP.name} (e.g. "
                         f"'{cell_name(sweep.cells[0])}')")
    name = f"bench-{time.time_ns()}"
    run_config = dict(found[0].run_config, **{"num-server-rounds": rounds, "acc-at-rounds": "",
                                              "run-name": name})
    cell = dataclasses.replace(found[0], run_config=run_config,
                               run_dir=found[0].run_dir.parent / name)
    return sweep, cell


def app_cell(cell: str, rounds: int, out_dir: Path, out: Path, plan_out: Path | None) -> None:
    """The cell in-process, as the sweep runs it; its round seconds (and, with `plan_out`, its
    schedule and partitions for the plain loop) written out."""
    from experiments.sweep_cells import num_nodes_of
    from inprocess import run_in_process

    from server_app.results import RunRecorder

    _, the = the_cell(cell, rounds, out_dir)
    nodes = num_nodes_of(the.federation_config)
    cpu = []  # this process's CPU seconds at the end of each round (its evaluation ends it)
    evaluate_fn = RunRecorder.evaluate_fn

    def timed(self, server_round, arrays):
        out = evaluate_fn(self, server_round, arrays)
        cpu.append(time.process_time())
        return out

    RunRecorder.evaluate_fn = timed  # the benchmark's instrument only
    grid = run_in_process(the.run_config, nodes)
    write_cell_result(the.run_dir, out, [b - a for a, b in zip(cpu, cpu[1:])])
    if plan_out is not None:
        write_plan(the.run_config, nodes, grid, plan_out)


def write_cell_result(run_dir: Path, out: Path, cpu_rounds: list[float] | None = None) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    rows = [r for r in results["rounds"] if r["round"] > 0]
    out.write_text(json.dumps({"rounds": [r["seconds"] for r in rows], "cpu-rounds": cpu_rounds,
                               "acc": rows[-1]["test-acc"]}))


def write_plan(run_config: dict, nodes: int, grid, plan_out: Path) -> None:
    from feddata.loading import _source
    from feddata.settings import DataSettings
    from run_config import resolve

    cfg = resolve(run_config)
    schedule = [[grid.node_ids.index(n) for n in sent] for sent in grid.sent if sent]
    source = _source(DataSettings.from_config(cfg), nodes)
    source.train_split()  # loaded (and split below)
    indices = source.partitioner.partition_indices()
    # the partitions index the train split as the source shuffled it: back to the IDX order
    shuffled = source.train_split()
    order = (shuffled._indices.column(0).to_numpy() if shuffled._indices is not None
             else list(range(len(shuffled))))
    used = sorted({p for r in schedule for p in r})
    plan_out.write_text(json.dumps({
        "data": cfg["dataset-path"], "seed": cfg["seed"], "lr": cfg["lr"],
        "epochs": cfg["local-epochs"], "batch-size": cfg["batch-size"], "schedule": schedule,
        "partitions": {str(p): [int(order[i]) for i in indices[p]] for p in used}}))


def ray_cell(cell: str, rounds: int, out_dir: Path, out: Path) -> None:
    """The cell through `flwr run` on a simulation SuperLink of its own (the sweep's default
    backend, its own `run_cell`)."""
    from experiments.superlink import LocalSuperLink
    from experiments.sweep_cells import run_cell

    sweep, the = the_cell(cell, rounds, out_dir, backend="flwr")
    with LocalSuperLink() as link:
        if not run_cell(the, sweep, link.connection, link.env, False):
            raise SystemExit(f"error: the cell failed; its logs are in {the.run_dir}")
    write_cell_result(the.run_dir, out)


# ---------------------------------------------------------------- measuring

def run_child(args: list[str]) -> dict:
    """Run this module with `args` as a fresh process; its wall, CPU seconds and peak RSS."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.real_cell", "--child", *args],
                            env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time and peak memory
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(args[:2])} exited {proc.returncode}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "peak-mb": usage.ru_maxrss / 1024}


PHASES = {  # cProfile function -> phase (cumulative times; nested ones subtracted below)
    "data and split": ["server_app/app.py:model_and_data", "client_app/app.py:setup"],
    "augmentation": ["feddata/augment.py:__call__"],
    "local steps": ["client_app/local_update.py:local_update"],
    "reply and screening": ["client_app/app.py:train", "strategies/round_loop.py:aggregate_train"],
    "aggregation": ["strategies/round_loop.py:aggregate_train"],
    "evaluation": ["server_app/results.py:evaluate_fn"],
    "results and plots": ["server_app/results.py:save", "server_app/results.py:plot",
                          "server_app/app.py:plot_labels", "server_app/app.py:log_data_summary",
                          "server_app/checkpoint.py:save"],
}


def profile_phases(prof: Path) -> dict[str, float]:
    stats = pstats.Stats(str(prof)).stats
    cum: dict[str, float] = {}
    total = 0.0
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.items():
        key = f"{'/'.join(Path(file).parts[-2:])}:{func}"
        cum[key] = cum.get(key, 0.0) + ct
        if func == "<module>" and file.endswith("real_cell.py"):
            total = max(total, ct)
    get = lambda names: sum(cum.get(n, 0.0) for n in names)  # noqa: E731
    out = {name: get(names) for name, names in PHASES.items()}
    out["local steps"] -= out["augmentation"]
    train = get(["client_app/app.py:train"])
    out["reply and screening"] = (train - get(["client_app/app.py:setup"])
                                  - get(["client_app/local_update.py:local_update"])
                                  + out["aggregation"])
    out["aggregation"] = 0.0  # within the above: the screening and the mean are one call
    out["total"] = get(["inprocess/__init__.py:run_in_process"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_cell", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", default="5of100-lda0.1/FedAvg/0")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also the cell through flwr run")
    parser.add_argument("--phases", action="store_true", help="also a profile of the cell")
    parser.add_argument("--tiny", action="store_true", help="3 rounds, 1 pair")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "plain":
            plain_cell(json.loads(Path(rest[0]).read_text()), Path(rest[1]))
        elif kind == "app":
            plan = Path(rest[4]) if len(rest) > 4 else None
            app_cell(rest[0], int(rest[1]), Path(rest[2]), Path(rest[3]), plan)
        elif kind == "profile":
            cProfile.runctx("app_cell(c, r, Path(d), Path(o), None)", globals(),
                            {"c": rest[0], "r": int(rest[1]), "d": rest[2], "o": rest[3]},
                            rest[4])
        else:
            ray_cell(rest[0], int(rest[1]), Path(rest[2]), Path(rest[3]))
        return 0
    if not (FMNIST / "train-images-idx3-ubyte.gz").is_file():
        print(f"error: no Fashion-MNIST in {FMNIST}: apt-get install dataset-fashion-mnist",
              file=sys.stderr)
        return 2
    rounds, pairs = (3, 1) if args.tiny else (args.rounds, args.pairs)
    if rounds < 2 or pairs < 1:
        parser.error("give --rounds 2 or more and --pairs 1 or more")
    tmp = Path(tempfile.mkdtemp(prefix="real-cell-"))
    try:
        return _compare(args, rounds, pairs, tmp)
    finally:  # the runs' folders, plan and profile are only the figures' means
        shutil.rmtree(tmp, ignore_errors=True)


def _compare(args: argparse.Namespace, rounds: int, pairs: int, tmp: Path) -> int:
    """The pairs of runs in `tmp`, their ratios printed (and written to --json)."""
    plan = tmp / "plan.json"
    print(f"cell {args.cell} | {rounds} rounds | {pairs} pairs | {os.cpu_count()} CPUs | "
          f"1 thread | load average {os.getloadavg()[0]:.2f}", flush=True)
    sides = ["app", "plain"] + (["ray"] if args.ray else [])
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for p in range(pairs):
        order = sides if p % 2 == 0 else sides[::-1]
        for side in order:
            res = tmp / f"{side}-{p}.json"
            if side == "app":
                extra = [] if plan.exists() else [str(plan)]
                m = run_child(["app", args.cell, str(rounds), str(tmp), str(res), *extra])
            elif side == "plain":
                if not plan.exists():  # the app's schedule first
                    run_child(["app", args.cell, str(rounds), str(tmp), str(tmp / "x.json"),
                               str(plan)])
                m = run_child(["plain", str(plan), str(res)])
            else:
                m = run_child(["ray", args.cell, str(rounds), str(tmp), str(res)])
            m.update(json.loads(res.read_text()))
            if side == "ray":  # its work is in the SuperLink's processes and Ray's, not the
                m["cpu"] = m["peak-mb"] = None  # child's: their CPU and memory are not measured
            runs[side].append(m)
            usage = ("" if m["cpu"] is None else
                     f", {m['cpu']:.1f} s CPU, peak {m['peak-mb']:.0f} MB")
            print(f"  pair {p + 1}/{pairs} {side}: {m['wall']:.1f} s wall{usage}, rounds median "
                  f"{statistics.median(m['rounds']):.2f} s, final acc {m['acc']:.4f}",
                  flush=True)
    report = {"cell": args.cell, "rounds": rounds, "pairs": pairs, "runs": runs}
    for side in sides[::2]:  # app (and ray) against the plain loop
        pairs_ = list(zip(runs[side], runs["plain"]))
        ratio = [pl["wall"] / a["wall"] for a, pl in pairs_]
        per_round = [pl / a for x, y in pairs_ for a, pl in zip(x["rounds"][1:], y["rounds"][1:])]
        cpu = [pl["cpu"] / a["cpu"] for a, pl in pairs_ if a["cpu"]]
        cpu_round = [pl / a for x, y in pairs_ if x["cpu-rounds"]
                     for a, pl in zip(x["cpu-rounds"][1:], y["cpu-rounds"][1:])]
        mem = [a["peak-mb"] / pl["peak-mb"] for a, pl in pairs_ if a["peak-mb"]]
        median = lambda v: statistics.median(v) if v else None  # noqa: E731
        report[side] = {"whole": median(ratio), "rounds": median(per_round), "cpu": median(cpu),
                        "memory": median(mem), "cpu-rounds": median(cpu_round)}
        shown = {k: "n/a" if v is None else f"{v:.3f}" for k, v in report[side].items()}
        print(f"{side} against the plain loop: speed ratio (plain/app) whole process "
              f"{shown['whole']} ({min(ratio):.3f}-{max(ratio):.3f}), rounds {shown['rounds']}, "
              f"CPU {shown['cpu']}, CPU of the rounds {shown['cpu-rounds']}; peak memory "
              f"app/plain {shown['memory']}x")
    if args.phases:
        prof = tmp / "cell.prof"
        run_child(["profile", args.cell, str(rounds), str(tmp), str(tmp / "p.json"), str(prof)])
        app = profile_phases(prof)
        plain = runs["plain"][0]["phases"]
        report["phases"] = {"app (profiled)": app, "plain": plain}
        print("| phase | app s (profiled) | plain s |\n| --- | --- | --- |")
        for name in app:
            key = {"data and split": "data"}.get(name, name)
            print(f"| {name} | {app[name]:.2f} | {plain.get(key, 0.0):.2f} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
