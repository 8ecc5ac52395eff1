"""One sweep of the simulation engine's message poll: Flower's against the app's.

    python -m benchmarks.message_poll                       # 1,000 and 10,000 nodes; 10, 100 out
    python -m benchmarks.message_poll --nodes 10000 --in-flight 10

Flower's simulation engine asks the link state for the messages of every node, one node at a
time, every 0.1 s (docs/performance.md#many-clients). This builds Flower's own in-memory link
state with the registered nodes of a simulation, pushes `--in-flight` messages to the last nodes,
and times one such sweep (`get_message_ins` once per node, as the engine calls it) with Flower's
method and with the app's (server_app/sim_poll.py), on a fresh state each.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

RUN_ID = 7


def simulation_state(num_nodes: int):
    """(grid, state, node ids): Flower's in-memory link state with `num_nodes` registered as the
    simulation engine registers them, and a run the grid pushes messages for."""
    from flwr.proto.task_pb2 import Task  # pylint: disable=no-name-in-module
    from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.simulation.run_simulation import NoOpFederationManager
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.federation.noop_federation_manager import NOOP_FEDERATION_ID
    from flwr.superlink.grid import InMemoryGrid

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = RUN_ID, 1, 1
    factory = LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(),
                               ObjectStoreFactory())
    nodes = list(_register_nodes(num_nodes, factory))
    state = factory.state()
    run = Run.create_empty(run_id=RUN_ID)
    run.primary_task_id, run.federation_id = 1, NOOP_FEDERATION_ID
    state.run_ids[RUN_ID] = RunRecord(run=run)
    state.task_store[1] = Task(task_id=1, run_id=RUN_ID)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    return grid, state, nodes


def push(grid, node_ids) -> list[str]:
    """Push one train message to each of `node_ids`; their message ids."""
    from flwr.app import Message, RecordDict

    return list(grid.push_messages([Message(RecordDict(), n, "train") for n in node_ids]))


def sweep_seconds(num_nodes: int, in_flight: int, fast: bool) -> float:
    from server_app.sim_poll import speed_up_message_poll

    grid, state, nodes = simulation_state(num_nodes)
    if fast and not speed_up_message_poll(grid):
        raise RuntimeError("the app's poll does not apply to this Flower version's link state")
    push(grid, nodes[-in_flight:])
    start = time.perf_counter()
    for node in nodes:
        state.get_message_ins(node_id=node, limit=1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,10000", help="comma-separated node counts")
    parser.add_argument("--in-flight", default="10,100", help="comma-separated message counts")
    args = parser.parse_args()
    import flwr

    print(f"{os.cpu_count()} CPUs ({platform.machine()}) | flwr {flwr.__version__} | python "
          f"{platform.python_version()}\n")
    print("| nodes | messages in flight | Flower's sweep s | the app's sweep s | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for n in (int(x) for x in args.nodes.split(",")):
        for m in (int(x) for x in args.in_flight.split(",")):
            flower, app = sweep_seconds(n, m, False), sweep_seconds(n, m, True)
            print(f"| {n} | {m} | {flower:.3f} | {app:.4f} | {flower / app:.0f}x |", flush=True)


if __name__ == "__main__":
    main()
