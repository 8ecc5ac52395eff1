"""The strategy: Flower's round loop around a method's parts (one class for every method).

Each train round: sample nodes (`nodes`), broadcast the server rule's phi and its extra records,
screen the replies and the extra records the rule needs (`reply_screen`), hand the good ones to
the server rule, which returns the next theta (docs/algorithms.md #server-round). A round with
fewer than `min_train_clients` good replies is skipped. `start` is Flower's `Strategy.start`
loop, resumable from `state_dict()`. The server maths lives in the server rule (`methods`) and
in `server_update` (plain PyTorch).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result
from flwr.serverapp.strategy.strategy_utils import log_strategy_start_info

from models.wire import state_view
from server_math.influence import claim_bound, limit_influence
from server_math.reply_screen import screen_metrics, screen_replies, short_reason
from server_math.step_size import distance, norm, step_sizes

from .nodes import Nodes
from .state_check import check_server_state


def safe_metrics(aggr_fn, contents: list[RecordDict], weight_key: str) -> MetricRecord:
    """The clients' metrics aggregated by `aggr_fn`, or empty when they cannot be (odd replies)."""
    if not contents:
        return MetricRecord()
    try:
        return aggr_fn(contents, weight_key)
    except Exception as err:  # metrics are informational: never let them stop a run
        log(WARNING, "client metrics not aggregated: %s: %s", type(err).__name__, err)
        return MetricRecord()


def _count(n: int, noun: str) -> str:
    """'1 reply', '2 replies', '0 errors'."""
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {noun if n == 1 else plural}"


class NothingLearned(RuntimeError):
    """The run stops: `max_skipped_rounds` rounds in a row aggregated no reply, or no round did
    (docs/results.md#runs-that-learn-nothing)."""


class RoundConfig:
    """Mixin: each round's client config = the given config + `lr * lr_decay^(t-1)` + the round."""

    lr: float = 0.0
    lr_decay: float = 1.0

    def round_config(self, server_round: int, config: ConfigRecord) -> ConfigRecord:
        out = ConfigRecord(dict(config))
        out["lr"] = self.lr * self.lr_decay ** (server_round - 1)
        out["server-round"] = server_round
        return out


