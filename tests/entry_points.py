"""A `python -m <module>` entry point run in the test's own process: its `main(argv)` in a
folder, with what it prints and the exit status `python -m` would give, as a
`subprocess.CompletedProcess`. The cases of a command's bad input then cost no Python start and
no torch import each; a test file keeps a few cases as real `python -m` processes for the
`__main__` wiring (docs/testing.md, "Test time")."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path


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
