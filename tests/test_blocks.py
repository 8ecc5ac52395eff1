"""The server's block-wise passes (server_math/reply_pass.py) against plain float64 computations."""

import math

import pytest
import torch

from server_math.reply_pass import ScaledUpdate, norms_and_sum, plan, weighted_sum_minus
from server_math.server_update import aggregate_update
from strategies.state_check import nonfinite_parts


def states(n: int, seed: int = 0):
    """phi and n models: tensors smaller and larger than a block, and a non-float buffer."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {"conv": (70, 3, 33, 41), "bias": (7,), "scalar": (), "fc": (600, 500)}
    phi = {k: torch.randn(s, generator=gen) for k, s in shapes.items()}
    phi["count"] = torch.tensor(3)
    models = [{k: (v + torch.randn(v.shape, generator=gen) if v.is_floating_point() else v)
               for k, v in phi.items()} for _ in range(n)]
    return phi, models


KEYS = ["conv", "bias", "scalar", "fc"]


@pytest.mark.parametrize("sizes,block", [((5, 0, 12, 1), 4), ((3, 3), 3), ((10,), 64)])
def test_the_blocks_cover_every_element_once(sizes, block):
    seen = [[0] * s for s in sizes]
    for pieces in plan(sizes, block):
        assert sum(stop - start for _, start, stop in pieces) <= block
        for i, start, stop in pieces:
            for j in range(start, stop):
                seen[i][j] += 1
    assert all(c == 1 for row in seen for c in row)


def test_one_pass_gives_the_exact_norms_and_the_plain_sum():
    phi, models = states(3)
    models[2]["fc"] = models[2]["fc"].t().contiguous().t()  # not contiguous: reshape copies
    weights = [0.5, 0.25, 0.25]
    norms, mean = norms_and_sum(models, phi, KEYS, weights)
    for m, got in zip(models, norms):
        want = math.sqrt(sum(float((m[k].double() - phi[k].double()).square().sum())
                             for k in KEYS))
        # float32 per block (BLAS: 2.3e-6 at most measured), float64 across
        assert got == pytest.approx(want, rel=1e-4)
    assert all(torch.equal(mean[k], weighted_sum_minus(models, weights, phi, KEYS)[k])
               for k in KEYS)
    models[1]["bias"] = models[1]["bias"].clone()
    models[1]["bias"][2] = float("nan")
    norms, mean = norms_and_sum(models, phi, KEYS)
    assert mean is None and math.isnan(norms[1]) and math.isfinite(norms[0])


def test_the_weighted_sum_is_the_plain_one_and_reuses_its_buffer():
    phi, models = states(4)
    weights = [0.1, 0.2, 0.3, 0.4]
    out = weighted_sum_minus(models, weights, phi, KEYS)
    for k in KEYS:
        want = sum(w * m[k].double() for w, m in zip(weights, models)) - phi[k].double()
        torch.testing.assert_close(out[k].double(), want, rtol=0, atol=1e-5)
        # element by element the operations of a whole-tensor pass: the very same bits
        plain = torch.zeros_like(phi[k])
        for w, m in zip(weights, models):
            plain.add_(m[k], alpha=w)
        assert torch.equal(out[k], plain.sub_(phi[k]))
    again = weighted_sum_minus(models[:2], [0.5, 0.5], phi, KEYS, out=out)
    assert all(again[k] is out[k] for k in KEYS)  # written in place: no new memory
    assert torch.equal(again["fc"], aggregate_update(phi, models[:2], [0.5, 0.5])["fc"])


def test_a_scaled_update_is_summed_as_the_model_it_stands_for():
    phi, models = states(3)
    scaled = ScaledUpdate(models[1], phi, 0.25)
    assert torch.equal(scaled["count"], phi["count"])
    for weights in ([0.2, 0.3, 0.5], [1.0, 1.0, 1.0]):  # FedDyn's sum of updates: 1 each
        got = aggregate_update(phi, [models[0], scaled, models[2]], weights)
        materialised = {k: scaled[k] for k in scaled}
        want = aggregate_update(phi, [models[0], materialised, models[2]], weights)
        for k in KEYS:
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=1e-5)
    zero = aggregate_update(phi, [ScaledUpdate(models[0], phi, 0.0)], [1.0])
    assert all(float(zero[k].abs().max()) < 1e-6 for k in KEYS)


def test_the_state_check_finds_what_is_not_finite_and_not_what_is_only_huge():
    state = {"theta": {"a": torch.full((4,), 3e38), "b": torch.ones(2)},
             "m": {"a": torch.tensor([1.0, float("inf")]), "n": torch.tensor(5)}}
    # 3e38: its norm overflows float32, its values do not
    assert nonfinite_parts(state) == {"m": ["a"]}


def round_of(n: int, poison: bool = False):
    """The FedACG strategy as the ServerApp builds it, one train round of n CNN replies (the
    first one NaN with `poison`): (strategy, replies, the floats of each reply)."""
    import warnings

    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    from benchmarks.server_aggregation import off_the_wire, setup
    from models.wire import state_view

    model, replies, grid, strategy, arrays = setup("cnn", n)
    if poison:
        bad = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
               for k, v in model.state_dict().items()}
        content = RecordDict({"arrays": ArrayRecord(bad),
                              "metrics": MetricRecord({"num-examples": 500})})
        instruction = Message(RecordDict(), dst_node_id=1, message_type="train")
        replies[0] = grid.replies[0] = off_the_wire(Message(content, reply_to=instruction))
    answers = grid.send_and_receive(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        states = [state_view(r.content["arrays"]) for r in replies]
    return strategy, answers, states


@pytest.mark.parametrize("poison", [False, True])
def test_the_round_loop_takes_the_screens_mean_when_it_is_the_rules(monkeypatch, poison):
    import server_math.server_update as server_update
    from models.wire import state_view

    calls = []
    plain = server_update.weighted_sum_minus
    monkeypatch.setattr(server_update, "weighted_sum_minus",
                        lambda *a, **k: calls.append(1) or plain(*a, **k))
    strategy, answers, states = round_of(4, poison)
    arrays, metrics = strategy.aggregate_train(1, answers)
    # honest replies: the screen's pass computed the mean; a dropped one: the rule computes it
    assert (len(calls), metrics["replies"]) == ((1, 3) if poison else (0, 4))
    theta = state_view(arrays)
    kept = states[1:] if poison else states
    for k, v in theta.items():  # round 1 of FedACG (m = 0, eta = 1): theta = the mean
        if v.is_floating_point():
            want = sum(s[k].double() for s in kept) / len(kept)
            torch.testing.assert_close(v.double(), want, rtol=0, atol=1e-6)
