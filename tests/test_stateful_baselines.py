"""SCAFFOLD, FedDyn and FedDC (docs/baselines.md#scaffold, #feddyn, #feddc): the client rules
against plain second implementations on a tiny model, the server rules against hand
computations over two rounds, round-1 identities with FedAvg / FedProx, and runs through the real
ServerApp and ClientApp in-process, resume included (per-client state on the nodes' disks)."""

from __future__ import annotations

import json
import re
import stat

import pytest
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, RecordDict
from torch import nn

import server_app.app as server
from client_app.client_state_store import DiskVersions
from client_app.client_step import LocalContext
from client_app.local_update import LocalConfig, local_update
from fakegrid import FakeGrid, client_app_handler
from methods.feddc import DELTA_G_RECORD, G_RECORD, DriftCorrection, FedDCRule
from methods.feddyn import FedDynGcfedRule, FedDynRule, FedDynTerm
from methods.fedprox import ProximalTerm
from methods.scaffold import C_RECORD, DELTA_C_RECORD, ScaffoldCorrection, ScaffoldRule, k_eff
from run_config import resolve
from server_app.checkpoint import load_checkpoint

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

LR, STEPS, BATCH = 0.1, 4, 5


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def tiny_data(seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(12, 3, generator=gen), torch.randint(0, 2, (12,), generator=gen)


def named(model, fill=None, seed=None):
    """name -> tensor over the parameters: zeros, a constant, or seeded noise."""
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    out = {}
    for n, p in model.named_parameters():
        out[n] = (torch.randn(p.shape, generator=gen) * 0.1 if gen is not None
                  else torch.full_like(p.detach(), fill or 0.0))
    return out


def train(model, parts, *, momentum=0.0, down=None, state=None, lr=LR, cfg_lr=None):
    """The app's local update on the tiny model; returns the context (state, up records)."""
    x, y = tiny_data()
    ctx = LocalContext(down=down or {}, state=state if state is not None else RecordDict(),
                       server_round=1)
    local_update(model, x, y, LocalConfig(lr=lr, local_iterations=STEPS, batch_size=BATCH,
                                          local_momentum=momentum), None, parts=parts, ctx=ctx)
    return ctx


def plain_sgd(model, grad_extra):
    """Second implementation: SGD (no momentum, wd, clipping) on CE + extra gradient terms,
    same mini-batches as the app (its batch order for generator seed 0)."""
    from client_app.local_update import batches

    x, y = tiny_data()
    params = list(model.parameters())
    phi = [p.detach().clone() for p in params]
    for idx in batches(len(y), BATCH, STEPS, torch.Generator().manual_seed(0)):
        for p in params:
            p.grad = None
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        with torch.no_grad():
            for i, p in enumerate(params):
                p -= LR * (p.grad + grad_extra(i, p, phi[i]))
    return phi


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


# --- SCAFFOLD ---------------------------------------------------------------------------------

def test_k_eff():
    assert k_eff(1, 0.9) == pytest.approx(1.0)
    assert k_eff(2, 0.9) == pytest.approx(2.9)
    assert k_eff(7, 0.0) == 7.0
    # the sum over steps of each gradient's total weight in the momentum buffer
    assert k_eff(5, 0.5) == pytest.approx(sum(sum(0.5 ** j for j in range(5 - k))
                                              for k in range(5)))


def scaffold_part():
    return ScaffoldCorrection(ScaffoldCorrection.Settings(lr=LR, local_momentum=0.0))


def test_scaffold_zero_control_variates_is_a_plain_local_update():
    plain, with_part = tiny_model(), tiny_model()
    train(plain, [])
    c = ArrayRecord(named(with_part, 0.0))
    train(with_part, [scaffold_part()], down={C_RECORD: c})
    assert all(torch.equal(a, b) for a, b in zip(weights(plain), weights(with_part)))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_scaffold_client_against_a_second_implementation(momentum):
    model = tiny_model()
    c, c_i = named(model, seed=5), named(model, seed=6)
    state = RecordDict()
    LocalContext(state=state).save_state("scaffold-c-i", c_i)  # an earlier round's c_i
    part = ScaffoldCorrection(ScaffoldCorrection.Settings(lr=LR, local_momentum=momentum))
    phi = weights(model)
    ctx = train(model, [part], momentum=momentum, down={C_RECORD: ArrayRecord(c)}, state=state)
    names = [n for n, _ in model.named_parameters()]
    keff = k_eff(STEPS, momentum)
    delta = ctx.up[DELTA_C_RECORD].to_torch_state_dict()
    saved = LocalContext(state=state).load_state("scaffold-c-i",
                                                 like=dict(model.named_parameters()))
    for n, p0, w in zip(names, phi, weights(model)):
        want = -c[n] + (p0 - w) / (keff * LR)  # delta-c_i = -c + (phi - w_K) / (K_eff lr)
        assert torch.allclose(delta[n], want, atol=1e-6)
        assert torch.allclose(saved[n], c_i[n] + want, atol=1e-6)  # c_i+ = c_i + delta-c_i
    if momentum == 0:  # the trajectory: g += c - c_i every step
        second = tiny_model()
        plain_sgd(second, lambda i, p, p0: c[names[i]] - c_i[names[i]])
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights(model),
                                                                    weights(second)))


