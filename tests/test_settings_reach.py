"""Every setting a method reads, set through the run config, reaches the local update or the
server rule (issue 51, class (a) of the mutation pass: a setting tested only by building a step
or a rule directly goes unseen when it stops reaching it from the run config).

The client: `client_app.settings.settings(run_config)` (the ClientApp's settings), the round's
learning rate from the app's strategy (`resolve` + `build_strategy`, as the ServerApp), the
method's parts (`method_parts`) and the local update, as the ClientApp's `train` runs them; a
few steps on a tiny MLP, against a float64 update written here. The server: the app's strategy,
two rounds on fixed client updates, against the momentum rule, the robust aggregators, DP and
the screening bounds computed here in float64 (numpy's median, Krum's scores by hand). The
knobs of the baselines' parts and rules: the built part or rule holds the value given.

Which key is pinned where (the client, server, robustness and federation keys; each set away
from its default, and each test fails when its key stops reaching its place):
- here, against an update or rule computed here: lr, lr-decay, lr-epoch-decay, local-epochs,
  local-iterations, batch-size, alpha, beta, local-momentum, weight-decay, grad-clip, local-gc,
  gc-borderline, gc-vectors, precision (auto: fp32 on a CPU; amp: refused there); lam, eta,
  lookahead, aggregation, global-gc, robust-aggregator (all 5 rules), trim-fraction,
  num-malicious, multikrum-select, dp-clipping-norm, dp-noise-multiplier (the noise's std),
  max-update-norm, update-norm-ratio, update-clip-ratio, num-examples-ratio, num-examples-check,
  min-train-clients, max-skipped-rounds, fraction-train, min-train-nodes, fraction-evaluate,
  min-evaluate-nodes.
- here, the built part or rule holds the value: lc-tau, ntd-beta, ntd-tau, ntd-form,
  decorr-beta, decorr-features, moon-mu, moon-tau, sol-rho, mlb-lambda1, mlb-lambda2,
  mlb-temperature, feddyn-alpha, feddc-alpha, feddc-steps, fedcm-alpha, uplink-bits,
  uplink-tensors (the client's codec and the server's decoder), fedopt-tau, fedvarp-memory-mb;
  what each computes with it is pinned by the method's own tests (test_pins_methods.py,
  test_local_objectives.py, test_fedsol_fedmlb.py, test_fedcm_fedvarp_fedpaq.py, ...).
- elsewhere, through the run config: record-norm-ratio (test_named_strategies.py, the strategy
  holds it; the rule in test_robust.py), pad-to-full-batches (test_training_options.py, the
  ClientApp), dynamic-replace-prob/-every, dynamic-pool-factor (test_named_strategies.py,
  test_results.py), seed and num-server-rounds (every run test), method, server-rule,
  client-objective, setup and allow-untested-combinations (they choose the rule and parts:
  test_pins_methods.py, test_setups.py, test_config.py).
- not here: device (this box has no GPU: the choice is pinned in test_training_options.py),
  round-timeout and node-wait-timeout (waits: test_faults_simulation.py and
  test_deployment_faults.py, no timing test here), simulation-fast-poll (how often the engine is
  polled; it changes no value), and the data, model and output keys, which are no client or
  server setting (what they read and write: test_data.py, test_own_data.py, test_models.py,
  test_results.py, test_reporting.py, test_checkpoint.py)."""

from __future__ import annotations

import copy
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from client_app.client_step import LocalContext
from client_app.local_update import local_update
from client_app.settings import method_parts, settings
from models import build_model
from pins_helpers import is_query, make_reply, partition_reply, run_strategy
from run_config import resolve
from run_config.schema import KEYS_BY_NAME
from server_app.app import make_strategy
from strategies.assembly import build_strategy
from strategies.round_loop import NothingLearned

SHAPE, CLASSES = (1, 2, 2), 3  # an MLP with fc1, fc2 (the features) and fc3 (the classifier)


def tiny_model() -> torch.nn.Module:
    return build_model("mlp", SHAPE, CLASSES, seed=0)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(12, *SHAPE, generator=g), torch.randint(0, CLASSES, (12,), generator=g)


