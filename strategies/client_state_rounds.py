"""The server's side of per-client state (docs/baselines.md#client-state): which version of its
own state each client must start from.

Methods such as SCAFFOLD, FedDyn, FedDC and MOON keep state per client (c_i, g_i, h_i and G_i,
the last local model). It lives with the client, one version per round it was made in
(`client_app.client_state_store`); the server only tells each client, in its train config,

    client-state-run     the run's token (a fresh run makes one; a resumed run keeps it)
    client-state-round   the round whose version to start from: the last round in which the
                         server aggregated this partition's reply (0 = none: start from zero)
    client-state-keep    the same round as of the last checkpoint: older versions may be deleted

so the client state always matches the server state the run continues from: after a resume from
the checkpoint of round R, every client starts from the version the uninterrupted run would use,
and a reply the server did not aggregate (dropped, timed out, skipped round) leaves the client
where the server thinks it is. The rounds are part of the strategy's checkpoint.
"""

from __future__ import annotations

import uuid
from typing import Any

from flwr.app import ConfigRecord, Message, RecordDict

RUN_KEY, ROUND_KEY, KEEP_KEY = "client-state-run", "client-state-round", "client-state-keep"
LOST_MARK = "[client state lost]"  # in the error of a client that lacks the version named


class ClientStateLost(RuntimeError):
    """A client lacks the version of its state the run continues from: the run stops."""


class ClientStateRounds:
    """Per partition: the last round its reply was aggregated; stamped on each train message."""

    def __init__(self, *, checkpoints: bool = True) -> None:
        self.checkpoints = checkpoints  # False: no checkpoint will need older versions
        self.run_token = ""
        self.accepted: dict[int, int] = {}  # partition -> last round its reply was aggregated
        self.saved: dict[int, int] = {}  # ... as of the last checkpoint (state_dict)
        self._partition_of_sent: dict[int, int] = {}  # id(sent message) -> partition

    def start(self) -> None:
        """A fresh run: a new token (clients start from zero state under it)."""
        self.run_token = uuid.uuid4().hex  # (os.urandom: no seeded RNG is consumed)
        self.accepted, self.saved = {}, {}

    def stamp(self, messages: list[Message], partition_of: dict[int, int],
              config_key: str) -> None:
        """Add the three keys to each train message's config (a copy per message)."""
        self._partition_of_sent = {}
        for msg in messages:
            config = msg.content[config_key]
            pid = config.get("partition-id", partition_of.get(msg.metadata.dst_node_id))
            if pid is None:
                raise RuntimeError(
                    f"node {msg.metadata.dst_node_id} has no known partition: per-client state "
                    "is kept per partition, so every node must report its partition-id")
            pid = int(pid)
            config = ConfigRecord(dict(config))
            config[RUN_KEY] = self.run_token
            config[ROUND_KEY] = self.accepted.get(pid, 0)
            keep = self.saved if self.checkpoints else self.accepted
            config[KEEP_KEY] = keep.get(pid, 0)
            content = RecordDict(dict(msg.content.items()))
            content[config_key] = config
            msg.content = content
            self._partition_of_sent[id(msg)] = pid

    def check_errors(self, replies: list[Message]) -> None:
        """Stop the run when a client reports that its state is lost: going on without it would
        silently make another run than the one resumed."""
        for msg in replies:
            if msg.has_error() and LOST_MARK in (msg.error.reason or ""):
                reason = msg.error.reason
                start = reason.index(LOST_MARK)
                line = reason[start:].splitlines()[0][:1000]
                # (Flower wraps it: "<class ...>:<'...'>", in-process: repr(exception))
                raise ClientStateLost(line.rstrip("'\">)"))

    def accept(self, server_round: int, good: list, sent: list[Message]) -> None:
        """The round's aggregated replies: their partitions' state is now this round's."""
        by_id = {m.metadata.message_id: self._partition_of_sent.get(id(m)) for m in sent}
        for reply, _, _ in good:
            pid = by_id.get(reply.metadata.reply_to_message_id)
            if pid is not None:
                self.accepted[pid] = server_round

    def state_dict(self) -> dict[str, Any]:
        """Called when a checkpoint is written: the rounds as of this checkpoint."""
        self.saved = dict(self.accepted)
        pids = sorted(self.accepted)
        return {"client-state-run": self.run_token,
                "client-state-partitions": [int(p) for p in pids],
                "client-state-rounds": [int(self.accepted[p]) for p in pids]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "client-state-run" not in state:
            raise ValueError("the checkpoint has no per-client state bookkeeping (written by a "
                             "run without client state): resume it with its own method")
        self.run_token = str(state["client-state-run"])
        self.accepted = dict(zip(state["client-state-partitions"], state["client-state-rounds"]))
        self.saved = dict(self.accepted)
