"""Per-client state on the node (docs/baselines.md#client-state): SCAFFOLD's c_i, FedDyn's g_i,
FedDC's h_i and G_i, MOON's last local model.

Each version is kept under the round it was made in, so that the client can start from the
version the server names (`strategies.client_state_rounds`: `client-state-round` in the train
config) and a resumed run continues exactly. On the node's disk:

    <cache dir>/client-state/<run token>/p<partition>/<name>.r<round>.pt

(the node's cache dir: node config `cache-dir`, else $FEDACG_CACHE_DIR, else
~/.cache/fedacg-gc/partitions). Files are written atomically (temporary file, fsync, rename),
readable by the owner only (0600, folders 0700), and read back with `torch.load(weights_only)`.
Each file starts with the SHA-256 of the rest, and holds its run token, partition, state name
and round next to the tensors: a file that was damaged (flipped bytes, cut short), swapped with
another partition's or renamed from another round, or whose tensors do not match what the part
declares (`like`: keys, shapes, dtypes) is refused like a missing one, with an error naming the
file. With the disk cache off (`cache-dir = "off"`) the versions live in the node's Flower
Context.state instead: kept across rounds of one run, lost with the node process.

Versions older than `client-state-keep` (the round the last checkpoint needs) are deleted when a
new one is written, as are versions of rounds after the current one (left by a run that stopped
after its last checkpoint).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord

from feddata.disk_cache import cache_dir
from fileio.atomic import without_checksum, write_torch_checksummed
from fileio.reading import memory_bytes, read_bounded

RUN_KEY, ROUND_KEY, KEEP_KEY = "client-state-run", "client-state-round", "client-state-keep"
LOST_MARK = "[client state lost]"  # the server stops the run on this (strategies/client_state)
_TOKEN = re.compile(r"^[0-9a-f]{32}$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VERSION = re.compile(r"^(?P<name>[A-Za-z0-9_-]+)\.r(?P<round>[0-9]+)\.pt$")


HEADER = b"fedacg-gc client state sha256="  # + 64 hex digits + newline, then the payload
FORMAT = 1


class ClientStateMissing(RuntimeError):
    """The version of a client's state the server names is not on this node, or not usable."""


class UnusableVersion(ValueError):
    """A stored version that cannot be used: `file` (where it is) and the message (why)."""

    def __init__(self, file: str, why: str) -> None:
        super().__init__(why)
        self.file = file


