"""The run folder of the real ServerApp + ClientApp (in-process): traffic, clients, summary, plots,
and dynamic clients."""

import csv
import json
import os
from pathlib import Path

import pytest
from flwr.app import ArrayRecord, Context, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from feddata import DataSettings, load_client_data
from strategies.population import ClientPopulation
from models import build_model
from run_config import resolve
from test_reporting import assert_plot


def array_bytes(content):
    return sum(rec.count_bytes() for rec in content.array_records.values())


def run_app(out, num_nodes, wrap=None, **overrides):
    """Run the ServerApp; `wrap(handler)` may replace the client handler. Returns results.json
    and the client-side log of (round, node, message type, bytes received, bytes sent, config)."""
    rc = {"out-dir": str(out), "run-name": "run", "local-iterations": 1, **overrides}
    real = client_app_handler(rc, num_nodes)
    seen = []

    def handler(i, msg):
        reply = (wrap or (lambda h: h))(real)(i, msg)  # the ClientApp's reply Message
        if msg.metadata.message_type != "query":
            seen.append({"round": msg.content["config"]["server-round"], "node": i,
                         "type": msg.metadata.message_type, "down": array_bytes(msg.content),
                         "up": array_bytes(reply.content), "config": dict(msg.content["config"]),
                         "num-examples": reply.content["metrics"]["num-examples"]})
        return reply

    server.main(FakeGrid(num_nodes, handler),
                Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    return json.loads((out / "run" / "results.json").read_text()), seen


def test_bytes_per_round_are_the_arrays_sent_and_received(tmp_path):
    state = build_model("cnn", (1, 8, 8), 10).state_dict()
    model_bytes = ArrayRecord(state).count_bytes()
    raw = sum(t.numel() * t.element_size() for t in state.values())
    assert raw < model_bytes < 1.01 * raw  # the arrays themselves, plus npy headers and key names
    per_method = {}
    for method in ("fedavg", "fedacg"):
        results, seen = run_app(tmp_path / method, 6, method=method, **{"num-server-rounds": 3})
        rows = results["rounds"][1:]
        down_total = up_total = 0
        for row in rows:
            msgs = [s for s in seen if s["round"] == row["round"] and s["type"] == "train"]
            assert row["clients-sampled"] == row["clients-replied"] == len(msgs) == 2
            assert row["clients-failed"] == 0
            # what the clients received and sent, counted on their side ...
            assert row["bytes-down"] == sum(s["down"] for s in msgs)
            assert row["bytes-up"] == sum(s["up"] for s in msgs)
            # ... is the model once per client each way
            assert row["bytes-down"] == row["bytes-up"] == 2 * model_bytes
            down_total += row["bytes-down"]
            up_total += row["bytes-up"]
            assert (row["bytes-down-total"], row["bytes-up-total"]) == (down_total, up_total)
        summary = results["summary"]
        assert summary["bytes-total"] == down_total + up_total == 3 * 4 * model_bytes
        per_method[method] = [(r["bytes-down"], r["bytes-up"]) for r in rows]
    assert per_method["fedacg"] == per_method["fedavg"]  # the look-ahead costs no extra bytes


def test_failed_clients_are_counted(tmp_path):
    def failing(real):
        def handler(i, msg):
            if i == 2 and msg.metadata.message_type == "train":
                raise RuntimeError("out of memory")
            return real(i, msg)
        return handler

    results, _ = run_app(tmp_path, 4, wrap=failing,
                         **{"num-server-rounds": 2, "fraction-train": 1.0})
    model_bytes = ArrayRecord(build_model("cnn", (1, 8, 8), 10).state_dict()).count_bytes()
    for row in results["rounds"][1:]:
        assert (row["clients-sampled"], row["clients-replied"], row["clients-failed"]) == (4, 3, 1)
        assert row["train-replies"] == 3
        assert (row["bytes-down"], row["bytes-up"]) == (4 * model_bytes, 3 * model_bytes)


def test_run_folder_summary_csv_and_plots(tmp_path):
    results, _ = run_app(tmp_path, 4, **{"num-server-rounds": 4, "acc-at-rounds": "2,4,10",
                                         "target-accs": "1,99.9"})
    run = tmp_path / "run"
    rows, summary = results["rounds"], results["summary"]
    assert summary["complete"] is True
    ema = {r["round"]: r["ema-acc"] for r in rows[1:]}
    assert summary["acc-at-round"] == {"2": ema[2], "4": ema[4], "10": None}
    assert summary["rounds-to-acc"] == {"1": 1, "99.9": "4+"}
    assert summary["wall-seconds"] > 0 and summary["rounds"] == 4
    with open(run / "metrics.csv") as f:
        table = list(csv.DictReader(f))
    assert [int(r["round"]) for r in table] == [0, 1, 2, 3, 4]
    assert float(table[3]["ema-acc"]) == pytest.approx(ema[3])
    assert int(table[4]["bytes-up-total"]) == rows[4]["bytes-up-total"]
    for name in ("accuracy.png", "accuracy_vs_bytes.png"):
        assert_plot(run / name)
    assert json.loads((run / "config.json").read_text())["num-server-rounds"] == 4
    assert (run / "final_model.pt").stat().st_size > 0


def test_run_folder_summary_holds_the_last_rounds_mean_and_the_code_version(tmp_path):
    """The summary's last10-acc is the mean test accuracy of the last 10 rounds (here all 4:
    there are fewer); code-version is this checkout's commit as git itself says it, and dirty
    as `git status` says (tracked files only)."""
    import shutil
    import subprocess

    results, _ = run_app(tmp_path, 4, **{"num-server-rounds": 4})
    accs = [r["test-acc"] for r in results["rounds"][1:]]
    assert results["summary"]["last10-acc"] == pytest.approx(sum(accs) / 4, abs=1e-15)
    version = results["code-version"]
    assert set(version) == {"commit", "dirty", "diff-sha256", "files-sha256"}
    root = Path(server.__file__).resolve().parents[1]
    git = shutil.which("git")
    if git is None or subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"],
                                     capture_output=True).returncode != 0:
        pytest.skip("no git, or not a git checkout: files-sha256 then (tested below)")
    head = subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    status = subprocess.run([git, "-C", str(root), "status", "--porcelain",
                             "--untracked-files=no"], capture_output=True, text=True,
                            check=True).stdout
    assert version["commit"] == head and version["dirty"] is bool(status.strip())
    assert version["files-sha256"] is None


