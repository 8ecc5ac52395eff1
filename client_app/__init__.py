"""The ClientApp (`client_app.app:app`) and the one client step it trains through
(`client_step.ClientStep`, inside `local_update`); for a ClientApp of your own, the same step
built from a train instruction (`LocalMethod`) and the partition reply (`query_reply`), both in
`own_app`. Imported lazily: `client_app.app` is the app's whole client."""

from __future__ import annotations

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

import importlib

_EXPORTS = {"LocalMethod": "own_app", "query_reply": "own_app", "ClientStep": "client_step",
            "LocalContext": "client_step"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
