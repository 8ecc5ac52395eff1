"""MOON (Li, He, Song 2021, https://arxiv.org/abs/2103.16257): model-contrastive learning
(docs/baselines.md#moon). The local model's penultimate features z are pulled towards those of
the received model phi and pushed from those of this client's previous local model:

    s_g = cos(z_w, z_phi), s_p = cos(z_w, z_prev)
    L = CE + mu * mean_batch[-log(e^{s_g/tau} / (e^{s_g/tau} + e^{s_p/tau}))]

`prev` is this client's w_K of its last round, kept as per-client state; in a client's first
round there is none and no term (MOON's code: CE alone). Features, no projection head (as
FL-bench).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import Key

if TYPE_CHECKING:
    import torch

STATE = "moon-prev"  # the per-client state: the previous local model's state_dict


def model_contrastive_loss(z: torch.Tensor, z_global: torch.Tensor, z_prev: torch.Tensor,
                           tau: float) -> torch.Tensor:
    """Batch mean of -log(e^{s_g/tau} / (e^{s_g/tau} + e^{s_p/tau})), i.e. the cross-entropy of
    the two logits [s_g, s_p] / tau with the global model as the positive."""
    import torch
    import torch.nn.functional as F

    s_g = F.cosine_similarity(z.flatten(1), z_global.flatten(1), dim=1)
    s_p = F.cosine_similarity(z.flatten(1), z_prev.flatten(1), dim=1)
    logits = torch.stack([s_g, s_p], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


class ModelContrastive(ClientPart):
    """mu times MOON's contrastive term; phi is the teacher, prev the client's last w_K (none
    in its first round: no term)."""

    name = "moon"
    settings = (
        Key("moon-mu", float, 1.0,
            "MOON: weight mu of the model-contrastive term (docs/baselines.md#moon).",
            "client", low=0.0, high=1e4, strategy=True, topic="Baselines"),
        Key("moon-tau", float, 0.5, "MOON: temperature of the cosine similarities.", "client",
            low=0.0, low_open=True, high=1e4, strategy=True, topic="Baselines"),
    )
    client_state = True

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.mu: float = settings.moon_mu
        self.tau: float = settings.moon_tau

    def begin(self, ctx) -> None:
        from models.features import FeatureTap

        self.tap = self.prev = self.teacher = None
        if self.mu == 0:
            return
        prev = ctx.load_state(STATE, like=ctx.model.state_dict())
        if prev is None:  # the client's first round: no previous model, no term (MOON's code:
            return        # no negative, the one-logit cross-entropy is 0)
        self.teacher = ctx.teacher()
        self.prev = copy.deepcopy(self.teacher)
        self.prev.load_state_dict(prev)
        self.tap = FeatureTap(ctx.model, "penultimate")

    def loss(self, ctx, logits, x, y):
        import torch

        from models.features import forward_with_features

        if self.tap is None:
            return None
        with torch.no_grad():
            z_global = forward_with_features(self.teacher, x)[1]
            z_prev = forward_with_features(self.prev, x)[1]
        return self.mu * model_contrastive_loss(self.tap.features, z_global, z_prev, self.tau)

    def end(self, ctx) -> dict:
        if self.tap is not None:
            self.tap.remove()
        self.prev = self.teacher = None
        ctx.save_state(STATE, ctx.model.state_dict())
        return {}


register(ModelContrastive,
         MethodDefinition("moon", "Li 2021 https://arxiv.org/abs/2103.16257", "momentum",
                          ("moon",)))
