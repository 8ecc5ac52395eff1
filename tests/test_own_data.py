"""A node's own data (feddata/own_data.py, docs/deployment.md#own-data): each node trains on the
whole folder its node config's data-path names; bad folders are errors naming the file and the
fix, and the run goes on with the other nodes."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict

from entry_points import HOW, run_module
from feddata.own_data import OwnDataError, read_own_data, split_held_out
from feddata.specs import DATASET_BY_NAME

ROOT = Path(__file__).resolve().parents[1]
CIFAR, DIGITS = DATASET_BY_NAME["cifar10"], DATASET_BY_NAME["digits"]


def image_folder(root: Path, counts: dict, size=(32, 32), mode="RGB", seed=0) -> Path:
    """<root>/<label>/<i>.png, `counts[label]` random images each."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for label, n in counts.items():
        (root / str(label)).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            shape = (size[1], size[0]) + (() if mode == "L" else (3,))
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(
                root / str(label) / f"{i}.png")
    return root


def test_own_data_image_folder_reads_every_image_with_its_folders_label(tmp_path):
    folder = image_folder(tmp_path / "mine", {0: 2, 7: 3})
    data = read_own_data(str(folder), CIFAR, "cifar10")
    assert data.x.shape == (5, 3, 32, 32) and data.x.dtype == torch.uint8
    assert data.y.tolist() == [0, 0, 7, 7, 7]
    from PIL import Image

    first = np.asarray(Image.open(folder / "0" / "0.png")).transpose(2, 0, 1)
    assert torch.equal(data.x[0], torch.from_numpy(first.copy()))


@pytest.mark.parametrize("fmt", ["save_to_disk", "parquet"])
def test_own_data_local_copies_read_as_the_hub_format(tmp_path, fmt):
    from feddata.digits import load_digits_dataset

    ds = load_digits_dataset().select(range(40))
    folder = tmp_path / "mine"
    if fmt == "save_to_disk":
        ds.save_to_disk(str(folder))
    else:
        (folder / "data").mkdir(parents=True)
        ds.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    data = read_own_data(str(folder), DIGITS, "digits")
    assert data.y.tolist() == list(ds["label"])
    assert torch.equal(data.x, torch.tensor(np.asarray(ds["image"]), dtype=torch.float32)
                       .reshape(40, 1, 8, 8))
    train_x, train_y, val_x, val_y = split_held_out(data, DIGITS, 0.1, seed=0)
    assert (len(train_y), len(val_y)) == (36, 4)  # all of it: no partitioner
    assert sorted(train_y.tolist() + val_y.tolist()) == sorted(ds["label"])


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nowhere", r"data-path '.*nowhere' does not exist: give the folder in its node"),
    (lambda p: (p / "f").write_text("") or p / "f", r"is a file, not a folder"),
    (lambda p: (p / "e").mkdir() or p / "e", r"'.*e' is empty: put the examples there"),
    (lambda p: image_folder(p / "m", {12: 1}), r"m/12: label 12 is outside dataset 'cifar10''s "
                                               r"10 classes \[0, 9\]"),
    (lambda p: image_folder(p / "m", {"cats": 1}), r"m/cats: an image folder's subfolders are "
                                                   r"the label indices"),
    (lambda p: image_folder(p / "m", {1: 1}, size=(28, 28)), r"m/1/0.png: a 28x28 image with 3 "
                                                             r"channel\(s\), and dataset "
                                                             r"'cifar10' takes 32x32 with 3"),
    (lambda p: image_folder(p / "m", {1: 1}, mode="L"), r"m/1/0.png: a 32x32 image with 1 "
                                                        r"channel"),
    (lambda p: ((image_folder(p / "m", {2: 1}) / "2" / "junk.png").write_bytes(b"no image"),
                p / "m")[1], r"m/2/junk.png: not a readable image"),
])
def test_own_data_bad_folders_name_the_file_and_the_fix(tmp_path, make, message):
    with pytest.raises(OwnDataError, match=message):
        read_own_data(str(make(tmp_path)), CIFAR, "cifar10")


