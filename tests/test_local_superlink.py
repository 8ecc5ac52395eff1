"""`python -m experiments.superlink`: a SuperLink of one's own for `flwr run .`, started and
stopped by its PID file, never another user's (README.md#run).

Another user's SuperLink on the port a plain `flwr run .` uses is a stand-in (tests/other_user.py,
as the user nobody where the tests run as root); the port is a free one, named to Flower by
FLWR_LOCAL_SUPERLINK_HTTP_API_PORT, as the tests use no fixed port.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.processes import PortHolder, free_port, listening, port_holder, process_start
from experiments.superlink import describe_port
from other_user import other_users_superlink

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "0123456789abcdef" * 2


@pytest.fixture
def stops_what_it_started(tmp_path):
    """After the test: any process whose FLWR_HOME lies under tmp_path (a SuperLink that a start
    meant to be refused started all the same, with the rule broken) is stopped by its PID."""
    yield
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"FLWR_HOME={tmp_path}".encode() in environ:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "experiments.superlink", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def test_the_socket_table_is_read_as_the_kernel_writes_it(tmp_path):
    """Lines of /proc/net/tcp (Documentation/networking/proc_net_tcp.rst): local address
    hex:port, state 0A = listening, the uid (8th column) and inode (10th)."""
    head = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
            "timeout inode\n")
    rows = [  # 127.0.0.1:39091 listening (uid 1001), the same port connected, 0.0.0.0:8080
        "   0: 0100007F:98B3 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001 "
        "       0 4242 1 0000000000000000 100 0 0 10 0",
        "   1: 0100007F:98B3 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1002 "
        "       0 4343 1 0000000000000000 20 4 30 10 -1",
        "   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 "
        "       0 4444 1 0000000000000000 100 0 0 10 0"]
    table = tmp_path / "tcp"
    table.write_text(head + "\n".join(rows) + "\n")
    assert 0x98B3 == 39091 and 0x1F90 == 8080
    assert listening(39091, (str(table),)) == [(1001, 4242)]
    assert listening(8080, (str(table), str(tmp_path / "missing"))) == [(0, 4444)]
    assert listening(9, (str(table),)) == []


def test_another_users_port_is_described_with_what_to_do():
    other = describe_port(39091, PortHolder(os.getuid() + 1, None, ""))
    assert "held by another user" in other and "experiments.superlink start" in other
    assert "stop --port" not in other  # theirs is never to be stopped
    mine = describe_port(39091, PortHolder(os.getuid(), 7, "flower-superlink --port 39091"))
    assert "yours" not in mine and "your user account" in mine and "never stops it" in mine
    # no cause it cannot know (who started it, whether it is still used), no stop of it offered
    assert "left" not in mine and "stop" not in mine.replace("never stops it", "")
    started = describe_port(39091, PortHolder(os.getuid(), 7, "flower-superlink --port 39091"),
                            recorded=7)
    assert "yours (PID 7" in started and "experiments.superlink stop" in started
    assert "stop --port" not in started


@pytest.mark.slow
def test_start_and_stop_touch_only_the_users_own_superlink(tmp_path):
    """With another user's SuperLink on the port `flwr run .` uses, `start` names it, starts
    one of the user's own on another port and exports that port; `stop` ends exactly that one
    (its process tree) and removes the PID file; the other one got no request and runs on."""
    default = free_port()
    folder = tmp_path / "state"
    with other_users_superlink(default) as (theirs, requests, uid):
        env = {"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(default)}
        try:
            out = cli("start", "--dir", str(folder), env=env)
            assert out.returncode == 0, out.stderr
            rec = json.loads((folder / "superlink.json").read_text())
            assert out.stdout == f"export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT={rec['port']}\n"
            assert rec["port"] != default
            holder = port_holder(rec["port"])
            assert holder.pid == rec["pid"] and "flower-superlink" in holder.command
            if uid != os.getuid():
                assert "held by another user" in out.stderr, out.stderr
            again = cli("start", "--dir", str(folder), env=env)  # one SuperLink, not two
            assert again.stdout == out.stdout
            status = cli("status", "--dir", str(folder), env=env).stdout
            assert f"yours: 127.0.0.1:{rec['port']}" in status
            assert f"127.0.0.1:{default}: " in status
            # `stop` takes no port: it stops what `start` recorded, nothing else
            refused = cli("stop", "--dir", str(folder), "--port", str(default))
            assert refused.returncode == 2 and "unrecognized arguments: --port" in refused.stderr
        finally:
            stopped = cli("stop", "--dir", str(folder))
        assert stopped.returncode == 0 and "stopped your SuperLink" in stopped.stderr
        assert process_start(rec["pid"]) is None and port_holder(rec["port"]) is None
        assert not (folder / "superlink.json").exists()
        assert theirs.poll() is None
        assert requests.read_text() == ""  # not even asked for its health


def test_a_pid_file_naming_a_reused_pid_stops_nothing(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "superlink.json").write_text(json.dumps(
            {"pid": sleeper.pid, "start": "not its start", "port": 1,
             "home": str(tmp_path / "home"), "token": TOKEN}))
        out = cli("stop", "--dir", str(tmp_path))
        assert out.returncode == 0 and "had already stopped" in out.stderr
        assert sleeper.poll() is None and not (tmp_path / "superlink.json").exists()
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()


def test_a_start_that_fails_makes_the_eval_fail_so_flwr_run_is_not_reached(tmp_path):
    """`eval "$(... start)" && flwr run .`: a failed start prints `false`, never an empty line
    (after which a plain `flwr run .` would go to whoever holds Flower's default port)."""
    out = cli("start", "--dir", str(tmp_path), env={"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": "abc"})
    assert out.returncode == 2 and out.stdout == "false\n"
    assert "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT='abc' is not a port number" in out.stderr
    shell = subprocess.run(["bash", "-c", f'eval "$({sys.executable} -m experiments.superlink '
                            f'start --dir {tmp_path})" && echo REACHED'], cwd=ROOT, text=True,
                           capture_output=True, env={**os.environ,
                                                     "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": "x"})
    assert shell.returncode == 1 and "REACHED" not in shell.stdout
    assert not (tmp_path / "superlink.json").exists()


def test_stop_ends_a_root_process_that_leads_no_group():
    """A SuperLink that a plain `flwr run .` started is in its starter's process group:
    stopping it by PID must signal the process itself, not only the groups it leads."""
    from experiments.processes import stop_process_tree

    sleeper = subprocess.Popen(["sleep", "60"])  # in this process's group, leading none
    try:
        assert os.getpgid(sleeper.pid) != sleeper.pid
        stop_process_tree(sleeper.pid, grace=5, child=sleeper)
        assert sleeper.wait(timeout=5) == -signal.SIGTERM
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


@pytest.mark.slow
def test_a_port_taken_before_the_superlink_binds_it_is_passed_over(monkeypatch):
    """free_port() closes its socket before the SuperLink binds: when another process takes
    the port in between, the SuperLink starts on the next free port."""
    import socket

    from experiments import superlink

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    monkeypatch.setattr(superlink, "free_port", lambda: next(ports, None) or free_port())
    try:
        with superlink.LocalSuperLink() as link:
            assert link.port != taken.getsockname()[1]
            assert port_holder(link.port).pid == link.proc.pid
    finally:
        taken.close()


def test_a_pid_file_naming_another_home_or_planted_as_a_link_is_not_used(tmp_path):
    """`stop` removes the recorded FLWR_HOME: a PID file naming any other folder (or a link
    planted at its name, or a pipe) is no record of ours, and nothing is removed."""
    from experiments.superlink import read_record

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    state = tmp_path / "state"
    state.mkdir()
    good = {"pid": 2, "start": "x", "port": 9, "home": str(state / "home"), "token": TOKEN}
    (state / "superlink.json").write_text(json.dumps(good))
    assert read_record(state) == good
    (state / "superlink.json").write_text(json.dumps({**good, "home": str(victim)}))
    assert read_record(state) is None
    out = cli("stop", "--dir", str(state))
    assert out.returncode == 0 and (victim / "keep").read_text() == "mine"
    (tmp_path / "elsewhere.json").write_text(json.dumps(good))
    (state / "superlink.json").unlink()
    (state / "superlink.json").symlink_to(tmp_path / "elsewhere.json")
    assert read_record(state) is None
    (state / "superlink.json").unlink()
    os.mkfifo(state / "superlink.json")
    assert read_record(state) is None
    (state / "superlink.json").unlink()
    (state / "superlink.json").write_text(json.dumps({**good, "pid": "1"}))
    assert read_record(state) is None


# --- a record is acted on only for the SuperLink started from it (issue 50) -----------------
FAKE = """#!{python}
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def fake_flower(tmp_path):
    """PATH with a `flower-superlink` that answers /health on its --port (as Flower's does),
    and the PIDs the test started, killed afterwards (also on failure)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "flower-superlink").write_text(FAKE.format(python=sys.executable))
    (bin_ / "flower-superlink").chmod(0o755)
    started: list[int] = []
    yield {"PATH": f"{bin_}:{os.environ['PATH']}",
           "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port())}, started
    for pid in started:
        if process_start(pid) is not None:
            os.kill(pid, signal.SIGKILL)


def started_record(folder, env, started):
    out = cli("start", "--dir", str(folder), env=env)
    assert out.returncode == 0, out.stderr
    rec = json.loads((folder / "superlink.json").read_text())
    started.append(rec["pid"])
    assert out.stdout == f"export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT={rec['port']}\n"
    return rec


def test_start_records_its_superlink_and_stop_ends_exactly_it(tmp_path, fake_flower):
    env, started = fake_flower
    folder = tmp_path / "state"
    rec = started_record(folder, env, started)
    assert set(rec) == {"pid", "start", "port", "home", "token"}
    assert (folder.stat().st_mode & 0o777) == 0o700
    environ = Path(f"/proc/{rec['pid']}/environ").read_bytes().split(b"\0")
    assert f"FEDACG_SUPERLINK_TOKEN={rec['token']}".encode() in environ
    assert os.readlink(f"/proc/{rec['pid']}/cwd") == rec["home"]
    status = cli("status", "--dir", str(folder), env=env).stdout
    assert f"yours: 127.0.0.1:{rec['port']} (PID {rec['pid']})" in status
    out = cli("stop", "--dir", str(folder), env=env)
    assert out.returncode == 0 and f"stopped your SuperLink on 127.0.0.1:{rec['port']}" in \
        out.stderr, out.stderr
    assert process_start(rec["pid"]) is None and not (folder / "superlink.json").exists()


def sleeper_in(cwd, env=None, name="sleep"):
    """A process that is not the SuperLink a record names, in `cwd`."""
    return subprocess.Popen([name, "60"], cwd=cwd, env={**os.environ, **(env or {})})


REASONS = {"another command": "its command line is not flower-superlink's",
           "another port": "its command line does not give the recorded port",
           "another working folder": "its working folder is",
           "no token": "its environment does not hold the record's token",
           "another token": "its environment does not hold the record's token"}


@pytest.mark.parametrize("change", sorted(REASONS))
def test_a_record_naming_another_process_signals_nothing(tmp_path, fake_flower, change):
    """A record whose PID and start time are right but whose process is not the SuperLink this
    helper started from it: `stop` leaves the process running, naming the one thing that
    differs (and no other), `status` and `start` do not call it yours."""
    env, started = fake_flower
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    home = folder / "home"
    home.mkdir()
    port = free_port()
    token = TOKEN
    proc_env = {"FEDACG_SUPERLINK_TOKEN": token}
    argv = [str(Path(env["PATH"].split(":")[0]) / "flower-superlink"), "--port", str(port)]
    cwd = home
    if change == "another command":
        argv = [sys.executable, "-c", "import time; time.sleep(60)", "--port", str(port)]
    elif change == "another port":
        argv[-1] = str(free_port())
    elif change == "another working folder":
        cwd = tmp_path
    elif change == "no token":
        proc_env = {}
    elif change == "another token":
        proc_env = {"FEDACG_SUPERLINK_TOKEN": "f" * 32}
    env_of = {k: v for k, v in os.environ.items() if k != "FEDACG_SUPERLINK_TOKEN"}
    proc = subprocess.Popen(argv, cwd=cwd, env={**env_of, **proc_env})
    started.append(proc.pid)
    try:
        (folder / "superlink.json").write_text(json.dumps({
            "pid": proc.pid, "start": process_start(proc.pid), "port": port,
            "home": str(home), "token": token}))
        status = cli("status", "--dir", str(folder), env=env).stdout
        assert "yours: none running" in status, status
        out = cli("stop", "--dir", str(folder), env=env)
        assert out.returncode == 0 and "is not the SuperLink this helper started" in out.stderr
        assert proc.poll() is None, "the process was signalled"
        said = [r for r in set(REASONS.values()) if r in out.stderr]
        assert said == [REASONS[change]], out.stderr
        whole = {"another port": f"{REASONS[change]} {port}",
                 "another working folder": f"{REASONS[change]} {os.path.realpath(tmp_path)}, "
                                           f"not the record's {home}"}.get(change, REASONS[change])
        assert f"superlink.json ({whole}): left running" in out.stderr, out.stderr
    finally:
        proc.kill()
        proc.wait()


def test_a_superlink_the_helper_did_not_start_is_never_signalled(tmp_path, fake_flower):
    """A flower-superlink of this user that `start` did not start, listening on the port a
    plain `flwr run .` uses: `stop` (no record, then a record of it with the wrong token) and
    `stop --port` leave it running; `status` names it as this user's, without guessing who
    started it, and offers no way to stop it."""
    env, started = fake_flower
    port = int(env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"])
    theirs = subprocess.Popen([str(Path(env["PATH"].split(":")[0]) / "flower-superlink"),
                               "--port", str(port)], cwd=tmp_path)
    started.append(theirs.pid)
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    try:
        for _ in range(100):  # until it listens
            if port_holder(port) is not None:
                break
            time.sleep(0.1)
        assert port_holder(port).pid == theirs.pid
        status = cli("status", "--dir", str(folder), env=env).stdout
        assert "yours: none running" in status and "your user account" in status, status
        assert "never stops it" in status and "left running" not in status
        assert "stop --port" not in status and "flwr run .` started" not in status
        out = cli("stop", "--dir", str(folder), env=env)
        assert out.returncode == 0 and "no SuperLink started by" in out.stderr
        (folder / "superlink.json").write_text(json.dumps({
            "pid": theirs.pid, "start": process_start(theirs.pid), "port": port,
            "home": str(folder / "home"), "token": TOKEN}))
        out = cli("stop", "--dir", str(folder), env=env)
        assert "is not the SuperLink this helper started" in out.stderr
        assert cli("stop", "--dir", str(folder), "--port", str(port), env=env).returncode == 2
        assert theirs.poll() is None, "the process was signalled"
        assert port_holder(port).pid == theirs.pid
    finally:
        theirs.kill()
        theirs.wait()


def test_start_does_not_export_the_port_of_a_record_it_did_not_start(tmp_path, fake_flower):
    env, started = fake_flower
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    proc = sleeper_in(tmp_path)
    started.append(proc.pid)
    try:
        (folder / "superlink.json").write_text(json.dumps({
            "pid": proc.pid, "start": process_start(proc.pid), "port": 4242,
            "home": str(folder / "home"), "token": TOKEN}))
        rec = started_record(folder, env, started)
        assert rec["pid"] != proc.pid and rec["port"] != 4242
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("field, value", [
    ("port", 0), ("port", -1), ("port", 65536), ("port", True), ("port", "9093"),
    ("port", 9093.0), ("pid", 1), ("pid", 0), ("pid", True), ("pid", -5),
    ("token", ""), ("token", "g" * 32), ("token", None), ("start", 5),
])
def test_a_record_field_out_of_its_range_is_no_record(tmp_path, field, value):
    from experiments.superlink import read_record

    good = {"pid": 2, "start": "x", "port": 65535, "home": str(tmp_path / "home"),
            "token": TOKEN}
    (tmp_path / "superlink.json").write_text(json.dumps(good))
    assert read_record(tmp_path) == good
    (tmp_path / "superlink.json").write_text(json.dumps({**good, field: value}))
    assert read_record(tmp_path) is None


@pytest.mark.parametrize("value", ["0", "65536", "-1", "1.5", "²", "9093 ", "0x10", "", "1e3"])
def test_the_port_variable_is_a_whole_number_in_range(value):
    from experiments.processes import port_number

    want = value.isascii() and value.isdigit() and 1 <= int(value) <= 65535
    assert (port_number(value) is not None) == want
    assert port_number("65535") == 65535 and port_number("1") == 1 and port_number(80) == 80
    assert port_number(True) is None and port_number(80.0) is None


@pytest.mark.parametrize("value", ["0", "65536", "²", "1.5", "12 34"])
def test_start_and_status_refuse_a_port_variable_that_is_no_port(tmp_path, value,
                                                                 stops_what_it_started):
    env = {"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": value}
    out = cli("start", "--dir", str(tmp_path / "s"), env=env)
    assert out.returncode == 2 and out.stdout == "false\n" and "Traceback" not in out.stderr
    assert "is not a port number (a whole number 1-65535)" in out.stderr
    status = cli("status", "--dir", str(tmp_path / "s"), env=env)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert "is not a port number" in status.stdout


@pytest.mark.parametrize("make, says", [
    ("file", "is a regular file, not a folder"),
    ("proc", "is in /proc"),
    ("proc-self", "is in /proc"),
    ("link", "is a link"),
    ("group-writable", "may be written by its group or others (mode 770)"),
    ("world-writable", "may be written by its group or others (mode 1777)"),
    ("other-user", "belongs to another user (uid 65534)"),
    ("under-a-file", "cannot be made"),
])
@pytest.mark.parametrize("command", ["start", "stop", "status"])
def test_a_dir_that_is_no_private_folder_is_refused_with_its_fix(tmp_path, make, says,
                                                                  command, stops_what_it_started):
    if make == "other-user" and os.geteuid() != 0:
        pytest.skip("makes a folder another user's with chown (root only)")
    folder = {"proc": Path("/proc/fedacg-superlink"), "proc-self": Path("/proc/self"),
              "under-a-file": tmp_path / "d" / "sub"}.get(make, tmp_path / "d")
    if make in ("file", "under-a-file"):
        (tmp_path / "d").write_text("a file")
    elif make == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "real")
    elif make.endswith("writable") or make == "other-user":
        folder.mkdir()
        folder.chmod({"group-writable": 0o770, "world-writable": 0o1777}.get(make, 0o700))
        if make == "other-user":
            os.chown(folder, 65534, 65534)
    refused = command == "start" or make not in ("under-a-file", "proc")
    if not refused:  # nothing there to read
        says = {"stop": "no SuperLink started by", "status": "yours: none running"}[command]
    out = cli(command, "--dir", str(folder),
              env={"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port())})
    assert "Traceback" not in out.stderr and says in out.stderr + out.stdout, out.stderr
    if refused:
        assert out.returncode == 2 and out.stderr.startswith("error: --dir")
    if command == "start":
        assert out.stdout == "false\n"
    assert not (tmp_path / "real" / "superlink.json").exists()
