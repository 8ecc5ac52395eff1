"""The client's local update (docs/algorithms.md#local-update), plain PyTorch.

    opt = SGD(lr, momentum = local_momentum, weight_decay = wd)
    for k in 1..K:
        loss = alpha * CE(model(x), y) + beta/2 * ||w - phi||^2
        loss.backward(); clip_grad_norm_(grad_clip); g[l] = P(g[l]) for l in LOCAL-GC; opt.step()
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.centralization import centralize_


@dataclass(frozen=True)
class LocalConfig:
    lr: float
    local_epochs: int = 1
    local_iterations: int = 0  # > 0: exactly this many mini-batches, else local_epochs epochs
    batch_size: int = 32
    alpha: float = 1.0
    beta: float = 0.0
    grad_clip: float = 0.0
    local_momentum: float = 0.0
    weight_decay: float = 0.0
    local_gc_layers: int = 0  # the first this-many parameter tensors get local GC
    gc_vectors: str = "center"

    def num_steps(self, n: int) -> int:
        if self.local_iterations > 0:
            return self.local_iterations
        return self.local_epochs * math.ceil(n / self.batch_size)


def batches(n: int, batch_size: int, steps: int, generator: torch.Generator):
    """Index tensors of `steps` mini-batches: reshuffled epochs, the last batch of each may be short."""
    done = 0
    while done < steps:
        perm = torch.randperm(n, generator=generator)
        for i in range(0, n, batch_size):
            if done == steps:
                return
            yield perm[i:i + batch_size]
            done += 1


def add_proximal_grad_(params: list[torch.Tensor], phi: list[torch.Tensor], beta: float) -> None:
    """grad += beta * (w - phi): the gradient of beta/2 * ||w - phi||^2."""
    grads = [p.grad for p in params]
    torch._foreach_add_(grads, torch._foreach_sub([p.detach() for p in params], phi), alpha=beta)


def local_update(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: LocalConfig,
    generator: torch.Generator | None = None,
    transform: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Train `model` in place from its current weights (phi); return train loss/accuracy/steps.

    `x`, `y` may live on the CPU or already on the model's device. `transform(batch, generator)`
    turns each mini-batch, once on the device, into model input (augmentation and normalization,
    `feddata.augment.TrainTransform`); without it, batches go to the model as they are.
    """
    device = next(model.parameters()).device
    params = [p for p in model.parameters()]
    phi = [p.detach().clone() for p in params] if cfg.beta > 0 else []
    local_gc = params[: cfg.local_gc_layers]
    opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.local_momentum,
                          weight_decay=cfg.weight_decay)
    generator = generator or torch.Generator().manual_seed(0)
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    steps = cfg.num_steps(len(y))
    for idx in batches(len(y), cfg.batch_size, steps, generator):
        xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
        if transform is not None:
            xb = transform(xb, generator)
        logits = model(xb)
        ce = F.cross_entropy(logits, yb)
        opt.zero_grad(set_to_none=False)
        (cfg.alpha * ce).backward()
        if cfg.beta > 0:
            add_proximal_grad_(params, phi, cfg.beta)
        if cfg.grad_clip > 0:
            nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        for p in local_gc:
            centralize_(p.grad, cfg.gc_vectors)
        opt.step()
        loss_sum += ce.detach() * len(yb)
        correct += (logits.detach().argmax(1) == yb).sum()
        seen += len(yb)
    return {
        "train-loss": loss_sum.item() / max(seen, 1),
        "train-acc": correct.item() / max(seen, 1),
        "local-steps": steps,
    }
