"""Build the strategy for a resolved run config: the round loop (`strategies`) around the server
rule the config names, found in the registry of methods (`methods`)."""

from __future__ import annotations

from typing import Any

from torch import nn

import methods
from feddata.population import ClientPopulation
from methods.registry import parse_objective
from server_math.reply_screen import record_layouts
from strategies.client_state import ClientStateRounds
from strategies.nodes import Nodes
from strategies.round_loop import MethodStrategy


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
                  sampling=rule.sampling, num_clients=cfg["num-clients"])
    codec = methods.uplink_codec(cfg)  # e.g. FedPAQ's: w_i = phi + Q(d_i) before screening
    client_state = None  # which version of its own state each client starts from
    if any(methods.CLIENT_PARTS[p].client_state for p in parse_objective(cfg["client-objective"])):
        client_state = ClientStateRounds(checkpoints=cfg["checkpoint-every"] > 0)
    return MethodStrategy(
        rule, nodes=nodes, client_state=client_state, lr=cfg["lr"], lr_decay=cfg["lr-decay"],
        min_train_clients=cfg["min-train-clients"], max_update_norm=cfg["max-update-norm"],
        max_skipped_rounds=cfg["max-skipped-rounds"],
        update_norm_ratio=cfg["update-norm-ratio"], num_examples_ratio=cfg["num-examples-ratio"],
        update_clip_ratio=cfg["update-clip-ratio"], record_norm_ratio=cfg["record-norm-ratio"],
        # what the rule's reply records must hold
        up_records=record_layouts(rule.up, model.named_parameters(), model.state_dict()),
        fraction_train=cfg["fraction-train"], fraction_evaluate=cfg["fraction-evaluate"],
        min_train_nodes=cfg["min-train-nodes"], min_evaluate_nodes=cfg["min-evaluate-nodes"],
        min_available_nodes=cfg["min-train-nodes"],
        uplink=codec.decoder(cfg) if codec else None,
        **fedavg_kwargs,
    )

