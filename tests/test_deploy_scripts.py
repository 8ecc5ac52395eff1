"""The scripts of deploy/ as an operator calls them: settings by name, the environment never
silently ignored, one port per role with docker/'s compose demo, usage lines whose addresses
work. Flower's and nginx's commands are stand-ins here that print what they were given
(tests/test_deployment.py runs the real ones)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from experiments.deployment import default_sigint

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
sys.path.insert(0, str(ROOT / "docker"))
sys.path.insert(0, str(ROOT / "tests"))
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
    # (the Python of these tests second: deploy/configs.py needs flwr and tomli_w)
    env = {"PATH": f"{bin_}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "TMPDIR": str(tmp_path)}
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


def flower_reads(node_config: str) -> dict:
    """What flower-supernode reads from its --node-config (Flower's own parser)."""
    from flwr.common.config import parse_config_args

    return parse_config_args([node_config])


@pytest.mark.parametrize("options, settings", [
    (["--data-path", "/data/mine"], {"data-path": "/data/mine"}),
    (["--data-path", "/d", "--client-id", "2", "--num-clients", "5", "--cache-dir", "/c"],
     {"client-id": 2, "num-clients": 5, "data-path": "/d", "cache-dir": "/c"}),
    (["--client-id", "1", "--num-clients", "2", "--node-config", "extra-key=3"],
     {"client-id": 1, "num-clients": 2, "extra-key": 3}),
    (["--data-path", "/it's", "--cache-dir", "/my cache"],  # written by tomli_w: quoted right
     {"data-path": "/it's", "cache-dir": "/my cache"}),
    (["--data-path", "/a\\b\u00fc", "--node-config", "note='x y' b=true"],
     {"data-path": "/a\\b\u00fc", "note": "x y", "b": True}),
])
def test_supernode_node_config_is_built_from_the_options(options, settings, stubs):
    """Read back with Flower's own parser: exactly the options' settings and --node-config's."""
    env, creds = stubs
    out = script("supernode.sh", "--superlink", "10.0.0.1:9092", "--ca", str(creds / "ca.crt"),
                 "--key", str(creds / "node"), *options, env=env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert flower_reads(args[args.index("--node-config") + 1]) == settings
    assert args[args.index("--superlink") + 1] == "10.0.0.1:9092"
    assert args[args.index("--port") + 1] == "9094"


@pytest.mark.parametrize("options, says", [
    (["--client-id", "0"], "give both"),  # no data-path: the partition needs id and N
    (["--data-path", "/d", "--client-id", "0", "--node-config", "partition-id=1"],
     "--node-config sets partition-id"),  # one setting given twice
    (["--data-path", "/d", "--node-config", "data-path='/e'"], "--node-config sets data-path"),
    (["--data-path", '/it"s'], "give a folder whose name has no '\"'"),
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


# --- nothing pasted, nothing planted (issue 58) ------------------------------------------------
# Each generated config is read back with its consumer's own parser: nginx -t, tomllib and
# Flower's connection reader, Flower's node-config parser.
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
needs_nginx = pytest.mark.skipif(not os.access(NGINX, os.X_OK), reason="nginx not installed")


@pytest.fixture(scope="module")
def real_creds(tmp_path_factory):
    """ca.crt, server.pem and server.key from deploy/credentials.py (nginx -t loads them)."""
    out = tmp_path_factory.mktemp("real-creds")
    made = subprocess.run([sys.executable, str(DEPLOY / "credentials.py"), "tls", "--out",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return out


SHELL_ERROR = re.compile(r"Traceback|\.sh: (line \d+: )?|command not found|unbound variable|"
                         r"No such file or directory:")


def one_message(out, code=2):
    """Refused: the status, nothing on stdout, a message and no traceback or shell error."""
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert out.stdout == "", out.stdout
    assert out.stderr.strip(), "no message"
    assert not SHELL_ERROR.search(out.stderr), out.stderr


def proxy(creds, *options, env):
    return script("fleet-proxy.sh", "--credentials", str(creds), *options, env=env)


@pytest.mark.parametrize("option, value", [
    ("--listen", "0.0.0.0:9092 ssl; } server { listen 8080"),  # a plain-HTTP server added
    ("--listen", "0.0.0.0:9092;"),
    ("--listen", "127.0.0.1:9092\nlisten 8080"),
    ("--listen", "0.0.0.0 9092"),
    ("--listen", "{:9092"),
    ("--listen", "$host:9092"),
    ("--listen", "0.0.0.0:9092 http2"),
    ("--listen", "::1:9092"),  # IPv6 without brackets
    ("--superlink", "9093; } location /v1/control/ { proxy_pass https://127.0.0.1:9093;"),
    ("--superlink", "9093;}location /{proxy_pass https://127.0.0.1:9093"),
    ("--superlink", "superlink:9093 {"),
    ("--superlink", "[::1]:9093;"),
    ("--superlink", "127.0.0.1:9093/v1/control/"),
    ("--superlink", "location"),
    ("--superlink", "9093\n"),
    ("--superlink", "h:9093#"),
])
def test_fleet_proxy_refuses_a_value_nginx_would_read_as_more_config(option, value, stubs,
                                                                     tmp_path):
    """One argument could forward the Control API on the public port or add a plain-HTTP
    listener: every value is a host, a port or a path by a strict grammar, or refused."""
    env, creds = stubs
    run = tmp_path / "run"
    out = proxy(creds, option, value, "--run-dir", str(run), env=env)
    one_message(out)
    assert f"{option} {value}:" in out.stderr, out.stderr
    assert not (run / "nginx.conf").exists()


@pytest.mark.parametrize("listen, upstream", [
    ("127.0.0.1:9093", "9093"), ("0.0.0.0:9093", "127.0.0.1:9093"), ("[::]:9093", "[::1]:9093"),
    ("10.0.0.5:7000", "localhost:7000")])
def test_fleet_proxy_does_not_take_the_superlinks_own_port(listen, upstream, stubs, tmp_path):
    """The SuperLink's port on this machine serves the Control API: never the proxy's."""
    env, creds = stubs
    out = proxy(creds, "--listen", listen, "--superlink", upstream, env=env)
    one_message(out)
    assert "the SuperLink's own" in out.stderr and "Control API" in out.stderr, out.stderr


@pytest.mark.parametrize("folder", ["cr;eds", "cr eds", "cr{eds", "cr$eds", "cr\neds", "cr'ds",
                                    'cr"ds', "cr#ds"])
def test_fleet_proxy_refuses_a_path_nginx_would_read_otherwise(folder, stubs, tmp_path):
    """--credentials, --run-dir and TMPDIR stand in nginx.conf: plain paths only."""
    env, creds = stubs
    odd = tmp_path / folder
    odd.mkdir(mode=0o700)
    for name in ("ca.crt", "server.pem", "server.key"):
        (odd / name).write_text("x")
    for options, extra_env in ((["--credentials", str(odd)], {}),
                               (["--credentials", str(creds), "--run-dir", str(odd)], {}),
                               (["--credentials", str(creds)], {"TMPDIR": str(odd)}),
                               (["--credentials", str(creds), "--run-dir", str(tmp_path / "r")],
                                {"TMPDIR": str(odd)})):  # (the buffers' folder: in TMPDIR)
        out = script("fleet-proxy.sh", *options, env={**env, **extra_env})
        one_message(out)
        assert "nginx.conf takes a path of letters, digits, '.', '_', '-', '+' and '/' only" \
            in out.stderr, out.stderr
        assert not (odd / "nginx.conf").exists()
    assert [p.name for p in odd.iterdir() if p.name.startswith(".")] == []  # nothing left


@needs_nginx
@pytest.mark.parametrize("listen, upstream, proxy_pass", [
    ("127.0.0.1:7001", "7002", "https://127.0.0.1:7002"),
    ("0.0.0.0:9092", "localhost:9093", "https://localhost:9093"),  # (nginx -t resolves)
    ("[::]:9092", "[::1]:9093", "https://[::1]:9093"),
    ("localhost:8443", "10.0.0.2:9093", "https://10.0.0.2:9093"),
])
def test_fleet_proxy_config_is_one_nginx_takes(listen, upstream, proxy_pass, stubs, real_creds,
                                               tmp_path):
    """nginx -t (nginx's own parser) takes the generated file; one TLS listener, the three
    locations, the upstream where it was told."""
    env, _ = stubs
    nginx = Path(env["PATH"].split(":")[0]) / "nginx"
    nginx.write_text(f'#!/bin/sh\nexec {NGINX} -t "$@"\n')
    run = tmp_path / "run"
    out = proxy(real_creds, "--listen", listen, "--superlink", upstream, "--run-dir", str(run),
                env=env)
    assert out.returncode == 0, out.stderr
    assert "test is successful" in out.stderr, out.stderr
    conf = (run / "nginx.conf").read_text()
    assert re.findall(r"^\s*listen (.*);$", conf, re.M) == [f"{listen} ssl"]
    assert re.findall(r"^\s*location (.*) \{$", conf, re.M) == ["/v1/fleet/", "= /health", "/"]
    assert set(re.findall(r"proxy_pass (\S+);", conf)) == {proxy_pass}


# the run folder: the user's own, no link followed, nothing chowned or chmodded
def ls(path: Path) -> tuple:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, oct(st.st_mode)


def test_fleet_proxy_leaves_a_private_run_dir_private(stubs, tmp_path):
    env, creds = stubs
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    before = ls(run)
    out = proxy(creds, "--run-dir", str(run), env=env)
    assert out.returncode == 0, out.stderr
    assert ls(run) == before and (run / "nginx.conf").is_file()
    assert sorted(p.name for p in run.iterdir()) == ["nginx.conf"]  # no buffers of nginx here
    assert [p for p in tmp_path.iterdir() if p.name.startswith("fleet-proxy.")] == []  # removed
    fresh = tmp_path / "fresh"
    assert proxy(creds, "--run-dir", str(fresh), env=env).returncode == 0
    assert oct(os.lstat(fresh).st_mode & 0o777) == "0o700"  # made private


@pytest.mark.parametrize("name", ["nginx.conf", "nginx.pid", "access.log"])
def test_fleet_proxy_refuses_a_link_in_its_run_dir(name, stubs, tmp_path):
    """nginx (as root) would write through it: the pid file truncates what it points to."""
    env, creds = stubs
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    before = ls(victim)
    (run / name).symlink_to(victim)
    out = proxy(creds, "--run-dir", str(run), env=env)
    one_message(out)
    assert f"{name} there is a link" in out.stderr and f"Remove {run}/{name}" in out.stderr
    assert victim.read_text() == "precious\n" and ls(victim) == before
    assert (run / name).is_symlink()


def test_fleet_proxy_chowns_nothing_it_finds_in_its_run_dir(stubs, tmp_path):
    """The old buffer folders' names, links to a folder of someone else's: left alone."""
    env, creds = stubs
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o750)
    before = ls(victim)
    for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (run / name).symlink_to(victim)
    out = proxy(creds, "--run-dir", str(run), env=env)
    assert out.returncode == 0, out.stderr
    assert ls(victim) == before and list(victim.iterdir()) == []
    assert str(run / "body") not in (run / "nginx.conf").read_text()


def test_fleet_proxy_refuses_a_linked_run_dir(stubs, tmp_path):
    env, creds = stubs
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "run"
    link.symlink_to(target)
    for given in (str(link), f"{link}/", f"{link}//"):
        out = proxy(creds, "--run-dir", given, env=env)
        one_message(out)
        assert "is a link" in out.stderr, out.stderr
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o702])
def test_fleet_proxy_refuses_a_run_dir_others_may_write(mode, stubs, tmp_path):
    env, creds = stubs
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    out = proxy(creds, "--run-dir", str(run), env=env)
    one_message(out)
    assert "written by its group or others" in out.stderr and "chmod 700" in out.stderr
    assert os.lstat(run).st_mode & 0o7777 == mode and list(run.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user needs root")
def test_fleet_proxy_refuses_another_users_run_dir(stubs, tmp_path):
    from other_user import NOBODY

    env, creds = stubs
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.chown(run, NOBODY, NOBODY)
    before = ls(run)
    out = proxy(creds, "--run-dir", str(run), env=env)
    one_message(out)
    assert "belongs to another user" in out.stderr, out.stderr
    assert ls(run) == before and list(run.iterdir()) == []


def test_fleet_proxy_refuses_a_run_dir_that_is_no_folder(stubs, tmp_path):
    env, creds = stubs
    (tmp_path / "file").write_text("x")
    for given, says in ((tmp_path / "file", "is not a folder"),
                        (tmp_path / "no" / "such", "cannot be made")):
        out = proxy(creds, "--run-dir", str(given), env=env)
        one_message(out)
        assert says in out.stderr, out.stderr
    assert (tmp_path / "file").read_text() == "x"


# config.toml (add-connection.sh): tomli_w writes, tomllib and Flower read back
def add_connection(*args, env):
    return subprocess.run(["sh", str(DEPLOY / "add-connection.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def flower_connection(home: Path, name: str):
    """The connection as `flwr` reads it (Flower's own reader of config.toml)."""
    code = ("import sys; from flwr.cli.flower_config import read_superlink_connection as r; "
            "c = r(sys.argv[1]); print(c.address); print(c.root_certificates); "
            "print(c.insecure)")
    out = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                         env={**os.environ, "FLWR_HOME": str(home)}, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


START = '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'


@pytest.mark.parametrize("name", ["a.b", 'a"b', "a[b", "a]b", "a\nb", "a b", "", "lab",
                                  "loc\u00e4l", "a=b", "x" * 65, "#a"])
def test_add_connection_refuses_a_name_toml_would_read_otherwise(name, stubs, tmp_path):
    """A name with '.', '"', '[' or a newline would make another table or key; 'lab' is taken
    (a second [superlink.lab] would break every flwr command)."""
    env, creds = stubs
    flwr = tmp_path / ".flwr"
    flwr.mkdir()
    text = START + '\n[superlink.lab]\naddress = "10.0.0.1:9093"\n'
    (flwr / "config.toml").write_text(text)
    out = add_connection(name, "127.0.0.1:9093", str(creds / "ca.crt"), env=env)
    one_message(out, 2)
    says = "already has a connection 'lab'" if name == "lab" else "letters, digits, - and _"
    assert says in out.stderr, out.stderr
    assert (flwr / "config.toml").read_text() == text
    tomllib.loads(text)


@pytest.mark.parametrize("address", [
    '127.0.0.1:9093"\ninsecure = true\n#', "127.0.0.1:9093\ninsecure = true",
    '127.0.0.1:9093" insecure = true', "127.0.0.1:9093 --insecure", "insecure",
    "127.0.0.1", "127.0.0.1:0", ":local:", "h:9093\n[superlink.other]", "[h]:9093",
    "fd00::1:9093", "127.0.0.1:9093/x"])
def test_add_connection_refuses_an_address_that_is_no_host_and_port(address, stubs, tmp_path):
    """An address could have switched TLS off (insecure = true) in the pasted file."""
    env, creds = stubs
    out = add_connection("lab", address, str(creds / "ca.crt"), env=env)
    one_message(out, 2)
    assert f"ADDRESS {address}: give HOST:PORT" in out.stderr, out.stderr
    assert not (tmp_path / ".flwr" / "config.toml").exists()


@pytest.mark.parametrize("name, address", [("lab", "127.0.0.1:9093"), ("B-2_x", "[::1]:9093"),
                                           ("remote", "superlink.example.org:443")])
def test_add_connection_is_read_by_flower_as_given(name, address, stubs, tmp_path):
    """Flower's own reader finds the connection: its address, the CA, TLS on; the user's text
    before it kept byte for byte (a comment too)."""
    env, creds = stubs
    flwr = tmp_path / ".flwr"
    flwr.mkdir()
    text = "# mine\n" + START + "\n[superlink.other]  # kept\naddress = \"10.0.0.1:9093\""
    (flwr / "config.toml").write_text(text)
    odd_ca = tmp_path / 'it\'s "my" ca'
    odd_ca.mkdir()
    (odd_ca / "ca.crt").write_text("x")
    out = add_connection(name, address, str(odd_ca / "ca.crt"), env=env)
    assert out.returncode == 0, out.stderr
    new = (flwr / "config.toml").read_text()
    assert new.startswith(text + "\n")
    parsed = tomllib.loads(new)["superlink"]
    assert parsed[name] == {"address": address, "root-certificates": str(odd_ca / "ca.crt")}
    assert set(parsed) == {"default", "local", "other", name}
    assert flower_connection(flwr, name) == [address, str(odd_ca / "ca.crt"), "False"]


@pytest.mark.parametrize("text, says", [
    ("[superlink\n", "is not valid TOML"),
    ('superlink = "x"\n', "not a table of connections"),
    ('superlink = {default = "local"}\n', "cannot be appended"),
    ("a = " + "[" * 5000 + "\n", "is not valid TOML"),  # nested past Python's recursion
    ("a = " + "9" * 5000 + "\n", "is not valid TOML"),  # past Python's 4300 digits
], ids=["cut", "not-a-table", "inline", "too-deep", "long-number"])
def test_add_connection_refuses_a_file_it_cannot_add_to(text, says, stubs, tmp_path):
    """Whatever the user's config.toml holds ends in one message naming it, never a traceback
    (tomllib raises RecursionError and ValueError besides TOMLDecodeError)."""
    env, creds = stubs
    flwr = tmp_path / ".flwr"
    flwr.mkdir()
    (flwr / "config.toml").write_text(text)
    out = add_connection("lab", "127.0.0.1:9093", str(creds / "ca.crt"), env=env)
    one_message(out, 2)
    assert says in out.stderr and (flwr / "config.toml").read_text() == text, out.stderr


def test_add_and_remove_connection_never_write_through_a_link(stubs, tmp_path):
    env, creds = stubs
    flwr = tmp_path / ".flwr"
    flwr.mkdir()
    victim = tmp_path / "victim.toml"
    victim.write_text(START)
    (flwr / "config.toml").symlink_to(victim)
    out = add_connection("lab", "127.0.0.1:9093", str(creds / "ca.crt"), env=env)
    one_message(out, 2)
    assert "is a link" in out.stderr, out.stderr
    out = subprocess.run(["sh", str(DEPLOY / "remove-connection.sh"), "local"], env=env,
                         capture_output=True, text=True, timeout=60)
    one_message(out, 2)
    assert "is a link" in out.stderr, out.stderr
    assert victim.read_text() == START and (flwr / "config.toml").is_symlink()


# the node config (supernode.sh): Flower's own parser decides what --node-config sets
@pytest.mark.parametrize("extra, key", [
    ("x='a'client-id=3", "client-id"),  # no space before the key: the old check's blind spot
    ('x="a"cache-dir="/c"', "cache-dir"),
    ('"cache\\u002ddir"="/c"', "cache-dir"),  # a TOML escape in a quoted key
    ('"client\\u002did"=3', "client-id"),
    ("a=1\tnum-clients=4", "num-clients"),
    ("a=1\nnum-clients=4", "num-clients"),
    ('"client-id"=3', "client-id"),
    ("'num-clients'=4", "num-clients"),
    ('a=1 "data-path"="/x"', "data-path"),
    ("partition-id=1", "partition-id"),
    ("x=1 num-partitions=2", "num-partitions"),
    ("a.b=1 'cache-dir'='off'", "cache-dir"),
])
def test_supernode_node_config_may_not_set_an_options_key_as_flower_reads_it(extra, key,
                                                                          stubs):
    assert key in flower_reads(extra)  # (Flower does read the key from it)
    env, creds = stubs
    out = supernode(creds, "--data-path", "/d", "--node-config", extra, env=env)
    one_message(out)
    assert f"--node-config sets {key}" in out.stderr, out.stderr


@pytest.mark.parametrize("options, says", [
    (["--node-config", "/tmp/evil.toml"], "ends in '.toml'"),  # Flower would read that file
    (["--node-config", "x=a.toml"], "ends in '.toml'"),
    (["--node-config", "a=1,client-id=2"], "Flower cannot read"),
    (["--node-config", "a=[1"], "Flower cannot read"),
    (["--data-path", '/d"x'], "--data-path '/d\"x'"),
    (["--cache-dir", '/c"'], "--cache-dir '/c\"'"),
])
def test_supernode_refuses_a_node_config_flower_would_read_otherwise(options, says, stubs):
    env, creds = stubs
    out = supernode(creds, "--client-id", "0", "--num-clients", "1", *options, env=env)
    one_message(out)
    assert says in out.stderr, out.stderr


# every deploy script: bad arguments and bad folders end with one message and the fix
@pytest.mark.parametrize("case", [
    "superlink-no-creds", "superlink-creds-file", "proxy-no-creds", "proxy-creds-file",
    "proxy-missing-cert", "proxy-bad-tmpdir", "supernode-no-ca", "supernode-ca-folder",
    "add-no-ca", "add-home-file", "add-config-folder", "remove-config-folder",
    "credentials-out-file", "credentials-bad-san", "supernode-no-python", "add-no-python",
])
def test_every_deploy_script_ends_bad_input_with_one_message(case, stubs, tmp_path):
    env, creds = stubs
    afile = tmp_path / "a-file"
    afile.write_text("x")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    missing = str(tmp_path / "missing")
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "ca.crt").write_text("x")
    no_python = {**env, "PATH": env["PATH"].split(":")[0] + ":/usr/bin:/bin"}
    sh, node = ["sh"], ["--superlink", "h:9092", "--key", str(creds / "node"), "--data-path", "/d"]
    command, run_env = {
        "superlink-no-creds": (["superlink.sh", "--credentials", missing], env),
        "superlink-creds-file": (["superlink.sh", "--credentials", str(afile)], env),
        "proxy-no-creds": (["fleet-proxy.sh", "--credentials", missing], env),
        "proxy-creds-file": (["fleet-proxy.sh", "--credentials", str(afile)], env),
        "proxy-missing-cert": (["fleet-proxy.sh", "--credentials", str(partial)], env),
        "proxy-bad-tmpdir": (["fleet-proxy.sh", "--credentials", str(creds)],
                             {**env, "TMPDIR": missing}),
        "supernode-no-ca": (["supernode.sh", "--ca", missing, *node], env),
        "supernode-ca-folder": (["supernode.sh", "--ca", str(folder), *node], env),
        "supernode-no-python": (["supernode.sh", "--ca", str(creds / "ca.crt"), *node],
                                no_python),
        "add-no-ca": (sh + ["add-connection.sh", "lab", "h:9093", missing], env),
        "add-home-file": (sh + ["add-connection.sh", "lab", "h:9093", str(creds / "ca.crt")],
                          {**env, "FLWR_HOME": str(afile)}),
        "add-config-folder": (sh + ["add-connection.sh", "lab", "h:9093",
                                    str(creds / "ca.crt")], {**env, "FLWR_HOME": str(tmp_path)}),
        "add-no-python": (sh + ["add-connection.sh", "lab", "h:9093", str(creds / "ca.crt")],
                          no_python),
        "remove-config-folder": (sh + ["remove-connection.sh", "lab"],
                                 {**env, "FLWR_HOME": str(tmp_path)}),
        "credentials-out-file": ([sys.executable, "credentials.py", "tls", "--out", str(afile)],
                                 env),
        "credentials-bad-san": ([sys.executable, "credentials.py", "tls", "--out", str(folder),
                                 "--san", "FOO:1"], env),
    }[case]
    if case in ("add-config-folder", "remove-config-folder"):
        (tmp_path / "config.toml").mkdir()
    if case.endswith("no-python") and subprocess.run(
            ["sh", "-c", "python3 -c 'import flwr, tomli_w'"], env=run_env,
            capture_output=True).returncode == 0:
        pytest.skip("the system python3 has flwr and tomli_w")
    if command[0] in ("sh", sys.executable):
        argv = [command[0], str(DEPLOY / command[1]), *command[2:]]
    else:
        argv = ["bash", str(DEPLOY / command[0]), *command[1:]]
    out = subprocess.run(argv, env=run_env, capture_output=True, text=True, timeout=120)
    assert out.returncode in (1, 2), (out.returncode, out.stderr)
    assert out.stderr.strip() and not SHELL_ERROR.search(out.stderr), out.stderr
    first = out.stderr.strip().splitlines()
    assert len(first) <= 4 or first[0].startswith("usage:"), out.stderr


@pytest.mark.parametrize("args, says", [
    (["--nodes", "56443"], "--nodes 56443: at most 56442"),  # node 56442's port: 65536
    (["--nodes", "0"], "at least 1"), (["--gpus", "-1"], "at least 1"),
    (["--nodes", "2; rm"], "invalid int value"), (["--nodes", "1e3"], "invalid int value"),
])
def test_make_compose_takes_whole_numbers_that_give_ports(args, says, tmp_path, monkeypatch,
                                                         capsys):
    """The compose files take nothing but the two numbers; every node's port is a port."""
    monkeypatch.setattr(make_compose, "HERE", tmp_path)  # (a file written lands here)
    with pytest.raises(SystemExit) as end:
        make_compose.main(args)
    out = capsys.readouterr()
    assert end.value.code == 2 and out.out == "" and says in out.err, out.err
    assert list(tmp_path.iterdir()) == []
    assert 9094 + 56442 - 1 == 65535  # (the largest: node 56441's port)
