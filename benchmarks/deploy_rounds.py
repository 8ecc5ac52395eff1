"""Seconds per round of a deployment against the simulation of the same run, and where a
deployed round goes (docs/deployment.md#deployment-cost).

    python -m benchmarks.deploy_rounds                   # 2 and 3 nodes, 5 rounds each
    python -m benchmarks.deploy_rounds --nodes 3 --json out.json

For N nodes, one run config (`num-server-rounds=5 fraction-train=1.0`: digits, each node its
partition) as a simulation (`flwr run` on a simulation SuperLink of its own, `num-supernodes=N`)
and as a deployment from deploy/'s scripts on this machine (experiments.deployment: TLS,
SuperNode authentication, the fleet proxy, `deploy/supernode.sh --client-id i --num-clients N`,
OMP_NUM_THREADS=1). From each run's results.json: round 1, and the median of rounds 2-5 split
into what the ClientApps of the training messages report (means over the round's nodes): the
ClientApp's start and imports (`start-seconds`: the process's age when its handler begins,
i.e. Python, flwr, torch, the app and fetching the message; a deployed ClientApp only), the
data load (`load-seconds`) and the training (`train-seconds`); the rest of the round, less the
server's own evaluation, is Flower's: polling for work and passing the messages. The load
average is printed before and after each run: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_CONFIG = "num-server-rounds=5 fraction-train=1.0"
# the ClientApps' reports of their training messages, as results.json's rows name them
PARTS = ("train-start-seconds", "train-load-seconds", "train-seconds")


def split(rows: list[dict]) -> dict:
    """Round 1's seconds, and the medians of the later rounds: the round, its parts, the rest."""
    later = [r for r in rows if r["round"] > 1]
    out = {"round-1": rows[1]["seconds"] if len(rows) > 1 else None,
           "round": statistics.median(r["seconds"] for r in later)}
    for key in PARTS:
        out[key] = statistics.median(r.get(key, 0.0) for r in later)
    out["flower"] = statistics.median(
        r["seconds"] - sum(r.get(k, 0.0) for k in PARTS) - r.get("eval-seconds", 0.0)
        for r in later)
    return out


def simulated(nodes: int, folder: Path) -> list[dict]:
    from experiments.superlink import LocalSuperLink

    with LocalSuperLink() as link:
        subprocess.run(["flwr", "run", str(ROOT), link.connection, "--stream",
                        "--federation-config", f"num-supernodes={nodes}", "--run-config",
                        f"{RUN_CONFIG} out-dir='{folder}' run-name='simulated'"],
                       env=link.env, cwd=ROOT, check=True, capture_output=True, timeout=1800)
    return json.loads((folder / "simulated" / "results.json").read_text())["rounds"]


def deployed(nodes: int, folder: Path) -> list[dict]:
    from experiments.deployment import LocalDeployment

    options = [["--client-id", str(i), "--num-clients", str(nodes), "--cache-dir",
                str(folder / "cache")] for i in range(nodes)]
    with LocalDeployment(folder / "deployment", options) as deployment:
        deployment.flwr("run", str(ROOT), deployment.CONNECTION, "--stream", "--run-config",
                        f"{RUN_CONFIG} out-dir='{folder}' run-name='deployed'")
    return json.loads((folder / "deployed" / "results.json").read_text())["rounds"]


def measure(nodes: int) -> dict:
    out = {"nodes": nodes}
    with tempfile.TemporaryDirectory(prefix="deploy-rounds-") as tmp:
        for name, run in (("simulation", simulated), ("deployment", deployed)):
            before = list(os.getloadavg())
            out[name] = {**split(run(nodes, Path(tmp) / name)), "load-average": before,
                         "load-average-end": list(os.getloadavg())}
    return out


def row(name: str, nodes: int, r: dict) -> str:
    parts = " | ".join("-" if k == "train-start-seconds" and name == "simulation" else
                       f"{r[k]:.2f}" for k in (*PARTS, "flower"))  # (a Ray actor lives on)
    return (f"| {name}, {nodes} nodes | {r['round-1']:.1f} | {r['round']:.2f} | {parts} | "
            f"{r['load-average'][0]:.1f} -> {r['load-average-end'][0]:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = [measure(n) for n in args.nodes]
    print("| | round 1 | rounds 2-5 (median) | ClientApp start and imports | data load | "
          "training | Flower: polling, messages | load average (1 min) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for res in results:
        for name in ("simulation", "deployment"):
            print(row(name, res["nodes"], res[name]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
