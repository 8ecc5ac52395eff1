"""FedACG: look-ahead broadcast phi = theta + lam*m, server momentum, and the proximal term
(docs/algorithms.md #server-round, #local-update)."""

from . import momentum  # noqa: F401  (registers the server rule)
from . import fedprox  # noqa: F401  (registers the proximal term)
from .parts import Method
from .registry import register

register(Method(
    'fedacg',
    "Kim, Kim, Han. Communication-Efficient Federated Learning with Accelerated Client "
    "Gradient (FedACG), CVPR 2024, Alg. 1",
    "momentum", ('proximal',),
    {"lookahead": True, "lam": 0.85, "beta": 0.01},
))
