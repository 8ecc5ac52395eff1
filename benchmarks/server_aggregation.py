"""The server's aggregation against the floor, measured in one process.

    python -m benchmarks.server_aggregation                      # 10 and 100 ResNet-18-GN updates
    python -m benchmarks.server_aggregation --updates 10 --repeats 7 --json agg.json
    python -m benchmarks.server_aggregation --tiny               # a smoke run (seconds)

app:   the strategy's `aggregate_train` for one round, as the ServerApp builds it (`run_config.
       resolve` of the FedACG preset + `strategies.assembly.build_strategy`, the ServerApp's
       `num-examples-check` bound): screening of every reply, the influence limits, the momentum
       rule and the result's ArrayRecord. Only the strategy's public entry points are used
       (`configure_train`, `aggregate_train`), so the figures stay comparable when its internals
       change.
floor: a plain fused weighted mean of the same replies, sum_i n_i / n * w_i: zero-copy views of
       each reply's array bytes (`Array.dtype` / `.shape`, no header parsing), one
       `torch._foreach_add_` per reply into preallocated accumulators. With FedACG's eta = 1 the
       new theta is exactly that mean (theta + lam*m + d = phi + mean - phi), so the two results
       are compared every round (`max-abs-diff`).

The replies are real Flower `Message`s carrying an `ArrayRecord` (model + Gaussian noise, 500
examples each), deflated and inflated as Flower's grid receives them off the wire; each is built
once and answers every round. Round 1 is not timed in the pairs (its one-time costs: the first
allocations; shown as `app round 1 ms`). Each repeat times the floor and the app on the same
replies, interleaved (floor, app, app, floor, floor, app, ...), so a change of load moves both;
before each, one byte of every page of the replies is read (untimed): memory left unread for
~10 s costs about 0.4 us a page to read again on the project's box (its kernel runs a DAMON
pageout scheme), which only the side timed first would pay. `ratio` = app /
floor per pair, shown as the median and its spread (min-max) over the pairs.

Peak memory above the replies (MB): each figure comes from a fresh process that builds the
replies and the strategy, runs one `configure_train`, returns freed heap memory to the system
(glibc's `malloc_trim`), then resets the kernel's resident-memory high-water mark
(`/proc/self/clear_refs`, Linux) and measures VmHWM - VmRSS over one aggregation: every byte
the aggregation touched anew (torch's CPU allocations, NumPy, Python objects), the result
included. tracemalloc would not see torch's allocations.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from inprocess import InProcessGrid
from models import build_model

ROOT = Path(__file__).resolve().parents[1]
NUM_EXAMPLES = 500  # each reply's claim; also the largest partition (num-examples-check)


def off_the_wire(msg):
    """`msg` deflated into object contents and inflated again, as Flower's grid pulls a reply."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(msg).items()}
    out = inflate_object_from_contents(msg.object_id, contents)
    out.metadata.__dict__["_message_id"] = msg.object_id
    return out


def make_replies(model: torch.nn.Module, n: int, scale: float = 0.01, seed: int = 0) -> list:
    """n replies, each `model`'s state + scale * N(0, 1) noise on its float tensors."""
    gen = torch.Generator().manual_seed(seed)
    theta = model.state_dict()
    instruction = Message(RecordDict(), dst_node_id=1, message_type="train")
    replies = []
    for _ in range(n):
        state = {k: v + scale * torch.randn(v.shape, generator=gen) if v.is_floating_point()
                 else v for k, v in theta.items()}
        content = RecordDict({"arrays": ArrayRecord(state),
                              "metrics": MetricRecord({"num-examples": NUM_EXAMPLES,
                                                       "train-loss": 1.0})})
        replies.append(off_the_wire(Message(content, reply_to=instruction)))
    return replies


class ReplyGrid(InProcessGrid):
    """Answers every train instruction with the prebuilt replies (one per node, re-addressed to
    the instruction as the SuperLink does) and a node's query as a simulated node does."""

    def __init__(self, replies: list):
        super().__init__(len(replies), self.answer, fixed_size=True)
        self.replies = replies

    def answer(self, index: int, msg):
        if msg.metadata.message_type == "query":
            return RecordDict({"metrics": MetricRecord({"partition-id": index, "num-partitions":
                                                        len(self.replies), "simulated": 1})})
        reply = self.replies[index]
        meta = reply.metadata.__dict__
        meta["_reply_to_message_id"] = msg.metadata.message_id
        meta["_src_node_id"], meta["_dst_node_id"] = msg.metadata.dst_node_id, 0
        meta["_group_id"] = msg.metadata.group_id
        return reply