# --- the client ------------------------------------------------------------------------------

# Two local steps on all 12 examples at once (every batch is the whole set: its order does not
# change the mean loss); the server's round 2 (its lr is lr * lr-decay).
CLIENT_BASE = {"method": "fedavg", "model": "mlp", "local-iterations": 2, "batch-size": 64,
               "allow-untested-combinations": True}
# What the update uses under CLIENT_BASE: the schema's defaults, written out here
CLIENT_DEFAULTS = dict(lr=0.05, steps=2, alpha=1.0, beta=0.0, momentum=0.0, weight_decay=1e-3,
                       grad_clip=0.0, gc_layers=0, gc_vectors="center", batch_size=64,
                       lr_epoch_decay=1.0)

CLIENT_CASES = {  # id: (run config away from its default, what the update must use instead)
    "lr": ({"lr": 0.2}, {"lr": 0.2}),
    "lr-decay": ({"lr-decay": 0.5}, {"lr": 0.025}),
    "local-iterations": ({"local-iterations": 3}, {"steps": 3}),
    "alpha": ({"alpha": 0.5}, {"alpha": 0.5}),
    "beta": ({"client-objective": "proximal", "beta": 0.5}, {"beta": 0.5}),
    "local-momentum": ({"local-momentum": 0.9}, {"momentum": 0.9}),
    "weight-decay": ({"weight-decay": 0.05}, {"weight_decay": 0.05}),
    "grad-clip": ({"grad-clip": 0.01}, {"grad_clip": 0.01}),
    "local-gc": ({"local-gc": "all"}, {"gc_layers": 6}),
    "local-gc-features": ({"local-gc": "features"}, {"gc_layers": 4}),
    "gc-borderline": ({"local-gc": "features", "gc-borderline": 0.5}, {"gc_layers": 3}),
    "gc-vectors": ({"local-gc": "all", "gc-vectors": "skip"},
                   {"gc_layers": 6, "gc_vectors": "skip"}),
    # one example per batch: every step's a new epoch, the second at lr * 0.5
    "lr-epoch-decay": ({"lr-epoch-decay": 0.5}, {"lr_epoch_decay": 0.5}),
    "batch-size": ({"batch-size": 5}, {"batch_size": 5}),  # 2 batches of 5 of a reshuffle
    # 3 epochs of ceil(12 / 5) = 3 batches (the last of 2 examples): 9 steps
    "local-epochs": ({"local-iterations": 0, "local-epochs": 3, "batch-size": 5},
                     {"steps": 9, "batch_size": 5}),
    # the decay steps at the epochs' starts (steps 0-2 at lr, 3-5 at lr / 2)
    "lr-epoch-decay-epochs": ({"local-iterations": 0, "batch-size": 5, "lr-epoch-decay": 0.5},
                              {"steps": 6, "batch_size": 5, "lr_epoch_decay": 0.5}),
    "precision-auto": ({"precision": "auto"}, {}),  # fp32 where no GPU is (this test's CPU)
}
SAME_AS_DEFAULT = {"precision-auto"}  # cases whose update is the default one on a CPU


def app_update(run_config: dict) -> dict[str, torch.Tensor]:
    """One local update as the apps run it from `run_config`."""
    x, y = data()
    server_round = 2
    strategy = build_strategy(resolve(run_config), tiny_model())  # the ServerApp's
    lr = strategy.round_config(server_round, ConfigRecord())["lr"]  # the train instruction's
    client = settings(run_config)  # the ClientApp's
    model = tiny_model()
    local = client.local_config(model, float(lr))
    _, parts = method_parts(client.cfg, client.parts)
    ctx = LocalContext(server_round=server_round, partition_id=0, train_y=y,
                       num_classes=CLASSES, num_partitions=2)
    local_update(model, x, y, local, torch.Generator().manual_seed(0), None, parts, ctx)
    return {k: v.detach().double() for k, v in model.named_parameters()}


def centred(g: torch.Tensor, vectors: str) -> torch.Tensor:
    """GC's projection: each output unit's gradient less its mean; a vector's whole mean."""
    if g.dim() >= 2:
        return g - g.mean(dim=tuple(range(1, g.dim())), keepdim=True)
    return g - g.mean() if vectors == "center" else g


