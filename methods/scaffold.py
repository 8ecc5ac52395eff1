"""SCAFFOLD (Karimireddy et al. 2020, https://arxiv.org/abs/1910.06378) as GC-Fed's code runs it
(docs/baselines.md#scaffold): control variates c (server) and c_i (each client).

Client, each step: g += c - c_i after backward (then clipping, GC and the optimizer step).
After the K steps:
    c_i+ = c_i - c + (phi - w_K) / (K_eff * lr),
    K_eff = (K - rho (1 - rho^K) / (1 - rho)) / (1 - rho)     (rho = local momentum; K if 0)
with lr the undecayed base lr; the client keeps c_i+ and sends delta-c_i = c_i+ - c_i.
Server: theta += eta * sum_i w_i d_i (the momentum rule, lam = 0) and
    c += (|S| / N) * sum_i w_i delta-c_i.
Down theta and c, up d_i and delta-c_i: 2x each way. c and c_i cover the parameters (the tensors
with gradients).
"""

from __future__ import annotations

from typing import Any

from . import momentum
from .parts import ClientPart, MethodDefinition, UpRecord
from .registry import register
from .settings import Uses

C_RECORD, DELTA_C_RECORD, C_I_STATE = "scaffold-c", "scaffold-dc", "scaffold-c-i"
UP = {DELTA_C_RECORD: UpRecord()}  # delta-c_i: one tensor per parameter, screened by the server
UNTESTED_LOOKAHEAD = ("the control variates assume every client starts at theta, not at a "
                      "look-ahead point (docs/baselines.md#combinations)")
UNTESTED_GC = ("GC-Fed keeps GC off variance-reduction methods (docs/baselines.md#combinations)")


def k_eff(k: int, rho: float) -> float:
    """K_eff = (K - rho (1 - rho^K) / (1 - rho)) / (1 - rho): the sum over the K steps of the
    momentum buffer's weight on each gradient (K without momentum)."""
    if rho == 0:
        return float(k)
    return (k - rho * (1 - rho ** k) / (1 - rho)) / (1 - rho)


class ScaffoldCorrection(ClientPart):
    """g += c - c_i each step; c_i+ after the local update (kept on the node)."""

    name = "scaffold"
    down = (C_RECORD,)
    up = UP
    client_state = True
    untested = {"local-gc": UNTESTED_GC}
    uses_lr = True  # delta-c_i's 1 / (K_eff lr)
    uses = (Uses("lr", float, 0.05), Uses("local-momentum", float, 0.0))

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.local_momentum: float = settings.local_momentum  # K_eff's rho
        self.lr: float = settings.lr  # the undecayed base lr

    def begin(self, ctx) -> None:
        import torch

        self.names = [n for n, _ in ctx.model.named_parameters()]
        c = ctx.down[C_RECORD].to_torch_state_dict()
        c_i = ctx.load_state(C_I_STATE, like=dict(ctx.model.named_parameters()))
        self.c = [c[n].to(p.device) for n, p in zip(self.names, ctx.params)]
        self.c_i = ([c_i[n].to(p.device) for n, p in zip(self.names, ctx.params)] if c_i
                    else [torch.zeros_like(p) for p in ctx.params])
        self.correction = torch._foreach_sub(self.c, self.c_i)  # c - c_i
        self.phi = [p.detach().clone() for p in ctx.params]

    def correct_grad_(self, ctx) -> None:
        import torch

        torch._foreach_add_([p.grad for p in ctx.params], self.correction)

    def end(self, ctx) -> dict:
        import torch
        from flwr.app import ArrayRecord

        scale = 1.0 / (k_eff(ctx.steps_done, self.local_momentum) * self.lr)
        drift = torch._foreach_sub(self.phi, [p.detach() for p in ctx.params])  # phi - w_K
        # delta-c_i = c_i+ - c_i = -c + (phi - w_K) / (K_eff lr)
        delta = torch._foreach_mul(drift, scale)
        torch._foreach_sub_(delta, self.c)
        c_i_new = torch._foreach_add(self.c_i, delta)
        ctx.save_state(C_I_STATE, dict(zip(self.names, c_i_new)))
        return {DELTA_C_RECORD: ArrayRecord({n: d.cpu() for n, d in zip(self.names, delta)})}


class ScaffoldRule(momentum.MomentumRule):
    """The momentum rule (theta += eta * sum_i w_i d_i with lam = 0) plus the server's control
    variate c += (|S|/N) * sum_i w_i delta-c_i, sent to the clients with theta."""

    name = "scaffold"
    down = (C_RECORD,)
    up = UP
    supports = frozenset({"lookahead", "global-gc", "aggregation=uniform", "resume"})
    untested = {"lookahead": UNTESTED_LOOKAHEAD, "global-gc": UNTESTED_GC}
    summary = ("SCAFFOLD: server control variate c sent with theta, clients' delta-c_i "
               "(docs/baselines.md#scaffold)")

    def __init__(self, settings, model) -> None:
        super().__init__(settings, model)
        self.param_names = [n for n, _ in model.named_parameters()]

    def describe(self) -> str:
        return "scaffold: " + super().describe()

    def start(self, theta_record) -> None:
        import torch

        super().start(theta_record)
        self.c = {n: torch.zeros_like(self.theta[n]) for n in self.param_names}  # c_0 = 0

    def down_records(self, server_round: int) -> dict:
        from flwr.app import ArrayRecord

        return {C_RECORD: ArrayRecord(self.c)}

    def up_centers(self) -> dict:
        # delta-c_i = -c + (phi - w_K) / (K_eff lr): its norm from -c is client i's drift
        return {DELTA_C_RECORD: {k: -v for k, v in self.c.items()}}

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        import torch

        from server_math.server_update import client_weights

        if self.num_clients < len(good):
            return None, (f"N = {self.num_clients} clients known, fewer than the "
                          f"{len(good)} replies: the partitions are not known")
        arrays, skip = super().aggregate(server_round, good, phi, up)
        if skip is not None:
            return arrays, skip
        weights = client_weights([n for _, _, n in good], self.aggregation)
        scale = len(good) / self.num_clients  # |S| / N
        keys = self.param_names
        for w, records in zip(weights, up):
            delta = records[DELTA_C_RECORD]
            torch._foreach_add_([self.c[k] for k in keys], [delta[k] for k in keys],
                                alpha=scale * w)
        return arrays, None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "scaffold-c": {k: v.clone() for k, v in self.c.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaffold-c" not in state:
            raise ValueError("the checkpoint lacks SCAFFOLD's control variate 'scaffold-c'")
        super().load_state_dict(state)
        self.c = {k: v.clone() for k, v in state["scaffold-c"].items()}


register(ScaffoldCorrection, ScaffoldRule)
register(MethodDefinition(
    "scaffold", "Karimireddy et al. SCAFFOLD, ICML 2020 https://arxiv.org/abs/1910.06378 "
    "(as in GC-Fed's code)", "scaffold", ("scaffold",), {"aggregation": "uniform"}))