@pytest.mark.parametrize("how", HOW)  # (in this process; as `python -m` in the long set)
def test_own_data_check_command(tmp_path, how):
    good = image_folder(tmp_path / "good", {0: 3, 1: 2})
    out = run_module(how, "feddata", "check", str(good), "--dataset", "cifar10")
    assert out.returncode == 0 and "5 examples (image folder)" in out.stdout, out.stderr
    assert "2 of 10 labels {0: 3, 1: 2}" in out.stdout
    out = run_module(how, "feddata", "check", str(good), "--dataset", "femnist")
    assert out.returncode == 1 and "takes 28x28 with 1" in out.stderr


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("images", [False, True])
def test_own_data_demo_folders_print_the_run_config_that_reads_them(tmp_path, images, how):
    """The printed run config, parsed as `flwr run --run-config` parses it, is the one the
    folders need: dataset 'custom' with the images' classes, shape and normalization and the
    server's test folder, or the digits as they are; client-data 'own' either way."""
    from flwr.common.config import parse_config_args

    from feddata.__main__ import DEMO_CUSTOM
    from run_config import resolve

    ran = run_module(how, "feddata", "demo-folders", str(tmp_path / "d"), "--nodes", "1",
                     *(["--images"] if images else []))
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout.splitlines()
    assert out[0] == str(tmp_path / "d" / "node-0") and out[1].startswith("run config: ")
    config = parse_config_args([out[1].removeprefix("run config: ")])
    expected = ({**DEMO_CUSTOM, "test-data": str(tmp_path / "d" / "server-test")} if images
                else {"client-data": "own"})
    assert config == expected
    resolve(config)  # a valid run config as it stands


def test_own_data_demo_folders_are_disjoint_and_label_skewed(tmp_path):
    from feddata.__main__ import demo_folders
    from feddata.digits import load_digits_dataset

    folders = demo_folders(str(tmp_path), 3)
    parts = [read_own_data(str(f), DIGITS, "digits") for f in folders]
    assert sum(len(p.y) for p in parts) == len(load_digits_dataset())  # every example, once
    rows = {tuple(x.flatten().tolist()) for p in parts for x in p.x}
    assert len(rows) == sum(len(p.y) for p in parts) - duplicates_in_digits()
    for node, p in enumerate(parts):  # the labels node % 3 owns are mostly its own
        mine = [lab for lab in range(10) if lab % 3 == node]
        assert (p.y.unsqueeze(1) == torch.tensor(mine)).any(1).float().mean() > 0.5


def duplicates_in_digits() -> int:
    from feddata.digits import load_digits_dataset

    images = np.asarray(load_digits_dataset()["image"]).reshape(1797, -1)
    return len(images) - len({tuple(r) for r in images.tolist()})


# --- the apps on own data ------------------------------------------------------------------------
def run_on_own_data(tmp_path, folders, method, ids=True, **overrides):
    """The real ServerApp and one real ClientApp per folder (node config data-path and, with
    `ids`, client-id and num-clients; `ids = "client-id"`: client-id alone), in this process.
    Returns results.json."""
    import server_app.app as server
    from client_app.app import evaluate, query, train
    from inprocess import InProcessGrid

    rc = {"method": method, "client-data": "own", "model": "mlp", "num-server-rounds": 8,
          "fraction-train": 1.0,
          "local-iterations": 10, "eval-every": 8, "checkpoint-every": 0,
          "min-train-nodes": len(folders), "out-dir": str(tmp_path / "runs"), "run-name": "r",
          **overrides}
    contexts = [Context(run_id=1, node_id=i, state=RecordDict(), run_config=dict(rc),
                        node_config={"data-path": str(f), **({"client-id": i,
                                     "num-clients": len(folders)} if ids is True else {}),
                                     **({"client-id": i} if ids == "client-id" else {})})
                for i, f in enumerate(folders)]
    functions = {"train": train, "evaluate": evaluate, "query": query}
    grid = InProcessGrid(len(folders), lambda i, msg: functions[msg.metadata.message_type](
        msg, contexts[i]), fixed_size=True)
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    return json.loads((tmp_path / "runs" / "r" / "results.json").read_text())


