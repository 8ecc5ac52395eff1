"""Every bad input is refused with an error that names it, or repaired (docs/security.md)."""

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from fakegrid import FakeGrid
from feddata import disk_cache
from feddata import DataSettings
from feddata.disk_cache import cache_file, cache_key, load_prepared_partition
from strategies.population import ClientPopulation
from run_config import ConfigError, resolve
from server_app.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from strategy_helpers import LookaheadFedAvg, random_state, reply

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))
import credentials  # noqa: E402


def small_checkpoint(tmp_path) -> Path:
    state = random_state(3)
    strategy_state = {"theta": state, "m": state, "phi": state, "sampling-rng": (3, (1, 2), None)}
    return save_checkpoint(tmp_path, 4, {"seed": 0}, strategy_state, [{"round": 0}])


def test_an_empty_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="is empty .0 bytes."):
        load_checkpoint(path)


def test_a_checkpoint_with_flipped_bytes_is_refused(tmp_path):
    path = small_checkpoint(tmp_path)
    assert load_checkpoint(path)["round"] == 4  # intact: loads
    raw = bytearray(path.read_bytes())
    for offset in (len(raw) // 2, len(raw) - 30):  # inside the tensors, inside the zip index
        damaged = bytearray(raw)
        damaged[offset] ^= 0x01
        path.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointError, match="damaged: its SHA-256 does not match"):
            load_checkpoint(path)
    path.write_bytes(bytes(raw[:-100]))  # cut short
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(path)


def test_seed_is_bounded_by_the_range_the_clients_can_seed():
    top = resolve({"seed": 100_000_000})["seed"]
    with pytest.raises(ConfigError, match="'seed' = 100000001: out of range"):
        resolve({"seed": 100_000_001})
    # the ClientApp's batch-order seed at the bound, a million rounds and partitions, fits torch
    torch.Generator().manual_seed((top * 1_000_003 + 10**6) * 100_003 + 10**6)
    with pytest.raises((RuntimeError, ValueError)):  # the old limit of about 1.85e8
        torch.Generator().manual_seed((2 * 10**8 * 1_000_003 + 1) * 100_003)


def train_message(**changes) -> Message:
    """A train message as the server sends it: the model, `lr` and `server-round` (the local
    settings come from the run config, client_app/settings.py)."""
    from models import build_model

    model = build_model("cnn", (1, 8, 8), 10, 2)
    config = ConfigRecord({"lr": 0.05, "server-round": 1, **changes})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "config": config}),
                   dst_node_id=1, message_type="train")


def client_context(run_config: dict) -> Context:
    return Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": 2},
                   state=RecordDict(), run_config=run_config)


@pytest.fixture
def no_data_loading(monkeypatch):
    """The ClientApp's data loader fails the test if called: what is refused "at once" is
    refused before any data is loaded (a check on what happens, not on how long it took)."""
    import client_app.app

    def loaded(*args, **kwargs):
        raise AssertionError("the ClientApp loaded its data before refusing the message")

    monkeypatch.setattr(client_app.app, "load_prepared_partition", loaded)


@pytest.mark.parametrize("key,value", [("lr", float("nan")), ("lr", -0.1),
                                       ("server-round", -1), ("server-round", 10**12)])
def test_the_client_app_refuses_a_bad_broadcast_at_once(key, value, no_data_loading):
    from client_app.app import train

    with pytest.raises(ValueError, match=f"refused the server's train config: .*'{key}'"):
        train(train_message(**{key: value}), client_context({}))


@pytest.mark.parametrize("key,value", [("batch-size", -4), ("local-epochs", 10**9),
                                       ("local-iterations", 10**12)])
def test_the_client_app_refuses_bad_local_settings_at_once(key, value, no_data_loading):
    """A run config that would make the local loop run for ever (or never) fails the message at
    once, naming the key, before any data is loaded."""
    from client_app.app import train

    with pytest.raises(ConfigError, match=f"'{key}'"):
        train(train_message(), client_context({key: value}))


def test_a_killed_cache_write_leaves_no_tmp_file(tmp_path):
    cfg = DataSettings.from_config(resolve({}))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tmp_path / "cache"
    folder.mkdir()
    name = cache_file(folder, cache_key(cfg, 0, 3)).name
    # fileio.atomic's temporary names: .<name>.<pid>.<8 hex>.tmp
    killed = folder / f".{name}.{dead.pid}.abcd1234.tmp"  # its writer is gone
    old = folder / f".{name}.1.0e0f5678.tmp"  # pid 1 is alive, but the file is an hour old
    live = folder / f".{name}.1.1a2b9012.tmp"  # a write in progress by a live process
    for f in (killed, old, live):
        f.write_bytes(b"half a file")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    load_prepared_partition(cfg, 0, 3, folder)
    assert not killed.exists() and not old.exists()
    assert live.exists()
    assert [p.suffix for p in folder.iterdir()].count(".pt") == 1


