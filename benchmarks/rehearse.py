"""Rehearse the papers' set-ups at their own size, on stand-in data, and project their cost.

    python -m benchmarks.rehearse --quick                      # every set-up, 2 short rounds
    python -m benchmarks.rehearse --setups fedacg-t1a-cifar10 --methods fedavg,scaffold
    python -m benchmarks.rehearse --stateful --quick           # SCAFFOLD, FedDyn, FedDC,
                                                               # FedVARP, FedCM, MOON
    python -m benchmarks.rehearse --quick --json rehearse.json

Each run is the real thing: `flwr run` of this app on a simulation SuperLink of its own (free
ports, its own FLWR_HOME, stopped by PID also on failure), with the set-up's federation size
(`num-supernodes`), model, batch, split and method, for `--rounds` (2) rounds, reading a
stand-in copy of the set-up's dataset (`benchmarks/standins.py`: the hub copy's row counts,
image sizes, natural ids, made once and cached). `--quick` cuts only the local steps
(`local-iterations`, default 2) and the server's evaluation (`test-max-examples`, a fixed
subset, default 512): never the population, the data or the model. Without it the rounds are
complete.

Per run: status; seconds of round 2 (round 1 starts Ray and its actors), its client training
(mean client seconds x clients), the server's evaluation and the rest (messages, aggregation,
loading partitions); seconds per local step; peak host memory of every process of the run (the
SuperLink's process tree: the ServerApp, Ray and its actors, sampled every 2 s; resident sizes
summed, so shared pages count once per process); disk written (run folder with any per-client
state files, partition cache); MB per round (training messages, down + up); and the projected
full run on this machine: num-server-rounds x (clients x full local steps x seconds per step +
full-test-set evaluation x (1 / eval-every) + the rest).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATEFUL = ("scaffold", "feddyn", "feddc", "fedvarp", "fedcm", "moon")


def du_mb(path: Path) -> float:
    from benchmarks.standins import du_mb as du

    return du(path) if path.exists() else 0.0


def machine() -> str:
    import torch

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} CPU cores ({platform.machine()}), {mem:.0f} GiB, "
            f"{'GPU' if torch.cuda.is_available() else 'no GPU'}, torch {torch.__version__}, "
            f"Python {platform.python_version()}")


def largest_setup(method: str) -> str:
    """The set-up with the most clients whose reported rows hold `method` (or a variant of it,
    `<method>-fedacg` / `<method>-gcfed`)."""
    from run_config.setups import load_setup, setup_names

    best = None
    for name in setup_names():
        s = load_setup(name)
        rows = [m for m in s["reported"]["rows"] if m == method or m.startswith(method + "-")]
        if rows and (best is None or s["num-supernodes"] > best[0]):
            best = (s["num-supernodes"], name, rows[0])
    if best is None:
        raise SystemExit(f"no set-up reports {method}")
    return best[1]


def row_method(setup: dict, method: str) -> str:
    """The set-up's row name for `method` (e.g. feddyn -> feddyn-gcfed in GC-Fed's tables)."""
    rows = setup["reported"]["rows"]
    if method in rows:
        return method
    return next((m for m in rows if m.startswith(method + "-")), method)


def mean_train_examples(setup: dict, data: Path) -> float:
    """Training examples of the average client, from the stand-in's row and id counts."""
    info = json.loads((data / "standin.json").read_text())
    cfg = setup["run-config"]
    n_clients = setup["num-supernodes"]
    train = info["rows"]["train"]
    if cfg.get("partitioner") == "natural":
        ids = info["natural-ids"].get("ids") or info["natural-ids"]["train"]["ids"]
        keep = 1.0 if len(info["rows"]) > 1 else 1.0 - cfg.get("test-fraction", 0.2)
        return train / ids * keep
    return train / n_clients


