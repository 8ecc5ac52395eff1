"""The method's share of one local update, step by step (docs/algorithms.md#local-update): the one
client step of this project. The app's local update (`client_app.local_update`) and a ClientApp
of one's own (`client_app.LocalMethod`) both train through `ClientStep`; they add only the
batches, the optimizer and (the app) amp.

    step = ClientStep(model, parts, ctx, alpha=..., grad_clip=..., local_gc_layers=...)
    for each mini-batch (x, y):
        optimizer.zero_grad()
        ce = step.backward(x, y)   # alpha * task loss + the parts' terms, and its backward
                                   # (or a part's own gradient, e.g. FedSOL's)
        step.before_step()         # the parts' gradient corrections, clipping, local GC
        optimizer.step()
    records = step.end()           # the parts' reply records

The method's client parts (`methods.ClientPart`) are called through `LocalContext`; this module
names no method.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord
from torch import nn

from models.centralization import centralize_

from .client_state_store import layout_mismatch


@dataclass
class LocalContext:
    """What the client parts see (methods.ClientPart): the model and its parameters (set by
    `ClientStep`), the records of the train instruction (`down`), the node's persistent state
    (Flower's Context.state), the round, the learning rate, the client (its partition id, its
    training labels, the number of classes); `up` collects the parts' reply records.

    Per-client state goes through `load_state` / `save_state` (kept per partition, since with
    dynamic clients one node trains several partitions); a frozen copy of the received model
    (the teacher of distillation terms) through `teacher()`.
    """

    down: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    server_round: int = 0
    model: nn.Module | None = None
    params: list[torch.Tensor] = field(default_factory=list)
    lr: float = 0.0
    up: dict[str, Any] = field(default_factory=dict)
    partition_id: int = 0
    train_y: torch.Tensor | None = None  # the client's training labels (e.g. class counts)
    num_classes: int = 0
    steps_done: int = 0  # optimizer steps taken so far in this local update
    num_partitions: int = 0  # N, the clients of the federation (0: not known)
    # the training examples of each of the N clients, in partition order, for parts that weigh
    # clients by them (FedDC's om_i); handed by the app, None where not known
    partition_sizes: tuple[int, ...] | None = None
    # client_app.client_state_store.ClientStateStore: versions per round on the node's disk,
    # the one the server names is loaded (exact resume); None: kept in `state` (Context.state)
    store: Any = None
    _teacher: nn.Module | None = None

    def teacher(self) -> nn.Module:
        """A frozen copy of the model at the received point phi, made once per local update (on
        its first call, which must come before the first step: call it from `begin`)."""
        if self._teacher is None:
            if self.steps_done:
                raise RuntimeError("LocalContext.teacher() first called after training started: "
                                   "call it in the part's begin() so that it copies phi")
            self._teacher = copy.deepcopy(self.model).eval().requires_grad_(False)
        return self._teacher

    def _state_key(self, name: str) -> str:
        return f"{name}.p{self.partition_id}"

    def load_state(self, name: str, *, like: Mapping[str, torch.Tensor]
                   ) -> dict[str, torch.Tensor] | None:
        """This client's state `name` saved by an earlier round (None the first time). `like`
        declares what it holds (keys, shapes, dtypes: e.g. `dict(model.named_parameters())`);
        a stored state that differs is refused (client_app/client_state_store.py)."""
        if self.store is not None:
            return self.store.load(name, like)
        if self.state is None or self._state_key(name) not in self.state.array_records:
            return None
        found = self.state.array_records[self._state_key(name)].to_torch_state_dict()
        problem = layout_mismatch(found, like)
        if problem:
            raise ValueError(f"client state '{name}' in the node's Context.state {problem}")
        return found

    def save_state(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Keep `tensors` as this client's state `name` for its next round."""
        if self.store is not None:
            return self.store.save(name, tensors)
        if self.state is None:
            raise RuntimeError("LocalContext.state is None: no node state to keep client state in")
        self.state[self._state_key(name)] = ArrayRecord(
            {k: v.detach().cpu() for k, v in tensors.items()})


