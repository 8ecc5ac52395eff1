"""FedDecorr (Shi et al. 2023, https://arxiv.org/abs/2210.00226): a penalty on the correlation
of the batch's feature dimensions (docs/baselines.md#feddecorr),
L = CE + beta * L_dec with L_dec = mean of the squared off-diagonal entries of Zh^T Zh, divided
by the batch size N (Zh: each feature column standardised over the batch).

Variants: `feddecorr-fedacg` (beta = 0.01, penultimate features, FedACG's code, uniform client
weights) and `feddecorr-gcfed` (beta = 0.001, the CNN's flattened conv map, GC-Fed's code, uniform
client weights); `feddecorr` has FedACG's values with the clients weighed by examples (FedAvg's
weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import PRESET, Key

if TYPE_CHECKING:
    import torch

EPS = 1e-8  # added to the variance before the square root (both codes)


def decorrelation_loss(z: torch.Tensor) -> torch.Tensor:
    """L_dec of the features `z` (N x d, flattened beyond dim 1): 0 when N = 1 or d = 1."""
    import torch

    z = z.flatten(1)
    n, d = z.shape
    if n == 1 or d == 1:
        return z.sum() * 0.0
    zh = (z - z.mean(dim=0, keepdim=True)) / torch.sqrt(EPS + z.var(dim=0, keepdim=True))
    m = zh.T @ zh  # M = Zh^T Zh (d x d)
    off_diagonal_sq = (m ** 2).sum() - (torch.diagonal(m) ** 2).sum()
    return off_diagonal_sq / (d * (d - 1)) / n


class FeatureDecorrelation(ClientPart):
    """beta * L_dec of the batch's features, read from the same forward pass as the logits."""

    name = "feddecorr"
    settings = (
        Key("decorr-beta", float, PRESET,
            "FedDecorr: weight beta of the decorrelation term (docs/baselines.md#feddecorr); "
            "feddecorr-fedacg 0.01, feddecorr-gcfed 0.001.",
            "client", choices=(PRESET,), low=0.0, high=1e4, strategy=True, topic="Baselines",
            base=0.01),
        Key("decorr-features", str, PRESET,
            "FedDecorr: the features decorrelated: the penultimate ones, or (GC-Fed code) the "
            "flattened conv map for the CNN and the penultimate ones otherwise.",
            "client", choices=(PRESET, "penultimate", "conv-map"), strategy=True,
            topic="Baselines", base="penultimate"),
    )

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.beta: float = settings.decorr_beta
        self.where: str = settings.decorr_features

    def begin(self, ctx) -> None:
        from models.features import FeatureTap

        self.tap = FeatureTap(ctx.model, self.where) if self.beta > 0 else None

    def loss(self, ctx, logits, x, y):
        if self.tap is None:
            return None
        return self.beta * decorrelation_loss(self.tap.features)

    def end(self, ctx) -> dict:
        if self.tap is not None:
            self.tap.remove()
        return {}


PAPER = "Shi 2023 https://arxiv.org/abs/2210.00226"  # FedDecorr, ICLR 2023
FEDACG = {"decorr-beta": 0.01, "decorr-features": "penultimate"}
register(FeatureDecorrelation,
         MethodDefinition("feddecorr", PAPER, "momentum", ("feddecorr",), FEDACG),
         MethodDefinition("feddecorr-fedacg", PAPER + " (FedACG code)", "momentum", ("feddecorr",),
                          {**FEDACG, "aggregation": "uniform"}),
         MethodDefinition("feddecorr-gcfed", PAPER + " (GC-Fed code)", "momentum", ("feddecorr",),
                          {"aggregation": "uniform", "decorr-beta": 0.001,
                           "decorr-features": "conv-map"}))
