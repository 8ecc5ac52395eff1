"""What a part is built with: its settings object (`Part.Settings`, methods/settings.py), one
frozen dataclass per server rule, client part and uplink codec, whose fields are exactly the
run-config keys it declares (`settings`: its `Key`s) and uses (`uses`: app keys and other
parts' knobs), typed and defaulted by them; built at the edge from the resolved config, where
a missing or misspelt key is named; the same for the app, a named strategy and its clients."""

import dataclasses
import pickle

import pytest
import torch

import methods
from methods import Key, Uses
from methods.parts import Part
from run_config import KEYS_BY_NAME, ConfigError, resolve, resolve_client, resolve_strategy
from strategies.assembly import rule_settings

PRESET = "preset"


def registered_parts():
    return [*methods.SERVER_RULES.values(), *methods.CLIENT_PARTS.values(),
            *methods.UPLINK_CODECS.values()]


def declared_by_hand(part) -> list:
    """The Keys and Uses a part's class bodies declare, read from the classes' own namespaces
    (not from the settings machinery): its `settings`, then, up its bases to the first class
    body with `uses`, their `settings` and that `uses` (a class body without `uses` reads what
    its base class reads)."""
    chain = []
    for klass in part.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, Part)):
            continue
        chain.append(klass)
        if "uses" in vars(klass):
            break
    entries = []
    for klass in reversed(chain):  # the base's fields first, as a dataclass orders them
        entries += list(vars(klass).get("settings", ()))
        if klass is chain[-1]:
            entries += list(vars(klass).get("uses", ()))
    return entries


def fields_of(part) -> dict:
    """run-config key -> (field name, type, default) of the part's settings object."""
    return {f.metadata["key"]: (f.name, f.type, f.default)
            for f in dataclasses.fields(part.Settings)}


# Three parts' settings written out by hand: field -> (type, default).
BY_HAND = {
    "proximal": {"beta": (float, 0.0)},
    "fedcm": {"fedcm_alpha": (float, 0.1)},
    "feddc": {"feddc_alpha": (float, 0.01), "feddc_steps": (str, "mean"), "lr": (float, 0.05),
              "local_iterations": (int | None, None), "local_epochs": (int | None, None),
              "batch_size": (int | None, None)},
    "momentum": {
        "lookahead": (bool, False), "lam": (float, 0.0), "eta": (float, 1.0),
        "aggregation": (str, "examples"), "global_gc": (str, "none"),
        "gc_vectors": (str, "center"), "gc_borderline": (float | str, "classifier"),
        "robust_aggregator": (str, "mean"), "trim_fraction": (float, 0.2),
        "num_malicious": (int, 0), "multikrum_select": (int, 0),
        "dp_clipping_norm": (float, 0.0), "dp_noise_multiplier": (float, 0.0),
        "seed": (int, 0)},
    "fedpaq": {"uplink_bits": (int, 0), "uplink_tensors": (str, "all"), "seed": (int, 0)},
}


@pytest.mark.parametrize("name", list(BY_HAND))
def test_three_parts_settings_written_out_by_hand(name):
    part = (methods.SERVER_RULES.get(name) if name == "momentum" else
            methods.UPLINK_CODECS.get(name) if name == "fedpaq" else methods.CLIENT_PARTS[name])
    got = {f.name: (f.type, f.default) for f in dataclasses.fields(part.Settings)}
    assert got == BY_HAND[name]
    assert part.Settings() == part.Settings(**{k: d for k, (_, d) in BY_HAND[name].items()})


@pytest.mark.parametrize("part", registered_parts(), ids=lambda p: p.__name__)
def test_every_parts_settings_are_exactly_what_it_declares(part):
    """One field per declared Key and Uses (no more, no fewer, '-' as '_'); a Key's field has
    its type and default (a preset-controlled key: its `base`); a Uses' field the type and
    default of the app's key in the schema, or None where the field admits None (a key a named
    strategy does not know)."""
    declared = declared_by_hand(part)
    got = fields_of(part)
    assert list(got) == [entry.name for entry in declared]
    for entry in declared:
        name, kind, default = got[entry.name]
        assert name == entry.name.replace("-", "_")
        key = KEYS_BY_NAME[entry.name]  # every field is a run-config key
        schema_default = key.base if key.default == PRESET else key.default
        if isinstance(entry, Key):
            assert entry is key
            strings = set(key.choices) - {PRESET}
            assert kind == (key.kind | str if strings and key.kind is not str else key.kind)
            assert default == schema_default and type(default) is type(schema_default)
        else:
            assert isinstance(entry, Uses)
            options = getattr(kind, "__args__", (kind,))
            assert key.kind in options, (entry.name, kind, key.kind)
            assert set(options) - {key.kind, type(None)} <= ({str} if key.choices else set())
            if default is None:
                assert type(None) in options
            else:
                assert default == schema_default and type(default) is type(schema_default)


@pytest.mark.parametrize("part", registered_parts(), ids=lambda p: p.__name__)
def test_a_part_reads_what_its_settings_hold(part):
    """`reads` (what the run config checks: knobs of a part the run does not use are
    refused) is the settings' keys; the app's resolved config holds every one of them."""
    assert part.reads() == tuple(fields_of(part))
    cfg = resolve({"method": "fedavg"})
    assert set(part.reads()) <= set(cfg)
    assert part.Settings.from_config(cfg).as_config() == {k: cfg[k] for k in part.reads()}


