"""Test-only ClientApp: the real one, and a line per message saying where it ran.

tests/test_ray_cluster.py copies the app with this module as its ClientApp. Each train or
evaluate call appends {"ray-node", "tag", "host", "pid", "partition", "trained"} to the file
named by FEDACG_TEST_WHERE, where `tag` is FEDACG_TEST_NODE of the `ray start` process that
started this Ray worker (each node of the test cluster has its own), `ray-node` is Ray's node id,
`partition` the node's own partition-id and `trained` the partition it trained on.
"""

from __future__ import annotations

import json
import os
import socket

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from client_app import app as real
from client_app.app import data_partition_of

app = ClientApp()


def note(msg: Message, context: Context) -> None:
    path = os.environ.get("FEDACG_TEST_WHERE")
    if not path:
        return
    import ray

    line = {"ray-node": ray.get_runtime_context().get_node_id(),
            "tag": os.environ.get("FEDACG_TEST_NODE", ""), "host": socket.gethostname(),
            "pid": os.getpid(), "type": msg.metadata.message_type,
            "partition": int(context.node_config["partition-id"]),
            "trained": data_partition_of(msg, context)[0]}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


@app.train()
def train(msg: Message, context: Context) -> Message:
    note(msg, context)
    return real.train(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    note(msg, context)
    return real.evaluate(msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    return real.query(msg, context)
