"""The scripts of deploy/ as an operator calls them: settings by name, the environment never
silently ignored, one port per role with docker/'s compose demo, usage lines whose addresses
work. Flower's and nginx's commands are stand-ins here that print what they were given
(tests/test_deployment.py runs the real ones)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_superlink_takes_its_settings_by_name(stubs):
    env, creds = stubs
    out = script("superlink.sh", "--credentials", str(creds), "--port=9999", "--database",
                 "/s.db", "--", "--log-file", "/l", env=env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == "9999"
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