def reference_batches(n: int, batch_size: int, steps: int) -> list[tuple[int, torch.Tensor]]:
    """(local epoch, indices) of each step: each epoch a fresh permutation from the update's
    generator (seed 0) cut in batch_size pieces, the last one short."""
    g, out = torch.Generator().manual_seed(0), []
    for epoch in range(steps):
        perm = torch.randperm(n, generator=g)
        out += [(epoch, perm[i:i + batch_size]) for i in range(0, n, batch_size)]
    return out[:steps]


def reference_update(*, lr, steps, alpha, beta, momentum, weight_decay, grad_clip, gc_layers,
                     gc_vectors, batch_size, lr_epoch_decay) -> dict[str, torch.Tensor]:
    """SGD (weight decay, then momentum) on alpha * CE + beta/2 ||w - phi||^2 in float64, the
    gradient's norm clipped to grad_clip (as torch's clip_grad_norm_), then centred on the
    first gc_layers tensors, on mini-batches of reshuffled epochs, local epoch e at
    lr * lr_epoch_decay^e (docs/algorithms.md#local-update)."""
    x, y = data()
    net = copy.deepcopy(tiny_model()).double()
    params = list(net.parameters())
    phi = [p.detach().clone() for p in params]
    buffers = [None] * len(params)
    for epoch, idx in reference_batches(len(y), batch_size, steps):
        loss = alpha * F.cross_entropy(net(x[idx].double()), y[idx])
        loss = loss + beta / 2 * sum(((p - a) ** 2).sum() for p, a in zip(params, phi))
        grads = torch.autograd.grad(loss, params)
        if grad_clip > 0:
            norm = float(torch.sqrt(sum((g ** 2).sum() for g in grads)))
            assert norm > grad_clip  # (the case clips)
            grads = [g * (grad_clip / (norm + 1e-6)) for g in grads]
        grads = [centred(g, gc_vectors) if i < gc_layers else g for i, g in enumerate(grads)]
        with torch.no_grad():
            for i, (p, g) in enumerate(zip(params, grads)):
                d = g + weight_decay * p
                buffers[i] = d if buffers[i] is None else momentum * buffers[i] + d
                p -= lr * lr_epoch_decay ** epoch * buffers[i]
    return {k: v.detach() for k, v in net.named_parameters()}


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_a_client_setting_reaches_the_local_update(case):
    given, used = CLIENT_CASES[case]
    for key, value in given.items():  # each is away from its default (or CLIENT_BASE's)
        assert value != CLIENT_BASE.get(key, KEYS_BY_NAME[key].default), key
    got = app_update({**CLIENT_BASE, **given})
    want = reference_update(**{**CLIENT_DEFAULTS, **used})
    default = app_update(CLIENT_BASE)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-5, msg=name)
    if case not in SAME_AS_DEFAULT:
        assert max((got[k] - default[k]).abs().max() for k in got) > 1e-4  # the case changes it


def test_precision_amp_is_refused_on_a_cpu():
    """precision = 'amp' reaches the local update's settings: refused where it trains on a CPU
    (fp16 autocast needs a CUDA GPU), not silently run in fp32."""
    client = settings({**CLIENT_BASE, "precision": "amp"})
    with pytest.raises(RuntimeError, match="precision"):
        client.local_config(tiny_model(), 0.05)


def test_the_client_reference_is_the_default_update():
    got, want = app_update(CLIENT_BASE), reference_update(**CLIENT_DEFAULTS)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-5, msg=name)


# --- the server ------------------------------------------------------------------------------

SIZES = [10, 30, 25, 5]
SERVER_BASE = {"method": "fedavg", "model": "mlp", "min-train-nodes": 4,
               "fraction-evaluate": 0.0, "allow-untested-combinations": True}
# The momentum rule under SERVER_BASE (FedAvg), written out here
SERVER_DEFAULTS = dict(lam=0.0, eta=1.0, lookahead=False, uniform=False, gc_tensors=(),
                       gc_vectors="center")

