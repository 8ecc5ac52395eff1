"""Dynamic client population (FedACG Table 3): client slots whose data partition gets replaced.

The federation has `num_slots` clients (SuperNodes; slot = the node's own partition-id). The data
is split into a larger pool of `pool_size(num_slots)` partitions. Slot i starts with partition i.
Every `replace_every` rounds (at the start of rounds 1 + k, 1 + 2k, ...) each slot is replaced,
with probability `replace_prob`, by a new client: one holding a partition that no slot holds at
that moment, drawn uniformly (if fewer such partitions are left than slots to replace, the
replaced slots are the first ones in a random order). The draws are seeded, so every run with
the same seed sees the same population, whatever order the server asks in.
FedACG's set-up: 250 clients, a pool of 500 partitions, replace_prob 0.5 every 100 rounds.
"""

from __future__ import annotations

import numpy as np


class ClientPopulation:
    def __init__(self, replace_prob: float, replace_every: int, pool_factor: float, seed: int = 0):
        if not 0 <= replace_prob <= 1:
            raise ValueError(f"replace_prob must be in [0, 1], got {replace_prob}")
        if replace_every < 1:
            raise ValueError(f"replace_every must be at least 1, got {replace_every}")
        if pool_factor < 1:
            raise ValueError(f"pool_factor must be at least 1, got {pool_factor}")
        self.replace_prob, self.replace_every, self.pool_factor = (
            replace_prob, replace_every, pool_factor)
        self.seed = seed
        self.num_slots: int | None = None
        self._stages: list[list[int]] = []  # slot -> partition, per stage
        self._rng: np.random.Generator | None = None

    def pool_size(self, num_slots: int) -> int:
        return max(num_slots, int(round(self.pool_factor * num_slots)))

    def stage(self, server_round: int) -> int:
        """Stage s covers rounds s*k + 1 .. (s+1)*k."""
        return max(server_round - 1, 0) // self.replace_every

    def assignment(self, server_round: int, num_slots: int) -> list[int]:
        """The data partition of every slot in `server_round` (a list indexed by slot)."""
        if self.num_slots is None:
            self.num_slots = num_slots
            self._stages = [list(range(num_slots))]
            self._rng = np.random.default_rng([self.seed, 0x0D1A])
        elif num_slots != self.num_slots:
            raise ValueError(
                f"the number of client slots changed from {self.num_slots} to {num_slots}")
        target = self.stage(server_round)
        while len(self._stages) <= target:
            self._stages.append(self._next(self._stages[-1]))
        return list(self._stages[target])

    def replaced(self, server_round: int, num_slots: int) -> int:
        """How many slots got a new partition at the start of this round's stage."""
        now = self.assignment(server_round, num_slots)
        s = self.stage(server_round)
        if s == 0:
            return 0
        return sum(a != b for a, b in zip(self._stages[s - 1], now))

    def _next(self, current: list[int]) -> list[int]:
        rng = self._rng
        n = len(current)
        replace = np.flatnonzero(rng.random(n) < self.replace_prob)
        held = set(current)
        free = np.array([p for p in range(self.pool_size(n)) if p not in held], dtype=np.int64)
        rng.shuffle(replace)
        take = min(len(replace), len(free))
        fresh = rng.choice(free, size=take, replace=False) if take else []
        out = list(current)
        for slot, part in zip(replace[:take], fresh):
            out[int(slot)] = int(part)
        return out
