"""FedACG and GC-Fed at once (ours): FedACG's parts with GC-Fed's local and global GC, weights
by examples (docs/algorithms.md #presets)."""

from . import momentum  # noqa: F401  (registers the server rule)
from . import fedprox  # noqa: F401  (registers the proximal term)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition(
    'fedacg+gcfed',
    'ours: FedACG and GC-Fed at once',
    "momentum", ('proximal',),
    {"lookahead": True, "lam": 0.85, "beta": 0.01, "local-gc": 'features', "global-gc": 'all'},
))
