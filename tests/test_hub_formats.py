"""Every dataset, as a small copy in its exact hub format, loads offline through the real code path
(dataset-path -> flwr-datasets FederatedDataset -> partitioner -> tensors), partitions as
configured and trains one round with the real ServerApp and ClientApp (in-process grid)."""

import json
from dataclasses import replace
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

import hubformats
import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from feddata import (DataSettings, load_client_data, load_partition, load_test_data,
                     load_test_split)
from feddata.decode import input_tensor, normalize
from feddata.save import main as save_main
from feddata.sources import _grouped_holdout
from feddata.specs import DATASET_BY_NAME
from run_config import resolve

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

ROOT = Path(__file__).resolve().parents[1]


def data(overrides: dict) -> DataSettings:
    """The data settings of the run config `overrides` (resolved), as the apps take them."""
    return DataSettings.from_config(resolve(overrides))


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-copies")
    rng = np.random.default_rng(0)
    paths = {name: getattr(hubformats, name.replace("-", "_"))(root, rng)
             for name in ("cifar10", "cifar100", "tiny-imagenet", "femnist", "shakespeare",
                          "celeba")}
    idx = hubformats.emnist_idx(root, rng)
    assert save_main(["emnist", str(root / "emnist"), "--from-idx", str(idx)]) == 0
    paths["emnist"] = root / "emnist"
    return paths


# dataset, partitioner, model, clients, examples partitioned (natural: a sample of ids) / tested
CASES = [
    ("cifar10", "dirichlet-balanced", "cnn", 4, 80, 30),
    ("cifar100", "lda", "cnn", 3, 120, 30),
    ("tiny-imagenet", "iid", "mlp", 3, 60, 20),
    ("emnist", "shards", "mlp", 3, 66, 20),  # 6 shards of floor(70 / 6) = 11
    ("femnist", "natural", "femnist-cnn", 4, 40, 12),  # 4 of 6 writers, 10 + 2 examples each
    ("shakespeare", "natural", "char-lstm", 5, 80, 20),  # all 5 speakers, 16 + 4 lines each
    ("celeba", "natural", "celeba-cnn", 4, 20, 8),  # 4 of 6 celebrities, 5 images each
]


@pytest.mark.parametrize("dataset,partitioner,model,clients,n_train,n_test", CASES)
def test_loads_offline_partitions_and_trains_one_round(copies, tmp_path, dataset, partitioner,
                                                       model, clients, n_train, n_test):
    rc = {"dataset": dataset, "dataset-path": str(copies[dataset]), "partitioner": partitioner,
          "model": model, "lda-min-size": 1, "num-server-rounds": 1, "fraction-train": 0.5,
          "local-iterations": 2, "batch-size": 4, "out-dir": str(tmp_path), "run-name": "run"}
    cfg = data(rc)
    spec = DATASET_BY_NAME[dataset]
    # the split and the test set, through the real path
    assert len(load_test_split(cfg)) == n_test
    parts = [load_partition(cfg, i, clients) for i in range(clients)]
    assert all(len(p) > 0 for p in parts)
    assert sum(len(p) for p in parts) == n_train
    client = load_client_data(cfg, 0, clients)
    x, y = load_test_data(cfg)
    assert client.train_x.shape[1:] == spec.in_shape and x.shape[1:] == spec.in_shape
    assert int(y.max()) < spec.num_classes and len(y) == n_test
    if spec.kind == "image":
        assert client.train_x.dtype.is_floating_point is False  # stored uint8, augmented per batch
        assert x.dtype.is_floating_point  # evaluation tensors are normalized once
    # one round of the real apps
    grid = FakeGrid(clients, client_app_handler(rc, clients))
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    run = tmp_path / "run"
    rows = json.loads((run / "results.json").read_text())["rounds"]
    assert rows[1]["train-replies"] == max(int(clients * 0.5), 2)
    assert np.isfinite(rows[1]["train-loss"]) and rows[1]["train-loss"] > 0
    assert 0.0 <= rows[1]["test-acc"] <= 1.0
    summary = json.loads((run / "partitions.json").read_text())
    assert summary["clients"] == clients and summary["test-examples"] == n_test
    assert summary["size-min"] == min(len(p) for p in parts)


