"""Build the strategy for a resolved run config from the method's parts (`methods`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

import methods
from feddata.population import ClientPopulation
from methods.registry import parse_objective

from .client_state import ClientStateRounds
from .nodes import Nodes
from .round_loop import MethodStrategy


def build_strategy(cfg: dict[str, Any], model: nn.Module, **fedavg_kwargs) -> MethodStrategy:
    """The round loop around the server rule `server-rule` names (the method's by default)."""
    rule = methods.SERVER_RULES[cfg["server-rule"]](cfg, model)
    population = None
    if cfg["dynamic-replace-prob"] > 0:
        population = ClientPopulation(cfg["dynamic-replace-prob"], cfg["dynamic-replace-every"],
                                      cfg["dynamic-pool-factor"], seed=cfg["seed"])
    nodes = Nodes(seed=cfg["seed"], min_available_nodes=cfg["min-train-nodes"],
                  node_wait_timeout=cfg["node-wait-timeout"],
                  identify_nodes=rule.sampling == "seeded", population=population,
                  sampling=rule.sampling)
    codec = methods.uplink_codec(cfg)  # e.g. FedPAQ's: w_i = phi + Q(d_i) before screening
    client_state = None  # which version of its own state each client starts from
    if any(methods.CLIENT_PARTS[p].client_state for p in parse_objective(cfg["client-objective"])):
        client_state = ClientStateRounds(checkpoints=cfg["checkpoint-every"] > 0)
    return MethodStrategy(
        rule, nodes=nodes, client_state=client_state, lr=cfg["lr"], lr_decay=cfg["lr-decay"],
        min_train_clients=cfg["min-train-clients"], max_update_norm=cfg["max-update-norm"],
        update_norm_ratio=cfg["update-norm-ratio"], num_examples_ratio=cfg["num-examples-ratio"],
        update_clip_ratio=cfg["update-clip-ratio"],
        fraction_train=cfg["fraction-train"], fraction_evaluate=cfg["fraction-evaluate"],
        min_train_nodes=cfg["min-train-nodes"], min_evaluate_nodes=cfg["min-evaluate-nodes"],
        min_available_nodes=cfg["min-train-nodes"],
        uplink=codec.decoder(cfg) if codec else None,
        **fedavg_kwargs,
    )


def LookaheadFedAvg(  # noqa: N802  (the strategy's former class name; tests build it this way)
    *, lam: float = 0.0, eta: float = 1.0, lookahead: bool = False,
    aggregation: str = "examples", global_gc_layers: Sequence[str] = (),
    gc_vectors: str = "center", lr: float = 0.1, lr_decay: float = 1.0, seed: int = 0,
    node_wait_timeout: float = 120.0, identify_nodes: bool = False, population=None,
    min_train_clients: int = 1, max_update_norm: float = 0.0,
    update_norm_ratio: float = 10.0, num_examples_ratio: float = 10.0, robust_config=None,
    **fedavg_kwargs,
) -> MethodStrategy:
    """The momentum server rule (FedAvg, FedAvgM, FedACG, FedAGM, global GC) from keyword values:
    lam = 0, eta = 1, no global GC: FedAvg. lookahead = False, lam > 0: FedAvgM.
    lookahead = True: FedACG (FedAGM with eta = tau)."""
    from methods.momentum import MomentumRule

    rule = MomentumRule.with_values(lam=lam, eta=eta, lookahead=lookahead, aggregation=aggregation,
                                    global_gc_layers=global_gc_layers, gc_vectors=gc_vectors,
                                    robust=robust_config)
    fedavg_kwargs.setdefault("min_available_nodes", fedavg_kwargs.get("min_train_nodes", 2))
    nodes = Nodes(seed=seed, min_available_nodes=fedavg_kwargs["min_available_nodes"],
                  node_wait_timeout=node_wait_timeout, identify_nodes=identify_nodes,
                  population=population)
    return MethodStrategy(rule, nodes=nodes, lr=lr, lr_decay=lr_decay,
                          min_train_clients=min_train_clients, max_update_norm=max_update_norm,
                          update_norm_ratio=update_norm_ratio,
                          num_examples_ratio=num_examples_ratio, **fedavg_kwargs)
