"""Per-round record of a run: centralized evaluation of theta, EMA accuracy, traffic, log line,
and the run folder (results.json and metrics.csv after every round, plots every `plot-every`
rounds, the trackers of `reporting.tracking`; summary at the end).

The run folder (`make_run_dir`) is new for every run unless `run-name` names it; results.json
says what state the run is in (`status`: running, complete or failed, with `error`; read by
`python -m reporting.status`) and which Flower run(s) wrote it (`flower-run-ids`).

EMA_t = 0.9 * EMA_{t-1} + 0.1 * acc_t, starting at the first accuracy measured after training
(docs/algorithms.md#reporting; round 0, the initial model, is logged but not part of the EMA). The
numbers of the summary (accuracy at rounds, rounds to targets) are computed by `reporting.metrics`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.common import log

from fileio.atomic import write_text_atomic
from fileio.errors import UnusableFile
from fileio.folders import trusted_folder
from methods import untested_combinations
from models.evaluation import evaluate
from models.wire import state_view
from reporting.code_version import code_version
from reporting.metrics import ema_update, momentum_terms, run_summary
from reporting.plots import plot_run
from reporting.results_file import RESULTS
from reporting.results_file import read_results as read_checked_results
from run_config import ConfigError, acc_at_rounds, target_accs

from .console import duration

__all__ = ["RunRecorder", "ema_update", "make_run_dir", "mark_failed", "mark_running",
           "write_json_atomic"]


def finite_only(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None (JSON's null): results.json is
    strict JSON, which has no NaN or Infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_only(v) for v in obj]
    return obj


def write_json_atomic(path: Path, obj: Any) -> None:
    text = json.dumps(finite_only(obj), indent=2, default=lambda v: finite_only(float(v)),
                      allow_nan=False)
    write_text_atomic(path, text)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_results(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's own results.json, checked (`reporting.results_file`); None when there is
    none, or (with a warning saying why) when it cannot be read: the run then writes a new one
    over it."""
    try:
        return read_checked_results(run_dir)
    except FileNotFoundError:
        return None
    except OSError as err:
        log(WARNING, "%s", f"{err} (this run writes a new one in its place)")
        return None


def run_dir_name(cfg: dict[str, Any], now: float | None = None) -> str:
    return f"{cfg['method']}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


def make_run_dir(cfg: dict[str, Any], now: float | None = None,
                 hold: Callable[[Path], None] | None = None) -> Path:
    """The run's folder under out-dir, created; `hold(folder)` is called on it before anything
    in it is read (the ServerApp locks it there: `run_lock`).

    No run-name: `<method>-<date>-<time>`, with `-2`, `-3`, ... when that folder exists (created
    with an exclusive mkdir, so two runs started in the same second, even in two processes,
    get two folders). A run-name: that folder; refused when it holds a finished run (reusing
    the name would overwrite it); an unfinished run there is started afresh, with a warning.
    """
    base = out_dir(cfg)
    if cfg["run-name"]:
        run_dir = base / cfg["run-name"]
        _mkdir(run_dir, "run-name", cfg["run-name"], exist_ok=True)
        try:  # a link would put everything the run writes outside out-dir; another user's
            # folder holds what that user chose (fileio.folders.trusted_folder)
            trusted_folder(run_dir, make=False, warn=lambda text: log(WARNING, "%s", text))
        except UnusableFile as err:
            raise ConfigError(f"run config 'run-name' = '{cfg['run-name']}': {err}.") from None
        if hold:
            hold(run_dir)
        old = read_results(run_dir)
        if old and old.get("summary", {}).get("complete"):
            raise ConfigError(
                f"run config 'run-name' = '{cfg['run-name']}': {run_dir} holds a finished run, "
                "which this run would overwrite. Choose another run-name, leave it empty for a "
                "new folder, or extend that run with resume='latest' and a larger "
                "num-server-rounds.")
        if old:
            log(WARNING, "%s holds an unfinished run (%d rounds): starting afresh over it (to "
                "continue it instead, use resume='latest').", run_dir, len(old.get("rounds", [])))
        return run_dir
    name = run_dir_name(cfg, now)
    i = 1
    while True:
        run_dir = base / (name if i == 1 else f"{name}-{i}")
        if _mkdir(run_dir, "out-dir", cfg["out-dir"]):
            if hold:
                hold(run_dir)
            return run_dir
        i += 1


