"""The scripts of deploy/ as an operator calls them: settings by name, the environment never
silently ignored, one port per role with docker/'s compose demo, usage lines whose addresses
work. Flower's and nginx's commands are stand-ins here that print what they were given
(tests/test_deployment.py runs the real ones)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.deployment import default_sigint

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
sys.path.insert(0, str(ROOT / "docker"))
import make_compose  # noqa: E402

ECHO = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"


@pytest.fixture
def stubs(tmp_path):
    """PATH with flower-superlink, flower-supernode and nginx that print their arguments, one
    a line, and credentials files that exist."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name in ("flower-superlink", "flower-supernode", "nginx"):
        (bin_ / name).write_text(ECHO)
        (bin_ / name).chmod(0o755)
    creds = tmp_path / "creds"
    creds.mkdir()
    for name in ("ca.crt", "server.pem", "server.key", "node"):
        (creds / name).write_text("x")
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return env, creds


def script(name, *args, env):
    return subprocess.run(["bash", str(DEPLOY / name), *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_one_port_per_role_on_bare_metal_and_in_compose():
    """The SuperLink (the operator's port) 9093, the fleet proxy (the nodes') 9092, node i's
    Runtime API 9094 + i: the scripts' defaults and the compose generator's agree."""
    def default(name, variable):
        text = (DEPLOY / name).read_text()
        return int(re.search(rf"\b{variable}=(?:[0-9.]+:)?(\d+)", text).group(1))

    assert default("superlink.sh", "port") == make_compose.SUPERLINK_PORT == 9093
    assert default("fleet-proxy.sh", "listen") == make_compose.FLEET_PORT == 9092
    assert default("fleet-proxy.sh", "upstream") == 9093
    assert default("supernode.sh", "port") == make_compose.SUPERNODE_PORT == 9094


@pytest.mark.parametrize("name, says", [
    ("superlink.sh", ["--credentials DIR", "[--port 9093]"]),
    ("fleet-proxy.sh", ["--credentials DIR", "[--listen 0.0.0.0:9092]", "[--superlink 9093]"]),
    ("supernode.sh", ["--superlink ADDR:PORT", "e.g. 192.168.1.10:9092", "--data-path DIR"]),
    ("add-connection.sh", ["NAME ADDRESS CA_CERT", "lab 127.0.0.1:9093",
                           "Not the fleet proxy's port (9092)"]),
    ("register-supernodes.sh", ["CONNECTION KEY.pub", "127.0.0.1:9093"]),
])
def test_usage_names_each_setting_with_addresses_that_work(name, says, stubs):
    env, _ = stubs
    out = subprocess.run(["sh" if name.endswith("s.sh") or name.startswith("add") else "bash",
                          str(DEPLOY / name)], env=env, capture_output=True, text=True)
    assert out.returncode == 2
    for text in says:
        assert text in out.stderr, (text, out.stderr)
    assert "#!/" not in out.stderr and "set -" not in out.stderr


@pytest.mark.parametrize("name, variable, option", [
    ("fleet-proxy.sh", "LISTEN", "--listen"),  # the case: it bound 0.0.0.0 regardless
    ("fleet-proxy.sh", "SUPERLINK", "--superlink"),
    ("fleet-proxy.sh", "PROXY_RUN_DIR", "--run-dir"),
    ("superlink.sh", "HOST", "--host"),
    ("superlink.sh", "PORT", "--port"),
    ("superlink.sh", "SUPERLINK_DATABASE", "--database"),
    ("supernode.sh", "NODE_CONFIG_EXTRA", "--node-config"),
    ("supernode.sh", "DATA_PATH", "--data-path"),
    ("supernode.sh", "CLIENT_ID", "--client-id"),
    ("supernode.sh", "RUNTIME_PORT", "--runtime-port"),
])
def test_a_setting_in_the_environment_is_refused_naming_its_option(name, variable, option,
                                                                  stubs):
    env, creds = stubs
    args = {"superlink.sh": ["--credentials", str(creds)],
            "fleet-proxy.sh": ["--credentials", str(creds)],
            "supernode.sh": ["--superlink", "h:9092", "--ca", str(creds / "ca.crt"), "--key",
                             str(creds / "node"), "--data-path", "/d"]}[name]
    out = script(name, *args, env={**env, variable: "1.2.3.4"})
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert f"refusing {variable}=1.2.3.4 from the environment" in out.stderr
    assert f"({option} ...)" in out.stderr, out.stderr
    assert script(name, *args, "--bogus", "1", env=env).returncode == 2  # unknown: refused


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_superlink_takes_its_settings_by_name(stubs):
    env, creds = stubs
    port = free_port()
    out = script("superlink.sh", "--credentials", str(creds), f"--port={port}", "--database",
                 "/s.db", "--", "--log-file", "/l", env=env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == str(port)
    assert args[args.index("--database") + 1] == "/s.db" and args[-2:] == ["--log-file", "/l"]
    assert "--enable-supernode-auth" in args and "--insecure" not in args


def test_fleet_proxy_listens_where_it_is_told(stubs, tmp_path):
    env, creds = stubs
    run_dir = tmp_path / "proxy"
    out = script("fleet-proxy.sh", "--credentials", str(creds), "--listen", "127.0.0.1:7001",
                 "--superlink", "7002", "--run-dir", str(run_dir), env=env)
    assert out.returncode == 0, out.stderr
    conf = (run_dir / "nginx.conf").read_text()
    assert re.findall(r"listen (\S+) ssl;", conf) == ["127.0.0.1:7001"]
    assert set(re.findall(r"proxy_pass (\S+);", conf)) == {"https://127.0.0.1:7002"}
    assert out.stdout.splitlines()[1:3] == ["-c", f"{run_dir}/nginx.conf"]


@pytest.mark.parametrize("options, node_config", [
    (["--data-path", "/data/mine"], "data-path='/data/mine'"),
    (["--data-path", "/d", "--client-id", "2", "--num-clients", "5", "--cache-dir", "/c"],
     "client-id=2 num-clients=5 data-path='/d' cache-dir='/c'"),
    (["--client-id", "1", "--num-clients", "2", "--node-config", "extra-key=3"],
     "client-id=1 num-clients=2 extra-key=3"),
])
def test_supernode_node_config_is_built_from_the_options(options, node_config, stubs):
    env, creds = stubs
    out = script("supernode.sh", "--superlink", "10.0.0.1:9092", "--ca", str(creds / "ca.crt"),
                 "--key", str(creds / "node"), *options, env=env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[args.index("--node-config") + 1] == node_config
    assert args[args.index("--superlink") + 1] == "10.0.0.1:9092"
    assert args[args.index("--port") + 1] == "9094"


@pytest.mark.parametrize("options, says", [
    (["--client-id", "0"], "give both"),  # no data-path: the partition needs id and N
    (["--data-path", "/d", "--client-id", "0", "--node-config", "partition-id=1"],
     "--node-config sets partition-id"),  # one setting given twice
    (["--data-path", "/d", "--node-config", "data-path='/e'"], "--node-config sets data-path"),
    (["--data-path", "/it's"], "cannot be passed"),
    (["--data-path", "/d", "--num-clients", "3"], "--num-clients without --client-id"),
])
def test_supernode_refuses_settings_it_could_not_honour(options, says, stubs):
    env, creds = stubs
    out = script("supernode.sh", "--superlink", "h:9092", "--ca", str(creds / "ca.crt"),
                 "--key", str(creds / "node"), *options, env=env)
    assert out.returncode == 2 and out.stdout == "" and says in out.stderr, out.stderr


# --- every option's value checked (issue 50) ---------------------------------------------------
def supernode(creds, *options, env, superlink="10.0.0.1:9092"):
    return script("supernode.sh", "--superlink", superlink, "--ca", str(creds / "ca.crt"),
                  "--key", str(creds / "node"), *options, env=env)


@pytest.mark.parametrize("option, value", [
    ("--client-id", "3 other-key=1"), ("--client-id", "3,x"), ("--client-id", "-1"),
    ("--client-id", "1.5"), ("--client-id", "01"), ("--client-id", "x"),
    ("--client-id", "\u0663"), ("--client-id", " 1"), ("--client-id", "1\nkey=2"),
    ("--client-id", "1e3"), ("--client-id", "1234567890"),
    ("--num-clients", "5 client-id=1"), ("--num-clients", "2,3"), ("--num-clients", "-2"),
    ("--num-clients", "true"), ("--num-clients", "4.0"),
])
def test_supernode_client_id_and_num_clients_are_whole_numbers_alone(option, value, stubs):
    """A second setting riding inside a number ('3 other-key=1') would reach the node config."""
    env, creds = stubs
    other = {"--client-id": ["--num-clients", "9"], "--num-clients": ["--client-id", "1"]}
    out = supernode(creds, option, value, *other[option], env=env)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert f"{option} {value}: not a whole number" in out.stderr, out.stderr


@pytest.mark.parametrize("cid, n, says", [
    ("2", "2", "client ids are 0 .. 1"), ("5", "3", "client ids are 0 .. 2"),
    ("0", "0", "at least one client"),
])
def test_supernode_client_id_is_one_of_num_clients(cid, n, says, stubs):
    env, creds = stubs
    out = supernode(creds, "--client-id", cid, "--num-clients", n, env=env)
    assert out.returncode == 2 and out.stdout == "" and says in out.stderr, out.stderr
    last = supernode(creds, "--client-id", str(int(n) - 1), "--num-clients", n, env=env)
    assert (last.returncode == 0) == (int(n) > 0), last.stderr


@pytest.mark.parametrize("address", [
    "h", "h:0", "h:65536", "h:x", "h:", ":9092", "a b:9092", "host_name:9092", "-h:9092",
    "fd00::1:9092", "[h]:9092", "h:9092 --insecure", "1.2.3.256:9092", "h:09092",
])
def test_supernode_superlink_is_a_host_and_a_port(address, stubs):
    env, creds = stubs
    out = supernode(creds, "--client-id", "0", "--num-clients", "1", env=env, superlink=address)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert f"--superlink {address}: give HOST:PORT" in out.stderr, out.stderr


@pytest.mark.parametrize("address", [
    "[fd00::1]:9092", "fleet.example.org:9092", "10.0.0.1:1", "localhost:65535", "h:9092"])
def test_supernode_superlink_names_and_addresses_that_work(address, stubs):
    env, creds = stubs
    out = supernode(creds, "--client-id", "0", "--num-clients", "1", env=env, superlink=address)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[args.index("--superlink") + 1] == address


@pytest.mark.parametrize("port", ["0", "65536", "9094 x", "-1", "abc"])
def test_supernode_runtime_port_is_a_port(port, stubs):
    env, creds = stubs
    out = supernode(creds, "--data-path", "/d", "--runtime-port", port, env=env)
    assert out.returncode == 2 and f"--runtime-port {port}: not a port" in out.stderr


@pytest.mark.parametrize("extra", ['"client-id"=3', "'num-clients'=4", 'a=1 "data-path"=/x'])
def test_supernode_node_config_may_not_set_an_option_through_a_quoted_key(extra, stubs):
    env, creds = stubs
    out = supernode(creds, "--data-path", "/d", "--node-config", extra, env=env)
    assert out.returncode == 2 and "--node-config sets" in out.stderr, out.stderr


def superlink(creds, *options, env):
    return script("superlink.sh", "--credentials", str(creds), *options, env=env)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "127.255.255.254", "localhost",
                                  "::1"])
def test_superlink_loopback_hosts_are_taken(host, stubs):
    env, creds = stubs
    out = superlink(creds, "--host", host, "--port", str(free_port()), env=env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[args.index("--host") + 1] == host


@pytest.mark.parametrize("host", ["127.evil.com", "127.0.0.1.evil.com", "localhost.evil",
                                  "10.0.0.1", "0.0.0.0", "::", "::2", "fleet.example.org"])
def test_superlink_a_host_that_is_not_loopback_is_refused_unless_opened(host, stubs):
    """Loopback is exactly 127.0.0.0/8, ::1 and localhost: a name starting with '127.' is not."""
    env, creds = stubs
    port = str(free_port())
    out = superlink(creds, "--host", host, "--port", port, env=env)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert f"refusing --host {host}" in out.stderr and "FEDACG_OPEN_CONTROL_API=1" in out.stderr
    opened = superlink(creds, "--host", host, "--port", port,
                       env={**env, "FEDACG_OPEN_CONTROL_API": "1"})
    assert opened.returncode == 0, opened.stderr


@pytest.mark.parametrize("host", ["a b", "host_name", "127.0.0.1 --insecure", "-h", "127.1",
                                  "127.0.0.256", "1::2::3", "a..b"])
def test_superlink_a_host_that_is_no_name_or_address_is_refused_even_when_opened(host, stubs):
    env, creds = stubs
    out = superlink(creds, "--host", host, env={**env, "FEDACG_OPEN_CONTROL_API": "1"})
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert f"--host {host}: not a host name or address" in out.stderr, out.stderr


@pytest.mark.parametrize("port", ["0", "65536", "9093 x", "-1", "abc", "09093"])
def test_superlink_port_is_a_port(port, stubs):
    env, creds = stubs
    out = superlink(creds, "--port", port, env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert f"--port {port}: not a port (a whole number 1-65535)" in out.stderr, out.stderr


def test_superlink_on_a_taken_port_names_it_and_the_fix(stubs):
    """Checked before Flower starts, which would end with a bare 'address already in use'."""
    import socket

    env, creds = stubs
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = superlink(creds, "--port", str(port), env=env)
        opened = superlink(creds, "--host", "0.0.0.0", "--port", str(port),
                           env={**env, "FEDACG_OPEN_CONTROL_API": "1"})
    for run in (out, opened):
        assert run.returncode == 2 and run.stdout == "", run.stdout
        assert f"--port {port}: something listens on" in run.stderr, run.stderr
        assert "give --port another port" in run.stderr


# --- the teardown: what the steps made is removed, and nothing else ------------------------
def test_remove_connection_takes_out_exactly_the_block_add_connection_added(stubs, tmp_path):
    """add-connection.sh lab, then another connection after it; remove-connection.sh lab
    leaves the file as if only the other had been added (its own text compared, byte for
    byte); on a home without a config, add + remove leaves the file add-connection made."""
    env, creds = stubs
    ca = str(creds / "ca.crt")
    for home in ("with-lab", "without"):
        flwr = tmp_path / home / ".flwr"
        flwr.mkdir(parents=True)
        (flwr / "config.toml").write_text('[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                          'address = ":local:"\n\n[superlink.other]\n'
                                          'address = "10.0.0.1:9093"\n')
    run = {h: {**env, "HOME": str(tmp_path / h)} for h in ("with-lab", "without", "fresh")}

    def sh(name, *args, home):
        out = subprocess.run(["sh", str(DEPLOY / name), *args], env=run[home],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out

    sh("add-connection.sh", "lab", "127.0.0.1:9093", ca, home="with-lab")
    for home in ("with-lab", "without"):
        sh("add-connection.sh", "after", "127.0.0.1:9095", ca, home=home)
    out = sh("remove-connection.sh", "lab", home="with-lab")
    assert "removed [superlink.lab]" in out.stdout
    config = tmp_path / "with-lab" / ".flwr" / "config.toml"
    assert config.read_text() == (tmp_path / "without" / ".flwr" / "config.toml").read_text()
    (tmp_path / "fresh").mkdir()
    sh("add-connection.sh", "lab", "127.0.0.1:9093", ca, home="fresh")
    sh("remove-connection.sh", "lab", home="fresh")
    assert (tmp_path / "fresh" / ".flwr" / "config.toml").read_text() == (
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n')


@pytest.mark.parametrize("args, code, says", [
    (["lab"], 1, "has no connection 'lab'"),
    (["local"], 1, "'local' is the default connection"),
    (["a]b"], 2, "letters, digits, - and _ only"),
    ([], 2, "NAME"),
])
def test_remove_connection_refuses_what_it_cannot_remove_naming_why(args, code, says, stubs,
                                                                    tmp_path):
    env, _ = stubs
    flwr = tmp_path / ".flwr"
    flwr.mkdir()
    text = '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
    (flwr / "config.toml").write_text(text)
    out = subprocess.run(["sh", str(DEPLOY / "remove-connection.sh"), *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == code and says in out.stderr, out.stderr
    assert (flwr / "config.toml").read_text() == text


def proxy_folder(output: str) -> Path:
    return Path(re.search(r"config (\S+)/nginx\.conf", output).group(1))


def test_the_fleet_proxy_removes_the_folder_it_made_when_nginx_stops(stubs, tmp_path):
    """Its own temp folder (under TMPDIR) is gone once nginx ends; a --run-dir is left."""
    env, creds = stubs
    out = script("fleet-proxy.sh", "--credentials", str(creds), env=env)
    assert out.returncode == 0, out.stderr
    made = proxy_folder(out.stdout)
    assert made.parent == tmp_path and made.name.startswith("fleet-proxy.")
    assert out.stdout.splitlines()[2] == f"{made}/nginx.conf"  # nginx was given it
    assert not made.exists()
    kept = tmp_path / "kept"
    out = script("fleet-proxy.sh", "--credentials", str(creds), "--run-dir", str(kept), env=env)
    assert out.returncode == 0 and (kept / "nginx.conf").is_file()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_fleet_proxy_passes_a_signal_to_nginx_then_removes_its_folder(sig, stubs, tmp_path):
    """A signal to the script alone (no process group) reaches nginx, and the folder goes."""
    env, creds = stubs
    started = tmp_path / "nginx-started"
    nginx = Path(env["PATH"].split(":")[0]) / "nginx"  # runs until a signal ends it
    nginx.write_text(f"#!/bin/sh\ntrap 'exit 0' TERM\necho \"$$\" > {started}\n"
                     "while :; do sleep 1; done\n")
    # started as from a pytest in the background (`cmd &`), which ignores SIGINT and hands that
    # on: a shell cannot trap a signal ignored on entry, so default_sigint gives it back
    ignoring = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(["bash", str(DEPLOY / "fleet-proxy.sh"), "--credentials",
                                 str(creds)], env=env, stdout=subprocess.PIPE, text=True,
                                preexec_fn=default_sigint)
    finally:
        signal.signal(signal.SIGINT, ignoring)
    try:
        folder = proxy_folder(proc.stdout.readline())
        deadline = time.monotonic() + 60
        while not (started.exists() and started.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None, "nginx did not start"
            time.sleep(0.05)
        nginx_pid = int(started.read_text())
        assert folder.is_dir()
        proc.send_signal(sig)
        assert proc.wait(60) == 0
        assert not folder.exists()
        assert not Path(f"/proc/{nginx_pid}").exists()  # ended, and reaped by the script
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if started.exists() and started.read_text().strip():
            try:
                os.kill(int(started.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_background_check_raises_for_an_ended_command_only_among_those_named(tmp_path):
    """restart_superlink waits on the SuperLink and the proxy alone: a node that has ended
    (a refused one) is not the restart's failure (issue 50's field test)."""
    from experiments.deployment import Background, wait_until

    background = Background(tmp_path)
    background.start("ended", [sys.executable, "-c", "print('bye')"], dict(os.environ))
    background.start("alive", [sys.executable, "-c", "import time; time.sleep(60)"],
                     dict(os.environ))
    try:
        background.procs["ended"].wait(30)
        background.check(("alive",))
        wait_until(lambda: True, 1, "nothing", background, ("alive",))
        with pytest.raises(RuntimeError, match="ended exited .0.:\nbye"):
            background.check()
        with pytest.raises(RuntimeError, match="ended exited"):
            wait_until(lambda: False, 30, "never", background, ("alive", "ended"))
    finally:
        background.stop()
