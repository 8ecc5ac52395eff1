"""Runs that learn nothing end as failed, every number a client reports is screened, a resume
stays in its own folder, and the check catches what it can know before the run (issue 38's
cases, tried as a careless user or an attacker would; docs/security.md, docs/results.md)."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from inprocess import InProcessGrid, client_app_handler
from run_config import ConfigError, resolve
from run_config.check import check
from server_app.checkpoint import CheckpointError
from strategies.round_loop import NothingLearned

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

ROOT = Path(__file__).resolve().parents[1]
BASE = {"method": "fedacg", "model": "mlp", "num-server-rounds": 3, "fraction-train": 1.0,
        "local-iterations": 2, "eval-every": 1, "checkpoint-every": 0, "run-name": "r"}


def run_app(tmp_path, change_reply=None, num_nodes=4, **overrides) -> dict:
    """The real ServerApp over `num_nodes` real ClientApps in this process; `change_reply(i,
    message)` edits node i's train replies (an attacker, or a careless client). Returns the run's
    results.json (parsed strictly: NaN or Infinity in it fail the test)."""
    import server_app.app as server

    rc = {**BASE, "out-dir": str(tmp_path), **overrides}
    real = client_app_handler(rc, num_nodes)

    def handler(i, msg):
        out = real(i, msg)
        if change_reply is not None and msg.metadata.message_type == "train":
            change_reply(i, out)
        return out

    grid = InProcessGrid(num_nodes, handler, fixed_size=True)
    try:
        server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                  run_config=rc))
    finally:
        run_app.results = strict_json(tmp_path / rc["run-name"] / "results.json")
    return run_app.results


def strict_json(path: Path) -> dict | None:
    if not path.exists():
        return None

    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}: not strict JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


# --- the broke cases ---------------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [("lr", 1e30), ("lr", 1e6), ("beta", 1e308),
                                        ("alpha", 1e308), ("eta", 1e308),
                                        ("num-server-rounds", 10**30)])
def test_values_no_run_can_use_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"run config '{key}' = .*: out of range"):
        resolve({"method": "fedagm" if key == "eta" else "fedacg", key: value})


def test_run_config_check_refuses_lr_1e30():
    out = subprocess.run([sys.executable, "-m", "run_config", "check", "-c", "lr=1e30"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and "'lr' = 1e+30: out of range" in out.stderr, out.stderr


def nan_update(i, out):
    """Every float tensor of the reply's model NaN (what lr = 1e30 made of every reply)."""
    from flwr.app import ArrayRecord

    state = out.content["arrays"].to_torch_state_dict()
    out.content["arrays"] = ArrayRecord({k: v * math.nan if v.is_floating_point() else v
                                         for k, v in state.items()})


def test_a_run_whose_replies_are_all_dropped_ends_failed_saying_why(tmp_path):
    with pytest.raises(NothingLearned, match=r"3 rounds in a row \(1-3\) aggregated no reply "
                       r"\(the last: round 3: 0 good replies.* 4 dropped\).*max-skipped-rounds"):
        run_app(tmp_path, nan_update, **{"num-server-rounds": 5, "max-skipped-rounds": 3})
    results = run_app.results
    assert results["status"] == "failed" and "3 rounds in a row" in results["error"]
    assert [r["round"] for r in results["rounds"]] == [0, 1, 2]  # round 3 failed
    assert not (tmp_path / "r" / "final_model.pt").exists()
    from reporting.status import EXIT, run_state

    assert EXIT[run_state(tmp_path / "r")["state"]] == 1  # the exit status a script tests


def test_a_run_that_aggregated_no_round_fails_at_its_end(tmp_path):
    with pytest.raises(NothingLearned, match=r"no round of 1-2 aggregated a reply"):
        run_app(tmp_path, nan_update, **{"num-server-rounds": 2})
    assert run_app.results["status"] == "failed"


@pytest.mark.parametrize("method", ["fedacg", "moon", "scaffold", "feddyn"])
def test_all_clients_claiming_zero_examples(tmp_path, method, caplog):
    """Weighted by examples (fedacg, moon): nothing to weigh, every round skipped, the run
    fails; uniform weights (scaffold, feddyn) aggregate, and the round's metrics are the
    unweighted mean (they raised ZeroDivisionError in the metrics)."""
    def zero(i, out):
        out.content["metrics"]["num-examples"] = 0

    overrides = {"method": method, "num-server-rounds": 2}
    weighted = resolve(overrides)["aggregation"] == "examples"
    if weighted:
        with pytest.raises(NothingLearned, match="no round of 1-2 aggregated a reply"):
            run_app(tmp_path, zero, **overrides)
    else:
        results = run_app(tmp_path, zero, **overrides)
        assert results["status"] == "complete"
        assert all(math.isfinite(r["train-loss"]) for r in results["rounds"][1:])
    assert "ZeroDivisionError" not in caplog.text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1e9, 1e9])
def test_one_clients_train_loss_does_not_move_the_rounds(tmp_path, bad, caplog):
    """The round's train-loss is the weighted mean of the other clients' (computed here from
    their replies); results.json stays strict JSON."""
    honest = []

    def record(i, out):
        m = out.content["metrics"]
        if i == 0:
            m["train-loss"] = bad
        else:
            honest.append((m["train-loss"], m["num-examples"]))

    results = run_app(tmp_path, record, **{"num-server-rounds": 1})
    expect = sum(loss * n for loss, n in honest) / sum(n for _, n in honest)
    assert results["rounds"][1]["train-loss"] == pytest.approx(expect, rel=1e-9)
    assert "reported train-loss" in caplog.text and "left out of the round's metrics" in \
        caplog.text