class Reply:  # the rules read only the models and the example counts of the good replies
    pass


def replies(phi, updates, n=None):
    return [(Reply(), {k: phi[k] + u[k] for k in phi}, (n or [1] * len(updates))[i])
            for i, u in enumerate(updates)]


def rule_cfg(**extra):
    return resolve({"method": extra.pop("method"), "model": "mlp", **extra})


def mlp():
    from models import build_model

    return build_model("mlp", (1, 8, 8), 10, 2, seed=0)


def test_scaffold_server_two_rounds_by_hand():
    model = mlp()
    rule = ScaffoldRule(ScaffoldRule.Settings.from_config(rule_cfg(method="scaffold")), model)
    rule.num_clients = 5
    theta0 = {k: v.clone() for k, v in model.state_dict().items()}
    rule.start(ArrayRecord(model.state_dict()))
    c = {k: torch.zeros_like(v) for k, v in theta0.items()}
    theta = {k: v.clone() for k, v in theta0.items()}
    for rnd, seeds in ((1, (1, 2)), (2, (3, 4, 5))):
        down = rule.down_records(rnd)[C_RECORD].to_torch_state_dict()
        assert all(torch.allclose(down[k], c[k], atol=1e-7) for k in c)
        # the screen measures delta-c_i from -c (the clients' drifts, not c, compared)
        center = rule.up_centers()[DELTA_C_RECORD]
        assert center.keys() == c.keys()
        assert all(torch.allclose(center[k], -c[k], atol=1e-7) for k in c)
        _, phi = rule.broadcast(rnd)
        d = [named(model, seed=s) for s in seeds]
        dc = [named(model, seed=10 + s) for s in seeds]
        up = [{DELTA_C_RECORD: x} for x in dc]  # (screened records: name -> tensors)
        rule.aggregate(rnd, replies(phi, d), phi, up)
        s = len(seeds)
        for k in theta:  # uniform weights (preset): theta += mean d; c += |S|/N mean dc
            theta[k] = theta[k] + sum(x[k] for x in d) / s
            c[k] = c[k] + (s / 5) * sum(x[k] for x in dc) / s
    assert all(torch.allclose(rule.theta[k], theta[k], atol=1e-6) for k in theta)
    assert all(torch.allclose(rule.c[k], c[k], atol=1e-6) for k in c)
    state = rule.state_dict()
    again = ScaffoldRule(ScaffoldRule.Settings.from_config(rule_cfg(method="scaffold")), model)
    again.load_state_dict(state)
    assert all(torch.equal(again.c[k], rule.c[k]) for k in c)


# --- FedDyn -----------------------------------------------------------------------------------

def test_feddyn_round_one_client_is_fedprox_with_mu_alpha():
    prox, dyn = tiny_model(), tiny_model()
    train(prox, [ProximalTerm(ProximalTerm.Settings(beta=0.3))])
    phi = weights(dyn)
    state = RecordDict()
    train(dyn, [FedDynTerm(FedDynTerm.Settings(feddyn_alpha=0.3))], state=state)
    assert all(torch.equal(a, b) for a, b in zip(weights(prox), weights(dyn)))
    g_i = LocalContext(state=state).load_state("feddyn-g-i", like=dict(dyn.named_parameters()))
    names = [n for n, _ in dyn.named_parameters()]
    for n, p0, w in zip(names, phi, weights(dyn)):  # g_i = 0 - alpha (w_K - phi)
        assert torch.allclose(g_i[n], -0.3 * (w - p0), atol=1e-7)


def test_feddyn_client_with_state_against_a_second_implementation():
    model, alpha = tiny_model(), 0.3
    g_i = named(model, seed=7)
    state = RecordDict()
    LocalContext(state=state).save_state("feddyn-g-i", g_i)
    train(model, [FedDynTerm(FedDynTerm.Settings(feddyn_alpha=alpha))], state=state)
    names = [n for n, _ in model.named_parameters()]
    second = tiny_model()
    # grad of CE - <g_i, w> + alpha/2 ||w - phi||^2
    plain_sgd(second, lambda i, p, p0: -g_i[names[i]] + alpha * (p - p0))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights(model), weights(second)))


@pytest.mark.parametrize("rule_class,factor", [(FedDynRule, lambda s: 2.0),
                                               (FedDynGcfedRule, lambda s: 1 + 1 / s)])
