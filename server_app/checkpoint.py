"""Checkpoints of a run, and resuming from one.

A checkpoint is one file, `<run folder>/checkpoint.pt`, replaced atomically (written to a
temporary file in the same folder, flushed to disk, then renamed over the old one), so a crash
while writing leaves the previous checkpoint intact. It holds plain tensors, numbers, strings,
lists, tuples and dicts only and is read with `torch.load(weights_only=True)`: loading a
checkpoint cannot run code. Its first line, `fedacg-gc checkpoint sha256=<hex>`, is the SHA-256
of the rest (the `torch.save` bytes): a damaged file (flipped bytes, cut short) is refused with
an error instead of resuming from something else. Contents:

    format          CHECKPOINT_FORMAT
    round           the last completed round
    config          the resolved run config of the run that wrote it
    strategy        the strategy's state_dict(): theta, m, the last broadcast phi, sampling RNG
    rng             the process RNGs: Python `random`, NumPy, torch (CPU)
    rows            the results.json rows so far (round 0 .. round)
    run-uid         the run's own id (results.json's 'run-uid')
    wall-seconds    the ServerApp's seconds up to this checkpoint, over every process of the
                    run (a resume goes on counting from it; absent in older checkpoints)

A checkpoint is read as a regular file only (never through a link), at most this machine's
memory in size, and every field is checked for type and range before use
(`checkpoint_problem`): a re-signed file whose round is -1, or whose rows go on past its
round, is refused (docs/security.md#files-from-outside).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import stat
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.common import log

from fileio.atomic import without_checksum, write_torch_checksummed
from fileio.folders import trusted_folder
from fileio.reading import memory_bytes, read_bounded
from reporting.results_file import read_results, rows_problem
from run_config import KEYS_BY_NAME, REMOVED_KEYS, ConfigError, run_differences

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = 1
CHECKSUM_PREFIX = b"fedacg-gc checkpoint sha256="  # + 64 hex digits + newline, then the payload


class CheckpointError(RuntimeError):
    """A checkpoint cannot be found, read, or used for this run."""


def rng_state() -> dict[str, Any]:
    """The process-wide RNG states (the strategy keeps its own sampling RNG in its state)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


