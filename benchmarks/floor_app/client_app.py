"""The floor's ClientApp: imports PyTorch, as any PyTorch ClientApp does, and sends the weights
back as they came, as torch tensors on the way. A deployed one (a `flwr-clientapp` process,
started for this message) also reports its process's age when the handler begins
(`start-seconds`: Python, flwr, torch and fetching the message), as this project's ClientApp
does (client_app/app.py's process_seconds, repeated here: the floor app imports nothing of the
project)."""

import os
import sys

import torch  # noqa: F401  (the import is the point: its memory and time are part of the floor)
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


def process_seconds() -> float | None:
    """Seconds from this process's start to now (Linux's /proc; None elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


@app.train()
def train(msg: Message, context: Context) -> Message:
    started = process_seconds() if sys.argv[0].endswith("flwr-clientapp") else None
    state = msg.content["arrays"].to_torch_state_dict()
    content = {"arrays": ArrayRecord(state)}
    if started is not None:
        content["metrics"] = MetricRecord({"start-seconds": started})
    return Message(RecordDict(content), reply_to=msg)
