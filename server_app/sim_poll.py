"""The simulation engine's message poll, made cheap for large populations.

Flower's simulation engine (flwr 1.41, `vce_api.add_messages_to_queue`) asks the link state for
the messages of every registered node, one node at a time, every 0.1 s. Each question walks all
the messages in flight and checks each of them (expiry, federation), so one sweep costs nodes x
messages in flight: 0.89 s at 10,000 nodes with 10 messages out (0.1 s at 1,000; `python -m
benchmarks.message_poll`, docs/performance.md#many-clients). The sweep holds the state's lock and
the GIL that the ServerApp and the engine's workers need, and a message waits for the sweep to
reach its node.

`speed_up_message_poll` gives the simulation's link state a `get_message_ins` that answers at
once, with the same empty list, for a node that no message in flight is addressed to, and asks
Flower's own method otherwise. The addressees are computed again whenever the messages in flight
change (their count or the newest message id: ids are fresh uuids, so any insertion changes the
newest and any deletion alone changes the count); the store is read under the state's lock, as
the ServerApp's thread adds and removes messages meanwhile. Nothing else changes: the same
messages reach the same nodes, marked delivered by Flower's code, and Flower's expiry checks
still run whenever a node has a message. It is set on the one state object of this run (not on
the class) and only for the state type and signature checked here; anything else is left alone
and the run goes on at Flower's speed. One sweep over 10,000 nodes with 10 messages in flight:
0.89 s -> 0.017 s.
"""

from __future__ import annotations

import inspect
from logging import DEBUG

from flwr.common.logger import log

_CHECKED_PARAMS = ("node_id", "limit", "run_id")  # flwr 1.41's signature, checked before use


def speed_up_message_poll(grid) -> bool:
    """Install the fast poll on the simulation grid's link state; False where it does not apply."""
    state = getattr(grid, "state", None)
    if type(state).__name__ != "InMemoryLinkState" or "get_message_ins" in vars(state):
        return False  # not Flower's in-memory state, or already installed
    flower_get_message_ins = getattr(state, "get_message_ins", None)
    store = getattr(state, "message_ins_store", None)
    lock = getattr(state, "lock", None)
    try:
        params = tuple(inspect.signature(flower_get_message_ins).parameters)
    except (TypeError, ValueError):
        params = ()
    if params != _CHECKED_PARAMS or not isinstance(store, dict) or lock is None:
        log(DEBUG, "Simulation message poll left as Flower's (unexpected link state %s)", params)
        return False
    seen: tuple = (None, frozenset())  # (version of the store, the addressees of its messages)

    def get_message_ins(node_id: int, limit: int | None, *, run_id: int | None = None):
        """Flower's `get_message_ins`, skipped for a node no stored message is addressed to."""
        nonlocal seen
        try:
            with lock:  # the ServerApp's and the engine's threads add and remove messages
                version = (len(store), next(reversed(store), None))
                if version != seen[0]:
                    seen = (version, frozenset(m.metadata.dst_node_id for m in store.values()))
                idle = node_id not in seen[1]
        except Exception:  # an error here would end Flower's poll thread: ask Flower instead
            idle = False
        return [] if idle else flower_get_message_ins(node_id, limit, run_id=run_id)

    state.get_message_ins = get_message_ins
    log(DEBUG, "Simulation message poll: nodes with no message are skipped (same messages)")
    return True
