"""Named methods (docs/algorithms.md#presets): the value each preset-controlled key takes under
each `method`."""

from __future__ import annotations

# lookahead, lam, eta, beta, local-gc, global-gc, aggregation
_COLUMNS = ("lookahead", "lam", "eta", "beta", "local-gc", "global-gc", "aggregation")
_TABLE = {
    #                 lookahead lam   eta   beta  local-gc    global-gc  weights
    "fedavg":        (False, 0.0,  1.0,  0.0,  "none",     "none", "examples"),   # McMahan 2017
    "fedprox":       (False, 0.0,  1.0,  0.01, "none",     "none", "examples"),   # Li 2020
    "fedavgm":       (False, 0.85, 1.0,  0.0,  "none",     "none", "examples"),   # Hsu 2019
    "fedacg":        (True,  0.85, 1.0,  0.01, "none",     "none", "examples"),   # FedACG Alg. 1
    "fedagm":        (True,  0.85, 1.0,  0.01, "none",     "none", "examples"),   # FedAGM Alg. 2, eta = tau
    "localgc":       (False, 0.0,  1.0,  0.0,  "all",      "none", "uniform"),    # GC-Fed
    "globalgc":      (False, 0.0,  1.0,  0.0,  "none",     "all",  "uniform"),    # GC-Fed
    "gcfed":         (False, 0.0,  1.0,  0.0,  "features", "all",  "uniform"),    # GC-Fed Alg. 1
    "fedacg+gcfed":  (True,  0.85, 1.0,  0.01, "features", "all",  "examples"),   # ours: both
    # Flower's own adaptive server optimizers (FedOpt, Reddi 2021); eta as in FedAGM's Sec. 5.1
    "fedadam":       (False, 0.0,  0.01, 0.0,  "none",     "none", "examples"),
    "fedyogi":       (False, 0.0,  0.01, 0.0,  "none",     "none", "examples"),
    "fedadagrad":    (False, 0.0,  0.01, 0.0,  "none",     "none", "examples"),
}

PRESETS: dict[str, dict[str, object]] = {
    method: dict(zip(_COLUMNS, row)) for method, row in _TABLE.items()
}

# Methods whose server update is one of Flower's built-in strategies (not rewritten here).
FLOWER_BASELINES = ("fedadam", "fedyogi", "fedadagrad")
