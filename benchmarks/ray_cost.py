"""Where the app's simulated rounds lose to the plain loop: Ray's processes, or the app?

    python -m benchmarks.ray_cost                  # W1 (the CPU workload of sim_vs_loop)
    python -m benchmarks.ray_cost --blocks 4 --rounds 3 --json ray_cost.json
    python -m benchmarks.ray_cost --tiny           # a smoke run

`benchmarks/sim_vs_loop.py` compares the plain loop with the app in Flower's Ray simulation.
This one takes the two apart, with three sides on the same workload, each a fresh process of
its own session, in alternating blocks (the order rotates: plain, ray, app; ray, app, plain;
...), 1 + R rounds each, the first left out:

  plain     the plain loop (`benchmarks/plain_loop.py`), as in sim_vs_loop;
  ray       the same plain loop in a Ray actor holding every CPU, on a Ray cluster started as
            Flower's simulation engine starts it (`ray.init(include_dashboard=False)`, flwr
            1.41 `RayBackend.init_ray`): no Flower at all, only Ray's own processes beside it;
  app       the app's ServerApp and ClientApp in this project's in-process runtime
            (`inprocess.run_in_process`: no Ray, no SuperLink, no serialization), the same run
            config as sim_vs_loop's app side, on the same kind of data copy.

Round j of each side in a block is paired with round j of the plain side of that block:
`ray eta` = median of plain / ray seconds (what Ray's presence alone costs the same loop),
`app eta` = median of plain / app seconds (the app's own training and round, without Ray),
each with its min-max spread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.sim_vs_loop import (TINY, WORKLOADS, Workload, app_config, make_cifar_copy,
                                   plain_loop)

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("plain", "ray", "app")


def ray_block(w: Workload, rounds: int) -> dict:
    """`plain_loop` in a Ray actor that holds every CPU, on a cluster started as Flower's."""
    import ray

    cpus = os.cpu_count() or 1
    ray.init(include_dashboard=False, num_cpus=cpus, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
    try:
        actor = ray.remote(num_cpus=cpus)(_Trainer).remote()
        return ray.get(actor.train.remote(w, rounds))
    finally:
        ray.shutdown()


class _Trainer:
    def train(self, w: Workload, rounds: int) -> dict:
        return plain_loop(w, rounds, torch.device("cpu"))


def app_block(w: Workload, rounds: int, data: Path, out: Path) -> dict:
    """The app's rounds in the in-process runtime, with sim_vs_loop's run config."""
    from inprocess import run_in_process

    run_config = app_config(w, rounds, data, out, "app")
    run_in_process(run_config, w.clients)
    rows = json.loads((out / "app" / "results.json").read_text())["rounds"]
    return {"round-seconds": [r["seconds"] for r in rows if r["round"] > 0]}


def side_block(side: str, w: Workload, rounds: int, data: Path, out: Path) -> list[float]:
    """One side's 1 + `rounds` rounds in a fresh process of its own session: the measured
    rounds' seconds (the first round left out)."""
    cmd = [sys.executable, "-m", "benchmarks.ray_cost", "--side", side, "--workload", w.name,
           "--rounds", str(1 + rounds), "--data", str(data), "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=7200,
                          check=False, start_new_session=True,
                          env={**os.environ, "FEDACG_CACHE_DIR": str(out / "cache")})
    if done.returncode != 0:
        raise RuntimeError(f"the {side} side failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["round-seconds"][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=3, help="blocks of the three sides")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per block")
    parser.add_argument("--tiny", action="store_true", help="smoke run with tiny sizes")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    for hidden in ("--side", "--workload", "--data", "--out"):  # (a side's own process)
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.side:
        w = TINY if args.workload == TINY.name else WORKLOADS[args.workload]
        result = (plain_loop(w, args.rounds, torch.device("cpu")) if args.side == "plain"
                  else ray_block(w, args.rounds) if args.side == "ray"
                  else app_block(w, args.rounds, Path(args.data), Path(args.out)))
        print(json.dumps({"round-seconds": result["round-seconds"]}))
        return
    w = TINY if args.tiny else WORKLOADS["W1"]
    blocks, rounds = (1, 1) if args.tiny else (args.blocks, args.rounds)
    info = {"device": platform.processor() or "cpu", "cpus": os.cpu_count(),
            "torch": torch.__version__, "python": platform.python_version(), "workload": w.name,
            "blocks": blocks, "rounds-per-block": rounds, "load-average": list(os.getloadavg())}
    print("device: {device} | {cpus} CPUs | torch {torch} | python {python} | {workload} | "
          "{blocks} blocks of 1 + {rounds-per-block} rounds per side | load average "
          "{load-average[0]:.2f}".format(**info), flush=True)
    seconds = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="ray-cost-") as tmp:
        data = make_cifar_copy(Path(tmp) / "data", w.clients * w.samples, 100)
        for b in range(blocks):
            for side in SIDES[b % 3:] + SIDES[:b % 3]:
                seconds[side].append(side_block(side, w, rounds, data, Path(tmp) / f"{side}{b}"))
                print(f"  block {b + 1}/{blocks} {side}: "
                      + ", ".join(f"{t:.2f}" for t in seconds[side][-1]) + " s/round", flush=True)
    info["load-average-end"] = list(os.getloadavg())
    results = {"info": info, "round-seconds": seconds}
    for side in ("ray", "app"):
        pairs = [p / s for pb, sb in zip(seconds["plain"], seconds[side]) for p, s in zip(pb, sb)]
        results[f"{side}-pair-ratios"] = pairs
        results[f"{side}-eta"] = float(np.median(pairs))
        results[f"{side}-eta-spread"] = [min(pairs), max(pairs)]
    med = {side: float(np.median([t for block in seconds[side] for t in block])) for side in SIDES}
    results.update({f"{side}-s-per-round": med[side] for side in SIDES})
    print("\n| workload | plain s/round | plain in a Ray actor s/round | ray eta (min-max) "
          "| app in-process s/round | app eta (min-max) | pairs |\n" + "| --- " * 7 + "|")
    print(f"| {w.name} | {med['plain']:.2f} | {med['ray']:.2f} | {results['ray-eta']:.3f} "
          f"({results['ray-eta-spread'][0]:.3f}-{results['ray-eta-spread'][1]:.3f}) | "
          f"{med['app']:.2f} | {results['app-eta']:.3f} ({results['app-eta-spread'][0]:.3f}-"
          f"{results['app-eta-spread'][1]:.3f}) | {len(results['app-pair-ratios'])} |")
    print("load average: {:.2f} at the start, {:.2f} at the end (1 min)".format(
        info["load-average"][0], info["load-average-end"][0]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
