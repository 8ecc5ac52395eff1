"""GC-Fed's 'Local GC only': every gradient centralized on the client, uniform weights
(docs/algorithms.md #gradient-centralization)."""

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition(
    'localgc',
    "Seo et al. GC-Fed, Information Fusion 2026, 'Local GC only'",
    "momentum", (),
    {"local-gc": 'all', "aggregation": 'uniform'},
))
