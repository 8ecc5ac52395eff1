"""The floor of Flower's simulation: a ServerApp and a ClientApp that import PyTorch and pass a
small model to the clients and back, and nothing else (`benchmarks/sim_floor.py` runs it).

The app's package is assembled by `benchmarks.sim_floor.floor_app`: these files and a copy of
client_app/process_age.py (the one reader of a ClientApp's process age), so the package runs
from its FAB without anything of the project; imported from here, `client_app` lacks it."""
