"""FedProx (Li et al. 2020, https://arxiv.org/abs/1812.06127): the proximal term
beta/2 * ||w - phi||^2 on the client (docs/algorithms.md #local-update), FedAvg's server rule.

The term is added as its gradient, beta * (w - phi), after backward and before clipping.
"""

from __future__ import annotations

import torch

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, Method
from .registry import register


def add_proximal_grad_(params: list[torch.Tensor], phi: list[torch.Tensor], beta: float) -> None:
    """grad += beta * (w - phi): the gradient of beta/2 * ||w - phi||^2."""
    grads = [p.grad for p in params]
    torch._foreach_add_(grads, torch._foreach_sub([p.detach() for p in params], phi), alpha=beta)


class ProximalTerm(ClientPart):
    """beta/2 * ||w - phi||^2 (FedProx's mu = beta; FedACG's and FedAGM's beta)."""

    name = "proximal"
    keys = ("beta",)

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.beta = float(cfg["beta"])

    def begin(self, ctx) -> None:
        self.phi = [p.detach().clone() for p in ctx.params] if self.beta > 0 else []

    def correct_grad_(self, ctx) -> None:
        if self.beta > 0:
            add_proximal_grad_(ctx.params, self.phi, self.beta)


register(ProximalTerm)
register(Method("fedprox", "Li 2020 https://arxiv.org/abs/1812.06127", "momentum",
                ("proximal",), {"beta": 0.01}))
