"""The floor's ServerApp: `rounds` rounds of sending a small CNN's weights to every node, each
round timed (the send and the replies; printed as `floor round <r>: <n> replies, <s> s`, with
the mean of the ClientApps' `start-seconds` when they report it: benchmarks/deploy_rounds.py)."""

import time

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 5), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(32 * 28 * 28, 10))
    arrays = ArrayRecord(model.state_dict())
    for rnd in range(1, int(context.run_config["rounds"]) + 1):
        t = time.monotonic()
        messages = [Message(RecordDict({"arrays": arrays, "config": ConfigRecord({"round": rnd})}),
                            dst_node_id=node, message_type="train")
                    for node in grid.get_node_ids()]
        replies = list(grid.send_and_receive(messages))
        seconds = time.monotonic() - t
        starts = [float(r.content["metrics"]["start-seconds"]) for r in replies
                  if r.has_content() and "start-seconds" in r.content.get("metrics", {})]
        start = f", start {sum(starts) / len(starts):.4f} s" if starts else ""
        print(f"floor round {rnd}: {len(replies)} replies, {seconds:.4f} s{start}", flush=True)