class ClientStep:
    """The method's share of one local update of `model` from its current weights (phi): its
    loss, the step's gradient, the corrections, clipping and local GC in their order, and the
    reply records (docs/algorithms.md#local-update). Build it after the model holds phi, with
    `ctx.lr` set: the parts' `begin` runs here.

    Parameters
    ----------
    model : nn.Module
        The model, holding the received weights.
    parts : Sequence
        The method's client parts (`methods.ClientPart`), an uplink codec first where there is
        one (its `end` runs before the others').
    ctx : LocalContext
        What the parts see; `model` and `params` are set here.
    alpha : float (default: 1.0)
        The weight of the task loss (FedAGM's alpha).
    grad_clip : float (default: 0.0)
        Clip the gradient's norm after the corrections, before local GC; 0: no clipping.
    local_gc_layers : int (default: 0)
        The first this-many parameter tensors get local GC (`models.centralization`).
    gc_vectors : str (default: 'center')
        Local GC of one-dimensional tensors: 'center' or 'skip'.
    """

    def __init__(self, model: nn.Module, parts: Sequence[Any], ctx: LocalContext, *,
                 alpha: float = 1.0, grad_clip: float = 0.0, local_gc_layers: int = 0,
                 gc_vectors: str = "center") -> None:
        self.model, self.parts, self.ctx = model, tuple(parts), ctx
        ctx.model, ctx.params = model, list(model.parameters())
        self.alpha, self.grad_clip, self.gc_vectors = alpha, grad_clip, gc_vectors
        self.local_gc = ctx.params[:local_gc_layers]
        # a part may run the forward pass (model_forward) or make the step's gradient (step_grad)
        self._forward = next((p.model_forward for p in self.parts if p.has("model_forward")),
                             None)
        self._stepper = next((p for p in self.parts if p.has("step_grad")), None)
        self._task_parts = [p for p in self.parts if p.has("task_loss")]
        self._correctors = [p for p in self.parts if p.has("correct_grad_")]
        self.logits: torch.Tensor | None = None  # the last step's (e.g. for accuracy)
        for part in self.parts:
            part.begin(ctx)

    def objective(self, x: torch.Tensor, y: torch.Tensor):
        """(loss, logits, cross-entropy) of a batch at the current weights: alpha * the task
        loss (CE, unless a part replaces it, e.g. FedLC's calibrated CE) + the parts' loss terms.
        The reported train loss stays CE."""
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

    def backward(self, x: torch.Tensor, y: torch.Tensor,
                 scaler: torch.amp.GradScaler | None = None) -> torch.Tensor:
        """The step's gradient, added to p.grad (zero them before): the objective and its
        backward, or a part's own gradient (FedSOL's, docs/baselines.md#fedsol). With an
        enabled `scaler` (amp), the objective runs under fp16 autocast and its loss is scaled:
        unscale the gradients (`scaler.unscale_`) before `before_step`. Returns the batch's
        cross-entropy (detached)."""
        objective = (self.objective if scaler is None
                     else functools.partial(self._scaled_objective, scaler))
        if self._stepper is None:
            loss, self.logits, ce = objective(x, y)
            loss.backward()
        else:
            self.logits, ce = self._stepper.step_grad(self.ctx, x, y, objective)
        return ce.detach()

    def _scaled_objective(self, scaler: torch.amp.GradScaler, x: torch.Tensor,
                          y: torch.Tensor):
        """`objective` under fp16 autocast (where `scaler` is enabled), its loss scaled."""
        with torch.autocast(self.ctx.params[0].device.type, dtype=torch.float16,
                            enabled=scaler.is_enabled()):
            loss, logits, ce = self.objective(x, y)
        return scaler.scale(loss), logits, ce

    def before_step(self) -> None:
        """In place on p.grad, on the step's final gradient whoever made it, before the
        optimizer's step: the parts' gradient corrections (e.g. FedACG's + beta * (w - phi)),
        clipping (`grad_clip`), then local GC g[l] = P(g[l])."""
        for part in self._correctors:
            part.correct_grad_(self.ctx)
        if self.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.ctx.params, self.grad_clip)
        for p in self.local_gc:
            if p.grad is not None:
                centralize_(p.grad, self.gc_vectors)
        self.ctx.steps_done += 1

    def end(self) -> dict[str, Any]:
        """After the last step: the parts' records for the reply (e.g. SCAFFOLD's control
        variate update), also kept in `ctx.up`."""
        for part in self.parts:
            self.ctx.up.update(part.end(self.ctx))
        return dict(self.ctx.up)