@pytest.mark.parametrize("method", ["fedacg", "scaffold"])
def test_own_data_nodes_each_train_on_their_folder_and_the_model_learns(tmp_path, method):
    from feddata.__main__ import demo_folders

    folders = demo_folders(str(tmp_path / "data"), 3)
    results = run_on_own_data(tmp_path, folders, method)
    assert results["status"] == "complete"
    rounds = results["rounds"]
    assert all(r["train-replies"] == 3 and r["train-dropped"] == 0 for r in rounds[1:])
    assert rounds[-1]["test-acc"] > 0.6, rounds[-1]  # 10 classes: chance is 0.1


def test_own_data_nodes_without_num_clients_take_the_run_configs(tmp_path):
    """docs/deployment.md#adding-a-node: nodes started with --client-id alone; the run config's
    num-clients is N: three such nodes (a third added to the docs' two) all train, SCAFFOLD
    (which uses N) included."""
    from feddata.__main__ import demo_folders

    folders = demo_folders(str(tmp_path / "data"), 3)
    results = run_on_own_data(tmp_path, folders, "scaffold", ids="client-id",
                              **{"num-clients": 3, "num-server-rounds": 2})
    assert results["status"] == "complete"
    assert [r["train-replies"] for r in results["rounds"][1:]] == [3, 3]


def test_own_data_a_node_with_a_bad_folder_fails_named_and_the_run_completes(tmp_path, caplog):
    from feddata.__main__ import demo_folders

    folders = demo_folders(str(tmp_path / "data"), 3)
    bad = tmp_path / "data" / "empty"
    bad.mkdir()
    results = run_on_own_data(tmp_path, [*folders, bad], "fedacg", **{"min-train-nodes": 3,
                                                                      "num-server-rounds": 3})
    assert results["status"] == "complete"
    assert all(r["train-errors"] == 1 and r["train-replies"] == 3 for r in results["rounds"][1:])
    assert f"data-path '{bad}' is empty" in caplog.text


def test_own_data_nodes_in_a_run_on_partitions_are_refused_at_their_first_message(
        tmp_path, caplog):
    """Nodes with data-path in a run whose client-data is not 'own': the server refuses each
    when it first asks it (the QUERY), naming both settings; no node can be sampled, so the run
    fails at once, in round 1, with the refusals counted (not after every round, blaming lr)."""
    from feddata.__main__ import demo_folders
    from strategies.nodes import NodesRefused

    folders = demo_folders(str(tmp_path / "data"), 2)
    with pytest.raises(NodesRefused, match=r"every connected node \(2\) was refused .*: 2 nodes: "
                       r"the node has its own data \(node config data-path\) and the run config "
                       r"has client-data = 'partitions'"):
        run_on_own_data(tmp_path, folders, "fedacg", **{"num-server-rounds": 2,
                                                       "client-data": "partitions"})
    refused = [line for line in caplog.text.splitlines() if "its report was refused" in line]
    assert len(refused) == 2, caplog.text[-3000:]
    assert all("node config data-path" in line and "client-data = 'partitions'" in line
               for line in refused)
    assert "[round 1/2]" not in caplog.text and "lr, beta" not in caplog.text
    results = json.loads((tmp_path / "runs" / "r" / "results.json").read_text())
    assert results["status"] == "failed" and "2 nodes: " in results["error"]
    assert [r["round"] for r in results["rounds"]] == [0]


def test_own_data_client_refuses_feddc_which_needs_every_clients_size(tmp_path):
    """A ClientApp with its own folder refuses FedDC itself, before it reads anything (a
    strategy of one's own may not ask the nodes first)."""
    from flwr.app import ArrayRecord, ConfigRecord, Message

    from client_app.app import train

    msg = Message(RecordDict({"arrays": ArrayRecord({}), "config": ConfigRecord(
        {"lr": 0.1, "server-round": 1})}), dst_node_id=1, message_type="train")
    ctx = Context(run_id=1, node_id=1, node_config={"data-path": str(tmp_path)},
                  state=RecordDict(), run_config={"method": "feddc"})
    with pytest.raises(ValueError, match=r"\['feddc'\] weigh each client by the sizes of every "
                                         "client's partition"):
        train(msg, ctx)


