"""ServerApp: validate the run config, build model and strategy, run, record, checkpoint, save.

Thin Flower glue; the server maths is in `strategies.server_update`, checkpoints in `checkpoint`.
"""

from __future__ import annotations

import random
import time
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from feddata import load_test_data, spec_of
from feddata.summary import format_summary, partition_summary
from models import build_model
from run_config import load_setup, resolve
from strategies import build_strategy

from .checkpoint import (check_resumable, find_checkpoint, load_checkpoint, save_checkpoint,
                         set_rng_state)
from .results import RunRecorder, write_json_atomic
from .traffic import MeteredGrid

app = ServerApp()


def make_run_dir(cfg: dict) -> Path:
    base = Path(cfg["out-dir"]).expanduser().resolve()
    name = cfg["run-name"] or f"{cfg['method']}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir, i = base / name, 1
    while run_dir.exists() and not cfg["run-name"]:
        i += 1
        run_dir = base / f"{name}-{i}"
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def log_data_summary(cfg: dict, grid: Grid, test_size: int) -> dict | None:
    """Print the client split (for the nodes connected now) and check a set-up's federation size."""
    nodes = len(list(grid.get_node_ids()))
    if cfg["setup"]:
        expected = load_setup(cfg["setup"])["num-supernodes"]
        if nodes != expected:
            log(WARNING, "Set-up '%s' is meant for %d clients, %d are connected: in simulation "
                "pass --federation-config \"num-supernodes=%d\".", cfg["setup"], expected, nodes,
                expected)
    if nodes == 0:
        log(INFO, "Partitions: no node connected yet, no summary.")
        return None
    summary = partition_summary(cfg, nodes)
    log(INFO, "%s; test set %d examples.", format_summary(summary), test_size)
    return {**summary, "test-examples": test_size}


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = resolve(context.run_config)  # raises ConfigError naming the key before anything starts
    checkpoint = None
    if cfg["resume"]:
        path = find_checkpoint(cfg["resume"], cfg["out-dir"], cfg["run-name"])
        checkpoint = load_checkpoint(path)
        check_resumable(checkpoint["config"], cfg, checkpoint["round"])
        run_dir = path.parent  # the resumed run goes on in its own folder
        log(INFO, "Resuming %s at round %d", path, checkpoint["round"] + 1)
    random.seed(cfg["seed"])  # Flower's own baselines sample nodes with the global `random`
    spec = spec_of(cfg)
    model = build_model(cfg["model"], spec.in_shape, spec.num_classes, cfg["gn-groups"], seed=cfg["seed"])
    device = torch.device("cuda:0" if cfg["device"] != "cpu" and torch.cuda.is_available() else "cpu")
    test = load_test_data(cfg)
    partitions = log_data_summary(cfg, grid, len(test[1]))
    if checkpoint is None:
        run_dir = make_run_dir(cfg)
    write_json_atomic(run_dir / "config.json", cfg)
    if partitions:
        write_json_atomic(run_dir / "partitions.json", partitions)
    log(INFO, "Run folder: %s", run_dir)

    grid = MeteredGrid(grid)  # counts the clients and bytes of every message sent and received
    recorder = RunRecorder(cfg, build_model(cfg["model"], spec.in_shape, spec.num_classes,
                                            cfg["gn-groups"]).to(device),
                           test, run_dir, device, aggregate_metricrecords, traffic=grid.take)
    strategy = build_strategy(cfg, model, train_metrics_aggr_fn=recorder.train_metrics)
    strategy.round_metrics_fn = recorder.note_train
    run = dict(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=cfg["num-server-rounds"],
        timeout=cfg["round-timeout"],
        train_config=ConfigRecord(),  # the clients read their settings from the run config
        evaluate_config=ConfigRecord(),
        evaluate_fn=recorder.evaluate_fn,
    )
    if checkpoint is not None:  # (the config check refused rules that cannot resume)
        strategy.load_state_dict(checkpoint["strategy"])
        recorder.restore(checkpoint["rows"])
        set_rng_state(checkpoint["rng"])
        run["first_round"] = checkpoint["round"] + 1
    every = cfg["checkpoint-every"]
    if every and "resume" not in strategy.rule.supports:
        log(INFO, "No checkpoints: server-rule %s keeps state that is not saved (%s).",
            cfg["server-rule"], strategy.rule.summary)
        every = 0

    def round_end(server_round: int, arrays: ArrayRecord) -> None:
        if every and (server_round % every == 0 or server_round == cfg["num-server-rounds"]):
            path = save_checkpoint(run_dir, server_round, cfg, strategy.state_dict(),
                                   recorder.rows)
            log(INFO, "Checkpoint of round %d: %s", server_round, path)

    result = strategy.start(**run, round_end_fn=round_end)
    final = result.arrays if len(result.arrays) else ArrayRecord(model.state_dict())
    torch.save(final.to_torch_state_dict(), run_dir / "final_model.pt")
    summary = recorder.finish()
    log(INFO, "Done: final test-acc %s, ema-acc %s | EMA acc at rounds %s | rounds to targets (%%) %s "
        "| %.2f MB sent | %.1f s. Results: %s", summary["final-test-acc"], summary["final-ema-acc"],
        summary["acc-at-round"], summary["rounds-to-acc"], summary["bytes-total"] / 1e6,
        summary["wall-seconds"], run_dir)
