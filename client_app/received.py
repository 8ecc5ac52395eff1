"""Check what a ClientApp receives from the server before acting on it.

A train message carries only what changes per round (`lr`, `server-round`, and for methods with
per-client state which version of it to start from: `client-state-*`); the local settings
(`batch-size`, `local-epochs`, ...) come from the run config, resolved and range-checked once per
process (client_app/settings.py). What the message carries is validated against the same ranges
as the run config (run_config/schema.py): a bad value fails this message at once with an error
reply that names the key, instead of training on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from run_config import ConfigError
from run_config.coerce import coerce
from run_config.schema import KEYS_BY_NAME

# Train-config keys that are run-config keys: checked against the schema's type and range.
SCHEMA_KEYS = ("lr",)
MAX_ROUND = 10_000_000


def check_train_config(config: Mapping) -> None:
    """ValueError naming the first key of the server's train config that is out of range."""
    try:
        for name in SCHEMA_KEYS:
            if name not in config:
                raise ConfigError(f"'{name}' is missing")
            coerce(KEYS_BY_NAME[name], config[name])
    except ConfigError as err:
        raise ValueError(f"refused the server's train config: {err}") from None
    for name, high in (("server-round", MAX_ROUND),):
        v = config.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= high:
            raise ValueError(f"refused the server's train config: '{name}' = {v!r}, expected an "
                             f"integer in [0, {high}]")
    check_client_state_keys(config)


def check_client_state_keys(config: Mapping) -> None:
    """The per-client state keys (strategies/client_state_rounds.py), all three or none: a run token
    of 32 hex digits (it names a folder on the node) and 0 <= keep <= round < server-round."""
    names = ("client-state-run", "client-state-round", "client-state-keep")
    present = [n for n in names if n in config]
    if not present:
        return
    if len(present) < 3:
        raise ValueError(f"refused the server's train config: it has {present} but not all of "
                         f"{list(names)}")
    token = config["client-state-run"]
    if not isinstance(token, str) or not re.fullmatch(r"[0-9a-f]{32}", token):
        raise ValueError(f"refused the server's train config: 'client-state-run' = {token!r}, "
                         "expected 32 hex digits")
    rnd, keep = config["client-state-round"], config["client-state-keep"]
    ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (rnd, keep))
    if not ok or not 0 <= keep <= rnd < config["server-round"]:
        raise ValueError(f"refused the server's train config: 'client-state-round' = {rnd!r}, "
                         f"'client-state-keep' = {keep!r}: expected integers with 0 <= keep <= "
                         "round < server-round")