def test_feddyn_round_one_full_participation(rule_class, factor):
    model = mlp()
    cfg = rule_cfg(method="feddyn" if rule_class is FedDynRule else "feddyn-gcfed")
    rule = rule_class(rule_class.Settings.from_config(cfg), model)
    rule.num_clients = 4
    theta0 = {k: v.clone() for k, v in model.state_dict().items()}
    rule.start(ArrayRecord(model.state_dict()))
    _, phi = rule.broadcast(1)
    d = [named(model, seed=s) for s in range(4)]  # all N = 4 clients
    rule.aggregate(1, replies(phi, d), phi, [{}] * 4)
    for k in d[0]:
        mean = sum(x[k] for x in d) / 4
        assert torch.allclose(rule.theta[k] - theta0[k], factor(4) * mean, atol=1e-6)


@pytest.mark.parametrize("variant", ["paper", "gcfed"])
def test_feddyn_server_two_rounds_by_hand(variant):
    model, alpha, big_n = mlp(), 0.1, 6
    rule_class = FedDynRule if variant == "paper" else FedDynGcfedRule
    cfg = rule_cfg(method="feddyn" if variant == "paper" else "feddyn-gcfed")
    rule = rule_class(rule_class.Settings.from_config(cfg), model)
    rule.num_clients = big_n
    theta = {k: v.clone() for k, v in model.state_dict().items()}
    h = {k: torch.zeros_like(v) for k, v in theta.items()}
    rule.start(ArrayRecord(model.state_dict()))
    for rnd, seeds in ((1, (1, 2, 3)), (2, (4, 5))):
        _, phi = rule.broadcast(rnd)
        assert all(torch.allclose(phi[k], theta[k], atol=1e-6) for k in theta)
        d = [named(model, seed=s) for s in seeds]
        rule.aggregate(rnd, replies(phi, d, n=[3, 9, 1][:len(d)]), phi, [{}] * len(d))
        s = len(seeds)
        kappa = alpha / big_n if variant == "paper" else alpha / s ** 2
        for k in theta:
            h[k] = h[k] - kappa * sum(x[k] for x in d)
            mean_w = sum(theta[k] + x[k] for x in d) / s  # uniform, whatever n_i
            theta[k] = mean_w - h[k] / alpha
    assert all(torch.allclose(rule.theta[k], theta[k], atol=1e-6) for k in theta)
    assert all(torch.allclose(rule.feddyn_h[k], h[k], atol=1e-7) for k in h)


# --- FedDC ------------------------------------------------------------------------------------

def feddc_part(alpha=0.2):
    return DriftCorrection(DriftCorrection.Settings(feddc_alpha=alpha, lr=LR))


def test_feddc_round_one_client_is_fedprox_and_delta_g():
    prox, dc = tiny_model(), tiny_model()
    train(prox, [ProximalTerm(ProximalTerm.Settings(beta=0.2))])
    phi = weights(dc)
    g = named(dc, 0.0)
    ctx = train(dc, [feddc_part()], down={G_RECORD: ArrayRecord(g)})
    assert all(torch.equal(a, b) for a, b in zip(weights(prox), weights(dc)))
    delta = ctx.up[DELTA_G_RECORD].to_torch_state_dict()
    for (n, _), p0, w in zip(dc.named_parameters(), phi, weights(dc)):
        assert torch.allclose(delta[n], -(w - p0) / (STEPS * LR), atol=1e-6)


def test_feddc_client_with_state_against_a_second_implementation(monkeypatch):
    import methods.feddc as feddc

    om = 0.8  # om_i = n_i N / sum_j n_j of an unbalanced split
    monkeypatch.setattr(feddc, "client_weight", lambda pid, sizes: om)
    model, alpha = tiny_model(), 0.2
    names = [n for n, _ in model.named_parameters()]
    h_i, g_i, g = named(model, seed=8), named(model, seed=9), named(model, seed=10)
    state = RecordDict()
    LocalContext(state=state).save_state("feddc-h-i", h_i)
    LocalContext(state=state).save_state("feddc-g-i", g_i)
    phi = weights(model)
    ctx = train(model, [feddc_part(alpha)], down={G_RECORD: ArrayRecord(g)}, state=state)
    second = tiny_model()
    # grad of CE + alpha/om/2 ||w - (phi - h_i)||^2 + <w, G/om - G_i>
    plain_sgd(second, lambda i, p, p0: (alpha / om) * (p - p0 + h_i[names[i]])
              + g[names[i]] / om - g_i[names[i]])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights(model), weights(second)))
    sent = ctx.up[DELTA_G_RECORD].to_torch_state_dict()
    like = dict(model.named_parameters())
    new_h = LocalContext(state=state).load_state("feddc-h-i", like=like)
    new_g = LocalContext(state=state).load_state("feddc-g-i", like=like)
    for n, p0, w in zip(names, phi, weights(model)):
        d = w - p0
        delta = -g[n] / om - d / (STEPS * LR)  # delta-G_i = -G/om_i - d_i/(K lr)
        assert torch.allclose(new_g[n] - g_i[n], delta, atol=1e-5)
        assert torch.allclose(sent[n], om * delta, atol=1e-5)
        assert torch.allclose(new_h[n], h_i[n] + d, atol=1e-7)


