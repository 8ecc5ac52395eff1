"""The field test (issue 50): a secured deployment on this machine, as real processes, through a
long run in which what happens in the field happens.

deploy/'s scripts through experiments.deployment.LocalDeployment: the SuperLink (TLS, SuperNode
authentication, `--database` a state file), the fleet proxy (nginx) and NODES SuperNodes, each
on its own partition of digits (`--client-id i --num-clients N`) and its own cache folder, with
OMP_NUM_THREADS=1. One run of ROUNDS rounds of FedACG on the MLP at partial participation
(PER_ROUND nodes a round), submitted with `flwr run` (its ClientApp the real one inside
tests/faulty_client_app.py, for the straggler). During it, driven by the rounds in results.json:

* SuperNodes killed (SIGKILL: their SuperExec and ClientApps with them) at random (seeded RNG)
  and restarted a round later with the same key and options;
* the SuperLink restarted on its database (its whole process tree stopped, as a service
  manager stops it: the ServerApp with it), then the run resumed from its checkpoint;
* JOINERS new nodes joining (registered while the run goes on), one node that is refused (its
  num-clients is not the run's) and one whose key was never registered (refused by the
  SuperLink: it never becomes a node);
* one straggler: the first node trained in round STRAGGLE sleeps past `round-timeout`;
* the ServerApp process killed mid-round (SIGKILL) and the run resumed from its checkpoint.

After it: every round 0..ROUNDS in results.json exactly once; the rows the resumed runs kept are
bitwise the checkpoint's, and each resume said which checkpoint it continued from; the
straggler's timeout, the refusal and the failures counted in the rows; the SuperLink's resident
memory and open files flat (the restarted SuperLink, first third of its samples against the last
third, a generous bound). Flower 1.41 does not restart the ServerApp of a run that was running
when the SuperLink stopped: the run ends failed in `flwr ls` and is resumed by submitting it
again with resume='latest' (docs/deployment.md#in-the-field), which the test does.

Each SuperNode announces Flower's shortest heartbeat interval (test_deployment_faults.SUPERNODE,
put first on PATH as `flower-supernode` for deploy/supernode.sh), so that the SuperLink notices a
killed node after ~20 s instead of ~60 s. Sizes are the constants below (FIELD_NODES and
FIELD_ROUNDS in the environment override them for a quick try). Marked `long` and `slow`; every
process is stopped by its process tree, also when the test fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.deployment import LocalDeployment, healthy
from test_deployment_faults import SUPERNODE
from test_faults_simulation import faulty_app_copy

pytestmark = [pytest.mark.slow, pytest.mark.long]

NODES = int(os.environ.get("FIELD_NODES", "20"))  # SuperNodes at the start
JOINERS = 2  # nodes that join mid-run (client ids NODES, NODES + 1)
N = NODES + JOINERS  # the run's num-clients
ROUNDS = int(os.environ.get("FIELD_ROUNDS", "30"))
PER_ROUND = 5  # nodes sampled a round (fraction-train = PER_ROUND / NODES)
ROUND_TIMEOUT = 60  # the run's round-timeout (s); the straggler sleeps 10 s longer
KILL_CHANCE = 0.25  # after each round, the chance that a random node is killed
SEED = 50
# the events, after the checkpoint of these rounds (each in a round of its own)
SUPERLINK_RESTART = max(2, ROUNDS // 6)
JOIN = SUPERLINK_RESTART + 1 + ROUNDS // 10
STRAGGLE = JOIN + 2  # the round in which the straggler trains
SERVERAPP_KILL = max(STRAGGLE + 1, ROUNDS // 2)
assert SERVERAPP_KILL + 2 <= ROUNDS, "FIELD_ROUNDS too small for the events"


def rows_of(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["rounds"]
    except (OSError, ValueError, KeyError):
        return []


def read_status(path: Path, since: float = 0.0) -> str | None:
    """results.json's status, if written after `since` (time.time())."""
    try:
        if path.stat().st_mtime < since:
            return None
        return json.loads(path.read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def checkpoint_round(path: Path) -> int | None:
    from server_app.checkpoint import load_checkpoint

    try:
        return load_checkpoint(path)["round"]
    except Exception:
        return None


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process now."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        out[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
    return out


def serverapps_under(root: int) -> list[int]:
    """The `flwr-serverapp` processes under `root` (the SuperLink)."""
    table = processes()
    found = []
    for pid, (_, cmd) in table.items():
        up = pid
        while up in table and up != root:
            up = table[up][0]
        if up == root and "flwr-serverapp" in cmd:
            found.append(pid)
    return found


def memory_and_files(pid: int) -> tuple[int, int] | None:
    """(resident memory in kB, open file descriptors) of `pid`."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, AttributeError):
        return None


def machine_state() -> str:
    """Load, memory, processes and threads now (a failed field test's resources)."""
    threads = 0
    table = processes()
    for pid in table:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            threads += int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))
        except (OSError, AttributeError):
            continue
    try:
        meminfo = Path("/proc/meminfo").read_text()
        available = int(re.search(r"^MemAvailable:\s+(\d+)", meminfo, re.M).group(1)) // 1024
    except (OSError, AttributeError):
        available = -1
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"load average {load}, {available} MiB available, {len(table)} processes, "
            f"{threads} threads, flwr-clientapp processes "
            f"{sum('flwr-clientapp' in cmd for _, cmd in table.values())}")


