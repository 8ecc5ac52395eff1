"""Test-only ClientApp: the real one, with faults injected by partition and round.

tests/test_faults_simulation.py copies the app into a temporary folder next to this module and a
`fault_plan.json`, and points the copy's pyproject at `faulty_client_app:app`. The production app
has no fault hooks. Plan entries: {"partition": p or "any", "round": r or "all", "fault": f,
"seconds": s} with f = "raise" (the ClientApp raises), "hang" (sleeps `seconds` before
answering; with "until-recorded": r, only until the server has written round r to the run's
results.json, i.e. gave up on this reply: past round-timeout however slow the machine, and no
longer), or "nan" (trains, then sends a model with a NaN). An entry with "once": "<absolute
path>" applies to the first message only, the one that creates that file (every node on one
machine shares it: tests/test_field.py's one straggler).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client_app import app as real
from client_app.app import data_partition_of
from fileio.errors import UnusableFile
from fileio.reading import read_text_bounded

PLAN_FILE = Path(__file__).with_name("fault_plan.json")
PLAN = json.loads(PLAN_FILE.read_text()) if PLAN_FILE.exists() else []

app = ClientApp()


def fault_for(context: Context, msg: Message) -> dict | None:
    pid = data_partition_of(msg, context)[0]  # simulated nodes: the partition the server names
    rnd = int(msg.content["config"]["server-round"])
    fault = next((f for f in PLAN if f["partition"] in ("any", pid)
                  and f["round"] in ("all", rnd)), None)
    if fault and fault.get("once"):
        try:
            os.close(os.open(fault["once"], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return None  # its one time has been
    return fault


def recorded(results: Path, server_round: int) -> bool:
    """Whether the run's results.json (written whole after each round) has `server_round`."""
    try:
        rows = json.loads(read_text_bounded(results, 2**20))["rounds"]
        return any(row["round"] >= server_round for row in rows)
    except (OSError, ValueError, KeyError, TypeError, UnusableFile):
        return False


def hang(fault: dict, context: Context) -> None:
    deadline = time.monotonic() + float(fault["seconds"])
    until = fault.get("until-recorded")
    results = (Path(str(context.run_config["out-dir"])) / str(context.run_config["run-name"])
               / "results.json")
    while (left := deadline - time.monotonic()) > 0:
        if until is not None and recorded(results, int(until)):
            return
        time.sleep(min(0.5, left))


@app.train()
def train(msg: Message, context: Context) -> Message:
    fault = fault_for(context, msg)
    if fault and fault["fault"] == "raise":
        raise RuntimeError(f"injected failure (partition {data_partition_of(msg, context)[0]})")
    if fault and fault["fault"] == "hang":
        hang(fault, context)
    out = real.train(msg, context)
    if fault and fault["fault"] == "nan":
        state = out.content["arrays"].to_torch_state_dict()
        next(iter(state.values())).view(-1)[0] = float("nan")
        content = RecordDict({"arrays": ArrayRecord(state), "metrics": out.content["metrics"]})
        out = Message(content=content, reply_to=msg)
    return out


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return real.evaluate(msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    return real.query(msg, context)
