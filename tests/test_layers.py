"""The whole tree is layered (docs/extending.md#the-codes-layout): every package has a floor and
imports only packages on the floors below it, at module level or inside a function alike, and no
module imports itself round a circle. Read from the source with `ast`, so that a lazy import
cannot hide an arrow; the files are those git tracks (a user's own files are never read)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Bottom first. A package imports only packages of the floors before its own (two packages on
# one floor do not import each other). The apps use the library floors; the drivers (runs of
# many runs, the benchmarks, the generated pages) sit above the apps and nothing imports them.
FLOORS: list[tuple[str, ...]] = [
    ("fedacg_gc",),  # the installed-names check every package runs first
    ("models", "fileio"),  # models, GC's projection, the wire format; writing files
    ("feddata",),  # datasets, partitions, a node's own data, the input pipeline
    ("server_math",),  # the server's maths in plain PyTorch
    ("methods",),  # one file per method, the registry
    ("run_config",),  # every key, presets, validation, paper set-ups
    ("strategies", "reporting"),  # Flower strategies; results, plots, trackers
    ("client_app",),  # the ClientApp and the client step
    ("server_app",),  # the ServerApp
    ("inprocess",),  # both apps in one process
    ("experiments",),  # sweeps, a SuperLink of one's own
    ("benchmarks",),  # scripts that print ratios
    ("pages",),  # the documentation's generated parts
]
FLOOR = {package: i for i, floor in enumerate(FLOORS) for package in floor}
# Folders of Python files that are no package of the tree: they may use the packages (the tests,
# apps of one's own) or must stand alone (the deployment's and the compose demo's scripts).
OUTSIDE = {"tests": "uses", "examples": "uses", "docker": "alone", "deploy": "alone"}


def tracked_python_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=ROOT, check=True,
                             capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("git is needed to list the tracked files")
    return [ROOT / name for name in out.decode().split("\0") if name]


def top(path: Path) -> str:
    """The package (or outside folder) a file belongs to: its first folder, or the module."""
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path, module: str | None = None) -> set[str]:
    """The absolute module names every import of the file names (relative ones resolved;
    `from a import b` names `a` and `a.b`, which is a module where `b` is one)."""
    module = module or module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if node.module:  # (`from . import m` names the sibling m, not the package)
                found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


@pytest.fixture(scope="module")
def tree() -> dict[str, Path]:
    return {module_of(p): p for p in tracked_python_files()}


def test_every_folder_of_python_files_has_a_floor(tree):
    folders = {top(p) for p in tree.values()}
    assert sorted(folders - set(FLOOR) - set(OUTSIDE)) == []
    assert sorted(set(FLOOR) - folders) == []  # (a package that is gone leaves the list)


def test_no_import_runs_back_up_or_sideways(tree):
    wrong = []
    for path in tree.values():
        own = top(path)
        if own not in FLOOR:
            continue
        for name in imports(path):
            other = name.split(".")[0]
            if other in FLOOR and other != own and FLOOR[other] >= FLOOR[own]:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert sorted(wrong) == []


def test_the_scripts_of_the_deployment_stand_alone(tree):
    used = sorted(f"{p.relative_to(ROOT)} imports {name}" for p in tree.values()
                  if OUTSIDE.get(top(p)) == "alone"
                  for name in imports(p) if name.split(".")[0] in FLOOR)
    assert used == []


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), or of one module
    that imports itself."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph.get(v, ()):
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_round_a_circle(tree):
    graph = {m: {n for n in imports(p) if n in tree and n != m} for m, p in tree.items()
             if top(p) in FLOOR}
    assert circles(graph) == []


def test_the_check_sees_a_lazy_import_and_a_circle(tmp_path):
    source = tmp_path / "rule.py"
    source.write_text("def f():\n"
                      "    from strategies.round_loop import x\n"
                      "    import methods.parts\n"
                      "    from ..feddata import specs\n")
    found = imports(source, "client_app.rule")
    assert {"strategies.round_loop", "methods.parts", "feddata.specs"} <= found
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve_to_their_package():
    path = ROOT / "client_app" / "own_app.py"
    found = imports(path)
    assert "client_app.client_step" in found and "client_app.settings" in found


def test_the_lower_layers_are_what_the_upper_ones_use(tree):
    # The declarations both the round loop and the methods need live below both.
    assert any(n.startswith("server_math") for n in imports(tree["methods.parts"]))
    assert any(n.startswith("server_math") for n in imports(tree["strategies.round_loop"]))
