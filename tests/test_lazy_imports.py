"""Imports sit at the top of a module, except the lazy ones docs/extending.md#what-stays-lazy
lists: each import inside a function must fall under one of its rules, so a new one is noticed
(read from the source with `ast`; the light set from a fresh interpreter's `sys.modules`)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "client_app", "experiments", "feddata", "fileio", "inprocess",
            "methods", "models", "pages", "reporting", "run_config", "server_app", "server_math",
            "strategies")
# (1) the light set's heavy imports: what `python -m run_config check` loads imports only the
# standard library and the light set at its top (no torch, numpy or Flower)
LIGHT_ENTRY = "import run_config, run_config.check, run_config.__main__"
# (2) data, plot and optional libraries: loaded by the process that reads data, draws a plot or
# turned the option on (tests/test_light_imports.py)
ON_USE = ("datasets", "PIL", "pyarrow", "pandas", "matplotlib", "yaml", "wandb",
          "torch.utils.tensorboard",
          # the data readers: a partition-cache hit imports neither (tests/test_disk_cache.py)
          "feddata.loading", "feddata.own_data", "feddata.summary")
# (3) commands whose processes are measured or must stay light import the side they run when
# they run it (third-party and project modules; the standard library still goes at the top)
PROCESSES = {
    "benchmarks": "each side is a fresh process whose memory or time is measured "
                  "(`sim_vs_loop --plain-block` must not load Flower)",
    "experiments.sweep_cells": "the sweep's process imports neither torch nor Flower "
                               "(tests/test_reporting.py); a cell's worker does",
    "pages": "`python -m pages` writes each page with only what that page reads",
}


def light_set() -> set[str]:
    probe = (f"{LIGHT_ENTRY}\nimport json, sys\n"
             "print(json.dumps(sorted(m for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=600)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The absolute module names an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    name = node.module or ""
    if node.level:
        name = f"{base}.{name}" if name else base
    return [submodule(name, a.name) for a in node.names]


def submodule(package: str, name: str) -> str:
    """`package.name` where that is a module of this project (`from server_math import
    reply_pass`), else `package`."""
    path = ROOT.joinpath(*f"{package}.{name}".split("."))
    return f"{package}.{name}" if path.with_suffix(".py").is_file() or path.is_dir() else package


def lazy_imports() -> list[tuple[str, int, str]]:
    """(module, line, imported module) of every import inside a function."""
    rows = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            module = module_name(path)
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for node in ast.walk(fn):
                        if isinstance(node, (ast.Import, ast.ImportFrom)):
                            for t in targets(node, module, path.name == "__init__.py"):
                                rows.add((module, node.lineno, t))
    return sorted(rows)


def reason(module: str, target: str, light: set[str]) -> str | None:
    """Why `target` may be imported lazily in `module` (None: it belongs at the top)."""
    top = target.split(".")[0]
    if any(target == lib or target.startswith(lib + ".") for lib in ON_USE):
        return "on use"
    if module in light and top not in sys.stdlib_module_names and target not in light:
        return "light set"
    if top not in sys.stdlib_module_names and any(
            module == p or module.startswith(p + ".") for p in PROCESSES):
        return "process"
    return None


def test_every_import_inside_a_function_is_a_listed_lazy_one():
    light = light_set()
    stray = [f"{m}:{line} imports {t}" for m, line, t in lazy_imports()
             if reason(m, t, light) is None]
    assert not stray, ("imports inside functions that belong at the top of their module (or "
                       "that need a rule in docs/extending.md#what-stays-lazy):\n"
                       + "\n".join(stray))


if __name__ == "__main__":
    LIGHT = light_set()
    for m, line, t in lazy_imports():
        print(m, line, t, reason(m, t, LIGHT))
