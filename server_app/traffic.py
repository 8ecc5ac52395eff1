"""Count what the strategy actually sends and receives: a Grid that wraps the real one.

Every message that goes through `send_and_receive` (or `push_messages` / `pull_messages`) is
counted by message type: messages sent, replies received, error replies, and the bytes of the
ArrayRecords (`ArrayRecord.count_bytes()`: the serialized arrays and their keys) down and up.
A broadcast to n nodes counts n times: each node gets its own copy.

In a deployment it also pulls the replies every `REPLY_POLL_SECONDS` instead of Flower's 3 s
(flwr 1.41's `Grid.send_and_receive`), so a round ends with its last reply, not up to 3 s later
(docs/deployment.md#against-flowers-floor).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


REPLY_POLL_SECONDS = 0.25  # a deployed ServerApp's pull of the replies (one small gRPC call)


def array_bytes(content: RecordDict) -> int:
    return sum(rec.count_bytes() for rec in content.array_records.values())


class MeteredGrid(Grid):
    """Delegates everything to `grid`; `take(message_type)` returns and resets the counters."""

    fixed_size = False  # True: the node count never grows (simulation); see wait_for_nodes
    poll_seconds: float | None = None  # the replies' pull interval; None: the grid's own

    def __init__(self, grid: Grid):
        self.grid = grid
        self.counts: Counter = Counter()
        # per message type: the nodes sent to and those that replied (a node that replies twice,
        # a sybil, counts once here: 'failed' is the nodes sent to that never replied)
        self.sent_to: dict[str, set[int]] = {}
        self.replied_from: dict[str, set[int]] = {}

    # --- counting ---------------------------------------------------------------------
    def _sent(self, messages: list[Message]) -> None:
        for msg in messages:
            kind = msg.metadata.message_type
            self.counts[kind, "sent"] += 1
            self.counts[kind, "bytes-down"] += array_bytes(msg.content)
            self.sent_to.setdefault(kind, set()).add(msg.metadata.dst_node_id)

    def _received(self, replies: list[Message]) -> None:
        for msg in replies:
            kind = msg.metadata.message_type
            if msg.has_error():
                self.counts[kind, "errors"] += 1
            else:
                self.counts[kind, "replies"] += 1
                self.counts[kind, "bytes-up"] += array_bytes(msg.content)
                self.replied_from.setdefault(kind, set()).add(msg.metadata.src_node_id)

    def take(self, message_type: str) -> dict[str, int]:
        """{'sent', 'replies', 'errors', 'bytes-down', 'bytes-up', 'failed'} of `message_type`
        since the last call (e.g. MessageType.TRAIN = 'train'); 'failed': the nodes sent to that
        sent no reply (an error reply or none), whatever others sent twice."""
        out = {k: self.counts.pop((message_type, k), 0)
               for k in ("sent", "replies", "errors", "bytes-down", "bytes-up")}
        sent = self.sent_to.pop(message_type, set())
        out["failed"] = len(sent - self.replied_from.pop(message_type, set()))
        return out

    # --- Grid ---------------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        messages = list(messages)
        if self.poll_seconds is None:
            self._sent(messages)
            replies = list(self.grid.send_and_receive(messages, timeout=timeout))
            self._received(replies)
            return replies
        # Flower's loop (push, then pull until every reply is in or the timeout has passed),
        # with a shorter pause between the pulls
        waiting = set(self.push_messages(messages))
        del messages
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while True:
            got = self.pull_messages(waiting)
            replies.extend(got)
            waiting.difference_update(msg.metadata.reply_to_message_id for msg in got)
            left = None if end is None else end - time.monotonic()
            if not waiting or (left is not None and left <= 0):
                return replies
            time.sleep(self.poll_seconds if left is None else min(self.poll_seconds, left))

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