def run_config_of(setup: dict, method: str, data: Path, out: Path, name: str, rounds: int,
                  quick: bool, steps: int, test_subset: int) -> dict:
    cfg = {"setup": setup["name"], "dataset-path": str(data), "num-server-rounds": rounds,
           "out-dir": str(out), "run-name": name, "plot-every": 0,
           # one checkpoint, at the last round: its cost and size are part of the rehearsal
           "checkpoint-every": rounds}
    if method != setup["method"]:
        cfg["method"] = method
    if quick:
        cfg.update({"local-iterations": steps, "test-max-examples": test_subset})
    return cfg


def flwr_run(link, run_config: dict, federation: str, timeout: float, every: float = 2.0):
    """`flwr run .` on `link`: (returncode or 'timeout', output tail, wall seconds, peak MB of
    the SuperLink's process tree: `run_memory.flwr_run_peak`'s)."""
    from benchmarks.run_memory import flwr_run_peak

    text = " ".join(f"{k}={v!r}" if isinstance(v, str) else
                    f"{k}={str(v).lower()}" if isinstance(v, bool) else f"{k}={v}"
                    for k, v in run_config.items())
    t = time.perf_counter()
    try:
        proc, wall, peak = flwr_run_peak(link, text, federation, every=every, timeout=timeout)
        return proc.returncode, (proc.stdout + proc.stderr)[-4000:], wall, peak
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"") + (err.stderr or b"")
        tail = (out.decode(errors="replace") if isinstance(out, bytes) else out)[-4000:]
        return "timeout", tail, time.perf_counter() - t, flwr_run_peak.rss


def measure(setup_name: str, method: str | None, args, log=print) -> dict:
    """One rehearsal run: its figures (status 'ok', 'failed' or 'timeout')."""
    from benchmarks import standins
    from experiments.superlink import LocalSuperLink
    from run_config.setups import load_setup

    setup = load_setup(setup_name)
    method = row_method(setup, method) if method else setup["method"]
    cfg = setup["run-config"]
    n = setup["num-supernodes"]
    dataset = cfg["dataset"]
    rec = {"setup": setup_name, "method": method, "dataset": dataset, "model": cfg["model"],
           "clients": n, "quick": args.quick, "status": "failed", "error": None}
    try:
        data = standins.ensure(dataset, args.scale, args.data_dir, log=log)
    except Exception as err:  # noqa: BLE001 - reported in the table
        rec["error"] = f"stand-in: {err}"
        return rec
    work = Path(tempfile.mkdtemp(prefix="rehearse-", dir=args.work_dir))
    out, cache = work / "runs", work / "partition-cache"
    name = f"{setup_name}-{method}"
    run_config = run_config_of(setup, method, data, out, name, args.rounds, args.quick,
                               args.steps, args.test_subset)
    if method in ("scaffold", "fedvarp", "feddc", "moon", "fedcm") or \
            method.startswith("feddyn"):
        run_config.setdefault("allow-untested-combinations", True)
    federation = f"num-supernodes={n} client-resources-num-cpus={os.cpu_count() or 1}"
    link = LocalSuperLink()
    link.env["FEDACG_CACHE_DIR"] = str(cache)
    # datasets' arrow cache of a parquet/csv copy, kept beside the copy (made once per dataset)
    link.env["HF_DATASETS_CACHE"] = str(Path(data).parent / "hf-cache")
    log(f"== {setup_name} / {method}: {n} clients, {cfg['model']}, {dataset}"
        + (" (quick)" if args.quick else ""))
    try:
        with link:
            code, tail, wall, peak = flwr_run(link, run_config, federation, args.timeout)
    except Exception as err:  # noqa: BLE001 - a SuperLink that did not start
        code, tail, wall, peak = "error", str(err), 0.0, 0.0
    rec.update({"wall-seconds": round(wall, 1), "peak-host-mb": round(peak)})
    results_file = out / name / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    rows = [r for r in results.get("rounds", []) if r.get("round", 0) > 0]
    if code != 0 or results.get("status") not in ("done", "complete", "finished") and \
            not results.get("summary", {}).get("complete"):
        rec["status"] = "timeout" if code == "timeout" else "failed"
        rec["error"] = (results.get("error") or tail)[-1500:]
    else:
        rec["status"] = "ok"
    rec["disk-mb"] = round(du_mb(out) + du_mb(cache), 1)
    rec["disk-state-mb"] = round(du_mb(out / name) - sum(
        du_mb(p) for p in (out / name).glob("*") if p.suffix in (".json", ".csv", ".png",
                                                                   ".pt", ".txt", ".log")), 1) \
        if (out / name).exists() else 0.0
    rec["data-mb"] = round(du_mb(Path(data)), 1)
    if rows:
        rec.update(figures(rows, setup, method, data, args))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        rec["work-dir"] = str(work)
    log(f"   {rec['status']}: " + ", ".join(
        f"{k} {rec[k]}" for k in ("wall-seconds", "round-seconds", "train-seconds",
                                  "eval-seconds", "step-seconds", "peak-host-mb", "disk-mb",
                                  "mb-per-round", "projected-hours") if k in rec))
    return rec