# --- data of one's own kind (dataset 'custom'), the server's test set or none, no client ids ----
def custom_run_config(tmp_path, **extra):
    from feddata.__main__ import DEMO_CUSTOM

    return {**DEMO_CUSTOM, "test-data": str(tmp_path / "data" / "server-test"), **extra}


def test_own_data_custom_dataset_in_three_formats_learns_on_the_servers_test_folder(
        tmp_path, caplog):
    from feddata.__main__ import DEMO_FORMATS, demo_image_folders

    folders = demo_image_folders(str(tmp_path / "data"), 3)
    assert [read_own_data(str(f), custom_spec(), "custom").source for f in folders] == [
        "image folder", "local copy", "local copy"]  # (DEMO_FORMATS in turn)
    assert len(DEMO_FORMATS) == 3
    results = run_on_own_data(tmp_path, folders, "fedacg", **custom_run_config(
        tmp_path, **{"fraction-evaluate": 1.0, "min-evaluate-nodes": 3, "eval-every": 1}))
    assert results["status"] == "complete"
    assert results["summary"]["metric"] == "test-acc"
    rows = results["rounds"][1:]
    assert all(0 <= r["fed-acc"] <= 1 for r in rows)  # both, and the EMA follows test-acc
    ema = [rows[0]["test-acc"]]
    for r in rows[1:]:
        ema.append(0.9 * ema[-1] + 0.1 * r["test-acc"])
    assert np.allclose([r["ema-acc"] for r in rows], ema, rtol=0, atol=1e-12)
    test_n = sum(1 for _ in (tmp_path / "data" / "server-test").rglob("*.png"))
    assert f"test set {test_n} examples from {tmp_path / 'data' / 'server-test'}" in caplog.text
    assert results["rounds"][-1]["test-acc"] > 0.6, results["rounds"][-1]


def custom_spec():
    from feddata.__main__ import DEMO_CUSTOM
    from feddata.loading import DataSettings, spec_of

    return spec_of(DataSettings.from_config({**DataSettings().as_config(), **DEMO_CUSTOM}))


def test_own_data_custom_spec_is_the_declared_one():
    spec = custom_spec()
    assert (spec.in_shape, spec.num_classes, spec.mean, spec.std) == ((1, 8, 8), 10, (0.3,),
                                                                     (0.38,))
    from feddata.decode import normalize

    x = torch.tensor([[[[0, 255]]]], dtype=torch.uint8)
    expected = (np.array([0.0, 1.0]) - 0.3) / 0.38
    assert np.allclose(normalize(x, spec).double().flatten().numpy(), expected, atol=1e-6)


def test_own_data_without_a_server_test_set_the_runs_metric_is_federated_evaluation(
        tmp_path, caplog):
    from feddata.__main__ import demo_image_folders

    folders = demo_image_folders(str(tmp_path / "data"), 3)
    caplog.set_level("INFO")
    results = run_on_own_data(tmp_path, folders, "fedacg", **custom_run_config(
        tmp_path, **{"test-data": "none", "fraction-evaluate": 1.0, "min-evaluate-nodes": 3,
                     "num-server-rounds": 5, "eval-every": 1}))
    rows = results["rounds"][1:]
    assert results["summary"]["metric"] == "fed-acc"
    assert all("test-acc" not in r for r in results["rounds"])
    fed = [r["fed-acc"] for r in rows]
    ema = [fed[0]]  # EMA_t = 0.9 EMA_{t-1} + 0.1 acc_t from the first measured round
    for acc in fed[1:]:
        ema.append(0.9 * ema[-1] + 0.1 * acc)
    assert np.allclose([r["ema-acc"] for r in rows], ema, rtol=0, atol=1e-12)
    assert results["summary"]["final-fed-acc"] == fed[-1] > 0.5
    assert results["summary"]["final-test-acc"] is None
    assert "no server test set (test-data = 'none'): the run's metric is fed-acc" in caplog.text
    assert f"[round 5/5] fed-acc {fed[-1]:.4f} | ema-acc" in caplog.text
    assert "Done: 5 rounds" in caplog.text and f"fed-acc {100 * fed[-1]:.1f}%" in caplog.text
    assert (tmp_path / "runs" / "r" / "accuracy.png").is_file()
    from reporting.status import describe, run_state

    assert f"fed-acc {fed[-1]:.4f}" in describe(run_state(tmp_path / "runs" / "r"))


