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

    python -m benchmarks.deploy_rounds --against floor                 # 2 and 3 nodes
    python -m benchmarks.deploy_rounds --against floor --nodes 2 --repeats 2 \
        --also local-iterations=1

`--against floor`: the app's deployed round over Flower's floor on the same deployment (one
SuperLink, fleet proxy and set of SuperNodes per node count): the floor app
(benchmarks/floor_app/: imports PyTorch, returns the weights it got) and the app, `--rounds`
rounds each, one after the other, `--repeats` times (floor, app, the app with each `--also`
run config, floor, app, ...; each `--app` folder in turn), so that all see the same load. App
round / floor round: the medians of rounds 2-N, pooled over the repeats; and where the app's
extra time goes: its ClientApps' start and imports over the floor's (both report
`start-seconds`), the data load, the training, the server's evaluation, and the rest (the
ServerApp's own work, the replies' push, Flower's 3 s poll of the replies); each a median of
its own, so the rest is the extra less the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def node_options(nodes: int, folder: Path) -> list[list[str]]:
    """Each SuperNode's deploy/supernode.sh options: its client id, N, a data cache in `folder`."""
    return [["--client-id", str(i), "--num-clients", str(nodes), "--cache-dir",
             str(folder / "cache")] for i in range(nodes)]


def app_run(deployment, folder: Path, name: str, run_config: str = RUN_CONFIG,
            app: Path = ROOT) -> list[dict]:
    """The app (folder `app`) deployed through `deployment` with `run_config`: its results.json
    rows."""
    deployment.flwr("run", str(app), deployment.CONNECTION, "--stream", "--run-config",
                    f"{run_config} out-dir='{folder}' run-name='{name}'")
    return json.loads((folder / name / "results.json").read_text())["rounds"]


def deployed(nodes: int, folder: Path) -> list[dict]:
    from experiments.deployment import LocalDeployment

    with LocalDeployment(folder / "deployment", node_options(nodes, folder)) as deployment:
        return app_run(deployment, folder, "deployed")


# the floor ServerApp's line for each round (benchmarks/floor_app/server_app.py)
FLOOR_ROUND = re.compile(r"floor round (\d+): (\d+) replies, ([0-9.]+) s(?:, start ([0-9.]+) s)?")


def floor_rows(log: str, rounds: int) -> list[dict]:
    """The floor's rounds 1-`rounds` from its ServerApp's log, as results.json names them
    (`seconds`, `train-start-seconds`: the mean over the round's ClientApps, when reported)."""
    rows: dict[int, dict] = {}
    for m in FLOOR_ROUND.finditer(log):
        row = {"round": int(m[1]), "replies": int(m[2]), "seconds": float(m[3])}
        if m[4] is not None:
            row["train-start-seconds"] = float(m[4])
        rows.setdefault(row["round"], row)  # (a line streamed twice counts once)
    if sorted(rows) != list(range(1, rounds + 1)):
        raise RuntimeError(f"the floor app's log has rounds {sorted(rows)}, not 1-{rounds}:\n"
                           f"{log[-3000:]}")
    return [rows[r] for r in sorted(rows)]


def floor_run(deployment, folder: Path, rounds: int) -> list[dict]:
    """The floor app deployed through `deployment` for `rounds` rounds: its rows."""
    from benchmarks.sim_floor import floor_app

    app = floor_app(folder, rounds)
    return floor_rows(deployment.flwr("run", str(app), deployment.CONNECTION, "--stream"), rounds)


def against(app: list[dict], floor: list[dict]) -> dict:
    """App round over floor round, each the median of its rounds 2-N (rows of several runs
    pooled), and the app's extra seconds split: ClientApp start (the app's over the floor's),
    data load, training, server evaluation, and the rest of the extra."""
    app, floor = [r for r in app if r["round"] > 1], [r for r in floor if r["round"] > 1]
    if not app or not floor:
        raise ValueError("no rounds 2-N to compare: run at least 2 rounds")

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    out = {"app-round": med(app, "seconds"), "floor-round": med(floor, "seconds"),
           "app-start": med(app, "train-start-seconds"),
           "floor-start": med(floor, "train-start-seconds"),
           "load": med(app, "train-load-seconds"), "train": med(app, "train-seconds"),
           "server-eval": med(app, "eval-seconds")}
    out["ratio"] = out["app-round"] / out["floor-round"]
    out["extra"] = out["app-round"] - out["floor-round"]
    out["extra-start"] = out["app-start"] - out["floor-start"]
    out["extra-rest"] = out["extra"] - out["extra-start"] - out["load"] - out["train"] - \
        out["server-eval"]
    return out


def runs_of(rows: list[dict]) -> list[list[dict]]:
    """Rows of consecutive runs, split where the round number stops growing."""
    runs: list[list[dict]] = []
    for r in rows:
        if not runs or r["round"] <= runs[-1][-1]["round"]:
            runs.append([])
        runs[-1].append(r)
    return runs


