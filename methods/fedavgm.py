"""FedAvgM (Hsu et al. 2019): server momentum without look-ahead (docs/algorithms.md
#server-round)."""

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition(
    'fedavgm',
    'Hsu et al. 2019, https://arxiv.org/abs/1909.06335',
    "momentum", (),
    {"lam": 0.85},
))
