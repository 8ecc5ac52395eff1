"""A deployed ClientApp's process age: the one reader of it, for the app's ClientApp and the
floor app's (benchmarks/floor_app/, which imports nothing of the project: its FAB gets a copy
of this file, `benchmarks.sim_floor.floor_app`). So it imports the standard library only, and
nothing of the project (tests/test_deploy_rounds.py)."""

import os
import sys


def deployed_process() -> bool:
    """True in a deployed ClientApp: a `flwr-clientapp` process, started for one message."""
    return sys.argv[0].endswith("flwr-clientapp")


def process_seconds() -> float | None:
    """Seconds from this process's start to now (Linux's /proc; None elsewhere): in a deployed
    ClientApp, Python's start, the imports and fetching the message."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None
