"""The simulation's fast message poll (server_app/sim_poll.py) on Flower's real link state.

The rule: for every node, the fast poll returns exactly what the rule of the engine's poll says
(the undelivered messages addressed to that node, at most `limit`, each then marked delivered),
and it does not ask Flower's per-message checks for a node that no message is addressed to.
"""

from __future__ import annotations

import random
import threading

import pytest
from flwr.server.superlink.linkstate import InMemoryLinkState

from benchmarks.message_poll import push, simulation_state
from server_app.sim_poll import speed_up_message_poll


@pytest.fixture()
def sim():
    """A simulation's link state with 50 registered nodes and a run, as the engine makes them."""
    return simulation_state(50)


def test_poll_delivers_what_the_rule_says_and_skips_idle_nodes(sim, monkeypatch):
    grid, state, nodes = sim
    asked = []
    flower_get = InMemoryLinkState.get_message_ins

    def recording_get(self, node_id, limit, *, run_id=None):  # Flower's, counting its calls
        asked.append(node_id)
        return flower_get(self, node_id, limit, run_id=run_id)

    monkeypatch.setattr(InMemoryLinkState, "get_message_ins", recording_get)
    assert speed_up_message_poll(grid)

    rng = random.Random(0)
    delivered: set[str] = set()
    for step in range(6):  # rounds: messages pushed, swept, some pulled, more pushed
        targets = rng.sample(nodes, 5) + rng.sample(nodes, 2)  # some nodes get two messages
        ids = dict(zip(push(grid, targets), targets))
        if step % 2:  # the previous round's messages leave the store (their replies pulled)
            for msg_id in list(state.message_ins_store):
                if msg_id in delivered:
                    del state.message_ins_store[msg_id]
        for _ in range(2):  # two sweeps: the second finds the second message of a node
            asked.clear()
            for node in rng.sample(nodes, len(nodes)):
                expected = [m for m in state.message_ins_store.values()
                            if m.metadata.dst_node_id == node and not m.metadata.delivered_at]
                got = state.get_message_ins(node_id=node, limit=1)
                assert [m.metadata.message_id for m in got] == [
                    m.metadata.message_id for m in expected[:1]]
                assert all(m.metadata.delivered_at for m in got)
                delivered |= {m.metadata.message_id for m in got}
            addressees = {m.metadata.dst_node_id for m in state.message_ins_store.values()}
            assert set(asked) == addressees  # Flower's checks run for these nodes only
        assert set(ids) <= delivered
    # one message out and one in between two polls: same count, same oldest message
    newest = next(reversed(state.message_ins_store))
    del state.message_ins_store[newest]
    idle = next(n for n in nodes if n not in {
        m.metadata.dst_node_id for m in state.message_ins_store.values()})
    (msg_id,) = push(grid, [idle])
    assert [m.metadata.message_id for m in state.get_message_ins(node_id=idle, limit=1)] == [
        msg_id]
    # only a message out (not the newest): its node is idle again, Flower's checks not asked
    oldest = state.message_ins_store.pop(next(iter(state.message_ins_store)))
    node = oldest.metadata.dst_node_id
    assert all(m.metadata.dst_node_id != node for m in state.message_ins_store.values())
    asked.clear()
    assert state.get_message_ins(node_id=node, limit=1) == []
    assert asked == []


def test_an_expired_message_is_dropped_by_flowers_checks(sim):
    grid, state, nodes = sim
    assert speed_up_message_poll(grid)
    (msg_id,) = push(grid, nodes[:1])
    state.message_ins_store[msg_id].metadata.__dict__["_created_at"] -= 10 ** 6  # ttl passed
    assert state.get_message_ins(node_id=nodes[1], limit=1) == []
    assert state.get_message_ins(node_id=nodes[0], limit=1) == []  # expired: not delivered
    assert msg_id not in state.message_ins_store


def test_left_alone_where_it_does_not_apply(sim):
    grid, state, _ = sim
    assert speed_up_message_poll(grid)
    assert not speed_up_message_poll(grid)  # installed once

    class InMemoryLinkState:  # a link state of another Flower version: not touched
        message_ins_store: dict = {}
        lock = threading.RLock()

        def get_message_ins(self, node_id, limit):
            return []

    class OtherGrid:
        state = InMemoryLinkState()

    other = OtherGrid()
    assert not speed_up_message_poll(other)
    assert "get_message_ins" not in vars(other.state)
    assert not speed_up_message_poll(object())


def test_the_store_is_read_under_the_states_lock(sim):
    """The ServerApp's thread adds and removes messages under the state's lock while the engine
    polls: a poll that reads the store without the lock can fail ('dictionary changed size
    during iteration'), which ends Flower's poll thread and hangs the run."""
    grid, state, nodes = sim
    held = []

    class RecordingLock:
        def __init__(self, lock):
            self.lock, self.depth = lock, 0

        def __enter__(self):
            self.lock.acquire()
            self.depth += 1

        def __exit__(self, *exc):
            self.depth -= 1
            self.lock.release()

    class Store(dict):  # records, on every read, whether the lock is held
        def __len__(self):
            held.append(state.lock.depth > 0)
            return super().__len__()

        def __iter__(self):
            held.append(state.lock.depth > 0)
            return super().__iter__()

        def __reversed__(self):
            held.append(state.lock.depth > 0)
            return super().__reversed__()

        def values(self):
            held.append(state.lock.depth > 0)
            return super().values()

    state.lock = RecordingLock(state.lock)
    state.message_ins_store = Store()
    assert speed_up_message_poll(grid)
    push(grid, nodes[:3])
    for node in nodes:
        state.get_message_ins(node_id=node, limit=1)
    assert held and all(held)


def test_a_failing_fast_path_leaves_the_answer_to_flower(sim):
    grid, state, nodes = sim

    class Store(dict):
        def __reversed__(self):
            raise RuntimeError("dictionary changed size during iteration")

    state.message_ins_store = Store()
    assert speed_up_message_poll(grid)
    (msg_id,) = push(grid, nodes[:1])
    assert [m.metadata.message_id for m in state.get_message_ins(node_id=nodes[0], limit=1)] == [
        msg_id]
    assert state.get_message_ins(node_id=nodes[1], limit=1) == []


def test_the_sweep_benchmark_runs_both_polls():
    from benchmarks.message_poll import sweep_seconds

    assert sweep_seconds(50, 3, fast=False) > 0 and sweep_seconds(50, 3, fast=True) > 0
