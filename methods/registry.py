"""The one registry of methods, server rules and client parts, and the check that a combination
of them can work (before the run starts)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .parts import (ClientPart, MethodDefinition, Part, ReplyMetric, ServerRule, UplinkCodec,
                    UpRecord)
from .settings import Key, Uses

METHODS: dict[str, MethodDefinition] = {}
SERVER_RULES: dict[str, type[ServerRule]] = {}
CLIENT_PARTS: dict[str, type[ClientPart]] = {}
UPLINK_CODECS: dict[str, type[UplinkCodec]] = {}
_PARTS_IN_ORDER: list[type[Part]] = []  # the registered rules, parts and codecs, oldest first


class RegistryError(ValueError):
    """A method or part that clashes with a registered one, or names an unknown part."""


def register(*items: MethodDefinition | type[ServerRule] | type[ClientPart]) -> None:
    """Register methods, server rules, client parts and uplink codecs (a name may be registered
    once; the same object again is a no-op, so a module may be imported twice)."""
    for item in items:
        if isinstance(item, MethodDefinition):
            table, name = METHODS, item.name
        elif isinstance(item, type) and issubclass(item, UplinkCodec):
            table, name = UPLINK_CODECS, item.name
        elif isinstance(item, type) and issubclass(item, ServerRule):
            table, name = SERVER_RULES, item.name
        elif isinstance(item, type) and issubclass(item, ClientPart):
            table, name = CLIENT_PARTS, item.name
        else:
            raise RegistryError(f"cannot register {item!r}: not a MethodDefinition, ServerRule, "
                                "ClientPart or UplinkCodec")
        if not name or name in ("preset", "auto", "none") or "," in name:
            raise RegistryError(f"{item!r} needs a name other than '', 'preset', 'auto', 'none'")
        if table.get(name, item) is not item and table[name] != item:
            raise RegistryError(f"'{name}' is registered already ({table[name]!r})")
        if table is not METHODS:
            _check_declarations(item)
            _check_settings(item)
            if item not in _PARTS_IN_ORDER:
                _PARTS_IN_ORDER.append(item)
        table[name] = item
    for method in (i for i in items if isinstance(i, MethodDefinition)):
        unknown = [p for p in (method.server_rule,) if p not in SERVER_RULES]
        unknown += [p for p in method.client_parts if p not in CLIENT_PARTS]
        if unknown:
            raise RegistryError(f"method '{method.name}' names unregistered parts {unknown}: "
                                "register them first")


def _check_declarations(part: type[ServerRule] | type[ClientPart]) -> None:
    """A part's `up` (and a rule's `up_metrics`) must say what each record (number) holds: the
    server screens replies against it."""
    declared = {"up": (part.up, UpRecord)}
    if issubclass(part, ServerRule):
        declared["up_metrics"] = (part.up_metrics, ReplyMetric)
    for attr, (value, kind) in declared.items():
        if not isinstance(value, Mapping) or not all(isinstance(v, kind) for v in value.values()):
            raise RegistryError(
                f"{part.__name__}.{attr} = {value!r}: map each name to a methods.{kind.__name__} "
                f"saying what it holds, e.g. {attr} = {{'drift': {kind.__name__}(...)}} "
                "(docs/extending.md#the-hooks)")


def _check_settings(part: type[Part]) -> None:
    """A part declares its knobs as `methods.Key`s, each name once in the whole registry (a part
    that reads another's knob, or an app key, names it in `uses`)."""
    declared = part.declared()
    if not isinstance(declared, tuple) or not all(isinstance(k, Key) for k in declared):
        raise RegistryError(f"{part.__name__}.settings = {declared!r}: give a tuple of "
                            "methods.Key, e.g. settings = (Key('my-knob', float, 0.5, 'What it "
                            "does.', 'server', low=0.0, high=1.0),) (docs/extending.md"
                            "#a-methods-knobs)")
    if "keys" in vars(part):  # (the hand list of names a part once read its config by)
        raise RegistryError(f"{part.__name__}.keys: a part reads the keys it declares, its "
                            "`settings` and its `uses` (app keys as methods.Uses('lr', float, "
                            "0.05), other parts' Keys), from its settings object "
                            "(docs/extending.md#a-methods-knobs)")
    uses = vars(part).get("uses", ())
    if not isinstance(uses, tuple) or not all(isinstance(k, (Key, Uses)) for k in uses):
        raise RegistryError(f"{part.__name__}.uses = {uses!r}: give a tuple of methods.Uses "
                            "(app keys: Uses('lr', float, 0.05)) and other parts' Keys "
                            "(docs/extending.md#a-methods-knobs)")
    owners = {key.name: owner for key, owner in setting_owners() if owner is not part}
    for key in declared:
        if key.name in owners:
            raise RegistryError(f"{part.__name__} declares the run-config key '{key.name}', "
                                f"which {owners[key.name].__name__} declares already: name it "
                                "in `uses` to read it, or give the new knob another name")
        if key.name in {entry.name for entry in uses}:
            raise RegistryError(f"{part.__name__} names '{key.name}' in both `settings` and "
                                "`uses`: `uses` lists only the keys declared elsewhere")


# (a cache: the registered parts when it was made, and setting_owners() for them)
_owners: tuple[tuple[type[Part], ...], tuple[tuple[Key, type[Part]], ...]] | None = None


def setting_owners() -> tuple[tuple[Key, type[Part]], ...]:
    """Every knob the registered server rules and client parts (and their base classes) declare
    in their `settings`, with the class that declares it, in the order they were registered.
    The same tuple while the registry is unchanged: every run-config key looked up by name
    reads it (`run_config.KEYS_BY_NAME`), thousands of times a round."""
    global _owners
    parts = tuple(_PARTS_IN_ORDER)
    if _owners is None or _owners[0] != parts:
        classes: dict[type[Part], None] = {}  # each registered part's own class and its bases
        for part in parts:
            classes.update((k, None) for k in reversed(part.__mro__) if issubclass(k, Part))
        _owners = parts, tuple((key, owner) for owner in classes for key in owner.declared())
    return _owners[1]


def register_from_file(path: str | Path) -> ModuleType:
    """Import the method module at `path` (a .py file anywhere), whose top level registers its
    method, parts and their settings with `register` as a module of methods/ does; the same file
    again returns the module imported the first time. Import it before the run config is
    resolved, in the ServerApp and the ClientApp processes alike (docs/extending.md)."""
    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    module_name = f"method_file_{path.stem.replace('-', '_')}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    if not path.is_file() or path.suffix != ".py":
        raise RegistryError(f"no method module at {path}: give the path of a .py file")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def unregister(*items: MethodDefinition | type[ServerRule] | type[ClientPart]) -> None:
    """Remove registered items (tests that add a method for their own duration)."""
    for table in (METHODS, SERVER_RULES, CLIENT_PARTS, UPLINK_CODECS):
        for name in [n for n, v in table.items() if any(v is i for i in items)]:
            del table[name]
    _PARTS_IN_ORDER[:] = [p for p in _PARTS_IN_ORDER if not any(p is i for i in items)]


def method_names() -> tuple[str, ...]:
    return tuple(METHODS)


def server_rule_names() -> tuple[str, ...]:
    return tuple(SERVER_RULES)


def client_part_names() -> tuple[str, ...]:
    return tuple(CLIENT_PARTS)


def uplink_codec(cfg: Mapping[str, Any]) -> type[UplinkCodec] | None:
    """The registered uplink codec this resolved run config switches on (e.g. FedPAQ's with
    uplink-bits > 0: `on` of the codec's settings from `cfg`), or None: the models travel up as
    plain tensors."""
    found = [codec for codec in UPLINK_CODECS.values()
             if codec.on(codec.Settings.from_config(cfg))]
    if len(found) > 1:
        raise RegistryError(f"the run config switches on {len(found)} uplink codecs "
                            f"({', '.join(c.name for c in found)}): at most one can encode a reply")
    return found[0] if found else None


def parse_objective(value: str) -> tuple[str, ...]:
    """'none' or a comma-separated list of client part names -> the names."""
    names = tuple(v for v in value.replace(" ", "").split(",") if v)
    return () if names == ("none",) else names


def check_parts(cfg: dict[str, Any], resume: bool = False) -> list[str]:
    """Why this combination of server rule, client parts and switches cannot work (one message
    per conflict, each naming both parts); empty when it can. `resume`: whether the run resumes
    from a checkpoint (a named strategy's never does)."""
    rule = SERVER_RULES[cfg["server-rule"]]
    parts = [CLIENT_PARTS[p] for p in parse_objective(cfg["client-objective"])]
    problems = []
    sent_up = {r: (p.name, p.up[r]) for p in parts for r in p.up}
    for record, holds in rule.up.items():
        if record not in sent_up:
            problems.append(f"server-rule '{rule.name}' needs the record '{record}' in every "
                            f"reply, and no part of client-objective '{cfg['client-objective']}' "
                            "sends it")
        elif sent_up[record][1] != holds:
            problems.append(f"client part '{sent_up[record][0]}' declares its record '{record}' "
                            f"as {sent_up[record][1]}, server-rule '{rule.name}' as {holds}: "
                            "the server screens replies against the rule's declaration")
    for part in parts:
        for record in part.down:
            if record not in rule.down:
                problems.append(f"client part '{part.name}' needs the record '{record}' from the "
                                f"server, and server-rule '{rule.name}' does not send it")
    for hook in ("model_forward", "step_grad"):  # hooks that replace a step of the loop
        owners = [p.name for p in parts if p.has(hook)]
        if len(owners) > 1:
            problems.append(f"client parts {' and '.join(repr(o) for o in owners)} both replace "
                            f"the local update's {hook.replace('_', ' ')}: use one of them")
    for part in parts:  # (a named strategy's settings name no model: it trains the user's)
        if part.models and "model" in cfg and cfg["model"] not in part.models:
            problems.append(f"client part '{part.name}' runs only on model "
                            f"{' or '.join(repr(m) for m in part.models)} (not "
                            f"'{cfg['model']}'): set 'model' = '{part.models[0]}'")
    switches = {  # switch -> (on?, how the config turns it on)
        "lookahead": (cfg["lookahead"], "'lookahead' = true"),
        "global-gc": (cfg["global-gc"] != "none", f"'global-gc' = '{cfg['global-gc']}'"),
        "aggregation=uniform": (cfg["aggregation"] == "uniform", "'aggregation' = 'uniform'"),
        "dynamic-clients": (cfg["dynamic-replace-prob"] > 0, "'dynamic-replace-prob' > 0"),
        "resume": (resume, "'resume'"),
    }
    for switch, (on, shown) in switches.items():
        if on and switch not in rule.supports:
            problems.append(f"{shown} cannot be combined with method '{cfg['method']}' "
                            f"(server-rule '{rule.name}': {rule.summary or rule.__doc__})")
    if not cfg["allow-untested-combinations"]:
        problems += [f"{why}; set 'allow-untested-combinations' = true to run it anyway"
                     for why in untested_combinations(cfg)]
    # Parts with per-client state resume too: the server names the version of its state each
    # client starts from, and a client whose copy is lost refuses to train with an error
    # (client_app/client_state_store.py; docs/baselines.md#client-state).
    return problems


UNTESTED_SWITCHES = {  # switch -> (is it on in cfg?, how the config turns it on)
    "lookahead": lambda cfg: (cfg["lookahead"], "'lookahead' = true"),
    "local-gc": lambda cfg: (cfg["local-gc"] != "none", f"'local-gc' = '{cfg['local-gc']}'"),
    "global-gc": lambda cfg: (cfg["global-gc"] != "none", f"'global-gc' = '{cfg['global-gc']}'"),
}


def untested_combinations(cfg: dict[str, Any]) -> list[str]:
    """The combinations of this config that no paper defines (docs/baselines.md#combinations), one
    sentence each; a run with 'allow-untested-combinations' = true records them."""
    rule = SERVER_RULES[cfg["server-rule"]]
    parts = [CLIENT_PARTS[p] for p in parse_objective(cfg["client-objective"])]
    found = []
    for kind, part in [("server-rule", rule)] + [("client part", p) for p in parts]:
        for switch, why in part.untested.items():
            on, shown = UNTESTED_SWITCHES[switch](cfg)
            if on:
                found.append(f"{shown} with {kind} '{part.name}' is untested: {why}")
    return found
