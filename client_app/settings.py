"""The client's settings, made once per process from the run config: the local update's knobs
(`LocalConfig`) and the method's client parts (`methods`, from the `client-objective` key).

The run config is the one source: the server's train instructions carry only what changes per
round (the decayed `lr`, `server-round`, with dynamic clients the partition to train on) and the
method's extra records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import methods
from feddata.settings import DataSettings
from methods.registry import parse_objective
from models.centralization import borderline_index
from run_config import resolve

from .local_update import LocalConfig


def node_client_id(node: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The node config's client id and N: `client-id` / `num-clients`, the older
    `partition-id` / `num-partitions` read as the same settings (None where not given); one
    setting given by both names with different values is an error naming both
    (docs/deployment.md#client-identity)."""
    return (_node_value(node, ("client-id", "partition-id")),
            _node_value(node, ("num-clients", "num-partitions")))


def _node_value(node: Mapping[str, Any], names: tuple[str, str]) -> int | None:
    given = {name: int(node[name]) for name in names if name in node}
    if len(set(given.values())) > 1:
        raise ValueError(f"the node config has {names[0]} = {given[names[0]]} and {names[1]} = "
                         f"{given[names[1]]}, two names of one setting: give one "
                         "(docs/deployment.md#client-identity)")
    return next(iter(given.values()), None)


@dataclass(frozen=True)
class ClientSettings:
    cfg: dict[str, Any]  # the resolved run config
    parts: tuple  # the method's client parts (methods.ClientPart instances), in config order
    data: DataSettings  # the data keys, as the data package takes them

    def local_config(self, model: nn.Module, lr: float) -> LocalConfig:
        return local_config(self.cfg, model, lr)


def local_gc_layers(cfg: dict[str, Any], model: nn.Module) -> int:
    """How many leading parameter tensors get local GC (local GC sets are always a prefix)."""
    if cfg["local-gc"] == "none":
        return 0
    if cfg["local-gc"] == "all":
        return len(list(model.parameters()))
    return borderline_index(model, cfg["gc-borderline"])  # "features": before the borderline


def use_amp(cfg: dict[str, Any], device: torch.device) -> bool:
    """Whether the local update runs under amp (run config `precision`): 'amp' on a CUDA GPU
    (refused anywhere else), 'auto' where the model is on one, never with 'fp32'."""
    on_gpu = device.type == "cuda"
    if cfg["precision"] == "amp" and not on_gpu:
        raise RuntimeError(
            "run config 'precision' = 'amp' trains under fp16 autocast with a GradScaler on a "
            f"CUDA GPU, and this ClientApp trains on the {device.type} (no GPU visible, or "
            "device = 'cpu'): set precision = 'auto' (amp where a GPU is, fp32 elsewhere) or "
            "'fp32'.")
    return cfg["precision"] == "amp" or (cfg["precision"] == "auto" and on_gpu)


def local_config(cfg: dict[str, Any], model: nn.Module, lr: float) -> LocalConfig:
    return LocalConfig(
        lr=lr, local_epochs=cfg["local-epochs"], local_iterations=cfg["local-iterations"],
        batch_size=cfg["batch-size"], alpha=cfg["alpha"], grad_clip=cfg["grad-clip"],
        local_momentum=cfg["local-momentum"], weight_decay=cfg["weight-decay"],
        local_gc_layers=local_gc_layers(cfg, model), gc_vectors=cfg["gc-vectors"],
        lr_epoch_decay=cfg["lr-epoch-decay"],
        amp=use_amp(cfg, next(model.parameters()).device),
    )


def part_classes(cfg: dict[str, Any]) -> tuple[type | None, tuple[type, ...]]:
    """The classes `method_parts` builds from `cfg`: the uplink codec the config switches on
    (or None), the client parts `client-objective` names."""
    names = parse_objective(cfg["client-objective"])
    return methods.uplink_codec(cfg), tuple(methods.CLIENT_PARTS[name] for name in names)


def client_parts(cfg: dict[str, Any]) -> tuple:
    """The client parts `client-objective` names, each built with its settings object from the
    resolved config (a run config, or the clients' share of a named strategy's settings)."""
    return tuple(part(part.Settings.from_config(cfg)) for part in part_classes(cfg)[1])


def method_parts(cfg: dict[str, Any], parts: tuple | None = None) -> tuple[Any, tuple]:
    """(the uplink codec the config names, or None; the parts the client step runs): the codec
    first (e.g. FedPAQ's quantization: its end() runs before the others'), then the client parts
    of `client-objective` (`parts`: those already built for this config)."""
    codec_class = part_classes(cfg)[0]
    codec = codec_class(codec_class.Settings.from_config(cfg)) if codec_class else None
    parts = client_parts(cfg) if parts is None else tuple(parts)
    return codec, ((codec,) if codec else ()) + parts


@functools.lru_cache(maxsize=8)
def _settings(frozen: tuple) -> ClientSettings:
    cfg = resolve(dict(frozen))
    return ClientSettings(cfg, client_parts(cfg), DataSettings.from_config(cfg))


def settings(run_config: Mapping[str, Any]) -> ClientSettings:
    """The settings of this run (resolved once per process and run config)."""
    return _settings(tuple(sorted(run_config.items())))
