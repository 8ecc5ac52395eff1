"""Pins of the server round (docs/algorithms.md#server-round) on fixed client replies, each against
a hand computation: uniform weights with unequal sizes, global GC with gc-vectors, non-float
buffers from the first good reply, and max-update-norm measured from phi."""

import pytest
import torch

from pins_helpers import (broadcast_of, config_of, is_query, lookahead_strategy, make_reply,
                          partition_reply, run_strategy, strategy_from_config, strategy_state)

SIZES = [10, 30, 25, 5]  # unequal on purpose


def states(seed: int, n: int, scale: float = 1.0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"w": scale * torch.randn(3, 4, generator=g), "b": scale * torch.randn(3, generator=g)}
            for _ in range(n)]


def answering(models: list[dict], sizes: list[int], seen: list | None = None):
    """Node i answers the partition query with i, and a train instruction with models[i]."""

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, len(models))
        if seen is not None:
            seen.append((config_of(msg)["server-round"], i, broadcast_of(msg)))
        return make_reply(models[i], sizes[i])

    return handler


@pytest.mark.parametrize("aggregation", ["uniform", "examples"])
def test_client_weights_with_unequal_sizes(aggregation):
    init, models = states(0, 1)[0], states(1, 4)
    strategy = strategy_from_config({"method": "fedavg", "aggregation": aggregation,
                                     "fraction-train": 1.0, "min-train-nodes": 4})
    theta, _ = run_strategy(strategy, answering(models, SIZES), init, rounds=1, num_nodes=4)
    # lam = 0, eta = 1: theta_1 = sum_i w_i * w_i_K; uniform: 1/4 each, examples: n_i / 70
    weights = [0.25] * 4 if aggregation == "uniform" else [10 / 70, 30 / 70, 25 / 70, 5 / 70]
    for k in init:
        want = sum(w * m[k] for w, m in zip(weights, models))
        assert torch.allclose(theta[k], want, atol=1e-6, rtol=0), k


@pytest.mark.parametrize("vectors", ["center", "skip"])
@pytest.mark.parametrize("global_gc", ["all", "classifier"])
def test_global_gc_and_gc_vectors_on_the_server(vectors, global_gc):
    """The server step with global GC is P(d) on the configured tensors; 1-D ones only with
    gc-vectors = 'center'. (fedavg, uniform weights: d = mean_i(w_i) - theta.)"""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))  # 0.*: features
    model.classifier_names = ("1.weight", "1.bias")
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(5)
    models = [{k: v + torch.randn(v.shape, generator=g) for k, v in init.items()}
              for _ in range(4)]
    strategy = strategy_from_config({"method": "fedavg", "aggregation": "uniform",
                                     "global-gc": global_gc, "gc-vectors": vectors,
                                     "fraction-train": 1.0, "min-train-nodes": 4}, model)
    theta, _ = run_strategy(strategy, answering(models, SIZES), init, rounds=1, num_nodes=4)
    for k in init:
        d = sum(m[k] for m in models) / 4 - init[k]
        centred = global_gc == "all" or k.startswith("1.")
        if centred and d.dim() == 2:
            d = d - d.mean(dim=1, keepdim=True)
        elif centred and vectors == "center":
            d = d - d.mean()
        assert torch.allclose(theta[k] - init[k], d, atol=1e-6, rtol=0), k


def test_non_float_buffers_come_from_the_first_good_reply():
    """Partition 0's reply is bad (NaN) and dropped; the integer buffer is then taken from the
    first good reply in partition order (partition 1), never averaged; floats are averaged over
    the good replies."""
    init = {"w": torch.zeros(2), "count": torch.tensor([0, 0])}
    models = [{"w": torch.tensor([float("nan"), 0.0]), "count": torch.tensor([100, 100])},
              {"w": torch.tensor([1.0, 2.0]), "count": torch.tensor([11, 21])},
              {"w": torch.tensor([3.0, 4.0]), "count": torch.tensor([12, 22])},
              {"w": torch.tensor([5.0, 9.0]), "count": torch.tensor([13, 23])}]
    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=4, identify_nodes=True,
                                  aggregation="uniform", seed=3)
    theta, grid = run_strategy(strategy, answering(models, [1, 1, 1, 1]), init, rounds=1,
                               num_nodes=4)
    sent = [grid.node_ids.index(n) for n in grid.sent[0]]
    assert sent != sorted(sent)  # replies arrive out of partition order
    assert theta["count"].tolist() == [11, 21]
    assert theta["count"].dtype == torch.int64
    assert theta["w"].tolist() == [3.0, 5.0]
    assert set(strategy_state(strategy)["m"]) == {"w"}  # no momentum for integer buffers


def test_max_update_norm_is_measured_from_phi_not_theta():
    """FedACG, lam = 0.5, eta = 10. Round 1 (phi = theta = 0): replies +0.1 and +0.3 (norms
    under the limit 1): d = 0.2, m1 = 2, theta1 = 2, so phi2 = theta1 + 0.5 * m1 = 3.
    Round 2: node 0 answers phi + 0.1 (0.1 from phi, 1.1 from theta: kept), node 1 answers
    theta1 - 0.1 (1.1 from phi: dropped, although only 0.1 from theta).
    Only node 0 counts: d = 0.1, m2 = 0.5 * 2 + 10 * 0.1 = 2, theta2 = 4."""
    seen = []

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, 2)
        rnd, phi = config_of(msg)["server-round"], broadcast_of(msg)["w"]
        seen.append((rnd, i, phi.clone()))
        if rnd == 1:
            return make_reply({"w": phi + (0.1 if i == 0 else 0.3)}, 1)
        return make_reply({"w": phi + 0.1 if i == 0 else phi - 1.1}, 1)

    strategy = lookahead_strategy(lam=0.5, eta=10.0, lookahead=True, fraction_train=1.0,
                                  min_train_nodes=2, aggregation="uniform", max_update_norm=1.0)
    theta, _ = run_strategy(strategy, handler, {"w": torch.zeros(1)}, rounds=2, num_nodes=2)
    assert [p.item() for r, _, p in seen if r == 2] == pytest.approx([3.0, 3.0])
    assert theta["w"].item() == pytest.approx(4.0)
    assert strategy_state(strategy)["m"]["w"].item() == pytest.approx(2.0)
