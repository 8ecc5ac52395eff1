"""server_app/traffic.MeteredGrid: the counts, and a deployment's reply poll (every
REPLY_POLL_SECONDS instead of Flower's 3 s), held to Flower's own `send_and_receive` loop run on
the same stand-in grid with a stand-in clock (no real waiting, no timing)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from flwr.app import RecordDict
from flwr.superlink.grid import http_grid

from server_app import traffic
from server_app.traffic import MeteredGrid


class Clock:
    """time.monotonic / time.time / time.sleep that only move when slept."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    time = monotonic

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def message(msg_id: str, reply_to: str = "") -> SimpleNamespace:
    """Message 'm<i>' goes to node i; its reply 'r<i>' comes from node i."""
    node = int(msg_id[1:])
    meta = SimpleNamespace(message_type="train", message_id=msg_id, reply_to_message_id=reply_to,
                           dst_node_id=node, src_node_id=node)
    return SimpleNamespace(metadata=meta, content=RecordDict(), has_error=lambda: False)


class StandInGrid:
    """Each message's reply is there from the time `ready[i]` (seconds after the push) on;
    None: never (a node that died)."""

    def __init__(self, clock: Clock, ready: list[float | None]) -> None:
        self.clock, self.ready, self.pulls = clock, ready, 0

    def push_messages(self, messages):
        self.pushed_at = self.clock.now
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, message_ids):
        self.pulls += 1
        age = self.clock.now - self.pushed_at
        return [message(f"r{i}", f"m{i}") for i, t in enumerate(self.ready)
                if f"m{i}" in set(message_ids) and t is not None and t <= age]

    def send_and_receive(self, messages, *, timeout=None):  # Flower's loop, on this grid
        return http_grid.HttpGrid.send_and_receive(self, messages, timeout=timeout)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(traffic, "time", clock)
    monkeypatch.setattr(http_grid, "time", clock)
    return clock


def replies_of(out) -> list[str]:
    return sorted(m.metadata.reply_to_message_id for m in out)


@pytest.mark.parametrize("ready,timeout", [
    ([0.0, 0.0], None),  # all in at the first pull
    ([0.1, 4.0, 7.2], None),  # three of Flower's polls, 29 of 0.25 s
    ([0.1, 4.0, None], 10.0),  # a dead node: the round ends at its timeout
    ([0.1, 4.0, None], 3.1),  # a timeout between two of Flower's polls
])
def test_a_deployments_poll_returns_flowers_replies_at_its_shorter_interval(clock, ready,
                                                                             timeout):
    sent = [message(f"m{i}") for i in range(len(ready))]
    flower_grid = StandInGrid(clock, ready)
    flower = MeteredGrid(flower_grid)  # poll_seconds None: the grid's own loop (Flower's)
    expected = replies_of(flower.send_and_receive(sent, timeout=timeout))
    flower_end = clock.now - flower_grid.pushed_at

    clock.slept.clear()
    grid = MeteredGrid(StandInGrid(clock, ready))
    grid.poll_seconds = traffic.REPLY_POLL_SECONDS
    got = grid.send_and_receive(sent, timeout=timeout)
    assert replies_of(got) == expected
    # every pause is the interval, the last one cut to what the timeout leaves
    assert all(s == traffic.REPLY_POLL_SECONDS for s in clock.slept[:-1])
    end = clock.now - grid.grid.pushed_at
    arrived = [t for t in ready if t is not None]
    if None in ready:  # it waits for the timeout, and not past it
        assert end == pytest.approx(timeout)
    else:  # it returns at the first pull after the last reply, Flower's up to 3 s later
        assert max(arrived) <= end < max(arrived) + traffic.REPLY_POLL_SECONDS
        assert end <= flower_end and end < max(arrived) + 0.5  # the promise: within 0.5 s
    assert grid.take("train") == flower.take("train") == {
        "sent": len(ready), "replies": len(expected), "errors": 0, "bytes-down": 0,
        "bytes-up": 0, "failed": len(ready) - len(expected)}


def test_only_flowers_deployed_grid_gets_the_short_poll():
    """A deployed ServerApp's grid (flwr 1.41: `HttpGrid`, which polls every 3 s) is pulled at
    REPLY_POLL_SECONDS; the simulation's and the in-process grid keep their own loops (the
    in-process one has no push/pull at all)."""
    from inprocess import InProcessGrid
    from run_config import resolve
    from server_app.app import federation_grid

    deployed = http_grid.HttpGrid.__new__(http_grid.HttpGrid)  # (not connected: never used)
    assert federation_grid(resolve({}), deployed, None).poll_seconds == \
        traffic.REPLY_POLL_SECONDS
    in_process = InProcessGrid.__new__(InProcessGrid)
    assert federation_grid(resolve({}), in_process, None).poll_seconds is None


def test_a_node_that_replies_twice_does_not_hide_one_that_never_replied():
    """'failed' counts the nodes sent to that never replied (a sybil's second reply is one more
    reply, not one less failure): 3 sent, node 0 replies twice, node 1 once, node 2 never."""
    grid = MeteredGrid(None)
    grid._sent([message("m0"), message("m1"), message("m2")])
    grid._received([message("r0", "m0"), message("r0", "m0"), message("r1", "m1")])
    assert grid.take("train") == {"sent": 3, "replies": 3, "errors": 0, "bytes-down": 0,
                                  "bytes-up": 0, "failed": 1}
    assert grid.take("train")["failed"] == 0  # reset by take
