"""Per-round record of a run: centralized evaluation of theta, EMA accuracy, log line, results.json.

EMA_t = 0.9 * EMA_{t-1} + 0.1 * acc_t, starting at the first accuracy measured after training
(SPEC 1.7; round 0, the initial model, is logged but not part of the EMA).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.common import log
from logging import INFO

from models.evaluation import evaluate


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=float))
    os.replace(tmp, path)


def ema_update(ema: float | None, acc: float, factor: float = 0.9) -> float:
    return acc if ema is None else factor * ema + (1 - factor) * acc


class RunRecorder:
    """Called by the strategy: `train_metrics` after each aggregation, `evaluate_fn` after each round."""

    def __init__(self, cfg: dict[str, Any], model: torch.nn.Module, test: tuple, run_dir: Path,
                 device: torch.device, aggregate_fn):
        self.cfg, self.model, self.test, self.run_dir, self.device = cfg, model, test, run_dir, device
        self.aggregate_fn = aggregate_fn
        self.rows: list[dict[str, Any]] = []
        self.ema: float | None = None
        self.last_train: dict[str, float] = {}
        self.t_round = self.t_start = time.monotonic()

    def train_metrics(self, contents: list[RecordDict], weight_key: str) -> MetricRecord:
        """Flower's weighted average of the train metrics, kept for this round's row."""
        metrics = self.aggregate_fn(contents, weight_key)
        self.last_train = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.last_train["replies"] = len(contents)
        return metrics

    def note_train(self, server_round: int, metrics: MetricRecord) -> None:
        """The strategy's round metrics (reply counts included) for this round's row."""
        self.last_train.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})

    def restore(self, rows: list[dict[str, Any]]) -> None:
        """Continue a resumed run: its rows so far and the EMA they end with."""
        self.rows = [dict(r) for r in rows]
        emas = [r["ema-acc"] for r in self.rows if "ema-acc" in r]
        self.ema = emas[-1] if emas else None

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        rounds = self.cfg["num-server-rounds"]
        due = server_round % self.cfg["eval-every"] == 0 or server_round == rounds
        row: dict[str, Any] = {"round": server_round}
        if due:
            self.model.load_state_dict(arrays.to_torch_state_dict())
            loss, acc = evaluate(self.model, *self.test)
            row.update({"test-loss": loss, "test-acc": acc})
            if server_round > 0:
                self.ema = ema_update(self.ema, acc)
                row["ema-acc"] = self.ema
        if server_round > 0:
            row.update({f"train-{k}" if not k.startswith("train-") else k: v
                        for k, v in self.last_train.items()})
            self.last_train = {}
        now = time.monotonic()
        row["seconds"] = now - self.t_round
        self.t_round = now
        self.rows.append(row)
        self._log(row, rounds)
        self.save()
        return MetricRecord({k: v for k, v in row.items() if isinstance(v, (int, float))
                             and not (isinstance(v, float) and math.isnan(v))})

    def _log(self, row: dict[str, Any], rounds: int) -> None:
        def f(key, fmt="{:.4f}"):
            return fmt.format(row[key]) if key in row else "-"
        log(INFO, "[round %d/%d] test-acc %s | ema-acc %s | test-loss %s | train-loss %s | %.2f s",
            row["round"], rounds, f("test-acc"), f("ema-acc"), f("test-loss"), f("train-loss"),
            row["seconds"])

    def summary(self) -> dict[str, Any]:
        evaluated = [r for r in self.rows if "test-acc" in r and r["round"] > 0]
        last = evaluated[-1] if evaluated else {}
        return {"rounds": len(self.rows) - 1, "final-test-acc": last.get("test-acc"),
                "final-ema-acc": last.get("ema-acc"), "final-test-loss": last.get("test-loss"),
                "wall-seconds": time.monotonic() - self.t_start}

    def save(self) -> None:
        write_json_atomic(self.run_dir / "results.json",
                          {"config": self.cfg, "summary": self.summary(), "rounds": self.rows})
