"""Peak host memory of a `flwr run`: the SuperLink's whole process tree sampled from /proc
(resident and proportional sizes, by process name), for the benchmarks that run the app or the
simulation's floor (`sim_vs_loop`, `sim_floor`, `rehearse`, `many_clients`)."""

from __future__ import annotations

import os
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


def flwr_run_peak(link, run_config: str, federation: str, every: float = 0.5,
                  app_dir: Path = ROOT, timeout: float = 7200.0) -> tuple:
    """`flwr run <app_dir>` on `link` (a running LocalSuperLink): (the finished process, wall
    seconds, peak host MB of the SuperLink's whole process tree: resident sizes summed, sampled
    every `every` seconds). Also kept as attributes of this function, set also when the run
    times out (subprocess.TimeoutExpired is raised on): `rss` (that peak), `breakdown` (MB per
    process name at that peak), `pss` and `pss_parts` (the same with proportional sizes, whose
    sum counts a shared library once)."""
    peak = {"rss": (0.0, {}), "pss": (0.0, {})}
    stop = threading.Event()

    def sample():
        while not stop.wait(every):
            rss = _tree_rss_by_process(link.proc.pid)
            pss = {k: _pss_mb(int(k.rsplit(" ", 1)[1])) for k in rss}
            for kind, parts in (("rss", rss), ("pss", pss)):
                if sum(parts.values()) > peak[kind][0]:
                    peak[kind] = (sum(parts.values()), parts)

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
    return proc, wall, peak["rss"][0]
