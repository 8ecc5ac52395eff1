"""A sweep file read and checked: its keys (`SWEEP_KEYS`), the config files it names, and the
cells it makes (`load_sweep`), every cell's run config checked before anything runs.

The sweep file and the config files it names are read bounded and without YAML aliases, every
key's type is checked, and the names of the sweep, its methods and settings become folder names
only through `slug` (docs/security.md#files-from-outside). The cells are run by
`experiments.sweep_cells` and tabulated by `experiments.sweep_report`; `experiments.sweep` is
the command line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from fileio.names import safe_name
from fileio.reading import CONFIG_FILE_LIMIT, read_text_bounded
from fileio.yaml_file import read_yaml
from run_config import ConfigError, resolve
from run_config.coerce import coerce
from run_config.schema import KEYS_BY_NAME

APP_DIR = Path(__file__).resolve().parents[1]  # this repository is the Flower app
SWEEP_KEYS = {
    "name": "folder name of the sweep under out-dir (default: the YAML file's name)",
    "out-dir": "where sweeps are written (default: runs/sweeps, relative to the current folder)",
    "app": "the Flower app folder (default: this repository)",
    "connection": "a SuperLink connection of your own (default: start one for the sweep)",
    "run-config": "run-config keys of every cell: a mapping, or a .toml / .yaml file",
    "federation-config": "--federation-config of every cell, e.g. {num-supernodes: 20}",
    "seeds": "list of seeds (default [0])",
    "methods": "name -> run-config keys or a file: one table row each (required)",
    "settings": "name -> run-config keys or a file: one table and plot each (optional)",
    "acc-at-rounds": "rounds of the 'Acc. at R' columns (default: the runs' acc-at-rounds)",
    "target-accs": "targets (%) of the 'Rounds to X%' columns (default: the runs' target-accs)",
    "cell-timeout": "seconds one cell may take before it is stopped (default: no limit)",
    "backend": "flwr (default: each cell is a `flwr run`) or in-process (the real ServerApp and "
               "ClientApp in the sweep's own process, through an in-memory grid)",
}
BACKENDS = ("flwr", "in-process")
NOT_IN_CELLS = ("out-dir", "run-name", "seed")  # set by the sweep for every cell
# Where a run is written and what its summary reports do not change the run: a finished cell
# stays finished when only these change (the table is computed again from the rounds).
NOT_IN_DESCRIPTION = ("out-dir", "run-name", "acc-at-rounds", "target-accs")
# The most cells a sweep may make unless --max-cells raises it: the shipped sweeps have up to
# 114; a few KB of YAML can name millions (settings x methods x seeds), which would take hours
# to check before anything runs or is listed.
MAX_CELLS = 1000


class SweepError(ValueError):
    """The sweep file is wrong."""


@dataclass
class Cell:
    setting: str
    method: str
    seed: int
    run_config: dict[str, Any]
    federation_config: dict[str, Any]
    run_dir: Path
    sweep_dir: Path | None = None  # the sweep's own folder, which holds run_dir

    def description(self) -> dict[str, Any]:
        """What the run is made from (not where it is written): a finished cell is reused only
        when this has not changed."""
        run = {k: v for k, v in self.run_config.items() if k not in NOT_IN_DESCRIPTION}
        return {"run-config": run, "federation-config": self.federation_config}


@dataclass
class Sweep:
    path: Path
    dir: Path
    app: Path
    connection: str | None
    cells: list[Cell]
    methods: list[str]
    settings: list[str]
    acc_at_rounds: list[int] | None = None
    target_accs: list[float] | None = None
    cell_timeout: float | None = None
    backend: str = "flwr"
    failed: list[Cell] = field(default_factory=list)


def slug(name: str) -> str:
    """A sweep's, method's or setting's name as a folder name: letters, digits and ._+=- kept,
    the rest '_', then made one safe path component (`safe_name`: '..' is no folder name)."""
    return safe_name(re.sub(r"[^A-Za-z0-9._+=-]+", "_", str(name)).strip("_"))


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """`value` as a dict (None: empty); SweepError naming `where` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SweepError(f"{where}: expected a mapping of keys to values, got {value!r}")
    return dict(value)


def _read(path: Path, what: str) -> Any:
    """A YAML or TOML file the sweep names, read bounded (fileio): SweepError otherwise."""
    try:
        if path.suffix == ".toml":
            text = read_text_bounded(path, CONFIG_FILE_LIMIT, follow_links=True)
            try:
                return tomllib.loads(text)
            except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
                raise SweepError(f"{what} {path} is not valid TOML ({err})") from None
        return read_yaml(path, follow_links=True)
    except FileNotFoundError:
        raise SweepError(f"{what} {path} not found") from None
    except OSError as err:  # UnusableFile: a named pipe, too large, not UTF-8, YAML aliases
        raise SweepError(f"{what}: {err.strerror or err}") from None