# Client i's update is SCALES[i] x a random tensor: norms about 2, 4, 6 and 8 (the MLP has
# 41,803 parameters), far apart, so each screening bound below falls well between two of them.
SCALES = [1.0, 2.0, 3.0, 4.0]
PULL = 0.01  # node i answers w_i = phi + d_i - PULL * phi: its update depends on the broadcast


def flat(u: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.flatten() for v in u.values()])


def weighted(us, ws) -> dict[str, torch.Tensor]:
    """sum_i w_i u_i / sum_i w_i."""
    return {k: sum(w * u[k] for u, w in zip(us, ws)) / sum(ws) for k in us[0]}


def by_examples(us, ns):  # the default rule: the mean weighted by the claimed examples
    return weighted(us, ns)


def coordinatewise(fn):  # numpy's fn over the updates, per coordinate
    return lambda us, ns: {k: torch.from_numpy(fn(np.stack([u[k].numpy() for u in us])))
                           for k in us[0]}


def trimmed(cut: int):  # the mean without the `cut` lowest and highest values per coordinate
    return coordinatewise(lambda a: np.sort(a, axis=0)[cut:len(a) - cut].mean(axis=0))


def multikrum(f: int, m: int):
    """The m updates of the lowest Krum scores (the sum of the n - f - 2, at least 1, smallest
    squared distances to the other updates), averaged by examples (Blanchard et al. 2017)."""
    def rule(us, ns):
        xs = [flat(u) for u in us]
        closest = max(1, len(us) - f - 2)
        scores = [sum(sorted(float(((xs[i] - xs[j]) ** 2).sum()) for j in range(len(us))
                             if j != i)[:closest]) for i in range(len(us))]
        chosen = sorted(range(len(us)), key=lambda i: scores[i])[:m]
        return weighted([us[i] for i in chosen], [ns[i] for i in chosen])
    return rule


def norm(u) -> float:
    return float(flat(u).norm())


def scaled_to(bound: float):  # updates above `bound` scaled down to it, then the mean
    return lambda us, ns: by_examples([{k: v * min(1.0, bound / norm(u)) for k, v in u.items()}
                                       for u in us], ns)


def median_ratio(r: float, us) -> float:  # r x the round's median update norm
    return r * statistics.median(norm(u) for u in us)


def kept(test):  # the mean of the updates whose norm passes `test(norm, all updates)`
    def rule(us, ns):
        keep = [i for i, u in enumerate(us) if test(norm(u), us)]
        return by_examples([us[i] for i in keep], [ns[i] for i in keep])
    return rule


def capped(bound):  # the mean with each claim cut to bound(claims)
    return lambda us, ns: by_examples(us, [min(n, bound(ns)) for n in ns])


