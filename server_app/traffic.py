"""Count what the strategy actually sends and receives: a Grid that wraps the real one.

Every message that goes through `send_and_receive` (or `push_messages` / `pull_messages`) is
counted by message type: messages sent, replies received, error replies, and the bytes of the
ArrayRecords (`ArrayRecord.count_bytes()`: the serialized arrays and their keys) down and up.
A broadcast to n nodes counts n times: each node gets its own copy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


def array_bytes(content: RecordDict) -> int:
    return sum(rec.count_bytes() for rec in content.array_records.values())


class MeteredGrid(Grid):
    """Delegates everything to `grid`; `take(message_type)` returns and resets the counters."""

    fixed_size = False  # True: the node count never grows (simulation); see wait_for_nodes

    def __init__(self, grid: Grid):
        self.grid = grid
        self.counts: Counter = Counter()

    # --- counting ---------------------------------------------------------------------
    def _sent(self, messages: list[Message]) -> None:
        for msg in messages:
            kind = msg.metadata.message_type
            self.counts[kind, "sent"] += 1
            self.counts[kind, "bytes-down"] += array_bytes(msg.content)

    def _received(self, replies: list[Message]) -> None:
        for msg in replies:
            kind = msg.metadata.message_type
            if msg.has_error():
                self.counts[kind, "errors"] += 1
            else:
                self.counts[kind, "replies"] += 1
                self.counts[kind, "bytes-up"] += array_bytes(msg.content)

    def take(self, message_type: str) -> dict[str, int]:
        """{'sent', 'replies', 'errors', 'bytes-down', 'bytes-up'} of `message_type` since the
        last call (e.g. MessageType.TRAIN = 'train')."""
        out = {k: self.counts.pop((message_type, k), 0)
               for k in ("sent", "replies", "errors", "bytes-down", "bytes-up")}
        return out

    # --- Grid ---------------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        messages = list(messages)
        self._sent(messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        self._received(replies)
        return replies

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        self._sent(messages)
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self.grid.pull_messages(message_ids))
        self._received(replies)
        return replies

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self):
        return self.grid.get_nodes()

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def set_run(self, run) -> None:
        self.grid.set_run(run)

    @property
    def run(self):
        return self.grid.run
