"""The names the distribution installs (fedacg_gc.py, docs/own-app.md#installed-names): a module
of the user's with one of those names in front of ours on sys.path is named in an ImportError
with the fix, before Python's own error from deep inside the library."""

import ast
import io
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import fedacg_gc

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_is_the_wheels_and_every_package_checks_first():
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert list(fedacg_gc.PACKAGES) == wheel["targets"]["wheel"]["packages"]
    for name in fedacg_gc.PACKAGES:
        body = ast.parse((ROOT / name / "__init__.py").read_text()).body
        imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))
                   and getattr(n, "module", None) != "__future__"]
        assert isinstance(imports[0], ast.Import), name
        assert [a.name for a in imports[0].names] == ["fedacg_gc"], name


def test_the_fab_ships_the_packages_and_nothing_else():
    """pyproject's fab-include: the FAB that `flwr run` sends (and every deployed ClientApp
    receives and hash-checks, docs/deployment.md#deployment-cost) holds every module of the
    wheel's packages and fedacg_gc.py, and no docs, tests or benchmarks."""
    from flwr.cli.build import build_fab_from_disk

    names = set(zipfile.ZipFile(io.BytesIO(build_fab_from_disk(ROOT))).namelist())
    assert {n.split("/")[0] for n in names} == {
        *fedacg_gc.PACKAGES, "fedacg_gc.py", "pyproject.toml", ".info"}
    for name in fedacg_gc.PACKAGES:
        modules = {f.relative_to(ROOT).as_posix() for f in (ROOT / name).rglob("*.py")
                   if "__pycache__" not in f.parts}
        assert modules and modules <= names, sorted(modules - names)


def run_in(folder: Path, code: str) -> subprocess.CompletedProcess:
    """`python -c code` in `folder` (first on sys.path, as a user's working directory is), with
    this checkout's packages after it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize("shadow", ["models.py", "methods.py", "client_app.py",
                                    "server_math/__init__.py"])
def test_a_module_of_the_users_in_front_of_ours_is_named_with_the_fix(tmp_path, shadow):
    mine = tmp_path / shadow
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("x = 1\n")
    out = run_in(tmp_path, "from strategies import FedACG")
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: fedacg-gc's packages"), out.stderr[-2000:]
    assert f"is {mine.resolve()}" in last and "Rename your module" in last


def test_without_a_shadow_the_import_works_and_a_copy_of_ours_is_no_shadow(tmp_path):
    (tmp_path / "my_models.py").write_text("x = 1\n")
    assert run_in(tmp_path, "from strategies import FedACG").returncode == 0
    # a folder that holds fedacg_gc.py too is a copy of this distribution (an app's FAB)
    copy = tmp_path / "fab"
    (copy / "models").mkdir(parents=True)
    (copy / "models" / "__init__.py").write_text("")
    (copy / "fedacg_gc.py").write_text((ROOT / "fedacg_gc.py").read_text())
    out = run_in(copy, "import fedacg_gc; print(fedacg_gc.shadowing())")
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
