"""ClientApp: local training (docs/algorithms.md#local-update) and federated evaluation on the
node's partition.

Thin Flower glue: the maths is in the client step (`client_step.ClientStep`, through
`local_update`). In deployment every message starts a fresh
process, so the import path stays light (torch, flwr, our models; no `datasets`/scikit-learn) and
the node's prepared partition comes from its local disk (`feddata.disk_cache`) after the first
message; in a simulation actor, data and model are also cached in memory between calls.
"""

from __future__ import annotations

import functools
import sys
import time

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from feddata.augment import TrainTransform
from feddata.disk_cache import cache_dir, load_prepared_own_data, load_prepared_partition
from feddata.padding import pad_to_full_batches
from feddata.settings import DataSettings
from feddata.specs import spec_of
from models import build_model
from models.evaluation import evaluate as evaluate_model
from models.wire import array_record, state_view
from run_config import node_data_mismatch

from .client_state_store import store_for
from .client_step import LocalContext
from .local_update import local_update
from .process_age import deployed_process, process_seconds
from .settings import method_parts, node_client_id, settings
from .received import check_train_config

app = ClientApp()


def pick_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda:0")
    return torch.device("cpu")


@functools.lru_cache(maxsize=4)
def _model(name: str, in_shape: tuple, num_classes: int, gn_groups: int, device: str):
    return build_model(name, in_shape, num_classes, gn_groups).to(device)


def own_data_path(context: Context) -> str | None:
    """The node's own data folder (node config `data-path`), or None: a partition of the
    configured dataset (docs/deployment.md#own-data)."""
    path = context.node_config.get("data-path")
    return str(path) if path else None


def follow_links(context: Context) -> bool:
    """Node config `data-follow-links = true`: links in the node's data folder may point out of
    it (docs/data.md#own-data-folders); by default only links into the folder are followed."""
    value = context.node_config.get("data-follow-links", False)
    if not isinstance(value, bool):
        raise ValueError(f"node config 'data-follow-links' = {value!r}: expected true or false "
                         "(--node-config \"data-follow-links=true\")")
    return value


def partition_of(context: Context) -> tuple[int | None, int]:
    """The node's client id among N: `client-id` / `num-clients` of its node config (the older
    `partition-id` / `num-partitions` read the same way). Without own data it is also the
    partition of the dataset it trains on; with own data (`data-path`) it names the node, for
    sampling and per-client state. A node with its own data and no client id: (None, N or 0),
    the server gives it a slot (docs/deployment.md#client-identity)."""
    pid, n = node_client_id(context.node_config)
    if own_data_path(context) is not None:
        if pid is None and n is not None:
            raise ValueError(f"the node config has num-clients = {n} and no client-id: a node "
                             "with its own data and no client-id gets a free slot from the "
                             "server, among the run config's num-clients; give client-id too, "
                             "or leave num-clients out (docs/deployment.md#client-identity)")
        return (None, 0) if pid is None else (pid, n or 0)
    if pid is None or n is None:
        raise KeyError(f"node config lacks {'client-id' if pid is None else 'num-clients'}: "
                       "start the SuperNode with --node-config \"client-id=<i> "
                       "num-clients=<n>\" (deploy/supernode.sh --client-id <i> --num-clients "
                       "<n>), or with data-path='<folder>' (its own data)")
    return pid, n


def data_partition_of(msg: Message, context: Context) -> tuple[int | None, int]:
    """The partition to use: the one the server names (dynamic clients), else the node's own;
    with own data, the client slot the server gave a node that has no client-id."""
    config = msg.content.config_records.get("config")
    if own_data_path(context) is not None:
        pid, n = partition_of(context)
        if pid is None and config is not None and "client-slot" in config:
            pid, n = int(config["client-slot"]), int(config["num-clients"])
        return pid, n
    if config is not None and "partition-id" in config:
        return int(config["partition-id"]), int(config["num-partitions"])
    return partition_of(context)


_on_device: dict[tuple[int, str], tuple[object, tuple[torch.Tensor, ...]]] = {}


