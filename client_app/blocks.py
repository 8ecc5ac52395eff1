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

The maths is the project's: the method's client parts (`methods`, e.g. FedACG's proximal term
in `methods.fedprox`), `models.centralization.centralize_` for local GC, called in the order of
the app's own local update (`client_app.local_update`, docs/algorithms.md#local-update).
"""

from __future__ import annotations

import functools
from logging import INFO
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.common import log
from torch import nn

from methods import uplink_codec
from methods.parts import CONFIG_PREFIX
from models.centralization import ModelLayout, centralize_
from run_config import ConfigError, resolve

from .local_update import LocalContext
from .objective import client_parts, local_gc_layers

NAME, CLASSIFIER = CONFIG_PREFIX + "name", CONFIG_PREFIX + "classifier"


@functools.lru_cache(maxsize=8)
def _resolved(frozen: tuple) -> dict[str, Any]:
    return resolve(dict(frozen))


# Flower's own strategies send no method: FedAvg, FedAvgM, FedAdam, ... (whose server update is
# theirs) train the clients plainly; FedProx sends its proximal weight under this key.
FLOWER_PROXIMAL_MU = "proximal-mu"
_told: set[str] = set()  # the INFO lines already logged in this process


def method_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The method's settings (the run config the server resolved them from) out of a train
    instruction's config. An instruction of one of Flower's own strategies carries no method:
    then the client trains as FedAvg's does, or with FedProx's proximal term when the config
    holds Flower's 'proximal-mu' (docs/own-app.md#flowers-own-strategies)."""
    if NAME not in config:
        return _flower_settings(config)
    sent = {k[len(CONFIG_PREFIX):]: v for k, v in config.items()
            if k.startswith(CONFIG_PREFIX) and k not in (NAME, CLASSIFIER)}
    return _settings({"method": config[NAME], **sent}, lr_sent="lr" in sent,
                     source="the server's method settings")


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
    cfg = _settings(settings, lr_sent=False, source="the train instruction")
    if told not in _told:
        _told.add(told)
        log(INFO, "LocalMethod: %s", told)
    return cfg


def _settings(settings: dict[str, Any], lr_sent: bool, source: str) -> dict[str, Any]:
    try:
        cfg = dict(_resolved(tuple(sorted(settings.items()))))
    except ConfigError as err:
        raise ValueError(f"{source}: {err}") from None
    if not lr_sent:
        del cfg["lr"]  # not known to the server: a part that needs it says so (LocalMethod)
    return cfg