class MethodStrategy(RoundConfig, FedAvg):
    """A Flower strategy whose server update is `rule` (a `methods.ServerRule`) and whose nodes
    are sampled by `nodes` (a `strategies.nodes.Nodes`)."""

    def __init__(self, rule, *, nodes: Nodes | None = None, lr: float = 0.1,
                 lr_decay: float = 1.0, min_train_clients: int = 1, max_update_norm: float = 0.0,
                 update_norm_ratio: float = 10.0, num_examples_ratio: float = 10.0,
                 update_clip_ratio: float = 0.0, record_norm_ratio: float = 0.0,
                 up_records: Mapping | None = None, client_state=None, uplink=None,
                 max_skipped_rounds: int = 0, **fedavg_kwargs) -> None:
        fedavg_kwargs.setdefault("min_available_nodes", fedavg_kwargs.get("min_train_nodes", 2))
        super().__init__(**fedavg_kwargs)
        self.rule = rule
        self.nodes = nodes or Nodes(min_available_nodes=self.min_available_nodes,
                                    sampling=rule.sampling)
        self.lr, self.lr_decay = lr, lr_decay
        self.min_train_clients = min_train_clients
        # rounds in a row without an update that stop the run (NothingLearned); 0 = never
        self.max_skipped_rounds = max_skipped_rounds
        self.last_skip = ""  # why the last skipped round was skipped
        # what the skipped rounds since the last aggregated one left out (counts summed; the
        # NothingLearned hint names the likely cause from them)
        self.skipped_counts: dict[str, int] = {}
        self.max_update_norm = max_update_norm
        self.influence = (update_norm_ratio, num_examples_ratio)  # influence.limit_influence
        # The largest client partition the server computed (server_app, num-examples-check): no
        # honest claim of num-examples is above it; 0 = unknown, claims are not checked.
        self.max_num_examples = 0.0
        self.update_clip_ratio = update_clip_ratio
        # The rule's extra reply records: name -> the layout declared for it (reply_screen.
        # record_layouts), and the records whose norm is limited by record-norm-ratio.
        if rule is not None and rule.up and set(up_records or {}) != set(rule.up):
            raise ValueError(f"server rule '{rule.name}' needs the records {list(rule.up)}: give "
                             "their layouts (up_records = reply_screen.record_layouts(rule.up, "
                             "model.named_parameters(), model.state_dict()))")
        self.up_records = dict(up_records or {})
        self.record_norm_ratio = record_norm_ratio
        self._theta_record: ArrayRecord | None = None  # the record theta was last returned as
        self._phi = None  # the last broadcast point, name -> tensor (screening measures from it)
        self._sent: list[Message] = []  # the current train round's instructions
        self._node_counts: dict[str, int] = {}  # Nodes.counts() at this round's sampling
        # Called with (round, metrics) after every aggregate_train, skipped rounds included.
        self.round_metrics_fn: Callable[[int, MetricRecord], None] | None = None
        # strategies.client_state_rounds.ClientStateRounds when a client part keeps per-client state
        self.client_state = client_state
        # the decoder of the run's uplink codec (methods.uplink_codec), else None: decodes the
        # replies' models
        self.uplink = uplink

    def summary(self) -> None:
        log(INFO, "\t├──> Server rule: %s", self.rule.describe())
        log(INFO, "\t├──> Replies: at least %d good ones per round, max update norm %s",
            self.min_train_clients, self.max_update_norm or "unlimited")
        super().summary()

    # --- state (checkpoints) ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The server rule's state (e.g. theta, m, phi) and the node sampling RNG: plain tensors,
        numbers and tuples."""
        if self._theta_record is None:
            raise RuntimeError("no state yet: the strategy has not started")
        extra = self.client_state.state_dict() if self.client_state else {}
        return {**self.rule.state_dict(), **self.nodes.state_dict(), **extra}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rule.load_state_dict(state)
        self.nodes.load_state_dict(state)
        if self.client_state:
            self.client_state.load_state_dict(state)
        self._theta_record = self.rule.theta_record()

    # --- the round loop ---------------------------------------------------------------------
    def start(
        self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
        train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None, *,
        first_round: int = 1, round_end_fn: Callable[[int, ArrayRecord], None] | None = None,
    ) -> Result:
        """Flower's `Strategy.start` loop, run from `first_round` to `num_rounds`: a copy,
        held to the installed Flower's by tests/test_flower_loop.py (why it is one:
        docs/extending.md#flowers-loop).

        `first_round = 1`: a fresh run from `initial_arrays` (evaluated as round 0). Later: a
        resumed run, from the state given to `load_state_dict` (`initial_arrays` is not used).
        `round_end_fn(round, theta)` is called after each round's evaluation (checkpoints).
        """
        log(INFO, "Starting %s strategy%s:", type(self).__name__,
            f" (resumed at round {first_round})" if first_round > 1 else "")
        log_strategy_start_info(num_rounds, initial_arrays, train_config, evaluate_config)
        self.summary()
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        result = Result()
        t_start = time.time()
        if first_round == 1:
            self._start_rule(initial_arrays)
            if evaluate_fn:
                res = evaluate_fn(0, initial_arrays)
                log(INFO, "Initial global evaluation results: %s", res)
                if res is not None:
                    result.evaluate_metrics_serverapp[0] = res
        elif self._theta_record is None:
            raise RuntimeError("resuming needs the strategy's state: call load_state_dict first")
        else:  # (a checkpoint written before the state was checked may hold NaN)
            self.check_state(f"in the checkpoint of round {first_round - 1}")
        arrays = result.arrays = self._theta_record
        skipped_in_a_row = aggregated = 0

        for server_round in range(first_round, num_rounds + 1):
            log(INFO, "")
            log(INFO, "[ROUND %s/%s]", server_round, num_rounds)
            replies = grid.send_and_receive(
                messages=self.configure_train(server_round, arrays, train_config, grid),
                timeout=timeout)
            agg_arrays, train_metrics = self.aggregate_train(server_round, replies)
            if agg_arrays is not None:
                self.check_state(f"after the update of round {server_round}")
                result.arrays = arrays = agg_arrays
                skipped_in_a_row, aggregated = 0, aggregated + 1
            elif self.fraction_train > 0:
                skipped_in_a_row += 1
                self._stop_if_nothing_moves(server_round, skipped_in_a_row)
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
                log(INFO, "Global evaluation")
                res = evaluate_fn(server_round, arrays)
                log(INFO, "\t└──> MetricRecord: %s", res)
                if res is not None:
                    result.evaluate_metrics_serverapp[server_round] = res
            if round_end_fn:
                round_end_fn(server_round, arrays)
        if aggregated == 0 and first_round <= num_rounds and self.fraction_train > 0:
            raise NothingLearned(
                f"no round of {first_round}-{num_rounds} aggregated a reply (the last: "
                f"{self.last_skip}): the model is the one the run started from. "
                + self._skip_hint())
        log(INFO, "")
        log(INFO, "Strategy execution finished in %.2fs", time.time() - t_start)
        return result

    def _stop_if_nothing_moves(self, server_round: int, skipped_in_a_row: int) -> None:
        if self.max_skipped_rounds and skipped_in_a_row >= self.max_skipped_rounds:
            raise NothingLearned(
                f"{skipped_in_a_row} rounds in a row ({server_round - skipped_in_a_row + 1}-"
                f"{server_round}) aggregated no reply (the last: {self.last_skip}): the model "
                f"stopped moving (max-skipped-rounds = {self.max_skipped_rounds}). "
                + self._skip_hint())

    def _skip_hint(self) -> str:
        """The likely cause, from what the skipped rounds left out: only replies dropped as
        non-finite or too large point to the settings (lr, beta, alpha); errors, timeouts,
        malformed replies and rounds that sampled no node point to the nodes."""
        c = self.skipped_counts
        diverged = c.get("dropped-non-finite", 0) + c.get("dropped-norm", 0)
        causes = []
        if diverged:
            causes.append(f"{_count(diverged, 'reply')} non-finite or too large: settings "
                          "that make the local update diverge (lr, beta, alpha, ...)")
        if c.get("dropped", 0) > diverged:
            causes.append(f"{_count(c['dropped'] - diverged, 'reply')} malformed or "
                          "repeated (the clients' app or its version)")
        if c.get("errors") or c.get("timeouts"):
            causes.append(f"{_count(c.get('errors', 0), 'error')} and "
                          f"{_count(c.get('timeouts', 0), 'timeout')}: the clients' own (each "
                          "node's error is logged with it)")
        if c.get("unsampled"):
            causes.append(f"{_count(c['unsampled'], 'round')} sampled no node: the nodes "
                          "were refused (each refusal is logged with its reason) or too few "
                          "connected")
        if not causes:
            causes.append("too few good replies per round for min-train-clients, or the server "
                          "rule skipped the round (the reason above)")
        return "The log says why each reply was left out: " + "; ".join(causes) + "."

    def check_state(self, when: str) -> None:
        """Stop the run (ServerStateNotFinite) when theta or the rule's state holds NaN or Inf:
        nothing after it (evaluation, checkpoint, final model) sees a broken state."""
        state = {"theta": state_view(self._theta_record), **self.rule.state_to_check()}
        robust = getattr(self.rule, "robust", None)  # (the rules with a server step or DP)
        check_server_state(state, when, eta=getattr(self.rule, "eta", None),
                           dp_noise_multiplier=getattr(robust, "dp_noise_multiplier", 0.0),
                           dp_clipping_norm=getattr(robust, "dp_clipping_norm", 0.0))

    def _start_rule(self, arrays: ArrayRecord) -> None:
        self.rule.start(arrays)
        if self.client_state:
            self.client_state.start()
        self._theta_record = arrays

    def _construct(self, content: RecordDict, node_ids: list[int], message_type: str):
        return self._construct_messages(content, node_ids, message_type)

    # --- training ---------------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._sent, self._node_counts = [], {}
        if self.fraction_train == 0.0:
            return []
        if self._theta_record is None or arrays is not self._theta_record:  # a replaced model
            self._start_rule(arrays)
        payload, self._phi = self.rule.broadcast(server_round)
        node_ids = self.nodes.sample(grid, self.fraction_train, self.min_train_nodes,
                                     self._construct)
        self._node_counts = self.nodes.counts()  # counted in the round's row
        log(INFO, "configure_train: sampled %d nodes (%s)", len(node_ids),
            self.nodes.describe_sample(node_ids))
        if len(node_ids) < self.min_train_clients:  # pragma: no mutate (it only logs)
            log(WARNING, "round %d: %d nodes sampled but min-train-clients = %d: the round will "
                "be skipped", server_round, len(node_ids), self.min_train_clients)
        record = RecordDict({self.arrayrecord_key: payload,
                             self.configrecord_key: self.round_config(server_round, config)})
        for name, extra in self.rule.down_records(server_round).items():
            record[name] = extra  # a method's extra payload: counted by the byte meter
        # kept: the grid sets their message ids, which the replies (errors included) refer to
        self._sent = self.nodes.messages(record, node_ids, MessageType.TRAIN, server_round,
                                         self._construct, self.configrecord_key)
        if self.client_state:  # which version of its own state each client starts from
            self.client_state.stamp(self._sent, self.nodes.partition_of, self.configrecord_key)
        return self._sent

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        if self.client_state:  # a client lacks the state the run continues from: stop
            self.client_state.check_errors(replies)
        undecodable = {}  # w_i = phi + Q(d_i), before anything looks at the models
        if self.uplink is not None:
            undecodable = self.uplink.decode_replies(replies, self._phi)
        screened = screen_replies(server_round, replies, self._sent, self._phi,
                                  self.weighted_by_key, self.max_update_norm,
                                  self.nodes.describe, self.nodes.order_key,
                                  records=self.up_records, centers=self.rule.up_centers(),
                                  metrics=self.rule.up_metrics, undecodable=undecodable,
                                  mean_weights=self._mean_weights,
                                  mean_out=self.rule.mean_buffer)
        limit_influence(server_round, screened, self._phi, *self.influence, self.nodes.describe,
                        max_weight=self.max_num_examples, clip_ratio=self.update_clip_ratio,
                        record_ratio=self.record_norm_ratio,
                        records=[n for n, r in self.rule.up.items() if r.limit_norm])
        counts = screened.counts
        log(INFO, "aggregate_train: %d good replies; %d errors, %d timeouts, %d dropped",
            counts["replies"], counts["errors"], counts["timeouts"], counts["dropped"])
        arrays, skip = None, None
        if len(screened.good) < self.min_train_clients or not screened.good:
            skip = (f"{len(screened.good)} good replies, "
                    f"min-train-clients = {self.min_train_clients}")
        else:
            self.rule.num_clients = self.nodes.num_slots  # N: the partitions of the federation
            self.rule.client_ids = self._partitions_of(screened.good)
            self.rule.prepared_mean = screened.prepared
            # the step's yardsticks, before the rule updates phi, theta and the mean in place
            mean_norm = self._client_update_norm(screened)
            theta_before = (self._theta_record.to_torch_state_dict()
                            if self._theta_record is not None and self._phi is not None else None)
            ahead = distance(self._phi, theta_before) if theta_before is not None else 0.0
            try:
                arrays, skip = self.rule.aggregate(server_round, screened.good, self._phi,
                                                   [screened.up.get(id(m), {})
                                                    for m, _, _ in screened.good])
            finally:
                self.rule.prepared_mean = None
        if skip is not None:
            for key, v in {**counts, "unsampled": int(not self._sent)}.items():
                self.skipped_counts[key] = self.skipped_counts.get(key, 0) + v
            self.last_skip = (f"round {server_round}: {skip}; {counts['errors']} errors, "
                              f"{counts['timeouts']} timeouts, {counts['dropped']} dropped")
            log(WARNING, "round %d skipped (%s): the model and the server state are unchanged",
                server_round, skip)
            metrics = MetricRecord({**counts, **self._node_counts, "skipped": 1})
            if self.round_metrics_fn:
                self.round_metrics_fn(server_round, metrics)
            return None, metrics
        sizes = {} if theta_before is None else step_sizes(
            theta_before, arrays.to_torch_state_dict(), ahead, mean_norm)
        self._theta_record = arrays
        self.skipped_counts = {}
        if self.client_state:
            self.client_state.accept(server_round, screened.good, self._sent)
        reported = screen_metrics(server_round, [(msg, n) for msg, _, n in screened.good],
                                  self.weighted_by_key, self.nodes.describe)
        metrics = safe_metrics(self.train_metrics_aggr_fn, reported, self.weighted_by_key)
        for k, v in {**counts, **self._node_counts, **sizes, "skipped": 0}.items():
            metrics[k] = v
        if self.round_metrics_fn:
            self.round_metrics_fn(server_round, metrics)
        return arrays, metrics

    def _client_update_norm(self, screened) -> float | None:
        """||sum_i p_i w_i - phi|| with the rule's weights, where the screening's pass computed
        that very mean (server_math.step_size); None otherwise (a robust rule, clipped or
        capped replies)."""
        prepared = screened.prepared
        if prepared is None:
            return None
        weights = self._mean_weights([n for _, _, n in screened.good])
        if weights is None or not prepared.matches(self._phi, [w for _, w, _ in screened.good],
                                                   weights):
            return None
        return norm(prepared.mean)

    def _mean_weights(self, num_examples: list[float]) -> list[float] | None:
        """The weights of the rule's mean if `limit_influence` drops and clips none of the
        replies of these claims: the claims capped as it caps them."""
        bound = claim_bound(num_examples, self.max_num_examples, self.influence[1])
        if bound:
            num_examples = [min(n, bound) for n in num_examples]
        return self.rule.mean_weights(num_examples)

    def _partitions_of(self, good: list) -> list[int | None]:
        """The partition (client) of each good reply: the one its train message named, else
        its node's (None when unknown)."""
        sent = {}
        for msg in self._sent:
            pid = msg.content[self.configrecord_key].get(
                "partition-id", self.nodes.partition_of.get(msg.metadata.dst_node_id))
            sent[msg.metadata.message_id] = None if pid is None else int(pid)
        return [sent.get(msg.metadata.reply_to_message_id) for msg, _, _ in good]

    # --- federated evaluation: same sampling, screened replies ------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0:
            return []
        node_ids = self.nodes.sample(grid, self.fraction_evaluate, self.min_evaluate_nodes,
                                     self._construct)
        log(INFO, "configure_evaluate: sampled %d nodes (%s)", len(node_ids),
            self.nodes.describe_sample(node_ids))
        config = ConfigRecord(dict(config))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self.nodes.messages(record, node_ids, MessageType.EVALUATE, server_round,
                                   self._construct, self.configrecord_key)

    def aggregate_evaluate(self, server_round: int,
                           replies: Iterable[Message]) -> MetricRecord | None:
        good = []
        for msg in replies:
            node = self.nodes.describe(msg.metadata.src_node_id)
            if msg.has_error():
                log(WARNING, "round %d: evaluation on %s failed: %s", server_round, node,
                    short_reason(msg.error.reason))
                continue
            records = list(msg.content.metric_records.values())
            n = records[0].get(self.weighted_by_key) if len(records) == 1 else None
            bad = isinstance(n, bool) or not isinstance(n, (int, float))
            if bad or not math.isfinite(n) or n < 0:
                log(WARNING, "round %d: dropped the evaluation reply of %s: expected one "
                    "MetricRecord with '%s' >= 0", server_round, node, self.weighted_by_key)
                continue
            good.append((msg, min(n, self.max_num_examples) if self.max_num_examples else n))
        if not good:
            return None
        reported = screen_metrics(server_round, good, self.weighted_by_key, self.nodes.describe)
        return safe_metrics(self.evaluate_metrics_aggr_fn, reported, self.weighted_by_key)