class DiskVersions:
    """Versions as files in one folder per run and partition: the checksum header, then
    `torch.save` of {format, run, partition, name, round, tensors}."""

    def __init__(self, folder: Path, run_token: str, partition: int) -> None:
        self.folder, self.run_token, self.partition = folder, run_token, partition

    def where(self) -> str:
        return str(self.folder)

    def path(self, name: str, server_round: int) -> Path:
        return self.folder / f"{name}.r{server_round}.pt"

    def file(self, name: str, server_round: int) -> str:
        return str(self.path(name, server_round))

    def read(self, name: str, server_round: int) -> dict[str, torch.Tensor] | None:
        """The tensors (None when there is no such file); UnusableVersion saying why not."""
        path = self.path(name, server_round)
        if not path.is_file():
            return None
        try:  # (bounded: a regular file, no link, at most this machine's memory)
            data = without_checksum(HEADER, read_bounded(path, memory_bytes()))
        except OSError as err:
            raise UnusableVersion(str(path), f"cannot be read ({err.strerror or err})") from None
        if data is None:
            raise UnusableVersion(str(path), "is damaged: it lacks the checksum header or its "
                                  "SHA-256 does not match (changed or cut short on disk)")
        try:
            payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as err:  # a checksum-valid file this version cannot read
            raise UnusableVersion(str(path), f"cannot be read ({type(err).__name__})") from None
        expected = {"format": FORMAT, "run": self.run_token, "partition": self.partition,
                    "name": name, "round": server_round}
        what = {"format": "format", "run": "run", "partition": "client partition",
                "name": "state", "round": "round"}
        if not isinstance(payload, dict) or not isinstance(payload.get("tensors"), dict):
            raise UnusableVersion(str(path), "is not a client-state file of this app")
        for key, want in expected.items():
            if payload.get(key) != want:
                raise UnusableVersion(str(path), f"holds the {what[key]} {payload.get(key)!r}, "
                                      f"not {want!r} (copied, swapped or renamed?)")
        return payload["tensors"]

    def write(self, name: str, server_round: int, tensors: dict[str, torch.Tensor]) -> None:
        if not self.folder.is_dir():
            self.folder.mkdir(parents=True, exist_ok=True)
            for folder in (self.folder, self.folder.parent, self.folder.parent.parent):
                os.chmod(folder, 0o700)  # <cache dir>/client-state/<run>/p<i>: owner only
        write_torch_checksummed(
            self.path(name, server_round), HEADER,
            {"format": FORMAT, "run": self.run_token, "partition": self.partition,
             "name": name, "round": server_round, "tensors": tensors}, mode=0o600)  # owner only

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

    def file(self, name: str, server_round: int) -> str:
        return f"{self.where()} at '{self.prefix}{name}.r{server_round}'"

    def read(self, name: str, server_round: int) -> dict[str, torch.Tensor] | None:
        record = self.state.array_records.get(f"{self.prefix}{name}.r{server_round}")
        return None if record is None else record.to_torch_state_dict()

    def write(self, name: str, server_round: int, tensors: dict[str, torch.Tensor]) -> None:
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

    def load(self, name: str, like: Mapping[str, torch.Tensor]
             ) -> dict[str, torch.Tensor] | None:
        """The version of round `load_round` (None when the server says there is none yet);
        `like`: what the part declares its state to be (keys, shapes and dtypes, e.g. the
        model's parameters). ClientStateMissing, marked for the server, when it is not there or
        cannot be used."""
        _check_name(name)
        if self.load_round == 0:
            return None
        try:
            found = self.versions.read(name, self.load_round)
            if found is not None:
                problem = layout_mismatch(found, like)
                if problem:
                    raise UnusableVersion(self.versions.file(name, self.load_round), problem)
        except UnusableVersion as err:
            raise ClientStateMissing(
                f"{LOST_MARK} the state '{name}' of client partition {self.partition} made in "
                f"round {self.load_round} cannot be used: {err.file} {err}. The run cannot "
                "continue exactly without it: put this partition's own file back (from a "
                "backup; files swapped between partitions: swap them back), or start afresh "
                "with resume = ''.") from None
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


def layout_mismatch(found: Mapping[str, torch.Tensor], like: Mapping[str, torch.Tensor]
                    ) -> str | None:
    """What differs between a stored state and its declaration (keys, shapes, dtypes; the
    first difference), or None."""
    if found.keys() != like.keys():
        missing, extra = sorted(like.keys() - found.keys()), sorted(found.keys() - like.keys())
        return (f"does not hold the tensors its part declares (missing {missing[:3]}, "
                f"unexpected {extra[:3]})")
    for key, ref in like.items():
        got = found[key]
        if not isinstance(got, torch.Tensor) or got.shape != ref.shape or got.dtype != ref.dtype:
            shown = (f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor)
                     else type(got).__name__)
            return f"holds '{key}' as {shown}, its part declares {tuple(ref.shape)} {ref.dtype}"
    return None


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"client state name {name!r}: use letters, digits, '-' and '_'")


def store_for(config, partition: int, node_config, state) -> ClientStateStore | None:
    """The store of this train message (None when the server keeps no client state)."""
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
        versions = DiskVersions(Path(base) / "client-state" / token / f"p{partition}", token,
                                partition)
    return ClientStateStore(versions, partition, int(config["server-round"]),
                            int(config[ROUND_KEY]), int(config[KEEP_KEY]))