def save_checkpoint(run_dir: Path, server_round: int, config: dict[str, Any],
                    strategy_state: dict[str, Any], rows: list[dict[str, Any]],
                    run_uid: str | None = None, wall_seconds: float | None = None) -> Path:
    """Write `run_dir/checkpoint.pt` atomically; returns its path. `run_uid`: the run's own id
    (results.json's 'run-uid'), which a resume holds against its folder's; `wall_seconds`: the
    run's ServerApp time so far, which a resume goes on from."""
    path = Path(run_dir) / CHECKPOINT_NAME
    payload = {"format": CHECKPOINT_FORMAT, "round": server_round, "config": dict(config),
               "strategy": strategy_state, "rng": rng_state(), "rows": [dict(r) for r in rows]}
    if run_uid is not None:
        payload["run-uid"] = run_uid
    if wall_seconds is not None:
        payload["wall-seconds"] = float(wall_seconds)
    write_torch_checksummed(path, CHECKSUM_PREFIX, payload)
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with weights_only loading; CheckpointError if it is not a usable one."""
    try:
        raw = read_bounded(Path(path), memory_bytes())
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err.strerror or err}") from None
    if not raw:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): it was not written to the "
                              "end. Resume from another checkpoint, or start afresh with "
                              "resume = ''.")
    if raw.startswith(CHECKSUM_PREFIX):
        raw = without_checksum(CHECKSUM_PREFIX, raw)
        if raw is None:
            raise CheckpointError(
                f"checkpoint {path} is damaged: its SHA-256 does not match the one it was "
                "written with (changed or truncated on disk). Resume from another checkpoint, "
                "or start afresh with resume = ''.")
    # else: a checkpoint written before checksums were added: read it as it is
    try:
        ckpt = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as err:
        first = (str(err).splitlines() or [""])[0]
        raise CheckpointError(
            f"cannot read checkpoint {path}: {type(err).__name__}: {first} "
            "(only files written by this app are accepted; they hold tensors and plain values, "
            "no pickled objects)"
        ) from None
    needed = {"format", "round", "config", "strategy", "rng", "rows"}
    if not isinstance(ckpt, dict) or not needed <= ckpt.keys():
        raise CheckpointError(f"{path} is not a checkpoint of this app (it lacks "
                              f"{sorted(needed - set(ckpt) if isinstance(ckpt, dict) else needed)}"
                              ")")
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {ckpt['format']}; this version "
                              f"reads format {CHECKPOINT_FORMAT}")
    if isinstance(ckpt["config"], dict):
        # a key removed since the checkpoint was written (run_config.schema.REMOVED_KEYS, e.g.
        # server-pass) is dropped: neither compared on resume nor written to the run's config
        ckpt["config"] = {k: v for k, v in ckpt["config"].items() if k not in REMOVED_KEYS}
    problem = checkpoint_problem(ckpt)
    if problem:
        raise CheckpointError(f"checkpoint {path} cannot be resumed from: {problem}. It was not "
                              "written by this app as it is; resume from another checkpoint, "
                              "or start afresh with resume = ''.")
    # which bytes were read (the resume's log line says it): the SHA-256 of the payload, the
    # one its first line states; not a field of the file
    ckpt["sha256"] = hashlib.sha256(raw).hexdigest()
    return ckpt


def checkpoint_problem(ckpt: dict[str, Any]) -> str | None:
    """What makes a loaded checkpoint's fields unusable (None: nothing): the round a whole
    number in [0, num-server-rounds' largest value], the rows those of rounds up to it (a
    resumed run adds rows after it), the config and strategy state mappings, the RNG states of
    the shapes `set_rng_state` takes, the run id a string, the wall seconds a finite float >= 0."""
    number, high = ckpt["round"], KEYS_BY_NAME["num-server-rounds"].high
    if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number <= high:
        return f"its round is {number!r}, not a whole number in [0, {high:g}]"
    if not isinstance(ckpt["config"], dict) or not isinstance(ckpt["strategy"], dict):
        return "its config or strategy state is not a mapping"
    problem = rows_problem(ckpt["rows"])
    if problem:
        return f"its rows: {problem}"
    if ckpt["rows"] and ckpt["rows"][-1]["round"] > number:  # (the run would repeat them)
        return f"its rows go on past its round {number}"
    if not isinstance(ckpt.get("run-uid", ""), str):
        return "its run id is not a string"
    wall = ckpt.get("wall-seconds", 0.0)
    if not isinstance(wall, float) or not 0.0 <= wall < float("inf"):
        return f"its wall-seconds is {wall!r}, not a finite number of seconds >= 0"
    return _rng_problem(ckpt["rng"])


def _rng_problem(rng: Any) -> str | None:
    """What `set_rng_state` could not take in `rng` (None: nothing)."""
    try:
        version, keys, gauss = rng["python"]
        kind, np_keys, pos, has_gauss, np_gauss = rng["numpy"]
        fine = (isinstance(version, int) and isinstance(keys, tuple) and len(keys) == 625
                and all(isinstance(k, int) for k in keys)
                and isinstance(rng["torch"], torch.Tensor) and rng["torch"].dtype == torch.uint8
                and kind == "MT19937" and isinstance(np_keys, torch.Tensor)
                and np_keys.shape == (624,) and isinstance(pos, int) and 0 <= pos <= 624
                and isinstance(has_gauss, int) and isinstance(np_gauss, float)
                and (gauss is None or isinstance(gauss, float)))
    except (TypeError, KeyError, ValueError):
        fine = False
    return None if fine else "its random-number states are not those of Python, NumPy and torch"


def find_checkpoint(resume: str, out_dir: str, run_name: str, method: str | None = None) -> Path:
    """The checkpoint file `resume` means: 'latest', a checkpoint file, or a run folder.

    'latest' with a run-name: that run's checkpoint (the name is a folder name, never a
    pattern). Without: the one unfinished run under out-dir that was started without a run-name
    (and with `method`, when given); refused when there are several, since which one is meant
    cannot be told (every other user's and run's folders may sit under the same out-dir).
    """
    if resume == "latest":
        base = Path(out_dir).expanduser().resolve()
        if run_name:
            path = base / run_name / CHECKPOINT_NAME
            if (base / run_name).is_symlink():  # the run would write where the link points
                raise CheckpointError(
                    f"resume = 'latest': {base / run_name} is a link, not run '{run_name}''s "
                    "folder; a run folder is never a link. Remove it, or give resume the path "
                    "of the run folder itself.")
            if not path.is_file():
                raise CheckpointError(
                    f"resume = 'latest': no checkpoint of run '{run_name}' ({path} does not "
                    "exist). Check run-name and out-dir, or start afresh with resume = ''.")
            return path
        found = _unnamed_unfinished_checkpoints(base, method)
        if not found:
            raise CheckpointError(
                f"resume = 'latest': no unfinished run without a run-name has a checkpoint under "
                f"out-dir {base}. Give run-name, or the path of a run folder or checkpoint, or "
                "start afresh with resume = ''.")
        if len(found) > 1:
            names = ", ".join(p.parent.name for p in found[-5:])
            raise CheckpointError(
                f"resume = 'latest' is ambiguous: {len(found)} unfinished runs without a "
                f"run-name have checkpoints under {base} (newest: {names}). Set resume to the "
                "run folder to continue, or give runs a run-name.")
        return found[-1]
    path = Path(resume).expanduser().resolve()
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise CheckpointError(f"resume = '{resume}': no checkpoint file at {path}")
    return path


def _unnamed_unfinished_checkpoints(base: Path, method: str | None) -> list[Path]:
    """The checkpoints of the run folders under `base` made without a run-name (their config
    says so), not complete, of `method`; oldest first. Other users' and runs' folders share
    out-dir, so a folder whose files cannot be read (a link, a named pipe, a results.json that
    is not this app's) is passed over with a warning: it never stops this run."""
    found, passed = [], []
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            mode = os.lstat(Path(entry.path) / CHECKPOINT_NAME)
        except OSError:
            continue  # (no checkpoint: nothing to resume there)
        try:
            if not stat.S_ISREG(mode.st_mode):
                raise OSError(f"its {CHECKPOINT_NAME} is not a regular file")
            trusted_folder(Path(entry.path), make=False,  # (another user's: not this run's)
                           warn=lambda text: log(WARNING, "%s", text))
            results = read_results(Path(entry.path))
        except OSError as err:
            passed.append(f"{entry.name} ({' '.join(str(err).split())[:200]})")
            continue
        config = results["config"]
        if results.get("summary", {}).get("complete") or config.get("run-name"):
            continue
        if method is None or config.get("method") == method:
            found.append((mode.st_mtime, Path(entry.path) / CHECKPOINT_NAME))
    if passed:
        log(WARNING, "resume = 'latest' passed over %d folder(s) under %s whose files cannot be "
            "read: %s", len(passed), base, "; ".join(passed[:5]))
    return [path for _, path in sorted(found)]


def check_resumable(saved: dict[str, Any], cfg: dict[str, Any], done_round: int) -> None:
    """ConfigError if `cfg` cannot continue the run whose config is `saved`.

    Keys marked `resume_may_differ` in the schema (rounds, timeouts, output, device) may change;
    every other key changes the maths or the sampling and must be equal.
    """
    # (a key newer than the checkpoint, e.g. `server-rule`: its value under the saved method)
    conflicts = run_differences(saved, cfg, "checkpoint")
    if conflicts:
        raise ConfigError(
            "run config conflicts with the checkpoint's, so the resumed run would not be the "
            f"same run: {'; '.join(conflicts)}. Use the checkpoint's values (its config.json) or "
            "start afresh with resume = ''."
        )
    if cfg["num-server-rounds"] <= done_round:
        raise ConfigError(
            f"run config 'num-server-rounds' = {cfg['num-server-rounds']}: the checkpoint is at "
            f"round {done_round} already; set num-server-rounds above {done_round} to continue."
        )


def check_owner(checkpoint: dict[str, Any], run_dir: Path, folder: dict[str, Any]) -> None:
    """CheckpointError unless the checkpoint is the run of the folder it lies in: its run-name
    (when it has one) is the folder's name and the folder's config.json's, and its run id is the
    one the folder's results.json holds (`folder`: that results.json, {} when there is none).
    A checkpoint copied into another run's folder would take that run over (its config.json,
    its history) otherwise."""
    saved = checkpoint.get("config", {}).get("run-name", "")
    named = folder.get("config", {}).get("run-name", "") if isinstance(
        folder.get("config"), dict) else ""
    uid, folder_uid = checkpoint.get("run-uid"), folder.get("run-uid")
    why = None
    if saved and saved != run_dir.name:
        why = f"it is run '{saved}''s, and the folder is '{run_dir.name}'"
    elif named and saved != named:
        why = f"it is run {saved!r}'s, and the folder's results.json is run {named!r}'s"
    elif uid and folder_uid and uid != folder_uid:
        why = f"its run id {uid} is not the folder's ({folder_uid}): another run's checkpoint"
    if why:
        raise CheckpointError(
            f"checkpoint {run_dir / CHECKPOINT_NAME} does not belong to the run in {run_dir}: "
            f"{why}. Resume a run from its own folder's checkpoint (a run's folder moved or "
            "copied keeps its name); nothing was changed.")


def resumed_run_name(cfg: dict[str, Any], saved: dict[str, Any], run_dir: Path) -> str:
    """The run-name a resumed run keeps. A run-name given with `resume` must be the run's own
    (its checkpoint's, or its folder's name): config.json and results.json would name another
    run otherwise. An empty one takes the checkpoint's."""
    given, own = cfg["run-name"], saved.get("run-name", "")
    if given and given not in (own, run_dir.name):
        raise ConfigError(
            f"run config 'run-name' = '{given}': resume = '{cfg['resume']}' continues the run in "
            f"{run_dir} (run-name {own!r}), which goes on in its own folder under its own name. "
            f"Drop run-name (or give run-name = '{run_dir.name}'), or drop resume to start a "
            "new run.")
    return given or own
