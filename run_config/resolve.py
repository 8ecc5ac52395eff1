"""Validate and type a Flower run config, then fill the 'preset' keys from `method`."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError
from .presets import FLOWER_BASELINES, PRESETS
from .schema import KEYS, KEYS_BY_NAME, PRESET, Key
from .setups import apply_setup


def _fail(key: Key, value: Any, why: str = "") -> ConfigError:
    shown = f"'{value}'" if isinstance(value, str) else repr(value)
    msg = f"run config '{key.name}' = {shown}: {why or 'not allowed'}; allowed: {key.allowed()}."
    return ConfigError(msg + f" Fix it in pyproject.toml or with --run-config \"{key.name}=...\".")


def coerce(key: Key, value: Any) -> Any:
    """Return `value` typed for `key`, or raise ConfigError naming the key and what is allowed."""
    if isinstance(value, str) and key.kind is not str:
        if value in key.choices:
            return value
        raise _fail(key, value, f"expected {key.kind.__name__}")
    if key.kind is str:
        if not isinstance(value, str):
            raise _fail(key, value, "expected a string (quote it: key='value')")
        if key.choices and value not in key.choices:
            close = difflib.get_close_matches(value, key.choices, n=1)
            raise _fail(key, value, f"unknown choice{f' (did you mean {close[0]!r}?)' if close else ''}")
        return value
    if key.kind is bool:
        if not isinstance(value, bool):
            raise _fail(key, value, "expected true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(key, value, f"expected {key.kind.__name__}")
    if key.kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise _fail(key, value, "expected an integer")
            value = int(value)
    else:
        value = float(value)  # `--run-config lr=1` arrives as int 1
    if key.low is not None and (value < key.low or (key.low_open and value == key.low)):
        raise _fail(key, value, "out of range")
    if key.high is not None and (value > key.high or (key.high_open and value == key.high)):
        raise _fail(key, value, "out of range")
    return value


def resolve(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the full, typed config: defaults < paper set-up < run_config; 'preset' values
    taken from `method` (README: Paper set-ups)."""
    unknown = sorted(set(run_config) - set(KEYS_BY_NAME))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, KEYS_BY_NAME, n=1)
            hints.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise ConfigError(
            f"unknown run-config key(s): {', '.join(hints)}. The keys are listed in the README "
            "and in [tool.flwr.app.config] of pyproject.toml."
        )
    run_config = apply_setup(run_config)  # a paper set-up fills the keys still at their default
    cfg = {k.name: coerce(k, run_config.get(k.name, k.default)) for k in KEYS}
    if cfg["method"] == "auto":
        cfg["method"] = "fedacg"
    preset = PRESETS[cfg["method"]]
    explicit = {name for name in preset if cfg[name] != PRESET}
    for name, value in preset.items():
        if cfg[name] == PRESET:
            cfg[name] = value
    _check_combinations(cfg, explicit)
    return cfg


def _check_combinations(cfg: dict[str, Any], explicit: set[str]) -> None:
    if cfg["local-epochs"] == 0 and cfg["local-iterations"] == 0:
        raise ConfigError(
            "run config: local-epochs = 0 and local-iterations = 0 means no local training; "
            "set one of them to at least 1."
        )
    if cfg["fraction-evaluate"] > 0 and cfg["client-val-fraction"] == 0:
        raise ConfigError(
            "run config: fraction-evaluate > 0 needs held-out client data; set "
            "client-val-fraction > 0 (e.g. 0.1) or fraction-evaluate = 0."
        )
    if cfg["method"] in FLOWER_BASELINES:
        server_keys = {"lookahead": False, "lam": 0.0, "global-gc": "none", "aggregation": "examples"}
        for name, needed in server_keys.items():
            if name in explicit and cfg[name] != needed:
                raise ConfigError(
                    f"run config '{name}' = {cfg[name]!r} cannot be combined with method "
                    f"'{cfg['method']}': that server update is Flower's own and supports only "
                    f"{name} = {needed!r}. Use one of our methods (e.g. fedacg) to combine knobs."
                )
