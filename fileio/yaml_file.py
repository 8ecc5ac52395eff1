"""YAML files a person writes (paper set-ups, sweeps), read bounded and without aliases
(docs/security.md#files-from-outside): anchors and aliases are refused (a 1 KB file of nested
aliases expands to gigabytes), and so are files over `CONFIG_FILE_LIMIT`, nesting deeper than
Python's recursion allows, and text that is not UTF-8. PyYAML is imported when a file is
read."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from .errors import UnusableFile
from .reading import CONFIG_FILE_LIMIT, read_text_bounded


@functools.cache
def _loader():
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        """PyYAML's safe loader that stops at the first anchor or alias."""

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                raise yaml.YAMLError(
                    f"an anchor or alias ('&' / '*') at line {mark.line + 1}, column "
                    f"{mark.column + 1}; this file may not use them: write the values out")
            return super().compose_node(parent, index)

    return NoAliasLoader


def load_yaml_text(text: str, where: str) -> Any:
    """`text` parsed as YAML without aliases; UnusableFile naming `where` and the problem."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 (a safe loader, aliases refused)
    except yaml.YAMLError as err:
        raise UnusableFile(f"{where} cannot be read as YAML: {' '.join(str(err).split())}"
                           ) from None
    except RecursionError:
        raise UnusableFile(f"{where} nests its values too deep to be read: write it flat"
                           ) from None
    except ValueError as err:  # a value PyYAML cannot construct (an int of 5000 digits, ...)
        raise UnusableFile(f"{where} holds a value that cannot be read ({err}): fix it"
                           ) from None


def read_yaml(path: Path, limit: int = CONFIG_FILE_LIMIT, *, follow_links: bool = False) -> Any:
    """The YAML file `path`: a regular file of at most `limit` bytes of UTF-8 (`reading`),
    parsed without aliases."""
    return load_yaml_text(read_text_bounded(path, limit, follow_links=follow_links), str(path))
