"""The one error type of the run configuration (shared by validation and the set-up loader)."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A run-config value is unknown, of the wrong type or out of range.

    An error about one key's value (`of_value`) keeps the key and what it says of the value, so
    that a caller that knows the key by another name (a named strategy's keyword argument,
    strategies/named.py) says the same sentence under that name (`sentence`).
    """

    key: str | None = None  # the one key whose value the error is about, else None
    _said: str = ""  # what it says of the value: "<value><why>"

    @classmethod
    def of_value(cls, key: str, value: Any, why: str, fix: str = "") -> ConfigError:
        """"run config '<key>' = <value><why><fix>" (`why` begins with its own ': ' or ' ')."""
        shown = f"'{value}'" if isinstance(value, str) else repr(value)
        err = cls(f"run config '{key}' = {shown}{why}{fix}")
        err.key, err._said = key, f"{shown}{why}"
        return err

    def sentence(self, name: str) -> str:
        """The error with its key called `name`, without the run config's fix (the message
        itself where the error is not about one key's value)."""
        return f"{name} = {self._said}" if self.key is not None else str(self)
