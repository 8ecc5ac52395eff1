"""Our strategy against Flower's FedAvg / FedAvgM and against hand computations
(docs/algorithms.md#server-round)."""

import random

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import FedAvg, FedAvgM

from fakegrid import FakeGrid
from run_config import resolve
from strategy_helpers import LookaheadFedAvg, deltas, fixed_models, random_state

SIZES = [10, 30, 25, 5]


def run(strategy, handler, init, rounds=3, grid=None):
    grid = grid or FakeGrid(len(SIZES), handler)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=rounds,
                            train_config=ConfigRecord({"x": 1}))
    return result.arrays.to_torch_state_dict(), grid


def ours(**kw):
    kw.setdefault("fraction_evaluate", 0.0)
    return LookaheadFedAvg(min_train_nodes=4, **kw)


def assert_close(a: dict, b: dict, tol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=tol, rtol=0), (k, (a[k] - b[k]).abs().max())


def test_lam0_equals_flower_fedavg():
    models = [random_state(s) for s in range(4)]
    init = random_state(99)
    a, _ = run(ours(lam=0.0, eta=1.0), fixed_models(models, SIZES), init)
    b, _ = run(FedAvg(min_train_nodes=4, min_available_nodes=4, fraction_evaluate=0.0),
               fixed_models(models, SIZES), init)
    assert_close(a, b)
    expected = {k: sum(n * m[k] for n, m in zip(SIZES, models)) / sum(SIZES) for k in init}
    assert_close(a, expected)


@pytest.mark.parametrize("lam,eta", [(0.7, 0.5), (0.9, 1.3)])
def test_no_lookahead_equals_flower_fedavgm(lam, eta):
    models = [random_state(s) for s in range(4)]
    init = random_state(99)
    a, _ = run(ours(lam=lam, eta=eta, lookahead=False), fixed_models(models, SIZES), init)
    b, _ = run(FedAvgM(min_train_nodes=4, min_available_nodes=4, fraction_evaluate=0.0,
                       server_momentum=lam, server_learning_rate=eta),
               fixed_models(models, SIZES), init)
    assert_close(a, b)
    fedavg, _ = run(ours(lam=0.0), fixed_models(models, SIZES), init)
    assert max((a[k] - fedavg[k]).abs().max() for k in a) > 1e-2  # momentum made a difference


def test_fedacg_two_rounds_by_hand():
    # theta0 = [1, 2]; two clients return phi + delta with n = 1 and 3 examples.
    # d = 0.25*[1, 0] + 0.75*[0, 2] = [0.25, 1.5] in every round; lam = 0.5, eta = 1.
    # round 1: phi = [1, 2]; m1 = [0.25, 1.5]; theta1 = [1.25, 3.5]
    # round 2: phi = theta1 + 0.5*m1 = [1.375, 4.25]; m2 = 0.5*m1 + d = [0.375, 2.25];
    #          theta2 = [1.625, 5.75]
    seen = []
    handler = deltas([{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 2.0])}], [1, 3],
                     seen)
    strategy = LookaheadFedAvg(lam=0.5, eta=1.0, lookahead=True, min_train_nodes=2,
                               fraction_evaluate=0.0)
    grid = FakeGrid(2, handler)
    theta, _ = run(strategy, handler, {"w": torch.tensor([1.0, 2.0])}, rounds=2, grid=grid)
    phis = {r: p["w"].tolist() for r, _, p in seen}
    assert phis == {1: [1.0, 2.0], 2: [1.375, 4.25]}
    assert theta["w"].tolist() == [1.625, 5.75]
    assert strategy.state_dict()["m"]["w"].tolist() == [0.375, 2.25]