def heartbeat_wrapper(folder: Path) -> Path:
    """A folder with `flower-supernode`: Flower's, announcing its shortest heartbeat interval."""
    folder.mkdir()
    script = folder / "flower-supernode"
    script.write_text(f"#!{sys.executable}\n" + SUPERNODE[2].replace("; ", "\n") + "\n")
    script.chmod(0o755)
    return folder


class Field:
    """The run's driver: submits and resumes it, follows its rounds, and does the events."""

    def __init__(self, dep: LocalDeployment, app: Path, runs: Path, options: dict):
        self.dep, self.app, self.runs, self.options = dep, app, runs, options
        self.results = runs / "field" / "results.json"
        self.checkpoint = runs / "field" / "checkpoint.pt"
        self.run_ids: list[int] = []
        self.rng = random.Random(SEED)
        self.down: dict[str, int] = {}  # killed node -> the round after which it restarts
        self.events: list[str] = []
        self.snapshots: list[tuple[int, bytes]] = []  # checkpoints the run resumed from
        self.samples: list[tuple[int, int, int]] = []  # (round, rss kB, fds) of the SuperLink
        self.t0 = time.monotonic()
        self.submitted = time.time()  # the last submission's

    def note(self, what: str) -> None:
        self.events.append(f"{time.monotonic() - self.t0:6.0f} s: {what}")
        print(self.events[-1], flush=True)

    def submit(self, resume: bool = False) -> None:
        config = (f"model='mlp' num-server-rounds={ROUNDS} num-clients={N} "
                  f"fraction-train={min(1.0, PER_ROUND / NODES)} min-train-nodes=2 local-epochs=1 "
                  f"round-timeout={ROUND_TIMEOUT} node-wait-timeout=180 checkpoint-every=1 "
                  f"seed={SEED} out-dir='{self.runs}' run-name='field'"
                  + (" resume='latest'" if resume else ""))
        out = self.dep.flwr("run", str(self.app), self.dep.CONNECTION, "--run-config", config,
                            timeout=300)
        self.run_ids.append(int(re.search(r"started run (\d+)", out).group(1)))
        self.submitted = time.time()
        self.note(f"run {self.run_ids[-1]} submitted" + (" (resume)" if resume else ""))

    def done(self) -> int:
        return len(rows_of(self.results)) - 1

    def wait_for(self, check, what: str, timeout: float = 900) -> None:
        """Until check(); fails at once if the SuperLink or the proxy exits, or if the run
        being waited for has ended (its results.json or `flwr ls` says so), after `timeout`."""
        deadline = time.monotonic() + timeout
        asked = time.monotonic()
        while not check():
            for name in ("superlink", "fleet-proxy"):
                proc = self.dep.background.procs[name]
                assert proc.poll() is None, f"{name} exited:\n{self.dep.background.log(name)}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            if read_status(self.results, self.submitted) == "failed":
                raise AssertionError(f"the run failed while waiting for {what}")
            if time.monotonic() - asked > 30:  # (a `flwr ls`: a second of CPU)
                asked = time.monotonic()
                try:
                    status = self.status(self.run_ids[-1])
                except (RuntimeError, subprocess.TimeoutExpired, StopIteration, ValueError):
                    status = "unknown"  # (a busy SuperLink: asked again in 30 s)
                assert not status.startswith("finished") or check(), (
                    f"run {self.run_ids[-1]} {status} while waiting for {what}")
            self.dep.restart_port_clashes()
            self.sample()
            time.sleep(1)

    def diagnose(self) -> str:
        """What a failed field test prints: events, the runs' states, the ServerApps' logs,
        the tails of the SuperLink's and the nodes' logs."""
        parts = ["events:", *self.events]
        asks = [("flwr ls", ("ls", self.dep.CONNECTION, "--format", "json"))]
        asks += [(f"flwr log {i}", ("log", str(i), self.dep.CONNECTION, "--show"))
                 for i in self.run_ids]
        for what, args in asks:
            try:
                out = self.dep.flwr(*args, timeout=60)
            except Exception as exc:  # (a diagnosis never raises)
                out = f"{type(exc).__name__}: {exc}"
            parts.append(f"--- {what} ---\n{out[-4000:]}")
        try:
            parts.append(f"--- results.json ---\n{self.results.read_text()[-3000:]}")
        except OSError as exc:
            parts.append(f"--- results.json: {exc}")
        alive = [n for n, p in self.dep.background.procs.items() if p.poll() is None]
        parts.append(f"--- processes alive: {alive}")
        parts.append(f"--- the machine: {machine_state()}")
        for name in ("superlink", "fleet-proxy", *sorted(self.options)[:2]):
            if name in self.dep.background.procs:
                parts.append(f"--- {name}.log (tail) ---\n{self.dep.background.log(name)[-3000:]}")
        return "\n".join(parts)

    def sample(self) -> None:
        if "superlink restarted" in " ".join(self.events):  # the restarted SuperLink's life
            got = memory_and_files(self.dep.background.procs["superlink"].pid)
            if got:
                self.samples.append((self.done(), *got))

    def until_checkpoint(self, r: int) -> None:
        """Wait for round r's checkpoint, then a moment into round r + 1 (mid-round)."""
        self.wait_for(lambda: self.done() >= r, f"round {r}")
        self.wait_for(lambda: checkpoint_round(self.checkpoint) == r, f"checkpoint {r}")
        time.sleep(2)

    def snapshot(self) -> None:
        raw = self.checkpoint.read_bytes()
        self.snapshots.append((checkpoint_round(self.checkpoint), raw))

    def kill_or_restart_nodes(self, r: int) -> None:
        """After round r: restart the nodes due; maybe kill one (seeded)."""
        for name in [n for n, due in self.down.items() if due <= r]:
            self.dep.start_node(name, self.options[name])
            del self.down[name]
            self.note(f"{name} restarted after round {r}")
        alive = [n for n in self.options if n in self.dep.background.procs]
        if r < ROUNDS - 1 and self.rng.random() < KILL_CHANCE and not self.down:
            name = self.rng.choice(sorted(alive))
            self.dep.background.stop_one(name, signal.SIGKILL)
            self.down[name] = r + 1
            self.note(f"{name} killed after round {r}")

    def drive(self) -> None:
        self.submit()
        r = 0
        while r < ROUNDS:
            self.wait_for(lambda: self.done() > r, f"round {r + 1}")
            r = self.done()
            if r >= SUPERLINK_RESTART and not self.restarted("superlink"):
                self.until_checkpoint(SUPERLINK_RESTART)
                self.snapshot()
                self.dep.restart_superlink()
                self.note(f"superlink restarted in round {SUPERLINK_RESTART + 1}")
                self.submit(resume=True)
                r = SUPERLINK_RESTART
            elif r >= JOIN and not self.restarted("joined"):
                self.join(r)
            elif r >= SERVERAPP_KILL and not self.restarted("serverapp"):
                self.until_checkpoint(SERVERAPP_KILL)
                apps = serverapps_under(self.dep.background.procs["superlink"].pid)
                assert len(apps) == 1, apps
                os.kill(apps[0], signal.SIGKILL)
                self.snapshot()
                self.note(f"serverapp killed in round {SERVERAPP_KILL + 1}")
                self.submit(resume=True)
                r = SERVERAPP_KILL
            else:
                self.kill_or_restart_nodes(r)
        self.wait_for(lambda: json.loads(self.results.read_text())["status"] == "complete",
                      "the run to complete")
        self.note("run complete")

    def restarted(self, what: str) -> bool:
        return any(what in e for e in self.events)

    def status(self, run_id: int) -> str:
        out = self.dep.flwr("ls", self.dep.CONNECTION, "--format", "json", timeout=60)
        return next(r["status"] for r in json.loads(out)["runs"] if r["run-id"] == str(run_id))

    def join(self, r: int) -> None:
        """New nodes while the run goes on: JOINERS registered ones with the next client ids,
        one registered but refused (its num-clients is not the run's), one never registered."""
        joiners = [f"supernode-{i}" for i in range(NODES, N)]
        self.dep.make_keys(*joiners, "refused", "intruder")
        self.dep.register(*joiners, "refused")
        for name in joiners:
            self.dep.start_node(name, self.options[name])
        self.dep.start_node("refused", ["--client-id", "0", "--num-clients", str(N + 1)])
        self.dep.start_node("intruder", self.options[joiners[0]])
        self.note(f"joined after round {r}: {joiners}, 'refused', 'intruder'")


