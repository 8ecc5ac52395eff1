"""ServerApp: validate the run config, build model and strategy, run, record, checkpoint, save.

Thin Flower glue; the server maths is in `server_math.server_update`, checkpoints in `checkpoint`.
"""

from __future__ import annotations

import random
import uuid
from logging import DEBUG, INFO, WARNING
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from feddata import DataSettings, load_test_data, spec_of
from feddata.disk_cache import cache_dir, prepare_partitions
from feddata.summary import format_summary, label_counts, partition_summary
from fileio.atomic import write_torch_atomic
from models import build_model
from reporting.plots import plot_label_distribution
from reporting.tracking import build_trackers
from run_config import ConfigError, load_setup, resolve
from run_config.check import check_robust
from run_config.collapses import collapse_warnings
from strategies.assembly import build_strategy
from strategies.round_loop import NothingLearned
from strategies.state_check import ServerStateNotFinite

from . import console
from .checkpoint import (check_owner, check_resumable, find_checkpoint, load_checkpoint,
                         resumed_run_name, save_checkpoint, set_rng_state)
from .results import (RunRecorder, make_run_dir, mark_failed, mark_running, read_results,
                      write_json_atomic)
from .run_lock import hold_run_dir
from .sim_poll import speed_up_message_poll
from .traffic import REPLY_POLL_SECONDS, MeteredGrid

app = ServerApp()


def describe_test_set(cfg: dict, test: tuple | None) -> str:
    """What the server evaluates on, for the log."""
    if test is None:
        return ("no server test set (test-data = 'none'): the run's metric is fed-acc, federated "
                "evaluation on the clients' held-out data")
    where = "" if cfg["test-data"] == "dataset" else f" from {cfg['test-data']}"
    return f"test set {len(test[1])} examples{where}"


def log_data_summary(cfg: dict, data: DataSettings, grid: Grid, test: tuple | None
                     ) -> dict | None:
    """Print the client split (for the nodes connected now) and check a set-up's federation size.
    With own data (client-data = 'own') there is no split to show: each node has its folder."""
    nodes = len(list(grid.get_node_ids()))
    if cfg["client-data"] == "own":
        log(INFO, "Clients: %d node(s) connected, each training on its own data (data-path); %s.",
            nodes, describe_test_set(cfg, test))
        return None
    if cfg["setup"]:
        expected = load_setup(cfg["setup"])["num-supernodes"]
        if nodes != expected:
            log(WARNING, "Set-up '%s' is meant for %d clients, %d are connected: in simulation "
                "pass --federation-config \"num-supernodes=%d\".", cfg["setup"], expected, nodes,
                expected)
    if nodes == 0:
        log(INFO, "Partitions: no node connected yet, no summary.")
        return None
    summary = partition_summary(data, nodes)
    log(INFO, "%s; %s.", format_summary(summary), describe_test_set(cfg, test))
    return {**summary, "test-examples": 0 if test is None else len(test[1])}


def plot_labels(data: DataSettings, nodes: int, run_dir: Path) -> None:
    """labels.png: each client's examples per label (the first 100 clients)."""
    try:
        names, counts = label_counts(data, nodes, max_partitions=100)
        plot_label_distribution(counts, names, run_dir / "labels.png",
                                title=f"{data.dataset}, {data.partitioner} split over {nodes} "
                                "clients: examples per label")
    except Exception as err:  # a plot must never cost the run
        log(WARNING, "Could not draw the label distribution: %r", err)


def is_simulation(grid: Grid) -> bool:
    """The simulation engine's grid: its nodes are all registered at the start and never more."""
    return type(grid).__name__ == "InMemoryGrid"


@app.main()
def main(grid: Grid, context: Context) -> None:
    log_level = context.run_config.get("log-level", "info")
    console.install(log_level if isinstance(log_level, str) else "info")
    where: dict = {}
    try:
        run_server(grid, context, where)
    except Exception as err:
        # one line for our errors (Flower's traceback is dropped for them)
        text = console.report_error(err, where.get("run_dir"))
        if where.get("run_dir") is not None:
            try:
                mark_failed(where["run_dir"], text, failure_kind(err))
            except OSError as failed:  # (a full disk: the first error is the one to see)
                log(WARNING, "Could not mark %s failed: %s", where["run_dir"], failed)
        if where.get("recorder") is not None:
            where["recorder"].close_trackers()
        raise  # Flower marks the run failed (flwr ls, flwr log); `flwr run` still exits 0
    finally:  # (also on KeyboardInterrupt; a killed process loses the lock with its files)
        if where.get("lock") is not None:
            where["lock"].release()


def failure_kind(err: BaseException) -> str:
    """'diverged' when the training broke down (a non-finite server state, or rounds that
    aggregated nothing: a method's result, as the papers' "Failed"), else 'error'."""
    return "diverged" if isinstance(err, (ServerStateNotFinite, NothingLearned)) else "error"


