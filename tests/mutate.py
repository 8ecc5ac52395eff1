"""Mutation testing of the core maths, on demand (not part of the test suite or CI).

    nice -n 10 python tests/mutate.py                      # the default files, every mutant
    python tests/mutate.py --sample 150 --seed 1           # a seeded random sample of mutants
    python tests/mutate.py client_app/local_update.py --list   # only list the mutants
    python tests/mutate.py strategies/ --tests tests/test_strategy.py --timeout 60

It makes one small bug at a time (a mutant) in the given Python files or folders - an operator
swapped (+ -, * /, and or, < <=, == !=, in / not in, ...), a number changed (0 <-> 1, n -> n+1,
x -> 2x), True <-> False, a compared string changed, a `not` or unary minus dropped, an `if`
test negated, a statement dropped (a call, an augmented or item/attribute assignment), a returned
value replaced by None - and runs the fast tests that cover that file (TESTS below, or --tests)
with `-x`. A mutant is *killed* when a test fails, *survives* when every test passes, and
*timeout* when the tests use more than --timeout CPU seconds (counted as killed: the bug hangs
the run; CPU time, not wall time, so that a loaded machine does not turn slow survivors into
timeouts).
Mutants are found on the syntax tree (`ast`), so the script follows the code wherever it moves:
only the file list and TESTS name paths. Lines marked `# pragma: no mutate` and logging, warnings,
exception messages, docstrings, annotations and parameter defaults are not mutated.

The worktree is never modified: the tree is copied to a temporary folder (one per job) and each
mutant is written there. A parent process imports the heavy libraries once (torch, flwr,
datasets, ...) and forks one child per mutant, which imports the app from the copy and runs
pytest; so a mutant costs its tests, not the imports.

The output lists killed / survived / timeout and every survivor as `file:line`, the original
source line and the mutation. Exit status: 0 when the score (killed + timeout over all) reaches
--min-score (default 0), else 1.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_TARGETS = ["strategies", "methods", "server_math", "client_app/client_step.py",
                   "client_app/local_update.py", "models/centralization.py",
                   "server_app/checkpoint.py"]

# Which tests cover which code: the longest matching path prefix wins. Fast unit tests first
# (with -x a killed mutant stops at its first failing test), whole in-process runs last.
_PINS_APP = "tests/test_pins_app.py"
TESTS: dict[str, list[str]] = {
    "server_math/server_update.py": ["tests/test_pins_server.py", "tests/test_strategy.py",
                                    _PINS_APP],
    "server_math/robust.py": ["tests/test_robust.py", "tests/test_pins_server.py",
                             "tests/test_strategy.py", "tests/test_bad_replies.py", _PINS_APP],
    "strategies/nodes.py": ["tests/test_node_identity.py",
                            "tests/test_bad_inputs.py::test_bad_node_reports_are_refused_and_"
                            "the_run_goes_on", "tests/test_pins_server.py",
                            "tests/test_strategy.py", "tests/test_bad_replies.py", _PINS_APP,
                            "tests/test_app.py::test_same_seed_samples_the_same_partitions_"
                            "whatever_the_node_ids",
                            "tests/test_results.py::test_dynamic_clients_train_on_replaced_"
                            "partitions",
                            "tests/test_results.py::test_without_dynamic_clients_nodes_keep_"
                            "their_partition"],
    "strategies/round_loop.py": [
        "tests/test_pins_server.py", "tests/test_strategy.py", "tests/test_bad_replies.py",
        _PINS_APP, "tests/test_checkpoint.py",
        "tests/test_app.py::test_same_seed_samples_the_same_partitions_whatever_the_node_ids",
        "tests/test_extending.py"],  # a method's extra records, down and up
    "strategies/named.py": ["tests/test_named_strategies.py", "tests/test_client_blocks.py"],
    "client_app/own_app.py": ["tests/test_client_blocks.py"],
    "client_app/client_step.py": ["tests/test_pins_client.py", "tests/test_client.py",
                                  "tests/test_client_blocks.py", _PINS_APP],
    "server_math/reply_screen.py": ["tests/test_pins_server.py", "tests/test_bad_replies.py"],
    "server_math/influence.py": ["tests/test_pins_server.py", "tests/test_robust.py"],
    "server_math/node_reports.py": ["tests/test_pins_server.py", "tests/test_node_identity.py"],
    "strategies/assembly.py": [
        "tests/test_pins_server.py", _PINS_APP, "tests/test_bad_replies.py",
        "tests/test_app.py::test_flower_baseline_and_federated_evaluation",
        "tests/test_app.py::test_same_seed_samples_the_same_partitions_whatever_the_node_ids",
        "tests/test_results.py::test_dynamic_clients_train_on_replaced_partitions",
        "tests/test_results.py::test_without_dynamic_clients_nodes_keep_their_partition"],
    "strategies/": ["tests/test_pins_server.py", "tests/test_strategy.py",
                    "tests/test_bad_replies.py", _PINS_APP, "tests/test_checkpoint.py",
                    "tests/test_app.py::test_same_seed_samples_the_same_partitions_whatever_the_node_ids",
                    "tests/test_results.py::test_dynamic_clients_train_on_replaced_partitions",
                    "tests/test_results.py::test_without_dynamic_clients_nodes_keep_their_partition"],
    "methods/": ["tests/test_pins_methods.py", "tests/test_pins_server.py",
                 "tests/test_pins_client.py", "tests/test_strategy.py", "tests/test_client.py",
                 "tests/test_config.py", "tests/test_extending.py", _PINS_APP],
    "client_app/": ["tests/test_pins_client.py", "tests/test_client.py", _PINS_APP],
    "models/centralization.py": ["tests/test_gc.py", "tests/test_pins_client.py",
                                 "tests/test_pins_server.py", "tests/test_client.py",
                                 "tests/test_named_strategies.py", _PINS_APP],
    "server_app/checkpoint.py": [
        f"{_PINS_APP}::test_a_checkpoint_lacking_one_part_is_refused",
        f"{_PINS_APP}::test_resume_restores_the_process_rng_states", "tests/test_checkpoint.py",
        "tests/test_runs.py::test_resume_latest_takes_only_the_same_run_name_or_refuses"],
    "": ["tests/test_pins_client.py", "tests/test_pins_server.py", "tests/test_gc.py",
         "tests/test_strategy.py", "tests/test_client.py", _PINS_APP],
}

# Imported once by the parent (never the files under mutation, nor anything importing them).
PRELOAD = ["numpy", "torch", "torch.nn.functional", "flwr.app", "flwr.serverapp",
           "flwr.clientapp", "flwr.serverapp.strategy", "datasets", "flwr_datasets",
           "flwr_datasets.partitioner", "sklearn.datasets", "pytest", "PIL.Image", "hypothesis",
           "matplotlib.pyplot"]
# The app's modules preloaded by the parent; one that imports a mutated package (run_config
# imports the methods registry) is unloaded again (`preload_unless_it_imports`).
PRELOAD_APP = ["run_config", "feddata", "feddata.loading", "feddata.partitioners",
               "feddata.disk_cache", "feddata.augment", "feddata.summary", "models",
               "models.evaluation", "models.wire", "reporting.metrics"]


def preload_unless_it_imports(name: str, mutated_packages: set[str]) -> None:
    """Import the app module `name` once in the parent, unless it imports a package under
    mutation: then every app module that import brought in is removed again (from sys.modules
    and from its parent package), so each child imports them afresh from its mutated copy."""
    app_packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    before = set(sys.modules)
    __import__(name)
    new = set(sys.modules) - before
    if not any(n.split(".")[0] in mutated_packages for n in new):
        return
    for n in sorted(new, key=len, reverse=True):
        if n.split(".")[0] not in app_packages:
            continue  # third-party modules stay loaded: that is the point of preloading
        module = sys.modules.pop(n)
        parent_name, _, child = n.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is not None and getattr(parent, child, None) is module:
            delattr(parent, child)


def warm_up_torch() -> None:
    """Run each kind of torch operation the tests use once, single-threaded (no thread pool is
    started, so forking stays safe): torch's lazy initialisation then happens once, here, and not
    in every child (seconds each on a loaded machine)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.GroupNorm(2, 4),
                              torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    loss = F.cross_entropy(net(torch.randn(5, 1, 4, 4)), torch.tensor([0, 1, 2, 0, 1]))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(net.parameters()), 1.0)
    opt.step()
    params = [p.detach().clone() for p in net.parameters()]
    torch._foreach_add_(params, torch._foreach_sub(params, params), alpha=0.5)
    torch._foreach_mul_(params, 0.5)
    torch.stack(torch._foreach_norm(params))
    torch.autograd.grad(F.cross_entropy(net(torch.randn(2, 1, 4, 4)), torch.tensor([0, 1])),
                        list(net.parameters()))