def test_feddc_client_weight_is_from_the_training_example_counts():
    """om_i = n_i N / sum_j n_j with n_i the client's training examples (the num-examples it
    reports; FedDC's code: the size of its training set), not the partition with its held-out
    part; an unbalanced split, so the om_i differ."""
    from feddata.loading import DataSettings, load_client_data
    from feddata.summary import training_sizes
    from methods.feddc import client_weight

    cfg = resolve({"method": "feddc", "dataset": "digits", "partitioner": "lda",
                   "lda-alpha": 0.3, "client-val-fraction": 0.1, "seed": 0})
    big_n = 6
    data = DataSettings.from_config(cfg)
    n = [len(load_client_data(data, i, big_n).train_y) for i in range(big_n)]
    assert len(set(n)) > 1
    assert training_sizes(data, big_n) == tuple(n)  # what the ClientApp hands the part
    for i in range(big_n):
        assert client_weight(i, n) == pytest.approx(n[i] * big_n / sum(n), rel=1e-12)
    assert client_weight(0, ()) == 1.0  # outside a federation


def unequal_feddc_cfg(**over):
    """An LDA split of digits over 6 clients in epoch mode: unequal training set sizes."""
    return resolve({"method": "feddc", "dataset": "digits", "partitioner": "lda",
                    "lda-alpha": 0.3, "client-val-fraction": 0.1, "seed": 0, "local-epochs": 2,
                    "batch-size": 16, "lr": LR, **over})


@pytest.mark.parametrize("steps", ["mean", "own"])
def test_feddc_correction_steps_with_unequal_clients_by_hand(steps):
    """K of d_i/(K lr): FedDC's code takes one K for every client, epochs * ceil(mean n / B)
    (its example_code_*.py: n_minibatch); 'own' takes the steps the client took."""
    import math

    from feddata.loading import DataSettings, load_client_data
    from methods.feddc import correction_steps

    def settings(cfg):
        return DriftCorrection.Settings.from_config(cfg)

    cfg, big_n = unequal_feddc_cfg(**{"feddc-steps": steps}), 6
    n = [len(load_client_data(DataSettings.from_config(cfg), i, big_n).train_y)
         for i in range(big_n)]
    assert len(set(n)) > 1
    k_mean = 2 * math.ceil(sum(n) / big_n / 16)
    for i in range(big_n):
        own = 2 * math.ceil(n[i] / 16)  # the steps client i takes in epoch mode
        assert correction_steps(settings(cfg), own, n) == (k_mean if steps == "mean" else own)
    assert correction_steps(settings({**cfg, "local-iterations": 7}), 3, n) == (
        7 if steps == "mean" else 3)
    # outside a federation (no sizes): its own
    assert correction_steps(settings(cfg), 3, ()) == 3


def test_feddc_in_a_federation_without_the_clients_sizes_is_refused_naming_them():
    """om_i needs every client's training examples: a local update in a federation of N
    clients (a ClientApp of one's own) that is not handed N sizes stops with the fix."""
    model = tiny_model()
    x, y = tiny_data()
    for sizes in (None, (10, 20)):
        ctx = LocalContext(down={G_RECORD: ArrayRecord(named(model, 0.0))}, state=RecordDict(),
                           partition_id=1, num_partitions=3, partition_sizes=sizes)
        with pytest.raises(ValueError, match=r"partition_sizes=\[n_0, \.\.\., n_N-1\]"):
            local_update(model, x, y, LocalConfig(lr=LR, local_iterations=1, batch_size=BATCH),
                         None, parts=[DriftCorrection(DriftCorrection.Settings.from_config(
                             unequal_feddc_cfg()))], ctx=ctx)


