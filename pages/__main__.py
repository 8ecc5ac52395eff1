"""`python -m pages`: write every generated file (`pages.generated`), or print one part."""

import argparse
import sys

from .generated import ROOT, GeneratedFileError, generated_files, stale_files, write_files
from .tables import __doc__ as TABLES_DOC
from .tables import markdown, methods, methods_page, setups, setups_page, toml

PRINTS = {"markdown": markdown, "methods": methods, "methods_page": methods_page,
          "toml": toml, "setups": setups, "setups_page": setups_page}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pages", description=TABLES_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 naming each generated file out of date")
    what.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    what.add_argument("--methods", action="store_true", help="print the methods table")
    what.add_argument("--methods-page", action="store_true", help="print docs/methods.md")
    what.add_argument("--toml", action="store_true", help="print the pyproject section")
    what.add_argument("--setups", action="store_true", help="print the paper set-ups table")
    what.add_argument("--setups-page", action="store_true", help="print docs/setups.md")
    args = parser.parse_args(argv)
    for name, page in PRINTS.items():
        if getattr(args, name):
            text = page()
            print(text, end="" if text.endswith("\n") else "\n")
            return 0
    try:
        expected = generated_files()
        if args.check:
            stale = stale_files(expected)
            for p in stale:
                print(f"out of date: {p.relative_to(ROOT)} (run python -m pages)")
            return 1 if stale else 0
        if not write_files(expected):
            print("every generated file is up to date")
    except (GeneratedFileError, OSError) as err:  # (UnusableFile is an OSError)
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
