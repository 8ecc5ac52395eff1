"""The real ServerApp and ClientApp in one process: messages go through an in-memory Grid (a
third runtime, next to Flower's simulation and deployment; it calls both apps, so it lives in
neither).

    run_in_process(run_config, num_nodes)   # one run, the same run folder as `flwr run` writes

No SuperLink, no Ray, no serialization of messages: the ServerApp's `main` is called with an
`InProcessGrid` whose nodes answer each message by calling the ClientApp's `train` / `evaluate`
/ `query` functions directly. Node i holds partition i (`node_config` partition-id = i,
num-partitions = num_nodes, as the simulation injects them) and keeps ONE Flower `Context` for
the whole run, so per-client state (`Context.state`) lives across rounds as in a simulation.
Used by the fast sweep backend (`experiments.sweep`, `backend: in-process`) and by the tests.
"""

from __future__ import annotations

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

import uuid
from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from client_app.app import evaluate, query, train
from server_app.app import main


class InProcessGrid(Grid):
    """`handler(node_index, message) -> RecordDict | Message | None` answers each message.

    A handler that raises gives an error reply; one that returns None gives no reply at all
    (a node that timed out). `fixed_size = True` says the node count never grows (as in a
    simulation: too few nodes is an error at once, no waiting).
    """

    def __init__(self, num_nodes: int, handler: Callable[[int, Message], object],
                 fixed_size: bool = False):
        # not in partition order
        self.node_ids = [1000 + 7919 * i % 10007 for i in range(num_nodes)]
        self.handler = handler
        self.fixed_size = fixed_size
        self.sent: list[list[int]] = []  # destination node ids per train/evaluate call
        self.queries: list[list[int]] = []  # ... per query call

    def set_run(self, run):  # pragma: no cover - not used
        self._run = run

    @property
    def run(self):  # pragma: no cover
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def push_messages(self, messages):  # pragma: no cover
        raise NotImplementedError

    def pull_messages(self, message_ids):  # pragma: no cover
        raise NotImplementedError

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        messages = list(messages)
        queried = messages and messages[0].metadata.message_type == "query"
        (self.queries if queried else self.sent).append([m.metadata.dst_node_id for m in messages])
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex  # as Flower's grids do
            index = self.node_ids.index(msg.metadata.dst_node_id)
            try:
                out = self.handler(index, msg)
            except Exception as err:  # a client that raises -> an error reply
                out = Message(Error(code=0, reason=repr(err)), reply_to=msg)
            if out is None:  # no reply within the timeout
                continue
            replies.append(out if isinstance(out, Message) else Message(out, reply_to=msg))
        return replies


def client_app_handler(run_config: dict, num_nodes: int):
    """Answer with the real ClientApp functions, as a simulation would: node i = partition i,
    each node keeping one Context (its `state`) across messages (`handler.contexts[i]`)."""
    functions = {"train": train, "evaluate": evaluate, "query": query}
    contexts = [Context(run_id=1, node_id=i, state=RecordDict(), run_config=dict(run_config),
                        node_config={"partition-id": i, "num-partitions": num_nodes})
                for i in range(num_nodes)]

    def handler(index: int, msg: Message):
        return functions[msg.metadata.message_type](msg, contexts[index])

    handler.contexts = contexts
    return handler


def run_in_process(run_config: dict, num_nodes: int, run_id: int = 0) -> InProcessGrid:
    """Run the real ServerApp's main with `num_nodes` real ClientApp nodes in this process;
    return the grid. Raises what the ServerApp raises (after it marked the run folder failed)."""
    grid = InProcessGrid(num_nodes, client_app_handler(run_config, num_nodes), fixed_size=True)
    # Messages are made outside a Flower runtime: they need a task identity (which a test may
    # have set already: it is kept, and whatever was there is put back after the run).
    saved = {k: getattr(TaskIdentity, f"_{k}") for k in ("run_id", "node_id", "task_id")}
    for key, value in {"run_id": run_id, "node_id": 0, "task_id": 1}.items():
        if saved[key] is None:
            setattr(TaskIdentity, key, value)
    try:
        main(grid, Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(),
                           run_config=dict(run_config)))
    finally:
        for key, value in saved.items():
            setattr(TaskIdentity, f"_{key}", value)
    return grid