def test_feddc_client_sends_the_correction_of_the_authors_k():
    """The client's delta-G_i = -G/om_i - d_i/(K lr) with K of 'mean', where its own steps
    differ (STEPS = 4 here; the split's K is larger)."""
    import math

    from feddata.loading import DataSettings, load_client_data
    from methods.feddc import client_weight

    cfg, big_n, pid = unequal_feddc_cfg(), 6, 2
    n = [len(load_client_data(DataSettings.from_config(cfg), i, big_n).train_y)
         for i in range(big_n)]
    k = 2 * math.ceil(sum(n) / big_n / 16)
    assert k != STEPS
    model = tiny_model()
    g = named(model, seed=10)
    phi = weights(model)
    x, y = tiny_data()
    ctx = LocalContext(down={G_RECORD: ArrayRecord(g)}, state=RecordDict(), server_round=1,
                       partition_id=pid, num_partitions=big_n, partition_sizes=tuple(n))
    local_update(model, x, y, LocalConfig(lr=LR, local_iterations=STEPS, batch_size=BATCH),
                 None, parts=[DriftCorrection(DriftCorrection.Settings.from_config(cfg))],
                 ctx=ctx)
    om = client_weight(pid, n)
    assert om == pytest.approx(n[pid] * big_n / sum(n))
    sent = ctx.up[DELTA_G_RECORD].to_torch_state_dict()
    for (name, _), p0, w in zip(model.named_parameters(), phi, weights(model)):
        expect = om * (-g[name] / om - (w - p0) / (k * LR))
        assert torch.allclose(sent[name], expect, atol=1e-6)


def test_feddc_server_two_rounds_by_hand():
    model, big_n = mlp(), 5
    rule = FedDCRule(FedDCRule.Settings.from_config(rule_cfg(method="feddc")), model)
    rule.num_clients = big_n
    theta0 = {k: v.clone() for k, v in model.state_dict().items()}
    theta = dict(theta0)
    params = [n for n, _ in model.named_parameters()]
    g = {k: torch.zeros_like(theta[k]) for k in params}
    h_sum = {k: torch.zeros_like(v) for k, v in theta.items()}
    rule.start(ArrayRecord(model.state_dict()))
    for rnd, seeds in ((1, (1, 2)), (2, (3, 4, 5))):
        down = rule.down_records(rnd)[G_RECORD].to_torch_state_dict()
        assert all(torch.allclose(down[k], g[k], atol=1e-7) for k in params)
        center = rule.up_centers()[DELTA_G_RECORD]  # the screen measures from -G
        assert center.keys() == set(params)
        assert all(torch.allclose(center[k], -g[k], atol=1e-7) for k in g)
        _, phi = rule.broadcast(rnd)
        d = [named(model, seed=s) for s in seeds]
        sent = [named(model, seed=20 + s) for s in seeds]  # om_i delta-G_i
        rule.aggregate(rnd, replies(phi, d), phi, [{DELTA_G_RECORD: x} for x in sent])
        s = len(seeds)
        for k in theta:
            h_sum[k] = h_sum[k] + sum(x[k] for x in d)
            theta[k] = sum(theta[k] + x[k] for x in d) / s + h_sum[k] / big_n
        for k in params:
            g[k] = g[k] + sum(x[k] for x in sent) / big_n
        if rnd == 1:  # theta_1 = mean_S w_i + (1/N) sum_S d_i
            for k in theta:
                want = (sum(theta0[k] + x[k] for x in d) / s + sum(x[k] for x in d) / big_n)
                assert torch.allclose(rule.theta[k], want, atol=1e-6)
    assert all(torch.allclose(rule.theta[k], theta[k], atol=1e-6) for k in theta)
    assert all(torch.allclose(rule.feddc_g[k], g[k], atol=1e-6) for k in params)


# --- through the real ServerApp and ClientApp -------------------------------------------------

BASE = {"model": "mlp", "num-server-rounds": 2, "local-iterations": 2, "fraction-train": 0.5,
        "run-name": "run", "checkpoint-every": 1, "seed": 2}


def run_app(out_dir, crash_round=None, nodes=6, **overrides):
    rc = {**BASE, "out-dir": str(out_dir), **overrides}
    grid = FakeGrid(nodes, client_app_handler(rc, nodes))
    if crash_round is not None:
        real = grid.send_and_receive

        def send_and_receive(messages, *, timeout=None):
            messages = list(messages)
            if messages and messages[0].metadata.message_type == "train" and \
                    messages[0].content["config"]["server-round"] == crash_round:
                raise KeyboardInterrupt  # the server dies
            return real(messages, timeout=timeout)

        grid.send_and_receive = send_and_receive
    try:
        server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                  run_config=rc))
    except KeyboardInterrupt:
        pass
    return grid


def final_theta(run_dir):
    return torch.load(run_dir / "final_model.pt", weights_only=True)


def test_scaffold_round_one_through_the_app_is_fedavg(tmp_path):
    run_app(tmp_path / "a", method="scaffold", **{"num-server-rounds": 1})
    run_app(tmp_path / "b", method="fedavg", aggregation="uniform", **{"num-server-rounds": 1})
    a, b = final_theta(tmp_path / "a" / "run"), final_theta(tmp_path / "b" / "run")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method,ratio", [("scaffold", 2), ("feddyn", 1), ("feddyn-gcfed", 1),
                                          ("feddc", 2)])
