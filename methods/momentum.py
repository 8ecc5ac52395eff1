"""The server rule of FedAvg, FedAvgM, FedACG, FedAGM and the GC-Fed family
(docs/algorithms.md #server-round), on the plain-PyTorch maths of `server_math.server_update`:

    phi   = theta + lam * m            if lookahead else theta
    d     = sum_i w_i * w_i_K - phi
    d[l]  = P(d[l])                    for l in the global-GC set
    m     = lam * m + eta * d;  theta = theta + m

lam = 0, eta = 1, no global GC: FedAvg. lookahead = False, lam > 0: FedAvgM.
lookahead = True: FedACG (FedAGM with eta = tau).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .parts import ServerRule
from .registry import register
from .settings import PRESET, Key, Settings, Uses

# The app keys (run_config/schema.py) the momentum rule and its variants read, as fields of
# their settings: the client weights, global GC, and how the updates become d
# (server_math/robust.py: the aggregator and server-side DP, whose noise is seeded by the run's
# seed).
AGGREGATION = Uses("aggregation", str, "examples", knob=True)
GLOBAL_GC = (Uses("global-gc", str, "none", knob=True),
             Uses("gc-vectors", str, "center", knob=True),
             Uses("gc-borderline", float | str, "classifier", knob=True))
ROBUST = (Uses("robust-aggregator", str, "mean", knob=True),
          Uses("trim-fraction", float, 0.2, knob=True),
          Uses("num-malicious", int, 0, knob=True),
          Uses("multikrum-select", int, 0, knob=True),
          Uses("dp-clipping-norm", float, 0.0, knob=True),
          Uses("dp-noise-multiplier", float, 0.0, knob=True),
          Uses("seed", int, 0))


LOOKAHEAD = Key("lookahead", bool, PRESET,
                "Broadcast phi = theta + lam*m instead of theta (FedACG/FedAGM).",
                "server", choices=(PRESET,), strategy=True, topic="Method", base=False)
LAM = Key("lam", float, PRESET, "Server momentum / look-ahead coefficient lambda.",
          "server", choices=(PRESET,), low=0.0, high=1.0, high_open=True, strategy=True,
          topic="Method", base=0.0)
ETA = Key("eta", float, PRESET,
          "Server step size (FedAGM's tau; FedOpt's eta for fedadam/fedyogi/fedadagrad).",
          "server", choices=(PRESET,), low=0.0, low_open=True, high=1e3, strategy=True,
          topic="Method", base=1.0)


def global_gc_layers(settings: Settings, model) -> list[str]:
    """The parameters of `model` whose aggregated update gets global GC, from the fields of
    `GLOBAL_GC` in a rule's settings."""
    from models.centralization import gc_layer_names

    if settings.global_gc == "none":
        return []
    return gc_layer_names(model, settings.global_gc, settings.gc_borderline)


def robust_aggregation(settings: Settings):
    """How a rule's updates become d (`server_math.robust.RobustConfig`), from the fields of
    `ROBUST` in its settings."""
    from server_math.robust import RobustConfig

    return RobustConfig(
        aggregator=settings.robust_aggregator, trim=settings.trim_fraction,
        num_malicious=settings.num_malicious, multikrum_select=settings.multikrum_select,
        dp_clipping_norm=settings.dp_clipping_norm,
        dp_noise_multiplier=settings.dp_noise_multiplier, seed=settings.seed)


