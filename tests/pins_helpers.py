"""The pin tests' only entry points into the app (test_pins_*.py).

Every call into the app's internals made by the tests that pin the rules of docs/algorithms.md
goes through a function here: when an API moves (strategies/, client_app/, run_config/), this
module is the one place to edit. The rules themselves, and the independent computations they are
checked against, stay in the tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from inprocess import InProcessGrid as FakeGrid
from inprocess import client_app_handler

# --- the client's local update ---------------------------------------------------------------


def local_train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float,
                steps: int, batch_size: int, alpha: float = 1.0, beta: float = 0.0,
                grad_clip: float = 0.0, momentum: float = 0.0, weight_decay: float = 0.0,
                local_gc_layers: int = 0, gc_vectors: str = "center",
                generator: torch.Generator | None = None) -> dict:
    """Run the client's local update on `model` in place from its current weights (phi)."""
    from client_app.local_update import LocalConfig, local_update
    from methods.fedprox import ProximalTerm

    cfg = LocalConfig(lr=lr, local_iterations=steps, batch_size=batch_size, alpha=alpha,
                      grad_clip=grad_clip, local_momentum=momentum, weight_decay=weight_decay,
                      local_gc_layers=local_gc_layers, gc_vectors=gc_vectors)
    parts = [ProximalTerm(ProximalTerm.Settings(beta=beta))] if beta > 0 else []
    return local_update(model, x, y, cfg, generator, parts=parts)


# --- run config, model, data -----------------------------------------------------------------


def resolved(run_config: dict) -> dict:
    from run_config import resolve

    return resolve(run_config)


def data_settings(run_config: dict):
    """The data package's settings of `run_config` (resolved), as the apps take them."""
    from feddata import DataSettings

    return DataSettings.from_config(resolved(run_config))


def server_model(run_config: dict) -> torch.nn.Module:
    """The model the ServerApp starts from (same architecture and seeded initial weights)."""
    from feddata import spec_of
    from models import build_model

    cfg = resolved(run_config)
    spec = spec_of(data_settings(run_config))
    return build_model(cfg["model"], spec.in_shape, spec.num_classes, cfg["gn-groups"],
                       seed=cfg["seed"])


def client_inputs(run_config: dict, partition_id: int, num_partitions: int):
    """(model input, labels) of a client's whole training part, normalized as the model sees
    them when no augmentation is configured."""
    from feddata import spec_of
    from feddata.decode import normalize
    from feddata.disk_cache import load_prepared_partition

    data = data_settings(run_config)
    part = load_prepared_partition(data, partition_id, num_partitions, None)
    return normalize(part.train_x, spec_of(data)), part.train_y


def server_test_set(run_config: dict):
    """The server's test set (normalized inputs, labels)."""
    from feddata import load_test_data

    return load_test_data(data_settings(run_config))


# --- the strategy ----------------------------------------------------------------------------


def strategy_from_config(run_config: dict, model: torch.nn.Module | None = None):
    """The strategy the ServerApp builds for `run_config` (on `model`, default the server's).
    It asks the nodes for their partition-id once (answer with `partition_reply`)."""
    from strategies.assembly import build_strategy

    model = model if model is not None else server_model(run_config)
    return build_strategy(resolved(run_config), model)


def lookahead_strategy(**kwargs):
    """Our strategy class, built directly with keyword arguments."""
    from strategy_helpers import LookaheadFedAvg

    kwargs.setdefault("fraction_evaluate", 0.0)
    return LookaheadFedAvg(**kwargs)


def client_settings(run_config: dict, model: torch.nn.Module | None = None) -> dict:
    """The client's local-update settings (made once from the run config), as a plain dict."""
    from dataclasses import asdict

    from client_app.settings import settings

    model = model if model is not None else server_model(run_config)
    return asdict(settings(run_config).local_config(model, resolved(run_config)["lr"]))


def run_strategy(strategy, handler, init: dict, rounds: int, num_nodes: int,
                 train_config: dict | None = None):
    """Run `strategy` for `rounds` rounds over a FakeGrid answered by `handler`; return the
    final global model (name -> tensor) and the grid."""
    grid = FakeGrid(num_nodes, handler)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=rounds,
                            train_config=ConfigRecord(train_config or {"x": 1}))
    return dict(result.arrays.to_torch_state_dict()), grid


def strategy_state(strategy) -> dict:
    """{'theta', 'm', 'phi'}: the strategy's global model, momentum and last broadcast point."""
    state = strategy.state_dict()
    return {k: state[k] for k in ("theta", "m", "phi")}


# --- messages --------------------------------------------------------------------------------


def broadcast_of(msg: Message) -> dict:
    """The model a train/evaluate instruction carries (name -> tensor)."""
    return dict(msg.content["arrays"].to_torch_state_dict())


def config_of(msg: Message) -> dict:
    return dict(msg.content["config"])


def model_of(reply) -> dict:
    """The model in a train reply (a RecordDict or a Message)."""
    content = reply.content if isinstance(reply, Message) else reply
    return dict(content["arrays"].to_torch_state_dict())


def make_reply(model: dict, num_examples: int) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({k: v.clone() for k, v in model.items()}),
                       "metrics": MetricRecord({"num-examples": num_examples})})


def partition_reply(index: int, num_nodes: int) -> RecordDict:
    """A node's answer to the server's query for its partition-id."""
    return RecordDict({"metrics": MetricRecord({"partition-id": index,
                                                "num-partitions": num_nodes})})


def is_query(msg: Message) -> bool:
    return msg.metadata.message_type == "query"


def is_train(msg: Message) -> bool:
    return msg.metadata.message_type == "train"