def run_server(grid: Grid, context: Context, where: dict) -> None:
    """One run, job by job: its config and folder, the data and model, the federation, the
    recorder and strategy, the rounds, the end. `where` holds what `main` cleans up on an error
    (the run folder, its lock, the recorder) as soon as each exists."""
    cfg = resolve(context.run_config)  # raises ConfigError naming the key before anything starts
    run_dir, checkpoint, run_uid = open_run_dir(cfg, context, where)
    spec, model, device, test, partitions = model_and_data(cfg, grid, run_dir)
    grid = federation_grid(cfg, grid, partitions)
    recorder = RunRecorder(cfg, build_model(cfg["model"], spec.in_shape, spec.num_classes,
                                            cfg["gn-groups"]).to(device),
                           test, run_dir, device, aggregate_metricrecords, traffic=grid.take)
    where["recorder"] = recorder
    recorder.trackers = build_trackers(cfg, run_dir)
    strategy = make_strategy(cfg, model, recorder, partitions)
    result = run_rounds(cfg, grid, model, strategy, recorder, run_dir, checkpoint, run_uid)
    end_run(result.arrays, model, recorder, run_dir)


def open_run_dir(cfg: dict, context: Context, where: dict) -> tuple[Path, dict | None, str]:
    """The run folder, held (one run per folder), marked running with config.json written:
    a new one, or with `resume` the checkpoint's own (then also the checkpoint, checked against
    the folder and the config); and the run's own id."""
    def hold(run_dir: Path, key: str) -> None:  # one run per folder (run_lock); freed by main
        where["lock"] = hold_run_dir(run_dir, context.run_id, key, cfg[key])

    checkpoint = None
    if cfg["resume"]:
        path = find_checkpoint(cfg["resume"], cfg["out-dir"], cfg["run-name"], cfg["method"])
        run_dir = path.parent  # the resumed run goes on in its own folder, under its own name
        hold(run_dir, "resume")
        checkpoint = load_checkpoint(path)
        check_owner(checkpoint, run_dir, read_results(run_dir) or {})
        check_resumable(checkpoint["config"], cfg, checkpoint["round"])
        cfg["run-name"] = resumed_run_name(cfg, checkpoint["config"], run_dir)
        log(INFO, "Resuming %s (sha256 %s) at round %d", path, checkpoint["sha256"],
            checkpoint["round"] + 1)
    else:
        run_dir = make_run_dir(cfg, hold=lambda folder: hold(folder, "run-name"))
    where["run_dir"] = run_dir
    # the run's own id: a checkpoint carries it, a resume holds it against its folder's
    run_uid = (checkpoint or {}).get("run-uid") or uuid.uuid4().hex
    mark_running(run_dir, cfg, context.run_id, run_uid)
    write_json_atomic(run_dir / "config.json", cfg)
    log(INFO, "Run folder: %s (Flower run %s)", run_dir, context.run_id)
    for line in collapse_warnings(cfg):  # a combination a results page saw collapse
        log(WARNING, "%s", line)
    return run_dir, checkpoint, run_uid


def model_and_data(cfg: dict, grid: Grid, run_dir: Path) -> tuple:
    """(spec, the global model, the device, the server's test set, the partition summary or
    None): the seeds set, the model built, the test set loaded, the split logged and, when
    there is one, written to partitions.json and drawn in labels.png; in a Ray simulation the
    clients' partition files are then prepared in the cache folder (`prepare_partitions`), so
    that the ClientApp's actors import no `datasets`."""
    random.seed(cfg["seed"])  # Flower's own baselines sample nodes with the global `random`
    data = DataSettings.from_config(cfg)  # the data keys, as the data package takes them
    spec = spec_of(data)
    model = build_model(cfg["model"], spec.in_shape, spec.num_classes, cfg["gn-groups"],
                        seed=cfg["seed"], init=cfg["init"])
    device = torch.device(
        "cuda:0" if cfg["device"] != "cpu" and torch.cuda.is_available() else "cpu")
    test = load_test_data(data)
    partitions = log_data_summary(cfg, data, grid, test)
    if partitions:
        write_json_atomic(run_dir / "partitions.json", partitions)
        plot_labels(data, partitions["clients"], run_dir)
        folder = cache_dir()  # (a simulated node's: it has no node config of its own)
        # (a dynamic population trains partitions of a larger pool, handed out each round:
        # its clients build what they are given)
        if is_simulation(grid) and folder is not None and cfg["dynamic-replace-prob"] == 0:
            built = prepare_partitions(data, partitions["clients"], folder)
            log(DEBUG, "Partitions prepared for the clients in %s: %d built", folder, built)
    return spec, model, device, test, partitions


