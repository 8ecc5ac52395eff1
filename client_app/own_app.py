"""The client's share of a method, for a ClientApp with a training loop of its own
(docs/own-app.md): what a strategy of `strategies.named` sends in each train instruction (the
`method.*` config keys and the method's extra records), turned into the steps of your loop, on
your model, optimizer and data.

    method = LocalMethod(msg, model, context)  # `model` holds the received weights (phi)
    for x, y in loader:
        optimizer.zero_grad()
        loss = method.backward(x, y)   # the method's loss of model(x) and its backward
        method.before_step()           # the method's gradient corrections, then local GC
        optimizer.step()
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": n}), **method.end()})

`LocalMethod` is the app's own client step (`client_app.client_step.ClientStep`, which the app's
local update trains through too: docs/algorithms.md#local-update) built from the train
instruction: the same maths, in the same order.
"""

from __future__ import annotations

from logging import INFO
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.common import log
from torch import nn

from methods.parts import CONFIG_PREFIX
from models.centralization import ModelLayout
from run_config import ConfigError, resolve_client

from .client_state_store import store_for
from .client_step import ClientStep, LocalContext
from .settings import local_gc_layers, method_parts, node_client_id, part_classes

NAME, CLASSIFIER = CONFIG_PREFIX + "name", CONFIG_PREFIX + "classifier"
LR = CONFIG_PREFIX + "lr"  # the clients' learning rate, where the strategy knows it


# Flower's own strategies send no method: FedAvg, FedAvgM, FedAdam, ... (whose server update is
# theirs) train the clients plainly; FedProx sends its proximal weight under this key.
FLOWER_PROXIMAL_MU = "proximal-mu"
_told: set[str] = set()  # the INFO lines already logged in this process