def test_a_cache_file_with_the_right_key_but_missing_tensors_is_rebuilt(tmp_path):
    cfg = DataSettings.from_config(resolve({"seed": 5}))
    good = load_prepared_partition(cfg, 1, 3, tmp_path)
    path = cache_file(tmp_path, cache_key(cfg, 1, 3))
    blob = torch.load(path, weights_only=True)
    del blob["train_x"]
    torch.save(blob, path)
    disk_cache._memory.clear()
    again = load_prepared_partition(cfg, 1, 3, tmp_path)
    assert torch.equal(again.train_x, good.train_x)
    assert "train_x" in torch.load(path, weights_only=True)  # the file was repaired


def test_private_keys_are_0600_from_the_start(tmp_path, monkeypatch):
    # with chmod disabled, the modes are those the files were created with
    monkeypatch.setattr(credentials.os, "chmod", lambda *a, **k: None)
    old = os.umask(0o022)
    try:
        files = credentials.make_tls(tmp_path, [credentials.parse_san("DNS:localhost")], 1, False)
        files += credentials.make_node_key(tmp_path, "node", False)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    assert modes == {"ca.key": 0o600, "server.key": 0o600, "node": 0o600,
                     "ca.crt": 0o644, "server.pem": 0o644, "node.pub": 0o644}


