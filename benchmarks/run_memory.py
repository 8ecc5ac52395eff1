"""Peak host memory of a `flwr run`: the SuperLink's whole process tree sampled from /proc
(resident and proportional sizes, by process name), for the benchmarks that run the app or the
simulation's floor (`sim_vs_loop`, `sim_floor`, `rehearse`, `many_clients`).

Run alone, one `flwr run` of an app folder (this one by default) on a simulation SuperLink of its
own, with a fresh partition cache and output folder, and its peak by process:

    python -m benchmarks.run_memory          # the default run config (digits), 2 rounds
    python -m benchmarks.run_memory --app-dir ../other-checkout --run-config "partitioner='lda'"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _label(pid: int) -> str:
    """A process's short name: `ray::ClientAppActor`, `flwr-simulation`, `raylet`, ..."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    if argv[0].startswith("ray::"):
        return argv[0].split()[0].split(".")[0]
    name = os.path.basename(argv[0])
    if name.startswith("python") and len(argv) > 1:
        script = next((a for a in argv[1:] if not a.startswith("-")), argv[1])
        name = os.path.basename(script)
    return " ".join(name.split())[:40]


def _tree_rss_by_process(root: int) -> dict[str, float]:
    """MB per process name of `root`'s tree (Linux /proc), e.g. {'raylet': 30.1, ...}."""
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
    out: dict[str, float] = {}
    for p in tree:
        if rss.get(p):
            label = f"{_label(p)} {p}"
            out[label] = rss[p] / 2**20
    return out


def _pss_mb(pid: int) -> float:
    """A process's proportional set size in MB (a page shared by k processes counts 1/k)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _by_name(parts: dict[str, float]) -> dict[str, float]:
    """{'raylet 123': mb, ...} summed over the processes of one name: {'raylet': mb, ...}."""
    out: dict[str, float] = {}
    for k, mb in parts.items():
        name = k.rsplit(" ", 1)[0]
        out[name] = out.get(name, 0.0) + mb
    return out


def _raise_own_peaks(own: dict[str, float], parts: dict[str, float]) -> None:
    """`own[name]`: the largest size any one process named `name` has had so far, raised to this
    sample's `parts` ({'raylet 123': mb, ...}). Per process, not summed: a child forked for a
    moment carries its parent's name and pages, and would count them twice."""
    for key, mb in parts.items():
        name = key.rsplit(" ", 1)[0]
        own[name] = max(mb, own.get(name, 0.0))


def flwr_run_peak(link, run_config: str, federation: str, every: float = 0.5,
                  app_dir: Path = ROOT, timeout: float = 7200.0) -> tuple:
    """`flwr run <app_dir>` on `link` (a running LocalSuperLink): (the finished process, wall
    seconds, peak host MB of the SuperLink's whole process tree: resident sizes summed, sampled
    every `every` seconds). Also kept as attributes of this function, set also when the run
    times out (subprocess.TimeoutExpired is raised on): `rss` (that peak), `breakdown` (MB per
    process name at that peak), `pss` and `pss_parts` (the same with proportional sizes, whose
    sum counts a shared library once), `rss_each` and `pss_each` (each process name's own peak,
    whenever it came, of its largest process)."""
    peak = {"rss": (0.0, {}), "pss": (0.0, {})}
    each: dict[str, dict[str, float]] = {"rss": {}, "pss": {}}
    stop = threading.Event()

    def sample():
        while not stop.wait(every):
            rss = _tree_rss_by_process(link.proc.pid)
            pss = {k: _pss_mb(int(k.rsplit(" ", 1)[1])) for k in rss}
            for kind, parts in (("rss", rss), ("pss", pss)):
                if sum(parts.values()) > peak[kind][0]:
                    peak[kind] = (sum(parts.values()), parts)
                _raise_own_peaks(each[kind], parts)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.perf_counter()
    command = ["flwr", "run", ".", link.connection, "--stream", "--federation-config", federation]
    if run_config:
        command += ["--run-config", run_config]
    try:
        proc = subprocess.run(command, cwd=app_dir, env=link.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
    finally:
        wall = time.perf_counter() - t
        stop.set()
        sampler.join()
        flwr_run_peak.rss, flwr_run_peak.breakdown = peak["rss"][0], _by_name(peak["rss"][1])
        flwr_run_peak.pss, flwr_run_peak.pss_parts = peak["pss"][0], _by_name(peak["pss"][1])
        flwr_run_peak.rss_each, flwr_run_peak.pss_each = each["rss"], each["pss"]
    return proc, wall, peak["rss"][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app-dir", type=Path, default=ROOT, help="the app to run")
    parser.add_argument("--run-config", default="num-server-rounds=2",
                        help="run-config overrides (out-dir and run-name are set here)")
    parser.add_argument("--federation-config", default="num-supernodes=10")
    parser.add_argument("--every", type=float, default=0.5, help="sampling period, seconds")
    args = parser.parse_args(argv)
    from experiments.superlink import LocalSuperLink

    with tempfile.TemporaryDirectory(prefix="run-memory-") as tmp:
        run_config = f"{args.run_config} out-dir={tmp!r} run-name='memory'"
        link = LocalSuperLink()  # its environment reaches the simulation and the actors
        link.env["FEDACG_CACHE_DIR"] = str(Path(tmp) / "partition-cache")  # every client builds
        with link:
            proc, wall, _ = flwr_run_peak(link, run_config, args.federation_config,
                                          every=args.every, app_dir=args.app_dir.resolve())
        results = Path(tmp) / "memory" / "results.json"
        status = json.loads(results.read_text())["status"] if results.is_file() else "no results"
    if proc.returncode != 0 or status != "complete":
        print(f"the run did not complete ({status}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}",
              file=sys.stderr)
        return 1
    print(f"flwr run {args.app_dir.resolve()}: {wall:.0f} s; peak memory by process (MB): "
          "its own peak (the largest process of the name), and the name's share of the whole "
          "tree's peak (its processes summed); resident and proportional (a page shared by k "
          "processes counted 1/k)")
    rss, pss = flwr_run_peak.breakdown, flwr_run_peak.pss_parts
    rss_each, pss_each = flwr_run_peak.rss_each, flwr_run_peak.pss_each
    print("| process | own peak resident | own peak proportional | at the tree's peak resident "
          "| at the tree's peak proportional |\n" + "| --- " * 5 + "|")
    for name in sorted(set(rss_each) | set(pss_each), key=lambda n: -rss_each.get(n, 0.0)):
        print(f"| {name} | {rss_each.get(name, 0.0):.0f} | {pss_each.get(name, 0.0):.0f} | "
              f"{rss.get(name, 0.0):.0f} | {pss.get(name, 0.0):.0f} |")
    print(f"| all | | | {flwr_run_peak.rss:.0f} | {flwr_run_peak.pss:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
