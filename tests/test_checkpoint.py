"""Checkpoints and resume: a run stopped after round 3 and resumed - in a new run whose nodes have
other ids - ends bitwise equal to an uninterrupted run (theta, m, sampled partitions, results)."""

import json
import os

import pytest
import torch
from flwr.app import Context, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from run_config import ConfigError, resolve
from server_app.checkpoint import CheckpointError, find_checkpoint, load_checkpoint, save_checkpoint

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

# 8 clients, half of them trained and a quarter evaluated per round (both draw from the
# sampling RNG), FedACG (momentum matters), checkpoints every 3 rounds.
BASE = {"num-server-rounds": 6, "checkpoint-every": 3, "local-iterations": 3,
        "fraction-train": 0.5, "fraction-evaluate": 0.25, "run-name": "run", "method": "fedacg"}


class Crash(Exception):
    """The server process dies."""


class CrashingGrid(FakeGrid):
    """Dies when the train instructions of round `crash_round` are sent."""

    def __init__(self, *args, crash_round: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.crash_round = crash_round

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train" and \
                messages[0].content["config"]["server-round"] == self.crash_round:
            raise Crash
        return super().send_and_receive(messages, timeout=timeout)


def run(out_dir, node_ids, crash_round=None, **overrides):
    rc = {**BASE, "out-dir": str(out_dir), **overrides}
    grid = CrashingGrid(8, client_app_handler(rc, 8), crash_round=crash_round)
    grid.node_ids = node_ids  # partition i's node id
    grid.crashed = False
    try:
        server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                  run_config=rc))
    except Crash:
        grid.crashed = True
    return grid


def partitions(grid):
    """Sampled partitions of every train / evaluate call, in sampling order."""
    return [[grid.node_ids.index(n) for n in call] for call in grid.sent if call]


def strip_seconds(rows):
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in rows]  # timings


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1  # as in conftest
    out = tmp_path_factory.mktemp("reference")
    grid = run(out, [101 + 13 * i for i in range(8)])
    return out / "run", partitions(grid)


def test_resumed_run_is_bitwise_the_uninterrupted_one(tmp_path, reference):
    ref_dir, ref_sampled = reference
    crashed = run(tmp_path, [900 - 7 * i for i in range(8)], crash_round=4)  # dies in round 4
    assert crashed.crashed and partitions(crashed) == ref_sampled[:6]
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ckpt["round"] == 3 and len(ckpt["rows"]) == 4
    # a new run, other node ids in another order; the partitions are what the seed samples
    resumed_ids = [5000 + 31 * ((5 * i) % 8) for i in range(8)]
    resumed = run(tmp_path, resumed_ids, resume="latest")

    ref_theta = torch.load(ref_dir / "final_model.pt", weights_only=True)
    theta = torch.load(tmp_path / "run" / "final_model.pt", weights_only=True)
    assert ref_theta.keys() == theta.keys()
    assert all(torch.equal(ref_theta[k], theta[k]) for k in theta)
    ref_ckpt, end = (load_checkpoint(ref_dir / "checkpoint.pt"),
                     load_checkpoint(tmp_path / "run" / "checkpoint.pt"))
    assert ref_ckpt["round"] == end["round"] == 6
    for part in ("theta", "m", "phi"):
        assert all(torch.equal(ref_ckpt["strategy"][part][k], end["strategy"][part][k])
                   for k in ref_ckpt["strategy"][part]), part
    assert max(v.abs().max() for v in end["strategy"]["m"].values()) > 0  # momentum is in play
    assert end["strategy"]["sampling-rng"] == ref_ckpt["strategy"]["sampling-rng"]
    # the same partitions sampled for training and evaluation in rounds 4-6 ...
    assert partitions(resumed) == ref_sampled[6:]
    # ... and the same results rows, rounds 0-6 (the EMA carried over)
    rows = json.loads((tmp_path / "run" / "results.json").read_text())["rounds"]
    ref_rows = json.loads((ref_dir / "results.json").read_text())["rounds"]
    assert strip_seconds(rows) == strip_seconds(ref_rows)
    assert [r["round"] for r in rows] == list(range(7))


