"""One Flower strategy for FedAvg, FedProx, FedAvgM, FedACG, FedAGM and the GC-Fed family (SPEC 1.1).

A `FedAvg` subclass that overrides `configure_train` (broadcast phi = theta + lam*m, seeded node
sampling, the per-round client config), `aggregate_train` (screened replies, weighting by
examples or uniform, global GC, server momentum and step; a round with fewer than
`min_train_clients` good replies is skipped) and `start` (Flower's round loop, resumable from
`state_dict()`). The maths is in `server_update`, the reply checks in `reply_screen`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from logging import INFO, WARNING
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result
from flwr.serverapp.strategy.strategy_utils import log_strategy_start_info

from . import robust
from .reply_screen import limit_influence, screen_node_reports, screen_replies, short_reason
from .server_update import State, global_gc_, lookahead, server_step_


class NodeWaitTimeout(RuntimeError):
    """Too few nodes connected within the wait limit."""


def to_state(arrays: ArrayRecord) -> State:
    return dict(arrays.to_torch_state_dict())


def safe_metrics(aggr_fn, contents: list[RecordDict], weight_key: str) -> MetricRecord:
    """The clients' metrics aggregated by `aggr_fn`, or empty when they cannot be (odd replies)."""
    if not contents:
        return MetricRecord()
    try:
        return aggr_fn(contents, weight_key)
    except Exception as err:  # metrics are informational: never let them stop a run
        log(WARNING, "client metrics not aggregated: %s: %s", type(err).__name__, err)
        return MetricRecord()