def test_field(tmp_path):
    if not shutil.which("flower-supernode"):
        pytest.skip("flwr is not installed")
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        pytest.skip("the fleet proxy needs nginx (apt-get install nginx-light)")
    wrapper = heartbeat_wrapper(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{wrapper}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    options = {f"supernode-{i}": ["--client-id", str(i), "--num-clients", str(N),
                                  "--cache-dir", str(tmp_path / "cache" / str(i))]
               for i in range(N)}
    straggled = tmp_path / "straggled"  # made by the straggler's ClientApp
    app = faulty_app_copy(tmp_path / "app", plan=[
        {"partition": "any", "round": STRAGGLE, "fault": "hang", "seconds": ROUND_TIMEOUT + 10,
         "once": str(straggled)}])
    dep = LocalDeployment(tmp_path / "deployment", list(options.values())[:NODES], env,
                          database=tmp_path / "superlink.db")
    t0 = time.monotonic()
    with dep:
        field = Field(dep, app, tmp_path / "runs", options)
        try:
            field.drive()
            logs = {i: dep.flwr("log", str(i), dep.CONNECTION, "--show", timeout=120)
                    for i in field.run_ids}
            for i, text in logs.items():  # (kept in the test's folder, to read)
                (tmp_path / f"serverapp-{i}.log").write_text(text)
            statuses = {i: field.status(i) for i in field.run_ids}
            listed = json.loads(dep.flwr("supernode", "list", dep.CONNECTION, "--format",
                                         "json", timeout=60))["nodes"]
            intruder = dep.background.procs["intruder"]
            assert intruder.poll() is not None and intruder.returncode != 0
            assert "Failed to activate SuperNode" in dep.background.log("intruder")
            assert healthy(dep.proxy_port, dep.creds / "ca.crt")
        except BaseException:
            print(field.diagnose(), flush=True)
            raise
    wall = time.monotonic() - t0
    results = json.loads(field.results.read_text())
    rows = results["rounds"]
    print("\n".join(field.events))
    print(f"field test: {NODES}+{JOINERS} nodes, {ROUNDS} rounds in {wall:.0f} s; Flower's "
          f"runs {statuses}")

    # every round exactly once, the run complete, its three Flower runs as Flower says
    assert results["status"] == "complete", results.get("error")
    assert [r["round"] for r in rows] == list(range(ROUNDS + 1))
    assert statuses[field.run_ids[-1]] == "finished:completed", statuses
    assert all(statuses[i] != "finished:completed" for i in field.run_ids[:-1]), statuses

    # a restarted node (same key) and the nodes after the SuperLink's restart came back as the
    # nodes they were: one node id per registered key (the N nodes and the refused one)
    assert len(listed) == N + 1, listed

    # each resume continued from the checkpoint it found: the one the test copied when the
    # ServerApp died (its SHA-256 in the resumed run's log), and kept its rows bitwise
    assert len(field.snapshots) == 2 and len(field.run_ids) == 3
    for (k, raw), run_id in zip(field.snapshots, field.run_ids[1:]):
        header, payload = raw.split(b"\n", 1)
        assert header.decode().endswith(hashlib.sha256(payload).hexdigest())
        assert f"at round {k + 1}" in logs[run_id], logs[run_id][-3000:]
        assert hashlib.sha256(payload).hexdigest() in logs[run_id], logs[run_id][-3000:]
        import io

        import torch
        kept = torch.load(io.BytesIO(payload), weights_only=True)["rows"]
        assert [r["round"] for r in kept] == list(range(k + 1))
        assert rows[:k + 1] == kept  # (results.json's floats are the checkpoint's, printed)

    # failures counted: the straggler's timeout in its round, the refused node once it joined,
    # the joiners connected and trained
    straggle = rows[STRAGGLE]
    assert straggled.exists() and straggle["train-timeouts"] >= 1, straggle
    assert straggle["seconds"] >= ROUND_TIMEOUT
    assert re.search(rf"round {STRAGGLE}: no reply from node \d+ \(partition \d+\) within "
                     "round-timeout", logs[field.run_ids[1]])
    assert rows[-1]["train-nodes-refused"] == 1, rows[-1]
    assert all(r["train-nodes-refused"] == 0 for r in rows[1:JOIN + 1]), rows
    assert max(r["train-nodes-connected"] for r in rows[1:]) >= NODES + JOINERS
    joined = [p.name for i in range(NODES, N) for p in (tmp_path / "cache" / str(i)).glob("*.pt")]
    assert joined, "no joiner trained"
    failures = sum(r["train-errors"] + r["train-timeouts"] for r in rows[1:])
    kills = sum("killed after" in e for e in field.events)
    print(f"node kills {kills}, errors + timeouts counted {failures}")
    assert all(r["train-replies"] + r["train-errors"] + r["train-timeouts"]
               + r["train-dropped"] == r["clients-sampled"] for r in rows[1:]), rows
    assert results["summary"]["final-test-acc"] > rows[0]["test-acc"]

    # the restarted SuperLink's memory and open files: flat over the rest of the run
    samples = field.samples
    assert len(samples) >= 30, samples
    third = len(samples) // 3
    first, last = samples[:third], samples[-third:]

    def median(xs):
        return sorted(xs)[len(xs) // 2]

    rss = median([s[1] for s in first]), median([s[1] for s in last])
    fds = median([s[2] for s in first]), median([s[2] for s in last])
    print(f"SuperLink rss {rss[0] / 1024:.0f} -> {rss[1] / 1024:.0f} MiB, fds {fds[0]} -> "
          f"{fds[1]} ({len(samples)} samples, rounds {samples[0][0]}-{samples[-1][0]})")
    assert rss[1] <= 1.5 * rss[0] + 50 * 1024, rss
    assert fds[1] <= 1.5 * fds[0] + 20, fds
