"""How far the server moves the model in a round, against how far the clients moved it
(docs/results.md#reading-a-run-folder): what shows where server momentum amplifies the clients'
update until training breaks (docs/momentum-grid.md).

* `server-step-norm`: ||theta^{t+1} - theta^t||, the global model's move in the round;
* `client-update-norm`: ||sum_i p_i w_i - phi^t||, the clients' mean update from the point
  they were sent (p_i: the rule's weights of its mean, as the screening computed it), absent when
  the rule's mean is not that weighted mean (a robust aggregator, DP);
* `lookahead-norm`: ||phi^t - theta^t||, how far ahead of the global model the clients started
  (FedACG's lambda * m; 0 without a look-ahead).

Norms over the floating-point tensors, summed in float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

State = Mapping[str, torch.Tensor]


def distance(a: State, b: State) -> float:
    """||a - b|| over the floating-point tensors both hold, in float64."""
    total = 0.0
    for key, x in a.items():
        y = b.get(key)
        if y is None or not x.is_floating_point():
            continue
        total += float(torch.sum((x.double() - y.double()) ** 2))
    return math.sqrt(total)


def norm(a: State) -> float:
    """||a|| over its floating-point tensors, in float64."""
    return math.sqrt(sum(float(torch.sum(v.double() ** 2)) for v in a.values()
                         if v.is_floating_point()))


def step_sizes(theta_before: State, theta_after: State, lookahead_norm: float,
               client_update_norm: float | None) -> dict[str, float]:
    """The round's `server-step-norm`, with its `lookahead-norm` (`distance(phi, theta_before)`)
    and `client-update-norm` (`norm` of the clients' weighted mean update) when given, both
    measured before the rule ran: a rule may update phi, theta and the mean in place."""
    out = {"server-step-norm": distance(theta_after, theta_before),
           "lookahead-norm": lookahead_norm}
    if client_update_norm is not None:
        out["client-update-norm"] = client_update_norm
    return out
