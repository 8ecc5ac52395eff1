"""FedMLB (Kim, Kim, Han, ICML 2022, https://arxiv.org/abs/2207.06936), as FedACG's code runs it:
hybrid branches that feed each level's local activation through the rest of the frozen received
model, with a cross-entropy and a KL-to-the-main-logits term per branch
(docs/baselines.md#fedmlb). FedAvg's server rule; `fedmlb+acg` adds the look-ahead broadcast.
"""

from __future__ import annotations

from . import momentum  # noqa: F401  (registers the server rule)
from .parts import ClientPart, MethodDefinition
from .registry import register
from .settings import Key


def mlb_branch_loss(teacher, preacts, main_logits, y, lambda1: float, lambda2: float,
                    temperature: float):
    """lambda1 * mean_l CE(h_l, y) + lambda2 * mean_l KL(softmax(h_l/T) || softmax(main/T)),
    h_l = the teacher's stages l+1..4, pool and classifier on ReLU(a_l); h_l is not detached
    (no T^2 factor)."""
    import torch.nn.functional as F

    log_q = F.log_softmax(main_logits / temperature, dim=1)
    ce_sum, kl_sum = 0.0, 0.0
    for level, a in enumerate(preacts):
        h = teacher.forward_from(level, F.relu(a))
        ce_sum = ce_sum + F.cross_entropy(h, y)
        log_p = F.log_softmax(h / temperature, dim=1)
        kl_sum = kl_sum + (log_p.exp() * (log_p - log_q)).sum(1).mean()
    return lambda1 * ce_sum / len(preacts) + lambda2 * kl_sum / len(preacts)


class MultiLevelBranches(ClientPart):
    """The branches' terms added to alpha * CE(main); the forward pass keeps a_0..a_4."""

    name = "mlb"
    settings = (
        Key("mlb-lambda1", float, 1.0,
            "FedMLB's weight lambda_1 of the branches' cross-entropy (docs/baselines.md#fedmlb).",
            "client", low=0.0, high=1e4, strategy=True, topic="Baselines"),
        Key("mlb-lambda2", float, 1.0, "FedMLB's weight lambda_2 of the branches' KL to the main "
            "logits.", "client", low=0.0, high=1e4, strategy=True, topic="Baselines"),
        Key("mlb-temperature", float, 1.0, "FedMLB's temperature T of that KL.", "client", low=0.0,
            low_open=True, high=1e4, strategy=True, topic="Baselines"),
    )
    models = ("resnet18",)  # a model with a stem and stages (FedMLB's own code: ResNets only)
    untested = {
        "local-gc": "no paper combines FedMLB with GC (FedMLB is a loss term only)",
        "global-gc": "no paper combines FedMLB with GC (FedMLB is a loss term only)",
    }

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.lambda1: float = settings.mlb_lambda1
        self.lambda2: float = settings.mlb_lambda2
        self.temperature: float = settings.mlb_temperature
        self.preacts = None

    def begin(self, ctx) -> None:
        if not hasattr(ctx.model, "forward_preactivations"):
            raise TypeError(f"FedMLB needs a model with stages (ResNet-18-GN, model "
                            f"'resnet18'), not {type(ctx.model).__name__}")
        self.teacher = ctx.teacher()

    def model_forward(self, ctx, x):
        logits, self.preacts = ctx.model.forward_preactivations(x)
        return logits

    def loss(self, ctx, logits, x, y):
        preacts, self.preacts = self.preacts, None
        return mlb_branch_loss(self.teacher, preacts, logits, y, self.lambda1, self.lambda2,
                               self.temperature)


register(MultiLevelBranches)
register(MethodDefinition(
    "fedmlb",
    "Kim 2022 https://arxiv.org/abs/2207.06936",
    "momentum", ("mlb",), {},
))
register(MethodDefinition(
    "fedmlb+acg",
    "FedACG (Kim, Kim, Han, CVPR 2024), review version App. A.3 Table 7: FedMLB with the "
    "look-ahead broadcast",
    "momentum", ("mlb",), {"lookahead": True, "lam": 0.85},
))
