"""Experiment tracking: every round's numbers also go to TensorBoard and/or Weights & Biases.

Switched on by the run-config keys `tensorboard = true` (event files in <run folder>/tensorboard:
`tensorboard --logdir <out-dir>`) and `wandb = 'offline' | 'online'` (offline: a run folder in
<run folder>/wandb, uploaded later with `wandb sync <that folder>`; no network needed). Each needs
its optional extra (`pip install -e ".[tensorboard]"` / `".[wandb]"`); a missing one stops the run
before round 1 with an error saying so. The run folder's results.json stays the record: trackers
get a copy of each row (every numeric value, under its results.json name).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fileio.folders import folders_inside
from run_config import ConfigError


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's numbers (round excluded), finite ones only."""
    return {k: float(v) for k, v in row.items()
            if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}


class TensorBoardTracker:
    """Scalars per round into `<run folder>/tensorboard` (torch's SummaryWriter)."""

    def __init__(self, run_dir: Path, cfg: dict[str, Any]):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError("run config 'tensorboard' = true needs TensorBoard: pip install "
                              "-e \".[tensorboard]\" (or set tensorboard = false).") from None
        self.dir = folders_inside(run_dir, "tensorboard")  # (never a link: inside the run)
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self.writer.add_text("config", "\n".join(f"    {k} = {v!r}" for k, v in cfg.items()))

    def log(self, server_round: int, row: dict[str, Any]) -> None:
        for key, value in scalars(row).items():
            self.writer.add_scalar(key, value, server_round)
        self.writer.flush()  # readable while the run goes on

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """One W&B run per run folder, offline (files only) or online."""

    def __init__(self, run_dir: Path, cfg: dict[str, Any]):
        try:
            import wandb
        except ImportError:
            raise ConfigError(f"run config 'wandb' = '{cfg['wandb']}' needs Weights & Biases: "
                              "pip install -e \".[wandb]\" (or set wandb = 'off').") from None
        self.wandb = wandb
        folders_inside(run_dir, "wandb")  # (never a link: what W&B writes stays in the run)
        self.run = wandb.init(
            project=cfg["wandb-project"], name=Path(run_dir).name, dir=str(run_dir),
            mode=cfg["wandb"], config=dict(cfg), reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True,
                                    x_disable_machine_info=True))
        self.run.define_metric("*", step_metric="round")

    def log(self, server_round: int, row: dict[str, Any]) -> None:
        self.run.log({"round": server_round, **scalars(row)})

    def close(self) -> None:
        self.run.finish()


def build_trackers(cfg: dict[str, Any], run_dir: Path) -> list:
    """The trackers the config switches on (none by default)."""
    trackers: list = []
    if cfg.get("tensorboard"):
        trackers.append(TensorBoardTracker(run_dir, cfg))
    if cfg.get("wandb", "off") != "off":
        trackers.append(WandbTracker(run_dir, cfg))
    return trackers
