import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # flwr-datasets would post events
# Local copies are converted into the datasets cache: keep the tests' conversions out of ~/.cache,
# in a cache of each process's own (unless HF_DATASETS_CACHE names the user's): pytest-xdist's
# workers inherit the environment of the process that started them, and a test that checks the
# cache is left unchanged (tests/test_hostile_files.py) must not see another worker's writes.
_GIVEN = os.environ.get("HF_DATASETS_CACHE")
if _GIVEN is None or _GIVEN == os.environ.get("FEDACG_TESTS_HF_CACHE"):  # (one of ours)
    _CACHE = tempfile.mkdtemp(prefix="hf-datasets-cache-")
    os.environ["HF_DATASETS_CACHE"] = os.environ["FEDACG_TESTS_HF_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# One torch thread in the tests and in the Flower processes they start (unless OMP_NUM_THREADS
# says otherwise): the models are tiny, and on a busy 2-core box two threads per process contend
# (a CNN step on digits measured 6-10 ms with one thread, 85-190 ms with two under load; 6 ms
# with two on an idle box). No test depends on the count (tests/test_preset_referee.py holds
# for 1 and 2 threads alike).
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def same_generators_in_any_order():
    """Each test starts from the same state of the global generators (torch's, numpy's,
    Python's), whatever ran before it: a model or sampler a test builds without a seed of its
    own is then the same in every order the tests run in (a model built from what an earlier
    test left in torch's generator once decided whether a test learnt)."""
    import random

    import numpy as np

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    yield


@pytest.fixture(autouse=True)
def task_identity():
    """Message(...) outside a Flower runtime needs a task identity (FLOWER.md 1.4)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield


@pytest.fixture(autouse=True)
def no_console_filter():
    """Each test starts without the app's console filter on Flower's logger. A ServerApp run
    in-process installs it there (server_app/console.py: it hides the per-round and start-up
    lines) and leaves it, for the traceback Flower logs after a failed run; left over from an
    earlier test (or a module-scoped fixture's runs) it hid the lines a later test reads, so the
    outcome depended on the order the tests ran in."""
    from server_app.console import ConsoleFilter

    logger = logging.getLogger("flwr")
    logger.filters[:] = [f for f in logger.filters if not isinstance(f, ConsoleFilter)]
    yield


@pytest.fixture(autouse=True, scope="session")
def partition_cache_dir(tmp_path_factory):
    """ClientApps of the tests (and the Flower processes they start) cache partitions here."""
    folder = tmp_path_factory.mktemp("partition-cache")
    old = os.environ.get("FEDACG_CACHE_DIR")
    os.environ["FEDACG_CACHE_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("FEDACG_CACHE_DIR", None)
    else:
        os.environ["FEDACG_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def superlink(tmp_path_factory):
    """A simulation SuperLink on free ports with its own FLWR_HOME, one for the whole test run
    (every `flwr run` test reads `env, home`; each run has its own run-name under home/runs):
    every process it started (the SuperExec runs in a session of its own) is stopped at the end,
    also on failure."""
    if not shutil.which("flower-superlink"):
        pytest.skip("flwr is not installed")
    from experiments.superlink import LocalSuperLink

    home = tmp_path_factory.mktemp("flwr-home")
    with LocalSuperLink(home=home) as link:
        yield link.env, home


@pytest.fixture(scope="session")
def fedacg_flwr_run_started(superlink, tmp_path_factory):
    """The `flwr run` of `fedacg_flwr_run`, started (a Popen writing into files; stopped at the
    end if it has not ended by then). `(proc, logs, home, run_dir, t_start)`."""
    import subprocess
    import time

    from experiments.superlink import CONNECTION

    env, home = superlink
    logs = tmp_path_factory.mktemp("fedacg-flwr-run")  # (files: a pipe nobody reads can fill)
    t = time.monotonic()
    with open(logs / "stdout", "w") as out, open(logs / "stderr", "w") as err:
        proc = subprocess.Popen(
            ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config",
             "num-supernodes=10", "--run-config", f"method='fedacg' num-server-rounds=12 "
             f"out-dir='{home}/runs' run-name='fedacg'"],
            cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
    yield proc, logs, home, home / "runs" / "fedacg", t
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(autouse=True, scope="session")
def shared_flower_runs_start_first(request, partition_cache_dir):
    """Nothing is started here any more: the session's shared `flwr run` starts when a test
    first reads it. Started with the session or when first read, the default run took the same
    18 min 3 s on 2 cores (docs/testing.md#test-time); started when read it stays off the
    timing-sensitive first tests. Kept so that `partition_cache_dir` is set
    before the SuperLink copies the environment."""
    yield  # (started when first read: see background_scenarios)


@pytest.fixture(scope="session")
def fedacg_flwr_run(fedacg_flwr_run_started):
    """One `flwr run` of the app (FedACG, the default method, 12 rounds on 10 simulated nodes)
    on the session's SuperLink, read by the tests that only check its outcome, both in
    test_simulation.py: it learns, and its console. Started when first read; this waits for its
    end (killed after 600 s: its returncode then says so). `(out, home, run_dir, wall)`, `out`
    a CompletedProcess, `wall` the seconds from its start until it was read."""
    import subprocess
    import time

    proc, logs, home, run_dir, t = fedacg_flwr_run_started
    try:  # (a hang guard: it runs beside other tests, so more than it needs alone)
        proc.wait(timeout=max(1.0, 600 - (time.monotonic() - t)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stdout, stderr = (logs / "stdout").read_text(), (logs / "stderr").read_text()
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out, home, run_dir, time.monotonic() - t


@pytest.fixture(autouse=True, scope="session")
def background_scenarios(request, partition_cache_dir, tmp_path_factory):
    """`start(scenario)`: a scenario of a test marked `background` (tests/background.py) started
    in a thread of its own when a test first reads it (at the session's start or when read, the
    default run took the same time on 2 cores: docs/testing.md#test-time); at
    the end each is waited for (they stop their own processes)."""
    from background import Scenario

    started: dict = {}

    def start(run):  # (when a test first reads it)
        if run not in started:
            started[run] = Scenario(run, tmp_path_factory.mktemp(run.__name__)).start()
        return started[run]

    yield start
    for scenario in started.values():
        scenario.thread.join(900)


@pytest.fixture
def background_result(request, background_scenarios):
    """The result of this test's background scenario (`@pytest.mark.background(scenario=...)`),
    waited for; what it raised is raised here."""
    run = request.node.get_closest_marker("background").kwargs["scenario"]
    return background_scenarios(run).wait(timeout=900)


@pytest.fixture(autouse=True, scope="module")
def no_run_plots(request):
    """In a module marked `no_run_plots` (`pytestmark = pytest.mark.no_run_plots`) the app's
    in-process runs draw no run-folder plots (labels.png, accuracy*.png): matplotlib's 0.3-2.5 s
    a run, in modules that assert nothing of them. Both are drawn in a try that logs a warning,
    so a plot never changes a run's results (server_app/app.py plot_labels,
    server_app/results.py RunRecorder.plot); the plots are checked where they are asserted
    (test_reporting.py, test_runs.py, test_own_data.py, ...). Autouse: set up before the
    module's own module-scoped runs."""
    if request.node.get_closest_marker("no_run_plots") is None:
        yield
        return
    import server_app.app as app
    import server_app.results as results

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app, "plot_labels", lambda *args, **kwargs: None)
        patch.setattr(results, "plot_run", lambda *args, **kwargs: [])
        yield


OPT_IN = ("docker", "each_method", "long", "field")  # markers that run only when `-m` names them


def pytest_collection_modifyitems(config, items):
    """The docker compose demo, the one-flwr-run-per-method tests and the long runs run only
    when `-m` names them (`.ci/run` runs `-m "each_method or long"`, `-m docker` and `-m
    field`): a `-m` on the command line replaces pyproject's, and `-m "not slow"` alone would
    otherwise run them. Then the tests that read a run started with the session go last."""
    named = config.getoption("markexpr") or ""
    for marker in OPT_IN:
        if marker in named:
            continue
        kept = [item for item in items if marker not in item.keywords]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if marker in i.keywords])
            items[:] = kept
    # the tests that read what started with the session (a background scenario, the shared
    # flwr run) last; with `--dist loadfile` that is last within their file's worker (any
    # order is an order the tests hold in: "Any order", docs/testing.md)
    items.sort(key=reads_what_started_with_the_session)


def reads_what_started_with_the_session(item) -> bool:
    return (item.get_closest_marker("background") is not None
            or "fedacg_flwr_run" in getattr(item, "fixturenames", ()))


@pytest.fixture
def disk_full_after(monkeypatch):
    """`disk_full_after(n)`: from then on, a file that fileio.atomic writes fails with ENOSPC (a
    full disk) once more than n bytes were written to it."""
    import errno

    import fileio.atomic as atomic

    real_fdopen = os.fdopen

    def fill(after: int) -> None:
        class Full:
            def __init__(self, f):
                self.f, self.n = f, 0

            def write(self, data):
                self.n += len(data)
                if self.n > after:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return self.f.write(data)

            def __getattr__(self, name):
                return getattr(self.f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

        monkeypatch.setattr(atomic.os, "fdopen", lambda *a, **k: Full(real_fdopen(*a, **k)))

    return fill
