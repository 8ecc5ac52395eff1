"""Fast checks of the deployment files: credentials, compose generation, Dockerfiles,
requirements."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
sys.path.insert(0, str(DOCKER))
import make_compose  # noqa: E402
from app_requirements import app_requirements  # noqa: E402


def credentials(*args):
    return subprocess.run([sys.executable, str(ROOT / "deploy" / "credentials.py"), *args],
                          capture_output=True, text=True)


def test_server_certificate_names_the_superlink_and_is_signed_by_the_ca(tmp_path):
    out = credentials("tls", "--out", str(tmp_path), "--san", "IP:10.1.2.3",
                      "--san", "DNS:link.lan")
    assert out.returncode == 0, out.stderr
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(v) for v in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.1.2.3"}
    assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", "link.lan"}
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = serialization.load_pem_private_key((tmp_path / "server.key").read_bytes(), None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    assert (tmp_path / "server.key").stat().st_mode & 0o077 == 0  # private: owner only
    # a second run keeps the deployed files instead of replacing them
    again = credentials("tls", "--out", str(tmp_path))
    assert again.returncode == 1 and "exists" in again.stderr
    assert x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes()) == cert


def test_node_keys_are_ec_openssh_pairs(tmp_path):
    out = credentials("node-key", "--out", str(tmp_path), "supernode-0", "supernode-1")
    assert out.returncode == 0, out.stderr
    keys = []
    for name in ("supernode-0", "supernode-1"):
        private = serialization.load_ssh_private_key((tmp_path / name).read_bytes(), None)
        public = serialization.load_ssh_public_key((tmp_path / f"{name}.pub").read_bytes())
        assert isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp384r1"
        assert private.public_key().public_numbers() == public.public_numbers()
        assert (tmp_path / f"{name}.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
        keys.append(public.public_numbers())
    assert keys[0] != keys[1]
    # no IP:/DNS:
    assert credentials("tls", "--out", str(tmp_path), "--san", "10.0.0.1").returncode != 0


def test_committed_compose_files_are_the_generators_output():
    for path, text in make_compose.files(2, 1).items():
        assert path.read_text() == text, f"{path} is stale: run python docker/make_compose.py"


def test_compose_has_one_client_id_and_port_per_node():
    text = make_compose.compose(3)
    for i in range(3):
        assert f"--node-config=client-id={i} num-clients=3 data-path='/data'" in text
        assert f"/supernode-{i}:/credentials/supernode.key:ro" in text
        assert f"--runtime-api-address=supernode-{i}:${{SUPERNODE_{i}_PORT:-{9094 + i}}}" in text
    assert (text.count("--enable-supernode-auth") == 1
            and "--insecure" not in text.split("clientapp-0")[0])
    assert len(re.findall(r"^  clientapp-\d+:$", make_compose.gpu(3, 2), re.M)) == 3
    assert 'device_ids: ["1"]' in make_compose.gpu(3, 2)
    # the SuperNodes reach the SuperLink only through the fleet proxy: the SuperLink is on the
    # network `control`, every node on `fleet`, and only the proxy is on both
    nets = dict(re.findall(r"^  ([a-z0-9-]+):\n(?:    .*\n|      .*\n)*?    networks: (.*)$",
                           text, re.M))
    assert nets == {"superlink": "[control]", "register-supernodes": "[control]",
                    "serverapp": "[control]", "fleet-proxy": "[control, fleet]",
                    **{f"{role}-{i}": "[fleet]" for i in range(3)
                       for role in ("supernode", "clientapp")}}, nets
    # one port per role, as deploy/ on bare metal: the fleet proxy 9092, the SuperLink 9093
    assert text.count("--superlink=fleet-proxy:${FLEET_PORT:-9092}") == 3
    assert "--superlink=superlink:${SUPERLINK_PORT:-9093}" in text  # the proxy's upstream
    assert text.count("--superlink=superlink") == 1  # the proxy only, never a node
    # the operator's port (the Control API) is published on loopback only, whatever the settings
    assert "- 127.0.0.1:${SUPERLINK_PORT:-9093}:" in make_compose.override()


@pytest.mark.skipif(not (shutil.which("docker-compose") or shutil.which("docker")),
                    reason="no compose")
def test_compose_files_are_valid(tmp_path):
    cmd = ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
    if subprocess.run([*cmd, "version"], capture_output=True).returncode != 0:
        pytest.skip("no compose command")
    for extra in (["compose.override.yml"], ["compose.override.yml", "compose.gpu.yml"]):
        files = [a for f in ["compose.yml", *extra] for a in ("-f", f)]
        out = subprocess.run([*cmd, *files, "config", "-q"], cwd=DOCKER, capture_output=True,
                             text=True,
                             env={"PATH": "/usr/bin:/bin:/usr/local/bin",
                                  "CREDENTIALS_DIR": str(tmp_path)})
        assert out.returncode == 0, (extra, out.stderr)


def test_images_default_to_the_official_flower_images_of_one_release():
    version = make_compose.FLWR_VERSION
    for role in ("superlink", "supernode", "superexec"):
        dockerfile = (DOCKER / f"{role}.Dockerfile").read_text()
        assert f"ARG BASE_IMAGE=flwr/{role}:{version}\nFROM ${{BASE_IMAGE}}" in dockerfile
        assert f'ENTRYPOINT ["flower-{role}"]' in dockerfile
        assert f"${{{role.upper()}_BASE_IMAGE:-flwr/{role}:{version}}}" in make_compose.compose(2)
    # only the dependency list enters the build context: no code, no credentials
    rules = [r for r in (ROOT / ".dockerignore").read_text().splitlines()
             if r and not r.startswith("#")]
    assert rules == ["*", "!pyproject.toml", "!docker/app_requirements.py",
                     "!deploy/fleet-proxy.sh", "!deploy/checks.sh"]
    # the fleet proxy: Debian's nginx-light running the same script as deploy/
    proxy = (DOCKER / "fleet-proxy.Dockerfile").read_text()
    assert "apt-get install -y --no-install-recommends nginx-light" in proxy
    assert 'ENTRYPOINT ["bash", "/usr/local/bin/fleet-proxy.sh"]' in proxy
    assert "COPY deploy/checks.sh /usr/local/bin/checks.sh" in proxy  # fleet-proxy.sh sources it


def test_superexec_requirements_are_the_apps_without_flower():
    reqs = app_requirements((ROOT / "pyproject.toml").read_text())
    names = {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in reqs}
    assert "flwr" not in names and {"torch", "datasets", "pillow", "scikit-learn"} <= names
    assert app_requirements('[project]\n'
                            'dependencies = ["flwr[simulation]>=1.41", "Flwr_x==1", "numpy"]') == [
        "Flwr_x==1", "numpy"]


def test_the_debian_mirror_comes_from_the_machines_apt_sources(tmp_path, monkeypatch):
    from compose_harness import EngineUnavailable, debian_mirror

    monkeypatch.delenv("FEDACG_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://other.example/x stable-updates main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb deb-src\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n")
    sources = (tmp_path / "sources.list", tmp_path / "sources.list.d")
    assert debian_mirror(sources) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [trusted=yes] http://list.example/debian bookworm main\n")
    assert debian_mirror(sources) == "http://list.example/debian"  # sources.list is read first
    with pytest.raises(EngineUnavailable, match="FEDACG_DEBIAN_MIRROR"):
        debian_mirror(sources, suite="trixie")
    monkeypatch.setenv("FEDACG_DEBIAN_MIRROR", "http://set.example/debian")
    assert debian_mirror(sources, suite="trixie") == "http://set.example/debian"


def test_no_registry_host_names_in_the_repository():
    # package indexes, image registries and mirrors come from the machine's own configuration
    hosts = ("deb.debian.org", "registry-1.docker.io", "hub.docker.com", "pypi.org",
             "files.pythonhosted.org", "download.pytorch.org", "ghcr.io", "quay.io")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    found = []
    for name in files.split():
        path = ROOT / name
        if path.is_file() and path.suffix not in (".png", ".pt"):
            text = path.read_text(errors="replace")
            found += [f"{name}: {h}" for h in hosts
                      if h in text and name != "tests/test_docker_files.py"]
    assert not found, found
