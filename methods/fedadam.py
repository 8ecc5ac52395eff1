"""FedAdam (Reddi et al. 2021, https://arxiv.org/abs/2003.00295) in two forms
(docs/algorithms.md#fedadam-in-fedacgs-code):

* `fedadam`: Flower's own server update (methods.flower_fedopt), eta as in FedAGM's Sec. 5.1.
* `fedadam-fedacg`: FedACG's code (`servers/base.py`, ServerAdam), the FedAdam of FedACG's
  tables: the clients' updates averaged uniformly, v started at tau^2, no bias correction:

      d = mean_i (w_i - phi);  m = b1 m + (1 - b1) d;  v = b2 v + (1 - b2) d^2
      theta = theta + eta * m / (sqrt(v) + tau)          m_0 = 0, v_0 = tau^2

  with b1 = 0.9, b2 = 0.99, tau = 1e-3 (FedACG's configs/server/FedAdam.yaml) and eta = 0.01
  (its exp_fedadam.sh). Flower's FedAdam starts v at 0 and multiplies eta by
  sqrt(1 - b2^(t+1)) / (1 - b1^(t+1)) in round t.

Both run plain cross-entropy on the client.
"""

from __future__ import annotations

from typing import Any

from . import flower_fedopt  # (registers the server rule)
from . import momentum
from .parts import MethodDefinition
from .registry import register

BETA1, BETA2 = 0.9, 0.99  # FedACG's server.momentum and server.beta (= Flower's defaults)


def fedacg_adam_step_(theta: dict, m: dict, v: dict, d: dict, eta: float, tau: float,
                      beta1: float = BETA1, beta2: float = BETA2) -> None:
    """In place, for every tensor k of d: m = b1 m + (1 - b1) d; v = b2 v + (1 - b2) d^2;
    theta = theta + eta * m / (sqrt(v) + tau)."""
    for k, dk in d.items():
        m[k].mul_(beta1).add_(dk, alpha=1 - beta1)
        v[k].mul_(beta2).addcmul_(dk, dk, value=1 - beta2)
        theta[k].addcdiv_(m[k], v[k].sqrt().add_(tau), value=eta)


class FedACGAdamRule(momentum.MomentumRule):
    """FedAdam as FedACG's code runs it: the momentum rule's aggregate d (client weights,
    screening, robust aggregators), then `fedacg_adam_step_`; m and v are checkpointed."""

    name = "fedadam-fedacg"
    uses = (momentum.ETA, flower_fedopt.TAU, momentum.AGGREGATION, *momentum.ROBUST)
    supports = frozenset({"aggregation=uniform", "dynamic-clients", "resume"})
    summary = ("FedACG's FedAdam: v_0 = tau^2, no bias correction; no look-ahead or global GC "
               "(docs/algorithms.md#fedadam-in-fedacgs-code)")

    def __init__(self, settings, model=None) -> None:
        super().__init__(settings, model)
        self.tau: float = settings.fedopt_tau
        self.v = None

    def momentum_setup(self, settings, model) -> dict[str, Any]:
        """No look-ahead, momentum lam or global GC: the step is `fedacg_adam_step_`."""
        return dict(eta=settings.eta, aggregation=settings.aggregation,
                    robust=momentum.robust_aggregation(settings))

    def describe(self) -> str:
        return (f"fedadam-fedacg: eta={self.eta} tau={self.tau} betas=({BETA1}, {BETA2}) "
                f"aggregation={self.aggregation}")

    def start(self, theta_record) -> None:
        import torch

        super().start(theta_record)
        self.v = {k: torch.full_like(v, self.tau ** 2) for k, v in self.m.items()}

    def step_(self, d: dict) -> None:
        fedacg_adam_step_(self.theta, self.m, self.v, d, self.eta, self.tau)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "v": {k: t.clone() for k, t in self.v.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "v" not in state:
            raise ValueError("the checkpoint lacks FedAdam's second moment 'v'")
        super().load_state_dict(state)
        self.v = {k: t.clone() for k, t in state["v"].items()}


PAPER = "Reddi et al. 2021, https://arxiv.org/abs/2003.00295"
register(FedACGAdamRule,
         MethodDefinition("fedadam", PAPER, "fedadam", (), {"eta": 0.01}),
         MethodDefinition("fedadam-fedacg", "FedAdam as in FedACG's code", "fedadam-fedacg", (),
                          {"eta": 0.01, "aggregation": "uniform"}))
