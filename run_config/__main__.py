"""`python -m run_config`: the run config's own commands.

    python -m run_config check --run-config "..."   check a run config before `flwr run`
    python -m run_config --command NAME             the command that runs the paper set-up NAME

The pages generated from the keys (docs/configuration.md, docs/setups.md, the pyproject section,
docs/methods.md) are made by `python -m pages`.
"""

import argparse
import importlib
import sys

from .setups import setup_command

# `python -m run_config NAME ARGS...` -> main(ARGS) of the module named here; add a line per
# subcommand, e.g. "check": "run_config.check".
SUBCOMMANDS: dict[str, str] = {"check": "run_config.check"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="python -m run_config", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--command", metavar="SETUP", required=True,
                        help="print the command that runs the paper set-up SETUP")
    args = parser.parse_args(argv)
    print(setup_command(args.command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