class MomentumRule(ServerRule):
    """Look-ahead broadcast, weighted mean of the updates, global GC, server momentum and step."""

    name = "momentum"
    settings = (LOOKAHEAD, LAM, ETA)
    uses = (AGGREGATION, *GLOBAL_GC, *ROBUST)
    supports = frozenset({"lookahead", "global-gc", "aggregation=uniform", "dynamic-clients",
                          "resume"})
    summary = "look-ahead broadcast, server momentum, global GC (docs/algorithms.md#server-round)"

    def __init__(self, settings: Settings, model=None) -> None:
        """`settings`: `MomentumRule.Settings` (lam, eta, lookahead, aggregation, global GC,
        robust aggregation, seed); `model`: the module or `ModelLayout` whose layers global GC
        names (None: a rule without global GC)."""
        super().__init__(settings, model)
        self.setup(**self.momentum_setup(settings, model))

    def momentum_setup(self, settings: Settings, model) -> dict[str, Any]:
        """The keywords of `setup` that this rule's settings give (a variant whose settings
        lack some of the momentum rule's keys gives `setup`'s defaults for those)."""
        return dict(lam=settings.lam, eta=settings.eta, lookahead=settings.lookahead,
                    aggregation=settings.aggregation, gc_vectors=settings.gc_vectors,
                    global_gc_layers=global_gc_layers(settings, model),
                    robust=robust_aggregation(settings))

    def setup(self, *, lam: float = 0.0, eta: float = 1.0, lookahead: bool = False,
              aggregation: str = "examples", global_gc_layers: Sequence[str] = (),
              gc_vectors: str = "center", robust=None) -> None:
        """The rule's maths from typed values (`momentum_setup` of its settings), its state
        empty until `start`."""
        from server_math.robust import RobustConfig

        if not 0 <= lam < 1:
            raise ValueError(f"lam must be in [0, 1), got {lam}")
        self.lam: float = lam
        self.eta: float = eta
        self.lookahead: bool = lookahead
        self.aggregation: str = aggregation
        self.global_gc_layers: list[str] = list(global_gc_layers)
        self.gc_vectors: str = gc_vectors
        self.robust = robust or RobustConfig()  # how the updates become d (server_math/robust.py)
        self.theta = None  # global model, name -> tensor
        self.m = None  # server momentum
        self.phi = None  # last broadcast point
        self._theta_record = None  # theta as the ArrayRecord last returned
        self.mean_buffer = None  # the last round's d: the buffer of the next one

    def describe(self) -> str:
        return (f"momentum: lookahead={self.lookahead} lam={self.lam} eta={self.eta} "
                f"aggregation={self.aggregation} "
                f"global-GC on {len(self.global_gc_layers)} tensors")

    def start(self, theta_record) -> None:
        import torch  # (here, not at import: the run config reads the registry without torch)

        self.theta = dict(theta_record.to_torch_state_dict())
        self.m = {k: torch.zeros_like(v) for k, v in self.theta.items() if v.is_floating_point()}
        self.phi = None
        self._theta_record = theta_record

    def theta_record(self):
        return self._theta_record

    def broadcast(self, server_round: int):
        from models.wire import array_record
        from server_math.server_update import lookahead

        if self.lookahead and self.lam > 0:
            self.phi = lookahead(self.theta, self.m, self.lam)
            return array_record(self.phi), self.phi
        self.phi = self.theta
        return self._theta_record, self.phi

    def mean_weights(self, num_examples: list[float]) -> list[float] | None:
        from server_math.server_update import client_weights

        if self.robust.aggregator != "mean" or self.robust.dp_clipping_norm > 0:
            return None
        if self.aggregation == "examples" and not sum(num_examples) > 0:
            return None
        return client_weights(num_examples, self.aggregation)

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        from models.wire import array_record
        from server_math import robust

        n = [weight for _, _, weight in good]
        if self.aggregation == "examples" and sum(n) <= 0:
            return None, "the good replies report no training examples"
        too_few = robust.too_few(self.robust, len(good))
        if too_few:
            return None, too_few
        # d goes into the buffer of the last round (step_ only reads it): no new model-sized
        # memory each round
        d = self.mean_buffer = robust.aggregate(
            self.robust, phi, [model for _, model, _ in good], n, self.aggregation, server_round,
            out=self.mean_buffer, prepared=self.prepared_mean)
        self.step_(d)
        for k, v in good[0][1].items():  # non-float buffers: from the first reply
            if not v.is_floating_point():
                self.theta[k] = v
        self._theta_record = array_record(self.theta)  # = ArrayRecord(theta), byte for byte
        return self._theta_record, None

    def step_(self, d: dict) -> None:
        """theta (and the server state) from the round's aggregate update d, in place: global
        GC, then m = lam * m + eta * d; theta = theta + m."""
        from server_math.server_update import global_gc_, server_step_

        global_gc_(d, self.global_gc_layers, self.gc_vectors)
        server_step_(self.theta, self.m, d, self.lam, self.eta)

    def state_dict(self) -> dict[str, Any]:
        copy = lambda state: {k: v.clone() for k, v in state.items()}  # noqa: E731
        return {"theta": copy(self.theta), "m": copy(self.m),
                "phi": copy(self.phi if self.phi is not None else self.theta)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from flwr.app import ArrayRecord

        missing = [k for k in ("theta", "m", "phi") if k not in state]
        if missing:
            raise ValueError(f"the checkpoint lacks the momentum rule's state {missing}")
        self.theta = {k: v.clone() for k, v in state["theta"].items()}
        self.m = {k: v.clone() for k, v in state["m"].items()}
        self.phi = {k: v.clone() for k, v in state["phi"].items()}
        self._theta_record = ArrayRecord(self.theta)


register(MomentumRule)
