"""The reference for the benchmark: what the official codes do, in one process, no framework.

Each round trains the sampled clients one after another from the global model (plain SGD, the
same local epochs and batch size), then averages their models weighted by examples.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_client(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float, epochs: int,
                 batch_size: int, generator: torch.Generator) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=generator)
        for i in range(0, len(y), batch_size):
            idx = perm[i:i + batch_size]
            xb, yb = x[idx].to(x.device), y[idx].to(y.device)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()


def run_plain_loop(model: nn.Module, clients: list[tuple[torch.Tensor, torch.Tensor]], *,
                   rounds: int, lr: float, epochs: int, batch_size: int,
                   device: torch.device) -> list[float]:
    """Seconds of each round (every client trains every round: the sampled set is fixed)."""
    model = model.to(device)
    clients = [(x.to(device), y.to(device)) for x, y in clients]
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    seconds = []
    for _ in range(rounds):
        sync(device)
        t = time.perf_counter()
        total = sum(len(y) for _, y in clients)
        new = {k: torch.zeros_like(v) for k, v in global_state.items()}
        for x, y in clients:
            model.load_state_dict(global_state)
            train_client(model, x, y, lr=lr, epochs=epochs, batch_size=batch_size, generator=gen)
            for k, v in model.state_dict().items():
                new[k].add_(v, alpha=len(y) / total)
        global_state = new
        sync(device)
        seconds.append(time.perf_counter() - t)
    return seconds
