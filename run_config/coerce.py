"""Type one run-config value by its key's definition (run_config/schema.py), or say why not."""

from __future__ import annotations

import difflib
import math
from typing import Any

from .errors import ConfigError
from .schema import Key


def _fail(key: Key, value: Any, why: str = "") -> ConfigError:
    return ConfigError.of_value(
        key.name, value, f": {why or 'not allowed'}; allowed: {key.allowed()}.",
        f" Fix it in pyproject.toml or with --run-config \"{key.name}=...\".")


def coerce(key: Key, value: Any) -> Any:
    """Return `value` typed for `key`, or raise ConfigError naming the key and what is allowed."""
    if isinstance(value, str) and key.kind is not str:
        if value in key.options():
            return value
        raise _fail(key, value, f"expected {key.kind.__name__}")
    if key.kind is str:
        if not isinstance(value, str):
            raise _fail(key, value, "expected a string (quote it: key='value')")
        options = key.options()
        if options and value not in options:
            close = difflib.get_close_matches(value, options, n=1)
            raise _fail(key, value,
                        f"unknown choice{f' (did you mean {close[0]!r}?)' if close else ''}")
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
        if not math.isfinite(value):  # TOML has nan and inf literals; range checks miss NaN
            raise _fail(key, value, "expected a finite number")
    if key.low is not None and (value < key.low or (key.low_open and value == key.low)):
        raise _fail(key, value, "out of range")
    if key.high is not None and (value > key.high or (key.high_open and value == key.high)):
        raise _fail(key, value, "out of range")
    return value
