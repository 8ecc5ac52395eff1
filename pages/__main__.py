"""`python -m pages`: print a generated page (docs/configuration.md by default)."""

import argparse
import sys

from .tables import __doc__ as TABLES_DOC
from .tables import markdown, methods, setups, setups_page, toml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pages", description=TABLES_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="docs/configuration.md (default)")
    what.add_argument("--methods", action="store_true", help="the methods table")
    what.add_argument("--toml", action="store_true", help="the pyproject section")
    what.add_argument("--setups", action="store_true", help="the paper set-ups table")
    what.add_argument("--setups-page", action="store_true", help="docs/setups.md")
    args = parser.parse_args(argv)
    if args.toml:
        print(toml())
    elif args.methods:
        print(methods())
    elif args.setups:
        print(setups())
    elif args.setups_page:
        print(setups_page(), end="")
    else:
        print(markdown(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