def figures(rows: list[dict], setup: dict, method: str, data: Path, args) -> dict:
    """Round figures from results.json's rows and the projected full run."""
    cfg = {**setup["run-config"], **setup["row-config"].get(method, {})}
    last = rows[-1]
    clients = last.get("clients-replied", 0) or 1
    train = last.get("train-seconds", 0.0) * clients
    steps = last.get("train-local-steps", 0) or 1
    evals = last.get("eval-seconds", 0.0)
    other = max(0.0, last["seconds"] - train - evals)
    step_s = last.get("train-seconds", 0.0) / steps
    info = json.loads((data / "standin.json").read_text())
    test_full = next(v for k, v in info["rows"].items() if k in ("test", "valid")) \
        if len(info["rows"]) > 1 else info["rows"]["train"] * cfg.get("test-fraction", 0.2)
    test_used = min(args.test_subset, test_full) if args.quick else test_full
    n_mean = mean_train_examples(setup, data)
    full_steps = cfg.get("local-iterations", 0) or \
        cfg.get("local-epochs", 1) * math.ceil(n_mean / cfg.get("batch-size", 16))
    eval_every = cfg.get("eval-every", 1)
    full_round = clients * full_steps * step_s + evals * test_full / test_used / eval_every \
        + other
    return {"rounds-run": len(rows), "round-seconds": round(last["seconds"], 1),
            "first-round-seconds": round(rows[0]["seconds"], 1),
            "train-seconds": round(train, 1), "eval-seconds": round(evals, 1),
            "server-seconds": round(other, 1), "step-seconds": round(step_s, 4),
            "local-steps": steps, "full-local-steps": int(full_steps),
            "clients-per-round": clients, "eval-every": eval_every,
            "mb-per-round": round((last.get("bytes-down", 0) + last.get("bytes-up", 0)) / 1e6,
                                  2),
            "projected-round-seconds": round(full_round, 1),
            "projected-hours": round(cfg["num-server-rounds"] * full_round / 3600, 1)}


def plan(args) -> list[tuple[str, str | None]]:
    from run_config.setups import setup_names

    pairs: list[tuple[str, str | None]] = []
    if args.stateful:
        pairs += [(args.stateful_setup or largest_setup(m), m) for m in STATEFUL]
    if args.setups or not args.stateful:
        names = setup_names() if args.setups in (None, "all") else args.setups.split(",")
        methods = args.methods.split(",") if args.methods else [None]
        pairs += [(s, m) for s in names for m in methods]
    return pairs


