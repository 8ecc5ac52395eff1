"""A `python -m <module>` entry point run in the test's own process: its `main(argv)` in a
folder, with what it prints and the exit status `python -m` would give, as a
`subprocess.CompletedProcess`. The cases of a command then cost no Python start and no torch
import each; each such test runs its cases as real `python -m` processes as well, a few in the
default run (the `__main__` wiring) and the rest behind `long` (docs/testing.md, "Test time").

    @pytest.mark.parametrize("how", HOW)
    def test_x(how):
        out = run_module(how, "feddata", "check", ...)
"""

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# in this process in the default run, as `python -m` in the long set
HOW = ["here", pytest.param("python-m", marks=pytest.mark.long)]


def run_main(main, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`main(list(argv))` in `cwd` (the working folder is restored after), its stdout and
    stderr captured. The exit status is what the interpreter makes of main's return or
    SystemExit: None is 0, a number is itself, a text is printed to stderr with status 1. An
    exception main lets out is raised here (in a process it would be a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as end:
                code = end.code
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(list(argv), code or 0, out.getvalue(), err.getvalue())


def python_m(module: str, *argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m module argv...` in a Python of its own, this tree first on its path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


def main_of(module: str):
    """The `main` that `python -m module` calls: a package's in its __main__."""
    found = importlib.import_module(module)
    if hasattr(found, "__path__"):
        found = importlib.import_module(f"{module}.__main__")
    return found.main


def run_module(how: str, module: str, *argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m module argv...`: `how` 'here' in this process (run_main), 'python-m' as a
    process of its own (python_m)."""
    if how == "here":
        return run_main(main_of(module), *argv, cwd=cwd)
    assert how == "python-m", how
    return python_m(module, *argv, cwd=cwd)