SERVER_CASES = {  # id: (run config away from its default, what the rule must use instead)
    "lam": ({"lam": 0.5}, {"lam": 0.5}),
    "eta": ({"eta": 0.7}, {"eta": 0.7}),
    "lookahead": ({"lookahead": True, "lam": 0.5}, {"lookahead": True, "lam": 0.5}),
    "aggregation": ({"aggregation": "uniform"}, {"uniform": True}),
    "global-gc": ({"global-gc": "all"}, {"gc_tensors": range(6)}),
    "global-gc-classifier": ({"global-gc": "classifier"}, {"gc_tensors": (4, 5)}),
    "gc-borderline": ({"global-gc": "classifier", "gc-borderline": 0.5},
                      {"gc_tensors": (3, 4, 5)}),
    "gc-vectors": ({"global-gc": "all", "gc-vectors": "skip"},
                   {"gc_tensors": range(6), "gc_vectors": "skip"}),
    # robust aggregation (docs/security.md): the rule replaces the weighted mean
    "robust-median": ({"robust-aggregator": "median"},  # numpy's: the middle two's mean
                      {"rule": coordinatewise(lambda a: np.median(a, axis=0))}),
    # trim 0.2 of 4 cuts nothing (int(0.8) = 0): the unweighted mean
    "robust-trimmed-mean": ({"robust-aggregator": "trimmed-mean"}, {"rule": trimmed(0)}),
    "trim-fraction": ({"robust-aggregator": "trimmed-mean", "trim-fraction": 0.25},
                      {"rule": trimmed(1)}),
    "robust-krum": ({"robust-aggregator": "krum"}, {"rule": multikrum(0, 1)}),
    # f = 0: every update (the weighted mean, as the default); f = 1: the 3 best
    "num-malicious": ({"robust-aggregator": "multikrum", "num-malicious": 1},
                      {"rule": multikrum(1, 3)}),
    "multikrum-select": ({"robust-aggregator": "multikrum", "multikrum-select": 2},
                         {"rule": multikrum(0, 2)}),
    # f = 0: Multi-Krum keeps all 4, the 4 values nearest the median are all of them
    "robust-bulyan": ({"robust-aggregator": "bulyan"}, {"rule": trimmed(0)}),
    # server-side DP's fixed clipping, no noise: u_i * min(1, C / ||u_i||) (clients 3 and 4)
    "dp-clipping-norm": ({"dp-clipping-norm": 5.0}, {"rule": scaled_to(5.0)}),
    # screening (docs/security.md): bounds on each reply
    "max-update-norm": ({"max-update-norm": 7.0}, {"rule": kept(lambda n, us: n <= 7.0)}),
    "update-norm-ratio": ({"update-norm-ratio": 1.4},  # 1.4 x median 5: client 4 dropped
                          {"rule": kept(lambda n, us: n <= median_ratio(1.4, us))}),
    "update-clip-ratio": ({"update-clip-ratio": 1.0},  # clients 3, 4 scaled to the median
                          {"rule": lambda us, ns: scaled_to(median_ratio(1.0, us))(us, ns)}),
    "num-examples-ratio": ({"num-examples-ratio": 1.0},  # claims cut to the median, 17.5
                           {"rule": capped(statistics.median)}),
    # 3 good replies (client 4 dropped) are enough for min-train-clients 3, one past: below
    "min-train-clients": ({"min-train-clients": 3, "max-update-norm": 7.0},
                          {"rule": kept(lambda n, us: n <= 7.0)}),
}


def client_deltas() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    return [{k: 0.01 * s * torch.randn(v.shape, generator=g) for k, v in
             tiny_model().state_dict().items()} for s in SCALES]


def app_rounds(run_config: dict, build=None) -> dict[str, torch.Tensor]:
    """Two rounds of the ServerApp's strategy for `run_config` (`build(cfg, model)`, by
    default `build_strategy`); node i answers phi + d_i - PULL * phi."""
    ds = client_deltas()

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, len(SIZES))
        phi = msg.content["arrays"].to_torch_state_dict()
        return make_reply({k: phi[k] + ds[i][k] - PULL * phi[k] for k in phi}, SIZES[i])

    model = tiny_model()
    theta, _ = run_strategy((build or build_strategy)(resolve(run_config), model), handler,
                            {k: v.detach().clone() for k, v in model.state_dict().items()},
                            rounds=2, num_nodes=len(SIZES))
    return {k: v.double() for k, v in theta.items()}


def reference_rounds(*, lam, eta, lookahead, uniform, gc_tensors, gc_vectors, rule=by_examples):
    """The momentum rule in float64 (docs/algorithms.md#server-round): phi = theta (+ lam * m
    with the look-ahead), d = rule(the updates, the claims) (the weighted mean sum_i p_i u_i by
    default), centred on the tensors gc_tensors (by position), m = lam * m + eta * d,
    theta = theta + m."""
    theta = {k: v.detach().double() for k, v in tiny_model().state_dict().items()}
    m = {k: torch.zeros_like(v) for k, v in theta.items()}
    ds = [{k: v.double() for k, v in d.items()} for d in client_deltas()]
    ns = [1] * len(SIZES) if uniform else SIZES
    for _ in range(2):
        phi = {k: theta[k] + lam * m[k] if lookahead else theta[k] for k in theta}
        d = rule([{k: d_i[k] - PULL * phi[k] for k in phi} for d_i in ds], ns)  # the updates
        for i, k in enumerate(theta):
            d_k = centred(d[k], gc_vectors) if i in gc_tensors else d[k]
            m[k] = lam * m[k] + eta * d_k
            theta[k] = theta[k] + m[k]
    return theta