def test_each_method_runs_end_to_end_and_keeps_client_state_on_disk(
        tmp_path, partition_cache_dir, method, ratio):
    run_app(tmp_path, method=method, **{"num-server-rounds": 3})
    rows = json.loads((tmp_path / "run" / "results.json").read_text())["rounds"]
    assert len(rows) == 4 and rows[-1]["test-acc"] > 0
    one_x = sum(v.numel() * 4 for v in final_theta(tmp_path / "run").values())
    # bytes measured on the messages: 2x each way with the extra payload, 1x without
    down = rows[1]["bytes-down"] / rows[1]["clients-sampled"]
    up = rows[1]["bytes-up"] / rows[1]["clients-replied"]
    assert down == pytest.approx(ratio * one_x, rel=0.01)
    assert up == pytest.approx(ratio * one_x, rel=0.01)
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    token = ckpt["strategy"]["client-state-run"]
    folder = partition_cache_dir / "client-state" / token
    files = sorted(folder.glob("p*/*.pt"))
    assert files, "no client state on disk"
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    # the version the last checkpoint names is there for every client; older ones are pruned
    # when a client next trains, so at most two per state and client are left
    found = {}
    for f in files:
        name, rnd = f.name[:-3].split(".r")
        found.setdefault((int(f.parent.name[1:]), name), []).append(int(rnd))
    rounds = dict(zip(ckpt["strategy"]["client-state-partitions"],
                      ckpt["strategy"]["client-state-rounds"]))
    assert {pid for pid, _ in found} == set(rounds)
    for (pid, name), kept in found.items():
        assert rounds[pid] in kept and len(kept) <= 2


def test_client_state_is_made_from_the_dequantised_update(tmp_path, partition_cache_dir):
    """With uplink-bits, client state uses w_i = phi + Q(d_i), what the server aggregates
    (docs/baselines.md#fedpaq). FedDyn, round 1: each client keeps g_i = -alpha d_i and the
    server h = -(alpha/N) sum_S d_i, so sum_S g_i = N h holds only when both use the same d_i
    (2-bit codes: Q(d_i) is far from d_i). The robustness rules, which rescale d_i on the
    server only, are off."""
    n_nodes = 6
    run_app(tmp_path, method="feddyn", nodes=n_nodes, **{
        "num-server-rounds": 1, "uplink-bits": 2, "update-clip-ratio": 0.0,
        "update-norm-ratio": 0.0})
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    h = ckpt["strategy"]["feddyn-h"]
    token = ckpt["strategy"]["client-state-run"]
    folder = partition_cache_dir / "client-state" / token
    files = sorted(folder.glob("p*/feddyn-g-i.r1.pt"))
    assert len(files) == 3  # fraction-train 0.5 of 6
    g = [DiskVersions(f.parent, token, int(f.parent.name[1:])).read("feddyn-g-i", 1)
         for f in files]
    for k in g[0]:
        assert torch.allclose(sum(x[k] for x in g), n_nodes * h[k], atol=1e-6), k


def resume_equals_uninterrupted(tmp_path, method):
    ref = tmp_path / "ref"
    run_app(ref, method=method, **{"num-server-rounds": 6, "checkpoint-every": 3})
    cut = tmp_path / "cut"
    run_app(cut, method=method, crash_round=5, **{"num-server-rounds": 6,
                                                  "checkpoint-every": 3})
    assert load_checkpoint(cut / "run" / "checkpoint.pt")["round"] == 3
    run_app(cut, method=method, resume="latest", **{"num-server-rounds": 6,
                                                    "checkpoint-every": 3})
    a, b = final_theta(ref / "run"), final_theta(cut / "run")
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = load_checkpoint(ref / "run" / "checkpoint.pt")["strategy"]
    sb = load_checkpoint(cut / "run" / "checkpoint.pt")["strategy"]
    return sa, sb


@pytest.mark.parametrize("method,state", [("scaffold", "scaffold-c"), ("feddyn", "feddyn-h")])
def test_resume_is_bitwise_the_uninterrupted_run(tmp_path, method, state):
    sa, sb = resume_equals_uninterrupted(tmp_path, method)
    assert all(torch.equal(sa[state][k], sb[state][k]) for k in sa[state])
    assert max(v.abs().max() for v in sa[state].values()) > 0
    assert sa["client-state-rounds"] == sb["client-state-rounds"]


def test_resume_stops_when_a_clients_state_is_lost(tmp_path, partition_cache_dir):
    import shutil

    from strategies.client_state_rounds import ClientStateLost

    run_app(tmp_path, method="feddyn", crash_round=4, **{"num-server-rounds": 6,
                                                         "checkpoint-every": 3})
    token = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["strategy"]["client-state-run"]
    shutil.rmtree(partition_cache_dir / "client-state" / token)  # the nodes' disks are lost
    with pytest.raises(ClientStateLost, match=r"\[client state lost\] the state 'feddyn-g-i' "
                       "of client partition .* is not in .*start afresh"):
        run_app(tmp_path, method="feddyn", resume="latest", **{"num-server-rounds": 6,
                                                               "checkpoint-every": 3})