SKIP_CALLS = {"log", "warn", "print", "info", "debug", "warning", "error", "getLogger", "sleep",
              "summary", "log_strategy_start_info"}


@dataclass
class Mutant:
    path: str  # relative to the tree root
    line: int
    source_line: str
    description: str
    new_source: str


# --- finding mutants -----------------------------------------------------------------------------


_BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
                ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
                ast.MatMult: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
_CMP_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
              ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
              ast.In: ast.NotIn, ast.NotIn: ast.In}
_CMP_FLIPS = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|",
           ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
           ast.And: "and", ast.Or: "or"}


def _number_variants(value) -> list:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [1] if value == 0 else ([0, 2] if value == 1 else [value + 1, 0])
    if isinstance(value, float):
        return [1.0] if value == 0 else [0.0, value * 2]
    return []


def _excluded_lines(text: str) -> set[int]:
    return {i for i, line in enumerate(text.splitlines(), 1) if "pragma: no mutate" in line}


def _quiet_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes never mutated: docstrings, annotations, parameter defaults, decorators,
    logging/warning calls, raise statements and assert messages."""
    quiet: set[int] = set()

    def mark(node):
        for sub in ast.walk(node):
            quiet.add(id(sub))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                mark(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.args)
            for dec in node.decorator_list:
                mark(dec)
            if node.returns is not None:
                mark(node.returns)
        if isinstance(node, ast.ClassDef):
            for dec in node.decorator_list:
                mark(dec)
        if isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        if isinstance(node, ast.ClassDef):  # class-level defaults (dataclass fields) are defaults
            for stmt in node.body:
                if isinstance(stmt, (ast.AnnAssign, ast.Assign)):
                    mark(stmt)
        if isinstance(node, (ast.Raise, ast.Import, ast.ImportFrom, ast.Global)):
            mark(node)
        if isinstance(node, ast.Assert) and node.msg is not None:
            mark(node.msg)
        if isinstance(node, ast.Call):
            f = node.func
            name = getattr(f, "id", None) or getattr(f, "attr", "")
            if name in SKIP_CALLS:
                mark(node)
        if isinstance(node, ast.JoinedStr):
            mark(node)
    for node in ast.walk(tree):  # a statement that is only a quiet call
        if isinstance(node, ast.Expr) and id(node.value) in quiet:
            quiet.add(id(node))
    return quiet


def _unparse(node) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - a node ast cannot print alone
        text = type(node).__name__
    text = text.split("\n")[0]
    return text if len(text) <= 90 else text[:87] + "..."


def find_mutants(path: Path, rel: str) -> list[Mutant]:
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    excluded = _excluded_lines(text)
    quiet = _quiet_nodes(tree)
    # every (node path, replacement) pair, applied to a fresh copy of the tree one at a time
    edits: list[tuple[int, str, object]] = []  # (node index in walk order, description, change)
    nodes = list(ast.walk(tree))

    def add(index, node, description, change):
        if id(node) in quiet or getattr(node, "lineno", None) in excluded:
            return
        edits.append((index, description, change))

    for i, node in enumerate(nodes):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAPS:
            new = _BINOP_SWAPS[type(node.op)]
            add(i, node, f"'{_SYMBOL[type(node.op)]}' -> '{_SYMBOL[new]}'", ("binop", new))
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOP_SWAPS:
            new = _BINOP_SWAPS[type(node.op)]
            add(i, node, f"'{_SYMBOL[type(node.op)]}=' -> '{_SYMBOL[new]}='", ("augop", new))
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in _CMP_SWAPS:
                    new = _CMP_SWAPS[type(op)]
                    add(i, node, f"'{_SYMBOL[type(op)]}' -> '{_SYMBOL[new]}'", ("cmp", j, new))
                if type(op) in _CMP_FLIPS:
                    new = _CMP_FLIPS[type(op)]
                    add(i, node, f"'{_SYMBOL[type(op)]}' -> '{_SYMBOL[new]}'", ("cmp", j, new))
            for j, comp in enumerate([node.left, *node.comparators]):
                if isinstance(comp, ast.Constant) and isinstance(comp.value, str):
                    add(i, node, f"'{comp.value}' -> 'mutated' in a comparison", ("cmpstr", j))
        if isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            add(i, node, f"'{_SYMBOL[type(node.op)]}' -> '{_SYMBOL[new]}'", ("boolop", new))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            add(i, node, f"'{_unparse(node)}' -> '{_unparse(node.operand)}'", ("unary",))
        if isinstance(node, ast.Constant) and not isinstance(node.value, str):
            for value in _number_variants(node.value):
                add(i, node, f"{node.value!r} -> {value!r}", ("const", value))
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            add(i, node.test, f"condition '{_unparse(node.test)}' negated", ("negate",))
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            add(i, node, f"return '{_unparse(node.value)}' -> return None", ("return",))
        if isinstance(node, (ast.Expr, ast.AugAssign)) or (
                isinstance(node, ast.Assign)
                and all(isinstance(t, (ast.Subscript, ast.Attribute)) for t in node.targets)):
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                add(i, node, f"statement '{_unparse(node)}' dropped", ("drop",))

    mutants = []
    for index, description, change in edits:
        mutated = copy.deepcopy(tree)
        target = list(ast.walk(mutated))[index]
        if not _apply(mutated, target, change):
            continue
        line = getattr(target, "lineno", 0)
        try:
            new_source = ast.unparse(ast.fix_missing_locations(mutated))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(new_source, rel, "exec")
        except (SyntaxError, ValueError):
            continue
        mutants.append(Mutant(rel, line, lines[line - 1].strip() if line else "", description,
                              new_source))
    return mutants


def _parent_of(tree, target):
    for node in ast.walk(tree):
        for field, value in ast.iter_fields(node):
            if value is target:
                return node, field, None
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is target:
                        return node, field, k
    return None, None, None


def _apply(tree, node, change) -> bool:
    kind = change[0]
    if kind == "binop":
        node.op = change[1]()
    elif kind == "augop":
        node.op = change[1]()
    elif kind == "cmp":
        node.ops[change[1]] = change[2]()
    elif kind == "cmpstr":
        j = change[1]
        comp = node.left if j == 0 else node.comparators[j - 1]
        comp.value = "mutated"
    elif kind == "boolop":
        node.op = change[1]()
    elif kind == "const":
        node.value = change[1]
    elif kind in ("unary", "negate", "return", "drop"):
        parent, field, k = _parent_of(tree, node)
        if parent is None:
            return False
        if kind == "unary":
            new = node.operand
        elif kind == "negate":
            new = ast.UnaryOp(op=ast.Not(), operand=node)
        elif kind == "return":
            new = ast.Return(value=ast.Constant(value=None))
        else:
            new = ast.Pass()
        ast.copy_location(new, node)
        if k is None:
            setattr(parent, field, new)
        else:
            getattr(parent, field)[k] = new
    return True


_PROGRESS = re.compile(r"^\[\d+/\d+\] (SURVIVED|TIMEOUT)\s+[\d.]+s (\S+?):(\d+): (.*)$")


def survivors_in(output: str) -> set[tuple[str, int, str]]:
    """(path, line, description) of every survivor and every timeout of a run's output (a
    timeout on a loaded machine may be a slow survivor: run it again with a longer --timeout)."""
    found = set()
    for line in output.splitlines():
        hit = _PROGRESS.match(line)
        if hit:
            found.add((hit.group(2), int(hit.group(3)), hit.group(4)))
    return found


def python_files(targets: list[str], root: Path) -> list[Path]:
    out = []
    for t in targets:
        p = (root / t).resolve()
        if p.is_dir():
            out += sorted(q for q in p.rglob("*.py") if "__pycache__" not in q.parts
                          and q.name != "__init__.py")
        elif p.is_file():
            out.append(p)
        else:
            sys.exit(f"mutate: no such file or folder: {t}")
    return out


def tests_for(rel: str, override: list[str] | None) -> list[str]:
    if override:
        return override
    best = max((k for k in TESTS if rel.startswith(k)), key=len)
    return TESTS[best]


# --- running them --------------------------------------------------------------------------------


def copy_tree(root: Path) -> Path:
    dst = Path(tempfile.mkdtemp(prefix="mutate-")) / "tree"
    shutil.copytree(root, dst, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".benchmarks",
        "*.egg-info", ".venv", "node_modules"))
    return dst


def start_child(tree: Path, mutant: Mutant, tests: list[str], log_path: Path) -> int:
    """Fork a child that writes the mutant into `tree` and runs pytest there; return its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setpgid(0, 0)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(tree)
        sys.path.insert(0, str(tree))
        (tree / mutant.path).write_text(mutant.new_source)
        import pytest

        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-m", "not slow and not docker",
                            *tests])
    except BaseException as err:  # noqa: BLE001 - anything else is a crash of the child
        print(f"mutate child error: {err!r}", file=sys.stderr)
        code = 3
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, its waited-for children included) of a running process: on a
    loaded machine wall time says little about a hang."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # not Linux, or already gone
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", default=DEFAULT_TARGETS,
                    help=f"files or folders to mutate (default: {' '.join(DEFAULT_TARGETS)})")
    ap.add_argument("--tests", nargs="+", help="pytest arguments to run for every mutant "
                    "(default: the TESTS map by file)")
    ap.add_argument("--timeout", type=float, default=300.0, help="CPU seconds per mutant (300; "
                    "where /proc is missing, and in any case after 10x this, wall seconds)")
    ap.add_argument("--sample", type=int, default=0, help="run a random sample of this many "
                    "mutants (0 = all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample (0)")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at the same time (1)")
    ap.add_argument("--list", action="store_true", help="only list the mutants")
    ap.add_argument("--min-score", type=float, default=0.0, help="exit 1 below this share")
    ap.add_argument("--rerun", metavar="OUTPUT", help="run only the survivors and timeouts of "
                    "the saved output of an earlier run (after adding tests)")
    args = ap.parse_args(argv)

    mutants: list[Mutant] = []
    for path in python_files(args.targets, ROOT):
        mutants += find_mutants(path, str(path.relative_to(ROOT)))
    mutants.sort(key=lambda m: (m.path, m.line))
    if args.rerun:
        wanted = survivors_in(Path(args.rerun).read_text())
        mutants = [m for m in mutants if (m.path, m.line, m.description) in wanted]
        print(f"re-running {len(mutants)} of the {len(wanted)} survivors and timeouts of "
              f"{args.rerun} (any others are no longer found where they were: the code moved)")
    total_found = len(mutants)
    if args.sample and args.sample < len(mutants):
        mutants = sorted(random.Random(args.seed).sample(mutants, args.sample),
                         key=lambda m: (m.path, m.line))
    print(f"{total_found} mutants found in {len({m.path for m in mutants})} files"
          + (f"; running a sample of {len(mutants)} (seed {args.seed})" if len(mutants)
             < total_found else ""), flush=True)
    if args.list:
        for m in mutants:
            print(f"{m.path}:{m.line}: {m.description}    | {m.source_line}")
        return 0

    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # the mapped tests use no third-party pytest plugin: skip loading them in every child
    os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    mutated = {m.path[:-3].replace("/", ".") for m in mutants}
    sys.path.insert(0, str(ROOT))
    # Never preload a package that holds a mutated module: its submodules would then be found on
    # the preloaded package's path (the worktree), not in the child's mutated copy.
    mutated_packages = {name.split(".")[0] for name in mutated}
    for name in PRELOAD_APP:
        if name.split(".")[0] not in mutated_packages:
            preload_unless_it_imports(name, mutated_packages)
    early = {name for name in sys.modules if name.split(".")[0] in mutated_packages}
    if early:
        sys.exit(f"mutate: {sorted(early)} (packages holding mutated modules) imported before "
                 "forking; trim PRELOAD_APP")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    warm_up_torch()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the copies when stopped
    trees = [copy_tree(ROOT) for _ in range(max(1, args.jobs))]
    logs = Path(tempfile.mkdtemp(prefix="mutate-logs-"))
    # one datasets cache for every child (tests/conftest.py would make one per child, and a
    # forked child ends without running its clean-up)
    os.environ.setdefault("HF_DATASETS_CACHE", str(logs / "hf-datasets-cache"))
    originals = {m.path: (ROOT / m.path).read_text() for m in mutants}
    results: list[tuple[Mutant, str, float]] = []
    queue = list(enumerate(mutants))
    running: dict[int, tuple[int, Mutant, Path, float]] = {}  # pid -> (job, mutant, tree, t0)
    free = list(range(len(trees)))
    t_start = time.monotonic()
    try:
        while queue or running:
            while queue and free:
                i, m = queue.pop(0)
                job = free.pop(0)
                tree = trees[job]
                pid = start_child(tree, m, tests_for(m.path, args.tests), logs / f"{i}.log")
                running[pid] = (job, m, tree, time.monotonic(), i)
            time.sleep(0.2)
            for pid, (job, m, tree, t0, i) in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                elapsed = time.monotonic() - t0
                used = cpu_seconds(pid) if done == 0 else 0.0
                wall_limit = 10 * args.timeout if used else args.timeout
                if done == 0 and used < args.timeout and elapsed < wall_limit:
                    continue
                if done == 0:
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    outcome = "timeout"
                else:
                    code = os.waitstatus_to_exitcode(status)
                    outcome = "survived" if code == 0 else "killed" if code == 1 else \
                        f"error (pytest exit {code}, see {logs / f'{i}.log'})"
                    if code in (2, 3, 4):  # usage / internal errors: the mutant broke collection
                        outcome = "killed"
                (tree / m.path).write_text(originals[m.path])
                del running[pid]
                free.append(job)
                results.append((m, outcome, elapsed))
                print(f"[{len(results)}/{len(mutants)}] {outcome.upper():8s} {elapsed:6.1f}s "
                      f"{m.path}:{m.line}: {m.description}", flush=True)
    finally:
        for pid, (_, m, tree, _, _) in running.items():
            os.killpg(pid, signal.SIGKILL)
        for tree in trees:
            shutil.rmtree(tree.parent, ignore_errors=True)

    counts = {k: sum(1 for _, o, _ in results if o == k)
              for k in ("killed", "survived", "timeout")}
    score = (counts["killed"] + counts["timeout"]) / max(len(results), 1)
    print(f"\n{len(results)} mutants in {(time.monotonic() - t_start) / 60:.1f} min: "
          f"{counts['killed']} killed, {counts['survived']} survived, "
          f"{counts['timeout']} timeout; "
          f"score {100 * score:.1f}% (killed + timeout)")
    survivors = [m for m, o, _ in results if o == "survived"]
    if survivors:
        print("\nSurvivors:")
        for m in sorted(survivors, key=lambda m: (m.path, m.line)):
            print(f"  {m.path}:{m.line}: {m.source_line}\n      mutation: {m.description}")
    print(f"\n(child logs: {logs})")
    return 0 if score >= args.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
