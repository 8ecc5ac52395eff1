"""server_math/robust.py against Flower's own robust strategies and DP functions, and the
influence limits of server_math/reply_screen.py against a hand computation."""

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import Bulyan, FedMedian, FedTrimmedAvg, Krum, MultiKrum
from flwr.supercore.differential_privacy import compute_clip_model_update

from server_math import robust
from server_math.influence import limit_influence
from server_math.reply_screen import Screened
from server_math.server_update import client_weights
from strategy_helpers import random_state

N = 7


def models_and_sizes(n=N, seed=0):
    phi = random_state(seed)
    models = []
    for i in range(n):
        scale = 0.1 * (1 + i % 3)
        models.append({k: v + scale * torch.randn(v.shape, generator=torch.Generator().manual_seed(
            seed * 100 + i)) for k, v in phi.items()})
    models[-1] = {k: v + 5.0 for k, v in phi.items()}  # one far away
    return phi, models, [10 + 3 * i for i in range(n)]


def flower_aggregate(strategy, models, sizes):
    replies = []
    for m, n in zip(models, sizes):
        content = RecordDict({"arrays": ArrayRecord({k: v.clone() for k, v in m.items()}),
                              "metrics": MetricRecord({"num-examples": n})})
        msg = Message(content, dst_node_id=1, message_type="train")
        replies.append(Message(content, reply_to=msg))
    arrays, _ = strategy.aggregate_train(1, replies)
    return arrays.to_torch_state_dict()


@pytest.mark.parametrize("rule,flower", [
    ("median", FedMedian()),
    ("trimmed-mean", FedTrimmedAvg(beta=0.2)),
    ("krum", Krum(num_malicious_nodes=1)),
    ("multikrum", MultiKrum(num_malicious_nodes=1, num_nodes_to_select=3)),
    ("bulyan", Bulyan(num_malicious_nodes=1)),
])
@pytest.mark.parametrize("n", [6, 7])  # even and odd: the median of an even count averages
def test_each_rule_equals_flowers_strategy(rule, flower, n):
    if rule == "bulyan" and n < 7:
        n = 7  # Bulyan with f = 1 needs 4f + 3 updates
    phi, models, sizes = models_and_sizes(n)
    cfg = robust.RobustConfig(aggregator=rule, trim=0.2, num_malicious=1, multikrum_select=3)
    d = robust.aggregate(cfg, phi, models, sizes, "examples")
    theirs = flower_aggregate(flower, models, sizes)
    for k in phi:
        torch.testing.assert_close(phi[k] + d[k], torch.as_tensor(theirs[k]), atol=1e-5, rtol=1e-5)


def test_mean_is_the_weighted_mean_bit_for_bit():
    phi, models, sizes = models_and_sizes()
    d = robust.aggregate(robust.RobustConfig(), phi, models, sizes, "examples")
    w = client_weights(sizes, "examples")
    for k in phi:
        acc = torch.zeros_like(phi[k])
        for wi, m in zip(w, models):
            acc.add_(m[k], alpha=wi)
        assert torch.equal(d[k], acc - phi[k])


def test_bulyan_with_too_few_updates_says_so():
    cfg = robust.RobustConfig(aggregator="bulyan", num_malicious=1)
    assert robust.too_few(cfg, 6) == ("bulyan with num-malicious = 1 needs at least 7 good "
                                      "replies, got 6")
    assert robust.too_few(cfg, 7) is None


def test_dp_clipping_equals_flowers_and_the_noise_has_the_set_std():
    phi, models, sizes = models_and_sizes(n=3)
    clip = 0.5
    for m in models:
        ours = robust.clip_update_(m, phi, clip)
        theirs = [v.numpy().copy() for v in m.values()]
        compute_clip_model_update(theirs, [v.numpy() for v in phi.values()], clip)
        for k, t in zip(m, theirs):
            torch.testing.assert_close(ours[k], torch.as_tensor(t), atol=1e-6, rtol=1e-6)
    big = {"w": torch.zeros(200_000)}
    same = [{"w": torch.zeros(200_000)}] * 4
    cfg = robust.RobustConfig(dp_clipping_norm=2.0, dp_noise_multiplier=1.5, seed=3)
    d = robust.aggregate(cfg, big, same, [1] * 4, "uniform", server_round=2)
    assert float(d["w"].std()) == pytest.approx(1.5 * 2.0 / 4, rel=0.01)
    again = robust.aggregate(cfg, big, same, [1] * 4, "uniform", server_round=2)
    assert torch.equal(d["w"], again["w"])  # seeded by (seed, round)