@pytest.mark.parametrize("case", SERVER_CASES)
def test_a_server_setting_reaches_the_rule(case):
    given, used = SERVER_CASES[case]
    got = app_rounds({**SERVER_BASE, **given})
    want = reference_rounds(**{**SERVER_DEFAULTS, **used})
    default = app_rounds(SERVER_BASE)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, msg=name)
    assert max((got[k] - default[k]).abs().max() for k in got) > 1e-5  # the case changes it


def test_the_server_reference_is_the_default_rule():
    got, want = app_rounds(SERVER_BASE), reference_rounds(**SERVER_DEFAULTS)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("given, stops", [
    ({"min-train-clients": 4}, r"no round of 1-2 aggregated"),  # one more than the 3 good
    ({"min-train-clients": 4, "max-skipped-rounds": 1}, r"1 rounds in a row \(1-1\)"),
    ({"min-train-clients": 4, "max-skipped-rounds": 2}, r"2 rounds in a row \(1-2\)"),
], ids=["min-train-clients", "max-skipped-rounds", "max-skipped-rounds-at-the-last"])
def test_too_few_good_replies_skip_rounds_and_stop_the_run(given, stops):
    """3 good replies (max-update-norm 7 drops client 4) are too few for min-train-clients 4:
    each round is skipped; the run stops after max-skipped-rounds of them in a row, or at its
    end with nothing learned."""
    with pytest.raises(NothingLearned, match=stops):
        app_rounds({**SERVER_BASE, "max-update-norm": 7.0, **given})


def test_dp_noise_multiplier_adds_its_noise():
    """dp-noise-multiplier z with dp-clipping-norm C: each round's d gets N(0, (z C / n)^2) per
    coordinate (n = 4 updates), so two rounds end sqrt(2) z C / 4 away (std over the 41,803
    coordinates) from the clipped, noiseless rounds computed here."""
    z, c = 0.5, 5.0
    got = app_rounds({**SERVER_BASE, "dp-clipping-norm": c, "dp-noise-multiplier": z})
    want = reference_rounds(**{**SERVER_DEFAULTS, "rule": scaled_to(c)})
    noise = torch.cat([(got[k] - want[k]).flatten() for k in want])
    std = 2 ** 0.5 * z * c / len(SIZES)
    assert abs(float(noise.std()) / std - 1) < 0.03  # (0.35 % is one standard error)
    assert abs(float(noise.mean())) < 5 * std / len(noise) ** 0.5


@pytest.mark.parametrize("check, cut", [(True, True), (False, False)])
def test_num_examples_check_caps_claims_at_the_largest_partition(check, cut):
    """num-examples-check (the ServerApp's `make_strategy`, the split's largest partition 20
    known): claims 30 and 25 weigh as 20; off, as claimed."""
    def build(cfg, model):
        recorder = SimpleNamespace(train_metrics=None, eval_metrics=None, note_train=None)
        return make_strategy(cfg, model, recorder, {"size-max": 20})

    got = app_rounds({**SERVER_BASE, "num-examples-check": check}, build)
    rule = capped(lambda ns: 20) if cut else by_examples
    want = reference_rounds(**{**SERVER_DEFAULTS, "rule": rule})
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("given, train, evaluate", [
    ({}, 4, 0),  # SERVER_BASE: all 4 train, none evaluates
    ({"fraction-train": 0.5, "min-train-nodes": 1}, 2, 0),  # max(int(0.5 x 4), 1)
    ({"fraction-train": 0.1, "min-train-nodes": 3}, 3, 0),  # max(int(0.4), 3)
    ({"fraction-evaluate": 0.5, "min-evaluate-nodes": 1}, 4, 2),
    ({"fraction-evaluate": 0.1, "min-evaluate-nodes": 3}, 4, 3),
], ids=["base", "fraction-train", "min-train-nodes", "fraction-evaluate", "min-evaluate-nodes"])
def test_sampling_settings_reach_the_rounds(given, train, evaluate):
    """fraction-train / min-train-nodes / fraction-evaluate / min-evaluate-nodes: the nodes each
    round instructs, as Flower samples, max(int(fraction x nodes), min)."""
    counts = {"train": [0, 0], "evaluate": [0, 0]}

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, len(SIZES))
        kind = msg.metadata.message_type
        counts[kind][int(msg.content["config"]["server-round"]) - 1] += 1
        if kind == "evaluate":
            return RecordDict({"metrics": MetricRecord({"num-examples": 1, "loss": 0.0})})
        return make_reply(msg.content["arrays"].to_torch_state_dict(), SIZES[i])

    model = tiny_model()
    run_strategy(build_strategy(resolve({**SERVER_BASE, **given}), model), handler,
                 dict(model.state_dict()), rounds=2, num_nodes=len(SIZES))
    assert counts == {"train": [train] * 2, "evaluate": [evaluate] * 2}