def out_dir(cfg: dict[str, Any]) -> Path:
    """out-dir, '~' expanded, created; ConfigError naming the key when it cannot be."""
    try:
        base = Path(cfg["out-dir"]).expanduser().resolve()
    except (RuntimeError, OSError, ValueError) as err:  # '~nobody', NUL, ...
        raise ConfigError(f"run config 'out-dir' = {cfg['out-dir']!r}: not a usable path "
                          f"({err}). Give a folder you can write, e.g. "
                          "out-dir='~/fedacg-gc-runs'.") from None
    _mkdir(base, "out-dir", cfg["out-dir"], parents=True, exist_ok=True)
    return base


def _mkdir(path: Path, key: str, value: str, parents: bool = False,
           exist_ok: bool = False) -> bool:
    """mkdir: True when made (or there already, with exist_ok), False when something of that
    name exists (without exist_ok); ConfigError naming the run-config `key` for anything else
    (a file in the way, no permission, a name too long)."""
    try:
        path.mkdir(parents=parents, exist_ok=exist_ok)
        return True
    except FileExistsError:
        if not exist_ok:
            return False
        why = "a file of that name is in the way"  # (exist_ok: only a non-folder raises)
    except (OSError, ValueError) as err:  # (ValueError: a name the OS cannot take)
        why = getattr(err, "strerror", None) or str(err)
    example = ", e.g. '~/fedacg-gc-runs'" if key == "out-dir" else ""
    raise ConfigError(f"run config '{key}' = {value!r}: cannot make the folder {path}: {why}. "
                      f"Choose another {key} (a folder you can create and write{example}).")


def mark_running(run_dir: Path, cfg: dict[str, Any], flower_run_id: int | None,
                 run_uid: str | None = None) -> None:
    """results.json says "running" (not complete) from the moment the folder is the run's; a
    resumed run keeps its rows and adds its Flower run id to the list. `run_uid`: the run's own
    id (a resumed run's checkpoint's; None: a new one), which its checkpoints carry. The code
    the run runs on is recorded as "code-version" (reporting.code_version: the commit and
    whether the checkout differs from it, or a hash of the FAB's files); a resumed run
    records the code of its last start."""
    old = read_results(run_dir) or {}
    ids = [i for i in old.get("flower-run-ids", []) if i != flower_run_id]
    old_summary = old.get("summary") if isinstance(old.get("summary"), dict) else {}

    results = {"config": cfg, "status": "running", "error": None, "failure": None,
               "run-uid": run_uid or uuid.uuid4().hex, "code-version": code_version(),
               "untested-combinations": untested_combinations(cfg),
               "flower-run-id": flower_run_id,
               "flower-run-ids": ids + ([flower_run_id] if flower_run_id is not None else []),
               "started-at": now_iso(), "ended-at": None,
               "summary": {**old_summary, "complete": False}, "rounds": old.get("rounds", [])}
    write_json_atomic(Path(run_dir) / RESULTS, results)


def mark_failed(run_dir: Path, error: str, failure: str = "error") -> None:
    """results.json says "failed", with the error and its kind (`failure`: 'diverged' when the
    training itself broke down, a result; 'error' otherwise); the rows written so far stay."""
    results = read_results(run_dir) or {"summary": {}, "rounds": []}
    results.update({"status": "failed", "error": error, "failure": failure,
                    "ended-at": now_iso()})
    results.setdefault("summary", {})["complete"] = False
    write_json_atomic(Path(run_dir) / RESULTS, results)