def test_a_missing_setting_fails_at_the_edge_naming_the_key():
    from strategies.assembly import build_rule

    cfg = resolve({"method": "fedacg"})
    without = {k: v for k, v in cfg.items() if k != "lam"}
    with pytest.raises(KeyError, match=r"MomentumRule reads the run-config key\(s\) 'lam', "
                       r"which its config lacks.*MomentumRule.Settings\(lam=\.\.\.\)") as err:
        build_rule(without, torch.nn.Linear(2, 2))
    assert err.value.args == ("lam",) and isinstance(err.value, methods.SettingError)
    from client_app.settings import client_parts

    with pytest.raises(KeyError, match="ProximalTerm reads the run-config key.*'beta'"):
        client_parts({k: v for k, v in cfg.items() if k != "beta"})


def test_a_misspelt_setting_fails_naming_the_key():
    from strategies.named import FedACG

    with pytest.raises(TypeError, match="lamm"):
        methods.SERVER_RULES["momentum"].Settings(lamm=0.9)
    with pytest.raises(ConfigError, match="'lamm' \\(did you mean 'lam'\\?\\)"):
        resolve({"method": "fedacg", "lamm": 0.9})
    with pytest.raises(ValueError, match="lamm is not a setting \\(did you mean lam\\?\\)"):
        FedACG(lamm=0.9)


def test_a_setting_of_the_wrong_type_or_a_dict_is_refused_naming_the_key():
    proximal = methods.CLIENT_PARTS["proximal"]
    with pytest.raises(methods.SettingError, match="ProximalTerm: setting 'beta' = 'high': "
                       "expected float"):
        proximal.Settings(beta="high")
    with pytest.raises(methods.SettingError, match="'lookahead' = 1: expected bool"):
        methods.SERVER_RULES["momentum"].Settings(lookahead=1)
    assert proximal.Settings(beta=1).beta == 1.0 and type(proximal.Settings(beta=1).beta) is float
    with pytest.raises(methods.SettingError, match="ProximalTerm is built with its settings "
                       "object.*not dict"):
        proximal({"beta": 0.1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        proximal.Settings().beta = 0.5


def test_the_named_strategy_and_the_run_config_build_equal_settings():
    """FedACG(lam=0.9) and the run config lam = 0.9: the same server-rule settings, and its
    clients' parts the same settings as the app's clients'."""
    from client_app.own_app import method_settings
    from strategies.named import FedACG, Method

    app = resolve({"method": "fedacg", "lam": 0.9})
    assert FedACG(lam=0.9).rule_settings == rule_settings(app)
    assert FedACG(lam=0.9).rule_settings.lam == 0.9
    assert FedACG(lam=0.9).rule_settings != rule_settings(resolve({"method": "fedacg"}))
    assert rule_settings(resolve_strategy({"method": "fedacg", "lam": 0.9})) == rule_settings(app)

    strategy = Method("fedacg", lam=0.9, beta=0.05)
    strategy._build(__import__("flwr.app", fromlist=["ArrayRecord"]).ArrayRecord(
        torch.nn.Linear(3, 2).state_dict()))
    clients = method_settings(strategy.client_config)  # what a node's LocalMethod builds from
    proximal = methods.CLIENT_PARTS["proximal"].Settings
    app = resolve({"method": "fedacg", "lam": 0.9, "beta": 0.05})
    assert proximal.from_config(clients) == proximal.from_config(app) == proximal(beta=0.05)


def test_a_named_strategys_settings_hold_none_for_the_loop_it_does_not_know():
    """FedDC's K reads the clients' local loop, which a named strategy's user owns: its
    settings there hold None (K is then the steps each client took); the app's hold the run
    config's numbers."""
    drift = methods.CLIENT_PARTS["feddc"].Settings
    named = drift.from_config(resolve_client({"method": "feddc", "lr": 0.1}))
    assert (named.local_iterations, named.local_epochs, named.batch_size) == (None, None, None)
    app = drift.from_config(resolve({"method": "feddc", "local-iterations": 3}))
    assert (app.local_iterations, app.local_epochs, app.batch_size) == (3, 2, 16)


def test_settings_objects_pickle_and_compare_by_value():
    momentum = methods.SERVER_RULES["momentum"].Settings
    settings = momentum.from_config(resolve({"method": "fedacg"}))
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert dataclasses.replace(settings, lam=0.5) == momentum.from_config(
        resolve({"method": "fedacg", "lam": 0.5}))


def test_a_part_that_lists_keys_by_hand_is_refused_naming_uses():
    """The former hand list of the other keys a part read (`keys`) is refused at registration:
    what a part reads is what its settings object holds, declared in `uses`."""
    from methods.registry import RegistryError

    class Listed(methods.ClientPart):
        name, keys = "listed-keys", ("lr",)

    with pytest.raises(RegistryError, match=r"Listed.keys: .*`uses`.*methods.Uses\('lr'"):
        methods.register(Listed)
    assert "listed-keys" not in methods.CLIENT_PARTS

    class Used(methods.ClientPart):
        name, uses = "used-keys", (Uses("lr", float, 0.05),)

    methods.register(Used)
    try:
        assert Used.reads() == ("lr",) and Used.Settings(lr=0.1).lr == 0.1
    finally:
        methods.unregister(Used)
