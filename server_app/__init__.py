"""The ServerApp (`server_app.app:app`) and its per-round results recorder."""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

# First thing on import: the simulation starts Ray while the ServerApp module is still loading,
# and the console's warnings filter must be in place before Ray's FutureWarning is issued.
from . import console  # noqa: F401
