"""Build the strategy and the static client train config for a resolved run config."""

from __future__ import annotations

from logging import WARNING
from typing import Any

from flwr.app import ConfigRecord, MetricRecord
from flwr.common import log
from flwr.serverapp.exception import AggregationError, InconsistentMessageReplies
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedYogi
from torch import nn

from feddata.population import ClientPopulation
from models.centralization import borderline_index, gc_layer_names

from .lookahead_fedavg import LookaheadFedAvg, RoundConfig, to_state, wait_for_nodes
from .reply_screen import limit_influence, screen_replies
from .robust import RobustConfig

_FLOWER = {"fedadam": FedAdam, "fedyogi": FedYogi, "fedadagrad": FedAdagrad}


class _ScreenedBaseline(RoundConfig):
    """Gives Flower's own strategies our per-round client config (decayed lr, round number) and
    our reply screening: bad replies are dropped before Flower's aggregation (which would raise on
    them), and a round with fewer than `min_train_clients` good replies is skipped."""

    min_train_clients: int = 1
    max_update_norm: float = 0.0
    node_wait_timeout: float = 120.0
    influence: tuple[float, float] = (10.0, 10.0)  # reply_screen.limit_influence
    round_metrics_fn = None

    def configure_train(self, server_round, arrays, config, grid):
        wait_for_nodes(grid, self.fraction_train, self.min_train_nodes, self.min_available_nodes,
                       self.node_wait_timeout)  # bounded: Flower's own sampling waits forever
        messages = list(super().configure_train(
            server_round, arrays, self.round_config(server_round, config), grid))
        self._phi = to_state(arrays)
        self._sent = messages  # the grid sets their message ids, which the replies refer to
        return messages

    def configure_evaluate(self, server_round, arrays, config, grid):
        if self.fraction_evaluate > 0:
            wait_for_nodes(grid, self.fraction_evaluate, self.min_evaluate_nodes,
                           self.min_available_nodes, self.node_wait_timeout)
        return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        screened = screen_replies(server_round, replies, self._sent, self._phi, self.weighted_by_key,
                                  self.max_update_norm, lambda n: f"node {n}", lambda n: n)
        limit_influence(server_round, screened, self._phi, *self.influence, lambda n: f"node {n}")
        for msg, _, n in screened.good:  # a capped weight is what Flower's aggregation uses
            next(iter(msg.content.metric_records.values()))[self.weighted_by_key] = n
        arrays, metrics, skip = None, None, None
        if len(screened.good) < self.min_train_clients or not screened.good:
            skip = f"{len(screened.good)} good replies, min-train-clients = {self.min_train_clients}"
        else:
            try:
                arrays, metrics = super().aggregate_train(server_round, [m for m, _, _ in screened.good])
            except (InconsistentMessageReplies, AggregationError, ArithmeticError, ValueError) as err:
                skip = f"Flower's aggregation refused the replies: {err}"
        if skip is not None:
            log(WARNING, "round %d skipped (%s): the model is unchanged", server_round, skip)
        metrics = MetricRecord() if metrics is None else metrics
        for k, v in {**screened.counts, "skipped": int(skip is not None)}.items():
            metrics[k] = v
        if self.round_metrics_fn:
            self.round_metrics_fn(server_round, metrics)
        return arrays, metrics


def client_train_config(cfg: dict[str, Any], model: nn.Module) -> ConfigRecord:
    """What every sampled client receives (the strategy adds the round's `lr` and `server-round`)."""
    if cfg["local-gc"] == "none":
        local_gc_layers = 0
    elif cfg["local-gc"] == "all":
        local_gc_layers = len(list(model.parameters()))
    else:  # "features": every tensor before the borderline (local GC sets are always a prefix)
        local_gc_layers = borderline_index(model, cfg["gc-borderline"])
    return ConfigRecord({
        "local-epochs": cfg["local-epochs"], "local-iterations": cfg["local-iterations"],
        "batch-size": cfg["batch-size"], "alpha": cfg["alpha"], "beta": cfg["beta"],
        "grad-clip": cfg["grad-clip"], "local-momentum": cfg["local-momentum"],
        "weight-decay": cfg["weight-decay"], "local-gc-layers": local_gc_layers,
        "gc-vectors": cfg["gc-vectors"], "seed": cfg["seed"],
    })


def build_strategy(cfg: dict[str, Any], model: nn.Module, **fedavg_kwargs) -> FedAvg:
    """Our LookaheadFedAvg for every SPEC 1.5 method; Flower's own FedOpt family as baselines."""
    common = dict(
        fraction_train=cfg["fraction-train"], fraction_evaluate=cfg["fraction-evaluate"],
        min_train_nodes=cfg["min-train-nodes"], min_evaluate_nodes=cfg["min-evaluate-nodes"],
        min_available_nodes=cfg["min-train-nodes"], **fedavg_kwargs,
    )
    if cfg["method"] in _FLOWER:
        baseline = type(_FLOWER[cfg["method"]].__name__, (_ScreenedBaseline, _FLOWER[cfg["method"]]), {})
        strategy = baseline(eta=cfg["eta"], tau=cfg["fedopt-tau"], **common)
        strategy.lr, strategy.lr_decay = cfg["lr"], cfg["lr-decay"]
        strategy.min_train_clients = cfg["min-train-clients"]
        strategy.max_update_norm = cfg["max-update-norm"]
        strategy.node_wait_timeout = cfg["node-wait-timeout"]
        strategy.influence = (cfg["update-norm-ratio"], cfg["num-examples-ratio"])
        return strategy
    population = None
    if cfg["dynamic-replace-prob"] > 0:
        population = ClientPopulation(cfg["dynamic-replace-prob"], cfg["dynamic-replace-every"],
                                      cfg["dynamic-pool-factor"], seed=cfg["seed"])
    return LookaheadFedAvg(
        population=population,
        lam=cfg["lam"], eta=cfg["eta"], lookahead=cfg["lookahead"],
        aggregation=cfg["aggregation"],
        global_gc_layers=gc_layer_names(model, cfg["global-gc"], cfg["gc-borderline"]),
        gc_vectors=cfg["gc-vectors"], lr=cfg["lr"], lr_decay=cfg["lr-decay"], seed=cfg["seed"],
        node_wait_timeout=cfg["node-wait-timeout"], identify_nodes=True,
        min_train_clients=cfg["min-train-clients"], max_update_norm=cfg["max-update-norm"],
        update_norm_ratio=cfg["update-norm-ratio"], num_examples_ratio=cfg["num-examples-ratio"],
        robust_config=robust_config(cfg), **common,
    )


def robust_config(cfg: dict[str, Any]) -> RobustConfig:
    """The run config's robust-aggregation and DP keys (strategies/robust.py)."""
    return RobustConfig(
        aggregator=cfg["robust-aggregator"], trim=cfg["trim-fraction"],
        num_malicious=cfg["num-malicious"], multikrum_select=cfg["multikrum-select"],
        dp_clipping_norm=cfg["dp-clipping-norm"], dp_noise_multiplier=cfg["dp-noise-multiplier"],
        seed=cfg["seed"])
