"""What the docker compose test needs before `compose up`: an engine, and base images built offline.

* Engine: the running one, else (as root) `apt-get install docker.io docker-compose` where
  missing and a `dockerd` of our own, stopped again at the end. `EngineUnavailable` says why
  none could be had (the test then skips with that reason).
* Base image: Docker Hub cannot be reached here, so Flower's official images are replaced by a
  stand-in (docker/test/flwr-base.Dockerfile): a Debian bookworm made with debootstrap and
  `docker import`, plus flwr and a wheelhouse of the app's dependencies downloaded on the host
  with pip. Wheelhouse and images are kept between runs (~/.cache/fedacg-gc/docker-test and the
  engine's image store), keyed by everything that goes into them.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
from app_requirements import app_requirements  # noqa: E402

CACHE = Path(os.environ.get("FEDACG_DOCKER_TEST_CACHE",
                            Path.home() / ".cache" / "fedacg-gc" / "docker-test"))
DEBIAN_IMAGE = "fedacg-gc-test/debian-python:bookworm"
IMAGE_PYTHON = "3.11"  # Debian bookworm's python3
DEBIAN_SUITE = "bookworm"
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class EngineUnavailable(Exception):
    """No Docker engine or compose could be found, installed or started."""


def sh(cmd: list[str], timeout: float = 600, check: bool = True,
       **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n"
                           f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def _engine_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return sh(["docker", "info"], timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _apt_install(packages: list[str], log: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise EngineUnavailable(
            f"{' '.join(packages)} missing, and no root/apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with open(log, "a") as f:
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
            if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                              timeout=900).returncode:
                raise EngineUnavailable(f"`{' '.join(cmd)}` failed (log: {log})")


class Engine:
    """A usable Docker engine and compose command; `stop()` ends a dockerd we started."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.dockerd: subprocess.Popen | None = None
        self.compose: list[str] = []

    def start(self) -> None:
        log = self.workdir / "engine-setup.log"
        if not _engine_answers():
            if not shutil.which("dockerd"):
                _apt_install(["docker.io"], log)
            if os.geteuid() != 0:
                raise EngineUnavailable(
                    "the Docker engine is not running and starting dockerd needs root")
            out = open(self.workdir / "dockerd.log", "w")
            self.dockerd = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
            out.close()
            deadline = time.monotonic() + 90
            while not _engine_answers():
                if self.dockerd.poll() is not None or time.monotonic() > deadline:
                    tail = (self.workdir / "dockerd.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise EngineUnavailable(f"dockerd could not be started:\n{tail}")
                time.sleep(1)
        if sh(["docker", "compose", "version"], check=False).returncode == 0:
            self.compose = ["docker", "compose"]
        else:
            if not shutil.which("docker-compose"):
                _apt_install(["docker-compose"], log)
            self.compose = ["docker-compose"]

    def stop(self) -> None:
        if self.dockerd is None:
            return
        try:
            os.killpg(self.dockerd.pid, signal.SIGTERM)
            self.dockerd.wait(60)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.dockerd.pid, signal.SIGKILL)
            self.dockerd.wait(10)
        self.dockerd = None


def image_exists(tag: str) -> bool:
    return sh(["docker", "image", "inspect", tag], check=False).returncode == 0


def wheel_requirements() -> tuple[list[str], list[str]]:
    """(requirements, constraints) of the stand-in base image: flwr of the host + the app's deps."""
    reqs = app_requirements((ROOT / "pyproject.toml").read_text())
    reqs.append(f"flwr=={metadata.version('flwr')}")
    constraints = []
    try:  # the torch the host has (the CPU build on CI), not the newest one on PyPI
        constraints.append("torch==" + metadata.version("torch").split("+")[0])
    except metadata.PackageNotFoundError:
        pass
    return reqs, constraints


