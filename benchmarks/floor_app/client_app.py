"""The floor's ClientApp: imports PyTorch, as any PyTorch ClientApp does, and sends the weights
back as they came, as torch tensors on the way. A deployed one (a `flwr-clientapp` process,
started for this message) also reports its process's age when the handler begins
(`start-seconds`: Python, flwr, torch and fetching the message), read as this project's ClientApp
reads it: by the same file, client_app/process_age.py (standard library only), which
`benchmarks.sim_floor.floor_app` copies into the floor app's package beside this one, so the
floor app still imports nothing of the project."""

import torch  # noqa: F401  (the import is the point: its memory and time are part of the floor)
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .process_age import deployed_process, process_seconds

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    started = process_seconds() if deployed_process() else None
    state = msg.content["arrays"].to_torch_state_dict()
    content = {"arrays": ArrayRecord(state)}
    if started is not None:
        content["metrics"] = MetricRecord({"start-seconds": started})
    return Message(RecordDict(content), reply_to=msg)