def on_device(data, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(train_x, train_y, val_x, val_y) on the training device, moved once per partition and
    process (a partition is a few MB; on the CPU these are the cached tensors themselves)."""
    if device.type == "cpu":
        return data.train_x, data.train_y, data.val_x, data.val_y
    key = (id(data), str(device))
    cached = _on_device.get(key)
    if cached is None or cached[0] is not data:  # (an id can be reused once `data` is freed)
        if len(_on_device) >= 512:
            _on_device.pop(next(iter(_on_device)))
        cached = _on_device[key] = (data, tuple(
            t.to(device, non_blocking=True)
            for t in (data.train_x, data.train_y, data.val_x, data.val_y)))
    return cached[1]


def setup(msg: Message, context: Context):
    """Resolved config, (client id, N), this node's data, and the model holding the broadcast
    weights."""
    client = settings(context.run_config)
    cfg = client.cfg
    pid, nparts = data_partition_of(msg, context)
    path = own_data_path(context)
    mismatch = node_data_mismatch(path is not None, cfg["client-data"])
    if mismatch:
        raise ValueError(mismatch)
    if path is not None:  # the node's own folder, whole (no partitioner), decoded once
        data = load_prepared_own_data(client.data, path, cache_dir(context.node_config),
                                      follow_links=follow_links(context))
    else:
        data = load_prepared_partition(client.data, pid, nparts, cache_dir(context.node_config))
    device = pick_device(cfg["device"])
    model = _model(cfg["model"], data.in_shape, data.num_classes, cfg["gn-groups"], str(device))
    state = state_view(msg.content["arrays"])  # views of the message bytes: copied once, below
    model.load_state_dict(state, strict=True)
    return cfg, (pid, nparts), data, model, device


@app.train()
def train(msg: Message, context: Context) -> Message:
    check_train_config(msg.content["config"])  # fail now, not loop for ever on a bad broadcast
    client = settings(context.run_config)
    sized = [p.name for p in client.parts if p.uses_partition_sizes]
    if sized and own_data_path(context) is not None:
        raise ValueError(f"client part(s) {sized} weigh each client by the sizes of every "
                         "client's partition, which a node with its own data (data-path) cannot "
                         "know: choose another method (SCAFFOLD, FedDyn, FedACG, ...) for a "
                         "deployment on own data")
    started = process_seconds() if deployed_process() else None
    t_load = time.perf_counter()
    cfg, (pid, num_partitions), data, model, device = setup(msg, context)
    load_seconds = time.perf_counter() - t_load
    if pid is None:
        raise ValueError("this node has its own data and no client-id, and the server named no "
                         "client slot for it: give it --node-config \"client-id=<i>\"")
    c = msg.content["config"]  # only what changes per round: lr, server-round
    local = client.local_config(model, float(c["lr"]))
    server_round = int(c["server-round"])
    # Same seed, round and partition -> the same mini-batches in every process.
    gen = torch.Generator().manual_seed((cfg["seed"] * 1_000_003 + server_round) * 100_003 + pid)
    # Training batches are augmented (cfg: augment, augment-padding, augment-rotation) and
    # normalized on the training device; evaluation data is normalized when loaded.
    transform = TrainTransform(spec_of(client.data), cfg["augment"],
                               cfg["augment-padding"], cfg["augment-rotation"])
    t = time.perf_counter()
    train_x, train_y, _, _ = on_device(data, device)
    if cfg["pad-to-full-batches"]:  # GC-Fed's full batches (num-examples stays the true size)
        train_x, train_y = pad_to_full_batches(train_x, train_y, cfg["batch-size"])
    train_x, transform = transform.prepare(train_x)  # no augmentation: normalized here, once
    down = {k: v for k, v in msg.content.array_records.items() if k != "arrays"}
    store = store_for(c, pid, context.node_config, context.state)  # per-client state, if any
    ctx = LocalContext(down=down, state=context.state, server_round=server_round,
                       partition_id=pid, train_y=train_y, num_classes=data.num_classes,
                       num_partitions=num_partitions, store=store,
                       partition_sizes=partition_sizes(client.data, client.parts,
                                                       num_partitions))
    codec, parts = method_parts(cfg, client.parts)  # e.g. FedPAQ's quantization, first
    # torch's own generator (dropout: vgg11-gcfed) seeded per seed, round and partition too,
    # inside a fork so that nothing outside the local update sees it
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(gen.initial_seed() * 6364136223846793005 % 2**63)
        metrics = local_update(model, train_x, train_y, local, gen, transform, parts, ctx)
    # local compute only (ends synchronized: .item())
    metrics["train-seconds"] = time.perf_counter() - t
    # the round's other client costs (docs/deployment.md#deployment-cost)
    metrics["load-seconds"] = load_seconds
    if started is not None:
        metrics["start-seconds"] = started
    metrics["num-examples"] = len(data.train_y)
    arrays = array_record(model.state_dict()) if codec is None else codec.reply_arrays(model)
    content = RecordDict({"arrays": arrays,
                          "metrics": MetricRecord(metrics),
                          **ctx.up})  # the method's extra records (none for most methods)
    return Message(content=content, reply_to=msg)


def partition_sizes(data: DataSettings, parts: tuple, num_partitions: int
                    ) -> tuple[int, ...] | None:
    """The training examples of every partition, for the parts that weigh clients by them
    (FedDC's om_i and K; a node with its own data is refused those methods above); None where
    no part needs them."""
    if num_partitions <= 0 or not any(p.uses_partition_sizes for p in parts):
        return None
    from feddata.summary import training_sizes

    return training_sizes(data, num_partitions)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    _, _, data, model, device = setup(msg, context)
    _, _, val_x, val_y = on_device(data, device)
    loss, acc = evaluate_model(model, val_x, val_y)
    metrics = {"num-examples": len(data.val_y)}
    if len(data.val_y):
        metrics.update({"eval-loss": loss, "eval-acc": acc})
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


def simulated() -> bool:
    """True in a Ray actor of Flower's simulation: a virtual node, which can load any partition."""
    ray = sys.modules.get("ray")  # never imported by a deployment ClientApp
    return ray is not None and ray.is_initialized()


@app.query()
def query(msg: Message, context: Context) -> Message:
    """The node's partition-id, so the server samples the same partitions in every run, and
    whether the node is simulated (then the server names the partition in every message)."""
    pid, nparts = partition_of(context)
    own = own_data_path(context) is not None
    if own and not nparts:  # N: the run config's num-clients, else the server decides
        nparts = int(context.run_config.get("num-clients", 0) or 0)
    metrics = MetricRecord({"simulated": int(simulated()), "own-data": int(own)})
    if pid is not None:
        metrics.update({"partition-id": pid, "num-partitions": nparts})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