def test_the_papers_rows_of_these_methods_are_their_presets():
    """`setup = <table>` + `method = <row>` runs the paper's configuration of the method."""
    from run_config.setups import SETUP_DIR, load_setup

    seen = set()
    for path in sorted(SETUP_DIR.glob("*.yaml")):
        rows = load_setup(path.stem)["reported"]["rows"]
        assert "feddyn" not in rows, path.name  # the variant is named
        for row in rows:
            if row.split("-")[0] in ("scaffold", "feddyn", "feddc"):
                cfg = resolve({"setup": path.stem, "method": row})
                assert cfg["method"] == row
                want = {"gcfed": "feddyn-gcfed", "fedacg": "feddyn", "fedagm": "feddyn"}
                if row.startswith("feddyn"):
                    assert cfg["server-rule"] == want[path.stem.split("-")[0]], path.name
                seen.add(row)
    assert seen == {"scaffold", "feddyn-fedacg", "feddyn-gcfed", "feddc"}


@pytest.mark.parametrize("method", ["scaffold", "feddyn", "feddyn-gcfed", "feddc"])
@pytest.mark.parametrize("switch", [{"lookahead": True, "lam": 0.85}, {"local-gc": "all"},
                                    {"global-gc": "all"}])
def test_look_ahead_and_gc_are_untested_combinations(method, switch):
    from run_config import ConfigError

    with pytest.raises(ConfigError, match="is untested: .*allow-untested-combinations"):
        resolve({"method": method, **switch})
    cfg = resolve({"method": method, **switch, "allow-untested-combinations": True})
    assert all(cfg[k] == v for k, v in switch.items())


def test_feddyn_look_ahead_point_follows_the_last_step():
    """(untested combination) phi = theta + lam * (theta_t - theta_{t-1})"""
    model = mlp()
    cfg = rule_cfg(method="feddyn", lookahead=True, lam=0.5, **{"allow-untested-combinations":
                                                                 True})
    rule = FedDynRule(FedDynRule.Settings.from_config(cfg), model)
    rule.num_clients = 2
    rule.start(ArrayRecord(model.state_dict()))
    theta0 = {k: v.clone() for k, v in rule.theta.items()}
    _, phi = rule.broadcast(1)
    assert all(torch.equal(phi[k], theta0[k]) for k in phi)  # m = 0
    rule.aggregate(1, replies(phi, [named(model, seed=1), named(model, seed=2)]), phi, [{}, {}])
    _, phi = rule.broadcast(2)
    for k in phi:
        want = rule.theta[k] + 0.5 * (rule.theta[k] - theta0[k])
        assert torch.allclose(phi[k], want, atol=1e-6)


# --- a client-state file that cannot be used stops the run like a lost one ---------------------
TOKEN = "ab" * 16


def stored(tmp_path, partition=0, name="scaffold-c-i", server_round=3, tensors=None):
    """A version written by the app: its folder's DiskVersions and the file."""
    folder = tmp_path / "client-state" / TOKEN / f"p{partition}"
    versions = DiskVersions(folder, TOKEN, partition)
    tensors = tensors if tensors is not None else dict(named(mlp(), seed=1))
    versions.write(name, server_round, tensors)
    return versions, versions.path(name, server_round)


def load_round_3(tmp_path, partition=0, like=None):
    from client_app.client_state_store import ClientStateStore

    versions = DiskVersions(tmp_path / "client-state" / TOKEN / f"p{partition}", TOKEN, partition)
    store = ClientStateStore(versions, partition, server_round=4, load_round=3, keep_round=3)
    return store.load("scaffold-c-i", like if like is not None else dict(named(mlp())))


def test_a_stored_version_reads_back_and_carries_run_partition_round_and_checksum(tmp_path):
    _, path = stored(tmp_path)
    want = dict(named(mlp(), seed=1))
    got = load_round_3(tmp_path)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert path.read_bytes().startswith(b"fedacg-gc client state sha256=")


