"""Pins of every method's preset (docs/algorithms.md#presets), against the values written out
by hand here from that section and the papers it cites."""

import pytest

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
}


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_every_method_has_its_documented_preset(method):
    cfg = resolve({"method": method})
    assert {k: cfg[k] for k in EXPECTED[method]} == EXPECTED[method]
    assert cfg["alpha"] == 1.0  # FedAGM's loss weight; every method leaves it at 1


# --- the registry (docs/extending.md): names, clashes, and which switches a rule takes ------


@pytest.mark.parametrize("name", ["", "preset", "auto", "none", "fedavg,fedprox"])
def test_reserved_names_are_refused(name):
    from methods import Method, register, unregister
    from methods.registry import RegistryError

    method = Method(name, "test", "momentum")
    try:
        with pytest.raises(RegistryError, match="needs a name other than"):
            register(method)
    finally:
        unregister(method)


def test_a_name_is_registered_once_and_parts_must_exist():
    from methods import METHODS, Method, register, unregister
    from methods.registry import RegistryError

    register(METHODS["fedavg"])  # the same object again: a no-op
    clash = Method("fedavg", "another paper", "momentum")
    with pytest.raises(RegistryError, match="'fedavg' is registered already"):
        register(clash)
    assert METHODS["fedavg"] is not clash
    orphan = Method("orphan-method", "test", "momentum", ("no-such-part",))
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

    fedadam = SERVER_RULES["fedadam"](resolve({"method": "fedadam"}), None)
    assert fedadam.describe() == "fedadam: Flower's FedAdam (eta=0.01, tau=0.001)"

    class PlainRule(ServerRule):  # a rule without its own describe: its name
        name = "plain-rule"

    assert PlainRule({}, None).describe() == "plain-rule"
    assert PlainRule({}, None).state_dict() == {}  # a rule without state: nothing to save


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

    MomentumRule.with_values(lam=0.0)
    MomentumRule.with_values(lam=0.999)
    for lam in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"lam must be in \[0, 1\)"):
            MomentumRule.with_values(lam=lam)


def test_a_part_says_which_hooks_it_overrides():
    from methods import ClientPart

    class LossOnly(ClientPart):
        name = "loss-only"

        def loss(self, ctx, logits, x, y):
            return None

    assert LossOnly.has("loss")
    assert not any(LossOnly.has(h) for h in ("begin", "correct_grad_", "end"))