def cache_key() -> str:
    reqs, cons = wheel_requirements()
    text = "\n".join(reqs + ["--"] + cons + [
        IMAGE_PYTHON, platform.machine(), (ROOT / "docker/test/flwr-base.Dockerfile").read_text()])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def wheelhouse(key: str, log: Path) -> Path:
    folder = CACHE / f"wheelhouse-{key}"
    if (folder / ".complete").exists():
        return folder
    reqs, cons = wheel_requirements()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="wheelhouse-", dir=CACHE))
    (tmp / ".requirements.txt").write_text("\n".join(reqs) + "\n")
    (tmp / ".constraints.txt").write_text("\n".join(cons) + "\n")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(tmp), "--only-binary=:all:",
           "-r", str(tmp / ".requirements.txt"), "-c", str(tmp / ".constraints.txt")]
    if f"{sys.version_info.major}.{sys.version_info.minor}" != IMAGE_PYTHON:
        cmd += ["--python-version", IMAGE_PYTHON,
                "--platform", f"manylinux_2_36_{platform.machine()}"]
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1800).returncode:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"pip download failed (log: {log})")
    (tmp / ".complete").write_text("")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    for old in CACHE.glob("wheelhouse-*"):  # keep only the current one
        if old != folder and (old / ".complete").exists():
            shutil.rmtree(old, ignore_errors=True)
    return folder


def _apt_source_entries(text: str, deb822: bool) -> list[tuple[list[str], list[str]]]:
    """(URIs, suites) of the binary ('deb') entries of one apt sources file."""
    entries = []
    if deb822:  # paragraphs of "Field: value" lines
        for para in text.split("\n\n"):
            fields = {}
            for line in para.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    name, _, value = line.partition(":")
                    fields[name.strip().lower()] = value.split()
            if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"]) != ["no"]:
                entries.append((fields.get("uris", []), fields.get("suites", [])))
        return entries
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:1] != ["deb"]:
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            entries.append(([words[0]], [words[1]]))
    return entries


def debian_mirror(sources: tuple[Path, ...] = APT_SOURCES, suite: str = DEBIAN_SUITE) -> str:
    """The Debian mirror this machine's apt uses for `suite` (for debootstrap), read from its
    sources (sources.list, sources.list.d/*.list and *.sources); FEDACG_DEBIAN_MIRROR wins."""
    if os.environ.get("FEDACG_DEBIAN_MIRROR"):
        return os.environ["FEDACG_DEBIAN_MIRROR"]
    files = []
    for path in sources:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".list", ".sources"))
        elif path.is_file():
            files.append(path)
    for f in files:
        for uris, suites in _apt_source_entries(f.read_text(errors="replace"),
                                                f.suffix == ".sources"):
            if suite in suites and uris:
                return uris[0]
    raise EngineUnavailable(
        f"no apt source for Debian {suite} in {', '.join(str(p) for p in sources)}: "
        "set FEDACG_DEBIAN_MIRROR to a Debian mirror URL for debootstrap")


def debian_image(log: Path) -> None:
    if image_exists(DEBIAN_IMAGE):
        return
    if not shutil.which("debootstrap"):
        _apt_install(["debootstrap"], log)
    with tempfile.TemporaryDirectory(prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
               DEBIAN_SUITE, str(rootfs), debian_mirror()]
        with open(log, "a") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1800).returncode:
                raise RuntimeError(f"debootstrap failed (log: {log})")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "-c", "ENV LANG=C.UTF-8", "-", DEBIAN_IMAGE],
                             stdin=tar.stdout, capture_output=True, text=True, timeout=600)
        tar.stdout.close()
        tar.wait()
        if imp.returncode or tar.returncode:
            raise RuntimeError(f"docker import failed: {imp.stderr}")


def base_image(log: Path) -> tuple[str, str]:
    """(tag of the stand-in Flower base image, cache key), building what is missing."""
    key = cache_key()
    tag = f"fedacg-gc-test/flwr-base:{key}"
    if not image_exists(tag):
        debian_image(log)
        wheels = wheelhouse(key, log)
        sh(["docker", "build", "-q", "-f", str(ROOT / "docker/test/flwr-base.Dockerfile"),
            "--build-arg", f"DEBIAN_IMAGE={DEBIAN_IMAGE}",
            "--build-arg", f"FLWR_VERSION={metadata.version('flwr')}", "-t", tag, str(wheels)],
           timeout=1800)
    # drop stand-ins and app images of earlier keys (each superexec image is ~2.5 GB)
    for repo, keep in (("fedacg-gc-test/flwr-base", key), ("fedacg-gc/superlink", f"test-{key}"),
                       ("fedacg-gc/supernode", f"test-{key}"),
                       ("fedacg-gc/superexec", f"test-{key}"),
                       ("fedacg-gc/fleet-proxy", f"test-{key}")):
        tags = sh(["docker", "images", repo, "--format", "{{.Tag}}"], check=False).stdout.split()
        for old in tags:
            if old != keep and (repo.startswith("fedacg-gc-test") or old.startswith("test-")):
                sh(["docker", "rmi", f"{repo}:{old}"], check=False)
    return tag, key
