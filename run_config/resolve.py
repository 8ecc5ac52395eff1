"""Validate and type a Flower run config, then fill the 'preset' keys from `method`."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import methods
from feddata.settings import DataSettings
from feddata.specs import DataSettingError, number_list, own_data_settings
from fileio.names import MAX_NAME_BYTES, safe_name
from methods.registry import parse_objective

from .coerce import coerce
from .errors import ConfigError
from .presets import PRESETS, base_preset
from .schema import KEYS, KEYS_BY_NAME, NATURAL_ID_DATASETS, PRESET, REMOVED_KEYS
from .setups import apply_setup


def resolve(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the full, typed config: defaults < paper set-up < run_config; 'preset' values
    taken from `method` (docs/setups.md, docs/algorithms.md#presets)."""
    removed = sorted(set(run_config) & REMOVED_KEYS.keys())
    if removed:  # a key that existed once: say what became of it, not "unknown key"
        raise ConfigError(" ".join(REMOVED_KEYS[name] for name in removed))
    unknown = sorted(set(run_config) - set(KEYS_BY_NAME))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, KEYS_BY_NAME, n=1)
            hints.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise ConfigError(
            f"unknown run-config key(s): {', '.join(hints)}. The keys are listed in "
            "docs/configuration.md and in [tool.flwr.app.config] of pyproject.toml."
        )
    run_config = apply_setup(run_config)  # a paper set-up fills the keys still at their default
    cfg, explicit = _typed(run_config, KEYS)
    _check_combinations(cfg, explicit)
    return cfg


def run_differences(saved: Mapping[str, Any], cfg: Mapping[str, Any],
                    theirs: str = "the run's") -> list[str]:
    """Each key whose value in the resolved config `cfg` differs from the config a run was made
    from (`saved`, its config.json), as "'key' = value (<theirs>: value)": the keys that change
    the maths or the sampling, every key not marked `resume_may_differ`. A key newer than
    `saved` counts as its value under `saved`'s method, or its default."""
    preset = PRESETS[saved["method"]] if saved.get("method") in PRESETS else {}
    was = {k.name: saved.get(k.name, preset.get(k.name, k.default)) for k in KEYS}
    return [f"'{k.name}' = {cfg[k.name]!r} ({theirs}: {was[k.name]!r})"
            for k in KEYS if not k.resume_may_differ and was[k.name] != cfg[k.name]]


