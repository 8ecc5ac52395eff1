"""What a run prints: one line per round, one line at the end, one line for an error of ours.

Everything is done with logging filters on Flower's logger ("flwr", which `flwr.common.log` and
the strategies write to), installed in one place (`install`), so it holds whatever code emits a
line: Flower's round loop, Flower's strategies, ours.

* Per-round detail ("[ROUND n/N]", "configure_train ...", "aggregate_train ...", "Aggregated
  MetricRecord ...", the strategy's start-up block, checkpoint lines) is demoted to DEBUG: shown
  with `log-level = 'debug'`, hidden otherwise.
* Warnings a user cannot act on are dropped: FedAvg's "fraction_evaluate is set to 0.0" (that is
  the default here), and Ray's FutureWarning about accelerator variables (a `warnings` filter,
  installed on import: the ClientApp module is imported before Ray starts).
* An error of ours (`ConfigError`, a part's `SettingError`, a checkpoint, data, node,
  client-state or non-finite server state error, a file that cannot be used: `is_ours`) is
  printed as one ERROR line naming the key and the fix (`report_error`); the traceback Flower
  logs for the failed ServerApp is dropped for it. Any other exception keeps its traceback.

Flower prints a few lines before the app is loaded (the federation banner, "default simulated
SuperNodes changed from 10 to 2"): no app code can filter those.
"""

from __future__ import annotations

import logging
import re
import warnings
from logging import DEBUG, ERROR

from feddata.sources import DataSourceError
from fileio.errors import UnusableFile
from methods import SettingError
from run_config import ConfigError, SetupError
from strategies.client_state_rounds import ClientStateLost
from strategies.nodes import NodesRefused, NodeWaitTimeout
from strategies.round_loop import NothingLearned
from strategies.state_check import ServerStateNotFinite

from .checkpoint import CheckpointError

FLOWER_LOGGER = "flwr"
_MARK = "_fedacg_reported"  # set on an exception whose one-line report was printed

# Per-round and start-up detail (Flower's loop and strategies, and ours): DEBUG.
DETAIL = re.compile(
    r"^(\s*$|\[ROUND \d+/\d+\]|configure_(train|evaluate)\b|aggregate_(train|evaluate)\b"
    r"|\s*[├└│]|Starting \w+ strategy|Strategy execution finished|Checkpoint of round"
    r"|dynamic clients: they hold|Sampled \d+ nodes|Received \d+ results"
    r"|Initial global evaluation results|Global evaluation$)")
# Warnings nobody can act on (the default config causes them): dropped.
NOISE = re.compile(r"^fraction_evaluate is set to 0\.0")
RAY_TIP = r"Tip: In future versions of Ray, Ray will no longer override accelerator"


def quiet_warnings() -> None:
    """Python warnings that are not the user's business (idempotent)."""
    warnings.filterwarnings("ignore", message=RAY_TIP, category=FutureWarning)


quiet_warnings()  # on import: the ClientApp module imports this before Ray starts


class ConsoleFilter(logging.Filter):
    """Demotes per-round detail to DEBUG (kept only when `debug`), drops noise and the
    tracebacks of errors already reported in one line."""

    def __init__(self, debug: bool = False):
        super().__init__("fedacg-console")
        self.debug = debug

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and getattr(exc, _MARK, False):
            return False  # "ServerApp raised an exception" + traceback: said in one line already
        if record.levelno > logging.INFO:
            return not (record.levelno == logging.WARNING and NOISE.match(record.getMessage()))
        if record.levelno == logging.INFO and DETAIL.match(record.getMessage()):
            record.levelno, record.levelname = DEBUG, "DEBUG"
            return self.debug
        return True


def install(log_level: str = "info") -> ConsoleFilter:
    """Install (or re-configure) the one console filter on Flower's logger."""
    logger = logging.getLogger(FLOWER_LOGGER)
    for f in logger.filters:
        if isinstance(f, ConsoleFilter):
            f.debug = log_level == "debug"
            return f
    f = ConsoleFilter(debug=log_level == "debug")
    logger.addFilter(f)
    quiet_warnings()
    return f


def is_ours(err: BaseException) -> bool:
    """Errors whose message names the problem and the fix: no traceback needed."""
    return isinstance(err, (ConfigError, SettingError, SetupError, CheckpointError,
                            NodeWaitTimeout, NodesRefused, DataSourceError, ServerStateNotFinite,
                            ClientStateLost, NothingLearned, UnusableFile))


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if is_ours(err) else f"{type(err).__name__}: {text}"


def report_error(err: BaseException, run_dir=None) -> str:
    """Log the run's failure in one line (with the run folder, marked failed, if there is one);
    for our errors no traceback follows. Returns the error's one-line text."""
    text = one_line(err)
    where = f" (run folder, marked failed: {run_dir})" if run_dir is not None else ""
    logging.getLogger(FLOWER_LOGGER).log(ERROR, "Run failed: %s%s", text, where)
    if is_ours(err):
        try:
            setattr(err, _MARK, True)
        except AttributeError:
            pass
    return text


def duration(seconds: float) -> str:
    """'42 s', '12 min', '3.5 h'."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
