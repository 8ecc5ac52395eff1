"""Loss and accuracy of a model on tensors (the server's test set or a client's held-out split)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024
) -> tuple[float, float]:
    """Return (mean cross-entropy, accuracy); (nan, nan) for an empty set."""
    if len(y) == 0:
        return float("nan"), float("nan")
    device = next(model.parameters()).device
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(y), batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        logits = model(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    return loss_sum / len(y), correct / len(y)