@pytest.mark.parametrize("damage,why", [
    ("swapped", r"holds the client partition 1, not 0 \(copied, swapped or renamed\?\)"),
    ("flipped", "is damaged: .*SHA-256 does not match"),
    ("truncated", "is damaged: .*SHA-256 does not match"),
    ("headerless", "is damaged: it lacks the checksum header"),
    ("other-round", r"holds the round 2, not 3"),
    ("other-run", r"holds the run '0000.*', not 'abab"),
    ("keys", r"does not hold the tensors its part declares \(missing \['fc1.bias'\]"),
    ("shape", r"holds 'fc1.weight' as \(2, 2\) torch.float32, its part declares \(200, 64\)"),
    ("dtype", r"holds 'fc1.weight' as \(200, 64\) torch.float64, its part declares \(200, 64\) "
     "torch.float32"),
])
def test_a_damaged_swapped_or_misshapen_version_is_refused_naming_the_file(tmp_path, damage, why):
    from client_app.client_state_store import LOST_MARK, ClientStateMissing

    tensors = dict(named(mlp(), seed=1))
    versions, path = stored(tmp_path, tensors=tensors)
    raw = path.read_bytes()
    if damage == "swapped":  # partition 1's version of round 3 in partition 0's folder
        _, other = stored(tmp_path, partition=1)
        path.write_bytes(other.read_bytes())
    elif damage == "flipped":
        path.write_bytes(raw[:len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 1])
                         + raw[len(raw) // 2 + 1:])
    elif damage == "truncated":
        path.write_bytes(raw[:len(raw) // 2])
    elif damage == "headerless":  # e.g. a bare torch.save, as the app wrote before
        torch.save(tensors, path)
    elif damage == "other-round":  # round 2's version renamed to round 3's
        versions.write("scaffold-c-i", 2, tensors)
        versions.path("scaffold-c-i", 2).replace(path)
    elif damage == "other-run":
        DiskVersions(path.parent, "0" * 32, 0).write("scaffold-c-i", 3, tensors)
    else:
        bad = dict(tensors)
        if damage == "keys":
            del bad["fc1.bias"]
        elif damage == "shape":
            bad["fc1.weight"] = torch.zeros(2, 2)
        else:
            bad["fc1.weight"] = bad["fc1.weight"].double()
        versions.write("scaffold-c-i", 3, bad)
    with pytest.raises(ClientStateMissing) as err:
        load_round_3(tmp_path)
    text = str(err.value)
    assert text.startswith(f"{LOST_MARK} the state 'scaffold-c-i' of client partition 0 made "
                           f"in round 3 cannot be used: {path} ")
    assert re.search(why, text), text
    assert text.endswith("start afresh with resume = ''.") and "\n" not in text


def test_resume_stops_on_a_swapped_flipped_truncated_or_renamed_state_file(
        tmp_path, partition_cache_dir):
    """Through the real apps: SCAFFOLD stopped after the checkpoint of round 3; before the
    resume one client's c_i file is swapped with another client's, has a byte flipped, is cut
    short, or is another round's version renamed. Each stops the resumed run with the "client
    state lost" error naming that file (it was used without a word, or - cut short - gave a raw
    PyTorch error and left the client out every round); put back, the resume runs to the end."""
    from strategies.client_state_rounds import ClientStateLost

    six = {"num-server-rounds": 6, "checkpoint-every": 3}
    run_app(tmp_path, method="scaffold", crash_round=4, **six)
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["strategy"]
    token = state["client-state-run"]
    trained = [(p, r) for p, r in zip(state["client-state-partitions"],
                                      state["client-state-rounds"]) if r > 0]
    (pid, rnd), (other, other_rnd) = trained[:2]
    versions = DiskVersions(partition_cache_dir / "client-state" / token / f"p{pid}", token, pid)
    path = versions.path("scaffold-c-i", rnd)
    other_path = DiskVersions(partition_cache_dir / "client-state" / token / f"p{other}", token,
                              other).path("scaffold-c-i", other_rnd)
    raw, other_raw = path.read_bytes(), other_path.read_bytes()
    tensors = versions.read("scaffold-c-i", rnd)
    cases = {
        "swapped": (lambda: (path.write_bytes(other_raw), other_path.write_bytes(raw)),
                    "holds the client partition"),
        "flipped": (lambda: path.write_bytes(raw[:-50] + bytes([raw[-50] ^ 4]) + raw[-49:]),
                    "is damaged"),
        "truncated": (lambda: path.write_bytes(raw[:len(raw) // 3]), "is damaged"),
        "renamed": (lambda: (versions.write("scaffold-c-i", rnd + 10, tensors),
                             versions.path("scaffold-c-i", rnd + 10).replace(path)),
                    f"holds the round {rnd + 10}, not {rnd}"),
    }
    for name, (damage, why) in cases.items():
        damage()
        with pytest.raises(ClientStateLost, match=(
                rf"^\[client state lost\] the state 'scaffold-c-i' of client partition "
                rf"({pid}|{other}) made in round \d cannot be used: .*/p({pid}|{other})/"
                rf"scaffold-c-i.r\d.pt {why}.*start afresh with resume = ''.$")):
            run_app(tmp_path, method="scaffold", resume="latest", **six)
        path.write_bytes(raw)  # put back
        other_path.write_bytes(other_raw)
    run_app(tmp_path, method="scaffold", resume="latest", **six)
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "complete"