def why(run: dict) -> str:
    """One line of a failed run's error: the first that says what failed."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", run.get("error") or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln for ln in lines if "failed" in ln.lower() or "error" in ln.lower()]
    return ((said or lines or ["no output"])[0])[:160].replace("|", "/")


def table(runs: list[dict]) -> str:
    head = ("| set-up | method | clients | status | s/round (train, eval, rest) | s/step | "
            "peak host MB | disk MB | MB/round | projected h |")
    lines = [head, "| " + " | ".join(["---"] * 10) + " |"]
    for r in runs:
        if "round-seconds" in r:
            sr = (f"{r['round-seconds']} ({r['train-seconds']}, {r['eval-seconds']}, "
                  f"{r['server-seconds']})")
        else:
            sr = "-"
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {why(r)}"
        lines.append(f"| `{r['setup']}` | {r['method']} | {r['clients']} | {status} | {sr} | "
                     f"{r.get('step-seconds', '-')} | {r.get('peak-host-mb', '-')} | "
                     f"{r.get('disk-mb', '-')} | {r.get('mb-per-round', '-')} | "
                     f"{r.get('projected-hours', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setups", default=None, help="comma-separated set-up names, or 'all' "
                   "(default: all, unless --stateful alone)")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: each "
                   "set-up's own); a name like feddyn takes the set-up's row (feddyn-gcfed)")
    p.add_argument("--stateful", action="store_true", help="also each stateful baseline "
                   f"({', '.join(STATEFUL)}) at the largest set-up it appears with")
    p.add_argument("--stateful-setup", default=None,
                   help="run the stateful baselines on this set-up instead")
    p.add_argument("--quick", action="store_true",
                   help="local-iterations --steps and a fixed test subset of --test-subset")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--test-subset", type=int, default=512)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--scale", type=float, default=1.0,
                   help="stand-in size as a fraction of the real one (tests only; 1 = real)")
    p.add_argument("--data-dir", type=Path, default=None, help="stand-in copies (default: "
                   "$FEDACG_STANDIN_DIR or $XDG_CACHE_HOME/fedacg-gc/standins)")
    p.add_argument("--work-dir", default=None, help="where run folders go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep each run's folder")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    if shutil.which("flwr") is None:
        raise SystemExit("flwr not found: install the app (pip install -e .)")
    runs: list[dict] = []
    started = time.perf_counter()
    doc = {"machine": machine(), "quick": args.quick, "rounds": args.rounds, "runs": runs}
    for setup_name, method in plan(args):
        runs.append(measure(setup_name, method, args))
        doc["seconds"] = round(time.perf_counter() - started, 1)
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1))
    print(f"\n{doc['machine']}; {len(runs)} runs in {doc.get('seconds', 0)} s\n")
    print(table(runs))
    return 0 if all(r["status"] == "ok" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())


RESULTS = ROOT / "docs" / "rehearsal.json"  # the figures docs/setups.md shows


def _num(value) -> str:
    return "-" if value is None else f"{value:,}"


def _hours(r: dict) -> str:
    return "-" if r.get("projected-hours") is None else f"{r['projected-hours']:,}"


def markdown_section(doc: dict | None = None) -> str:
    """docs/setups.md's rehearsal section: every set-up (and the stateful baselines) with the
    figures of `doc` (default: docs/rehearsal.json), 'not run' where it has none."""
    from run_config.setups import load_setup, setup_names

    if doc is None:
        doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    runs = {(r["setup"], r["method"]): r for r in doc.get("runs", [])}
    head = ["| set-up | method | clients | quick pass | s/round (train, eval, rest) | s/step | "
            "peak host MB | disk MB | MB/round | projected h, this CPU | GPU |",
            "| " + " | ".join(["---"] * 11) + " |"]
    lines = []
    pairs = [(n, load_setup(n)["method"]) for n in setup_names()]
    pairs += [k for k in runs if k not in pairs]
    for name, method in pairs:
        r = runs.get((name, method))
        clients = load_setup(name)["num-supernodes"]
        if r is None:
            lines.append(f"| `{name}` | {method} | {clients} | not run | - | - | - | - | - | - "
                         "| - |")
            continue
        status = "ok" if r["status"] == "ok" else f"{r['status']} ({why(r)})"
        sr = (f"{r['round-seconds']} ({r['train-seconds']}, {r['eval-seconds']}, "
              f"{r['server-seconds']})") if "round-seconds" in r else "-"
        lines.append(f"| `{name}` | {method} | {clients} | {status} | {sr} | "
                     f"{r.get('step-seconds', '-')} | {_num(r.get('peak-host-mb'))} | "
                     f"{r.get('disk-mb', '-')} | {r.get('mb-per-round', '-')} | {_hours(r)} | - |")
    return "\n".join(head + lines)