def method_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The method's settings out of a train instruction's config (its `method.*` keys), typed
    and checked by the run-config keys the client side reads (`run_config.resolve_client`;
    'lr' the default where none was sent: `sent_lr`). An instruction of one of Flower's own
    strategies carries no method: then the client trains as FedAvg's does, or with FedProx's
    proximal term when the config holds Flower's 'proximal-mu'
    (docs/own-app.md#flowers-own-strategies)."""
    if NAME not in config:
        return _flower_settings(config)
    sent = {k[len(CONFIG_PREFIX):]: v for k, v in config.items()
            if k.startswith(CONFIG_PREFIX) and k not in (NAME, CLASSIFIER)}
    return _settings({"method": config[NAME], **sent}, source="the server's method settings",
                     sent_as={k: f"'{CONFIG_PREFIX}{k}'" for k in sent})


def sent_lr(config: Mapping[str, Any], settings: Mapping[str, Any]) -> float | None:
    """The clients' learning rate the strategy sent (`method.lr`), typed in `settings`; None
    where it sent none (then a part that reads it, `ClientPart.uses_lr`, is refused)."""
    return settings["lr"] if NAME in config and LR in config else None


def _flower_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    if FLOWER_PROXIMAL_MU in config:
        mu = config[FLOWER_PROXIMAL_MU]
        if isinstance(mu, bool) or not isinstance(mu, (int, float)):
            raise ValueError(f"the train instruction's '{FLOWER_PROXIMAL_MU}' is {mu!r}: "
                             "Flower's FedProx sends a number (FedProx(proximal_mu=...))")
        # FedProx's loss + mu/2 ||w - phi||^2 is the project's fedprox with beta = mu
        settings, told = {"method": "fedprox", "beta": float(mu)}, (
            f"no method in the train instruction, '{FLOWER_PROXIMAL_MU}' = {mu}: "
            "training as FedProx's client (loss + mu/2 ||w - phi||^2)")
    else:
        settings, told = {"method": "fedavg"}, (
            "no method in the train instruction (one of Flower's own strategies): training "
            "plainly, as FedAvg's client")
    cfg = _settings(settings, source="the train instruction",
                    sent_as={"beta": f"'{FLOWER_PROXIMAL_MU}'"})
    if told not in _told:
        _told.add(told)
        log(INFO, "LocalMethod: %s", told)
    return cfg


def _settings(settings: dict[str, Any], source: str, sent_as: dict[str, str]) -> dict[str, Any]:
    """`settings` typed by `resolve_client`; an error about one key's value names the key as
    the instruction sent it (`sent_as`), without the run config's fix."""
    try:
        return resolve_client(settings)
    except ConfigError as err:
        text = err.sentence(sent_as[err.key]) if err.key in sent_as else str(err)
        raise ValueError(f"{source}: {text}") from None


class LocalMethod(ClientStep):
    """The method the server sent, for one local update of your model from the received
    weights phi (build it after loading them; see the module's example): the app's client step
    (`ClientStep`: `backward`, `before_step`, `end`) built from the train instruction. Under one
    of Flower's own strategies (no method in the instruction) it trains as FedAvg's client, or
    FedProx's where the config holds 'proximal-mu' (docs/own-app.md#flowers-own-strategies).

    Parameters
    ----------
    msg : Message
        The train instruction.
    model : nn.Module
        Your model, holding the received weights. Its parameters must be those the server's
        arrays hold, in the same order. A model without `classifier_names` gets the
        classifier the server sent there (MOON's and FedDecorr's features are its input).
    context : Context | None (default: None)
        The ClientApp's context: methods with per-client state (SCAFFOLD, FedDyn, FedDC, MOON)
        keep it per `client-id` of `context.node_config`: on the node's disk, one version per
        round, where the server's instruction names the version to start from (as the app's
        clients do: docs/baselines.md#client-state), else in `context.state`.
    train_labels : torch.Tensor | None (default: None)
        The client's training labels, for parts that read them (FedLC's class counts).
    num_classes : int (default: 0)
        The number of classes, for parts that need it (FedLC).
    grad_clip : float (default: 0.0)
        Clip the gradient's norm in `before_step`, after the method's corrections and before
        local GC, as the app's local update does; 0: no clipping.
    partition_sizes : Sequence[int] | None (default: None)
        The training examples of each of the `num-partitions` clients, in partition order, for
        the methods that weigh clients by them (FedDC's om_i and K).
    configrecord_key, arrayrecord_key : str (default: 'config', 'arrays')
        The names of the instruction's config and model records (as given to the strategy).

    `cfg` holds the method's settings as the client parts were built from them
    (`method_settings`: the keys the client side reads, typed); the parts keep what they use
    as typed attributes.
    """

    def __init__(self, msg: Message, model: nn.Module, context: Context | None = None, *,
                 train_labels: torch.Tensor | None = None, num_classes: int = 0,
                 grad_clip: float = 0.0, partition_sizes: Sequence[int] | None = None,
                 configrecord_key: str = "config", arrayrecord_key: str = "arrays") -> None:
        config = msg.content.config_records.get(configrecord_key, {})
        self.cfg = cfg = method_settings(config)
        node = context.node_config if context is not None else {}
        state = context.state if context is not None else None
        # the partition: the one the server names (dynamic clients), else the node's own
        node_id, node_n = node_client_id(node)
        pid = int(config.get("partition-id", node_id or 0))
        num_partitions = int(config.get("num-partitions", node_n or 0))
        ctx = LocalContext(
            down={k: v for k, v in msg.content.array_records.items() if k != arrayrecord_key},
            state=state, server_round=int(config.get("server-round", 0)), partition_id=pid,
            train_y=train_labels, num_classes=num_classes,
            num_partitions=num_partitions,
            partition_sizes=tuple(partition_sizes) if partition_sizes is not None else None,
            store=store_for(config, pid, node, state) if context is not None else None)
        lr = sent_lr(config, cfg)
        ctx.lr = float(config.get("lr", 0.0 if lr is None else lr))
        # local GC: the leading parameters before the classifier the server named (or found)
        classifier = config.get(CLASSIFIER) or getattr(model, "classifier_names", None)
        layout = ModelLayout(list(model.named_parameters()), classifier)
        try:
            gc_layers = local_gc_layers(cfg, layout)
        except ValueError as err:
            raise ValueError(f"local GC of method '{cfg['method']}' on this model: {err}") \
                from None
        codec_class, part_types = part_classes(cfg)
        if lr is None and any(p.uses_lr for p in (codec_class, *part_types) if p):
            raise ValueError(f"method '{cfg['method']}' needs the clients' learning rate on the "
                             "clients: give it to the strategy (lr=...) or in start's "
                             "train_config ('lr')")
        self.codec, parts = method_parts(cfg)
        if classifier and not hasattr(model, "classifier_names"):  # for parts that read the
            model.classifier_names = tuple(classifier)  # penultimate features (MOON, FedDecorr)
        super().__init__(model, parts, ctx, alpha=cfg["alpha"], grad_clip=grad_clip,
                         local_gc_layers=gc_layers, gc_vectors=cfg["gc-vectors"])

    @property
    def steps(self) -> int:
        """The steps taken (`before_step` calls): FedCM's server reads them as the reply's
        'local-steps' metric."""
        return self.ctx.steps_done

    def end(self) -> dict[str, Any]:
        """After the last step: the method's records for the reply (e.g. SCAFFOLD's control
        variate update), and with an uplink codec (FedPAQ) the encoded 'arrays'; put them last
        in the reply's RecordDict."""
        out = super().end()
        if self.codec is not None:
            out["arrays"] = self.codec.reply_arrays(self.model)
        return out


def query_reply(msg: Message, context: Context) -> Message:
    """The node's partition, for a strategy built with `identify_nodes=True`: register it with
    `app.query()(query_reply)`. Reads `client-id` and `num-clients` of the node config (or
    their older names `partition-id` and `num-partitions`)."""
    pid, n = node_client_id(context.node_config)
    if pid is None or n is None:
        missing = "client-id" if pid is None else "num-clients"
        raise KeyError(f"node config lacks {missing}: start the SuperNode with --node-config "
                       "\"client-id=<i> num-clients=<n>\"")
    metrics = MetricRecord({"partition-id": pid, "num-partitions": n, "simulated": 0})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
