"""The client's local update (docs/algorithms.md#local-update), plain PyTorch: the batches, the
optimizer and amp around the one client step (`client_app.client_step.ClientStep`).

    opt = SGD(lr, momentum = local_momentum, weight_decay = wd)
    for k in 1..K:
        the step's gradient: alpha * CE(model(x), y) + the loss terms of the method's client parts
                (a part may replace CE with its own task loss, e.g. FedLC's calibrated CE), and
                its backward (or a part's step_grad, e.g. FedSOL's gradient at a perturbed point)
        the parts' gradient corrections (e.g. FedProx's + beta * (w - phi)), clip_grad_norm_
        (grad_clip), g[l] = P(g[l]) for l in LOCAL-GC; opt.step()
    (lr * lr_epoch_decay^e in local epoch e; amp: the forward pass under fp16 autocast, the loss
    scaled by a GradScaler, the gradients unscaled before the corrections, an overflowing step
    skipped)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .client_step import ClientStep, LocalContext


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


def local_update(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: LocalConfig,
    generator: torch.Generator | None = None,
    transform: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    parts: Sequence[Any] = (), ctx: LocalContext | None = None,
) -> dict[str, float]:
    """Train `model` in place from its current weights (phi); return train loss/accuracy/steps.
    The parts' reply records end up in `ctx.up`.

    `x`, `y` may live on the CPU or already on the model's device. `transform(batch, generator)`
    turns each mini-batch, once on the device, into model input (augmentation and normalization,
    `feddata.augment.TrainTransform`); without it, batches go to the model as they are.
    """
    device = next(model.parameters()).device
    ctx = ctx if ctx is not None else LocalContext()
    ctx.lr = cfg.lr
    step = ClientStep(model, parts, ctx, alpha=cfg.alpha, grad_clip=cfg.grad_clip,
                      local_gc_layers=cfg.local_gc_layers, gc_vectors=cfg.gc_vectors)
    # foreach: the same elementwise operations as the per-tensor loop, bit for bit, in one call
    # a step (PyTorch picks it on CUDA by itself; on a CPU it saves about 0.2 ms a step)
    opt = torch.optim.SGD(ctx.params, lr=cfg.lr, momentum=cfg.local_momentum,
                          weight_decay=cfg.weight_decay, foreach=True)
    # amp only: without it, no scaler and no autocast context (a disabled one still costs a
    # few calls a step)
    scaler = torch.amp.GradScaler(device.type) if cfg.amp else None
    generator = generator or torch.Generator().manual_seed(0)
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    steps = cfg.num_steps(len(y))
    per_epoch = math.ceil(len(y) / cfg.batch_size)
    for k, idx in enumerate(batches(len(y), cfg.batch_size, steps, generator)):
        if cfg.lr_epoch_decay != 1.0 and k % per_epoch == 0:  # a local epoch begins
            for group in opt.param_groups:
                group["lr"] = cfg.lr * cfg.lr_epoch_decay ** (k // per_epoch)
        # the batch's rows (index_select copies rows: x[idx] gathers element by element, 6x
        # slower on a CPU); non_blocking changes when the copy happens, never the values
        idx = idx.to(x.device)
        xb = torch.index_select(x, 0, idx).to(device, non_blocking=True)  # pragma: no mutate
        yb = torch.index_select(y, 0, idx).to(device, non_blocking=True)  # pragma: no mutate
        if transform is not None:
            xb = transform(xb, generator)
        opt.zero_grad(set_to_none=False)
        ce = step.backward(xb, yb, scaler)
        if scaler is not None:
            scaler.unscale_(opt)  # amp: the true gradients (and whether any overflowed)
        step.before_step()
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)  # skipped when a gradient overflowed
            scaler.update()
        loss_sum += ce * len(yb)
        correct += (step.logits.detach().argmax(1) == yb).sum()
        seen += len(yb)
    step.end()
    return {
        "train-loss": loss_sum.item() / max(seen, 1),
        "train-acc": correct.item() / max(seen, 1),
        "local-steps": steps,
    }
