"""Fixed client replies for strategy tests: client i returns a fixed model or phi + delta_i; the
momentum rule's strategy built from keyword values (`LookaheadFedAvg`)."""

from collections.abc import Sequence

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from methods.momentum import MomentumRule
from server_math.robust import RobustConfig
from strategies import MethodStrategy, Nodes


def LookaheadFedAvg(  # noqa: N802  (the strategy's former class name)
    *, lam: float = 0.0, eta: float = 1.0, lookahead: bool = False,
    aggregation: str = "examples", global_gc_layers: Sequence[str] = (),
    gc_vectors: str = "center", lr: float = 0.1, lr_decay: float = 1.0, seed: int = 0,
    node_wait_timeout: float = 120.0, identify_nodes: bool = False, population=None,
    min_train_clients: int = 1, max_update_norm: float = 0.0,
    update_norm_ratio: float = 10.0, num_examples_ratio: float = 10.0, robust_config=None,
    **fedavg_kwargs,
) -> MethodStrategy:
    """The momentum server rule (FedAvg, FedAvgM, FedACG, FedAGM, global GC) from keyword values,
    with the round loop's own knobs (node identity, dynamic clients, screening) exposed:
    lam = 0, eta = 1, no global GC: FedAvg. lookahead = False, lam > 0: FedAvgM.
    lookahead = True: FedACG (FedAGM with eta = tau)."""
    robust = robust_config or RobustConfig()
    rule = MomentumRule(MomentumRule.Settings(
        lam=lam, eta=eta, lookahead=lookahead, aggregation=aggregation, gc_vectors=gc_vectors,
        robust_aggregator=robust.aggregator, trim_fraction=robust.trim,
        num_malicious=robust.num_malicious, multikrum_select=robust.multikrum_select,
        dp_clipping_norm=robust.dp_clipping_norm,
        dp_noise_multiplier=robust.dp_noise_multiplier, seed=robust.seed))
    rule.global_gc_layers = list(global_gc_layers)  # (by name: no model here)
    fedavg_kwargs.setdefault("min_available_nodes", fedavg_kwargs.get("min_train_nodes", 2))
    nodes = Nodes(seed=seed, min_available_nodes=fedavg_kwargs["min_available_nodes"],
                  node_wait_timeout=node_wait_timeout, identify_nodes=identify_nodes,
                  population=population)
    return MethodStrategy(rule, nodes=nodes, lr=lr, lr_decay=lr_decay,
                          min_train_clients=min_train_clients, max_update_norm=max_update_norm,
                          update_norm_ratio=update_norm_ratio,
                          num_examples_ratio=num_examples_ratio, **fedavg_kwargs)


def reply(arrays: dict, n: int) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({k: v.clone() for k, v in arrays.items()}),
                       "metrics": MetricRecord({"num-examples": n, "train-loss": float(n)})})


def fixed_models(models: list[dict], sizes: list[int]):
    """Node i always answers with models[i] (whatever was broadcast)."""
    return lambda i, msg: reply(models[i], sizes[i])


def deltas(ds: list[dict], sizes: list[int], seen: list):
    """Node i answers phi + ds[i]; every broadcast phi is recorded in `seen`."""

    def handler(i, msg):
        phi = msg.content["arrays"].to_torch_state_dict()
        seen.append((msg.content["config"]["server-round"], i, phi))
        return reply({k: phi[k] + ds[i][k] for k in phi}, sizes[i])

    return handler


def random_state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"conv": torch.randn(4, 3, 3, 3, generator=g),
            "fc.weight": torch.randn(5, 6, generator=g),
            "fc.bias": torch.randn(5, generator=g)}
