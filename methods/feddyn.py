"""FedDyn (Acar et al. 2021, https://arxiv.org/abs/2111.04263), docs/baselines.md#feddyn.

Client (state g_i, 1x, starts at 0):
    L = CE - <g_i, w> + alpha/2 * ||w - phi||^2        (added as its gradient after backward)
    after the local update: g_i -= alpha * (w_K - phi)
Server (state h, 1x, starts at 0; uniform mean over the round's good replies S):
    h     -= kappa * sum_{i in S} d_i
    theta  = mean_S(w_i) - h / alpha
    kappa  = alpha / N          variant 'paper' (the FedDyn paper; FedACG's code)
    kappa  = alpha / |S|^2      variant 'gcfed' (GC-Fed's code)
1x each way. `alpha` is the run-config key `feddyn-alpha`.

`ModelStepRule` (also FedDC's) is the part of such a rule that is not FedDyn's: theta and its
last step m, the broadcast point phi (theta, or theta + lam * m with look-ahead) and global GC of
the mean update, none of which the papers combine with these methods (untested).
"""

from __future__ import annotations

from typing import Any

from . import fedprox, momentum
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import Key

G_I_STATE = "feddyn-g-i"
UNTESTED_LOOKAHEAD = ("it has its own server rule, theta = mean - h/alpha, and no paper defines "
                      "a look-ahead point for it (docs/baselines.md#combinations)")
UNTESTED_GC = "GC-Fed keeps GC off variance-reduction methods (docs/baselines.md#combinations)"


ALPHA = Key("feddyn-alpha", float, 0.1,
            "FedDyn's alpha: loss += alpha/2 ||w - phi||^2 - <g_i, w>, server theta = mean - "
            "h/alpha (docs/baselines.md#feddyn).",
            "client", low=0.0, low_open=True, high=1e4, strategy=True, topic="Baselines")


class FedDynTerm(ClientPart):
    """- <g_i, w> + alpha/2 ||w - phi||^2 (as gradients), g_i kept on the node."""

    name = "feddyn"
    settings = (ALPHA,)
    client_state = True
    untested = {"local-gc": UNTESTED_GC}

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.alpha: float = settings.feddyn_alpha

    def begin(self, ctx) -> None:
        import torch

        self.names = [n for n, _ in ctx.model.named_parameters()]
        self.phi = [p.detach().clone() for p in ctx.params]
        g_i = ctx.load_state(G_I_STATE, like=dict(ctx.model.named_parameters()))
        self.g_i = ([g_i[n].to(p.device) for n, p in zip(self.names, ctx.params)] if g_i
                    else [torch.zeros_like(p) for p in ctx.params])

    def correct_grad_(self, ctx) -> None:
        import torch

        fedprox.add_proximal_grad_(ctx.params, self.phi, self.alpha)  # + alpha (w - phi)
        torch._foreach_sub_([p.grad for p in ctx.params], self.g_i)  # - g_i

    def end(self, ctx) -> dict:
        import torch

        d = torch._foreach_sub([p.detach() for p in ctx.params], self.phi)  # w_K - phi
        g_i = torch._foreach_add(self.g_i, d, alpha=-self.alpha)
        ctx.save_state(G_I_STATE, dict(zip(self.names, g_i)))
        return {}


