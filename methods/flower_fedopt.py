"""Flower's own adaptive server optimizers (FedOpt, Reddi et al. 2021,
https://arxiv.org/abs/2003.00295) as server rules: the maths is Flower's `FedAdam`, `FedYogi` and
`FedAdagrad` (their `aggregate_train`), never copied here. Nodes are sampled as Flower samples
them; their optimizer state is Flower's, not checkpointed, so resume and dynamic clients are
refused for them (`supports` is empty).
"""

from __future__ import annotations

import importlib
from typing import ClassVar

from . import momentum
from .parts import ServerRule
from .registry import register
from .settings import Key

TAU = Key("fedopt-tau", float, 1e-3,
          "Adaptivity tau of fedadam/fedyogi/fedadagrad (Flower's FedOpt).",
          "server", low=0.0, low_open=True, high=1e3, strategy=True, topic="Method")


class FlowerFedOpt(ServerRule):
    """One of Flower's FedOpt strategies, used for its server update only."""

    flower_class: ClassVar[str] = "FedAdam"  # in flwr.serverapp.strategy (imported when built)
    settings = (TAU,)
    uses = (momentum.ETA,)
    sampling = "flower"
    summary = "Flower's own FedOpt strategy: no look-ahead, global GC, uniform weights, resume"

    def __init__(self, settings, model=None) -> None:
        super().__init__(settings, model)
        flower_class = getattr(importlib.import_module("flwr.serverapp.strategy"),
                               self.flower_class)
        self.flower = flower_class(eta=settings.eta, tau=settings.fedopt_tau)
        self._theta_record = None

    def describe(self) -> str:
        return f"{self.name}: Flower's {self.flower_class} (eta={self.flower.eta}, " \
               f"tau={self.flower.tau})"

    def start(self, theta_record) -> None:
        self._theta_record = theta_record

    def theta_record(self):
        return self._theta_record

    def broadcast(self, server_round: int):
        # Flower's FedOpt.configure_train keeps the broadcast arrays for its update
        self.flower.current_arrays = {k: a.numpy() for k, a in self._theta_record.items()}
        return self._theta_record, dict(self._theta_record.to_torch_state_dict())

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        from flwr.serverapp.exception import AggregationError, InconsistentMessageReplies

        key = self.flower.weighted_by_key
        for msg, _, n in good:  # a capped weight (influence.limit_influence) is what it uses
            next(iter(msg.content.metric_records.values()))[key] = n
        try:
            arrays, _ = self.flower.aggregate_train(server_round, [msg for msg, _, _ in good])
        except (InconsistentMessageReplies, AggregationError, ArithmeticError, ValueError) as err:
            return None, f"Flower's aggregation refused the replies: {err}"
        if arrays is None:
            return None, "Flower's aggregation returned no model"
        # Flower's FedOpt computes in float64 (numpy promotes its optimizer state): give theta
        # back its own dtypes, or every reply of the next round is dropped for its dtype.
        from flwr.app import ArrayRecord

        dtypes = {k: v.dtype for k, v in phi.items()}
        state = arrays.to_torch_state_dict()
        arrays = ArrayRecord({k: v.to(dtypes.get(k, v.dtype)) for k, v in state.items()})
        self._theta_record = arrays
        return arrays, None

    def state_to_check(self) -> dict:
        """Flower's optimizer moments (NumPy arrays; None before the first update)."""
        return {name: getattr(self.flower, name, None) or {} for name in ("m_t", "v_t")}

    def state_dict(self) -> dict:
        raise NotImplementedError(f"server rule '{self.name}' (Flower's own optimizer state) "
                                  "cannot be checkpointed; set checkpoint-every = 0")


class FlowerFedAdam(FlowerFedOpt):
    """Flower's FedAdam."""
    name, flower_class = "fedadam", "FedAdam"


class FlowerFedYogi(FlowerFedOpt):
    """Flower's FedYogi."""
    name, flower_class = "fedyogi", "FedYogi"


class FlowerFedAdagrad(FlowerFedOpt):
    """Flower's FedAdagrad."""
    name, flower_class = "fedadagrad", "FedAdagrad"


register(FlowerFedAdam, FlowerFedYogi, FlowerFedAdagrad)