class LocalMethod:
    """The method the server sent, for one local update of your model from the received
    weights phi (build it after loading them; see the module's example). Under one of Flower's
    own strategies (no method in the instruction) it trains as FedAvg's client, or FedProx's
    where the config holds 'proximal-mu' (docs/own-app.md#flowers-own-strategies).

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
        keep it in `context.state`, per `partition-id` of `context.node_config`.
    train_labels : torch.Tensor | None (default: None)
        The client's training labels, for parts that read them (FedLC's class counts).
    num_classes : int (default: 0)
        The number of classes, for parts that need it (FedLC).
    grad_clip : float (default: 0.0)
        Clip the gradient's norm in `before_step`, after the method's corrections and before
        local GC, as the app's local update does; 0: no clipping.
    configrecord_key, arrayrecord_key : str (default: 'config', 'arrays')
        The names of the instruction's config and model records (as given to the strategy).
    """

    def __init__(self, msg: Message, model: nn.Module, context: Context | None = None, *,
                 train_labels: torch.Tensor | None = None, num_classes: int = 0,
                 grad_clip: float = 0.0, configrecord_key: str = "config",
                 arrayrecord_key: str = "arrays") -> None:
        config = msg.content.config_records.get(configrecord_key, {})
        self.cfg = cfg = method_settings(config)
        node = context.node_config if context is not None else {}
        self.ctx = ctx = LocalContext(
            down={k: v for k, v in msg.content.array_records.items() if k != arrayrecord_key},
            state=context.state if context is not None else None,
            server_round=int(config.get("server-round", 0)),
            partition_id=int(node.get("partition-id", 0)),  # pragma: no mutate (any id)
            train_y=train_labels,
            num_classes=num_classes, num_partitions=int(node.get("num-partitions", 0)))
        ctx.model, ctx.params = model, list(model.parameters())
        ctx.lr = float(config.get("lr", cfg.get("lr", 0.0)))
        self.model, self.alpha, self.grad_clip = model, cfg["alpha"], grad_clip
        # local GC: the leading parameters before the classifier the server named (or found)
        classifier = config.get(CLASSIFIER) or getattr(model, "classifier_names", None)
        layout = ModelLayout(list(model.named_parameters()), classifier)
        try:
            self.local_gc = ctx.params[:local_gc_layers(cfg, layout)]
        except ValueError as err:
            raise ValueError(f"local GC of method '{cfg['method']}' on this model: {err}") \
                from None
        codec = uplink_codec(cfg)
        self.codec = codec(cfg) if codec else None  # first: its end() runs before the others
        try:
            self.parts = ((self.codec,) if self.codec else ()) + client_parts(cfg)
        except KeyError as err:
            raise _missing(err, cfg) from None
        if classifier and not hasattr(model, "classifier_names"):  # for parts that read the
            model.classifier_names = tuple(classifier)  # penultimate features (MOON, FedDecorr)
        self._forward = next((p.model_forward for p in self.parts if p.has("model_forward")),
                             None)
        self._stepper = next((p for p in self.parts if p.has("step_grad")), None)
        self._task_parts = [p for p in self.parts if p.has("task_loss")]
        self._correctors = [p for p in self.parts if p.has("correct_grad_")]
        self.logits: torch.Tensor | None = None  # the last step's (e.g. for accuracy)
        for part in self.parts:
            part.begin(ctx)

    @property
    def steps(self) -> int:
        """The steps taken (`before_step` calls): FedCM's server reads them as the reply's
        'local-steps' metric."""
        return self.ctx.steps_done

    def objective(self, x: torch.Tensor, y: torch.Tensor):
        """(loss, logits, cross-entropy) of a batch at the current weights: alpha * the task
        loss (CE, unless a part replaces it) + the method's loss terms."""
        logits = self.model(x) if self._forward is None else self._forward(self.ctx, x)
        ce = F.cross_entropy(logits, y)
        task = ce
        for part in self._task_parts:
            task = part.task_loss(self.ctx, logits, y, task)
        loss = self.alpha * task
        for part in self.parts:
            term = part.loss(self.ctx, logits, x, y)
            if term is not None:
                loss = loss + term
        return loss, logits, ce

    def backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The step's gradient, added to p.grad (zero them before): the method's loss and its
        backward, or a part's own gradient (FedSOL's). Returns the batch's cross-entropy
        (detached), which the app reports as train-loss."""
        if self._stepper is None:
            loss, self.logits, ce = self.objective(x, y)
            loss.backward()
        else:
            self.logits, ce = self._stepper.step_grad(self.ctx, x, y, self.objective)
        return ce.detach()

    def before_step(self) -> None:
        """In place on p.grad, before `optimizer.step()`: the method's gradient corrections
        (e.g. FedACG's + beta * (w - phi)), clipping (`grad_clip`), then local GC."""
        for part in self._correctors:
            part.correct_grad_(self.ctx)
        if self.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.ctx.params, self.grad_clip)
        for p in self.local_gc:
            if p.grad is not None:
                centralize_(p.grad, self.cfg["gc-vectors"])
        self.ctx.steps_done += 1

    def end(self) -> dict[str, Any]:
        """After the last step: the method's records for the reply (e.g. SCAFFOLD's control
        variate update), and with an uplink codec (FedPAQ) the encoded 'arrays'; put them last
        in the reply's RecordDict."""
        try:
            for part in self.parts:
                self.ctx.up.update(part.end(self.ctx))
        except KeyError as err:
            raise _missing(err, self.cfg) from None
        out = dict(self.ctx.up)
        if self.codec is not None:
            out["arrays"] = self.codec.reply_arrays(self.model)
        return out


def _missing(err: KeyError, cfg: dict) -> Exception:
    if err.args == ("lr",):
        return ValueError(f"method '{cfg['method']}' needs the clients' learning rate on the "
                          "clients: give it to the strategy (lr=...) or in start's train_config "
                          "('lr')")
    return err


def query_reply(msg: Message, context: Context) -> Message:
    """The node's partition, for a strategy built with `identify_nodes=True`: register it with
    `app.query()(query_reply)`. Reads `partition-id` and `num-partitions` of the node config."""
    node = context.node_config
    try:
        pid, n = int(node["partition-id"]), int(node["num-partitions"])
    except KeyError as err:
        raise KeyError(f"node config lacks {err}: start the SuperNode with --node-config "
                       "\"partition-id=<i> num-partitions=<n>\"") from None
    metrics = MetricRecord({"partition-id": pid, "num-partitions": n, "simulated": 0})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
