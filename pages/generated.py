"""Every file generated from the code, and the one writer of them (`python -m pages`).

docs/configuration.md, docs/methods.md and docs/setups.md are generated whole; pyproject.toml only
in its `[tool.flwr.app.config]` table: that table's lines are replaced by `tables.toml()` and
every other byte of the file is kept (comments and blank lines before the next table included).
The result is read back with a TOML parser and refused, naming the problem, unless its config
table is the generated one and every other value is the file's as it was.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fileio.atomic import write_text_atomic
from fileio.reading import read_text_bounded

from .tables import configuration_page, methods_page, setups_page, toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONFIG_HEADER = "[tool.flwr.app.config]"
PAGE_LIMIT = 2**22  # of a generated file read back (docs/setups.md is about 35 KB)


class GeneratedFileError(RuntimeError):
    """A generated file that cannot be written in place as it stands."""


def _config(doc: dict) -> object:
    return doc.get("tool", {}).get("flwr", {}).get("app", {}).get("config")


def _without_config(doc: dict) -> dict:
    app = dict(doc.get("tool", {}).get("flwr", {}).get("app", {}))
    app.pop("config", None)
    flwr = {**doc.get("tool", {}).get("flwr", {}), "app": app}
    return {**doc, "tool": {**doc.get("tool", {}), "flwr": flwr}}


def with_config_section(text: str, section: str, where: str = "pyproject.toml") -> str:
    """`text` (a pyproject.toml) with the lines of its `[tool.flwr.app.config]` table replaced by
    `section`: from the table's header to its last line that is neither blank nor a comment
    before the next table's header; everything else is kept byte for byte."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == CONFIG_HEADER]
    if len(starts) != 1:
        raise GeneratedFileError(
            f"{where} has {len(starts)} lines {CONFIG_HEADER}, not one: keep exactly one such "
            "header on a line of its own (python -m pages rewrites the table under it)")
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
               len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip()
                               .startswith("#")):
        end -= 1
    new = "".join(lines[:start]) + section.rstrip("\n") + "\n" + "".join(lines[end:])
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise GeneratedFileError(f"{where} is not valid TOML ({err}): fix the file") from None
    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        after = None
    if after is None or _config(after) != _config(tomllib.loads(section)) or \
            _without_config(after) != _without_config(before):
        raise GeneratedFileError(
            f"{where}: replacing the lines of its {CONFIG_HEADER} table (from the header to the "
            "next line starting with '[') would change more than that table: keep it a plain "
            "list of `key = value` lines, none starting with '[', and no sub-table of it")
    return new


def generated_files(root: Path = ROOT) -> dict[Path, str]:
    """Every file generated from the code, with the text it must hold."""
    pyproject = root / "pyproject.toml"
    return {root / "docs" / "configuration.md": configuration_page(),
            root / "docs" / "methods.md": methods_page(),
            root / "docs" / "setups.md": setups_page(),
            pyproject: with_config_section(read_text_bounded(pyproject, PAGE_LIMIT), toml())}


def stale_files(expected: dict[Path, str]) -> list[Path]:
    """The files of `expected` missing or holding another text."""
    return [p for p, text in expected.items()
            if not p.is_file() or read_text_bounded(p, PAGE_LIMIT) != text]


def write_files(expected: dict[Path, str], root: Path = ROOT) -> list[Path]:
    """Write each stale file of `expected` (atomically); the files written."""
    written = stale_files(expected)
    for p in written:
        write_text_atomic(p, expected[p])
        print(f"wrote {p.relative_to(root)}")
    return written
