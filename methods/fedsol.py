"""FedSOL (Lee et al., CVPR 2024, https://arxiv.org/abs/2308.12532), as GC-Fed's code runs it: each
local step takes the cross-entropy gradient at a point perturbed along the gradient of the KL to
the received model, scaled per element by how far the weight has moved from phi
(docs/baselines.md#fedsol). FedAvg's server rule.
"""

from __future__ import annotations

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import Key

TEMPERATURE = 3.0  # of the KL to the teacher, fixed in the reference code (no T^2 factor)


def sol_perturbation(params, phi, grads, rho: float):
    """e = rho * N0(|w - phi|) * g_p / (||g_p|| + 1e-12), one tensor per parameter.

    N0 L2-normalises along dim 0 (a 1-D tensor as a whole); ||g_p|| is the norm over every
    parameter; a parameter without a gradient (None) is not moved.
    """
    import torch
    import torch.nn.functional as F

    norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in grads if g is not None]))
    scale = rho / (norm + 1e-12)
    return [torch.zeros_like(w) if g is None
            else F.normalize((w - p).abs(), p=2.0, dim=0) * g * scale
            for w, p, g in zip(params, phi, grads)]


class SolPerturbation(ClientPart):
    """The step's gradient: g_p = grad KL(softmax(T(x)/3) || softmax(f_w(x)/3)) at w, then the
    loss's gradient at w + e (sol_perturbation), with the weights put back at w."""

    name = "sol"
    settings = (
        Key("sol-rho", float, 1.0, "FedSOL's perturbation size rho (docs/baselines.md#fedsol); "
            "0 = FedAvg's step.", "client", low=0.0, high=1e4, strategy=True, topic="Baselines"),
    )

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.rho: float = settings.sol_rho

    def begin(self, ctx) -> None:
        self.teacher = ctx.teacher()
        self.phi = [p.detach() for p in self.teacher.parameters()]

    def step_grad(self, ctx, x, y, objective):
        import torch
        import torch.nn.functional as F

        params = ctx.params
        with torch.no_grad():
            target = F.softmax(self.teacher(x) / TEMPERATURE, dim=1)
        kl = F.kl_div(F.log_softmax(ctx.model(x) / TEMPERATURE, dim=1), target,
                      reduction="batchmean")
        g_p = torch.autograd.grad(kl, params, allow_unused=True)
        with torch.no_grad():
            w = [p.detach().clone() for p in params]
            e = sol_perturbation(w, self.phi, g_p, self.rho)
            torch._foreach_add_(params, e)  # w + e
        loss, logits, ce = objective(x, y)
        loss.backward()
        with torch.no_grad():
            torch._foreach_copy_(params, w)  # back at w, exactly
        return logits, ce


register(SolPerturbation)
register(MethodDefinition(
    "fedsol",
    "Lee 2024 https://arxiv.org/abs/2308.12532",
    "momentum", ("sol",), {"aggregation": "uniform"},
))
