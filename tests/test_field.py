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
* the ServerApp process killed mid-round (SIGKILL) and the run resumed from its checkpoint;
* the SuperLink's database locked (held by the test) for LOCK_SECONDS mid-round, as a starved
  SuperLink host locks it: Flower loses the run, its SuperExec and the nodes that got an error,
  and the test recovers as the operator does (see Field.recover).

After it: every round 0..ROUNDS in results.json exactly once; the rows the resumed runs kept are
bitwise the checkpoint's, and each resume said which checkpoint it continued from; the
straggler's timeout, the refusal and the failures counted in the rows; the SuperLink's resident
memory and open files flat (the restarted SuperLink, first third of its samples against the last
third, a generous bound). Flower 1.41 does not restart the ServerApp of a run that was running
when the SuperLink stopped: the run ends failed in `flwr ls` and is resumed by submitting it
again with resume='latest' (docs/deployment.md#in-the-field), which the test does.

Each SuperNode announces Flower's shortest heartbeat interval (test_deployment_faults.SUPERNODE,
put first on PATH as `flower-supernode` for deploy/supernode.sh), so that the SuperLink notices a
killed node after ~20 s instead of ~60 s, and runs at NODE_NICENESS with its ClientApps (its
session's too, see heartbeat_wrapper): in the field the SuperLink has a machine of its own; here
20 nodes share 2 cores with it, and a SuperLink starved so long that a write to its SQLite state
waits past Flower's 5 s lock timeout loses the run (docs/deployment.md#in-the-field, "the
SuperLink's database is locked"), as in CI's runs of 2026-11-27. If that happens beside the
planned lock, the test recovers the same way (at most MAX_RECOVERIES times in all, each an event
and a checked resume) and says so. Sizes are the constants below (FIELD_NODES and FIELD_ROUNDS
in the environment override them for a smaller run, FIELD_ROUNDS 12 at least: `.ci/run` runs the
size that fits in its time, docs/testing.md#the-field-test). Marked `field` and `slow`, run alone
(`-n 0`); every process is stopped by its process tree, also when the test fails.
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

pytestmark = [pytest.mark.slow, pytest.mark.field]

NODES = int(os.environ.get("FIELD_NODES", "20"))  # SuperNodes at the start
JOINERS = 2  # nodes that join mid-run (client ids NODES, NODES + 1)
N = NODES + JOINERS  # the run's num-clients
ROUNDS = int(os.environ.get("FIELD_ROUNDS", "30"))
PER_ROUND = 5  # nodes sampled a round (fraction-train = PER_ROUND / NODES)
ROUND_TIMEOUT = 60  # the run's round-timeout (s); the straggler sleeps 10 s longer
KILL_CHANCE = 0.25  # after each round, the chance that a random node is killed
SEED = 50
# the events, after the checkpoint of these rounds (each in a round of its own)
LOCK = max(1, ROUNDS // 6 - 2)
LOCK_SECONDS = 25  # (longer than a ServerApp's heartbeat interval: its heartbeat fails too)
SUPERLINK_RESTART = max(3, ROUNDS // 6)
JOIN = SUPERLINK_RESTART + 1 + ROUNDS // 10
STRAGGLE = JOIN + 2  # the round in which the straggler trains
SERVERAPP_KILL = max(STRAGGLE + 1, ROUNDS // 2)
assert LOCK + 1 < SUPERLINK_RESTART and SERVERAPP_KILL + 2 <= ROUNDS, (
    "FIELD_ROUNDS too small for the events")
MAX_RECOVERIES = 4  # runs Flower may lose to a locked database: LOCK's, and 3 (the docstring)
LOCKED = "database is locked"  # Flower's SQLite state, a write that waited past 5 s
SERVER_ERROR = "500 Internal Server Error"  # what its clients then get


def read_results(path: Path) -> dict:
    """results.json, or {} while there is none (or it is being replaced)."""
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def rows_of(path: Path) -> list[dict]:
    return read_results(path).get("rounds", [])


def read_status(path: Path, since: float = 0.0) -> str | None:
    """results.json's status, if written after `since` (time.time())."""
    try:
        if path.stat().st_mtime < since:
            return None
    except OSError:
        return None
    return read_results(path).get("status")


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


def under(root: int) -> list[int]:
    """The processes under `root` (not root itself)."""
    table = processes()
    found = []
    for pid in table:
        up = pid
        while up in table and up != root:
            up = table[up][0]
        if up == root and pid != root:
            found.append(pid)
    return found


def serverapps_under(root: int) -> list[int]:
    """The `flwr-serverapp` processes under `root` (the SuperLink)."""
    table = processes()
    return [pid for pid in under(root) if "flwr-serverapp" in table.get(pid, (0, ""))[1]]


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


NODE_NICENESS = 19  # the nodes' and their ClientApps' (the SuperLink's is the caller's)


def heartbeat_wrapper(folder: Path) -> Path:
    """A folder with `flower-supernode`: Flower's, announcing its shortest heartbeat interval,
    at NODE_NICENESS with its ClientApps: the SuperLink first, as on a machine of its own.
    Each node runs in a session of its own, and where the kernel groups sessions for the
    scheduler (autogroup, /proc/sys/kernel/sched_autogroup_enabled) a process's niceness only
    ranks it within its session: the session's own (/proc/self/autogroup) is set too."""
    folder.mkdir()
    script = folder / "flower-supernode"
    lower = (f"import os\nos.nice({NODE_NICENESS})\ntry:\n"
             f"    with open('/proc/self/autogroup', 'w') as f:\n"
             f"        f.write('{NODE_NICENESS}')\nexcept OSError:\n    pass\n")
    script.write_text(f"#!{sys.executable}\n" + lower + SUPERNODE[2].replace("; ", "\n") + "\n")
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
        self.recoveries: list[int] = []  # the checkpoint round each recovery resumed from

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
            failed = read_status(self.results, self.submitted) == "failed"
            if failed or time.monotonic() - asked > 30:  # (a `flwr ls`: a second of CPU)
                asked = time.monotonic()
                try:
                    run = self.listed(self.run_ids[-1])
                except (RuntimeError, subprocess.TimeoutExpired, StopIteration, ValueError):
                    run = {}  # (a busy SuperLink: asked again in 30 s)
                status = run.get("status", "unknown")
                if self.recover(status, run.get("status-details", ""), failed):
                    deadline = time.monotonic() + timeout
                    continue
                assert not failed, f"the run failed while waiting for {what}"
                assert not status.startswith("finished") or check(), (
                    f"run {self.run_ids[-1]} {status} while waiting for {what}")
            self.dep.restart_port_clashes()
            self.sample()
            time.sleep(1)

    def recover(self, status: str, details: str, failed: bool) -> bool:
        """The operator's recovery (docs/deployment.md#in-the-field) from a run that Flower lost
        to its locked database: the SuperLink's log says so, and the run ended failed (`flwr
        ls`, or results.json: for want of the ServerApp's heartbeat, whose request got the
        error, on the error itself, or on a push the SuperLink could not store), or the
        SuperLink's SuperExec exited (its poll got it: no run starts any more). Restart the
        SuperLink (a new SuperExec) and each node that got the error, and resume the run from
        its checkpoint unless it never started. False, doing nothing, in any other case."""
        if len(self.recoveries) >= MAX_RECOVERIES or LOCKED not in self.dep.background.log(
                "superlink"):
            return False
        table = processes()
        superexec = [pid for pid in under(self.dep.background.procs["superlink"].pid)
                     if "flower-superexec" in table.get(pid, (0, ""))[1]]
        ended = status == "finished:failed" or failed  # (by a lapsed heartbeat, an HTTP 500,
        # or a push the SuperLink could not store: `ObjectPushError`, "push session ...")
        if not ended and superexec:
            return False
        self.dep.restart_superlink()
        self.samples.clear()  # (the memory check follows the newest SuperLink)
        # a node that got the error has lost its heartbeat (Flower's thread ends) or its
        # connection: online no more, though running; started again as it was
        hit = [name for name in self.dep.node_options if name in self.dep.background.procs
               and SERVER_ERROR in self.dep.background.log(name)]
        for name in hit:
            self.dep.background.stop_one(name)
            self.dep.start_node(name, *self.dep.node_options[name])
        why = f" ({details[:100]})" if details not in ("", "N/A") else ""
        what = (f"the run ended{why}" if ended else "Flower's SuperExec exited") + (
            f", {len(hit)} nodes that got the error restarted" if hit else "")
        if ended or status != "pending":
            self.snapshot()
            self.recoveries.append(self.snapshots[-1][0])
            self.note(f"recovery from '{LOCKED}': {what}; the SuperLink started again")
            self.submit(resume=True)
        else:  # (the new SuperExec starts the pending run)
            self.recoveries.append(-1)
            self.note(f"recovery from '{LOCKED}': {what}; the SuperLink started again")
        return True

    def diagnose(self) -> str:
        """What a failed field test prints, the most telling last (CI shows a log's ends): log
        tails of two nodes, the proxy and the ServerApps, results.json, the SuperLink's errors,
        the machine, the runs as Flower lists them, the events."""
        parts = []
        for name in (*sorted(self.options)[:2], "fleet-proxy"):
            if name in self.dep.background.procs:
                parts.append(f"--- {name}.log (tail) ---\n{self.dep.background.log(name)[-1500:]}")
        try:
            parts.append(f"--- results.json (tail) ---\n{self.results.read_text()[-1500:]}")
        except OSError as exc:
            parts.append(f"--- results.json: {exc}")
        for i in self.run_ids:
            text = self.ask("log", str(i), self.dep.CONNECTION, "--show")
            parts.append(f"--- flwr log {i} (tail) ---\n{text[-2500:]}")
        link = self.dep.background.log("superlink")
        errors = [line[:240] for line in link.splitlines()
                  if re.search(r"ERROR|Error|Traceback|\b500\b", line)]
        parts.append(f"--- superlink.log: {len(errors)} error lines, the last 25 ---")
        parts.extend(errors[-25:])
        alive = [n for n, p in self.dep.background.procs.items() if p.poll() is None]
        parts.append(f"--- processes alive: {alive}")
        parts.append(f"--- the machine: {machine_state()}")
        parts.append("--- flwr ls ---")
        try:
            runs = json.loads(self.ask("ls", self.dep.CONNECTION, "--format", "json"))["runs"]
            parts.extend(f"{r['run-id']}: {r['status']} ({r.get('status-details', '')}), "
                         f"{r.get('elapsed', 0):.0f} s" for r in runs)
        except (ValueError, KeyError, TypeError) as exc:
            parts.append(f"unreadable: {exc}")
        parts += ["--- events ---", *self.events]
        return "\n".join(parts)

    def ask(self, *args: str) -> str:
        """`flwr <args>`'s output, or why there is none (a diagnosis never raises)."""
        try:
            return self.dep.flwr(*args, timeout=60)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

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
            if r >= LOCK and not self.restarted("database locked"):
                self.until_checkpoint(LOCK)
                self.lock_database(LOCK_SECONDS)
                r = LOCK
            elif r >= SUPERLINK_RESTART and not self.restarted("superlink"):
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

    def lock_database(self, seconds: float) -> None:
        """Hold the SuperLink's database's write lock for `seconds`, as a starved SuperLink's
        own slow writer would (the requests that wait past 5 s fail)."""
        import sqlite3

        db = sqlite3.connect(str(self.dep.database), isolation_level=None, timeout=60)
        try:
            db.execute("BEGIN IMMEDIATE")
            self.note(f"database locked for {seconds} s in round {LOCK + 1}")
            time.sleep(seconds)
            db.execute("ROLLBACK")
        finally:
            db.close()

    def restarted(self, what: str) -> bool:
        return any(what in e for e in self.events)

    def listed(self, run_id: int) -> dict:
        """The run's entry in `flwr ls` (its status, status-details, ...)."""
        out = self.dep.flwr("ls", self.dep.CONNECTION, "--format", "json", timeout=60)
        return next(r for r in json.loads(out)["runs"] if r["run-id"] == str(run_id))

    def status(self, run_id: int) -> str:
        return self.listed(run_id)["status"]

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
    # ServerApp died (its SHA-256 in the resumed run's log), and kept its rows bitwise; a
    # recovery (see Field.recover) that resumed the run is one more resume, checked the same
    resumed = [k for k in field.recoveries if k >= 0]
    assert field.recoveries and LOCK <= field.recoveries[0] <= LOCK + 1, field.recoveries
    assert len(field.snapshots) == 2 + len(resumed) and len(field.run_ids) == 3 + len(resumed)
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
    # (an unplanned recovery during round STRAGGLE, from checkpoint STRAGGLE - 1, ran it again
    # without the straggler: only then is its row's timeout not asserted)
    straggle = rows[STRAGGLE]
    assert straggled.exists()
    assert any(re.search(rf"round {STRAGGLE}: no reply from node \d+ \(partition \d+\) "
                         "within round-timeout", text) for text in logs.values())
    if STRAGGLE - 1 not in resumed:
        assert straggle["train-timeouts"] >= 1, straggle
        assert straggle["seconds"] >= ROUND_TIMEOUT
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
