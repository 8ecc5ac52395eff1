"""Names from a config, set-up or sweep file made safe before they become paths
(docs/security.md#files-from-outside): one rule, `safe_name`, for every such name."""

from __future__ import annotations

import unicodedata

MAX_NAME_BYTES = 255  # NAME_MAX: the longest file name of Linux's and macOS's file systems


def _unsafe(char: str) -> bool:
    # Cc: the C0 and C1 controls and DEL; Zl, Zp: the line and paragraph separators (U+2028,
    # U+2029), which end a line in a log or terminal as a newline does; Cs: lone surrogates
    return char in "/\\" or unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs")


def safe_name(name: str) -> str:
    """`name` as one path component that stays in its folder: every '/', '\\', control character
    (NUL, newline, the C1 controls, ...), line or paragraph separator and lone surrogate becomes
    '_'; the empty name, '.' and '..' become '_';
    the name is cut to 255 bytes of UTF-8. A name that is safe comes back as it is, so
    `safe_name(name) == name` says whether a name may be used as given."""
    out = "".join("_" if _unsafe(c) else c for c in str(name))
    if out in ("", ".", ".."):
        return "_"
    return out.encode()[:MAX_NAME_BYTES].decode(errors="ignore")


def plain_name(name: object) -> bool:
    """Whether `name` (from a file someone gave: a split list, a folder's entries) is a string
    that can be used as a folder name as it is: safe (`safe_name`) and not hidden."""
    return isinstance(name, str) and safe_name(name) == name and not name.startswith(".")