@pytest.fixture
def world_tmp():
    """A folder an unprivileged user can reach (pytest's tmp_path is under a 0700 folder)."""
    folder = Path(tempfile.mkdtemp(prefix="make-credentials-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_make_credentials_keeps_secrets_0600_when_not_root(world_tmp):
    out = world_tmp / "creds"
    out.mkdir()
    names = ["ca.crt", "server.pem", "server.key", "superexec.secret", "supernode-0", "supernode-1"]
    for n in names:  # made earlier (the script keeps existing files), readable by everyone
        (out / n).write_text("x")
        (out / n).chmod(0o644)
    cmd = ["bash", str(ROOT / "docker" / "make-credentials.sh"), "2"]
    if os.geteuid() == 0:  # run it as an ordinary user
        if not shutil.which("setpriv"):
            pytest.skip("needs setpriv to run the script as a non-root user")
        for p in [out, *out.iterdir()]:
            os.chown(p, 65534, 65534)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    res = subprocess.run(cmd, env={**os.environ, "CREDENTIALS_DIR": str(out)},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sudo chown 49999:49999" in res.stdout
    modes = {n: stat.S_IMODE((out / n).stat().st_mode) for n in names}
    private = ("server.key", "superexec.secret", "supernode-0", "supernode-1")
    assert all(modes[n] == 0o600 for n in private), modes


def test_bad_node_reports_are_refused_and_the_run_goes_on(caplog):
    # dynamic clients: nodes say which slot they hold; node 0 names a partition out of range,
    # node 1 a huge num-partitions; both are refused and never sampled, the others train.
    reports = {0: (99, 4), 1: (1, 30_000_000), 2: (2, 4), 3: (3, 4)}
    trained = []

    def handler(i, msg):
        if msg.metadata.message_type == "query":
            pid, nparts = reports[i]
            return RecordDict({"metrics": MetricRecord({"partition-id": pid,
                                                        "num-partitions": nparts})})
        trained.append(i)
        phi = msg.content["arrays"].to_torch_state_dict()
        assert 0 <= msg.content["config"]["partition-id"] < msg.content["config"]["num-partitions"]
        return reply({k: v + 0.01 for k, v in phi.items()}, 10)

    strategy = LookaheadFedAvg(lam=0.5, lookahead=True, fraction_train=1.0, min_train_nodes=2,
                               fraction_evaluate=0.0, identify_nodes=True,
                               population=ClientPopulation(0.5, 1, 2.0, seed=0))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        result = strategy.start(grid=FakeGrid(4, handler),
                                initial_arrays=ArrayRecord(random_state(1)), num_rounds=2)
    assert set(trained) == {2, 3} and len(trained) == 4
    text = caplog.text
    assert "its client-id = 99 is outside [0, num-clients = 4)" in text
    assert "its num-clients = 30000000 is outside [1, 1000000]" in text
    theta = result.arrays.to_torch_state_dict()
    assert all(torch.isfinite(v).all() for v in theta.values())


# --- a server state that is no longer finite stops the run as failed -------------------------
def test_absurd_dp_values_are_refused_by_the_config_check():
    from run_config.check import main as check_main

    for key in ("dp-noise-multiplier", "dp-clipping-norm"):
        with pytest.raises(ConfigError, match=f"'{key}' = 1e\\+308: out of range; allowed: "
                           r"float in \[0, 1000\]"):
            resolve({"dp-noise-multiplier": 1e308, "dp-clipping-norm": 1e308, key: 1e308,
                     **({"dp-noise-multiplier": 1.0} if key == "dp-clipping-norm" else
                        {"dp-clipping-norm": 1.0})})
    assert check_main(["-q", "-c", "dp-noise-multiplier=1e308 dp-clipping-norm=1e308"]) == 1
    top = resolve({"dp-noise-multiplier": 1e3, "dp-clipping-norm": 1e3})
    assert top["dp-noise-multiplier"] * top["dp-clipping-norm"] == 1e6  # std <= 1e6 / replies


def test_an_overflowing_server_update_stops_the_strategy_naming_the_state():
    """Real float32 overflow: finite updates of 1e10 (norms well inside float32) times a server
    step of 1e30 make m and theta Inf in round 1; the influence limits are off."""
    from strategies.state_check import ServerStateNotFinite

    def handler(i, msg):
        phi = msg.content["arrays"].to_torch_state_dict()
        return reply({k: v + 1e10 for k, v in phi.items()}, 10)

    strategy = LookaheadFedAvg(lam=0.5, eta=1e30, fraction_train=1.0, min_train_nodes=2,
                               fraction_evaluate=0.0, update_norm_ratio=0.0,
                               num_examples_ratio=0.0)
    with pytest.raises(ServerStateNotFinite, match=r"not finite after the update of round 1: "
                       r"NaN or Inf in 'theta' \(conv, fc.weight, fc.bias\); 'm' \(conv"):
        strategy.start(grid=FakeGrid(2, handler), initial_arrays=ArrayRecord(random_state(1)),
                       num_rounds=3)


def test_nonfinite_parts_names_every_tensor_and_reads_nested_state():
    import numpy as np

    from strategies.state_check import check_server_state, nonfinite_parts

    ok = torch.ones(3)
    state = {"theta": {"a": ok, "b": torch.tensor([1.0, float("nan")])}, "m": {"a": ok},
             "fedvarp": {"y": torch.tensor([float("inf")]), "clients": [1, 2]},
             "m_t": {"w": np.array([np.inf])}, "count": torch.tensor([3])}
    assert nonfinite_parts(state) == {"theta": ["b"], "fedvarp": ["y"], "m_t": ["w"]}
    check_server_state({"theta": {"a": ok}, "count": torch.tensor([3])}, "now")  # finite: quiet
    with pytest.raises(RuntimeError, match="lower them; the server step eta = 1.0"):
        check_server_state(state, "now", dp_noise_multiplier=1.0, dp_clipping_norm=2.0, eta=1.0)


@pytest.mark.parametrize("method,poisoned", [("fedacg", "m"), ("scaffold", "scaffold-c")])
def test_a_run_whose_server_state_becomes_nonfinite_fails_and_keeps_its_finite_results(
        tmp_path, monkeypatch, method, poisoned):
    """A server update that overflows in round 2 (simulated: the rule's own state is set to Inf
    after its real update; theta stays finite, so only the state check can see it): the run
    stops as failed, saying the round, the state and what to change; results.json keeps rounds
    0-1, no final model is written, the checkpoint of round 1 stays."""
    import json

    import methods
    from inprocess import run_in_process
    from strategies.state_check import ServerStateNotFinite

    rule_class = methods.SERVER_RULES[resolve({"method": method})["server-rule"]]
    real = rule_class.aggregate

    def overflowing(self, server_round, good, phi, up):
        out = real(self, server_round, good, phi, up)
        if server_round == 2:
            state = self.m if poisoned == "m" else self.c
            next(iter(state.values())).fill_(float("inf"))
        return out

    monkeypatch.setattr(rule_class, "aggregate", overflowing)
    rc = {"method": method, "model": "mlp", "num-server-rounds": 4, "local-iterations": 1,
          "checkpoint-every": 1, "run-name": "r", "out-dir": str(tmp_path)}
    with pytest.raises(ServerStateNotFinite, match=f"after the update of round 2: NaN or Inf in "
                       f"'{poisoned}' .* the server step eta = "):
        run_in_process(rc, 4)
    run_dir = tmp_path / "r"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "failed" and results["summary"]["complete"] is False
    assert f"after the update of round 2: NaN or Inf in '{poisoned}'" in results["error"]
    assert [r["round"] for r in results["rounds"]] == [0, 1]
    assert not (run_dir / "final_model.pt").exists()
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")
    assert ckpt["round"] == 1
    assert all(torch.isfinite(v).all() for part in ("theta", poisoned)
               for v in ckpt["strategy"][part].values())


def test_resuming_a_checkpoint_whose_state_is_not_finite_stops_at_once():
    """A checkpoint written before the check (the 1e308 DP run wrote one with theta NaN)."""
    from strategies.state_check import ServerStateNotFinite

    state = random_state(3)
    broken = {**state, "fc.bias": torch.full((5,), float("nan"))}
    strategy = LookaheadFedAvg(fraction_train=1.0, min_train_nodes=2, fraction_evaluate=0.0)
    strategy.load_state_dict({"theta": broken, "m": state, "phi": state,
                              "sampling-rng": strategy.nodes.state_dict()["sampling-rng"]})
    sent = []
    with pytest.raises(ServerStateNotFinite, match=r"in the checkpoint of round 4: NaN or Inf "
                       r"in 'theta' \(fc.bias\)"):
        strategy.start(grid=FakeGrid(2, lambda i, msg: sent.append(i)),
                       initial_arrays=ArrayRecord(state), num_rounds=6, first_round=5)
    assert not sent  # nothing was broadcast


# --- run-name and out-dir: refused by the check where it can tell, else at the run's start ---
@pytest.mark.parametrize("changes,match", [
    ({"run-name": "x" * 300}, r"'run-name' is 300 bytes long .*at most 255 bytes"),
    ({"run-name": "é" * 128}, r"'run-name' is 256 bytes long"),
    ({"run-name": "a\x00b"}, r"'run-name' = 'a\\x00b' must be a plain folder name .*NUL"),
    ({"run-name": "a\nb"}, "'run-name' = 'a\\\\nb' must be a plain folder name"),
    ({"out-dir": "/tmp/a\x00b"}, r"'out-dir' = '/tmp/a\\x00b' holds a control character"),
])
def test_run_names_and_out_dirs_no_folder_can_have_are_refused_by_the_check(changes, match):
    from run_config.check import main as check_main

    with pytest.raises(ConfigError, match=match):
        resolve(changes)
    key, value = next(iter(changes.items()))
    toml_value = value.replace("\x00", "\\u0000").replace("\n", "\\n")
    assert check_main(["-q", "-c", f'{key}="{toml_value}"']) == 1
    assert resolve({"run-name": "x" * 255})["run-name"] == "x" * 255


def test_an_out_dir_or_run_folder_that_cannot_be_made_is_an_error_naming_the_key(tmp_path):
    from inprocess import run_in_process

    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cases = [({"out-dir": str(a_file)}, f"'out-dir' = '{a_file}': cannot make the folder "
              f"{a_file}: a file of that name is in the way. Choose another out-dir"),
             ({"out-dir": str(a_file / "runs")}, f"'out-dir' = '{a_file / 'runs'}': cannot make "
              "the folder .*: Not a directory"),
             ({"out-dir": str(tmp_path), "run-name": "a-file"}, "'run-name' = 'a-file': cannot "
              "make the folder .*a file of that name is in the way")]
    for changes, match in cases:
        with pytest.raises(ConfigError, match=match):
            run_in_process({"num-server-rounds": 1, **changes}, 2)
    assert a_file.read_text() == "not a folder"


def test_resuming_with_another_run_name_is_refused_and_an_empty_one_keeps_the_runs_own(
        tmp_path):
    """The resumed run goes on in its own folder: a run-name other than its own would be
    written into that folder's config.json and results.json (mislabelled)."""
    import json

    from inprocess import run_in_process

    rc = {"model": "mlp", "num-server-rounds": 1, "local-iterations": 1, "checkpoint-every": 1,
          "out-dir": str(tmp_path), "run-name": "exp1"}
    run_in_process(rc, 2)
    run_dir = tmp_path / "exp1"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.suffix == ".json"}
    more = {"num-server-rounds": 2, "resume": str(run_dir)}
    with pytest.raises(ConfigError, match=rf"'run-name' = 'exp2': resume = '{run_dir}' continues "
                       rf"the run in {run_dir} \(run-name 'exp1'\).*Drop run-name"):
        run_in_process({**rc, **more, "run-name": "exp2"}, 2)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.suffix == ".json"} == before
    run_in_process({**rc, **more, "run-name": ""}, 2)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "complete" and len(results["rounds"]) == 3
    assert results["config"]["run-name"] == "exp1"
    assert json.loads((run_dir / "config.json").read_text())["run-name"] == "exp1"
    assert load_checkpoint(run_dir / "checkpoint.pt")["config"]["run-name"] == "exp1"
