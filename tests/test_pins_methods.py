"""Pins of every method's preset (docs/algorithms.md#presets), against the values written out
by hand here from that section and the papers it cites."""

import pytest
import torch

from run_config import resolve

# The preset-controlled keys under each method, as docs/algorithms.md#presets lists them.
FEDAVG = {"lookahead": False, "lam": 0.0, "eta": 1.0, "beta": 0.0, "local-gc": "none",
          "global-gc": "none", "aggregation": "examples", "server-rule": "momentum",
          "client-objective": "none"}
EXPECTED = {
    "fedavg": FEDAVG,
    "fedprox": {**FEDAVG, "beta": 0.01, "client-objective": "proximal"},
    "fedavgm": {**FEDAVG, "lam": 0.85},
    "fedacg": {**FEDAVG, "lookahead": True, "lam": 0.85, "beta": 0.01,
               "client-objective": "proximal"},
    "fedagm": {**FEDAVG, "lookahead": True, "lam": 0.85, "beta": 0.01,
               "client-objective": "proximal"},
    "localgc": {**FEDAVG, "local-gc": "all", "aggregation": "uniform"},
    "globalgc": {**FEDAVG, "global-gc": "all", "aggregation": "uniform"},
    "gcfed": {**FEDAVG, "local-gc": "features", "global-gc": "all", "aggregation": "uniform"},
    "fedacg+gcfed": {**FEDAVG, "lookahead": True, "lam": 0.85, "beta": 0.01,
                     "local-gc": "features", "global-gc": "all",
                     "client-objective": "proximal"},
    "fedadam": {**FEDAVG, "eta": 0.01, "server-rule": "fedadam"},
    "fedyogi": {**FEDAVG, "eta": 0.01, "server-rule": "fedyogi"},
    "fedadagrad": {**FEDAVG, "eta": 0.01, "server-rule": "fedadagrad"},
    # the variants of the papers' codes (docs/setups.md#fidelity)
    "fedavg-gcfed": {**FEDAVG, "aggregation": "uniform"},
    "fedprox-gcfed": {**FEDAVG, "beta": 0.1, "aggregation": "uniform",
                      "client-objective": "proximal"},
    "fedacg-gcfed": {**FEDAVG, "lookahead": True, "lam": 0.85, "beta": 0.002,
                     "aggregation": "uniform", "client-objective": "proximal"},
    "fedadam-fedacg": {**FEDAVG, "eta": 0.01, "aggregation": "uniform",
                       "server-rule": "fedadam-fedacg"},
}


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_every_method_has_its_documented_preset(method):
    cfg = resolve({"method": method})
    assert {k: cfg[k] for k in EXPECTED[method]} == EXPECTED[method]
    assert cfg["alpha"] == 1.0  # FedAGM's loss weight; every method leaves it at 1


# --- the registry (docs/extending.md): names, clashes, and which switches a rule takes ------


@pytest.mark.parametrize("name", ["", "preset", "auto", "none", "fedavg,fedprox"])
def test_reserved_names_are_refused(name):
    from methods import MethodDefinition, register, unregister
    from methods.registry import RegistryError

    method = MethodDefinition(name, "test", "momentum")
    try:
        with pytest.raises(RegistryError, match="needs a name other than"):
            register(method)
    finally:
        unregister(method)


def test_a_name_is_registered_once_and_parts_must_exist():
    from methods import METHODS, MethodDefinition, register, unregister
    from methods.registry import RegistryError

    register(METHODS["fedavg"])  # the same object again: a no-op
    clash = MethodDefinition("fedavg", "another paper", "momentum")
    with pytest.raises(RegistryError, match="'fedavg' is registered already"):
        register(clash)
    assert METHODS["fedavg"] is not clash
    orphan = MethodDefinition("orphan-method", "test", "momentum", ("no-such-part",))
    try:
        with pytest.raises(RegistryError, match=r"unregistered parts \['no-such-part'\]"):
            register(orphan)
    finally:
        unregister(orphan)


def test_client_objective_lists_parts_and_none_is_empty():
    from methods.registry import parse_objective

    assert parse_objective("none") == ()
    assert parse_objective("proximal") == ("proximal",)
    assert parse_objective(" proximal , anchor ,") == ("proximal", "anchor")
    assert parse_objective("none,proximal") == ("none", "proximal")


# Flower's FedOpt rules take none of the switches; the momentum rule takes them all.
@pytest.mark.parametrize("overrides, shown", [
    ({"aggregation": "uniform"}, "'aggregation' = 'uniform'"),
    ({"dynamic-replace-prob": 0.5}, "'dynamic-replace-prob' > 0"),
    ({"lookahead": True}, "'lookahead' = true"),
    ({"global-gc": "all"}, "'global-gc' = 'all'"),
])
def test_a_switch_the_server_rule_lacks_is_refused(overrides, shown):
    from run_config import ConfigError

    with pytest.raises(ConfigError, match=f"{shown} cannot be combined with method 'fedadam'"):
        resolve({"method": "fedadam", **overrides})
    resolve({"method": "fedacg", **overrides})  # the momentum rule supports each
    resolve({"method": "fedadam", **{k: EXPECTED["fedadam"].get(k, 0) for k in overrides}})