def screened(models, sizes):
    out = Screened(counts={"replies": len(models), "errors": 0, "timeouts": 0, "dropped": 0})
    for i, (m, n) in enumerate(zip(models, sizes)):
        msg = Message(RecordDict(), dst_node_id=i + 1, message_type="train")
        out.good.append((msg, m, float(n)))
    return out


def test_limit_influence_drops_norm_outliers_and_caps_weights_by_hand():
    phi = {"w": torch.zeros(4)}
    norms = [1.0, 2.0, 3.0, 4.0, 35.0]  # median 3: bound 10 x 3 = 30 drops only the last
    models = [{"w": torch.tensor([v, 0.0, 0.0, 0.0])} for v in norms]
    sizes = [10, 20, 30, 1e18, 40]  # after the drop: median of 10, 20, 30, 1e18 = 25 -> cap 250
    s = limit_influence(1, screened(models, sizes), phi, 10.0, 10.0, str)
    assert [float(m["w"][0]) for _, m, _ in s.good] == [1.0, 2.0, 3.0, 4.0]
    assert [n for _, _, n in s.good] == [10.0, 20.0, 30.0, 250.0]
    assert s.counts == {"replies": 4, "errors": 0, "timeouts": 0, "dropped": 1,
                        "dropped-outlier": 1, "capped-weight": 1}
    # off: nothing changes
    s = limit_influence(1, screened(models, sizes), phi, 0.0, 0.0, str)
    assert len(s.good) == 5 and s.good[3][2] == 1e18
    # what the server knows: no claim above the largest partition (35); the ratio rule is then
    # not applied (it would cut 35 to 1.2 x the median 25 = 30)
    s = limit_influence(1, screened(models, sizes), phi, 10.0, 1.2, str, max_weight=35.0)
    assert [n for _, _, n in s.good] == [10.0, 20.0, 30.0, 35.0]
    assert s.counts["capped-weight"] == 1


def test_a_capped_weight_is_logged_with_the_key_that_sets_the_cap(caplog):
    phi = {"w": torch.zeros(1)}
    models = [{"w": torch.ones(1)} for _ in range(3)]
    # largest partition 35 cuts 1e18 to 35 (and the ratio rule is left out: the split is known)
    limit_influence(1, screened(models, [10, 20, 1e18]), phi, 0.0, 1.5, str, max_weight=35.0)
    # the split unknown: the median of 10, 20, 1e18 is 20, and 1e18 > 1.5 x 20
    limit_influence(1, screened(models, [10, 20, 1e18]), phi, 0.0, 1.5, str)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "round 1: 0 claims 1e+18 examples, more than the largest partition (35): weighted as 35 "
        "(num-examples-check)",
        "round 1: 0 claims 1e+18 examples, > 1.5 x the round's median: weighted as 30 "
        "(num-examples-ratio)"]


def test_limit_influence_clips_long_updates_to_the_ratio_times_the_median_by_hand():
    phi = {"w": torch.tensor([1.0, 1.0]), "steps": torch.tensor([3])}
    us = [[3.0, 4.0], [0.0, 5.0], [6.0, 8.0], [0.0, -30.0]]  # norms 5, 5, 10, 30: median 7.5
    models = [{"w": phi["w"] + torch.tensor(u), "steps": torch.tensor([i])}
              for i, u in enumerate(us)]
    s = limit_influence(1, screened(models, [1] * 4), phi, 10.0, 0.0, str, clip_ratio=2.0)
    # bound 2 x 7.5 = 15: only the last is longer; it keeps its direction, its length is 15
    assert [m["w"].tolist() for _, m, _ in s.good] == [
        [4.0, 5.0], [1.0, 6.0], [7.0, 9.0], [1.0, 1.0 - 15.0]]
    assert [int(m["steps"]) for _, m, _ in s.good] == [0, 1, 2, 3]  # non-float: untouched
    assert s.counts["clipped-norm"] == 1 and s.counts["replies"] == 4
    s = limit_influence(1, screened(models, [1] * 4), phi, 10.0, 0.0, str, clip_ratio=4.0)
    assert "clipped-norm" not in s.counts and s.good[3][1]["w"].tolist() == [1.0, -29.0]


def test_weights_do_not_overflow():
    w = client_weights([1e308, 1e308, 5.0], "examples")
    assert w[0] == w[1] == pytest.approx(0.5) and 0 <= w[2] < 1e-300
    assert client_weights([1, 3], "examples") == [0.25, 0.75]
    assert np.isfinite(w).all()
