"""Build the strategy and the static client train config for a resolved run config."""

from __future__ import annotations

from typing import Any

from flwr.app import ConfigRecord
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedYogi
from torch import nn

from feddata.population import ClientPopulation
from models.centralization import borderline_index, gc_layer_names

from .lookahead_fedavg import LookaheadFedAvg, RoundConfig

_FLOWER = {"fedadam": FedAdam, "fedyogi": FedYogi, "fedadagrad": FedAdagrad}


class _PerRoundConfig(RoundConfig):
    """Gives Flower's own strategies our per-round client config (decayed lr, round number)."""

    def configure_train(self, server_round, arrays, config, grid):
        return super().configure_train(server_round, arrays, self.round_config(server_round, config), grid)


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
        baseline = type(_FLOWER[cfg["method"]].__name__, (_PerRoundConfig, _FLOWER[cfg["method"]]), {})
        strategy = baseline(eta=cfg["eta"], tau=cfg["fedopt-tau"], **common)
        strategy.lr, strategy.lr_decay = cfg["lr"], cfg["lr-decay"]
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
        node_wait_timeout=cfg["node-wait-timeout"], identify_nodes=True, **common,
    )