# --- the baselines' knobs: the built part or rule holds the value ----------------------------

KNOBS = [  # (method, key, a value away from the default, client part / uplink codec / rule)
    ("fedlc", "lc-tau", 0.37, "fedlc"), ("fedntd", "ntd-beta", 0.37, "fedntd"),
    ("fedntd", "ntd-tau", 0.37, "fedntd"), ("feddecorr", "decorr-beta", 0.37, "feddecorr"),
    ("moon", "moon-mu", 0.37, "moon"), ("moon", "moon-tau", 0.37, "moon"),
    ("fedsol", "sol-rho", 0.37, "sol"), ("fedmlb", "mlb-lambda1", 0.37, "mlb"),
    ("fedmlb", "mlb-lambda2", 0.37, "mlb"), ("fedmlb", "mlb-temperature", 0.37, "mlb"),
    ("feddyn", "feddyn-alpha", 0.37, "feddyn"), ("feddc", "feddc-alpha", 0.37, "feddc"),
    ("fedcm", "fedcm-alpha", 0.37, "fedcm"), ("fedpaq", "uplink-bits", 3, "fedpaq"),
    ("feddyn", "feddyn-alpha", 0.37, "rule"), ("fedadam", "fedopt-tau", 0.037, "rule"),
    ("fedvarp", "fedvarp-memory-mb", 37.0, "rule"),
    ("fedntd", "ntd-form", "gcfed", "fedntd"),
    ("feddecorr", "decorr-features", "conv-map", "feddecorr"),
    ("feddc", "feddc-steps", "own", "feddc"), ("fedpaq", "uplink-tensors", "gymlab", "fedpaq"),
    ("fedpaq", "uplink-tensors", "gymlab", "uplink"),  # the server's decoder of the replies
]


def holds(obj, value, depth: int = 2) -> bool:
    """Whether `obj` keeps `value` in an attribute (or one of its attributes' attributes),
    other than the run config it was built from (`cfg`, which holds every value given)."""
    if depth < 0:
        return False
    if isinstance(obj, (int, float, str)) and not isinstance(obj, bool):
        return obj == value
    if isinstance(obj, dict):
        return any(holds(v, value, depth - 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(holds(v, value, depth - 1) for v in obj)
    return hasattr(obj, "__dict__") and any(holds(v, value, depth - 1)
                                            for k, v in vars(obj).items() if k != "cfg")


@pytest.mark.parametrize("method, key, value, where", KNOBS,
                         ids=[f"{m}-{k}-{w}" for m, k, _, w in KNOBS])
def test_a_baseline_knob_reaches_its_part(method, key, value, where):
    base = {"method": method, **({"model": "resnet18"} if method == "fedmlb" else {})}
    run_config = {**base, key: value}
    assert value != resolve(base)[key], key
    if where in ("rule", "uplink"):  # the ServerApp's rule, its decoder of the replies
        built = getattr(build_strategy(resolve(run_config), tiny_model()), where)
    else:  # the ClientApp's parts, the uplink codec first
        built = {p.name: p for p in method_parts(resolve(run_config))[1]}[where]
    assert holds(built, value), f"{key} = {value} set, {type(built).__name__} holds no such value"
