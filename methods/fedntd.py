"""FedNTD (Lee et al. 2022, https://arxiv.org/abs/2106.03097): not-true distillation from the
received model phi (docs/baselines.md#fedntd). The true class's column is dropped from the
student's and the teacher's logits; the teacher's softened not-true distribution p is distilled
into the student's q with KL(p || q).

Variants (`ntd-form`): `fedntd-fedacg` = (1 - beta) CE + beta KL, beta = 0.3 (FedACG's code,
uniform client weights); `fedntd-gcfed` = CE + beta tau^2 KL, beta = 1 (GC-Fed's and FedNTD's
code, uniform client weights). `fedntd` is FedACG's form with the clients weighed by examples
(FedAvg's weights). tau = 1 in all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import PRESET, Key

if TYPE_CHECKING:
    import torch


def not_true_logits(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`logits` (N x C) without the column of each row's true class: N x (C - 1)."""
    import torch

    keep = torch.ones_like(logits, dtype=torch.bool).scatter_(1, y.long().unsqueeze(1), False)
    return logits[keep].view(logits.shape[0], logits.shape[1] - 1)


def not_true_kl(student: torch.Tensor, teacher: torch.Tensor, y: torch.Tensor,
                tau: float) -> torch.Tensor:
    """KL(p || q), batch mean: p = softmax(nt(teacher) / tau), q = softmax(nt(student) / tau)."""
    import torch.nn.functional as F

    p = F.softmax(not_true_logits(teacher, y) / tau, dim=1)
    log_q = F.log_softmax(not_true_logits(student, y) / tau, dim=1)
    return F.kl_div(log_q, p, reduction="batchmean")


class NotTrueDistillation(ClientPart):
    """beta KL(p || q) from the frozen teacher phi (times tau^2 in the 'gcfed' form); in the
    'fedacg' form the task loss is scaled by (1 - beta)."""

    name = "fedntd"
    settings = (
        Key("ntd-beta", float, PRESET,
            "FedNTD: weight beta of the not-true distillation term (docs/baselines.md#fedntd); "
            "fedntd-fedacg 0.3, fedntd-gcfed 1.",
            "client", choices=(PRESET,), low=0.0, high=1.0, strategy=True, topic="Baselines",
            base=0.3),
        Key("ntd-tau", float, 1.0, "FedNTD: distillation temperature tau.", "client", low=0.0,
            low_open=True, high=1e4, strategy=True, topic="Baselines"),
        Key("ntd-form", str, PRESET, "FedNTD: 'fedacg' = (1 - beta) CE + beta KL (FedACG code), "
            "'gcfed' = CE + beta tau^2 KL (GC-Fed and FedNTD code).", "client",
            choices=(PRESET, "fedacg", "gcfed"), strategy=True, topic="Baselines", base="fedacg"),
    )

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.beta: float = settings.ntd_beta
        self.tau: float = settings.ntd_tau
        self.form: str = settings.ntd_form
        # weight of the KL term
        self.kl_weight = self.beta * (self.tau ** 2 if self.form == "gcfed" else 1.0)

    def begin(self, ctx) -> None:
        self.teacher = ctx.teacher() if self.beta > 0 else None

    def task_loss(self, ctx, logits, y, loss):
        return (1 - self.beta) * loss if self.form == "fedacg" else loss

    def loss(self, ctx, logits, x, y):
        import torch

        if self.teacher is None:
            return None
        with torch.no_grad():
            teacher_logits = self.teacher(x)
        return self.kl_weight * not_true_kl(logits, teacher_logits, y, self.tau)


PAPER = "Lee 2022 https://arxiv.org/abs/2106.03097"  # FedNTD, NeurIPS 2022
FEDACG = {"ntd-beta": 0.3, "ntd-form": "fedacg"}
register(NotTrueDistillation,
         MethodDefinition("fedntd", PAPER, "momentum", ("fedntd",), FEDACG),
         MethodDefinition("fedntd-fedacg", PAPER + " (FedACG code)", "momentum", ("fedntd",),
                          {**FEDACG, "aggregation": "uniform"}),
         MethodDefinition("fedntd-gcfed", PAPER + " (GC-Fed code)", "momentum", ("fedntd",),
                          {"aggregation": "uniform", "ntd-beta": 1.0, "ntd-form": "gcfed"}))
