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
import sys
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError
from .resolve import resolve


def nodes_needed(cfg: Mapping[str, Any], num_nodes: int) -> int:
    """The nodes a round needs with `num_nodes` connected: max(floor(fraction * n), min-nodes)
    for training, and for federated evaluation when it is on (docs/algorithms.md#server-round)."""
    needed = max(int(num_nodes * cfg["fraction-train"]), cfg["min-train-nodes"])
    if cfg["fraction-evaluate"] > 0:
        needed = max(needed, int(num_nodes * cfg["fraction-evaluate"]), cfg["min-evaluate-nodes"])
    return needed


def check(run_config: Mapping[str, Any], num_supernodes: int | None = None) -> dict[str, Any]:
    """The resolved config; ConfigError naming the key and the fix if it is not valid."""
    cfg = resolve(run_config)
    needed = None if num_supernodes is None else nodes_needed(cfg, num_supernodes)
    if needed is not None and num_supernodes < needed:
        raise ConfigError(
            f"num-supernodes = {num_supernodes} is fewer than the {needed} nodes a round samples"
            f" (min-train-nodes = {cfg['min-train-nodes']}"
            + (f", min-evaluate-nodes = {cfg['min-evaluate-nodes']}"
               if cfg["fraction-evaluate"] > 0 else "")
            + "): raise num-supernodes or lower min-train-nodes / min-evaluate-nodes.")
    return cfg


def parse(args: list[str] | None) -> dict[str, Any]:
    """`--run-config` / `--federation-config` values, parsed the way `flwr run` parses them."""
    from flwr.common.config import parse_config_args

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
        cfg = check(run_config, nodes if isinstance(nodes, int) else None)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not args.quiet:
        changed = {k: cfg[k] for k in run_config}
        print("run config OK" + (f": {changed}" if changed else " (all defaults)")
              + f"; method {cfg['method']}, {cfg['num-server-rounds']} rounds")
    return 0
