"""The client's local update (docs/algorithms.md #local-update), plain PyTorch.

    opt = SGD(lr, momentum = local_momentum, weight_decay = wd)
    for k in 1..K:
        loss = alpha * CE(model(x), y) + the loss terms of the method's client parts
                (a part may replace CE with its own task loss, e.g. FedLC's calibrated CE)
        loss.backward()    (or a part's step_grad, e.g. FedSOL's gradient at a perturbed point)
        the parts' gradient corrections (e.g. FedProx's + beta * (w - phi))
        clip_grad_norm_(grad_clip); g[l] = P(g[l]) for l in LOCAL-GC; opt.step()
    (lr * lr_epoch_decay^e in local epoch e; amp: the forward pass under fp16 autocast, the loss
    scaled by a GradScaler, the gradients unscaled before the corrections, an overflowing step
    skipped)

The method's client parts (`methods.ClientPart`) are called through `LocalContext`; this module
names no method.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.centralization import centralize_

from .client_state import layout_mismatch


@dataclass(frozen=True)
class LocalConfig:
    lr: float
    local_epochs: int = 1
    local_iterations: int = 0  # > 0: exactly this many mini-batches, else local_epochs epochs
    batch_size: int = 32
    alpha: float = 1.0
    grad_clip: float = 0.0
    local_momentum: float = 0.0
    weight_decay: float = 0.0
    local_gc_layers: int = 0  # the first this-many parameter tensors get local GC
    gc_vectors: str = "center"
    lr_epoch_decay: float = 1.0  # local epoch e (from 0) uses lr * lr_epoch_decay^e
    amp: bool = False  # fp16 autocast + GradScaler (run config precision)

    def num_steps(self, n: int) -> int:
        if self.local_iterations > 0:
            return self.local_iterations
        return self.local_epochs * math.ceil(n / self.batch_size)


def batches(n: int, batch_size: int, steps: int, generator: torch.Generator):
    """Index tensors of `steps` mini-batches: reshuffled epochs, the last batch of each may be
    short."""
    done = 0
    while done < steps:
        perm = torch.randperm(n, generator=generator)
        for i in range(0, n, batch_size):
            if done == steps:
                return
            yield perm[i:i + batch_size]
            done += 1


@dataclass
class LocalContext:
    """What the client parts see (methods.ClientPart): the model and its parameters (set by
    `local_update`), the records of the train instruction (`down`), the node's persistent state
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
    # client_app.client_state.ClientStateStore: versions per round on the node's disk, the one
    # the server names is loaded (exact resume); None: kept in `state` (Flower's Context.state)
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
        a stored state that differs is refused (client_app/client_state.py)."""
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
        from flwr.app import ArrayRecord

        if self.store is not None:
            return self.store.save(name, tensors)
        if self.state is None:
            raise RuntimeError("LocalContext.state is None: no node state to keep client state in")
        self.state[self._state_key(name)] = ArrayRecord(
            {k: v.detach().cpu() for k, v in tensors.items()})


def local_update(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: LocalConfig,
    generator: torch.Generator | None = None,
    transform: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    parts: Sequence[Any] = (), ctx: LocalContext | None = None,
) -> dict[str, float]:
    """Train `model` in place from its current weights (phi); return train loss/accuracy/steps.

    `x`, `y` may live on the CPU or already on the model's device. `transform(batch, generator)`
    turns each mini-batch, once on the device, into model input (augmentation and normalization,
    `feddata.augment.TrainTransform`); without it, batches go to the model as they are.
    """
    device = next(model.parameters()).device
    params = [p for p in model.parameters()]
    ctx = ctx if ctx is not None else LocalContext()
    ctx.model, ctx.params, ctx.lr = model, params, cfg.lr
    for part in parts:
        part.begin(ctx)
    task_parts = [part for part in parts if part.has("task_loss")]
    # a part may run the forward pass (model_forward) or make the step's gradient (step_grad)
    forward = next((p.model_forward for p in parts if p.has("model_forward")), None)
    stepper = next((p for p in parts if p.has("step_grad")), None)

    def objective(xb, yb):
        """The step's loss at the current weights: alpha * task loss (CE unless a part replaces
        it) + the parts' loss terms."""
        logits = model(xb) if forward is None else forward(ctx, xb)
        ce = F.cross_entropy(logits, yb)
        task = ce  # the reported train loss stays CE
        for part in task_parts:
            task = part.task_loss(ctx, logits, yb, task)
        loss = cfg.alpha * task
        for part in parts:
            term = part.loss(ctx, logits, xb, yb)
            if term is not None:
                loss = loss + term
        return loss, logits, ce

    def scaled_objective(xb, yb):
        """`objective` as the step uses it: under amp, in fp16 autocast and the loss scaled by the
        GradScaler (without amp, `objective` itself)."""
        with torch.autocast(device.type, dtype=torch.float16, enabled=cfg.amp):
            loss, logits, ce = objective(xb, yb)
        return scaler.scale(loss), logits, ce

    local_gc = params[: cfg.local_gc_layers]
    opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.local_momentum,
                          weight_decay=cfg.weight_decay)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.amp)  # disabled: a no-op
    generator = generator or torch.Generator().manual_seed(0)
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    steps = cfg.num_steps(len(y))
    per_epoch = math.ceil(len(y) / cfg.batch_size)
    for step, idx in enumerate(batches(len(y), cfg.batch_size, steps, generator)):
        if cfg.lr_epoch_decay != 1.0 and step % per_epoch == 0:  # a local epoch begins
            for group in opt.param_groups:
                group["lr"] = cfg.lr * cfg.lr_epoch_decay ** (step // per_epoch)
        # non_blocking changes when the copy happens, never the values: not mutated
        xb = x[idx].to(device, non_blocking=True)  # pragma: no mutate
        yb = y[idx].to(device, non_blocking=True)  # pragma: no mutate
        if transform is not None:
            xb = transform(xb, generator)
        if stepper is None:
            loss, logits, ce = scaled_objective(xb, yb)
            opt.zero_grad(set_to_none=False)
            loss.backward()
        else:  # e.g. FedSOL: the gradient at a perturbed point (docs/baselines.md#fedsol)
            opt.zero_grad(set_to_none=False)
            logits, ce = stepper.step_grad(ctx, xb, yb, scaled_objective)
        scaler.unscale_(opt)  # amp: the true gradients (and whether any overflowed)
        # on the step's final gradient, whoever made it:
        for part in parts:
            part.correct_grad_(ctx)
        if cfg.grad_clip > 0:
            nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        for p in local_gc:
            centralize_(p.grad, cfg.gc_vectors)
        scaler.step(opt)  # opt.step(), skipped under amp when a gradient overflowed
        scaler.update()
        ctx.steps_done += 1
        loss_sum += ce.detach() * len(yb)
        correct += (logits.detach().argmax(1) == yb).sum()
        seen += len(yb)
    for part in parts:
        ctx.up.update(part.end(ctx))
    return {
        "train-loss": loss_sum.item() / max(seen, 1),
        "train-acc": correct.item() / max(seen, 1),
        "local-steps": steps,
    }
