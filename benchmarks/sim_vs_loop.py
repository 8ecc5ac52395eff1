"""Our app in Ray simulation against a plain PyTorch loop doing the same local training.

    python -m benchmarks.sim_vs_loop                       # W1 on this machine (CPU: W1 only)
    python -m benchmarks.sim_vs_loop --blocks 6 --rounds 2 # more pairs
    python -m benchmarks.sim_vs_loop --workloads W1,W2,W3  # all three (meant for a GPU)
    python -m benchmarks.sim_vs_loop --tiny                # a smoke run (seconds, sizes tiny)

Workloads (FedAvg, plain SGD, no augmentation, 3x32x32 images, 10 classes, 500 examples per
client, 5 local epochs, every client trains every round):
  W1  GC-Fed CNN,     5 clients per round, batch 50
  W2  ResNet-18-GN,   5 clients per round, batch 50   (FedACG's CIFAR set-up)
  W3  ResNet-18-GN,  10 clients per round, batch 10   (FedACG's 500-client set-up)

(a) the plain loop trains the clients one after another in one process (`plain_loop.py`);
(b) the app runs through `flwr run` on a simulation SuperLink of its own, reading a local copy of
a CIFAR-shaped dataset (random images, the hub's format) made here. Both do the same number of
SGD steps on the same shapes.

The two are measured in alternating blocks, so that a change of the machine's load moves both:
block b starts one plain-loop process and one `flwr run`, each of 1 + R rounds (their round 1
starts the process or the Ray actors and loads the data: left out of the pairs; the app's is
shown apart), plain first in even blocks and the app first in odd ones (plain, app, app, plain,
...). Round j of a block's app run is paired with round j of its plain process:
  eta       = median over the pairs of (plain seconds of the round / app seconds of the round)
            = the app's samples per second over the plain loop's; its spread: min-max
  overhead  = median app seconds per round - median plain seconds per round
  app training s/round: the clients' own local-training seconds inside the app's round
Each side runs as fresh processes in a session of its own (Linux shares the CPU between sessions
first, sched_autogroup: neither side shares with this process or with the other), at this
process's niceness: the app's Ray actors too (RAY_worker_niceness, `--app-niceness`; Ray's own
default, 15, makes the actor give the CPU to any other process of its session first).
Peak host memory: the plain loop's process; the app's SuperLink process tree (sampled).
A table is printed and the same figures are written as JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.plain_loop import run_plain_loop
from benchmarks.run_memory import flwr_run_peak
from models import build_model

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    clients: int
    samples: int
    epochs: int
    batch: int
    image: int = 32


WORKLOADS = {
    "W1": Workload("W1", "cnn", 5, 500, 5, 50),
    "W2": Workload("W2", "resnet18", 5, 500, 5, 50),
    "W3": Workload("W3", "resnet18", 10, 500, 5, 10),
}
TINY = Workload("tiny", "cnn", 2, 40, 1, 10, image=32)


def make_cifar_copy(folder: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """A local copy in the hub's CIFAR-10 format (`img` PNG Image(), `label` ClassLabel)."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image
    from PIL import Image as PILImage

    rng = np.random.default_rng(seed)
    features = Features({"img": Image(), "label": ClassLabel(num_classes=10)})

    def split(n):
        imgs = [PILImage.fromarray(a) for a in rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)]
        return Dataset.from_dict({"img": imgs, "label": rng.integers(0, 10, n).tolist()},
                                 features=features)

    DatasetDict({"train": split(n_train), "test": split(n_test)}).save_to_disk(folder)
    return folder


