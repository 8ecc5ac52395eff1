"""FedCM (Xu et al. 2021, https://arxiv.org/abs/2106.10874): client-level momentum
(docs/baselines.md#fedcm).

    client:  g = a * grad CE + (1 - a) * Delta          (then clipping, opt.step)
    server:  d = sum_i w_i d_i;  theta += eta * d;  Delta = -d / (K * lr_t);  Delta_0 = 0

The server sends Delta with theta (2x down, 1x up). `K` is the clients' local steps (their
w_i-weighted mean when they differ), `lr_t` the learning rate of the round that produced d.
"""

from __future__ import annotations

from typing import Any

from . import momentum
from .parts import ClientPart, MethodDefinition, ReplyMetric, SettingError
from .registry import register
from .settings import Key, Uses

DELTA = "fedcm-delta"  # the record of Delta in the train instruction
WHY_NOT_LOOKAHEAD = "FedCM is itself a momentum correction; no paper adds look-ahead to it"
WHY_NOT_GC = "GC-Fed keeps GC off the methods that correct the client's drift (its Sec. 4.3)"


def fedcm_grad_(grads: list, delta: list, a: float) -> None:
    """In place: g = a * g + (1 - a) * Delta (the gradient of a*CE + (1-a)<w, Delta>)."""
    import torch

    torch._foreach_mul_(grads, a)
    torch._foreach_add_(grads, delta, alpha=1.0 - a)


def fedcm_delta(d: dict, steps: float, lr: float) -> dict:
    """Delta = -d / (K * lr_t): the average local gradient of the round."""
    return {k: v / (-steps * lr) for k, v in d.items()}


class FedCMCorrection(ClientPart):
    """g = a * grad + (1 - a) * Delta, Delta from the server (record 'fedcm-delta')."""

    name = "fedcm"
    settings = (
        Key("fedcm-alpha", float, 0.1,
            "FedCM's a: the client steps along a * gradient + (1 - a) * Delta, Delta the server's"
            " average gradient of the last round (docs/baselines.md#fedcm).",
            "client", low=0.0, high=1.0, strategy=True, topic="Baselines"),
    )
    down = (DELTA,)
    untested = {"lookahead": WHY_NOT_LOOKAHEAD, "local-gc": WHY_NOT_GC}

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.a: float = settings.fedcm_alpha

    def begin(self, ctx) -> None:
        delta = ctx.down[DELTA].to_torch_state_dict()
        names = [n for n, _ in ctx.model.named_parameters()]
        missing = [n for n in names if n not in delta]
        if missing:
            raise ValueError(f"the '{DELTA}' record lacks the parameter(s) {missing[:3]}")
        self.delta = [delta[n].to(p.device, p.dtype) for n, p in zip(names, ctx.params)]

    def correct_grad_(self, ctx) -> None:
        fedcm_grad_([p.grad for p in ctx.params], self.delta, self.a)


class FedCMRule(momentum.MomentumRule):
    """The momentum rule with lam = 0 (theta += eta * d) that also keeps Delta = -d/(K lr_t)
    and sends it with theta."""

    name = "fedcm"
    down = (DELTA,)
    # K: the screen drops a reply whose step count is not a whole number in [0, bound] (a count
    # of 1e-300 steps would make Delta infinite, 1e15 zero); the bound is set in __init__
    up_metrics = {"local-steps": ReplyMetric(low=0.0, high=1e9, integer=True)}
    untested = {"lookahead": WHY_NOT_LOOKAHEAD, "global-gc": WHY_NOT_GC}
    summary = "theta += eta * d; sends Delta = -d / (K lr) (docs/baselines.md#fedcm)"
    uses_lr = True  # Delta = -d / (K lr_t)
    # the momentum rule's keys, the clients' learning rate and their local iterations (None in a
    # named strategy's settings: its clients' loop is the user's)
    uses = (*momentum.MomentumRule.settings, *momentum.MomentumRule.uses,
            Uses("lr", float, 0.05), Uses("lr-decay", float, 1.0),
            Uses("local-iterations", int | None, 0))

    def __init__(self, settings, model=None) -> None:
        super().__init__(settings, model)
        if self.lam != 0:
            raise SettingError(f"'lam' = {self.lam}: server-rule 'fedcm' has no server momentum "
                               "(FedCM's momentum is Delta); set lam = 0")
        self.lr: float = settings.lr
        self.lr_decay: float = settings.lr_decay
        self.delta = None
        # K's bound: local-iterations where set (every honest client takes exactly that many),
        # else 1e9; a larger claim (1e15 made Delta ~0) drops the reply.
        iterations = settings.local_iterations or 0
        bound = float(iterations) if iterations > 0 else 1e9
        self.up_metrics = {"local-steps": ReplyMetric(low=0.0, high=bound, integer=True)}

    def describe(self) -> str:
        return "fedcm: " + super().describe()

    def start(self, theta_record) -> None:
        import torch

        super().start(theta_record)
        self.delta = {k: torch.zeros_like(v) for k, v in self.m.items()}  # Delta_0 = 0

    def down_records(self, server_round: int) -> dict:
        from flwr.app import ArrayRecord

        return {DELTA: ArrayRecord(self.delta)}

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        arrays, skip = super().aggregate(server_round, good, phi, up)
        if skip is not None:
            return arrays, skip
        # d = (theta_t - theta_{t-1}) / eta is what the momentum rule applied (lam = 0: m = eta d)
        d = {k: v / self.eta for k, v in self.m.items()}
        weights = [n for _, _, n in good] if self.aggregation == "examples" else [1.0] * len(good)
        steps = [float(next(iter(msg.content.metric_records.values()))["local-steps"])
                 for msg, _, _ in good]  # screened: one MetricRecord, a whole number >= 0
        k_mean = sum(w * s for w, s in zip(weights, steps)) / sum(weights)
        if not k_mean > 0:  # theta moved, Delta is kept: no step count to divide by
            return arrays, None
        lr_t = self.lr * self.lr_decay ** (server_round - 1)
        self.delta = fedcm_delta(d, k_mean, lr_t)
        return arrays, None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), DELTA: {k: v.clone() for k, v in self.delta.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if DELTA not in state:
            raise ValueError(f"the checkpoint lacks FedCM's state '{DELTA}'")
        super().load_state_dict(state)
        self.delta = {k: v.clone() for k, v in state[DELTA].items()}


register(FedCMCorrection, FedCMRule)
register(MethodDefinition(
    "fedcm", "Xu 2021 https://arxiv.org/abs/2106.10874", "fedcm", ("fedcm",), {}))
