"""Per-client state on the node (docs/baselines.md#client-state): SCAFFOLD's c_i, FedDyn's g_i,
FedDC's h_i and G_i, MOON's last local model.

Each version is kept under the round it was made in, so that the client can start from the
version the server names (`strategies.client_state`: `client-state-round` in the train config)
and a resumed run continues exactly. On the node's disk:

    <cache dir>/client-state/<run token>/p<partition>/<name>.r<round>.pt

(the node's cache dir: node config `cache-dir`, else $FEDACG_CACHE_DIR, else
~/.cache/fedacg-gc/partitions). Files are written atomically (temporary file, fsync, rename),
readable by the owner only (0600, folders 0700), and read back with `torch.load(weights_only)`.
With the disk cache off (`cache-dir = "off"`) the versions live in the node's Flower
Context.state instead: kept across rounds of one run, lost with the node process.

Versions older than `client-state-keep` (the round the last checkpoint needs) are deleted when a
new one is written, as are versions of rounds after the current one (left by a run that stopped
after its last checkpoint).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from feddata.atomic_file import write_atomic

RUN_KEY, ROUND_KEY, KEEP_KEY = "client-state-run", "client-state-round", "client-state-keep"
LOST_MARK = "[client state lost]"  # the server stops the run on this (strategies/client_state)
_TOKEN = re.compile(r"^[0-9a-f]{32}$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VERSION = re.compile(r"^(?P<name>[A-Za-z0-9_-]+)\.r(?P<round>[0-9]+)\.pt$")


class ClientStateMissing(RuntimeError):
    """The version of a client's state the server names is not on this node."""


class DiskVersions:
    """Versions as files in one folder per run and partition."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def where(self) -> str:
        return str(self.folder)

    def read(self, name: str, server_round: int) -> dict[str, torch.Tensor] | None:
        path = self.folder / f"{name}.r{server_round}.pt"
        if not path.is_file():
            return None
        return torch.load(path, map_location="cpu", weights_only=True)

    def write(self, name: str, server_round: int, tensors: dict[str, torch.Tensor]) -> None:
        if not self.folder.is_dir():
            self.folder.mkdir(parents=True, exist_ok=True)
            for folder in (self.folder, self.folder.parent, self.folder.parent.parent):
                os.chmod(folder, 0o700)  # <cache dir>/client-state/<run>/p<i>: owner only
        write_atomic(self.folder / f"{name}.r{server_round}.pt",
                     lambda f: torch.save(tensors, f), mode=0o600)  # owner only

    def rounds(self, name: str) -> list[int]:
        if not self.folder.is_dir():
            return []
        found = (_VERSION.match(p.name) for p in self.folder.iterdir())
        return [int(m["round"]) for m in found if m and m["name"] == name]

    def delete(self, name: str, server_round: int) -> None:
        (self.folder / f"{name}.r{server_round}.pt").unlink(missing_ok=True)


class ContextVersions:
    """Versions as ArrayRecords in the node's Flower Context.state (no disk)."""

    def __init__(self, state, run_token: str, partition: int) -> None:
        self.state, self.prefix = state, f"client-state.{run_token}.p{partition}."

    def where(self) -> str:
        return "the node's Context.state (cache-dir is off)"

    def read(self, name: str, server_round: int) -> dict[str, torch.Tensor] | None:
        record = self.state.array_records.get(f"{self.prefix}{name}.r{server_round}")
        return None if record is None else record.to_torch_state_dict()

    def write(self, name: str, server_round: int, tensors: dict[str, torch.Tensor]) -> None:
        from flwr.app import ArrayRecord

        self.state[f"{self.prefix}{name}.r{server_round}"] = ArrayRecord(tensors)

    def rounds(self, name: str) -> list[int]:
        start = f"{self.prefix}{name}.r"
        return [int(k[len(start):]) for k in self.state.array_records if k.startswith(start)]

    def delete(self, name: str, server_round: int) -> None:
        key = f"{self.prefix}{name}.r{server_round}"
        if key in self.state:
            del self.state[key]


class ClientStateStore:
    """One client's state in one round: read the version the server names, write this round's."""

    def __init__(self, versions, partition: int, server_round: int, load_round: int,
                 keep_round: int) -> None:
        if not 0 <= keep_round <= load_round < server_round:
            raise ValueError(f"client state: expected 0 <= keep ({keep_round}) <= round to start "
                             f"from ({load_round}) < this round ({server_round})")
        self.versions, self.partition = versions, partition
        self.server_round, self.load_round, self.keep_round = server_round, load_round, keep_round

    def load(self, name: str) -> dict[str, torch.Tensor] | None:
        """The version of round `load_round` (None when the server says there is none yet)."""
        _check_name(name)
        if self.load_round == 0:
            return None
        found = self.versions.read(name, self.load_round)
        if found is None:
            raise ClientStateMissing(
                f"{LOST_MARK} the state '{name}' of client partition {self.partition} made in "
                f"round {self.load_round} is not in {self.versions.where()}: this node's copy was "
                "lost (disk cleared, another cache-dir, or the partition trained on another "
                "node), so the run cannot continue exactly. Restore the node's cache-dir, or "
                "start afresh with resume = ''.")
        return found

    def save(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Write this round's version, then delete the versions no one can ask for any more."""
        _check_name(name)
        self.versions.write(name, self.server_round,
                            {k: v.detach().cpu().clone() for k, v in tensors.items()})
        for r in self.versions.rounds(name):
            if r < self.keep_round or r > self.server_round:
                self.versions.delete(name, r)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"client state name {name!r}: use letters, digits, '-' and '_'")


def store_for(config, partition: int, node_config, state) -> ClientStateStore | None:
    """The store of this train message (None when the server keeps no client state)."""
    from feddata.disk_cache import cache_dir

    if RUN_KEY not in config:
        return None
    token = str(config[RUN_KEY])
    if not _TOKEN.match(token):  # (checked on arrival too: it names a folder)
        raise ValueError(f"client-state-run {token!r} is not a run token (32 hex digits)")
    base = cache_dir(node_config)
    versions: Any
    if base is None:
        versions = ContextVersions(state, token, partition)
    else:
        versions = DiskVersions(Path(base) / "client-state" / token / f"p{partition}")
    return ClientStateStore(versions, partition, int(config["server-round"]),
                            int(config[ROUND_KEY]), int(config[KEEP_KEY]))