def test_extending_a_finished_run(tmp_path, reference):
    ref_dir, _ = reference
    run(tmp_path, list(range(10, 18)), **{"num-server-rounds": 3})
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["round"] == 3  # the last round
    run(tmp_path, list(range(30, 38)), resume=str(tmp_path / "run"))  # a run folder as path
    ref_theta = torch.load(ref_dir / "final_model.pt", weights_only=True)
    theta = torch.load(tmp_path / "run" / "final_model.pt", weights_only=True)
    assert all(torch.equal(ref_theta[k], theta[k]) for k in theta)


def test_a_conflicting_config_is_refused(tmp_path, reference):
    ref_dir, _ = reference
    (tmp_path / "copy" / "run").mkdir(parents=True)  # a copy of the run, in a folder of its name
    resume = str(tmp_path / "copy" / "run" / "checkpoint.pt")
    (tmp_path / "copy" / "run" / "checkpoint.pt").write_bytes(
        (ref_dir / "checkpoint.pt").read_bytes())
    with pytest.raises(ConfigError, match=r"'lr' = 0.1 \(checkpoint: 0.05\)") as err:
        run(tmp_path, list(range(8)), resume=resume, lr=0.1, **{"num-server-rounds": 8})
    assert "'lam'" not in str(err.value)
    with pytest.raises(ConfigError) as err:  # both keys named (in the schema's key order)
        run(tmp_path, list(range(8)), resume=resume, lam=0.9, **{"num-server-rounds": 8,
                                                                  "fraction-train": 1.0})
    assert "'lam' = 0.9 (checkpoint:" in str(err.value)
    assert "'fraction-train' = 1.0 (checkpoint:" in str(err.value)
    with pytest.raises(ConfigError, match="at round 6 already; set num-server-rounds above 6"):
        run(tmp_path, list(range(8)), resume=resume)
    # operational keys may change
    run(tmp_path, list(range(8)), resume=resume, **{
        "num-server-rounds": 7, "round-timeout": 30.0, "eval-every": 2, "checkpoint-every": 0,
        "out-dir": str(tmp_path / "elsewhere")})


def test_fedacg_s_fedadam_resumes_bitwise(tmp_path):
    """fedadam-fedacg (FedACG's code's FedAdam) checkpoints m and v, unlike Flower's FedAdam."""
    adam = {"method": "fedadam-fedacg", "num-server-rounds": 3, "checkpoint-every": 2,
            "fraction-evaluate": 0.0}
    run(tmp_path / "a", list(range(8)), **adam)
    crashed = run(tmp_path / "b", list(range(8)), crash_round=3, **adam)
    assert crashed.crashed
    run(tmp_path / "b", list(range(50, 58)), resume="latest", **adam)
    ends = [load_checkpoint(tmp_path / d / "run" / "checkpoint.pt")["strategy"] for d in "ab"]
    for part in ("theta", "m", "v"):
        assert all(torch.equal(ends[0][part][k], ends[1][part][k]) for k in ends[0][part]), part
    assert max(t.abs().max() for t in ends[0]["m"].values()) > 0


def test_resume_is_refused_for_flower_strategies_and_without_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="'resume' cannot be combined with method 'fedadam'"):
        resolve({"method": "fedadam", "resume": "latest"})
    with pytest.raises(CheckpointError, match="no unfinished run without a run-name has a"):
        find_checkpoint("latest", str(tmp_path), "")
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        find_checkpoint(str(tmp_path / "nope.pt"), str(tmp_path), "")


def test_latest_with_a_run_name_is_that_runs_checkpoint(tmp_path):
    # (without a run-name: tests/test_runs.py, resume 'latest')
    for name, mtime in (("a", 100), ("b", 300), ("c", 200)):
        (tmp_path / name).mkdir()
        save_checkpoint(tmp_path / name, 1, {}, {}, [])
        os.utime(tmp_path / name / "checkpoint.pt", (mtime, mtime))
    assert find_checkpoint("latest", str(tmp_path), "c") == tmp_path / "c" / "checkpoint.pt"


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned > pwned.txt",))


