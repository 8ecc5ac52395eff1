"""FedAGM: FedACG's parts with the server step eta = tau (FedAGM with tau = 1 is FedACG) and the
loss weight alpha (the shared `alpha` key); docs/algorithms.md #server-round."""

from . import momentum  # noqa: F401  (registers the server rule)
from . import fedprox  # noqa: F401  (registers the proximal term)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition(
    'fedagm',
    "Kim, Kim, Han. FedAGM (arXiv:2201.03172v1), Alg. 2",
    "momentum", ('proximal',),
    {"lookahead": True, "lam": 0.85, "beta": 0.01},
))
