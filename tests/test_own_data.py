"""A node's own data (feddata/own_data.py, docs/deployment.md#own-data): each node trains on the
whole folder its node config's data-path names; bad folders are errors naming the file and the
fix, and the run goes on with the other nodes."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict

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
    (lambda p: p / "nowhere", r"data-path '.*nowhere' does not exist: give the node's data"),
    (lambda p: (p / "f").write_text("") or p / "f", r"is a file, not a folder"),
    (lambda p: (p / "e").mkdir() or p / "e", r"'.*e' is empty: put the node's examples there"),
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


def test_own_data_check_command(tmp_path):
    good = image_folder(tmp_path / "good", {0: 3, 1: 2})
    out = subprocess.run([sys.executable, "-m", "feddata", "check", str(good), "--dataset",
                          "cifar10"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "5 examples (image folder)" in out.stdout, out.stderr
    assert "2 of 10 labels {0: 3, 1: 2}" in out.stdout
    out = subprocess.run([sys.executable, "-m", "feddata", "check", str(good), "--dataset",
                          "femnist"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and "takes 28x28 with 1" in out.stderr


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
def run_on_own_data(tmp_path, folders, method, **overrides):
    """The real ServerApp and one real ClientApp per folder (node config data-path, client-id,
    num-clients), in this process. Returns results.json."""
    import server_app.app as server
    from client_app.app import evaluate, query, train
    from inprocess import InProcessGrid

    rc = {"method": method, "model": "mlp", "num-server-rounds": 8, "fraction-train": 1.0,
          "local-iterations": 10, "eval-every": 8, "checkpoint-every": 0,
          "min-train-nodes": len(folders), "out-dir": str(tmp_path / "runs"), "run-name": "r",
          **overrides}
    contexts = [Context(run_id=1, node_id=i, state=RecordDict(), run_config=dict(rc),
                        node_config={"data-path": str(f), "client-id": i,
                                     "num-clients": len(folders)})
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


def test_own_data_refuses_feddc_which_needs_every_clients_size(tmp_path, caplog):
    from feddata.__main__ import demo_folders

    folders = demo_folders(str(tmp_path / "data"), 2)
    with pytest.raises(Exception, match="no round of 1-2 aggregated"):
        run_on_own_data(tmp_path, folders, "feddc", **{"num-server-rounds": 2})
    assert "['feddc'] weigh each client by the sizes of every client's partition" in caplog.text
