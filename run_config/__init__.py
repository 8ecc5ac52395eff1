"""The run configuration: one definition of every key (`schema`), method presets, paper set-ups
(`setups`, YAML files in `setups/`), validation."""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

from .errors import ConfigError
from .presets import FLOWER_BASELINES, PRESETS
from .coerce import coerce
from .resolve import (acc_at_rounds, node_data_mismatch, resolve, resolve_client,
                      resolve_strategy, run_differences, target_accs)
from .schema import KEYS, KEYS_BY_NAME, METHODS, PRESET, REMOVED_KEYS, Key
from .setups import SetupError, load_setup, setup_command, setup_names

__all__ = [
    "ConfigError", "FLOWER_BASELINES", "KEYS", "KEYS_BY_NAME", "Key", "METHODS", "PRESET",
    "PRESETS", "REMOVED_KEYS", "SetupError", "acc_at_rounds", "coerce", "load_setup",
    "node_data_mismatch", "resolve", "resolve_client", "resolve_strategy", "setup_command",
    "run_differences", "setup_names", "target_accs",
]
