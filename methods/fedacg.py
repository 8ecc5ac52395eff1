"""FedACG: look-ahead broadcast phi = theta + lam*m, server momentum, and the proximal term
(docs/algorithms.md #server-round, #local-update).

`fedacg-gcfed` is FedACG as GC-Fed's code runs it for GC-Fed's tables (a baseline there, not
`fedacg+gcfed`, which is FedACG and GC-Fed at once): loss + 0.001 * ||w - phi||^2 (args.py
`--fedacg_beta`, no 1/2: beta = 0.002 in the beta/2 form used here), lam = 0.85, clients averaged
uniformly (`torch.mean`).
"""

from . import momentum  # noqa: F401  (registers the server rule)
from . import fedprox  # noqa: F401  (registers the proximal term)
from .parts import MethodDefinition
from .registry import register

FEDACG = {"lookahead": True, "lam": 0.85, "beta": 0.01}
register(MethodDefinition(
    'fedacg',
    "Kim, Kim, Han. FedACG, CVPR 2024, Alg. 1",
    "momentum", ('proximal',), FEDACG,
), MethodDefinition(
    'fedacg-gcfed',
    "FedACG as in GC-Fed's code",
    "momentum", ('proximal',), {**FEDACG, "beta": 0.002, "aggregation": "uniform"},
))
