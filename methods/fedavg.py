"""FedAvg (McMahan et al. 2017, https://arxiv.org/abs/1602.05629): the momentum rule with
lam = 0, eta = 1 and the plain cross-entropy objective (docs/algorithms.md #presets)."""

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import Method
from .registry import register

register(Method("fedavg", "McMahan 2017 https://arxiv.org/abs/1602.05629", "momentum"))
