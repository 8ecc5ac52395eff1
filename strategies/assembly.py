"""A strategy from a resolved run config: the one assembly of `MethodStrategy` (docs/own-app.md).

The app's ServerApp (`build_strategy`) and the named strategies (`named.Method`, `FedACG`, ...)
both take their nodes, per-client state, learning rate and reply screening from
`strategy_arguments`, so a named strategy in an app of one's own gets what the app gets: seeded
sampling, node identity, the dynamic client population, N = `num-clients`, the rounds of the
clients' own state, the uplink codec and every screening limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

import methods
from methods.registry import parse_objective
from models.centralization import ModelLayout
from server_math.reply_screen import record_layouts

from .client_state_rounds import ClientStateRounds
from .nodes import Nodes
from .population import ClientPopulation
from .round_loop import MethodStrategy


def keeps_client_state(cfg: dict[str, Any]) -> bool:
    """Whether a client part of `client-objective` keeps state per client (SCAFFOLD's c_i, ...)."""
    return any(methods.CLIENT_PARTS[p].client_state
               for p in parse_objective(cfg["client-objective"]))


def strategy_arguments(cfg: dict[str, Any], *, min_available_nodes: int,
                       identify_nodes: bool | None = None, checkpoints: bool | None = None,
                       client_data: str | None = None) -> dict[str, Any]:
    """`MethodStrategy`'s keyword arguments that the resolved config `cfg` sets: all but the
    server rule, what its replies hold (`up_records`) and Flower FedAvg's own keywords. `cfg`:
    a run config (`run_config.resolve`), or a named strategy's settings
    (`run_config.resolve_strategy`). `client_data`: the run config's client-data, which the
    nodes' reports of their own data are checked against (None, a named strategy's: not
    checked, the clients are the user's).

    `identify_nodes`: ask each node for its partition (None: where the server rule samples by
    partition, `sampling = 'seeded'`). The clients' own state is versioned by round
    (`ClientStateRounds`) where a client part keeps some and the nodes are identified; else it
    stays in each node's Context.state. `checkpoints`: whether a checkpoint of the server may
    need a client's older versions (None: where `checkpoint-every` writes checkpoints; a named
    strategy writes none, and the clients keep only their newest version).
    """
    sampling = methods.SERVER_RULES[cfg["server-rule"]].sampling
    identify = sampling == "seeded" if identify_nodes is None else identify_nodes
    population = None
    if cfg["dynamic-replace-prob"] > 0:
        population = ClientPopulation(cfg["dynamic-replace-prob"], cfg["dynamic-replace-every"],
                                      cfg["dynamic-pool-factor"], seed=cfg["seed"])
    nodes = Nodes(seed=cfg["seed"], min_available_nodes=min_available_nodes,
                  node_wait_timeout=cfg["node-wait-timeout"], identify_nodes=identify,
                  population=population, sampling=sampling, num_clients=cfg["num-clients"],
                  client_data=client_data)
    client_state = None  # which version of its own state each client starts from
    if identify and keeps_client_state(cfg):
        keep = cfg["checkpoint-every"] > 0 if checkpoints is None else checkpoints
        client_state = ClientStateRounds(checkpoints=keep)
    codec = methods.uplink_codec(cfg)  # e.g. FedPAQ's: w_i = phi + Q(d_i) before screening
    decoder = codec.decoder(codec.Settings.from_config(cfg)) if codec else None
    return dict(
        nodes=nodes, client_state=client_state, lr=cfg["lr"], lr_decay=cfg["lr-decay"],
        min_train_clients=cfg["min-train-clients"], max_update_norm=cfg["max-update-norm"],
        max_skipped_rounds=cfg["max-skipped-rounds"],
        update_norm_ratio=cfg["update-norm-ratio"], num_examples_ratio=cfg["num-examples-ratio"],
        update_clip_ratio=cfg["update-clip-ratio"], record_norm_ratio=cfg["record-norm-ratio"],
        uplink=decoder)


def rule_settings(cfg: Mapping[str, Any]) -> methods.Settings:
    """The settings object of the server rule `server-rule` names, from the resolved config
    (a run config, or a named strategy's settings: the same fields, the same values for the
    same knobs)."""
    return methods.SERVER_RULES[cfg["server-rule"]].Settings.from_config(cfg)


def build_rule(cfg: Mapping[str, Any], model: nn.Module | ModelLayout,
               state: Mapping[str, torch.Tensor] | None = None
               ) -> tuple[methods.ServerRule, dict[str, dict[str, torch.Tensor]]]:
    """The server rule `server-rule` names (the method's by default) for `model`, built with its
    settings object from `cfg` (`rule_settings`), and what each of its reply records must hold
    (`up_records`, e.g. SCAFFOLD's scaffold-dc: one tensor per parameter): the one place a rule
    is built, for the app (`build_strategy`) and the named strategies alike. `model`: the
    module, or the `ModelLayout` of a model's arrays `state` (a named strategy's
    `initial_arrays`; None: `model.state_dict()`)."""
    return make_rule(rule_settings(cfg), model, state)


def make_rule(settings: methods.Settings, model: nn.Module | ModelLayout,
              state: Mapping[str, torch.Tensor] | None = None
              ) -> tuple[methods.ServerRule, dict[str, dict[str, torch.Tensor]]]:
    """`build_rule` from the rule's settings object (`rule_settings`)."""
    rule = settings.part(settings, model)
    state = model.state_dict() if state is None else state
    return rule, record_layouts(rule.up, model.named_parameters(), state)


def build_strategy(cfg: dict[str, Any], model: nn.Module, **fedavg_kwargs) -> MethodStrategy:
    """The app's strategy: the round loop around the server rule `server-rule` names (the
    method's by default), for this project's `model`, Flower FedAvg's keywords from the run
    config (`fraction-train`, ...; `fedavg_kwargs` add the metric aggregations)."""
    rule, up_records = build_rule(cfg, model)
    return MethodStrategy(
        rule, **strategy_arguments(cfg, min_available_nodes=cfg["min-train-nodes"],
                                   client_data=cfg["client-data"]),
        up_records=up_records,
        fraction_train=cfg["fraction-train"], fraction_evaluate=cfg["fraction-evaluate"],
        min_train_nodes=cfg["min-train-nodes"], min_evaluate_nodes=cfg["min-evaluate-nodes"],
        min_available_nodes=cfg["min-train-nodes"], **fedavg_kwargs)
