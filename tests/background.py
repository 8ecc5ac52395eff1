"""Whole Flower scenarios (a deployment on loopback, its processes, its checks), each run in a
thread of its own, started when a test first reads it (started with the session instead, the default
run took the same time on 2 cores: docs/testing.md#test-time).

A test names its scenario with `@pytest.mark.background(scenario=f)`: `f(folder)` is a
function of the test's module that does the whole test (starts the processes, asserts, stops
every process it started, also on failure) in `folder`. `tests/conftest.py` starts a scenario
when its test first asks for it; the test itself (`background_result`) waits for
it and raises what it raised, so every assertion is reported by the test as before."""

from __future__ import annotations

import threading
from pathlib import Path


class Scenario:
    """One scenario running in a thread: `wait()` returns its result or raises its error."""

    def __init__(self, run, folder: Path):
        self.run, self.folder = run, folder
        self.result = self.error = None
        self.thread = threading.Thread(target=self._main, name=f"scenario {run.__name__}",
                                       daemon=True)

    def _main(self) -> None:
        try:
            self.result = self.run(self.folder)
        except BaseException as err:  # (re-raised by wait, in the test)
            self.error = err

    def start(self) -> "Scenario":
        self.thread.start()
        return self

    def wait(self, timeout: float | None = None):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"{self.run.__name__} did not end in {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result
