"""The ServerApp (`server_app.app:app`) and its per-round results recorder."""

# First thing on import: the simulation starts Ray while the ServerApp module is still loading,
# and the console's warnings filter must be in place before Ray's FutureWarning is issued.
from . import console  # noqa: F401
