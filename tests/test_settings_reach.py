"""Every setting a method reads, set through the run config, reaches the local update or the
server rule (issue 51, class (a) of the mutation pass: a setting tested only by building a step
or a rule directly goes unseen when it stops reaching it from the run config).

The client: `client_app.settings.settings(run_config)` (the ClientApp's settings), the round's
learning rate from the app's strategy (`resolve` + `build_strategy`, as the ServerApp), the
method's parts (`method_parts`) and the local update, as the ClientApp's `train` runs them; two
steps on a tiny MLP, against a float64 update written here. The server: the app's strategy,
two rounds on fixed client updates, against the momentum rule computed here in float64. The
knobs of the baselines' parts and rules: the built part or rule holds the value given.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from flwr.app import ConfigRecord

from client_app.client_step import LocalContext
from client_app.local_update import local_update
from client_app.settings import method_parts, settings
from models import build_model
from pins_helpers import is_query, make_reply, partition_reply, run_strategy
from run_config import resolve
from run_config.schema import KEYS_BY_NAME
from strategies.assembly import build_strategy

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
                       grad_clip=0.0, gc_layers=0, gc_vectors="center")

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
}


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


def reference_update(*, lr, steps, alpha, beta, momentum, weight_decay, grad_clip, gc_layers,
                     gc_vectors) -> dict[str, torch.Tensor]:
    """SGD (weight decay, then momentum) on alpha * CE + beta/2 ||w - phi||^2 in float64, the
    gradient's norm clipped to grad_clip (as torch's clip_grad_norm_), then centred on the
    first gc_layers tensors (docs/algorithms.md#local-update)."""
    x, y = data()
    net = copy.deepcopy(tiny_model()).double()
    params = list(net.parameters())
    phi = [p.detach().clone() for p in params]
    buffers = [None] * len(params)
    for _ in range(steps):
        loss = alpha * F.cross_entropy(net(x.double()), y)
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
                p -= lr * buffers[i]
    return {k: v.detach() for k, v in net.named_parameters()}


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_a_client_setting_reaches_the_local_update(case):
    given, used = CLIENT_CASES[case]
    for key, value in given.items():  # each is away from its default
        assert value != KEYS_BY_NAME[key].default, key
    got = app_update({**CLIENT_BASE, **given})
    want = reference_update(**{**CLIENT_DEFAULTS, **used})
    default = app_update(CLIENT_BASE)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-5, msg=name)
    assert max((got[k] - default[k]).abs().max() for k in got) > 1e-4  # the case changes it


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
}


def client_deltas() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    return [{k: 0.01 * torch.randn(v.shape, generator=g) for k, v in
             tiny_model().state_dict().items()} for _ in SIZES]


def app_rounds(run_config: dict) -> dict[str, torch.Tensor]:
    """Two rounds of the ServerApp's strategy for `run_config`; node i answers phi + d_i."""
    ds = client_deltas()

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, len(SIZES))
        phi = msg.content["arrays"].to_torch_state_dict()
        return make_reply({k: phi[k] + ds[i][k] for k in phi}, SIZES[i])

    model = tiny_model()
    theta, _ = run_strategy(build_strategy(resolve(run_config), model), handler,
                            {k: v.detach().clone() for k, v in model.state_dict().items()},
                            rounds=2, num_nodes=len(SIZES))
    return {k: v.double() for k, v in theta.items()}


def reference_rounds(*, lam, eta, lookahead, uniform, gc_tensors, gc_vectors):
    """The momentum rule in float64 (docs/algorithms.md#server-round): phi = theta (+ lam * m
    with the look-ahead), d = sum_i p_i w_i - phi, centred on the tensors gc_tensors (by position),
    m = lam * m + eta * d, theta = theta + m."""
    theta = {k: v.detach().double() for k, v in tiny_model().state_dict().items()}
    m = {k: torch.zeros_like(v) for k, v in theta.items()}
    ds = [{k: v.double() for k, v in d.items()} for d in client_deltas()]
    p = [1 / len(SIZES)] * len(SIZES) if uniform else [n / sum(SIZES) for n in SIZES]
    for _ in range(2):
        phi = {k: theta[k] + lam * m[k] if lookahead else theta[k] for k in theta}
        for i, k in enumerate(theta):
            d = sum(p_i * (phi[k] + d_i[k]) for p_i, d_i in zip(p, ds)) - phi[k]
            d = centred(d, gc_vectors) if i in gc_tensors else d
            m[k] = lam * m[k] + eta * d
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
    if where == "rule":  # the ServerApp's rule
        built = build_strategy(resolve(run_config), tiny_model()).rule
    else:  # the ClientApp's parts, the uplink codec first
        built = {p.name: p for p in method_parts(resolve(run_config))[1]}[where]
    assert holds(built, value), f"{key} = {value} set, {type(built).__name__} holds no such value"