def repeat_ratios(app: list[dict], floor: list[dict]) -> list[float]:
    """App round over floor round in each repeat: the k-th app run against the k-th floor run
    (their spread shows how much the load moved between runs)."""
    return [against(a, f)["ratio"] for a, f in zip(runs_of(app), runs_of(floor), strict=True)]


def measure_floor(nodes: int, rounds: int, repeats: int, also: list[str],
                  apps: tuple[Path, ...] = (ROOT,)) -> dict:
    """On one deployment of `nodes` nodes: `repeats` times the floor app, then each of `apps`
    (this checkout, or copies of it, e.g. before and after a change), each with its run config
    and with each of `also` added; every app's rounds against the floor's."""
    from experiments.deployment import LocalDeployment

    configs = [f"num-server-rounds={rounds} fraction-train=1.0{' ' + a if a else ''}"
               for a in ("", *also)]
    runs = [(app, config) for app in apps for config in configs]
    floor: list[dict] = []
    rows: list[list[dict]] = [[] for _ in runs]
    with tempfile.TemporaryDirectory(prefix="deploy-floor-") as tmp:
        folder = Path(tmp)
        with LocalDeployment(folder / "deployment", node_options(nodes, folder)) as deployment:
            before = list(os.getloadavg())
            for k in range(repeats):
                floor += floor_run(deployment, folder / f"floor-{k}", rounds)
                for i, (app, config) in enumerate(runs):
                    rows[i] += app_run(deployment, folder, f"app-{i}-{k}", config, app)
            end = list(os.getloadavg())
    return {"nodes": nodes, "rounds": rounds, "repeats": repeats, "floor-rows": floor,
            "load-average": before, "load-average-end": end,
            "apps": [{"app": str(app), "run-config": c, "rows": r, **against(r, floor),
                      "repeat-ratios": repeat_ratios(r, floor)} for (app, c), r in zip(runs, rows)]}


COLUMNS = ("nodes", "app, run config", "app round", "floor round", "app / floor", "per repeat",
           "ClientApp start: app / floor", "data load", "training", "server evaluation",
           "rest of the extra", "load average (1 min)")
FLOOR_HEADER = f"| {' | '.join(COLUMNS)} |\n|{' --- |' * len(COLUMNS)}"


def floor_row(res: dict, app: dict) -> str:
    name = "" if Path(app["app"]) == ROOT else f"{app['app']}, "
    return (f"| {res['nodes']} | {name}`{app['run-config']}` | {app['app-round']:.2f} | "
            f"{app['floor-round']:.2f} | {app['ratio']:.2f}x | "
            f"{min(app['repeat-ratios']):.2f}-{max(app['repeat-ratios']):.2f} | "
            f"{app['app-start']:.2f} / "
            f"{app['floor-start']:.2f} | {app['load']:.2f} | {app['train']:.2f} | "
            f"{app['server-eval']:.2f} | {app['extra-rest']:.2f} | "
            f"{res['load-average'][0]:.1f} -> {res['load-average-end'][0]:.1f} |")


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--against", choices=("simulation", "floor"), default="simulation",
                    help="compare the deployed app with its simulation, or with Flower's floor "
                         "app deployed on the same nodes")
    ap.add_argument("--rounds", type=int, default=5, help="--against floor: rounds per run")
    ap.add_argument("--repeats", type=int, default=2,
                    help="--against floor: runs of each app, interleaved")
    ap.add_argument("--also", action="append", default=[], metavar="RUN_CONFIG",
                    help="--against floor: also the app with this run config added "
                         "(repeatable), e.g. local-iterations=1")
    ap.add_argument("--app", type=Path, action="append", default=None, metavar="FOLDER",
                    help="--against floor: the app folder(s) to deploy, each in turn "
                         "(repeatable; default: this checkout), e.g. a copy before a change")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.app = tuple(a.resolve() for a in args.app or [ROOT])
    for app in args.app:
        if not (app / "pyproject.toml").is_file():
            ap.error(f"--app {app}: no pyproject.toml there; name a copy of this app's folder")
    if min(args.nodes) < 1:
        ap.error(f"--nodes {min(args.nodes)}: a deployment needs at least 1 node")
    if args.against == "floor" and args.rounds < 2:
        ap.error(f"--rounds {args.rounds}: rounds 2-N are compared, so at least 2")
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: at least 1")
    if args.against == "simulation" and (args.also or args.rounds != 5 or args.repeats != 2
                                         or args.app != (ROOT,)):
        ap.error("--rounds, --repeats, --also and --app go with --against floor")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.against == "floor":
        results = [measure_floor(n, args.rounds, args.repeats, args.also, args.app)
                   for n in args.nodes]
        print(FLOOR_HEADER)
        for res in results:
            for app in res["apps"]:
                print(floor_row(res, app))
    else:
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
