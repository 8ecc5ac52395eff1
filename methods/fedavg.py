"""FedAvg (McMahan et al. 2017, https://arxiv.org/abs/1602.05629): the momentum rule with
lam = 0, eta = 1 and the plain cross-entropy objective (docs/algorithms.md #presets).

`fedavg` weighs the clients by their examples (the paper); `fedavg-gcfed` uniformly, as GC-Fed's
code does (`torch.mean` over the sampled clients), for GC-Fed's FedAvg rows.
"""

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import MethodDefinition
from .registry import register

PAPER = "McMahan 2017 https://arxiv.org/abs/1602.05629"
register(MethodDefinition("fedavg", PAPER, "momentum"),
         MethodDefinition("fedavg-gcfed", "FedAvg as in GC-Fed's code", "momentum", (),
                          {"aggregation": "uniform"}))