def test_a_checkpoint_copied_into_another_runs_folder_is_refused(tmp_path):
    run_app(tmp_path, **{"run-name": "sc", "method": "scaffold", "checkpoint-every": 1,
                         "num-server-rounds": 2})
    run_app(tmp_path, **{"run-name": "base", "num-server-rounds": 2, "checkpoint-every": 1})
    base = tmp_path / "base"
    before = {name: (base / name).read_bytes() for name in ("config.json", "results.json")}
    shutil.copy(tmp_path / "sc" / "checkpoint.pt", base / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="does not belong to the run in .*base: it is run "
                       "'sc''s, and the folder is 'base'"):
        run_app(tmp_path, **{"run-name": "sc", "method": "scaffold", "checkpoint-every": 1,
                             "num-server-rounds": 3, "resume": str(base / "checkpoint.pt")})
    # the folder's own files are as they were (the refusal comes before anything is written)
    assert {name: (base / name).read_bytes() for name in before} == before


def test_a_run_folder_with_another_runs_id_refuses_its_checkpoint(tmp_path):
    """Same run-name, another run (started afresh in a second out-dir, then copied over): the
    run ids differ."""
    run_app(tmp_path / "a", **{"checkpoint-every": 1, "num-server-rounds": 2})
    run_app(tmp_path / "b", **{"checkpoint-every": 1, "num-server-rounds": 2})
    shutil.copy(tmp_path / "a" / "r" / "checkpoint.pt", tmp_path / "b" / "r" / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="its run id [0-9a-f]+ is not the folder's"):
        run_app(tmp_path / "b", **{"checkpoint-every": 1, "num-server-rounds": 3,
                                   "resume": "latest"})
    # its own checkpoint resumes
    shutil.copy(tmp_path / "a" / "r" / "checkpoint.pt", tmp_path / "a" / "r" / "keep.pt")
    assert run_app(tmp_path / "a", **{"checkpoint-every": 1, "num-server-rounds": 3,
                                      "resume": "latest"})["status"] == "complete"


# --- what the check can know before the run -----------------------------------------------------
def test_the_natural_split_needs_a_dataset_with_natural_ids():
    with pytest.raises(ConfigError, match="'partitioner' = 'natural' .* dataset 'digits' names "
                       "none: use it with femnist, celeba, shakespeare"):
        resolve({"partitioner": "natural"})
    from feddata.specs import DATASET_BY_NAME
    from run_config.schema import NATURAL_ID_DATASETS

    assert set(NATURAL_ID_DATASETS) == {n for n, s in DATASET_BY_NAME.items() if s.natural_id}


@pytest.mark.parametrize("rc, nodes, need", [
    ({"robust-aggregator": "krum", "num-malicious": 100}, 5, 103),
    ({"robust-aggregator": "bulyan", "num-malicious": 1}, 5, 7),
    ({"robust-aggregator": "multikrum", "multikrum-select": 8}, 5, 8),
])
def test_a_robust_aggregator_the_federation_cannot_feed_is_refused(rc, nodes, need, tmp_path):
    rc = {"fraction-train": 1.0, **rc}
    with pytest.raises(ConfigError, match=f"needs at least {need} replies a round, and a round "
                       f"samples {nodes} of {nodes} nodes"):
        check(rc, num_supernodes=nodes)
    check(rc, num_supernodes=need)  # enough nodes: fine
    with pytest.raises(ConfigError, match=f"needs at least {need} replies"):  # at run start too
        run_app(tmp_path, num_nodes=nodes, **rc)


def test_an_out_dir_that_cannot_hold_runs_is_refused_by_the_check(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="passes through .*file, which is a file"):
        check({"out-dir": str(a_file / "runs")}, disk=True)
    with pytest.raises(ConfigError, match="no folder can be made in /proc"):
        check({"out-dir": "/proc/fedacg-runs"}, disk=True)
    check({"out-dir": str(tmp_path / "new" / "runs")}, disk=True)
    assert list(tmp_path.iterdir()) == [a_file]  # the check made nothing that stays


def test_results_json_is_strict_json_whatever_it_is_given(tmp_path):
    """A NaN or Infinity that reaches a row (a metric, a loss) is written as null."""
    import numpy as np

    from server_app.results import write_json_atomic

    path = tmp_path / "results.json"
    write_json_atomic(path, {"a": math.nan, "b": [1.5, -math.inf], "c": np.float32("nan"),
                             "d": {"e": math.inf, "f": 2}})
    assert strict_json(path) == {"a": None, "b": [1.5, None], "c": None,
                                 "d": {"e": None, "f": 2}}


def test_more_shards_than_examples_is_a_clear_error_at_run_start(tmp_path):
    """(It was a bare ZeroDivisionError.) The check cannot know the dataset's size without
    loading it; the run's start says what to change."""
    from feddata.sources import DataSourceError

    with pytest.raises(DataSourceError, match=r"needs 4000 shards \(4 clients x "
                       r"shards-per-client = 1000\).* digits has 1437 training examples"):
        run_app(tmp_path, **{"partitioner": "shards", "shards-per-client": 1000})
    assert run_app.results["status"] == "failed"