def resolve_strategy(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A named strategy's settings (strategies/named.py: `FedACG(lam=0.5)`, `Method(...)`),
    typed and checked as a run config's are, by the same keys: `method` and the keys the schema
    marks `strategy` (the method's and the baselines' knobs, the clients' learning rate, the
    screening of replies, sampling, the population), defaults < the method's preset <
    `settings`. The app's keys (data, model, paths, rounds, ...) are not there: a strategy in a
    ServerApp of one's own has none of them. An error about one key's value keeps the key
    (`ConfigError.key`), for the caller to name it as its user gave it."""
    keys = _strategy_keys(settings)
    cfg, explicit = _typed(settings, keys)
    _check_population(cfg)
    _check_parts(cfg, explicit)
    return cfg


def resolve_client(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The clients' share of a named strategy's settings (the `method.*` keys of its train
    instructions, read by `client_app.own_app.LocalMethod`), typed and checked as a run
    config's are, by the same keys: `method` and the keys the client side reads, those of the
    schema's 'client' group that a strategy takes (the task loss's weight, local GC, the
    clients' lr and momentum, the client parts' knobs) and every key a registered client part
    or uplink codec reads (`Part.reads`: FedPAQ's seed); defaults < the method's preset <
    `settings`. The strategy's other settings (the server rule's knobs, screening, sampling)
    are the server's: allowed, not read; `model`, the model the strategy names for a part that
    runs on one model only (FedMLB), is allowed too (the part checks the model it is given).
    Whether `lr` was sent is the caller's to know (a part that reads it says so:
    `ClientPart.uses_lr`)."""
    keys = _strategy_keys(settings, also=("model",))
    read = {"method"}.union(*(part.reads() for part in (*methods.CLIENT_PARTS.values(),
                                                        *methods.UPLINK_CODECS.values())))
    keys = [key for key in keys if key.group == "client" or key.name in read]
    cfg, _ = _typed(settings, keys)
    _check_objective(cfg)
    return cfg


def _strategy_keys(settings: Mapping[str, Any], also: tuple[str, ...] = ()) -> list:
    """The keys of a named strategy's settings: `method` and those the schema marks `strategy`;
    a setting outside them (or `also`) is refused."""
    keys = [key for key in KEYS if key.strategy or key.name == "method"]
    allowed = {key.name for key in keys}
    other = sorted(set(settings) - allowed - set(also))
    if other:
        raise ConfigError(f"not a setting of a strategy: {', '.join(map(repr, other))}; the "
                          f"settings: {', '.join(sorted(allowed - {'method'}))}")
    return keys


def _typed(given: Mapping[str, Any], keys) -> tuple[dict[str, Any], set[str]]:
    """`keys`' values, typed (`coerce`): the given one, else the default; the 'preset' ones
    taken from `method` (those among `keys`). Also: the preset-controlled keys given
    explicitly."""
    cfg = {k.name: coerce(k, given.get(k.name, k.default)) for k in keys}
    if cfg["method"] == "auto":
        cfg["method"] = "fedacg"
    preset = {name: value for name, value in PRESETS[cfg["method"]].items() if name in cfg}
    explicit = {name for name in preset if cfg[name] != PRESET}
    for name, value in preset.items():
        if cfg[name] == PRESET:
            cfg[name] = value
    return cfg, explicit


def _number_list(cfg: dict[str, Any], name: str, kind: type, low: float, high: float,
                 allowed: str) -> list:
    try:
        return number_list(cfg[name], name, kind, low, high, allowed,
                           KEYS_BY_NAME[name].default or "10,20")
    except DataSettingError as err:
        raise ConfigError(str(err)) from None


def acc_at_rounds(cfg: dict[str, Any]) -> list[int]:
    """The rounds of `acc-at-rounds` (default: half-way and the last round)."""
    rounds = _number_list(cfg, "acc-at-rounds", int, 1, float("inf"), "rounds >= 1")
    if not rounds:
        t = cfg["num-server-rounds"]
        rounds = [max(1, t // 2), t]
    return sorted(set(rounds))


def target_accs(cfg: dict[str, Any]) -> list[float]:
    """The target accuracies of `target-accs`, in percent."""
    return sorted(set(_number_list(cfg, "target-accs", float, 1e-9, 100.0,
                                   "accuracies in percent in (0, 100]")))


def _check_combinations(cfg: dict[str, Any], explicit: set[str]) -> None:
    acc_at_rounds(cfg)
    target_accs(cfg)
    _check_population(cfg)
    if cfg["partitioner"] == "natural" and cfg["dataset"] not in NATURAL_ID_DATASETS:
        raise ConfigError(
            f"run config 'partitioner' = 'natural' gives each client one writer / speaker / "
            f"celebrity, and dataset '{cfg['dataset']}' names none: use it with "
            f"{', '.join(NATURAL_ID_DATASETS)}, or choose another partitioner (e.g. 'lda').")
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
    if cfg["precision"] == "amp" and cfg["device"] == "cpu":
        raise ConfigError(
            "run config 'precision' = 'amp' (fp16 autocast with a GradScaler) needs a CUDA GPU, "
            "and 'device' = 'cpu' trains on the CPU: set precision = 'fp32', or 'auto' (amp "
            "where a GPU is), or device = 'auto' / 'cuda' on a machine with a GPU.")
    if cfg["model"] == "resnet18" and 64 % cfg["gn-groups"]:
        raise ConfigError(
            f"run config 'gn-groups' = {cfg['gn-groups']} must divide 64 (the channels of "
            "ResNet-18's narrowest layer): use 1, 2, 4, 8, 16, 32 or 64."
        )
    _check_paths(cfg)
    _check_parts(cfg, explicit, resume=bool(cfg["resume"]))
    _check_own_data(cfg)


def _check_population(cfg: dict[str, Any]) -> None:
    if cfg["dynamic-replace-prob"] > 0 and cfg["dynamic-pool-factor"] <= 1:
        raise ConfigError(
            "run config 'dynamic-replace-prob' > 0 needs fresh partitions to hand out: set "
            "'dynamic-pool-factor' above 1 (e.g. 2.0).")


def _check_own_data(cfg: dict[str, Any]) -> None:
    """client-data, test-data and the custom dataset keys (docs/deployment.md#own-data)."""
    try:  # what a node's folder is read with (also `python -m feddata check`'s check)
        own_data_settings(DataSettings.from_config(cfg))
    except DataSettingError as err:
        raise ConfigError(str(err)) from None
    if cfg["dataset"] == "custom":
        if cfg["client-data"] != "own":
            raise ConfigError("run config 'dataset' = 'custom' is data of your own, which no one "
                              "can split by partition-id: set client-data='own' (each node "
                              "trains on its node config's data-path).")
        if cfg["test-data"] == "dataset":
            raise ConfigError("run config 'dataset' = 'custom' has no test split to read: set "
                              "test-data to a folder on the server, or to 'none' (federated "
                              "evaluation).")
    else:
        for key in ("custom-classes", "custom-shape", "custom-mean", "custom-std"):
            if cfg[key] != KEYS_BY_NAME[key].default:
                raise ConfigError(f"run config '{key}' = {cfg[key]!r} declares a custom "
                                  f"dataset, and dataset = '{cfg['dataset']}': set "
                                  "dataset='custom' or leave the custom-* keys out.")
    test = cfg["test-data"]
    if not test.strip() or any(ord(c) < 32 or ord(c) == 127 for c in test):
        raise ConfigError(f"run config 'test-data' = {test!r}: give 'dataset', 'none' or the "
                          "folder of the server's test set.")
    if test == "none" and cfg["fraction-evaluate"] == 0:
        raise ConfigError("run config 'test-data' = 'none' leaves federated evaluation as the "
                          "run's metric, and fraction-evaluate = 0 turns it off: set "
                          "fraction-evaluate > 0 (e.g. 0.5), or give the server a test set.")
    if cfg["client-data"] == "own":
        sized = [p for p in parse_objective(cfg["client-objective"])
                 if getattr(methods.CLIENT_PARTS.get(p), "uses_partition_sizes", False)]
        if sized:
            raise ConfigError(
                f"run config 'client-data' = 'own': client part(s) {sized} (method "
                f"'{cfg['method']}') weigh each client by every client's partition size, which "
                "nodes with their own data do not share: choose another method (SCAFFOLD, "
                "FedDyn, FedACG, ...).")
        if cfg["partitioner"] != KEYS_BY_NAME["partitioner"].default:
            raise ConfigError(f"run config 'partitioner' = '{cfg['partitioner']}' splits a "
                              "dataset, and client-data = 'own' trains every node on its own "
                              "folder: leave partitioner out.")


def node_data_mismatch(has_data_path: bool, client_data: str) -> str | None:
    """Why a node cannot take part in a run, when its node config's data-path and the run
    config's client-data disagree (docs/deployment.md#own-data); None when they agree. The
    server refuses such a node at its first message, the node refuses to train."""
    if has_data_path and client_data != "own":
        return (f"the node has its own data (node config data-path) and the run config has "
                f"client-data = '{client_data}' (every node trains on a partition of the run's "
                "dataset): run with client-data='own' and the dataset keys of the nodes' data, "
                "or start the node without data-path")
    if not has_data_path and client_data == "own":
        return ("the run config has client-data = 'own' (every node trains on its own folder) "
                "and the node's config has no data-path: start the SuperNode with its folder "
                "(deploy/supernode.sh --data-path <folder>, or --node-config "
                "\"data-path='<folder>'\"), or run with client-data='partitions'")
    return None


def _check_paths(cfg: dict[str, Any]) -> None:
    """out-dir and run-name as far as they can be checked without the disk (the ServerApp
    checks the rest when it makes the folder: a file in the way, no permission)."""
    out_dir, name = cfg["out-dir"], cfg["run-name"]
    if not out_dir.strip():
        raise ConfigError("run config 'out-dir' is empty: give the folder for run outputs.")
    if any(ord(c) < 32 or ord(c) == 127 for c in out_dir):
        raise ConfigError(f"run config 'out-dir' = {out_dir!r} holds a control character (NUL, "
                          "newline, ...): give a plain path, e.g. "
                          "out-dir='~/fedacg-gc-runs'.")
    size = len(name.encode(errors="surrogatepass"))
    if name and size <= MAX_NAME_BYTES and safe_name(name) != name:
        raise ConfigError(
            f"run config 'run-name' = {name!r} must be a plain folder name (no '/', '\\', "
            "control characters such as NUL or newline, '.' or '..'): it names the run's folder "
            "under out-dir.")
    if size > MAX_NAME_BYTES:
        raise ConfigError(
            f"run config 'run-name' is {size} bytes long ('{name[:40]}...'): a "
            f"folder name has at most {MAX_NAME_BYTES} bytes (in UTF-8); give a shorter one.")


def _check_objective(cfg: dict[str, Any]) -> None:
    names = parse_objective(cfg["client-objective"])
    unknown = [p for p in names if p not in methods.CLIENT_PARTS]
    if unknown or not cfg["client-objective"].strip():
        raise ConfigError(
            f"run config 'client-objective' = '{cfg['client-objective']}': unknown client part(s) "
            f"{unknown}; allowed: 'none', 'preset' or a comma-separated list of "
            f"{', '.join(repr(p) for p in methods.client_part_names())}.")


def _check_parts(cfg: dict[str, Any], explicit: set[str], resume: bool = False) -> None:
    """Refuse, before the run starts, parts that cannot work together (each message names both
    parts) and knobs set for a part that the run does not use (`Part.knobs`: the parts' own
    keys and the app keys that act only through them). `resume`: the run resumes (a named
    strategy's never does)."""
    _check_objective(cfg)
    rule = methods.SERVER_RULES[cfg["server-rule"]]
    parts = [methods.CLIENT_PARTS[p] for p in parse_objective(cfg["client-objective"])]
    used = set(rule.reads()).union(*(p.reads() for p in parts))
    owners = {}
    for part in [*methods.SERVER_RULES.values(), *methods.CLIENT_PARTS.values()]:
        for key in part.knobs():
            owners.setdefault(key, []).append(part)
    problems = methods.check_parts(cfg, resume=resume)
    if problems:
        raise ConfigError("run config: these parts cannot work together: " + "; ".join(problems)
                          + ". Choose other parts or switches.")
    base = base_preset()
    # knobs set away from their default: preset keys given explicitly, and every other key
    plain = {name for name in owners if name not in PRESETS[cfg["method"]]}
    for name in sorted(explicit | plain):
        default = base[name] if name in base else KEYS_BY_NAME[name].default
        if name in owners and name not in used and cfg[name] != default:
            names = ", ".join(f"'{p.name}'" for p in owners[name])
            raise ConfigError.of_value(
                name, cfg[name], f" is a knob of {names}, which this run does not use "
                f"(server-rule '{cfg['server-rule']}': {rule.summary or rule.__doc__}; "
                f"client-objective '{cfg['client-objective']}'): drop it, or choose a "
                "server-rule / client-objective that has it.")
    if getattr(rule, "flower_class", None) and (cfg["robust-aggregator"] != "mean"
                                                or cfg["dp-clipping-norm"] > 0):
        raise ConfigError(
            f"run config 'robust-aggregator' / 'dp-clipping-norm' cannot be combined with "
            f"server-rule '{cfg['server-rule']}' (Flower's own server update): use one of our "
            "rules, e.g. method fedacg or fedavg, or robust-aggregator = 'mean' and "
            "dp-clipping-norm = 0.")
    if cfg["dp-noise-multiplier"] > 0 and cfg["dp-clipping-norm"] == 0:
        raise ConfigError("run config 'dp-noise-multiplier' > 0 needs 'dp-clipping-norm' > 0 "
                          "(the noise is scaled by the clipping norm).")