def test_natural_split_groups_by_the_id_column(copies):
    cfg = data({"dataset": "femnist", "dataset-path": str(copies["femnist"]),
                "partitioner": "natural"})
    # 6 writers: with 6 clients every client holds exactly one writer (NaturalIdPartitioner)
    writers = [set(load_partition(cfg, i, 6)["writer_id"]) for i in range(6)]
    assert all(len(w) == 1 for w in writers) and len(set().union(*writers)) == 6
    assert [len(load_partition(cfg, i, 6)) for i in range(6)] == [10] * 6  # 12 each, 2 held out
    # 4 clients: 4 of the 6 writers, drawn with the seed, one each
    four = [set(load_partition(cfg, i, 4)["writer_id"]) for i in range(4)]
    assert all(len(w) == 1 for w in four) and len(set().union(*four)) == 4
    other = replace(cfg, seed=1)
    assert [set(load_partition(other, i, 4)["writer_id"]) for i in range(4)] != four
    with pytest.raises(ValueError, match="only 6 of them for 7 clients"):
        load_partition(cfg, 0, 7)
    # the test set holds 2 of each writer's 12 examples and no training example
    test = load_test_split(cfg)
    assert sorted(np.unique(test["writer_id"], return_counts=True)[1]) == [2] * 6


def test_same_seed_same_natural_partitions_in_two_processes(copies):
    code = ("from feddata import DataSettings, load_partition; from run_config import resolve;"
            "import hashlib;"
            "cfg = DataSettings.from_config(resolve({'dataset': 'shakespeare', "
            f"'dataset-path': '{copies['shakespeare']}', 'partitioner': 'natural', 'seed': 3}}));"
            "print(hashlib.sha1(str([load_partition(cfg, i, 4)['x'] for i in range(4)])"
            ".encode()).hexdigest())")
    out = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout for _ in range(2)]
    assert out[0] == out[1] and len(out[0]) > 30


def test_held_out_examples_per_id():
    ids = np.array(list("aaaaabbbbbcc"))
    temporal = _grouped_holdout(ids, 0.2, seed=0, temporal=True)
    assert temporal.tolist() == [4, 9]  # the last of each id; 'c' keeps both (round(0.4) = 0)
    random = _grouped_holdout(ids, 0.4, seed=0, temporal=False)
    assert len(random) == 2 + 2 + 1 and set(ids[random]) == {"a", "b", "c"}
    assert len(_grouped_holdout(ids, 0.99, seed=0, temporal=False)) == 4 + 4 + 1  # >= 1 kept


def test_evaluation_tensors_are_the_normalized_stored_values(copies):
    cfg = data({"dataset": "cifar10", "dataset-path": str(copies["cifar10"])})
    x, _ = load_test_data(cfg)
    stored = input_tensor(load_test_split(cfg), DATASET_BY_NAME["cifar10"])
    assert stored.dtype.is_floating_point is False
    assert np.allclose(x.numpy(), normalize(stored, DATASET_BY_NAME["cifar10"]).numpy())


@pytest.mark.parametrize("fmt", ["disk", "parquet"])
def test_save_command_writes_a_copy_that_loads_the_same(copies, tmp_path, fmt):
    out = tmp_path / f"tiny-{fmt}"
    assert save_main(["tiny-imagenet", str(out), "--from", str(copies["tiny-imagenet"]),
                      "--format", fmt]) == 0
    a = data({"dataset": "tiny-imagenet", "dataset-path": str(copies["tiny-imagenet"])})
    b = data({"dataset": "tiny-imagenet", "dataset-path": str(out)})
    assert load_test_split(a)["label"] == load_test_split(b)["label"]
    assert [load_partition(a, i, 3)["label"] for i in range(3)] == \
        [load_partition(b, i, 3)["label"] for i in range(3)]


def test_missing_columns_and_paths_are_clear_errors(copies, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_partition(data({"dataset": "cifar10", "dataset-path": str(tmp_path / "nope")}),
                       0, 2)
    with pytest.raises(ValueError, match="no column 'img'"):  # a FEMNIST copy read as CIFAR-10
        load_partition(data({"dataset": "cifar10", "dataset-path": str(copies["femnist"])}),
                       0, 2)
    with pytest.raises(ValueError, match="no hub copy"):
        load_partition(data({"dataset": "emnist"}), 0, 2)
    with pytest.raises(ValueError, match="uoft-cs/cifar100.*set dataset-path"):  # offline here
        load_test_split(data({"dataset": "cifar100"}))
