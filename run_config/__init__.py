"""The run configuration: one definition of every key (`schema`), method presets, validation."""

from .presets import FLOWER_BASELINES, PRESETS
from .resolve import ConfigError, acc_at_rounds, coerce, resolve, target_accs
from .schema import KEYS, KEYS_BY_NAME, METHODS, PRESET, Key

__all__ = [
    "ConfigError", "FLOWER_BASELINES", "KEYS", "KEYS_BY_NAME", "Key", "METHODS", "PRESET",
    "PRESETS", "acc_at_rounds", "coerce", "resolve", "target_accs",
]
