"""GC-Fed's 'Global GC only': the aggregated update centralized on the server, uniform weights
(docs/algorithms.md #gradient-centralization)."""

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition(
    'globalgc',
    "Seo et al. GC-Fed, Information Fusion 2026, 'Global GC only'",
    "momentum", (),
    {"global-gc": 'all', "aggregation": 'uniform'},
))
