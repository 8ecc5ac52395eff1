"""Names from a config, set-up or sweep file made safe before they become paths
(docs/security.md#files-from-outside): one rule, `safe_name`, for every such name."""

from __future__ import annotations

MAX_NAME_BYTES = 255  # NAME_MAX: the longest file name of Linux's and macOS's file systems


def _unsafe(char: str) -> bool:
    code = ord(char)
    return char in "/\\" or code < 32 or code == 127 or 0xD800 <= code <= 0xDFFF


def safe_name(name: str) -> str:
    """`name` as one path component that stays in its folder: every '/', '\\', control character
    (NUL, newline, ...) and lone surrogate becomes '_'; the empty name, '.' and '..' become '_';
    the name is cut to 255 bytes of UTF-8. A name that is safe comes back as it is, so
    `safe_name(name) == name` says whether a name may be used as given."""
    out = "".join("_" if _unsafe(c) else c for c in str(name))
    if out in ("", ".", ".."):
        return "_"
    return out.encode()[:MAX_NAME_BYTES].decode(errors="ignore")
