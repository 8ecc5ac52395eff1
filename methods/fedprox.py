"""FedProx (Li et al. 2020, https://arxiv.org/abs/1812.06127): the proximal term
beta/2 * ||w - phi||^2 on the client (docs/algorithms.md #local-update), FedAvg's server rule.

The term is added as its gradient, beta * (w - phi), after backward and before clipping.

`fedprox`: beta (FedProx's mu) 0.01, clients weighed by examples. `fedprox-gcfed`: GC-Fed's code,
mu = 0.1 (its args.py `--fedprox_mu`, loss + mu/2 * ||w - phi||^2) and uniform client weights
(`torch.mean`), for GC-Fed's FedProx rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import PRESET, Key

if TYPE_CHECKING:
    import torch


def add_proximal_grad_(params: list[torch.Tensor], phi: list[torch.Tensor], beta: float) -> None:
    """grad += beta * (w - phi): the gradient of beta/2 * ||w - phi||^2."""
    import torch  # (here: the run config reads the registry without torch)

    grads = [p.grad for p in params]
    torch._foreach_add_(grads, torch._foreach_sub([p.detach() for p in params], phi), alpha=beta)


class ProximalTerm(ClientPart):
    """beta/2 * ||w - phi||^2 (FedProx's mu = beta; FedACG's and FedAGM's beta)."""

    name = "proximal"
    settings = (Key("beta", float, PRESET, "Proximal coefficient: loss += beta/2 * ||w - phi||^2 "
                    "(FedProx mu).", "client", choices=(PRESET,), low=0.0, high=1e4,
                    strategy=True, topic="Method", base=0.0),)

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.beta: float = settings.beta

    def begin(self, ctx) -> None:
        self.phi = [p.detach().clone() for p in ctx.params] if self.beta > 0 else []

    def correct_grad_(self, ctx) -> None:
        if self.beta > 0:
            add_proximal_grad_(ctx.params, self.phi, self.beta)


PAPER = "Li 2020 https://arxiv.org/abs/1812.06127"
register(ProximalTerm,
         MethodDefinition("fedprox", PAPER, "momentum", ("proximal",), {"beta": 0.01}),
         MethodDefinition("fedprox-gcfed", "FedProx as in GC-Fed's code", "momentum", ("proximal",),
                          {"beta": 0.1, "aggregation": "uniform"}))