# --- the whole app in-process ----------------------------------------------------------------


def real_client(run_config: dict, num_nodes: int):
    """The real ClientApp as a FakeGrid handler (node i holds partition i)."""
    return client_app_handler(run_config, num_nodes)


def run_server_app(run_config: dict, num_nodes: int, handler=None, grid=None):
    """Run the real ServerApp's main over a FakeGrid (the real ClientApp unless `handler`);
    return the grid. `run_config` needs 'out-dir' and 'run-name'."""
    import server_app.app as server

    grid = grid or FakeGrid(num_nodes, handler or real_client(run_config, num_nodes))
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=dict(run_config)))
    return grid


def run_folder(run_config: dict) -> Path:
    return Path(run_config["out-dir"]) / run_config["run-name"]


def results_rows(run_config: dict) -> list[dict]:
    return json.loads((run_folder(run_config) / "results.json").read_text())["rounds"]


def final_model(run_config: dict) -> dict:
    return torch.load(run_folder(run_config) / "final_model.pt", weights_only=True)


def checkpoint(run_config: dict) -> dict:
    from server_app.checkpoint import load_checkpoint

    return load_checkpoint(run_folder(run_config) / "checkpoint.pt")


def num_examples_of(reply) -> int:
    content = reply.content if isinstance(reply, Message) else reply
    return int(content["metrics"]["num-examples"])


def recording(inner, log: list):
    """Wrap a FakeGrid handler: every train instruction and its reply is appended to `log` as
    {'round', 'partition', 'phi', 'config', 'model', 'n'} (partition = node index)."""

    def handler(i, msg):
        out = inner(i, msg)
        if is_train(msg) and out is not None:
            log.append({"round": config_of(msg)["server-round"], "partition": i,
                        "phi": broadcast_of(msg), "config": config_of(msg),
                        "model": model_of(out), "n": num_examples_of(out)})
        return out

    return handler


def crashing_grid(num_nodes: int, handler, crash_round: int):
    """A FakeGrid that raises `Crash` when the train instructions of `crash_round` are sent
    (the server process dies before that round's clients run)."""

    class CrashingGrid(FakeGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and is_train(messages[0]) and \
                    config_of(messages[0])["server-round"] == crash_round:
                raise Crash
            return super().send_and_receive(messages, timeout=timeout)

    return CrashingGrid(num_nodes, handler)


class Crash(Exception):
    """The server process dies."""


# --- data splits -----------------------------------------------------------------------------


def partitioner(name: str, num_partitions: int, label: str, seed: int,
                natural_id: str | None = None, **options):
    """The partitioner the app builds for `name` (options: dirichlet_alpha, lda_alpha,
    lda_min_size, shards_per_client), not yet given a dataset."""
    from feddata import build_partitioner

    kw = {"dirichlet_alpha": 0.5, "lda_alpha": 0.5, "lda_min_size": 1, **options}
    return build_partitioner(name, num_partitions, label, seed=seed, natural_id=natural_id, **kw)


def partition_rows(run_config: dict, partition_id: int, num_partitions: int):
    """Client `partition_id`'s raw training examples (a datasets.Dataset) for `run_config`."""
    from feddata import load_partition

    return load_partition(data_settings(run_config), partition_id, num_partitions)


def server_test_rows(run_config: dict):
    """The server's raw test examples (a datasets.Dataset) for `run_config`."""
    from feddata import load_test_split

    return load_test_split(data_settings(run_config))


def run_strategy_result(strategy, handler, init: dict, rounds: int, num_nodes: int,
                        evaluate_config: dict | None = None, grid=None):
    """Like run_strategy, but return Flower's `Result` (arrays and the metrics of every round)."""
    grid = grid or FakeGrid(num_nodes, handler)
    return strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=rounds,
                          train_config=ConfigRecord({"x": 1}),
                          evaluate_config=None if evaluate_config is None
                          else ConfigRecord(evaluate_config))


def node_wait_timeout_error():
    from strategies import NodeWaitTimeout

    return NodeWaitTimeout


class VirtualClock:
    """Stands in for the `time` module of the node wait (strategies/nodes.py): `sleep` adds to
    the clock instead of sleeping, so a test reads how long the server waited for nodes without
    depending on how fast the machine is. `slept`: every requested sleep, in seconds."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def virtual_node_wait_clock(monkeypatch) -> VirtualClock:
    """The node wait of every strategy runs on a VirtualClock for the rest of the test."""
    import strategies.nodes

    clock = VirtualClock()
    monkeypatch.setattr(strategies.nodes, "time", clock)
    return clock


def error_reply(msg: Message, reason: str = "client failed") -> Message:
    from flwr.app import Error

    return Message(Error(code=0, reason=reason), reply_to=msg)


def metrics_reply(metrics: dict) -> RecordDict:
    return RecordDict({"metrics": MetricRecord(metrics)})


def is_evaluate(msg: Message) -> bool:
    return msg.metadata.message_type == "evaluate"


def borderline(model: torch.nn.Module, where) -> int:
    """How many leading parameter tensors are 'features' for gc-borderline = `where`."""
    from models.centralization import borderline_index

    return borderline_index(model, where)


def save_checkpoint_file(folder: Path, payload: dict) -> Path:
    """Write `payload` as `folder`/checkpoint.pt with torch.save (a file the app would read)."""
    path = Path(folder) / "checkpoint.pt"
    torch.save(payload, path)
    return path


def read_checkpoint(path: Path) -> dict:
    from server_app.checkpoint import load_checkpoint

    return load_checkpoint(path)


def checkpoint_error():
    from server_app.checkpoint import CheckpointError

    return CheckpointError
