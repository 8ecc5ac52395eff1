"""A method is one file (docs/extending.md#a-methods-knobs): a server-momentum variant with one
knob of its own, written into a folder outside the app, registered by path, its knob set through
the run config and checked against a float64 computation of the test's own."""

import textwrap

import pytest
import torch
from flwr.app import ArrayRecord

import methods
from methods.registry import RegistryError
from run_config import KEYS_BY_NAME, ConfigError, resolve
from strategies.assembly import build_rule
from strategies.named import Method  # imported before any method of a file is registered

# The worked example of docs/extending.md#a-methods-knobs, as a user would write it.
KICKED_MOMENTUM = '''
"""FedAvgM with a kick: theta += m + kick * d after the momentum step m = lam * m + eta * d."""

from methods import Key, MethodDefinition, register
from methods.momentum import MomentumRule


class KickedMomentum(MomentumRule):
    """The momentum rule, then one more step along the round's update d."""

    name = "kicked-momentum"
    settings = (Key("kick", float, 0.0, "Extra step along the round's update: theta += m + "
                    "kick * d.", "server", low=0.0, high=1.0, strategy=True),)
    summary = "server momentum, then an extra step kick * d"

    def __init__(self, settings, model):  # KickedMomentum.Settings: the momentum rule's + kick
        super().__init__(settings, model)
        self.kick = settings.kick

    def step_(self, d):
        super().step_(d)
        for name, dk in d.items():
            self.theta[name].add_(dk, alpha=self.kick)


METHOD = MethodDefinition("kicked-fedavgm", "worked example", "kicked-momentum", (), {"lam": 0.5})
register(KickedMomentum, METHOD)
'''


@pytest.fixture
def kicked(tmp_path):
    path = tmp_path / "elsewhere" / "kicked_momentum.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(KICKED_MOMENTUM))
    module = methods.register_from_file(path)
    assert methods.register_from_file(path) is module  # the same file again: the same module
    yield module
    methods.unregister(module.KickedMomentum, module.METHOD)


def float64_rounds(theta0, rounds, lam, eta, kick):
    """theta after each round, in float64: d = sum_i n_i w_i / sum n - theta (no look-ahead),
    m = lam m + eta d, theta = theta + m + kick d."""
    theta = {k: v.double() for k, v in theta0.items()}
    m = {k: torch.zeros_like(v) for k, v in theta.items()}
    out = []
    for models, n in rounds:
        for k in theta:
            d = sum(ni * w[k].double() for w, ni in zip(models, n)) / sum(n) - theta[k]
            m[k] = lam * m[k] + eta * d
            theta[k] = theta[k] + m[k] + kick * d
        out.append({k: v.clone() for k, v in theta.items()})
    return out


def test_a_method_from_a_file_elsewhere_runs_with_its_knob(kicked):
    cfg = resolve({"method": "kicked-fedavgm", "kick": 0.25, "eta": 0.8})
    assert (cfg["server-rule"], cfg["kick"], cfg["lam"]) == ("kicked-momentum", 0.25, 0.5)
    model = torch.nn.Linear(3, 2)
    rule, _ = build_rule(cfg, model)  # the app's one builder of a server rule
    assert rule.kick == 0.25

    gen = torch.Generator().manual_seed(0)
    theta0 = {k: v.detach().clone() for k, v in model.state_dict().items()}
    rounds = [([{k: torch.randn(v.shape, generator=gen) for k, v in theta0.items()}
                for _ in range(3)], [5, 1, 2]) for _ in range(2)]
    rule.start(ArrayRecord(theta0))
    expected = float64_rounds(theta0, rounds, lam=0.5, eta=0.8, kick=0.25)
    for server_round, (models, n) in enumerate(rounds, start=1):
        _, phi = rule.broadcast(server_round)
        record, skipped = rule.aggregate(server_round, [(None, w, ni) for w, ni in
                                                        zip(models, n)], phi, [{}] * 3)
        assert skipped is None
        got = record.to_torch_state_dict()
        for k, want in expected[server_round - 1].items():
            assert torch.allclose(got[k].double(), want, rtol=1e-5, atol=1e-6), (server_round, k)
    # with kick = 0 the same rounds are FedAvgM's: the knob is what moved theta
    plain = float64_rounds(theta0, rounds, lam=0.5, eta=0.8, kick=0.0)[-1]
    assert not torch.allclose(plain["weight"], expected[-1]["weight"], atol=1e-3)


def test_the_docs_show_this_file():
    """docs/extending.md#a-methods-knobs shows the worked example as this test runs it."""
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "extending.md").read_text()
    body = KICKED_MOMENTUM.split('"""', 2)[2].strip()  # (the docs show it without the docstring)
    assert body in docs


def test_its_knob_is_a_run_config_key_like_the_apps(kicked):
    key = KEYS_BY_NAME["kick"]
    assert (key.default, key.low, key.high) == (0.0, 0.0, 1.0)
    assert resolve({"method": "kicked-fedavgm"})["kick"] == 0.0
    with pytest.raises(ConfigError, match="'kick'.*\\[0, 1\\]"):
        resolve({"method": "kicked-fedavgm", "kick": 2.0})
    with pytest.raises(ConfigError, match="'kick'"):
        resolve({"method": "kicked-fedavgm", "kick": "hard"})
    # a knob of a rule the run does not use is refused, naming the rule
    with pytest.raises(ConfigError, match="'kick' = 0.5 is a knob of 'kicked-momentum'"):
        resolve({"method": "fedavgm", "kick": 0.5})
    from pages.tables import markdown, toml

    assert "| `kick` | `0.0` | float in [0, 1] |" in markdown() and "\nkick = 0.0" in toml()


def test_the_knob_goes_with_its_method(kicked):
    methods.unregister(kicked.KickedMomentum, kicked.METHOD)
    assert "kick" not in KEYS_BY_NAME
    with pytest.raises(ConfigError, match="unknown run-config key.*'kick'"):
        resolve({"kick": 0.25})
    methods.register(kicked.KickedMomentum, kicked.METHOD)
    assert KEYS_BY_NAME["kick"].high == 1.0


def test_a_knob_is_declared_once():
    """A part that declares a key another part (or the app) declares is refused, naming both."""
    from methods import Key, ServerRule

    class SecondLam(ServerRule):
        name = "second-lam"
        settings = (Key("lam", float, 0.5, "again", "server"),)

    with pytest.raises(RegistryError, match="SecondLam declares the run-config key 'lam', "
                       "which MomentumRule declares already"):
        methods.register(SecondLam)

    class SecondSeed(ServerRule):
        name = "second-seed"
        settings = (Key("seed", int, 1, "again", "server"),)

    methods.register(SecondSeed)
    try:
        with pytest.raises(RegistryError, match="SecondSeed declares the run-config key 'seed', "
                           "which run_config/schema.py declares already"):
            resolve({})
    finally:
        methods.unregister(SecondSeed)
    assert resolve({})["seed"] == 0


def test_a_method_from_a_file_is_a_named_strategy_with_its_knob_as_a_keyword(kicked):
    """strategies.Method takes the knobs of a method registered after it was imported (its
    keywords are read when asked), and names the knob for a misspelt keyword."""
    strategy = Method("kicked-fedavgm", kick=0.25, lr=0.05)
    assert (strategy.cfg["kick"], strategy.cfg["lam"], strategy.cfg["lr"]) == (0.25, 0.5, 0.05)
    with pytest.raises(ValueError, match="kik is not a setting .*did you mean kick"):
        Method("kicked-fedavgm", kik=0.25)