def test_loading_runs_no_code(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": 1, "round": 1, "config": {}, "strategy": Payload(), "rng": {},
                "rows": []}, path)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path)
    assert not (tmp_path / "pwned.txt").exists() and not os.path.exists("pwned.txt")
    torch.save({"theta": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="not a checkpoint of this app"):
        load_checkpoint(path)


def test_a_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 3, {"seed": 0}, {"theta": {"w": torch.ones(2)}}, [{"round": 0}])

    def dies_half_way(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 6, {"seed": 0}, {"theta": {"w": torch.zeros(2)}}, [])
    monkeypatch.undo()
    ckpt = load_checkpoint(tmp_path / "checkpoint.pt")
    assert ckpt["round"] == 3 and torch.equal(ckpt["strategy"]["theta"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left


def test_a_checkpoint_from_before_the_methods_registry_resumes():
    """Its config lacks 'server-rule' and 'client-objective': they count as its method's."""
    from server_app.checkpoint import check_resumable

    cfg = resolve({"method": "fedacg", "num-server-rounds": 5})
    older = {k: v for k, v in cfg.items() if k not in ("server-rule", "client-objective")}
    check_resumable(older, cfg, 3)
    with pytest.raises(ConfigError,
                       match="'client-objective' = 'none' \\(checkpoint: 'proximal'\\)"):
        check_resumable(older, resolve({"method": "fedacg", "num-server-rounds": 5,
                                        "client-objective": "none"}), 3)


def test_a_checkpoint_naming_a_removed_key_resumes(tmp_path, reference):
    """A checkpoint written while `server-pass` was a key (run_config.schema.REMOVED_KEYS) holds
    it in its config: it is dropped when read, and the run resumes (no 'removed' error)."""
    ref_dir, _ = reference
    old = load_checkpoint(ref_dir / "checkpoint.pt")
    old["config"]["server-pass"] = "auto"  # as that version saved it
    (tmp_path / "copy" / "run").mkdir(parents=True)
    path = tmp_path / "copy" / "run" / "checkpoint.pt"
    _resign(old, path)
    assert "server-pass" not in load_checkpoint(path)["config"]
    run(tmp_path, list(range(8)), resume=str(path), **{"num-server-rounds": 7})
    assert load_checkpoint(path)["round"] == 7
    saved = json.loads((tmp_path / "copy" / "run" / "config.json").read_text())
    assert "server-pass" not in saved


def _resign(ckpt: dict, path) -> None:
    """Write `ckpt` (as load_checkpoint returned it) to `path` as the app writes checkpoints."""
    import io

    from fileio.atomic import checksum_line
    from server_app.checkpoint import CHECKSUM_PREFIX

    buffer = io.BytesIO()
    torch.save({k: v for k, v in ckpt.items() if k != "sha256"}, buffer)
    data = buffer.getbuffer()
    path.write_bytes(checksum_line(CHECKSUM_PREFIX, data) + bytes(data))


@pytest.mark.parametrize("kept", [True, False])
def test_a_resumed_runs_wall_seconds_count_the_stopped_processes(tmp_path, kept):
    """The checkpoint keeps the run's ServerApp seconds so far and a resume goes on from them,
    so the results' wall-seconds (the cells CSV's, a table's hours) is the whole run's, not its
    last process's. A checkpoint from before it kept them stands for them with its rows' round
    seconds. Both made large here, so the last process alone (well under 1,000 s) falls short."""
    run(tmp_path, list(range(8)), crash_round=4)
    path = tmp_path / "run" / "checkpoint.pt"
    ckpt = load_checkpoint(path)
    assert ckpt["round"] == 3 and ckpt["wall-seconds"] > 0
    if kept:
        ckpt["wall-seconds"] = 5000.0
    else:  # as written before the field: the rows' seconds, 2000 + 3000 in rounds 1 and 2
        del ckpt["wall-seconds"]
        ckpt["rows"][1]["seconds"], ckpt["rows"][2]["seconds"] = 2000.0, 3000.0
        ckpt["rows"][3]["seconds"] = 0.0
    _resign(ckpt, path)
    run(tmp_path, list(range(8)), resume="latest")
    summary = json.loads((tmp_path / "run" / "results.json").read_text())["summary"]
    assert summary["rounds"] == 6 and 5000.0 <= summary["wall-seconds"] < 6000.0
    assert load_checkpoint(path)["wall-seconds"] == pytest.approx(summary["wall-seconds"],
                                                                  abs=60)


@pytest.mark.parametrize("wall", [-1.0, float("nan"), float("inf"), "10", 10])
def test_a_checkpoints_wall_seconds_must_be_a_finite_float(tmp_path, reference, wall):
    ref_dir, _ = reference
    ckpt = load_checkpoint(ref_dir / "checkpoint.pt")
    ckpt["wall-seconds"] = wall
    path = tmp_path / "checkpoint.pt"
    _resign(ckpt, path)
    with pytest.raises(CheckpointError, match="its wall-seconds is"):
        load_checkpoint(path)
