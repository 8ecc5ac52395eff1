"""An in-process Flower Grid for tests: messages go straight to Python handlers, no runtime."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid


class FakeGrid(Grid):
    """`handler(node_index, message) -> RecordDict | Message | None` answers each message.

    A handler that raises gives an error reply; one that returns None gives no reply at all
    (a node that timed out).
    """

    def __init__(self, num_nodes: int, handler: Callable[[int, Message], object]):
        # not in partition order
        self.node_ids = [1000 + 7919 * i % 10007 for i in range(num_nodes)]
        self.handler = handler
        self.sent: list[list[int]] = []  # destination node ids per train/evaluate call
        self.queries: list[list[int]] = []  # ... per query call

    def set_run(self, run):  # pragma: no cover - not used in tests
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
    """Answer with the real ClientApp functions, as a simulation would (node i = partition i)."""
    from client_app.app import evaluate, query, train

    functions = {"train": train, "evaluate": evaluate, "query": query}

    def handler(index: int, msg: Message):
        ctx = Context(run_id=1, node_id=index, state=RecordDict(), run_config=dict(run_config),
                      node_config={"partition-id": index, "num-partitions": num_nodes})
        return functions[msg.metadata.message_type](msg, ctx)

    return handler
