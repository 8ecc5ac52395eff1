"""A method added from outside the app (docs/extending.md's worked example): importing this
module registers it; no other file changes.

"median-anchor": the server takes the coordinate-wise median of the client models (a server
rule with state), and sends an `anchor` (the mean of all past thetas) that each client is pulled
towards by the loss term gamma/2 * ||w - anchor||^2; each client reports its drift ||w_K - phi||
as an extra `drift` record and counts its rounds in its node's Context.state.
"""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, MetricRecord

from methods import ClientPart, MethodDefinition, ServerRule, UpRecord, register

# what the reply record holds: the server screens it against this before the rule reads it
DRIFT = {"drift": UpRecord({"drift": ((1,), "float32")})}


class CoordinateMedian(ServerRule):
    """theta = coordinate-wise median of the client models; anchor = mean of past thetas."""

    name = "coordinate-median"
    down = ("anchor",)
    up = DRIFT
    supports = frozenset({"resume"})
    summary = "coordinate-wise median of the client models (test method)"

    def start(self, theta_record):
        self.theta = dict(theta_record.to_torch_state_dict())
        self.anchor = {k: v.clone() for k, v in self.theta.items()}
        self.rounds = 1  # thetas in the anchor's mean
        self.drifts: list[float] = []
        self._record = theta_record

    def theta_record(self):
        return self._record

    def broadcast(self, server_round):
        return self._record, self.theta

    def down_records(self, server_round):
        return {"anchor": ArrayRecord(self.anchor)}

    def aggregate(self, server_round, good, phi, up):
        models = [model for _, model, _ in good]
        self.theta = {k: torch.stack([m[k] for m in models]).median(dim=0).values.clone()
                      for k in phi}
        self.rounds += 1
        for k, v in self.theta.items():  # running mean of theta_0 .. theta_t
            self.anchor[k] += (v - self.anchor[k]) / self.rounds
        self.drifts += [float(u["drift"]["drift"].numpy()[0]) for u in up]
        self._record = ArrayRecord(self.theta)
        return self._record, None

    def state_dict(self):
        return {"theta": {k: v.clone() for k, v in self.theta.items()},
                "anchor": {k: v.clone() for k, v in self.anchor.items()},
                "anchor-rounds": self.rounds, "drifts": list(self.drifts)}

    def load_state_dict(self, state):
        self.theta = {k: v.clone() for k, v in state["theta"].items()}
        self.anchor = {k: v.clone() for k, v in state["anchor"].items()}
        self.rounds, self.drifts = state["anchor-rounds"], list(state["drifts"])
        self._record = ArrayRecord(self.theta)


class AnchorPull(ClientPart):
    """Loss term gamma/2 * ||w - anchor||^2 (autograd), drift report, round count in state."""

    name = "anchor-pull"
    down = ("anchor",)
    up = DRIFT
    client_state = True
    gamma = 0.5

    def begin(self, ctx):
        names = [n for n, _ in ctx.model.named_parameters()]
        anchor = ctx.down["anchor"].to_torch_state_dict()
        self.anchor = [anchor[n].to(p.device) for n, p in zip(names, ctx.params)]
        self.phi = [p.detach().clone() for p in ctx.params]

    def loss(self, ctx, logits, x, y):
        return self.gamma / 2 * sum(((p - a) ** 2).sum() for p, a in zip(ctx.params, self.anchor))

    def end(self, ctx):
        drift = torch.sqrt(sum(((p.detach() - q) ** 2).sum()
                               for p, q in zip(ctx.params, self.phi)))
        count = ctx.state.metric_records.get("anchor-pull", MetricRecord({"rounds": 0}))
        ctx.state["anchor-pull"] = MetricRecord({"rounds": int(count["rounds"]) + 1})
        return {"drift": ArrayRecord({"drift": drift.reshape(1).cpu()})}


ITEMS = (CoordinateMedian, AnchorPull,
         MethodDefinition("median-anchor", "worked example of docs/extending.md",
                          "coordinate-median", ("anchor-pull",)))
register(*ITEMS)
