"""One Flower strategy for FedAvg, FedProx, FedAvgM, FedACG, FedAGM and the GC-Fed family (SPEC 1.1).

A `FedAvg` subclass that overrides `configure_train` (broadcast phi = theta + lam*m, seeded node
sampling, the per-round client config) and `aggregate_train` (validated replies, weighting by
examples or uniform, global GC, server momentum and step). The maths is in `server_update`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from logging import INFO, WARNING

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from .server_update import State, aggregate_update, client_weights, global_gc_, lookahead, server_step_


class NodeWaitTimeout(RuntimeError):
    """Too few nodes connected within the wait limit."""


def to_state(arrays: ArrayRecord) -> State:
    return dict(arrays.to_torch_state_dict())


class RoundConfig:
    """Mixin: each round's client config = the static train config + `lr * lr_decay^(t-1)`."""

    lr: float = 0.0
    lr_decay: float = 1.0

    def round_config(self, server_round: int, config: ConfigRecord) -> ConfigRecord:
        out = ConfigRecord(dict(config))
        out["lr"] = self.lr * self.lr_decay ** (server_round - 1)
        out["server-round"] = server_round
        return out


class LookaheadFedAvg(RoundConfig, FedAvg):
    """FedAvg with look-ahead broadcast, server momentum, server step and global GC.

    lam = 0, eta = 1, no global GC: FedAvg. lookahead = False, lam > 0: FedAvgM.
    lookahead = True: FedACG (FedAGM with eta = tau).
    """

    def __init__(
        self, *, lam: float = 0.0, eta: float = 1.0, lookahead: bool = False,
        aggregation: str = "examples", global_gc_layers: Sequence[str] = (),
        gc_vectors: str = "center", lr: float = 0.1, lr_decay: float = 1.0, seed: int = 0,
        node_wait_timeout: float = 120.0, identify_nodes: bool = False, population=None,
        **fedavg_kwargs,
    ) -> None:
        fedavg_kwargs.setdefault("min_available_nodes", fedavg_kwargs.get("min_train_nodes", 2))
        super().__init__(**fedavg_kwargs)
        if not 0 <= lam < 1:
            raise ValueError(f"lam must be in [0, 1), got {lam}")
        self.lam, self.eta, self.lookahead = lam, eta, lookahead
        self.aggregation = aggregation
        self.global_gc_layers = list(global_gc_layers)
        self.gc_vectors = gc_vectors
        self.lr, self.lr_decay = lr, lr_decay
        self.node_wait_timeout = node_wait_timeout
        self.rng = random.Random(seed)  # node sampling; Flower's FedAvg uses the global `random`
        # Node ids change from run to run (simulation draws them at random); with
        # `identify_nodes`, nodes are asked for their partition-id once and sampled in that order,
        # so the same seed samples the same partitions in every run.
        self.identify_nodes = identify_nodes
        self.partition_of: dict[int, int] = {}
        self.num_slots = 0  # num-partitions the nodes reported
        # Dynamic clients (feddata.ClientPopulation): each node (slot = its partition-id) is told
        # which data partition to train on this round; None = every node keeps its own.
        self.population = population
        if population is not None and not identify_nodes:
            raise ValueError("a dynamic client population needs identify_nodes=True")
        self.theta: State | None = None  # global model
        self.m: State | None = None  # server momentum
        self.phi: State | None = None  # last broadcast point
        self._theta_record: ArrayRecord | None = None  # the record `theta` was last returned as

    def summary(self) -> None:
        log(INFO, "\t├──> Server update: lookahead=%s lam=%s eta=%s aggregation=%s global-GC on %d "
            "tensors", self.lookahead, self.lam, self.eta, self.aggregation, len(self.global_gc_layers))
        super().summary()

    # --- sampling -----------------------------------------------------------------------
    def _identify(self, grid: Grid, nodes: list[int]) -> None:
        """Ask nodes not seen before for their partition-id (a QUERY message; no data is loaded)."""
        new = [n for n in nodes if n not in self.partition_of]
        if not new:
            return
        content = RecordDict({"config": ConfigRecord({"want": "partition-id"})})
        replies = grid.send_and_receive(
            self._construct_messages(content, new, MessageType.QUERY), timeout=self.node_wait_timeout)
        for msg in replies:
            if msg.has_error():
                continue
            for rec in msg.content.metric_records.values():
                if isinstance(rec.get("partition-id"), int):
                    self.partition_of[msg.metadata.src_node_id] = rec["partition-id"]
                if isinstance(rec.get("num-partitions"), int):
                    self.num_slots = max(self.num_slots, rec["num-partitions"])

    def ordered(self, nodes: list[int]) -> list[int]:
        """Nodes by partition-id where known (stable across runs), then by node id."""
        return sorted(nodes, key=lambda n: (n not in self.partition_of, self.partition_of.get(n, 0), n))

    def sample(self, grid: Grid, fraction: float, min_nodes: int) -> list[int]:
        """Sample max(floor(fraction * connected), min_nodes) nodes with the strategy's own RNG.

        Waits at most `node_wait_timeout` seconds for enough nodes to connect.
        """
        deadline = time.monotonic() + self.node_wait_timeout
        while True:
            nodes = sorted(grid.get_node_ids())
            size = max(int(len(nodes) * fraction), min_nodes)
            needed = max(size, self.min_available_nodes)
            if len(nodes) >= needed:
                if self.identify_nodes:
                    self._identify(grid, nodes)
                return self.rng.sample(self.ordered(nodes), size)
            if time.monotonic() > deadline:
                raise NodeWaitTimeout(
                    f"only {len(nodes)} node(s) connected after {self.node_wait_timeout:.0f} s, "
                    f"{needed} needed: start more SuperNodes (simulation: raise num-supernodes), or "
                    "lower min-train-nodes / min-evaluate-nodes, or raise node-wait-timeout."
                )
            log(INFO, "Waiting for nodes: %d connected, %d needed.", len(nodes), needed)
            time.sleep(1.0)

    # --- training -----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_train == 0.0:
            return []
        if arrays is not self._theta_record:  # first round, or the caller replaced the model
            self.theta = to_state(arrays)
            self.m = {k: torch.zeros_like(v) for k, v in self.theta.items() if v.is_floating_point()}
        if self.lookahead and self.lam > 0:
            self.phi = lookahead(self.theta, self.m, self.lam)
            payload = ArrayRecord(self.phi)
        else:
            self.phi, payload = self.theta, arrays
        node_ids = self.sample(grid, self.fraction_train, self.min_train_nodes)
        log(INFO, "configure_train: sampled %d nodes (partitions %s)", len(node_ids),
            [self.partition_of.get(n, f"node {n}") for n in node_ids])
        record = RecordDict({self.arrayrecord_key: payload,
                             self.configrecord_key: self.round_config(server_round, config)})
        return self._messages(record, node_ids, MessageType.TRAIN, server_round)

    def _messages(self, record: RecordDict, node_ids: list[int], message_type: str,
                  server_round: int) -> Iterable[Message]:
        """One message per node; with a dynamic population each node's config also says which
        data partition it holds this round (`partition-id`, `num-partitions` of the pool)."""
        if self.population is None:
            return self._construct_messages(record, node_ids, message_type)
        unknown = [n for n in node_ids if n not in self.partition_of]
        if unknown or not self.num_slots:
            raise RuntimeError(f"dynamic clients: nodes {unknown} did not report their partition-id")
        held = self.population.assignment(server_round, self.num_slots)
        pool = self.population.pool_size(self.num_slots)
        if message_type == MessageType.TRAIN:
            if server_round > 1 and (server_round - 1) % self.population.replace_every == 0:
                log(INFO, "dynamic clients: %d of %d clients replaced by fresh ones (pool of %d "
                    "partitions)", self.population.replaced(server_round, self.num_slots),
                    self.num_slots, pool)
            log(INFO, "dynamic clients: they hold data partitions %s",
                [held[self.partition_of[n]] for n in node_ids])
        messages = []
        for node in node_ids:
            config = ConfigRecord(dict(record[self.configrecord_key]))
            config["partition-id"], config["num-partitions"] = held[self.partition_of[node]], pool
            content = RecordDict({self.arrayrecord_key: record[self.arrayrecord_key],
                                  self.configrecord_key: config})
            messages.extend(self._construct_messages(content, [node], message_type))
        return messages

    def check_reply(self, msg: Message) -> str | None:
        """Why a train reply cannot be aggregated, or None when it can."""
        content = msg.content
        if len(content.array_records) != 1 or len(content.metric_records) != 1:
            return "expected exactly one ArrayRecord and one MetricRecord"
        arrays = next(iter(content.array_records.values()))
        metrics = next(iter(content.metric_records.values()))
        n = metrics.get(self.weighted_by_key)
        if not isinstance(n, (int, float)) or n < 0:
            return f"metric '{self.weighted_by_key}' missing or negative"
        if set(arrays.keys()) != set(self.phi):
            missing, extra = set(self.phi) - set(arrays.keys()), set(arrays.keys()) - set(self.phi)
            return f"array keys differ from the model's (missing {sorted(missing)}, extra {sorted(extra)})"
        for k, ref in self.phi.items():
            arr = arrays[k]
            if tuple(arr.shape) != tuple(ref.shape):
                return f"'{k}' has shape {tuple(arr.shape)}, expected {tuple(ref.shape)}"
            if arr.dtype != str(ref.numpy().dtype):
                return f"'{k}' has dtype {arr.dtype}, expected {ref.numpy().dtype}"
        return None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        good, contents, failures = [], [], 0
        for msg in replies:
            if msg.has_error():
                failures += 1
                log(WARNING, "round %d: node %d failed: %s", server_round,
                    msg.metadata.src_node_id, msg.error.reason)
                continue
            reason = self.check_reply(msg)
            if reason is None:
                state = to_state(next(iter(msg.content.array_records.values())))
                reason = next((f"'{k}' has non-finite values" for k, v in state.items()
                               if v.is_floating_point() and not torch.isfinite(v).all()), None)
            if reason is not None:
                failures += 1
                log(WARNING, "round %d: dropped the reply of node %d: %s", server_round,
                    msg.metadata.src_node_id, reason)
                continue
            good.append(state)
            contents.append(msg.content)
        log(INFO, "aggregate_train: %d replies aggregated, %d failed or dropped", len(good), failures)
        if not good:
            return None, None
        n = [next(iter(c.metric_records.values()))[self.weighted_by_key] for c in contents]
        d = aggregate_update(self.phi, good, client_weights(n, self.aggregation))
        global_gc_(d, self.global_gc_layers, self.gc_vectors)
        server_step_(self.theta, self.m, d, self.lam, self.eta)
        for k, v in good[0].items():  # non-float buffers: taken from the first reply (SPEC 1.1)
            if not v.is_floating_point():
                self.theta[k] = v
        self._theta_record = ArrayRecord(self.theta)
        metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        metrics["replies"] = len(good)
        metrics["failures"] = failures
        return self._theta_record, metrics

    # --- federated evaluation: same seeded sampling ---------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0:
            return []
        node_ids = self.sample(grid, self.fraction_evaluate, self.min_evaluate_nodes)
        config = ConfigRecord(dict(config))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._messages(record, node_ids, MessageType.EVALUATE, server_round)
