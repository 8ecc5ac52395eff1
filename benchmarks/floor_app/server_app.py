"""The floor's ServerApp: `rounds` rounds of sending a small CNN's weights to every node."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 5), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(32 * 28 * 28, 10))
    arrays = ArrayRecord(model.state_dict())
    for rnd in range(int(context.run_config["rounds"])):
        messages = [Message(RecordDict({"arrays": arrays, "config": ConfigRecord({"round": rnd})}),
                            dst_node_id=node, message_type="train")
                    for node in grid.get_node_ids()]
        replies = list(grid.send_and_receive(messages))
        print(f"floor round {rnd}: {len(replies)} replies", flush=True)
