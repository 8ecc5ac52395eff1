"""What Flower's simulation costs in host memory before an app does anything of its own.

    python -m benchmarks.sim_floor                # 5 simulated nodes, 3 rounds
    python -m benchmarks.sim_floor --json floor.json

The floor app (`benchmarks/floor_app/`) imports PyTorch in its ServerApp and ClientApp and passes
a small CNN's weights to every node and back, nothing else. It runs through `flwr run` on a
simulation SuperLink of its own, exactly as `benchmarks.sim_vs_loop` runs this project's app, and
its peak host memory is sampled the same way: the resident sizes (RSS) of the SuperLink's whole
process tree summed, and the proportional sizes (PSS: a page shared by k processes counts 1/k in
each, so libraries mapped by several processes count once in all). Both are printed by process.

Any PyTorch app in Flower 1.41's Ray simulation pays this floor: the SuperLink, the SuperExec,
the simulation process (ServerApp) and a Ray actor (ClientApp), each a Python process with
Flower, and the two app processes with PyTorch; and Ray's own processes (GCS, raylet, the API
server that Ray starts even with the dashboard off, the dashboard and runtime-env agents, the
autoscaler's and the log monitors; no `ray.init` argument turns them off).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the one reader of a ClientApp's process age, shared with the app's ClientApp (standard library
# only): copied into the floor app's package, which imports nothing of the project
PROCESS_AGE = HERE.parent / "client_app" / "process_age.py"

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "floor-app"
version = "0.1.0"
description = "The floor of Flower's simulation (benchmarks/sim_floor.py)"
license = "Apache-2.0"
dependencies = ["flwr[simulation]"]

[tool.hatch.build.targets.wheel]
packages = ["floor_app"]

[tool.flwr.app]
publisher = "fedacg-gc"

[tool.flwr.app.components]
serverapp = "floor_app.server_app:app"
clientapp = "floor_app.client_app:app"

[tool.flwr.app.config]
rounds = {rounds}
"""


def floor_app(app_dir: Path, rounds: int) -> Path:
    """The floor app as a Flower app folder `app_dir` (made; `rounds` rounds), for `flwr run`:
    benchmarks/floor_app/ and client_app/process_age.py in its package `floor_app`."""
    shutil.copytree(HERE / "floor_app", app_dir / "floor_app",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(PROCESS_AGE, app_dir / "floor_app" / PROCESS_AGE.name)
    (app_dir / "pyproject.toml").write_text(PYPROJECT.replace("{rounds}", str(rounds)))
    return app_dir


def floor_peak(clients: int = 5, rounds: int = 3) -> dict:
    """Peak host memory of the floor app's run, RSS and PSS, total and by process (MB)."""
    from benchmarks.run_memory import flwr_run_peak
    from experiments.superlink import LocalSuperLink

    with tempfile.TemporaryDirectory(prefix="sim-floor-") as tmp:
        app_dir = floor_app(Path(tmp) / "app", rounds)
        federation = f"num-supernodes={clients} client-resources-num-cpus={os.cpu_count() or 1}"
        with LocalSuperLink() as link:
            proc, wall, peak = flwr_run_peak(link, "", federation, every=0.5, app_dir=app_dir)
    if proc.returncode != 0 or f"floor round {rounds}:" not in proc.stdout + proc.stderr:
        raise RuntimeError(f"the floor app failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {"clients": clients, "rounds": rounds, "wall-seconds": wall, "peak-host-mb": peak,
            "peak-breakdown-mb": dict(flwr_run_peak.breakdown),
            "peak-pss-mb": flwr_run_peak.pss,
            "peak-pss-breakdown-mb": dict(flwr_run_peak.pss_parts)}


def by_process(parts: dict) -> str:
    return ", ".join(f"{k} {mb:.0f}" for k, mb in sorted(parts.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    floor = floor_peak(args.clients, args.rounds)
    print(f"the simulation's floor ({args.clients} nodes, {args.rounds} rounds): "
          f"{floor['peak-host-mb']:.0f} MB resident, {floor['peak-pss-mb']:.0f} MB proportional")
    print("  RSS by process: " + by_process(floor["peak-breakdown-mb"]) + " MB")
    print("  PSS by process: " + by_process(floor["peak-pss-breakdown-mb"]) + " MB")
    if args.json:
        args.json.write_text(json.dumps(floor, indent=2))


if __name__ == "__main__":
    main()