def fake_git(folder: Path, head: str, refs: dict[str, str] | None = None,
             packed: str | None = None) -> Path:
    """A `.git` folder of HEAD, loose refs and packed-refs only (no objects: git itself could
    not read it, so dirty stays unknown)."""
    git_dir = folder / ".git"
    (git_dir / "refs" / "heads").mkdir(parents=True)
    (git_dir / "HEAD").write_text(head + "\n")
    for name, value in (refs or {}).items():
        (git_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (git_dir / name).write_text(value + "\n")
    if packed is not None:
        (git_dir / "packed-refs").write_text(packed)
    return git_dir


A40, B40 = "a1" * 20, "b2" * 20


@pytest.mark.parametrize("case, commit", [
    ("loose-ref", A40), ("packed-ref", B40), ("loose-over-packed", A40), ("detached", B40),
    ("worktree", A40), ("ref-out-of-git", None), ("ref-not-a-commit", None),
    ("dot-git-a-link", None), ("head-a-link", None), ("no-git", None),
    ("no-git-no-pyproject", None)])
def test_the_commit_is_read_from_dot_git_without_running_git(tmp_path, case, commit):
    """reporting.code_version reads HEAD, the loose ref or packed-refs itself (and a worktree's
    `.git` file and commondir); a ref outside refs/, a value that is no commit id or a link is
    no commit, and the files are hashed instead (in an app's folder: one with pyproject.toml;
    elsewhere, site-packages, nothing is known)."""
    from reporting.code_version import code_version

    app = tmp_path / "app"
    app.mkdir()
    (app / "a.py").write_text("x = 1\n")
    if case != "no-git-no-pyproject":
        (app / "pyproject.toml").write_text("[project]\n")
    packed = f"# pack-refs with: peeled\n{B40} refs/heads/main\n"
    if case == "loose-ref":
        fake_git(app, "ref: refs/heads/main", {"refs/heads/main": A40})
    elif case == "packed-ref":
        fake_git(app, "ref: refs/heads/main", packed=packed)
    elif case == "loose-over-packed":
        fake_git(app, "ref: refs/heads/main", {"refs/heads/main": A40}, packed=packed)
    elif case == "detached":
        fake_git(app, B40)
    elif case == "worktree":
        main = fake_git(tmp_path / "main", "ref: refs/heads/other", {"refs/heads/wt": A40})
        (main / "worktrees" / "app").mkdir(parents=True)
        (main / "worktrees" / "app" / "HEAD").write_text("ref: refs/heads/wt\n")
        (main / "worktrees" / "app" / "commondir").write_text("../..\n")
        (app / ".git").write_text(f"gitdir: {main / 'worktrees' / 'app'}\n")
    elif case == "ref-out-of-git":
        (tmp_path / "secret").write_text(A40)
        fake_git(app, "ref: refs/../../../secret")
    elif case == "ref-not-a-commit":
        fake_git(app, "ref: refs/heads/main", {"refs/heads/main": "$(reboot)"})
    elif case == "dot-git-a-link":
        fake_git(tmp_path / "elsewhere", B40)
        os.symlink(tmp_path / "elsewhere" / ".git", app / ".git")
    elif case == "head-a-link":
        git_dir = fake_git(app, B40)
        (tmp_path / "head").write_text(B40)
        (git_dir / "HEAD").unlink()
        os.symlink(tmp_path / "head", git_dir / "HEAD")
    version = code_version(app)
    assert version["commit"] == commit
    if commit or case == "no-git-no-pyproject":
        assert version["dirty"] is None and version["files-sha256"] is None  # (git cannot say)
    else:
        assert version["dirty"] is None and len(version["files-sha256"]) == 64


def test_a_missing_git_leaves_dirty_unknown_and_fails_nothing(tmp_path, monkeypatch):
    import shutil

    from reporting.code_version import code_version, version_label

    app = tmp_path / "app"
    fake_git(app, "ref: refs/heads/main", {"refs/heads/main": A40})
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    version = code_version(app)
    assert version == {"commit": A40, "dirty": None, "diff-sha256": None, "files-sha256": None}
    assert version_label(version) == A40 + "+dirty?"


def test_a_real_checkout_is_dirty_exactly_while_a_tracked_file_differs(tmp_path):
    """In a git repository made here: clean after the commit; dirty, with one hash per change,
    while a tracked file differs; an untracked file does not count; clean again when undone;
    unknown when every user may write the folder (git is then not run there)."""
    import shutil
    import subprocess

    from reporting.code_version import code_version

    git = shutil.which("git")
    if git is None:
        pytest.skip("no git")
    app = tmp_path / "app"
    app.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    (app / "a.py").write_text("x = 1\n")
    for cmd in (["init", "-q"], ["add", "a.py"], ["commit", "-qm", "one"]):
        subprocess.run([git, "-C", str(app), *cmd], env=env, check=True, capture_output=True)
    head = subprocess.run([git, "-C", str(app), "rev-parse", "HEAD"], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()
    assert code_version(app) == {"commit": head, "dirty": False, "diff-sha256": None,
                                 "files-sha256": None}
    (app / "new.py").write_text("untracked\n")
    assert code_version(app)["dirty"] is False
    (app / "a.py").write_text("x = 2\n")
    two = code_version(app)
    (app / "a.py").write_text("x = 3\n")
    three = code_version(app)
    assert two["dirty"] is three["dirty"] is True and two["commit"] == head
    assert len(two["diff-sha256"]) == 64 and two["diff-sha256"] != three["diff-sha256"]
    (app / "a.py").write_text("x = 1\n")
    assert code_version(app)["dirty"] is False
    os.chmod(app, 0o777)  # anyone could plant a config that git would run: git is not run
    try:
        assert code_version(app) == {"commit": head, "dirty": None, "diff-sha256": None,
                                     "files-sha256": None}
    finally:
        os.chmod(app, 0o755)


def test_the_files_hash_covers_the_apps_py_and_toml_files_and_follows_no_link(tmp_path):
    from reporting.code_version import files_sha256

    app = tmp_path / "fab"
    (app / "pkg" / "__pycache__").mkdir(parents=True)
    (app / ".hidden").mkdir()
    (app / "pkg" / "m.py").write_text("a = 1\n")
    (app / "pyproject.toml").write_text("[project]\n")
    (app / "README.md").write_text("text\n")
    outside = tmp_path / "outside.py"
    outside.write_text("b = 1\n")
    os.symlink(outside, app / "pkg" / "linked.py")
    first = files_sha256(app)
    for path, text in ((app / "README.md", "other\n"), (outside, "b = 2\n"),
                       (app / "pkg" / "__pycache__" / "m.py", "cached\n"),
                       (app / ".hidden" / "h.py", "hidden\n")):
        path.write_text(text)
        assert files_sha256(app) == first, path  # not the app's code
    (app / "pkg" / "m.py").write_text("a = 2\n")
    assert files_sha256(app) != first
    (app / "pkg" / "m.py").write_text("a = 1\n")
    (app / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert files_sha256(app) != first


def test_dynamic_clients_train_on_replaced_partitions(tmp_path):
    rc = {"num-server-rounds": 5, "fraction-train": 1.0, "partitioner": "lda", "lda-min-size": 5,
          "dynamic-replace-prob": 0.5, "dynamic-replace-every": 2, "dynamic-pool-factor": 2.0,
          "seed": 1}
    results, seen = run_app(tmp_path, 6, **rc)
    expected = ClientPopulation(0.5, 2, 2.0, seed=1)
    data = DataSettings.from_config(resolve({**rc, "local-iterations": 1}))
    trained = {}
    for s in seen:
        assert s["config"]["num-partitions"] == 12  # the pool: 2 x 6 clients
        assert s["config"]["partition-id"] == expected.assignment(s["round"], 6)[s["node"]]
        # the client trained on that partition (LDA partitions differ in size)
        pid = s["config"]["partition-id"]
        assert s["num-examples"] == len(load_client_data(data, pid, 12).train_y)
        trained.setdefault(s["round"], {})[s["node"]] = pid
    assert trained[1] == trained[2] == {i: i for i in range(6)}  # stage 0: slot i, partition i
    assert trained[3] == trained[4] and trained[5] != trained[3]
    changed = sum(trained[3][i] != trained[1][i] for i in range(6))
    assert 0 < changed < 6 and changed == expected.replaced(3, 6)
    assert all(trained[3][i] >= 6 for i in range(6) if trained[3][i] != trained[1][i])  # fresh ones
    assert results["summary"]["complete"]


def test_without_dynamic_clients_nodes_keep_their_partition(tmp_path):
    _, seen = run_app(tmp_path, 4, **{"num-server-rounds": 2, "fraction-train": 1.0})
    assert all("partition-id" not in s["config"] for s in seen)