def app_strategy(model_name: str, model: torch.nn.Module, n: int):
    """The FedACG preset's strategy as the ServerApp builds it, every node sampled."""
    from run_config import resolve
    from strategies.assembly import build_strategy

    cfg = resolve({"method": "fedacg", "model": model_name, "dataset": "cifar10",
                   "fraction-train": 1.0, "min-train-nodes": n, "fraction-evaluate": 0.0})
    strategy = build_strategy(cfg, model)
    if cfg["num-examples-check"]:  # as server_app does with the partition summary
        strategy.max_num_examples = float(NUM_EXAMPLES)
    return strategy


def floor_mean(replies: list, acc: list[torch.Tensor]) -> list[torch.Tensor]:
    """The weighted mean of the replies' float arrays into `acc` (zeroed here), in place."""
    weights = [r.content["metrics"]["num-examples"] for r in replies]
    total = float(sum(weights))
    torch._foreach_zero_(acc)
    for reply, w in zip(replies, weights):
        views = []
        for array in reply.content["arrays"].values():
            dtype = np.dtype(array.dtype)
            if dtype.kind != "f":
                continue
            count = int(np.prod(array.shape, dtype=np.int64))
            offset = len(array.data) - count * dtype.itemsize  # the npy header precedes the data
            views.append(torch.from_numpy(
                np.frombuffer(array.data, dtype, count, offset).reshape(array.shape)))
        torch._foreach_add_(acc, views, alpha=w / total)
    return acc


def float_keys(model: torch.nn.Module) -> list[str]:
    return [k for k, v in model.state_dict().items() if v.is_floating_point()]