def federation_grid(cfg: dict, grid: Grid, partitions: dict | None) -> MeteredGrid:
    """The grid, metered, after the checks a simulated federation's known size allows (robust
    rules, num-clients, amp without a GPU); a simulation's message poll sped up."""
    simulation = getattr(grid, "fixed_size", False) or is_simulation(grid)
    if simulation and partitions:  # the federation's size is known: what it decides
        check_robust(cfg, partitions["clients"])
    if simulation and cfg["num-clients"] and cfg["client-data"] == "partitions":
        nodes = len(list(grid.get_node_ids()))
        if nodes and nodes != cfg["num-clients"]:
            raise ConfigError(
                f"run config 'num-clients' = {cfg['num-clients']}, and the simulated federation "
                f"has {nodes} node(s), each one client: leave num-clients out (0) in a "
                f"simulation, or run --federation-config \"num-supernodes={cfg['num-clients']}\".")
    if cfg["precision"] == "amp" and simulation and not torch.cuda.is_available():
        log(WARNING, "precision = 'amp' needs a CUDA GPU and none is visible here: simulated "
            "clients without one refuse to train (precision = 'auto' trains in fp32 there).")
    if is_simulation(grid) and cfg["simulation-fast-poll"]:
        speed_up_message_poll(grid)  # docs/performance.md#many-clients
    grid = MeteredGrid(grid)  # counts the clients and bytes of every message sent and received
    grid.fixed_size = simulation  # too few simulated nodes: an error at once, no waiting
    if type(grid.grid).__name__ == "HttpGrid":  # Flower's deployed grid (its poll: every 3 s)
        grid.poll_seconds = REPLY_POLL_SECONDS  # the round ends with its last reply
    return grid


def make_strategy(cfg: dict, model: torch.nn.Module, recorder: RunRecorder,
                  partitions: dict | None):
    """The method's strategy, reporting to `recorder`; with num-examples-check, a reply's
    claimed examples bounded by the largest partition."""
    strategy = build_strategy(cfg, model, train_metrics_aggr_fn=recorder.train_metrics,
                              evaluate_metrics_aggr_fn=recorder.eval_metrics)
    strategy.round_metrics_fn = recorder.note_train
    if partitions and cfg["num-examples-check"]:  # docs/security.md: what the server knows
        strategy.max_num_examples = float(partitions["size-max"])
    return strategy


def run_rounds(cfg: dict, grid: MeteredGrid, model: torch.nn.Module, strategy,
               recorder: RunRecorder, run_dir: Path, checkpoint: dict | None, run_uid: str):
    """Flower's loop from the first round (the checkpoint's next one when resuming, the
    strategy, the rows and the random state restored), a checkpoint every checkpoint-every
    rounds and at the last where the server rule can resume; the loop's result."""
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
        recorder.restore(checkpoint["rows"], checkpoint.get("wall-seconds"))
        set_rng_state(checkpoint["rng"])
        run["first_round"] = checkpoint["round"] + 1
    every = cfg["checkpoint-every"]
    if every and "resume" not in strategy.rule.supports:
        log(DEBUG, "No checkpoints: server-rule %s keeps state that is not saved (%s).",
            cfg["server-rule"], strategy.rule.summary)
        every = 0

    def round_end(server_round: int, arrays: ArrayRecord) -> None:
        if every and (server_round % every == 0 or server_round == cfg["num-server-rounds"]):
            path = save_checkpoint(run_dir, server_round, cfg, strategy.state_dict(),
                                   recorder.rows, run_uid=run_uid,
                                   wall_seconds=recorder.wall_seconds())
            log(INFO, "Checkpoint of round %d: %s", server_round, path)

    return strategy.start(**run, round_end_fn=round_end)


def end_run(arrays: ArrayRecord, model: torch.nn.Module, recorder: RunRecorder,
            run_dir: Path) -> None:
    """final_model.pt (the loop's last arrays, else the initial model), the run marked complete
    by the recorder (results.json, the plots), and the done line."""
    final = arrays if len(arrays) else ArrayRecord(model.state_dict())
    write_torch_atomic(run_dir / "final_model.pt", final.to_torch_state_dict())
    summary = recorder.finish()
    log(INFO, "%s", done_line(summary, run_dir))


def done_line(summary: dict, run_dir: Path) -> str:
    """The one line that ends a run: final and EMA accuracy, the papers' numbers, cost, folder."""
    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"

    metric = summary.get("metric", "test-acc")  # fed-acc: no server test set
    at = ", ".join(f"{r}: {pct(v)}" for r, v in summary["acc-at-round"].items())
    to = ", ".join(f"{t}%: {v}" for t, v in summary["rounds-to-acc"].items())
    momentum = ""  # a server-momentum run: its step, and its momentum term against the update
    if None not in (summary.get("momentum-cos"), summary.get("momentum-ratio"),
                    summary.get("step-ratio")):
        momentum = (f" | server step {summary['step-ratio']:.2f}x the clients' update, momentum"
                    f" {summary['momentum-ratio']:.2f}x at cos {summary['momentum-cos']:+.2f}")
    return (f"Done: {summary['rounds']} rounds in {console.duration(summary['wall-seconds'])} | "
            f"{metric} {pct(summary.get('final-' + metric))}, "
            f"ema-acc {pct(summary['final-ema-acc'])}"
            f" | EMA at rounds {at} | rounds to {to}{momentum}"
            f" | {summary['bytes-total'] / 1e6:.1f} MB sent | {run_dir}")
