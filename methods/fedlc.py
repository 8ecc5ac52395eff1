"""FedLC (Zhang et al. 2022, https://arxiv.org/abs/2209.00189): the client's cross-entropy on
logits calibrated by its class counts, f_c - tau * n_c^(-1/4), replaces plain CE
(docs/baselines.md#fedlc). Evaluation uses the raw logits.

Variants: `fedlc-fedacg` (tau = 1 and uniform client weights, FedACG's code) and `fedlc-gcfed`
(tau = 0.1, GC-Fed's code, uniform client weights); `fedlc` has FedACG's tau with the clients
weighed by examples (FedAvg's weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import PRESET, Key

if TYPE_CHECKING:
    import torch


def calibrated_logits(logits: torch.Tensor, counts: torch.Tensor, tau: float) -> torch.Tensor:
    """f_c - tau * n_c^(-1/4) per class c (`counts` n_c: the client's examples of class c); a
    class the client has no example of gets -inf (probability 0) when tau > 0."""
    import torch

    counts = counts.to(logits.device, logits.dtype)
    if tau == 0:
        return logits
    offset = tau * counts.clamp(min=1) ** -0.25
    offset = torch.where(counts > 0, offset, torch.full_like(offset, float("inf")))
    return logits - offset


def fedlc_loss(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor,
               tau: float) -> torch.Tensor:
    """Softmax CE on the calibrated logits, the true class kept in the denominator (the codes'
    form: -log(e^{z_y} / sum_c e^{z_c}) with z the calibrated logits), batch mean."""
    import torch.nn.functional as F

    return F.cross_entropy(calibrated_logits(logits, counts, tau), y)


class LogitCalibration(ClientPart):
    """Replaces CE with FedLC's calibrated CE (counts from the client's training labels)."""

    name = "fedlc"
    settings = (
        Key("lc-tau", float, PRESET, "FedLC: calibration strength tau, logits f_c - tau * "
            "n_c^(-1/4) (docs/baselines.md#fedlc); fedlc-fedacg 1, fedlc-gcfed 0.1.", "client",
            choices=(PRESET,), low=0.0, high=1e4, strategy=True, topic="Baselines", base=1.0),
    )

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.tau: float = settings.lc_tau

    def begin(self, ctx) -> None:
        import torch

        if ctx.train_y is None or not ctx.num_classes:
            raise RuntimeError("FedLC needs the client's training labels and the number of "
                               "classes (LocalContext.train_y, num_classes)")
        self.counts = torch.bincount(ctx.train_y.long().cpu(), minlength=ctx.num_classes)

    def task_loss(self, ctx, logits, y, loss):
        return fedlc_loss(logits, y, self.counts, self.tau)


PAPER = "Zhang 2022 https://arxiv.org/abs/2209.00189"  # FedLC, ICML 2022
register(LogitCalibration,
         MethodDefinition("fedlc", PAPER, "momentum", ("fedlc",), {"lc-tau": 1.0}),
         MethodDefinition("fedlc-fedacg", PAPER + " (FedACG code)", "momentum", ("fedlc",),
                          {"lc-tau": 1.0, "aggregation": "uniform"}),
         MethodDefinition("fedlc-gcfed", PAPER + " (GC-Fed code)", "momentum", ("fedlc",),
                          {"aggregation": "uniform", "lc-tau": 0.1}))
