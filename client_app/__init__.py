"""The ClientApp (`client_app.app:app`) and the local update it runs (`client_app.local_update`);
for a ClientApp of your own, the client's share of a method (`blocks`: `LocalMethod`,
`query_reply`). Imported lazily: `client_app.app` is the app's whole client."""

from __future__ import annotations

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

import importlib

_EXPORTS = {"LocalMethod": "blocks", "query_reply": "blocks"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
