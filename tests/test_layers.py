"""The server's packages are layered (docs/extending.md#the-codes-layout): each imports only the
ones below it, at module level or inside a function alike. Read from the source with `ast`, so
that a lazy import cannot hide an arrow that runs back up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Bottom first: a package may import those before it in this list, never those after it.
LAYERS = ["models", "server_math", "methods", "strategies", "server_app"]


def imported_packages(path: Path) -> set[str]:
    """The top-level names of every absolute import in the file (relative ones stay inside)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def upward_imports(package: str) -> list[str]:
    above = set(LAYERS[LAYERS.index(package) + 1:])
    return sorted(f"{path.relative_to(ROOT)} imports {name}"
                  for path in sorted((ROOT / package).glob("*.py"))
                  for name in imported_packages(path) & above)


@pytest.mark.parametrize("package", LAYERS[:-1])
def test_no_import_runs_back_up(package):
    assert upward_imports(package) == []


def test_the_check_sees_a_lazy_import(tmp_path):
    source = tmp_path / "rule.py"
    source.write_text("def f():\n"
                      "    from strategies.round_loop import x\n"
                      "    import methods.parts\n")
    assert imported_packages(source) == {"strategies", "methods"}


def test_the_lower_layers_are_what_the_upper_ones_use():
    # The declarations both the round loop and the methods need live below both.
    assert "server_math" in imported_packages(ROOT / "methods" / "parts.py")
    assert "server_math" in imported_packages(ROOT / "strategies" / "round_loop.py")