def test_own_data_fed_acc_is_the_example_weighted_mean_of_the_clients_accuracies():
    """The recorder's fed-acc against a hand computation of three clients' replies."""
    from flwr.app import MetricRecord
    from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

    from server_app.results import RunRecorder

    recorder = RunRecorder.__new__(RunRecorder)
    recorder.aggregate_fn = aggregate_metricrecords
    replies = [RecordDict({"metrics": MetricRecord({"num-examples": n, "eval-acc": a,
                                                    "eval-loss": 1.0 - a})})
               for n, a in ((10, 0.5), (30, 0.9), (60, 0.2))]
    recorder.eval_metrics(replies, "num-examples")
    expected = (10 * 0.5 + 30 * 0.9 + 60 * 0.2) / 100
    assert recorder.last_eval["fed-acc"] == pytest.approx(expected, abs=1e-12)
    assert recorder.last_eval["fed-loss"] == pytest.approx(1 - expected, abs=1e-12)


@pytest.mark.parametrize("method", ["scaffold", "feddyn"])
def test_own_data_nodes_without_client_ids_get_slots_and_the_rules_take_n_from_the_run(
        tmp_path, caplog, method):
    from feddata.__main__ import demo_folders

    folders = demo_folders(str(tmp_path / "data"), 3)
    caplog.set_level("INFO")
    results = run_on_own_data(tmp_path, folders, method, ids=False,
                              **{"num-clients": 5, "num-server-rounds": 6})
    assert results["status"] == "complete"
    slots = sorted(int(line.split(" is client ")[1].split()[0])
                   for line in caplog.text.splitlines() if "(own data, no client-id)" in line)
    assert slots == [0, 1, 2]
    assert "of 5" in caplog.text
    assert all(r["train-replies"] == 3 for r in results["rounds"][1:])
    assert results["rounds"][-1]["test-acc"] > 0.5


def anonymous_grid(n: int):
    """n nodes with own data and no client-id (they answer queries only)."""
    from flwr.app import MetricRecord

    from fakegrid import FakeGrid

    def handler(index, msg):
        assert msg.metadata.message_type == "query"
        return RecordDict({"metrics": MetricRecord({"simulated": 0, "own-data": 1})})

    return FakeGrid(n, handler)


@pytest.mark.parametrize("num_clients", [0, 4])
def test_own_data_a_late_node_gets_a_free_slot_or_is_refused_naming_num_clients(
        num_clients, caplog):
    from flwr.app import ArrayRecord, ConfigRecord

    from strategy_helpers import LookaheadFedAvg

    grid = anonymous_grid(3)
    strategy = LookaheadFedAvg(seed=0, identify_nodes=True, fraction_train=1.0,
                               min_train_nodes=2, fraction_evaluate=0.0)
    strategy.nodes.num_slots = strategy.nodes.num_clients = num_clients
    arrays = ArrayRecord({"w": torch.zeros(2)})
    first = list(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    slot = {m.metadata.dst_node_id: m.content["config"]["client-slot"] for m in first}
    assert sorted(slot.values()) == [0, 1, 2]
    assert {m.content["config"]["num-clients"] for m in first} == {num_clients or 3}
    grid.node_ids.append(max(grid.node_ids) + 1)  # a node joins
    late = grid.node_ids[-1]
    second = list(strategy.configure_train(2, arrays, ConfigRecord(), grid))
    sent = {m.metadata.dst_node_id: m.content["config"]["client-slot"] for m in second}
    if num_clients:
        assert sent[late] == 3 and {k: v for k, v in sent.items() if k != late} == slot
    else:
        assert late not in sent and sent == slot
        assert "client slots are taken: raise num-clients" in caplog.text


def test_own_data_client_without_a_data_path_in_an_own_data_run_is_told_the_fix(tmp_path):
    from flwr.app import ArrayRecord, ConfigRecord, Message

    from client_app.app import train
    from feddata.__main__ import DEMO_CUSTOM

    rc = {**DEMO_CUSTOM, "test-data": "none", "fraction-evaluate": 1.0}
    msg = Message(RecordDict({"arrays": ArrayRecord({}), "config": ConfigRecord(
        {"lr": 0.1, "server-round": 1})}), dst_node_id=1, message_type="train")
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": 2},
                  state=RecordDict(), run_config=rc)
    with pytest.raises(ValueError, match="client-data = 'own'.*no data-path"):
        train(msg, ctx)