def test_server_step_eta_scales_the_update():
    # lam = 0, eta = 0.5: theta1 = theta0 + 0.5 * d
    handler = deltas([{"w": torch.tensor([2.0])}, {"w": torch.tensor([4.0])}], [1, 1], [])
    strategy = LookaheadFedAvg(lam=0.0, eta=0.5, aggregation="uniform", min_train_nodes=2,
                               fraction_evaluate=0.0)
    theta, _ = run(strategy, handler, {"w": torch.tensor([1.0])}, rounds=1,
                   grid=FakeGrid(2, handler))
    assert theta["w"].tolist() == [2.5]  # uniform weights: d = 3, theta = 1 + 1.5


def test_fedagm_with_tau_1_equals_fedacg():
    init = random_state(5)
    ds = [{k: 0.1 * v for k, v in random_state(10 + i).items()} for i in range(4)]
    out = {}
    for method in ("fedacg", "fedagm"):
        cfg = resolve({"method": method, "eta": 1.0})
        s = ours(lam=cfg["lam"], eta=cfg["eta"], lookahead=cfg["lookahead"],
                 aggregation=cfg["aggregation"])
        out[method], _ = run(s, deltas(ds, SIZES, []), init)
    assert_close(out["fedacg"], out["fedagm"], tol=0)


def test_global_gc_touches_only_the_configured_layers():
    init = random_state(1)
    ds = [{k: 0.3 * v for k, v in random_state(20 + i).items()} for i in range(4)]
    plain, _ = run(ours(), deltas(ds, SIZES, []), init, rounds=1)
    gc, _ = run(ours(global_gc_layers=["fc.weight"]), deltas(ds, SIZES, []), init, rounds=1)
    assert torch.equal(gc["conv"], plain["conv"]) and torch.equal(gc["fc.bias"], plain["fc.bias"])
    step = gc["fc.weight"] - init["fc.weight"]
    assert step.mean(dim=1).abs().max() < 1e-6  # each output row of the update is centred
    plain_step = plain["fc.weight"] - init["fc.weight"]
    assert torch.allclose(step, plain_step - plain_step.mean(dim=1, keepdim=True), atol=1e-6)


def test_sampling_is_seeded_and_leaves_global_random_alone():
    models = [random_state(s) for s in range(10)]
    handler = fixed_models(models, [1] * 10)

    def sampled(seed):
        g = FakeGrid(10, handler)
        state = random.getstate()
        s = LookaheadFedAvg(fraction_train=0.3, min_train_nodes=2, fraction_evaluate=0.0, seed=seed)
        s.start(grid=g, initial_arrays=ArrayRecord(random_state(0)), num_rounds=4)
        assert random.getstate() == state
        return [r for r in g.sent if r]  # (the evaluate phase sends nothing)

    first = sampled(7)
    assert first == sampled(7)
    assert first != sampled(8)
    assert all(len(r) == 3 for r in first)


def test_round_config_decays_lr():
    seen_lr = []

    def handler(i, msg):
        seen_lr.append((msg.content["config"]["server-round"], msg.content["config"]["lr"]))
        return fixed_models([random_state(0)] * 2, [1, 1])(i, msg)

    s = LookaheadFedAvg(lr=0.1, lr_decay=0.5, min_train_nodes=2, fraction_evaluate=0.0)
    run(s, handler, random_state(0), rounds=3, grid=FakeGrid(2, handler))
    assert sorted(set(seen_lr)) == [(1, 0.1), (2, 0.05), (3, 0.025)]


def test_bad_replies_are_dropped_and_the_rest_aggregated():
    models = [random_state(s) for s in range(4)]
    bad = {k: v.clone() for k, v in models[3].items()}
    bad["fc.bias"][0] = float("nan")
    init = random_state(99)
    a, _ = run(ours(lam=0.0, min_available_nodes=4), fixed_models(models[:3] + [bad], SIZES),
               init, rounds=1)
    expected = {k: sum(n * m[k] for n, m in zip(SIZES[:3], models[:3])) / sum(SIZES[:3])
                for k in init}
    assert_close(a, expected)
