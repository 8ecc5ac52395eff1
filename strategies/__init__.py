"""The Flower side of the server: the methods as Flower strategies for any ServerApp (`named`:
`FedACG`, `FedAGM`, `GCFed`, `FedACGGCFed`, `Method`), the round loop under them (`round_loop`),
node sampling and identity (`nodes`), the server's own state checks (`state_check`,
`client_state`). Above `methods`; the server maths all of them use is the package `server_math`
below (docs/extending.md#layout). Names are imported on first use, so that `import strategies`
stays cheap. (The ServerApp builds its strategy from the run config in `strategies.assembly`.)"""

from __future__ import annotations

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

import importlib

_EXPORTS = {
    "FedACG": "named", "FedAGM": "named", "GCFed": "named", "FedACGGCFed": "named",
    "Method": "named", "MethodStrategy": "round_loop", "RoundConfig": "round_loop",
    "Nodes": "nodes", "NodeWaitTimeout": "nodes", "NodesRefused": "nodes",
    "wait_for_nodes": "nodes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
