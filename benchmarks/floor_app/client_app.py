"""The floor's ClientApp: imports PyTorch, as any PyTorch ClientApp does, and sends the weights
back as they came, as torch tensors on the way."""

import torch  # noqa: F401  (the import is the point: its memory is part of the floor)
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    state = msg.content["arrays"].to_torch_state_dict()
    return Message(RecordDict({"arrays": ArrayRecord(state)}), reply_to=msg)