def plain_loop(w: Workload, rounds: int, device: torch.device) -> dict:
    """The plain loop on this workload's random data, `rounds` rounds (this process)."""
    gen = torch.Generator().manual_seed(0)
    clients = [((torch.rand(w.samples, 3, w.image, w.image, generator=gen) - 0.5) / 0.25,
                torch.randint(0, 10, (w.samples,), generator=gen)) for _ in range(w.clients)]
    model = build_model(w.model, (3, w.image, w.image), 10, seed=0)
    if device.type == "cuda":
        torch.cuda.init()  # (resetting the counters of an uninitialized device raises)
        torch.cuda.reset_peak_memory_stats(device)
    seconds = run_plain_loop(model, clients, rounds=rounds, lr=0.01, epochs=w.epochs,
                             batch_size=w.batch, device=device)
    return {"round-seconds": seconds,
            "peak-host-mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak-device-mb": (torch.cuda.max_memory_allocated(device) / 2**20
                               if device.type == "cuda" else None)}


def plain_block(w: Workload, rounds: int) -> dict:
    """`plain_loop` of 1 + `rounds` rounds in a fresh process of its own session, as each app
    run is (the kernel shares the CPU between sessions first: sched_autogroup), at this
    process's niceness; round 1 (allocations, caches) is left out, as the app's is."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.sim_vs_loop", "--plain-block",
                          w.name, "--rounds", str(1 + rounds)],
                         cwd=ROOT, capture_output=True, text=True, timeout=7200, check=False,
                         start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"the plain loop failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["round-seconds"] = result["round-seconds"][1:]
    return result


def app_config(w: Workload, rounds: int, data: Path, out: Path, name: str) -> dict:
    """The app's run config for this workload: FedAvg, plain SGD, no augmentation, every client
    every round, the test set evaluated in the last round only."""
    return {"method": "fedavg", "dataset": "cifar10", "dataset-path": str(data),
            "partitioner": "iid", "model": w.model, "local-epochs": w.epochs,
            "batch-size": w.batch, "lr": 0.01, "weight-decay": 0.0, "grad-clip": 0.0,
            "augment": "none", "client-val-fraction": 0.0, "fraction-train": 1.0,
            "min-train-nodes": w.clients, "num-server-rounds": rounds, "eval-every": rounds,
            "checkpoint-every": 0, "out-dir": str(out), "run-name": name}


def app_run(w: Workload, rounds: int, data: Path, out: Path, gpus_per_client: float,
            link=None, run_name: str | None = None) -> dict:
    """One `flwr run` of `rounds` rounds (on `link`, a running LocalSuperLink, else its own)."""
    from experiments.superlink import LocalSuperLink

    name = run_name or w.name
    run_config = " ".join(f"{k}={v!r}" for k, v in app_config(w, rounds, data, out, name).items())
    federation = f"num-supernodes={w.clients} client-resources-num-cpus={os.cpu_count() or 1}"
    if gpus_per_client > 0:
        federation = (f"num-supernodes={w.clients} client-resources-num-cpus=1 "
                      f"client-resources-num-gpus={gpus_per_client}")
    # sampled every 2 s: each sample reads all of /proc, CPU time the plain side does not spend
    if link is None:
        with LocalSuperLink() as own:
            proc, wall, peak_mb = flwr_run_peak(own, run_config, federation, every=2.0)
    else:
        proc, wall, peak_mb = flwr_run_peak(link, run_config, federation, every=2.0)
    if proc.returncode != 0:
        raise RuntimeError(f"flwr run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = json.loads((out / name / "results.json").read_text())["rounds"]
    return {"round-seconds": [r["seconds"] for r in rows if r["round"] > 0],
            # mean client train-seconds x clients: the local training inside each round
            "train-seconds": [r.get("train-seconds", 0.0) * w.clients
                              for r in rows if r["round"] > 0],
            "wall-seconds": wall, "peak-host-mb": peak_mb,
            "peak-breakdown-mb": dict(getattr(flwr_run_peak, "breakdown", {})),
            "peak-pss-mb": getattr(flwr_run_peak, "pss", 0.0)}


def interleaved(w: Workload, blocks: int, rounds: int, data: Path, out: Path,
                gpus_per_client: float, niceness: int | None) -> tuple:
    """`blocks` blocks of one plain process and one app run, each of 1 + `rounds` rounds, in the
    order plain, app, app, plain, ... (one SuperLink for every app run): (plain, app) dicts
    with a list per block."""
    from experiments.superlink import LocalSuperLink

    plain = {"round-seconds": [], "peak-host-mb": 0.0, "peak-device-mb": None}
    app = {"round-seconds": [], "train-seconds": [], "first-round-seconds": [],
           "wall-seconds": [], "peak-host-mb": 0.0}
    link = LocalSuperLink()  # its environment reaches the simulation process and Ray's
    if niceness is not None:  # read by the raylet when the run starts Ray
        link.env["RAY_worker_niceness"] = str(niceness)
    link.env.setdefault("FEDACG_CACHE_DIR", str(out / "partition-cache"))
    with link:
        for b in range(blocks):
            for side in (("plain", "app") if b % 2 == 0 else ("app", "plain")):
                if side == "plain":
                    p = plain_block(w, rounds)
                    plain["round-seconds"].append(p["round-seconds"])
                    plain["peak-host-mb"] = max(plain["peak-host-mb"], p["peak-host-mb"])
                    plain["peak-device-mb"] = p["peak-device-mb"]
                else:
                    a = app_run(w, 1 + rounds, data, out, gpus_per_client, link,
                                f"{w.name}-block{b}")
                    app["first-round-seconds"].append(a["round-seconds"][0])
                    app["round-seconds"].append(a["round-seconds"][1:])
                    app["train-seconds"].append(a["train-seconds"][1:])
                    app["wall-seconds"].append(a["wall-seconds"])
                    if a["peak-host-mb"] > app["peak-host-mb"]:
                        app["peak-breakdown-mb"] = a["peak-breakdown-mb"]
                    app["peak-host-mb"] = max(app["peak-host-mb"], a["peak-host-mb"])
                    app["peak-pss-mb"] = max(app.get("peak-pss-mb", 0.0), a["peak-pss-mb"])
                print(f"  block {b + 1}/{blocks} {side}: " + ", ".join(
                    f"{t:.2f}" for t in (plain if side == "plain" else app)["round-seconds"][-1])
                    + " s/round", flush=True)
    return plain, app


def in_process_block(w: Workload, rounds: int) -> dict:
    """The app in the in-process runtime (no SuperLink, no Ray), `rounds` rounds, in a fresh
    process: its peak host memory (ru_maxrss), to hold against the simulation's."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.sim_vs_loop", "--in-process-block",
                          w.name, "--rounds", str(rounds)],
                         cwd=ROOT, capture_output=True, text=True, timeout=7200, check=False,
                         start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"the in-process run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _in_process_run(w: Workload, rounds: int) -> dict:
    from inprocess import run_in_process

    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as tmp:
        data = make_cifar_copy(Path(tmp) / "data", w.clients * w.samples, 100)
        os.environ["FEDACG_CACHE_DIR"] = str(Path(tmp) / "cache")
        run_in_process(app_config(w, rounds, data, Path(tmp) / "out", w.name), w.clients)
        rows = json.loads((Path(tmp) / "out" / w.name / "results.json").read_text())["rounds"]
    return {"round-seconds": [r["seconds"] for r in rows if r["round"] > 0],
            "peak-host-mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def model_mb(w: Workload) -> float:
    model = build_model(w.model, (3, w.image, w.image), 10, seed=0)
    return sum(p.numel() * p.element_size() for p in model.state_dict().values()) / 2**20


def aggregation_ms(n: int = 10, repeats: int = 3) -> dict:
    """Server aggregation of n ResNet-18 updates and its floor (benchmarks/server_aggregation)."""
    from benchmarks.server_aggregation import time_pairs

    row = time_pairs("resnet18", n, repeats)
    return {"app-ms": row["app-best-ms"], "floor-ms": row["floor-best-ms"],
            "ratio": row["ratio-median"]}


def figures(plain: dict, app: dict, w: Workload) -> dict:
    """Pairs: round j of each block's plain rounds and of its app rounds."""
    pairs = [p / a for pb, ab in zip(plain["round-seconds"], app["round-seconds"])
             for p, a in zip(pb, ab)]
    p_all = [t for block in plain["round-seconds"] for t in block]
    a_all = [t for block in app["round-seconds"] for t in block]
    t_all = [t for block in app["train-seconds"] for t in block]
    p_med, a_med = float(np.median(p_all)), float(np.median(a_all))
    samples = w.clients * w.samples * w.epochs
    return {"plain-s-per-round": p_med, "app-s-per-round": a_med,
            "app-train-s-per-round": float(np.median(t_all)),
            "app-first-round-s": float(np.median(app["first-round-seconds"])),
            "plain-samples-per-s": samples / p_med, "app-samples-per-s": samples / a_med,
            "pair-ratios": pairs, "eta": float(np.median(pairs)),
            "eta-spread": [min(pairs), max(pairs)], "overhead-s-per-round": a_med - p_med}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="W1", help="comma-separated: W1,W2,W3")
    parser.add_argument("--blocks", type=int, default=4, help="plain/app blocks (pairs of runs)")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per block")
    parser.add_argument("--tiny", action="store_true", help="smoke run with tiny sizes")
    parser.add_argument("--gpus-per-client", type=float, default=None,
                        help="client-resources-num-gpus of the app "
                             "(default: 0.25 on a GPU, 0 on CPU)")
    parser.add_argument("--app-niceness", default="same",
                        help="niceness of the app's Ray actors: 'same' (as this process, the "
                             "plain loop's; default), 'ray' (Ray's default, 15) or a number")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--no-aggregation", action="store_true", help="skip the aggregation timing")
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the simulation's floor (benchmarks/sim_floor.py)")
    parser.add_argument("--plain-block", help=argparse.SUPPRESS)  # (the plain loop's process)
    parser.add_argument("--in-process-block", help=argparse.SUPPRESS)  # (the in-process app)
    args = parser.parse_args()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if args.plain_block:
        w = TINY if args.plain_block == TINY.name else WORKLOADS[args.plain_block]
        print(json.dumps(plain_loop(w, args.rounds, device)))
        return
    if args.in_process_block:
        w = TINY if args.in_process_block == TINY.name else WORKLOADS[args.in_process_block]
        print(json.dumps(_in_process_run(w, args.rounds)))
        return
    gpus = (args.gpus_per_client if args.gpus_per_client is not None
            else (0.25 if device.type == "cuda" else 0.0))
    workloads = [TINY] if args.tiny else [WORKLOADS[n.strip()] for n in args.workloads.split(",")]
    blocks, rounds = (2, 1) if args.tiny else (args.blocks, args.rounds)
    niceness = {"same": os.nice(0), "ray": None}.get(args.app_niceness)
    if args.app_niceness not in ("same", "ray"):
        niceness = int(args.app_niceness)
    import flwr

    info = {"device": (torch.cuda.get_device_name(0) if device.type == "cuda"
                       else platform.processor() or "cpu"),
            "cpus": os.cpu_count(), "torch": torch.__version__, "flwr": flwr.__version__,
            "python": platform.python_version(), "blocks": blocks, "rounds-per-block": rounds,
            "gpus-per-client": gpus, "plain-niceness": os.nice(0),
            "app-niceness": "ray default (15)" if niceness is None else niceness,
            "load-average": list(os.getloadavg())}
    print("device: {device} | {cpus} CPUs | torch {torch} | flwr {flwr} | python {python} | "
          "{blocks} blocks of {rounds-per-block} plain + 1 + {rounds-per-block} app rounds | "
          "client-resources-num-gpus {gpus-per-client} | niceness plain {plain-niceness}, app "
          "{app-niceness} | load average {load-average[0]:.2f}".format(**info), flush=True)
    results = {"info": info, "workloads": {}}
    if not args.no_floor:  # what any PyTorch app pays in the simulation before its own work
        from benchmarks.sim_floor import floor_peak

        results["floor"] = floor_peak()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for w in workloads:
            data = make_cifar_copy(Path(tmp) / f"data-{w.name}", w.clients * w.samples, 100)
            plain, app = interleaved(w, blocks, rounds, data, Path(tmp) / "runs", gpus, niceness)
            inproc = in_process_block(w, 1 + rounds)
            results["workloads"][w.name] = {
                "workload": asdict(w), "plain": plain, "app": app, "in-process": inproc,
                "model-mb": model_mb(w),
                # the memory goal: twice the plain loop's peak plus the models (the server's
                # and the running client's copy)
                "memory-goal-mb": 2 * plain["peak-host-mb"] + 2 * model_mb(w),
                **figures(plain, app, w)}
    if not args.no_aggregation:
        results["aggregation-10-resnet18"] = aggregation_ms()
    info["load-average-end"] = list(os.getloadavg())
    header = ("| workload | plain s/round | app s/round | app training s/round | app round 1 s "
              "| eta (median of pairs) | eta spread (min-max) | pairs | overhead s/round "
              "| plain peak host MB | app peak host MB | plain peak device MB "
              "| app in-process peak host MB | memory goal MB (2 x plain + models) |")
    print("\n" + header + "\n" + "| --- " * 14 + "|")
    for name, r in results["workloads"].items():
        dev = r["plain"]["peak-device-mb"]
        lo, hi = r["eta-spread"]
        print(f"| {name} | {r['plain-s-per-round']:.2f} | {r['app-s-per-round']:.2f} | "
              f"{r['app-train-s-per-round']:.2f} | {r['app-first-round-s']:.2f} | "
              f"{r['eta']:.3f} | {lo:.3f}-{hi:.3f} | {len(r['pair-ratios'])} | "
              f"{r['overhead-s-per-round']:+.2f} | "
              f"{r['plain']['peak-host-mb']:.0f} | {r['app']['peak-host-mb']:.0f} | "
              f"{'n/a' if dev is None else f'{dev:.0f}'} | "
              f"{r['in-process']['peak-host-mb']:.0f} | {r['memory-goal-mb']:.0f} |")
    floor = results.get("floor")
    for name, r in results["workloads"].items():
        parts = sorted(r["app"].get("peak-breakdown-mb", {}).items(), key=lambda kv: -kv[1])
        print(f"{name}: the simulation's peak by process: "
              + ", ".join(f"{k} {mb:.0f}" for k, mb in parts) + " MB; proportional sizes "
              f"(shared pages counted once) {r['app'].get('peak-pss-mb', 0.0):.0f} MB")
        if floor:
            own = r["app"]["peak-host-mb"] - floor["peak-host-mb"]
            r["app-above-floor-mb"] = own
            print(f"{name}: the simulation's floor (benchmarks.sim_floor) "
                  f"{floor['peak-host-mb']:.0f} MB resident, {floor['peak-pss-mb']:.0f} MB "
                  f"proportional; the app above it {own:.0f} MB = "
                  f"{own / r['plain']['peak-host-mb']:.2f} x the plain loop's peak; the goal "
                  f"{r['memory-goal-mb']:.0f} MB is "
                  f"{'below' if r['memory-goal-mb'] < floor['peak-host-mb'] else 'above'} "
                  "the floor")
    print("load average: {:.2f} at the start, {:.2f} at the end (1 min)".format(
        info["load-average"][0], info["load-average-end"][0]))
    if "aggregation-10-resnet18" in results:
        agg = results["aggregation-10-resnet18"]
        print(f"\nserver aggregation of 10 ResNet-18 updates: {agg['app-ms']:.1f} ms, "
              f"the floor {agg['floor-ms']:.1f} ms ({agg['ratio']:.2f}x; "
              "python -m benchmarks.server_aggregation)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