class ModelStepRule(momentum.MomentumRule):
    """The momentum rule's theta, its last step m = theta_t - theta_{t-1}, broadcast point and
    global GC of the mean update d; subclasses say how d and their state make the next theta
    (`step`) and name their state (`state_names`, in checkpoints)."""

    supports = frozenset({"lookahead", "global-gc", "aggregation=uniform", "resume"})
    untested = {"lookahead": UNTESTED_LOOKAHEAD, "global-gc": UNTESTED_GC}
    state_names: tuple[str, ...] = ()  # the subclass's state (name -> tensor dicts)
    # theta's step is `step`'s: no eta, and the plain weighted mean (no robust aggregator)
    uses = (momentum.LOOKAHEAD, momentum.LAM, momentum.AGGREGATION, *momentum.GLOBAL_GC)

    def __init__(self, settings, model) -> None:
        super().__init__(settings, model)
        self.param_names = [n for n, _ in model.named_parameters()]

    def momentum_setup(self, settings, model) -> dict[str, Any]:
        return dict(lam=settings.lam, lookahead=settings.lookahead,
                    aggregation=settings.aggregation, gc_vectors=settings.gc_vectors,
                    global_gc_layers=momentum.global_gc_layers(settings, model))

    def start(self, theta_record) -> None:
        import torch

        super().start(theta_record)
        for name in self.state_names:
            setattr(self, name.replace("-", "_"), {k: torch.zeros_like(v) for k, v in
                                                  self.m.items()})

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        import torch
        from flwr.app import ArrayRecord

        from server_math.server_update import aggregate_update, client_weights, global_gc_

        if self.num_clients < len(good):
            return None, (f"N = {self.num_clients} clients known, fewer than the "
                          f"{len(good)} replies: the partitions are not known")
        n = [weight for _, _, weight in good]
        if self.aggregation == "examples" and sum(n) <= 0:
            return None, "the good replies report no training examples"
        models = [model for _, model, _ in good]
        d = aggregate_update(phi, models, client_weights(n, self.aggregation),  # mean_S w_i - phi
                             prepared=self.prepared_mean)
        # sum_S d_i = sum_S w_i - |S| phi
        d_sum = aggregate_update(phi, models, [1.0] * len(models))
        torch._foreach_add_(list(d_sum.values()), [phi[k] for k in d_sum],
                            alpha=1.0 - len(models))
        global_gc_(d, self.global_gc_layers, self.gc_vectors)
        new = self.step(d, d_sum, phi, good, up)  # the next theta's float tensors
        self.m = {k: new[k] - self.theta[k] for k in new}
        self.theta = {**self.theta, **new}
        for k, v in good[0][1].items():  # non-float buffers: from the first reply
            if not v.is_floating_point():
                self.theta[k] = v
        self._theta_record = ArrayRecord(self.theta)
        return self._theta_record, None

    def step(self, d: dict, d_sum: dict, phi: dict, good: list, up: list) -> dict:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **{name: {k: v.clone() for k, v in
                                                   getattr(self, name.replace("-", "_")).items()}
                                            for name in self.state_names}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in self.state_names if k not in state]
        if missing:
            raise ValueError(f"the checkpoint lacks the {self.name} rule's state {missing}")
        super().load_state_dict(state)
        for name in self.state_names:
            setattr(self, name.replace("-", "_"),
                    {k: v.clone() for k, v in state[name].items()})


class FedDynRule(ModelStepRule):
    """h -= kappa * sum_S d_i; theta = mean_S w_i - h / alpha, kappa = alpha / N."""

    name = "feddyn"
    uses = (ALPHA, *ModelStepRule.uses)
    state_names = ("feddyn-h",)
    summary = "FedDyn: server state h, theta = mean - h/alpha (docs/baselines.md#feddyn)"
    variant = "paper"

    def __init__(self, settings, model) -> None:
        super().__init__(settings, model)
        self.alpha: float = settings.feddyn_alpha

    def describe(self) -> str:
        return (f"{self.name}: alpha={self.alpha} kappa=" +
                ("alpha/N" if self.variant == "paper" else "alpha/|S|^2"))

    def kappa(self, num_replies: int) -> float:
        if self.variant == "paper":
            return self.alpha / self.num_clients
        return self.alpha / num_replies ** 2

    def step(self, d, d_sum, phi, good, up):
        import torch

        keys = list(d)
        h = [self.feddyn_h[k] for k in keys]
        torch._foreach_add_(h, [d_sum[k] for k in keys], alpha=-self.kappa(len(good)))
        # theta = mean_S w_i - h / alpha = phi + d - h / alpha
        new = torch._foreach_add([phi[k] for k in keys], [d[k] for k in keys])
        torch._foreach_add_(new, h, alpha=-1.0 / self.alpha)
        return dict(zip(keys, new))


class FedDynGcfedRule(FedDynRule):
    """FedDyn as GC-Fed's code runs it: kappa = alpha / |S|^2."""

    name = "feddyn-gcfed"
    variant = "gcfed"
    summary = ("FedDyn (GC-Fed's code): kappa = alpha/|S|^2, theta = mean - h/alpha "
               "(docs/baselines.md#feddyn)")


PAPER = "Acar 2021 https://arxiv.org/abs/2111.04263"
register(FedDynTerm, FedDynRule, FedDynGcfedRule)
register(MethodDefinition("feddyn", PAPER, "feddyn", ("feddyn",), {"aggregation": "uniform"}),
         MethodDefinition("feddyn-fedacg", PAPER + "; as in FedACG's code", "feddyn", ("feddyn",),
                          {"aggregation": "uniform"}),
         MethodDefinition("feddyn-gcfed", PAPER + "; as in GC-Fed's code", "feddyn-gcfed",
                          ("feddyn",), {"aggregation": "uniform"}))