def rows_csv(rows: list[dict[str, Any]]) -> str:
    """One line per round; the columns are every key any row has, in first-seen order."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


class RunRecorder:
    """Called by the strategy: `train_metrics` after each aggregation, `evaluate_fn` after each
    round."""

    def __init__(self, cfg: dict[str, Any], model: torch.nn.Module, test: tuple, run_dir: Path,
                 device: torch.device, aggregate_fn,
                 traffic: Callable[[str], dict[str, int]] | None = None):
        """`traffic(message_type)`: counters of the messages sent and received since the last
        call (`MeteredGrid.take`)."""
        self.cfg, self.model, self.test, self.run_dir, self.device = (
            cfg, model, test, run_dir, device)
        # the run's metric (docs/results.md#the-runs-metric): the server's test set, or with none
        # (test-data = 'none') federated evaluation on the clients' held-out data
        self.metric = "test-acc" if test is not None else "fed-acc"
        self.last_eval: dict[str, float] = {}
        self.aggregate_fn = aggregate_fn
        self.traffic = traffic
        self.rows: list[dict[str, Any]] = []
        self.ema: float | None = None
        self.last_train: dict[str, float] = {}
        self.totals = {"bytes-down-total": 0, "bytes-up-total": 0}
        self.complete = False
        self.t_round = self.t_start = time.monotonic()
        self.wall_before = 0.0  # a resumed run's seconds in the processes before this one
        self.round_seconds: list[float] = []  # of this process's rounds: the ETA
        # what mark_running wrote (status, Flower run ids, start time) stays in every save
        header = read_results(run_dir) or {}
        self.header = {k: v for k, v in header.items() if k not in ("config", "summary", "rounds")}
        self.header.update({"status": "running", "error": None, "failure": None})
        self.trackers: list = []  # reporting.tracking: log(round, row) and close()

    def train_metrics(self, contents: list[RecordDict], weight_key: str) -> MetricRecord:
        """Flower's weighted average of the train metrics, kept for this round's row."""
        metrics = self.aggregate_fn(contents, weight_key)
        self.last_train = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.last_train["replies"] = len(contents)
        return metrics

    def eval_metrics(self, contents: list[RecordDict], weight_key: str) -> MetricRecord:
        """Flower's weighted average of the federated evaluation metrics: this round's fed-acc
        and fed-loss (the clients' eval-acc / eval-loss, weighted by their examples)."""
        metrics = self.aggregate_fn(contents, weight_key)
        self.last_eval = {f"fed-{k[5:]}": float(metrics[k]) for k in ("eval-acc", "eval-loss")
                          if isinstance(metrics.get(k), (int, float))}
        return metrics

    def note_train(self, server_round: int, metrics: MetricRecord) -> None:
        """The strategy's round metrics (reply counts included) for this round's row."""
        self.last_train.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})

    def restore(self, rows: list[dict[str, Any]], wall_seconds: float | None = None) -> None:
        """Continue a resumed run: its rows so far, the EMA and byte totals they end with, and
        the ServerApp seconds they took (`wall_seconds`, the checkpoint's; a checkpoint written
        before it kept them: the sum of its rows' round seconds, the start-up left out)."""
        self.rows = [dict(r) for r in rows]
        self.wall_before = (wall_seconds if wall_seconds is not None
                            else sum(float(r.get("seconds", 0.0)) for r in self.rows))
        emas = [r["ema-acc"] for r in self.rows if "ema-acc" in r]
        self.ema = emas[-1] if emas else None
        for key in self.totals:
            self.totals[key] = max((r.get(key, 0) for r in self.rows), default=0)

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        rounds = self.cfg["num-server-rounds"]
        due = server_round % self.cfg["eval-every"] == 0 or server_round == rounds
        row: dict[str, Any] = {"round": server_round}
        if due and self.test is not None:
            # views of the record: one copy, into the model
            t_eval = time.monotonic()
            self.model.load_state_dict(state_view(arrays))
            loss, acc = evaluate(self.model, *self.test)
            row.update({"test-loss": loss, "test-acc": acc,
                        "eval-seconds": time.monotonic() - t_eval})
        if server_round > 0:
            row.update(self.last_eval)  # federated evaluation of this round, when it ran
            self.last_eval = {}
            if self.metric in row:
                self.ema = ema_update(self.ema, row[self.metric])
                row["ema-acc"] = self.ema
        if server_round > 0:
            row.update({f"train-{k}" if not k.startswith("train-") else k: v
                        for k, v in self.last_train.items()})
            self.last_train = {}
        row.update(self._traffic(server_round))
        now = time.monotonic()
        row["seconds"] = now - self.t_round
        self.t_round = now
        if server_round > 0:
            self.round_seconds.append(row["seconds"])
        self.rows.append(row)
        self._log(row, rounds)
        self.save()
        for tracker in self.trackers:
            tracker.log(server_round, row)
        every = self.cfg["plot-every"]
        if every and server_round > 0 and server_round % every == 0 and server_round < rounds:
            self.plot()
        return MetricRecord({k: v for k, v in row.items() if isinstance(v, (int, float))
                             and not (isinstance(v, float) and math.isnan(v))})

    def _traffic(self, server_round: int) -> dict[str, Any]:
        """Clients sampled / replied / failed and bytes down / up of this round's training (and of
        federated evaluation, when on), measured on the messages themselves."""
        if self.traffic is None:
            return {}
        train, ev = self.traffic("train"), self.traffic("evaluate")
        if server_round == 0:
            return {}
        self.totals["bytes-down-total"] += train["bytes-down"]
        self.totals["bytes-up-total"] += train["bytes-up"]
        out = {"clients-sampled": train["sent"], "clients-replied": train["replies"],
               "clients-failed": train["failed"],
               "bytes-down": train["bytes-down"], "bytes-up": train["bytes-up"], **self.totals}
        if ev["sent"]:
            out.update({"eval-clients-sampled": ev["sent"], "eval-clients-replied": ev["replies"],
                        "eval-bytes-down": ev["bytes-down"], "eval-bytes-up": ev["bytes-up"]})
        return out

    def _log(self, row: dict[str, Any], rounds: int) -> None:
        def f(key, fmt="{:.4f}"):
            return fmt.format(row[key]) if key in row else "-"
        traffic = ""
        if "clients-sampled" in row:
            traffic = (f" | clients {row['clients-replied']}/{row['clients-sampled']}"
                       f" | MB down {row['bytes-down'] / 1e6:.3f} up {row['bytes-up'] / 1e6:.3f}")
        eta = ""
        if self.round_seconds and row["round"] < rounds:
            recent = self.round_seconds[-20:]  # the recent pace: round 1 pays for start-up
            eta = f" | ETA {duration(sum(recent) / len(recent) * (rounds - row['round']))}"
        loss = "test-loss" if self.metric == "test-acc" else "fed-loss"
        fed = f" | fed-acc {f('fed-acc')}" if self.metric == "test-acc" and "fed-acc" in row else ""
        log(INFO, "[round %d/%d] %s %s | ema-acc %s | %s %s | train-loss %s%s%s | %.2f s%s",
            row["round"], rounds, self.metric, f(self.metric), f("ema-acc"), loss, f(loss),
            f("train-loss"), fed, traffic, row["seconds"], eta)

    def summary(self) -> dict[str, Any]:
        out = run_summary(self.rows, acc_at_rounds=acc_at_rounds(self.cfg),
                          target_accs=target_accs(self.cfg),
                          total_rounds=self.cfg["num-server-rounds"], metric=self.metric,
                          momentum=momentum_terms(self.cfg))
        out["wall-seconds"] = self.wall_seconds()
        out["complete"] = self.complete
        return out

    def wall_seconds(self) -> float:
        """The run's ServerApp seconds so far: this process's, and with a resumed run those of
        the processes before it up to the checkpoint it resumed from."""
        return self.wall_before + time.monotonic() - self.t_start

    def save(self) -> None:
        self.header["status"] = "complete" if self.complete else self.header["status"]
        write_json_atomic(self.run_dir / RESULTS, {
            "config": self.cfg, **self.header, "summary": self.summary(), "rounds": self.rows})
        write_text_atomic(self.run_dir / "metrics.csv", rows_csv(self.rows))

    def plot(self) -> None:
        try:
            name = self.run_dir.name
            title = self.cfg["method"] + (f" ({name})" if name != self.cfg["method"] else "")
            plot_run(self.rows, self.run_dir, title=title, metric=self.metric)
        except Exception as err:  # a plot must never cost the run's results
            log(WARNING, "Could not draw the run's plots: %r", err)

    def close_trackers(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as err:  # tracking is a copy: never let it cost the run
                log(WARNING, "Could not close %s: %r", type(tracker).__name__, err)
        self.trackers = []

    def finish(self) -> dict[str, Any]:
        """Mark the run complete, write the final results and the plots; return the summary."""
        self.complete = True
        self.header["ended-at"] = now_iso()
        self.save()
        self.plot()
        self.close_trackers()
        return self.summary()
