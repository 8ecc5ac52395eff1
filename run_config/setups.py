"""Paper set-ups: one YAML file per experiment of the papers, with the numbers they reported.

A set-up file (`run_config/setups/<name>.yaml`, shipped inside the FAB) holds

```yaml
paper: FedACG (CVPR 2024), Table 1(a), CIFAR-10     # where the set-up and the numbers are from
description: 100 clients, 5% per round, ...          # one line for people
method: fedacg                                       # the paper's own method
federation: {num-supernodes: 100}                    # simulated clients (flwr --federation-config)
run-config: {dataset: cifar10, model: resnet18, ...} # run-config keys, checked like --run-config
row-config: {feddyn-gcfed: {grad-clip: 10.0}}        # optional: values for one method's row only
notes: [...]                                         # where the set-up had to be inferred
reported:                                            # the paper's numbers, one row per method
  metric: ...
  columns: [acc-500, acc-1000, rounds-81, rounds-85]
  rows: {fedavg: [74.36, 82.53, 840, 1000+], ...}
```

`run-config` may not set `setup`, `method` or the keys a method sets (`lookahead`, `lam`, ...),
so every method can run on every set-up. Row names are our method names where we have the method
(`fedavg`, `fedacg`, `gcfed`, `feddyn-fedacg`, `feddyn-gcfed`, ...: the variant the table's
paper ran), the paper's names otherwise (`moon`, ...).

A set-up reproduces a paper, whose server applies every update as it came: the influence limits
that the app's defaults put on replies (`update-norm-ratio`, `update-clip-ratio`,
`record-norm-ratio`, `num-examples-ratio`; docs/security.md) are off (0) in every set-up unless
its file sets them.
They change honest rounds where clients run very different numbers of local steps (GC-Fed's
unbalanced LDA splits), and they would part the server's state from the clients' in SCAFFOLD,
FedDyn and FedDC, whose clients build their state from the update before the server limits it.

With `setup = "<name>"` in the run config, the set-up's method and values replace every key that
still holds its schema default (the ServerApp cannot tell a default from a value given on the
command line, so giving a key its default value keeps the set-up's value). `method` is `auto` by
default: the set-up's method.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import Any

from fileio.names import safe_name
from fileio.yaml_file import read_yaml

from .coerce import coerce
from .errors import ConfigError
from .schema import KEYS_BY_NAME, METHODS, PRESET, REMOVED_KEYS

SETUP_DIR = Path(__file__).resolve().parent / "setups"
_FIELDS = {"paper", "description", "method", "federation", "run-config", "row-config", "notes",
           "reported"}
_REQUIRED = ("paper", "method", "federation", "run-config", "reported")
# the papers' servers limit no reply: these defaults of the app are off in a set-up
PAPER_SERVER = {"update-norm-ratio": 0.0, "update-clip-ratio": 0.0, "record-norm-ratio": 0.0,
                "num-examples-ratio": 0.0}


class SetupError(ConfigError):
    """A set-up file is missing, malformed or sets a key it may not set."""


def setup_names() -> list[str]:
    return sorted(p.stem for p in SETUP_DIR.glob("*.yaml"))


def setup_file(name: str) -> Path:
    """The file of set-up `name`: a shipped set-up's name (one safe file name), or a path to a
    YAML file."""
    shipped = SETUP_DIR / f"{safe_name(name)}.yaml"
    if safe_name(name) == name and shipped.exists():
        return shipped
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path

    close = difflib.get_close_matches(name, setup_names(), n=1)
    raise SetupError(
        f"run config 'setup' = '{name}': no such set-up"
        + (f" (did you mean '{close[0]}'?)" if close else "")
        + f"; the shipped set-ups are listed by `python -m pages --setups` "
        f"({len(setup_names())} in {SETUP_DIR}), or give a path to a .yaml file."
    )


@functools.lru_cache(maxsize=64)
def load_setup(name: str) -> dict[str, Any]:
    """The validated set-up `name` (values typed by the run-config schema). The file is read
    bounded and without YAML aliases (`fileio.yaml_file`); a path named in the run config is
    followed where it is a link (it is the user's own)."""
    path = setup_file(name)
    where = f"set-up {path.name}"
    try:
        data = read_yaml(path, follow_links=True)
    except FileNotFoundError:
        raise SetupError(f"{where}: {path} is gone") from None
    except OSError as err:  # UnusableFile: too large, a named pipe, not UTF-8, not YAML, aliases
        raise SetupError(f"run config 'setup' = '{name}': {err}") from None
    if not isinstance(data, dict):
        raise SetupError(f"{where}: expected a mapping with {', '.join(_REQUIRED)}")
    missing = [f for f in _REQUIRED if f not in data]
    unknown = sorted(set(data) - _FIELDS)
    if missing or unknown:
        raise SetupError(
            f"{where}: missing {missing}, unknown {unknown}; fields: {sorted(_FIELDS)}")
    if data["method"] not in METHODS:
        raise SetupError(f"{where}: method '{data['method']}' is not one of {', '.join(METHODS)}")
    federation = data["federation"]
    size = federation.get("num-supernodes") if isinstance(federation, dict) else None
    if (not isinstance(size, int) or isinstance(size, bool) or size < 1
            or len(federation) != 1):
        raise SetupError(f"{where}: federation must be {{num-supernodes: <int >= 1>}}")
    run_config = {**PAPER_SERVER, **_values(data["run-config"], where, "run-config")}
    row_config = data.get("row-config") or {}
    if not isinstance(row_config, dict) or any(m not in METHODS for m in row_config):
        raise SetupError(f"{where}: row-config must map method names to run-config values "
                         f"(methods: {', '.join(METHODS)})")
    row_config = {m: _values(v, where, f"row-config of {m}") for m, v in row_config.items()}
    reported = data["reported"]
    columns = reported.get("columns") if isinstance(reported, dict) else None
    rows = reported.get("rows") if isinstance(reported, dict) else None
    if not isinstance(columns, list) or not isinstance(rows, dict) or \
            any(not isinstance(r, list) or len(r) != len(columns) for r in rows.values()):
        raise SetupError(f"{where}: reported needs columns (a list) and rows (method: a list of "
                         "one value per column)")
    return {**data, "name": path.stem, "run-config": run_config, "row-config": row_config,
            "num-supernodes": size}


def _values(values: Any, where: str, field: str) -> dict[str, Any]:
    """Run-config values of a set-up file, typed and checked by the schema."""
    if not isinstance(values, dict):
        raise SetupError(f"{where}: {field} must be a mapping of run-config keys to values")
    typed = {}
    for key_name, value in values.items():
        key = KEYS_BY_NAME.get(key_name)
        if key is None and key_name in REMOVED_KEYS:
            raise SetupError(f"{where}: {field}: {REMOVED_KEYS[key_name]}")
        if key is None:
            raise SetupError(f"{where}: unknown run-config key '{key_name}' in {field}")
        if key_name in ("setup", "method") or PRESET in key.choices:
            raise SetupError(f"{where}: {field} may not set '{key_name}' (the method sets it; "
                             "a set-up must work for every method)")
        try:
            typed[key_name] = coerce(key, value)
        except ConfigError as err:
            raise SetupError(f"{where}: {err}") from None
    return typed


def apply_setup(run_config: dict[str, Any]) -> dict[str, Any]:
    """`run_config` with the set-up's method and values where it still holds the defaults."""
    name = coerce(KEYS_BY_NAME["setup"], run_config.get("setup", ""))
    kept = setup_overrides(run_config)  # (checked with or without a set-up)
    if not name:
        return dict(run_config)
    setup = load_setup(name)
    merged = dict(run_config)
    if run_config.get("method", "auto") == "auto":
        merged["method"] = setup["method"]
    row = setup["row-config"].get(merged["method"], {})
    for key_name, value in {**setup["run-config"], **row}.items():
        key = KEYS_BY_NAME[key_name]
        if key_name not in kept and \
                coerce(key, run_config.get(key_name, key.default)) == key.default:
            merged[key_name] = value
    return merged


def setup_overrides(run_config: dict[str, Any]) -> set[str]:
    """The keys of `setup-overrides` (docs/setups.md): each a run-config key, else ConfigError
    naming it."""
    text = coerce(KEYS_BY_NAME["setup-overrides"], run_config.get("setup-overrides", ""))
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(n for n in names if n not in KEYS_BY_NAME or n in ("setup",
                                                                       "setup-overrides"))
    if unknown:
        raise ConfigError(f"run config 'setup-overrides' names {', '.join(map(repr, unknown))}: "
                          "not a key a set-up sets. Give run-config keys, comma-separated "
                          "(e.g. 'local-momentum,weight-decay').")
    return names


def setup_command(name: str, **run_config) -> str:
    """The one command that runs set-up `name` as a local simulation."""
    setup = load_setup(name)
    extra = "".join(f" {k}={v!r}" if isinstance(v, str) else f" {k}={v}"
                    for k, v in run_config.items())
    return (f"flwr run . --stream --run-config \"setup='{name}'{extra}\" "
            f"--federation-config \"num-supernodes={setup['num-supernodes']}\"")