def wait_for_nodes(grid: Grid, fraction: float, min_nodes: int, min_available: int,
                   timeout: float) -> tuple[list[int], int]:
    """The connected node ids and the sample size max(floor(fraction * connected), min_nodes),
    once at least max(size, min_available) nodes are connected; NodeWaitTimeout after `timeout` s
    (Flower's own sampling waits forever)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        size = max(int(len(nodes) * fraction), min_nodes)
        needed = max(size, min_available)
        if len(nodes) >= needed:
            return nodes, size
        if time.monotonic() > deadline:
            raise NodeWaitTimeout(
                f"only {len(nodes)} node(s) connected after {timeout:.0f} s, {needed} needed: "
                "start more SuperNodes (simulation: raise num-supernodes), or lower "
                "min-train-nodes / min-evaluate-nodes, or raise node-wait-timeout."
            )
        log(INFO, "Waiting for nodes: %d connected, %d needed.", len(nodes), needed)
        time.sleep(1.0)


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
        min_train_clients: int = 1, max_update_norm: float = 0.0,
        update_norm_ratio: float = 10.0, num_examples_ratio: float = 10.0,
        robust_config: robust.RobustConfig = robust.RobustConfig(), **fedavg_kwargs,
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
        self.min_train_clients = min_train_clients
        self.max_update_norm = max_update_norm
        self.influence = (update_norm_ratio, num_examples_ratio)  # reply_screen.limit_influence
        self.robust = robust_config  # how the updates become d (strategies/robust.py)
        self.rng = random.Random(seed)  # node sampling; Flower's FedAvg uses the global `random`
        # Node ids change from run to run (simulation draws them at random); with
        # `identify_nodes`, nodes are asked for their partition-id once and sampled in that order,
        # so the same seed samples the same partitions in every run (a resumed one included).
        self.identify_nodes = identify_nodes
        self.partition_of: dict[int, int] = {}
        self._queried: set[int] = set()
        self.num_slots = 0  # num-partitions the nodes reported
        self.refused: set[int] = set()  # nodes whose report was invalid: never sampled
        # Dynamic clients (feddata.ClientPopulation): each node (slot = its partition-id) is told
        # which data partition to train on this round; None = every node keeps its own.
        self.population = population
        if population is not None and not identify_nodes:
            raise ValueError("a dynamic client population needs identify_nodes=True")
        self.theta: State | None = None  # global model
        self.m: State | None = None  # server momentum
        self.phi: State | None = None  # last broadcast point
        self._theta_record: ArrayRecord | None = None  # the record `theta` was last returned as
        self._sent: list[Message] = []  # the current train round's instructions
        # Called with (round, metrics) after every aggregate_train, skipped rounds included.
        self.round_metrics_fn: Callable[[int, MetricRecord], None] | None = None

    def summary(self) -> None:
        log(INFO, "\t├──> Server update: lookahead=%s lam=%s eta=%s aggregation=%s global-GC on %d "
            "tensors", self.lookahead, self.lam, self.eta, self.aggregation, len(self.global_gc_layers))
        log(INFO, "\t├──> Replies: at least %d good ones per round, max update norm %s",
            self.min_train_clients, self.max_update_norm or "unlimited")
        super().summary()

    # --- state (checkpoints) ------------------------------------------------------------
    def _init_state(self, arrays: ArrayRecord) -> None:
        self.theta = to_state(arrays)
        self.m = {k: torch.zeros_like(v) for k, v in self.theta.items() if v.is_floating_point()}
        self.phi = None
        self._theta_record = arrays

    def state_dict(self) -> dict[str, Any]:
        """Everything the server update and the node sampling depend on, as plain tensors and tuples.

        Sampling is by partition-id order, so the RNG state means the same partitions in a new run
        with other node ids; the node-id -> partition map itself is learnt again.
        """
        if self.theta is None:
            raise RuntimeError("no state yet: the strategy has not started")
        copy = lambda state: {k: v.clone() for k, v in state.items()}  # noqa: E731
        return {"theta": copy(self.theta), "m": copy(self.m),
                "phi": copy(self.phi if self.phi is not None else self.theta),
                "sampling-rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.theta = {k: v.clone() for k, v in state["theta"].items()}
        self.m = {k: v.clone() for k, v in state["m"].items()}
        self.phi = {k: v.clone() for k, v in state["phi"].items()}
        self.rng.setstate(state["sampling-rng"])
        self._theta_record = ArrayRecord(self.theta)

    # --- the round loop -----------------------------------------------------------------
    def start(
        self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
        train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None, *,
        first_round: int = 1, round_end_fn: Callable[[int, ArrayRecord], None] | None = None,
    ) -> Result:
        """Flower's `Strategy.start` loop, run from `first_round` to `num_rounds`.

        `first_round = 1`: a fresh run from `initial_arrays` (evaluated as round 0). Later: a
        resumed run, from the state given to `load_state_dict` (`initial_arrays` is not used).
        `round_end_fn(round, theta)` is called after each round's evaluation (checkpoints).
        """
        log(INFO, "Starting %s strategy%s:", self.__class__.__name__,
            f" (resumed at round {first_round})" if first_round > 1 else "")
        log_strategy_start_info(num_rounds, initial_arrays, train_config, evaluate_config)
        self.summary()
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        result = Result()
        t_start = time.time()
        if first_round == 1:
            self._init_state(initial_arrays)
            if evaluate_fn:
                res = evaluate_fn(0, initial_arrays)
                if res is not None:
                    result.evaluate_metrics_serverapp[0] = res
        elif self.theta is None:
            raise RuntimeError("resuming needs the strategy's state: call load_state_dict first")
        arrays = result.arrays = self._theta_record

        for server_round in range(first_round, num_rounds + 1):
            log(INFO, "")
            log(INFO, "[ROUND %s/%s]", server_round, num_rounds)
            replies = grid.send_and_receive(
                messages=self.configure_train(server_round, arrays, train_config, grid), timeout=timeout)
            agg_arrays, train_metrics = self.aggregate_train(server_round, replies)
            if agg_arrays is not None:
                result.arrays = arrays = agg_arrays
            if train_metrics is not None:
                log(INFO, "\t└──> Aggregated MetricRecord: %s", train_metrics)
                result.train_metrics_clientapp[server_round] = train_metrics
            replies = grid.send_and_receive(
                messages=self.configure_evaluate(server_round, arrays, evaluate_config, grid),
                timeout=timeout)
            eval_metrics = self.aggregate_evaluate(server_round, replies)
            if eval_metrics is not None:
                log(INFO, "\t└──> Aggregated MetricRecord: %s", eval_metrics)
                result.evaluate_metrics_clientapp[server_round] = eval_metrics
            if evaluate_fn:
                res = evaluate_fn(server_round, arrays)
                if res is not None:
                    result.evaluate_metrics_serverapp[server_round] = res
            if round_end_fn:
                round_end_fn(server_round, arrays)
        log(INFO, "")
        log(INFO, "Strategy execution finished in %.2fs", time.time() - t_start)
        return result

    # --- sampling -----------------------------------------------------------------------
    def describe(self, node: int) -> str:
        """A node in log lines: its id and, when known, its partition."""
        return f"node {node}" + (f" (partition {self.partition_of[node]})" if node in self.partition_of else "")

    def _identify(self, grid: Grid, nodes: list[int]) -> None:
        """Ask nodes not asked before for their partition-id (a QUERY message; no data is loaded)."""
        new = [n for n in nodes if n not in self._queried]
        if not new:
            return
        self._queried.update(new)  # a node that does not answer is not asked again every round
        content = RecordDict({"config": ConfigRecord({"want": "partition-id"})})
        replies = grid.send_and_receive(
            self._construct_messages(content, new, MessageType.QUERY), timeout=self.node_wait_timeout)
        reports = {}
        for msg in replies:
            if msg.has_error():
                log(WARNING, "node %d did not say its partition-id: %s", msg.metadata.src_node_id,
                    short_reason(msg.error.reason))
                continue
            for rec in msg.content.metric_records.values():
                reports[msg.metadata.src_node_id] = (rec.get("partition-id"),
                                                     rec.get("num-partitions"))
        accepted, self.num_slots, refused = screen_node_reports(reports, self.num_slots)
        self.partition_of.update(accepted)
        for node, why in refused.items():  # reply_screen.check_node_report
            log(WARNING, "node %d: its report was refused (%s); it is not sampled", node, why)
            self.refused.add(node)

    def ordered(self, nodes: list[int]) -> list[int]:
        """Nodes by partition-id where known (stable across runs), then by node id."""
        return sorted(nodes, key=self.order_key)

    def order_key(self, node: int) -> tuple:
        return (node not in self.partition_of, self.partition_of.get(node, 0), node)

    def sample(self, grid: Grid, fraction: float, min_nodes: int) -> list[int]:
        """Sample max(floor(fraction * connected), min_nodes) nodes with the strategy's own RNG.

        Waits at most `node_wait_timeout` seconds for enough nodes to connect.
        """
        nodes, size = wait_for_nodes(grid, fraction, min_nodes, self.min_available_nodes,
                                     self.node_wait_timeout)
        if self.identify_nodes:
            self._identify(grid, nodes)
            nodes = [n for n in nodes if n not in self.refused]
            size = min(size, len(nodes))
        return self.rng.sample(self.ordered(nodes), size)

    # --- training -----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._sent = []
        if self.fraction_train == 0.0:
            return []
        if self.theta is None or arrays is not self._theta_record:  # the caller replaced the model
            self._init_state(arrays)
        if self.lookahead and self.lam > 0:
            self.phi = lookahead(self.theta, self.m, self.lam)
            payload = ArrayRecord(self.phi)
        else:
            self.phi, payload = self.theta, arrays
        node_ids = self.sample(grid, self.fraction_train, self.min_train_nodes)
        log(INFO, "configure_train: sampled %d nodes (partitions %s)", len(node_ids),
            [self.partition_of.get(n, f"node {n}") for n in node_ids])
        if len(node_ids) < self.min_train_clients:
            log(WARNING, "round %d: %d nodes sampled but min-train-clients = %d: the round will be "
                "skipped", server_round, len(node_ids), self.min_train_clients)
        record = RecordDict({self.arrayrecord_key: payload,
                             self.configrecord_key: self.round_config(server_round, config)})
        # kept: the grid sets their message ids, which the replies (errors included) refer to
        self._sent = list(self._messages(record, node_ids, MessageType.TRAIN, server_round))
        return self._sent

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

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        screened = screen_replies(server_round, replies, self._sent, self.phi, self.weighted_by_key,
                                  self.max_update_norm, self.describe, self.order_key)
        limit_influence(server_round, screened, self.phi, *self.influence, self.describe)
        counts = screened.counts
        n = [weight for _, _, weight in screened.good]
        log(INFO, "aggregate_train: %d good replies; %d errors, %d timeouts, %d dropped",
            counts["replies"], counts["errors"], counts["timeouts"], counts["dropped"])
        skip = None
        if len(screened.good) < self.min_train_clients:
            skip = f"{len(screened.good)} good replies, min-train-clients = {self.min_train_clients}"
        elif not screened.good or (self.aggregation == "examples" and sum(n) <= 0):
            skip = "the good replies report no training examples"
        elif robust.too_few(self.robust, len(screened.good)):
            skip = robust.too_few(self.robust, len(screened.good))
        if skip is not None:
            log(WARNING, "round %d skipped (%s): theta and m unchanged", server_round, skip)
            metrics = MetricRecord({**counts, "skipped": 1})
            if self.round_metrics_fn:
                self.round_metrics_fn(server_round, metrics)
            return None, metrics
        d = robust.aggregate(self.robust, self.phi, [model for _, model, _ in screened.good], n,
                             self.aggregation, server_round)
        global_gc_(d, self.global_gc_layers, self.gc_vectors)
        server_step_(self.theta, self.m, d, self.lam, self.eta)
        for k, v in screened.good[0][1].items():  # non-float buffers: from the first reply (SPEC 1.1)
            if not v.is_floating_point():
                self.theta[k] = v
        self._theta_record = ArrayRecord(self.theta)
        metrics = safe_metrics(self.train_metrics_aggr_fn, [msg.content for msg, _, _ in screened.good],
                               self.weighted_by_key)
        for k, v in {**counts, "skipped": 0}.items():
            metrics[k] = v
        if self.round_metrics_fn:
            self.round_metrics_fn(server_round, metrics)
        return self._theta_record, metrics

    # --- federated evaluation: same seeded sampling, screened replies ---------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0:
            return []
        node_ids = self.sample(grid, self.fraction_evaluate, self.min_evaluate_nodes)
        log(INFO, "configure_evaluate: sampled %d nodes (partitions %s)", len(node_ids),
            [self.partition_of.get(n, f"node {n}") for n in node_ids])
        config = ConfigRecord(dict(config))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._messages(record, node_ids, MessageType.EVALUATE, server_round)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        good = []
        for msg in replies:
            node = self.describe(msg.metadata.src_node_id)
            if msg.has_error():
                log(WARNING, "round %d: evaluation on %s failed: %s", server_round, node,
                    short_reason(msg.error.reason))
                continue
            records = list(msg.content.metric_records.values())
            n = records[0].get(self.weighted_by_key) if len(records) == 1 else None
            if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0:
                log(WARNING, "round %d: dropped the evaluation reply of %s: expected one MetricRecord "
                    "with '%s' >= 0", server_round, node, self.weighted_by_key)
                continue
            good.append(msg.content)
        if not good:
            return None
        return safe_metrics(self.evaluate_metrics_aggr_fn, good, self.weighted_by_key)
