"""GC-Fed: local GC before the borderline, global GC on the aggregated update, uniform weights
(docs/algorithms.md #gradient-centralization, #gc-layer-sets)."""

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition(
    'gcfed',
    "Seo et al. GC-Fed, Information Fusion 2026, Alg. 1",
    "momentum", (),
    {"local-gc": 'features', "global-gc": 'all', "aggregation": 'uniform'},
))