def load_config_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run config, federation config) of a .toml file (flat keys, or a pyproject's
    [tool.flwr.app.config]) or a .yaml file (flat keys, or `run-config:` / `federation-config:`)."""
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise SweepError(f"config file {path}: expected a .toml, .yaml or .yml file")
    data = _mapping(_read(path, "config file"), f"config file {path}")
    if path.suffix == ".toml" and "tool" in data:  # a pyproject: its [tool.flwr.app.config]
        for key in ("tool", "flwr", "app", "config"):
            data = _mapping(data.get(key), f"config file {path}: [tool.flwr.app.config]")
    if "run-config" in data or "federation-config" in data:
        return (_mapping(data.get("run-config"), f"config file {path}: run-config"),
                _mapping(data.get("federation-config"), f"config file {path}: federation-config"))
    return data, {}


def part(spec: Any, where: str, base: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A method / setting / the common part: a mapping of run-config keys (which may name a
    `run-config-file` and hold a `federation-config` mapping), or the path of a config file."""
    if spec is None:
        return {}, {}
    if isinstance(spec, str):
        return load_config_file((base / spec).expanduser())
    if not isinstance(spec, dict):
        raise SweepError(
            f"{where}: expected a mapping of run-config keys or a file name, got {spec!r}")
    spec = dict(spec)
    run, fed = {}, {}
    if "run-config-file" in spec:
        run, fed = load_config_file((base / str(spec.pop("run-config-file"))).expanduser())
    fed.update(_mapping(spec.pop("federation-config", None), f"{where}: federation-config"))
    run.update(spec)
    return run, fed


def _numbers(value: Any, kind: type, where: str) -> list:
    if isinstance(value, str):
        value = [v for v in value.replace(" ", "").split(",") if v]
    if not isinstance(value, list) or any(isinstance(v, bool) for v in value):
        raise SweepError(f"{where}: expected a list of {kind.__name__}s, got {value!r}")
    if kind is int and any(isinstance(v, float) and math.isfinite(v) and not v.is_integer()
                           for v in value):  # (int() would cut 0.5 to 0)
        raise SweepError(f"{where}: expected a list of ints, got {value!r}: write each as a "
                         "whole number (0, 1, 2), not a fraction")
    try:
        numbers = [kind(v) for v in value]
    except (TypeError, ValueError, OverflowError):
        raise SweepError(f"{where}: expected a list of {kind.__name__}s, got {value!r}") from None
    if not all(math.isfinite(v) for v in numbers):
        raise SweepError(f"{where}: expected finite numbers, got {value!r}")
    return numbers


def _cell_timeout(value: Any, where: str) -> float | None:
    """cell-timeout: None, or seconds > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 < value < math.inf:
        raise SweepError(f"{where}: cell-timeout must be a number of seconds > 0, got {value!r}")
    return float(value)


def count_cells(settings: dict, methods: dict, seeds: list, path: Path, max_cells: int) -> int:
    """settings x methods x seeds, counted from the file before any cell is made or checked;
    SweepError past `max_cells` (what --max-cells raises)."""
    count = max(len(settings), 1) * len(methods) * len(seeds)
    if count > max_cells:
        raise SweepError(f"{path}: {max(len(settings), 1)} setting(s) x {len(methods)} "
                         f"method(s) x {len(seeds)} seed(s) make {count:,} cells, more than the "
                         f"{max_cells:,} a sweep may have: split the file, or pass --max-cells "
                         f"{count} if you mean it")
    return count


def _no_value_replaced(run: dict, resolved: dict, where: str) -> None:
    """SweepError where a set-up replaced a value the cell gives: a set-up fills every key
    still at its default, so a default given on purpose (local-momentum 0.0 under a set-up of
    0.9) would otherwise run as the set-up's value without a word."""
    if not resolved.get("setup"):
        return
    for name, given in run.items():
        key = KEYS_BY_NAME.get(name)
        if key is None or name in ("setup", "method", "setup-overrides") or given == "preset":
            continue
        if coerce(key, given) != resolved[name]:
            raise SweepError(
                f"{where}: '{name}' = {given!r} is its default, so the set-up "
                f"'{resolved['setup']}' replaces it with {resolved[name]!r}. To run "
                f"{given!r}, add setup-overrides: '{name}' to the cell's keys "
                "(docs/setups.md#a-default-given-on-purpose)")


