"""Named methods (docs/algorithms.md #presets): the value each preset-controlled key takes under
each `method`, read from the methods registry (`methods`, one module per method)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import methods

from .schema import KEYS


def base_preset() -> dict[str, Any]:
    """The value of every preset-controlled key when a method does not set it: plain FedAvg's
    (each key's `base`, docs/algorithms.md#presets)."""
    return {key.name: key.base for key in KEYS if key.base is not None}


def preset_of(name: str) -> dict[str, Any]:
    """The value of every preset-controlled key under method `name` (parts included)."""
    method = methods.METHODS[name]
    return {**base_preset(), **method.preset, "server-rule": method.server_rule,
            "client-objective": ",".join(method.client_parts) or "none"}


class _Presets(Mapping):
    """method name -> {preset-controlled key: value}, live over the registry."""

    def __getitem__(self, name: str) -> dict[str, Any]:
        return preset_of(name)

    def __iter__(self) -> Iterator[str]:
        return iter(methods.method_names())

    def __len__(self) -> int:
        return len(methods.METHODS)


PRESETS: Mapping[str, dict[str, Any]] = _Presets()


def flower_baselines() -> tuple[str, ...]:
    """Methods whose server update is one of Flower's built-in strategies (not rewritten here)."""
    return tuple(name for name, m in methods.METHODS.items()
                 if methods.SERVER_RULES[m.server_rule].sampling == "flower")


FLOWER_BASELINES = flower_baselines()
