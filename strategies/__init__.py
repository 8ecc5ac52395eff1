"""The server side: the methods as Flower strategies for any ServerApp (`named`: `FedACG`,
`FedAGM`, `GCFed`, `FedACGGCFed`, `Method`), the round loop under them (`round_loop`), node
sampling and identity (`nodes`), reply screening (`reply_screen`), the server maths in plain
PyTorch (`server_update`). Imported lazily, so that `methods` can use `strategies.server_update`
without a cycle. (The ServerApp builds its strategy from the run config in
`server_app.factory`.)"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "FedACG": "named", "FedAGM": "named", "GCFed": "named", "FedACGGCFed": "named",
    "Method": "named", "MethodStrategy": "round_loop", "RoundConfig": "round_loop",
    "Nodes": "nodes", "NodeWaitTimeout": "nodes", "wait_for_nodes": "nodes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