@pytest.mark.parametrize("config, message", [
    ({"dataset": "custom", "client-data": "own", "test-data": "none", "fraction-evaluate": 0.5},
     r"'custom-classes' = 0: dataset = 'custom' needs its number of classes"),
    ({"dataset": "custom", "custom-classes": 10, "custom-shape": "2,8,8", "client-data": "own",
      "test-data": "none", "fraction-evaluate": 0.5}, r"C = 1 \(grey\) or 3"),
    ({"dataset": "custom", "custom-classes": 10, "custom-shape": "3,8,8", "custom-mean": "0.5",
      "client-data": "own", "test-data": "none", "fraction-evaluate": 0.5},
     r"'custom-mean' = '0.5' has 1 value\(s\) and the images 3 channel"),
    ({"dataset": "custom", "custom-classes": 10, "custom-shape": "1,8,8", "test-data": "none",
      "fraction-evaluate": 0.5}, r"set client-data='own'"),
    ({"dataset": "custom", "custom-classes": 10, "custom-shape": "1,8,8", "client-data": "own"},
     r"has no test split to read: set test-data to a folder on the server, or to 'none'"),
    ({"custom-classes": 10}, r"'custom-classes' = 10 declares a custom dataset, and dataset = "
                             r"'digits'"),
    ({"test-data": "none"}, r"'test-data' = 'none' .* fraction-evaluate = 0 turns it off"),
    ({"client-data": "own", "method": "feddc"}, r"\['feddc'\] .* weigh each client by every "
                                                r"client's partition size"),
    ({"client-data": "own", "partitioner": "iid"}, r"'partitioner' = 'iid' splits a dataset"),
])
def test_own_data_config_is_checked_before_the_run(config, message):
    from run_config import ConfigError, resolve

    with pytest.raises(ConfigError, match=message):
        resolve(config)


def test_own_data_slots_given_by_the_server_are_kept_in_checkpoints():
    """A resumed run gives each node without a client id the slot (and so the state) it had."""
    from flwr.app import ArrayRecord, ConfigRecord

    from strategy_helpers import LookaheadFedAvg

    def strategy():
        return LookaheadFedAvg(seed=0, identify_nodes=True, fraction_train=1.0,
                               min_train_nodes=2, fraction_evaluate=0.0)

    grid = anonymous_grid(4)
    arrays = ArrayRecord({"w": torch.zeros(2)})
    before = strategy()
    sent = before.configure_train(1, arrays, ConfigRecord(), grid)
    slots = {m.metadata.dst_node_id: m.content["config"]["client-slot"] for m in sent}
    state = before.nodes.state_dict()
    after = strategy()
    after.nodes.load_state_dict(state)
    asked = len(grid.queries)
    first = min(slots, key=slots.get)
    grid.node_ids.remove(first)  # the node of slot 0 is gone: the others keep theirs
    again = after.configure_train(2, arrays, ConfigRecord(), grid)
    assert {m.metadata.dst_node_id: m.content["config"]["client-slot"] for m in again} == {
        n: s for n, s in slots.items() if n != first}
    assert len(grid.queries) == asked  # and no node is asked again


def test_own_data_check_command_looks_for_the_servers_test_folder(tmp_path):
    from run_config import ConfigError
    from run_config.check import check

    config = {"test-data": str(tmp_path / "nowhere"), "out-dir": str(tmp_path / "runs")}
    with pytest.raises(ConfigError, match=r"'test-data' = '.*nowhere' does not exist here"):
        check(config, disk=True)
    (tmp_path / "nowhere").mkdir()
    assert check(config, disk=True)["test-data"] == str(tmp_path / "nowhere")