def setup(model_name: str, n: int):
    """(model, replies, grid, strategy, the record of round 1's theta) with the task identity
    that messages made outside a Flower runtime need."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    model = build_model(model_name, (3, 32, 32), 10, seed=0)
    replies = make_replies(model, n)
    grid = ReplyGrid(replies)
    return model, replies, grid, app_strategy(model_name, model, n), ArrayRecord(model.state_dict())


def touch(replies: list) -> int:
    """Read one byte of every page of the replies' arrays (untimed), so that neither side of a
    pair pays for bringing back memory the system paged out while it sat unread."""
    return sum(int(np.frombuffer(a.data, np.uint8)[::4096].sum())
               for reply in replies for a in reply.content["arrays"].values())


def time_pairs(model_name: str, n: int, repeats: int) -> dict:
    """`repeats` rounds, each timing the floor and the app on the round's replies (in the order
    floor, app in odd rounds and app, floor in even ones), in milliseconds."""
    from models.wire import state_view

    model, replies, grid, strategy, arrays = setup(model_name, n)
    keys = float_keys(model)
    acc = [torch.zeros_like(v) for k, v in model.state_dict().items() if k in keys]
    floor_ms, app_ms, diffs = [], [], []
    # round 1 is untimed in the pairs: its one-time costs (first allocations) are reported on
    # their own
    answers = grid.send_and_receive(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    t = time.perf_counter()
    arrays, _ = strategy.aggregate_train(1, answers)
    first_ms = (time.perf_counter() - t) * 1000
    floor_mean(answers, acc)
    for r in range(2, repeats + 2):
        answers = grid.send_and_receive(strategy.configure_train(r, arrays, ConfigRecord(), grid))
        for side in ("floor", "app") if r % 2 else ("app", "floor"):
            gc.collect()
            touch(answers)
            t = time.perf_counter()
            if side == "floor":
                floor_mean(answers, acc)
                floor_ms.append((time.perf_counter() - t) * 1000)
            else:
                arrays, metrics = strategy.aggregate_train(r, answers)
                app_ms.append((time.perf_counter() - t) * 1000)
        if arrays is None or metrics["replies"] != n:
            raise RuntimeError(f"round {r}: the app aggregated {metrics['replies']} of {n} "
                               "replies (a defense tripped on honest replies?)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            theta = state_view(arrays)
        diffs.append(max(float((theta[k] - a).abs().max()) for k, a in zip(keys, acc)))
    ratios = [a / f for f, a in zip(floor_ms, app_ms)]
    mb = sum(len(a.data) for reply in replies for a in reply.content["arrays"].values()) / 2**20
    return {"updates": n, "replies-mb": mb, "floor-ms": floor_ms, "app-ms": app_ms,
            "floor-best-ms": min(floor_ms), "floor-median-ms": statistics.median(floor_ms),
            "app-best-ms": min(app_ms), "app-median-ms": statistics.median(app_ms),
            "first-round-ms": first_ms, "pair-ratios": ratios,
            "ratio-median": statistics.median(ratios),
            "ratio-spread": [min(ratios), max(ratios)], "max-abs-diff": max(diffs)}


def _memory_kb() -> dict[str, int]:
    with open("/proc/self/status") as f:
        status = f.read()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) for k in ("VmRSS", "VmHWM")}


def peak_above_replies(kind: str, model_name: str, n: int) -> float | None:
    """In this (fresh) process: MB of resident memory that one aggregation adds at its peak."""
    model, replies, grid, strategy, arrays = setup(model_name, n)
    answers = grid.send_and_receive(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    gc.collect()
    touch(answers)
    try:  # memory freed earlier goes back to the system: what the aggregation takes is new
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
    except OSError:
        return None
    before = _memory_kb()["VmRSS"]
    if kind == "floor":
        acc = [torch.zeros_like(v) for v in model.state_dict().values() if v.is_floating_point()]
        floor_mean(answers, acc)
    else:
        strategy.aggregate_train(1, answers)
    return (_memory_kb()["VmHWM"] - before) / 1024


def measure_memory(kind: str, model_name: str, n: int) -> float | None:
    """`peak_above_replies` run in a fresh Python process (nothing freed earlier is reused)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.server_aggregation", "--memory-of", kind,
         "--model", model_name, "--updates", str(n)],
        cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory run of {kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["peak-mb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", default="10,100", help="comma-separated reply counts")
    parser.add_argument("--repeats", type=int, default=5, help="floor/app pairs per count")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--tiny", action="store_true", help="smoke run: 3 CNN updates, 2 pairs")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory processes")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--memory-of", choices=("app", "floor"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)  # no per-round log lines
    if args.memory_of:
        print(json.dumps({"peak-mb": peak_above_replies(args.memory_of, args.model,
                                                        int(args.updates))}))
        return
    model_name, repeats = args.model, args.repeats
    counts = [int(c) for c in args.updates.split(",")]
    if args.tiny:
        model_name, counts, repeats = "cnn", [3], 2
    import flwr

    info = {"device": platform.processor() or "cpu", "cpus": os.cpu_count(),
            "torch-threads": torch.get_num_threads(), "torch": torch.__version__,
            "flwr": flwr.__version__, "python": platform.python_version(), "model": model_name,
            "repeats": repeats, "load-average": list(os.getloadavg())}
    print("device: {device} | {cpus} CPUs, {torch-threads} torch threads | torch {torch} | "
          "flwr {flwr} | python {python} | {model} | {repeats} floor/app pairs | "
          "load average {load-average[0]:.2f}".format(**info), flush=True)
    results = {"info": info, "updates": {}}
    for n in counts:
        row = time_pairs(model_name, n, repeats)
        gc.collect()
        if not args.no_memory:
            row["floor-peak-mb"] = measure_memory("floor", model_name, n)
            row["app-peak-mb"] = measure_memory("app", model_name, n)
        results["updates"][str(n)] = row
    results["info"]["load-average-end"] = list(os.getloadavg())
    print("\n| updates | floor ms best / median | app ms best / median | app/floor median "
          "(min-max) | floor peak MB | app peak MB | replies MB | max abs diff | app round 1 ms "
          "|\n" + "| --- " * 9 + "|")

    def mb(v):
        return "n/a" if v is None else f"{v:.0f}"

    for n, r in results["updates"].items():
        lo, hi = r["ratio-spread"]
        print(f"| {n} | {r['floor-best-ms']:.1f} / {r['floor-median-ms']:.1f} | "
              f"{r['app-best-ms']:.1f} / {r['app-median-ms']:.1f} | "
              f"{r['ratio-median']:.2f}x ({lo:.2f}-{hi:.2f}) | {mb(r.get('floor-peak-mb'))} | "
              f"{mb(r.get('app-peak-mb'))} | {r['replies-mb']:.0f} | {r['max-abs-diff']:.1e} | "
              f"{r['first-round-ms']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
