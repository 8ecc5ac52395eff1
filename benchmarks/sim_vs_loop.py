"""Our app in Ray simulation against a plain PyTorch loop doing the same local training.

    python -m benchmarks.sim_vs_loop                       # W1 on this machine (CPU: W1 only)
    python -m benchmarks.sim_vs_loop --workloads W1,W2,W3  # all three (meant for a GPU)
    python -m benchmarks.sim_vs_loop --tiny                # a smoke run (seconds, sizes tiny)

Workloads (FedAvg, plain SGD, no augmentation, 3x32x32 images, 10 classes, 500 examples per
client, 5 local epochs, every client trains every round):
  W1  GC-Fed CNN,     5 clients per round, batch 50
  W2  ResNet-18-GN,   5 clients per round, batch 50   (FedACG's CIFAR set-up)
  W3  ResNet-18-GN,  10 clients per round, batch 10   (FedACG's 500-client set-up)

(a) the plain loop trains the clients one after another in this process (`plain_loop.py`);
(b) the app runs through `flwr run` on a simulation SuperLink of its own, reading a local copy of
a CIFAR-shaped dataset (random images, the hub's format) made here. Both do the same number of
SGD steps on the same shapes. Round 1 of the app includes starting Ray actors and loading data,
so it is reported apart; the figures are medians over rounds 2..R:
  eta       = (app samples per second) / (plain loop samples per second)
            = plain seconds per round / app seconds per round
  overhead  = app seconds per round - plain seconds per round
  app training s/round: the clients' own local-training seconds inside the app's round
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
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.plain_loop import run_plain_loop
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
    gen = torch.Generator().manual_seed(0)
    clients = [((torch.rand(w.samples, 3, w.image, w.image, generator=gen) - 0.5) / 0.25,
                torch.randint(0, 10, (w.samples,), generator=gen)) for _ in range(w.clients)]
    model = build_model(w.model, (3, w.image, w.image), 10, seed=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = run_plain_loop(model, clients, rounds=rounds, lr=0.01, epochs=w.epochs,
                             batch_size=w.batch, device=device)
    return {"round-seconds": seconds,
            "peak-host-mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak-device-mb": (torch.cuda.max_memory_allocated(device) / 2**20
                               if device.type == "cuda" else None)}


def _tree_rss_mb(root: int) -> float:
    """Resident memory of `root` and every process under it (Linux /proc)."""
    parent, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    tree, todo = {root}, [root]
    while todo:
        node = todo.pop()
        for pid, ppid in parent.items():
            if ppid == node and pid not in tree:
                tree.add(pid)
                todo.append(pid)
    return sum(rss.get(p, 0) for p in tree) / 2**20


def flwr_run_peak(link, run_config: str, federation: str) -> tuple:
    """`flwr run .` on `link` (a running LocalSuperLink): (the finished process, wall seconds,
    peak host MB of the SuperLink's whole process tree, sampled every 0.5 s)."""
    peak = [0.0]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.5):
            peak[0] = max(peak[0], _tree_rss_mb(link.proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.perf_counter()
    proc = subprocess.run(
        ["flwr", "run", ".", link.connection, "--stream", "--run-config", run_config,
         "--federation-config", federation],
        cwd=ROOT, env=link.env, capture_output=True, text=True, timeout=7200, check=False)
    wall = time.perf_counter() - t
    stop.set()
    sampler.join()
    return proc, wall, peak[0]


def app_run(w: Workload, rounds: int, data: Path, out: Path, gpus_per_client: float) -> dict:
    from reporting.superlink import LocalSuperLink

    run_config = " ".join([
        "method='fedavg'", "dataset='cifar10'", f"dataset-path='{data}'", "partitioner='iid'",
        f"model='{w.model}'", f"local-epochs={w.epochs}", f"batch-size={w.batch}", "lr=0.01",
        "weight-decay=0.0", "grad-clip=0.0", "augment='none'", "client-val-fraction=0.0",
        "fraction-train=1.0", f"min-train-nodes={w.clients}", f"num-server-rounds={rounds}",
        f"eval-every={rounds}", "checkpoint-every=0", f"out-dir='{out}'", f"run-name='{w.name}'",
    ])
    federation = f"num-supernodes={w.clients} client-resources-num-cpus={os.cpu_count() or 1}"
    if gpus_per_client > 0:
        federation = (f"num-supernodes={w.clients} client-resources-num-cpus=1 "
                      f"client-resources-num-gpus={gpus_per_client}")
    with LocalSuperLink() as link:
        proc, wall, peak_mb = flwr_run_peak(link, run_config, federation)
    if proc.returncode != 0:
        raise RuntimeError(f"flwr run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = json.loads((out / w.name / "results.json").read_text())["rounds"]
    return {"round-seconds": [r["seconds"] for r in rows if r["round"] > 0],
            # mean client train-seconds x clients: the local training inside each round
            "train-seconds": [r.get("train-seconds", 0.0) * w.clients
                              for r in rows if r["round"] > 0],
            "wall-seconds": wall, "peak-host-mb": peak_mb}


def aggregation_ms(device_note: str, n: int = 10) -> float:
    """Server aggregation (screening + momentum step) of n ResNet-18 updates, in milliseconds."""
    sys.path.insert(0, str(ROOT / "tests"))
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fakegrid import FakeGrid
    from strategy_helpers import LookaheadFedAvg

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    model = build_model("resnet18", (3, 32, 32), 10, seed=0)
    replies = [RecordDict({"arrays": ArrayRecord({k: v + 0.01 * i
                                                  for k, v in model.state_dict().items()}),
                           "metrics": MetricRecord({"num-examples": 500})}) for i in range(n)]
    strategy = LookaheadFedAvg(lam=0.85, lookahead=True, min_train_nodes=n, fraction_evaluate=0.0)
    grid = FakeGrid(n, lambda i, msg: replies[i])
    arrays = ArrayRecord(model.state_dict())
    best = float("inf")
    for r in range(1, 4):
        msgs = list(strategy.configure_train(r, arrays, ConfigRecord(), grid))
        answers = grid.send_and_receive(msgs)
        t = time.perf_counter()
        arrays, _ = strategy.aggregate_train(r, answers)
        best = min(best, time.perf_counter() - t)
    return best * 1000


def figures(plain: dict, app: dict, w: Workload) -> dict:
    p = plain["round-seconds"][1:] or plain["round-seconds"]
    a = app["round-seconds"][1:] or app["round-seconds"]
    t = app["train-seconds"][1:] or app["train-seconds"]
    p_mean, a_mean = float(np.median(p)), float(np.median(a))  # medians: robust to a noisy round
    samples = w.clients * w.samples * w.epochs
    return {"plain-s-per-round": p_mean, "app-s-per-round": a_mean,
            "app-train-s-per-round": float(np.median(t)),
            "app-first-round-s": app["round-seconds"][0], "plain-samples-per-s": samples / p_mean,
            "app-samples-per-s": samples / a_mean, "eta": p_mean / a_mean,
            "overhead-s-per-round": a_mean - p_mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="W1", help="comma-separated: W1,W2,W3")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tiny", action="store_true", help="smoke run with tiny sizes")
    parser.add_argument("--gpus-per-client", type=float, default=None,
                        help="client-resources-num-gpus of the app "
                             "(default: 0.25 on a GPU, 0 on CPU)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--no-aggregation", action="store_true", help="skip the aggregation timing")
    args = parser.parse_args()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    gpus = (args.gpus_per_client if args.gpus_per_client is not None
            else (0.25 if device.type == "cuda" else 0.0))
    workloads = [TINY] if args.tiny else [WORKLOADS[n.strip()] for n in args.workloads.split(",")]
    rounds = 2 if args.tiny else args.rounds
    import flwr

    info = {"device": (torch.cuda.get_device_name(0) if device.type == "cuda"
                       else platform.processor() or "cpu"),
            "cpus": os.cpu_count(), "torch": torch.__version__, "flwr": flwr.__version__,
            "python": platform.python_version(), "rounds": rounds, "gpus-per-client": gpus}
    print("device: {device} | {cpus} CPUs | torch {torch} | flwr {flwr} | python {python} | "
          "{rounds} rounds, figures from rounds 2..{rounds} | "
          "client-resources-num-gpus {gpus-per-client}"
          .format(**info), flush=True)
    results = {"info": info, "workloads": {}}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for w in workloads:
            data = make_cifar_copy(Path(tmp) / f"data-{w.name}", w.clients * w.samples, 100)
            plain = plain_loop(w, rounds, device)
            app = app_run(w, rounds, data, Path(tmp) / "runs", gpus)
            results["workloads"][w.name] = {"workload": asdict(w), "plain": plain, "app": app,
                                            **figures(plain, app, w)}
    if not args.no_aggregation:
        results["aggregation-10-resnet18-ms"] = aggregation_ms(str(device))
    header = ("| workload | plain s/round | app s/round | app training s/round | app round 1 s "
              "| eta "
              "| overhead s/round | plain peak host MB | app peak host MB | plain peak device MB |")
    print("\n" + header + "\n" + "| --- " * 10 + "|")
    for name, r in results["workloads"].items():
        dev = r["plain"]["peak-device-mb"]
        print(f"| {name} | {r['plain-s-per-round']:.2f} | {r['app-s-per-round']:.2f} | "
              f"{r['app-train-s-per-round']:.2f} | "
              f"{r['app-first-round-s']:.2f} | {r['eta']:.3f} | {r['overhead-s-per-round']:+.2f} | "
              f"{r['plain']['peak-host-mb']:.0f} | {r['app']['peak-host-mb']:.0f} | "
              f"{'n/a' if dev is None else f'{dev:.0f}'} |")
    if "aggregation-10-resnet18-ms" in results:
        print("\nserver aggregation of 10 ResNet-18 updates: "
              f"{results['aggregation-10-resnet18-ms']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
