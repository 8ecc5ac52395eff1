"""The floor of Flower's simulation: a ServerApp and a ClientApp that import PyTorch and pass a
small model to the clients and back, and nothing else (`benchmarks/sim_floor.py` runs it)."""
