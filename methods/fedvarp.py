"""FedVARP (Jhunjhunwala, Sharma, Nagarkatti, Joshi, UAI 2022, https://arxiv.org/abs/2207.14130):
server-side variance reduction with the last update of every client (docs/baselines.md#fedvarp).

    v     = y + mean_{i in S} (d_i - y_i)
    theta = theta + eta * v
    y     = y + (1/N) sum_{i in S} (d_i - y_i);   y_i = d_i   for i in S

`y_j` is the last update d_j of client j (0 before its first round), `y = (1/N) sum_j y_j`. Clients
run FedAvg's local update; 1x each way. The server keeps N + 1 models: in memory up to
`fedvarp-memory-mb`, beyond in a memory-mapped file (`UpdateTable`); the table is part of the
checkpoint, so a resumed run is exact.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from fileio.atomic import write_atomic
from fileio.errors import UnusableFile
from fileio.reading import open_regular

from . import momentum
from .parts import MethodDefinition, ServerRule, SettingError
from .registry import register
from .settings import Key, Uses

WHY_NOT = "FedVARP has its own server rule; no paper adds it"
UNTESTED_GC = "GC-Fed keeps GC off variance-reduction methods (docs/baselines.md#combinations)"


class UpdateTable:
    """N flat float32 rows (y_j), zero at first: a tensor in memory, or a memory-mapped file
    (unlinked at once: the space is freed when the process ends) when larger than `limit_mb`."""

    def __init__(self, rows: int, cols: int, limit_mb: float, folder: str = ".") -> None:
        import numpy as np
        import torch

        self.rows, self.cols = rows, cols
        self.bytes = rows * cols * 4
        self.on_disk = self.bytes > limit_mb * 1e6
        if self.on_disk:
            os.makedirs(folder, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".fedvarp-", suffix=".f32") as f:
                f.truncate(self.bytes)  # sparse: zeros, no disk used until written
                self._map = np.memmap(f, dtype=np.float32, mode="r+", shape=(rows, cols))
            self.data = torch.from_numpy(self._map)  # (the name is gone; the mapping stays)
        else:
            self.data = torch.zeros(rows, cols)

    def __getitem__(self, j: int):
        return self.data[j]

    def __setitem__(self, j: int, value) -> None:
        self.data[j].copy_(value)


class FedVARPRule(ServerRule):
    """theta += eta * (y + mean_S(d_i - y_i)); the table of the last update of every client."""

    name = "fedvarp"
    settings = (
        Key("fedvarp-memory-mb", float, 2048.0,
            "FedVARP keeps the last update of every client (N models): in memory up to this many "
            "MB, beyond in a memory-mapped file next to the runs (docs/baselines.md#fedvarp).",
            "server", low=0.0, resume_may_differ=True, high=1e9, strategy=True, topic="Baselines"),
    )
    # the server step, the client weights, and the folder of the runs, next to which a table
    # too large for memory goes (None in a named strategy's settings: the working directory)
    uses = (momentum.ETA, momentum.AGGREGATION, Uses("out-dir", str | None, None))
    supports = frozenset({"aggregation=uniform", "resume"})
    untested = {"local-gc": UNTESTED_GC}  # (global GC and look-ahead: not supported at all)
    summary = ("variance reduction with the last update of every client "
               "(docs/baselines.md#fedvarp)")

    def __init__(self, settings, model=None) -> None:
        super().__init__(settings, model)
        if settings.aggregation != "uniform":
            raise SettingError("'aggregation' = 'examples': server-rule 'fedvarp' averages "
                               "uniformly over the sampled clients (y is the plain mean of the N "
                               "clients' updates); set aggregation = 'uniform'")
        self.eta: float = settings.eta
        self.limit_mb: float = settings.fedvarp_memory_mb
        self.folder: str = os.path.expanduser(settings.out_dir or ".")
        self.theta = self.y = self.table = None
        self.seen: set[int] = set()  # clients whose y_j is not 0 (any more)
        self.row_files: list[str] = []  # the rows files of the last two checkpoints

    def describe(self) -> str:
        where = "" if self.table is None else \
            f", table {self.table.bytes / 1e6:.1f} MB {'on disk' if self.table.on_disk else ''}"
        return f"fedvarp: eta={self.eta}{where}"

    # --- flat views ----------------------------------------------------------------------------
    def _keys(self):
        return [k for k, v in self.theta.items() if v.is_floating_point()]

    def _flat(self, state: dict):
        import torch

        return torch.cat([state[k].reshape(-1).to(torch.float32) for k in self._keys()])

    def _unflat(self, flat) -> dict:
        out, at = {}, 0
        for k in self._keys():
            n = self.theta[k].numel()
            out[k] = flat[at:at + n].reshape(self.theta[k].shape).to(self.theta[k].dtype)
            at += n
        return out

    # --- the rule ------------------------------------------------------------------------------
    def start(self, theta_record) -> None:
        self.theta = dict(theta_record.to_torch_state_dict())
        self._record = theta_record
        self.y = self.table = None
        self.seen = set()

    def theta_record(self):
        return self._record

    def broadcast(self, server_round: int):
        return self._record, self.theta

    def _table(self, num_clients: int):
        import torch

        if self.table is None:
            cols = sum(self.theta[k].numel() for k in self._keys())
            self.table = UpdateTable(num_clients, cols, self.limit_mb, self.folder)
            self.y = torch.zeros(cols)
        return self.table

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        from flwr.app import ArrayRecord

        ids = list(getattr(self, "client_ids", []) or [])
        if len(ids) != len(good) or any(j is None for j in ids):
            return None, "FedVARP needs the partition of every reply (the round loop's client_ids)"
        n_clients = self.num_clients or 0
        if n_clients < len(set(ids)) or max(ids) >= n_clients:
            return None, f"N = {n_clients} clients known, partitions {sorted(ids)} do not fit"
        table = self._table(n_clients)
        if table.rows != n_clients:
            return None, f"the federation has {n_clients} clients, the table {table.rows}"
        d = [self._flat(model) - self._flat(phi) for _, model, _ in good]
        v, self.y = varp_step(self.y, table, ids, d, n_clients)
        step = self._unflat(v)
        for k, dv in step.items():
            self.theta[k] = self.theta[k] + self.eta * dv
        self.seen.update(ids)
        for k, value in good[0][1].items():  # non-float buffers: from the first reply
            if not value.is_floating_point():
                self.theta[k] = value
        self._record = ArrayRecord(self.theta)
        return self._record, None

    def state_dict(self) -> dict[str, Any]:
        copy = lambda state: {k: v.clone() for k, v in state.items()}  # noqa: E731
        state = {"theta": copy(self.theta), "phi": copy(self.theta)}
        if self.table is not None:  # rows of clients never seen are 0: only the others are kept
            seen = sorted(self.seen)
            state["fedvarp"] = {"y": self.y.clone(), "num-clients": self.table.rows,
                                "clients": seen}
            if self.table.on_disk:  # a table beyond memory: its rows go to a file of their own
                state["fedvarp"]["rows-file"] = self._write_rows(seen)
            else:
                state["fedvarp"]["rows"] = self.table.data[seen].clone()
        return state

    def _write_rows(self, seen: list[int]) -> str:
        """The seen rows, streamed row by row into `<out-dir>/fedvarp-rows-<token>.f32` (written
        whole, then renamed): a checkpoint of a table on disk names this file instead of holding
        the rows (500 clients x ResNet-18 = 22 GB: copied into the checkpoint's memory it would
        not fit the host). The file of the previous checkpoint is kept (that checkpoint stays the
        one to resume from until the next is written); older ones are deleted."""
        name = f"fedvarp-rows-{uuid.uuid4().hex}.f32"
        path = os.path.join(self.folder, name)
        os.makedirs(self.folder, exist_ok=True)
        write_atomic(Path(path), lambda f: f.writelines(
            self.table.data[j].numpy().tobytes() for j in seen))
        self.row_files.append(path)
        for old in self.row_files[:-2]:
            try:
                os.unlink(old)
            except OSError:
                pass
        self.row_files = self.row_files[-2:]
        return name

    def state_to_check(self) -> dict[str, Any]:
        """theta and y, no copies (y is the mean of the table's rows: a non-finite row makes it
        non-finite too; copying the table every round could cost gigabytes)."""
        return {"theta": self.theta, **({"fedvarp-y": self.y} if self.y is not None else {})}

    def _read_rows(self, name: str, count: int):
        """The rows a checkpoint's `rows-file` holds, memory-mapped (read row by row)."""
        import numpy as np

        path = os.path.join(self.folder, os.path.basename(name))
        cols = self.table.cols
        try:  # the file itself: never a link planted at its name, nor a pipe
            f = open_regular(Path(path))
        except (OSError, UnusableFile) as err:
            raise ValueError(f"the checkpoint's FedVARP table file {path} cannot be read "
                             f"({err}): it is written beside the run folders (out-dir) with "
                             "each checkpoint; resume from the out-dir that holds it") from None
        with f:
            if os.fstat(f.fileno()).st_size != count * cols * 4:
                raise ValueError(f"the checkpoint's FedVARP table file {path} is not {count} "
                                 f"rows of {cols} floats: it is written beside the run folders "
                                 "(out-dir) with each checkpoint; resume from the out-dir that "
                                 "holds it")
            self.row_files = [path]
            return np.memmap(f, dtype=np.float32, mode="r", shape=(count, cols))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import torch
        from flwr.app import ArrayRecord

        if "theta" not in state:
            raise ValueError("the checkpoint lacks the fedvarp rule's state 'theta'")
        self.theta = {k: v.clone() for k, v in state["theta"].items()}
        self._record = ArrayRecord(self.theta)
        self.table, self.y, self.seen = None, None, set()
        saved = state.get("fedvarp")
        if saved is not None:
            self._table(int(saved["num-clients"]))
            self.y = saved["y"].clone()
            rows = saved.get("rows")
            if "rows-file" in saved:  # the rows in a file of their own (a table on disk)
                rows = self._read_rows(saved["rows-file"], len(saved["clients"]))
            for row, j in enumerate(saved["clients"]):
                self.table[j] = torch.as_tensor(rows[row])
            self.seen = set(saved["clients"])


def varp_step(y, table, ids: list[int], d: list, num_clients: int):
    """(v, the new y), updating the rows `ids` of `table` in place (plain PyTorch):
    v = y + mean_S(d_i - y_i); y += (1/N) sum_S (d_i - y_i); y_i = d_i."""
    corrections = [d_i - table[j] for j, d_i in zip(ids, d)]
    total = corrections[0].clone()
    for c in corrections[1:]:
        total += c
    v = y + total / len(ids)
    y = y + total / num_clients
    for j, d_i in zip(ids, d):
        table[j] = d_i
    return v, y


register(FedVARPRule)
register(MethodDefinition(
    "fedvarp", "Jhunjhunwala 2022 https://arxiv.org/abs/2207.14130", "fedvarp", (),
    {"aggregation": "uniform"}))