def test_the_log_describes_each_server_rule_with_its_settings():
    """The strategy's start-up log names the server rule (`describe`, logged by `summary`)."""
    from methods import SERVER_RULES, ServerRule

    fedadam = SERVER_RULES["fedadam"].Settings.from_config(resolve({"method": "fedadam"}))
    fedadam = SERVER_RULES["fedadam"](fedadam, None)
    assert fedadam.describe() == "fedadam: Flower's FedAdam (eta=0.01, tau=0.001)"

    class PlainRule(ServerRule):  # a rule without its own describe: its name
        name = "plain-rule"

    assert PlainRule(PlainRule.Settings(), None).describe() == "plain-rule"
    # a rule without state: nothing to save
    assert PlainRule(PlainRule.Settings(), None).state_dict() == {}


@pytest.fixture
def median_method():
    """tests/median_method.py (a rule that sends and needs records, a part with client state),
    registered for this test only."""
    import methods
    import median_method as module  # registers it on first import

    methods.register(*module.ITEMS)
    yield module
    methods.unregister(*module.ITEMS)


def test_parts_that_miss_each_others_records_are_refused(median_method):
    from run_config import ConfigError

    resolve({"method": "median-anchor"})
    with pytest.raises(ConfigError, match="client part 'anchor-pull' needs the record 'anchor' "
                                          "from the server, and server-rule 'momentum'"):
        resolve({"method": "fedavg", "client-objective": "anchor-pull"})
    with pytest.raises(ConfigError, match="server-rule 'coordinate-median' needs the record "
                                          "'drift' in every reply"):
        resolve({"method": "median-anchor", "client-objective": "none"})
    # client state is versioned per round on the nodes (docs/baselines.md#client-state):
    # resume is no longer refused for a part that keeps it
    assert resolve({"method": "median-anchor", "resume": "latest"})["resume"] == "latest"


def test_server_momentum_lam_is_below_one():
    from methods.momentum import MomentumRule

    MomentumRule(MomentumRule.Settings(lam=0.0))
    MomentumRule(MomentumRule.Settings(lam=0.999))
    for lam in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"lam must be in \[0, 1\)"):
            MomentumRule(MomentumRule.Settings(lam=lam))


def test_a_part_says_which_hooks_it_overrides():
    from methods import ClientPart

    class LossOnly(ClientPart):
        name = "loss-only"

        def loss(self, ctx, logits, x, y):
            return None

    assert LossOnly.has("loss")
    assert not any(LossOnly.has(h) for h in ("begin", "correct_grad_", "end"))


def test_fedacg_code_variants_average_uniformly_and_the_plain_names_by_examples():
    """FedACG's code averages the sampled clients uniformly (servers/base.py, sum / C)."""
    for name in ("fedlc-fedacg", "fedntd-fedacg", "feddecorr-fedacg", "feddyn-fedacg",
                 "fedadam-fedacg"):
        assert resolve({"method": name})["aggregation"] == "uniform", name
    for name in ("fedlc", "fedntd", "feddecorr", "fedavg", "fedprox"):
        assert resolve({"method": name})["aggregation"] == "examples", name
    assert resolve({"method": "fedadam-fedacg"})["fedopt-tau"] == 1e-3  # FedACG's tau


# --- FedAdam as FedACG's code runs it (docs/algorithms.md#fedadam-in-fedacgs-code) ------------


def test_fedacg_adam_step_by_hand():
    """Two steps on one scalar, b1 = 0.9, b2 = 0.99, tau = 0.1, eta = 0.5, v_0 = tau^2:
    round 1, d = 0.3: m = 0.03, v = 0.99 * 0.01 + 0.01 * 0.09 = 0.0108,
    theta = 1 + 0.5 * 0.03 / (sqrt(0.0108) + 0.1); round 2, d = -0.2 likewise."""
    import math

    from methods.fedadam import fedacg_adam_step_

    theta = {"w": torch.tensor([1.0], dtype=torch.float64)}
    m = {"w": torch.zeros(1, dtype=torch.float64)}
    v = {"w": torch.full((1,), 0.1 ** 2, dtype=torch.float64)}
    fedacg_adam_step_(theta, m, v, {"w": torch.tensor([0.3], dtype=torch.float64)}, 0.5, 0.1)
    t1 = 1 + 0.5 * 0.03 / (math.sqrt(0.0108) + 0.1)
    assert (m["w"].item(), v["w"].item()) == pytest.approx((0.03, 0.0108), abs=1e-15)
    assert theta["w"].item() == pytest.approx(t1, abs=1e-15)
    fedacg_adam_step_(theta, m, v, {"w": torch.tensor([-0.2], dtype=torch.float64)}, 0.5, 0.1)
    m2, v2 = 0.9 * 0.03 + 0.1 * -0.2, 0.99 * 0.0108 + 0.01 * 0.04
    assert theta["w"].item() == pytest.approx(t1 + 0.5 * m2 / (math.sqrt(v2) + 0.1), abs=1e-15)
    # Flower's FedAdam differs: v_0 = 0 and eta * sqrt(1 - b2^(t+1)) / (1 - b1^(t+1)) (0.74 at t=1)
    flower_t1 = 1 + 0.5 * math.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2) * 0.03 / (
        math.sqrt(0.0009) + 0.1)
    assert abs(flower_t1 - t1) > 1e-2


