"""Check a run config before `flwr run`: `python -m run_config check --run-config "..."`.

Flower rejects an unknown key at submit time with only "[code: 15] Invalid run configuration."
(the key is named in the SuperLink's log alone); this command names it, with a did-you-mean, and
checks every value the way the ServerApp will. Takes `--run-config` exactly as `flwr run` does
(key=value pairs, repeatable, or one .toml file) and optionally `--federation-config`, whose
`num-supernodes` is checked against the nodes a round samples.

Exit status: 0 = the config is valid, 1 = it is not (one line per problem on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomllib

from fileio.reading import CONFIG_FILE_LIMIT, read_text_bounded

from .collapses import collapse_warnings
from .errors import ConfigError
from .resolve import resolve


def nodes_needed(cfg: Mapping[str, Any], num_nodes: int) -> int:
    """The nodes a round needs with `num_nodes` connected: max(floor(fraction * n), min-nodes)
    for training, and for federated evaluation when it is on (docs/algorithms.md#server-round)."""
    needed = max(int(num_nodes * cfg["fraction-train"]), cfg["min-train-nodes"])
    if cfg["fraction-evaluate"] > 0:
        needed = max(needed, int(num_nodes * cfg["fraction-evaluate"]), cfg["min-evaluate-nodes"])
    return needed


def check(run_config: Mapping[str, Any], num_supernodes: int | None = None,
          disk: bool = False) -> dict[str, Any]:
    """The resolved config; ConfigError naming the key and the fix if it is not valid. With
    `num_supernodes`, also what the federation's size decides; with `disk`, that out-dir can be
    made and written."""
    cfg = resolve(run_config)
    if num_supernodes is not None:
        check_federation(cfg, num_supernodes)
    if disk:
        check_out_dir(cfg)
        check_test_data(cfg)
    return cfg


def check_test_data(cfg: Mapping[str, Any]) -> None:
    """ConfigError when test-data names a folder that is not one on this (the server's)
    machine; its contents are read and checked when the run starts."""
    if cfg["test-data"] in ("dataset", "none"):
        return
    path = Path(cfg["test-data"]).expanduser()
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise ConfigError(f"run config 'test-data' = '{cfg['test-data']}' {what} here: give the "
                          "folder of the server's test set on the machine that runs the "
                          "ServerApp, 'dataset' (the dataset's test split) or 'none'.")


def check_federation(cfg: Mapping[str, Any], num_supernodes: int) -> None:
    """ConfigError when `num_supernodes` nodes are fewer than a round samples, or than the
    robust aggregator needs in a round (the ServerApp runs the latter too, in simulation)."""
    needed = nodes_needed(cfg, num_supernodes)
    if num_supernodes < needed:
        raise ConfigError(
            f"num-supernodes = {num_supernodes} is fewer than the {needed} nodes a round samples"
            f" (min-train-nodes = {cfg['min-train-nodes']}"
            + (f", min-evaluate-nodes = {cfg['min-evaluate-nodes']}"
               if cfg["fraction-evaluate"] > 0 else "")
            + "): raise num-supernodes or lower min-train-nodes / min-evaluate-nodes.")
    check_robust(cfg, num_supernodes)


def check_robust(cfg: Mapping[str, Any], num_supernodes: int) -> None:
    """ConfigError when a round of `num_supernodes` nodes samples fewer than the robust
    aggregator needs (Krum, Multi-Krum, Bulyan with num-malicious f)."""
    from server_math.robust import replies_needed

    sampled = max(int(num_supernodes * cfg["fraction-train"]), cfg["min-train-nodes"])
    need = replies_needed(cfg["robust-aggregator"], cfg["num-malicious"], cfg["multikrum-select"])
    if sampled < need:
        raise ConfigError(
            f"run config 'robust-aggregator' = '{cfg['robust-aggregator']}' with 'num-malicious' "
            f"= {cfg['num-malicious']}" + (f" and 'multikrum-select' = {cfg['multikrum-select']}"
                                           if cfg["robust-aggregator"] == "multikrum" else "")
            + f" needs at least {need} replies a round, and a round samples {sampled} of "
            f"{num_supernodes} nodes: lower num-malicious, or sample more nodes "
            "(fraction-train, min-train-nodes).")


def check_out_dir(cfg: Mapping[str, Any]) -> None:
    """ConfigError unless out-dir is, or can be made as, a folder this process can write: its
    nearest existing folder takes a new folder (made and removed again at once)."""
    path = Path(cfg["out-dir"]).expanduser()
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"run config 'out-dir' = '{cfg['out-dir']}' passes through {probe}, "
                          "which is a file, not a folder: give a folder for run outputs.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fedacg-gc-check-", dir=probe))
    except OSError as err:
        raise ConfigError(f"run config 'out-dir' = '{cfg['out-dir']}': no folder can be made in "
                          f"{probe} ({err.strerror or err}): give a folder you can write, e.g. "
                          "out-dir='~/fedacg-gc-runs'.") from None


def parse(args: list[str] | None) -> dict[str, Any]:
    """`--run-config` / `--federation-config` values, parsed the way `flwr run` parses them. A
    .toml file is read once, bounded (`fileio.reading`: a regular file of at most
    CONFIG_FILE_LIMIT bytes of UTF-8), so that a named pipe or a huge file is refused, not
    waited on, and its text flattened as Flower flattens it."""
    from flwr.common.config import flatten_dict, parse_config_args

    if args and len(args) == 1 and args[0].endswith(".toml"):
        try:
            text = read_text_bounded(Path(args[0]).expanduser(), CONFIG_FILE_LIMIT,
                                     follow_links=True)
        except OSError as err:
            raise ConfigError(f"run-config file {args[0]}: {err.strerror or err}") from None
        try:
            return flatten_dict(tomllib.loads(text))
        except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
            raise ConfigError(f"run-config file {args[0]} is not valid TOML ({err})") from None
    try:
        return parse_config_args(args)
    except Exception as err:  # click.ClickException / TOML errors: say what Flower would say
        raise ConfigError(getattr(err, "message", None) or str(err)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m run_config check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-config", "-c", action="append", metavar="CONFIG",
                        help='as for flwr run: "key=value key2=value2", repeatable, or a '
                        '.toml file')
    parser.add_argument("--federation-config", action="append", metavar="CONFIG",
                        help='as for flwr run, e.g. "num-supernodes=20"')
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing when valid")
    args = parser.parse_args(argv)
    try:
        run_config = parse(args.run_config)
        federation = parse(args.federation_config)
        nodes = federation.get("num-supernodes")
        cfg = check(run_config, nodes if isinstance(nodes, int) else None, disk=True)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in collapse_warnings(cfg):  # (a warning, not an error: the run may go)
        print(f"warning: {line}", file=sys.stderr)
    if not args.quiet:
        changed = {k: cfg[k] for k in run_config}
        print("run config OK" + (f": {changed}" if changed else " (all defaults)")
              + f"; method {cfg['method']}, {cfg['num-server-rounds']} rounds")
    return 0
