"""The distribution `fedacg-gc`: the top-level packages it installs, and the check that a module
of the same name elsewhere (a `models.py` in your working directory, another distribution's
`strategies`) does not stand in front of one of them on `sys.path`
(docs/own-app.md#installed-names).

Each package's `__init__.py` imports this module before anything else of the project, and the
import runs the check (once per process), so a shadowing module gives an ImportError naming
that module's file and the fix, instead of Python's "No module named 'models.centralization';
'models' is not a package" from deep inside the library. Standard library only: it runs before
torch or Flower is imported.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# The wheel's packages (pyproject.toml [tool.hatch.build.targets.wheel]; a test holds both equal).
PACKAGES = ("server_app", "client_app", "strategies", "methods", "server_math", "models",
            "feddata", "run_config", "reporting", "inprocess", "fileio")
ROOT = Path(__file__).resolve().parent
_checked = False


def origin_of(name: str) -> str | None:
    """The file (or folder) Python imports for the top-level module `name` now; None where it is
    not found or has no file (a namespace package, a built-in)."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def shadowing() -> list[tuple[str, str]]:
    """(package, the file that Python would import instead) for each package of this
    distribution that a module of another origin stands in front of. A folder holding this
    file too is a copy of this distribution (an app's FAB, a second checkout), not a shadow."""
    found = []
    for name in PACKAGES:
        origin = origin_of(name)
        if origin is None:
            continue
        path = Path(origin).resolve()
        folder = path.parent.parent if path.name == "__init__.py" else path.parent
        if folder != ROOT and not (folder / Path(__file__).name).is_file():
            found.append((name, str(path)))
    return found


def check_not_shadowed() -> None:
    """ImportError when a module of another origin stands in front of one of PACKAGES (checked
    once per process, when the first of them is imported)."""
    global _checked
    if _checked:
        return
    found = shadowing()
    if found:
        lines = "; ".join(f"'{name}' is {origin}" for name, origin in found)
        raise ImportError(
            f"fedacg-gc's packages {', '.join(PACKAGES)} are installed in {ROOT}, but {lines}: "
            "Python would import that instead. Rename your module (e.g. models.py -> "
            "my_models.py) or take its folder off sys.path (the working directory, PYTHONPATH); "
            "docs/own-app.md#installed-names")
    _checked = True


check_not_shadowed()