def _adam_rule(overrides=None):
    from methods import SERVER_RULES

    cfg = resolve({"method": "fedadam-fedacg", **(overrides or {})})
    rule = SERVER_RULES["fedadam-fedacg"]
    return rule(rule.Settings.from_config(cfg), torch.nn.Linear(3, 2))


def _adam_rounds(rule, rounds, seed=0):
    """Run `rule` on random client models (3 per round, sizes 10, 20, 30)."""
    gen = torch.Generator().manual_seed(seed)
    for t in range(1, rounds + 1):
        _, phi = rule.broadcast(t)
        good = [(None, {k: v + torch.randn(v.shape, generator=gen) for k, v in phi.items()}, n)
                for n in (10, 20, 30)]
        arrays, skip = rule.aggregate(t, good, phi, [{}, {}, {}])
        assert skip is None and arrays is not None


def test_fedadam_fedacg_rule_against_a_plain_implementation():
    """Three rounds through the server rule = FedACG's ServerAdam written out here in float64:
    d = mean of the updates (uniform), m and v as the code, theta += eta m / (sqrt(v) + tau)."""
    from flwr.app import ArrayRecord

    torch.manual_seed(1)
    init = {"w": torch.randn(2, 3), "b": torch.randn(2)}
    rule = _adam_rule({"eta": 0.05})
    rule.start(ArrayRecord(init))
    gen = torch.Generator().manual_seed(0)
    theta = {k: v.double() for k, v in init.items()}
    m = {k: torch.zeros_like(v) for k, v in theta.items()}
    v = {k: torch.full_like(t, 1e-6) for k, t in theta.items()}
    for t in range(1, 4):
        _, phi = rule.broadcast(t)
        assert all(torch.equal(phi[k], rule.theta[k]) for k in phi)  # no look-ahead
        models = [{k: x + torch.randn(x.shape, generator=gen) for k, x in phi.items()}
                  for _ in range(3)]
        rule.aggregate(t, [(None, w, n) for w, n in zip(models, (10, 20, 30))], phi, [{}] * 3)
        for k in theta:
            d = sum(w[k].double() for w in models) / 3 - theta[k]
            m[k] = 0.9 * m[k] + 0.1 * d
            v[k] = 0.99 * v[k] + 0.01 * d * d
            theta[k] = theta[k] + 0.05 * m[k] / (v[k].sqrt() + 1e-3)
    for k in theta:
        torch.testing.assert_close(rule.theta[k].double(), theta[k], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(rule.v[k].double(), v[k], rtol=1e-4, atol=1e-9)


def test_fedadam_fedacg_resumes_from_its_state_dict(tmp_path):
    """m and v are plain tensors in the checkpoint: 2 rounds, save, load into a fresh rule, 2 more
    = 4 rounds uninterrupted, bitwise."""
    from flwr.app import ArrayRecord

    init = {"w": torch.ones(2, 3), "b": torch.zeros(2)}
    whole = _adam_rule()
    whole.start(ArrayRecord(init))
    _adam_rounds(whole, 2)
    torch.save(whole.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)  # plain tensors only
    assert set(state) == {"theta", "m", "phi", "v"}
    resumed = _adam_rule()
    resumed.start(ArrayRecord(init))
    resumed.load_state_dict(state)
    for rule in (whole, resumed):
        _adam_rounds(rule, 2, seed=5)
    for part in ("theta", "m", "v"):
        a, b = getattr(whole, part), getattr(resumed, part)
        assert all(torch.equal(a[k], b[k]) for k in a), part
    with pytest.raises(ValueError, match="lacks FedAdam's second moment 'v'"):
        _adam_rule().load_state_dict({k: state[k] for k in ("theta", "m", "phi")})


@pytest.mark.parametrize("overrides, words", [
    ({"lookahead": True}, "'lookahead' = true cannot be combined with method 'fedadam-fedacg'"),
    ({"global-gc": "all"}, "'global-gc' = 'all' cannot be combined"),
    ({"lam": 0.5}, "'lam' = 0.5 is a knob of"),
])
def test_fedadam_fedacg_refuses_what_it_does_not_do(overrides, words):
    from run_config import ConfigError

    with pytest.raises(ConfigError, match=words):
        resolve({"method": "fedadam-fedacg", **overrides})
    assert resolve({"method": "fedadam-fedacg", "resume": "latest",
                    "dynamic-replace-prob": 0.5})["server-rule"] == "fedadam-fedacg"