def load_sweep(path: Path, out_dir: Path | None = None, connection: str | None = None,
               backend: str | None = None, max_cells: int = MAX_CELLS) -> Sweep:
    """The sweep file `path` read and checked, every cell made and its run config checked;
    SweepError (naming the file, the key and the fix) otherwise, also when it would make more
    than `max_cells` cells (counted before any is made)."""
    path = Path(path).resolve()
    spec = _mapping(_read(path, "sweep file"), str(path))
    unknown = sorted(set(spec) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(f"{path}: unknown key(s) {unknown}; the keys are {sorted(SWEEP_KEYS)}")
    if not spec.get("methods") or not isinstance(spec["methods"], dict):
        raise SweepError(f"{path}: 'methods' must map each method's name to its run-config keys")
    backend = backend or spec.get("backend") or "flwr"
    if backend not in BACKENDS:
        raise SweepError(f"{path}: backend {backend!r} is not one of {list(BACKENDS)}")
    if backend == "in-process" and (connection or spec.get("connection")):
        raise SweepError(f"{path}: 'connection' is for backend flwr; an in-process sweep runs "
                         "no SuperLink (drop one of the two)")
    for key in ("name", "out-dir", "app", "connection"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise SweepError(f"{path}: '{key}' must be a string, got {spec[key]!r}")
    base = path.parent
    name = slug(spec.get("name") or path.stem)
    try:  # (the out-dir as given is resolved: a link the user names is theirs to follow)
        root = Path(out_dir or spec.get("out-dir") or "runs/sweeps").expanduser()
        sweep_dir = (root if root.is_absolute() else Path.cwd() / root).resolve() / name
    except (RuntimeError, OSError, ValueError) as err:  # '~nobody', a loop of links, NUL
        raise SweepError(f"{path}: out-dir {str(out_dir or spec.get('out-dir'))!r} is not a "
                         f"usable path ({err}): give a folder of your own") from None
    common_run, common_fed = part(spec.get("run-config"), "run-config", base)
    common_fed.update(_mapping(spec.get("federation-config"), f"{path}: federation-config"))
    settings = spec.get("settings") or {"": {}}
    if not isinstance(settings, dict):
        raise SweepError(f"{path}: 'settings' must map each setting's name to its run-config keys")
    seeds = _numbers(spec.get("seeds", [0]), int, "seeds")
    count_cells(settings, spec["methods"], seeds, path, max_cells)
    report = {}
    if "acc-at-rounds" in spec:
        report["acc-at-rounds"] = ",".join(str(r) for r in _numbers(spec["acc-at-rounds"], int,
                                                                   "acc-at-rounds"))
    if "target-accs" in spec:
        report["target-accs"] = ",".join(f"{t:g}" for t in _numbers(spec["target-accs"], float,
                                                                   "target-accs"))
    cells = []
    for s_name, s_spec in settings.items():
        s_run, s_fed = part(s_spec, f"settings.{s_name}", base)
        for m_name, m_spec in spec["methods"].items():
            m_run, m_fed = part(m_spec, f"methods.{m_name}", base)
            for seed in seeds:
                out = sweep_dir / "runs" / (slug(s_name) if s_name else "") / slug(m_name)
                run_dir = out / f"seed-{seed}"
                run = {**common_run, **s_run, **m_run, **report}
                for key in NOT_IN_CELLS:
                    run.pop(key, None)
                run.update({"seed": seed, "out-dir": str(out), "run-name": run_dir.name})
                where = f"cell ({s_name or 'default'}, {m_name}, seed {seed})"
                try:
                    resolved = resolve(run)  # every cell's config is checked before anything runs
                except ConfigError as err:
                    raise SweepError(f"{where}: {err}") from None
                _no_value_replaced(run, resolved, where)
                federation = {**common_fed, **s_fed, **m_fed}
                for value in federation.values():
                    toml_value(value, f"{where}: federation-config")
                cells.append(Cell(str(s_name), str(m_name), seed, run, federation, run_dir,
                                  sweep_dir))
    dirs = [c.run_dir for c in cells]
    if len(set(dirs)) != len(dirs):
        raise SweepError(f"{path}: two method or setting names give the same folder name "
                         f"({sorted({d for d in dirs if dirs.count(d) > 1})[0]}); rename one")
    app = Path(spec.get("app") or APP_DIR)
    return Sweep(
        path=path, dir=sweep_dir, app=(app if app.is_absolute() else base / app).resolve(),
        connection=connection or spec.get("connection"), cells=cells,
        methods=[str(m) for m in spec["methods"]], settings=[str(s) for s in settings],
        acc_at_rounds=_numbers(spec["acc-at-rounds"], int, "acc-at-rounds")
        if "acc-at-rounds" in spec else None,
        target_accs=_numbers(spec["target-accs"], float, "target-accs")
        if "target-accs" in spec else None,
        cell_timeout=_cell_timeout(spec.get("cell-timeout"), str(path)), backend=backend,
    )


def toml_value(value: Any, where: str = "run-config") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    raise SweepError(f"{where} value {value!r}: expected a bool, finite number or string")

