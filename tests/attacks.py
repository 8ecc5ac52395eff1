"""Poisoning attacks on an in-process digits federation (FakeGrid + the real ServerApp and
ClientApp), for tests/test_attacks.py and the tables of docs/security.md:

    python tests/attacks.py            # prints the markdown tables (all aggregators, both set-ups)
    python tests/attacks.py 2-of-10    # one set-up
    python tests/attacks.py --stateful [1-of-5|2-of-10]   # the stateful methods' tables

Malicious nodes are the last ones (1 of 5: node 4; 2 of 10: nodes 8 and 9). Each attack changes
what they reply to train instructions; `u` is the update an honest node would send (w - phi).
The rest of the reply (its metrics, a method's extra records) is the honest one unless the
attack changes it: the record attacks change every extra record the reply carries (SCAFFOLD's
`scaffold-dc`, FedDC's `feddc-dg`), `steps-tiny` the `local-steps` metric FedCM's server reads.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, Message, RecordDict

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from fakegrid import FakeGrid, client_app_handler  # noqa: E402

ATTACKS = {
    "clean": "no attack",
    "sign-flip": "sends phi - u",
    "scale-1e3": "sends phi + 1e3 u",
    "scale-1e12": "sends phi + 1e12 u",
    "examples-1e18": "sends phi - u claiming num-examples = 1e18",
    "examples-1e308x2": "sends phi - u claiming num-examples = 1e308, twice (its reply duplicated)",
    "nan-inf": "sends NaN in one tensor and Inf in another",
    "label-flip": "trains honestly on labels y -> 9 - y",
    "sybil": "the malicious nodes send one identical reply phi - 3 u, each duplicated",
}
RECORD_ATTACKS = {  # on a method's extra reply records (the four cases, and a scaling)
    "record-nan": "every value of its extra records NaN",
    "record-1e30": "every value of its extra records 1e30",
    "record-1e3": "its extra records scaled by 1e3",
    "record-shape": "one tensor of each extra record of the wrong shape",
    "record-key": "one key missing from each extra record",
    "steps-tiny": "claims local-steps = 1e-300 (FedCM divides by it)",
}
# The stateful and extra-payload methods, each under its preset (docs/security.md)
STATEFUL = ("scaffold", "feddyn", "feddc", "fedcm", "fedvarp", "moon")
SETUPS = {"1-of-5": (5, [4]), "2-of-10": (10, [8, 9])}
AGGREGATORS = {  # column -> run-config overrides (f as large as each rule allows here)
    "defaults": {},
    "median": {"robust-aggregator": "median"},
    "trimmed-mean": {"robust-aggregator": "trimmed-mean", "trim-fraction": 0.2},
    "krum": {"robust-aggregator": "krum", "num-malicious": "f"},
    "multikrum": {"robust-aggregator": "multikrum", "num-malicious": "f"},
    "bulyan": {"robust-aggregator": "bulyan", "num-malicious": "f-bulyan"},
}
BASE = {"method": "fedacg", "num-server-rounds": 6, "fraction-train": 1.0, "local-iterations": 5,
        "eval-every": 6, "checkpoint-every": 0, "target-accs": "90"}


class DuplicatingGrid(FakeGrid):
    """Replies of the nodes in `twice` arrive two times (a node or sybil repeating itself)."""

    twice: set[int] = set()

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        extra = [m for m in replies if m.metadata.message_type == "train"
                 and self.node_ids.index(m.metadata.src_node_id) in self.twice]
        return replies + extra


def _flipped_labels(real, i, msg):
    import client_app.app as capp

    original = capp.load_prepared_partition

    def flipped(*args, **kwargs):
        part = original(*args, **kwargs)
        return dataclasses.replace(part, train_y=part.num_classes - 1 - part.train_y)

    capp.load_prepared_partition = flipped
    try:
        return real(i, msg)
    finally:
        capp.load_prepared_partition = original


def replaced(out: Message, model: dict, n: float) -> Message:
    """The honest reply `out` with its model and num-examples replaced (its other metrics and
    records kept)."""
    out.content["arrays"] = ArrayRecord({k: v.clone() for k, v in model.items()})
    out.content["metrics"]["num-examples"] = n
    return out


def bad_record(attack: str, record: ArrayRecord) -> ArrayRecord:
    """One of RECORD_ATTACKS on one extra record."""
    state = {k: v.clone() for k, v in record.to_torch_state_dict().items()}
    first, last = next(iter(state)), list(state)[-1]
    if attack == "record-nan":
        state = {k: torch.full_like(v, float("nan")) for k, v in state.items()}
    elif attack == "record-1e30":
        state = {k: torch.full_like(v, 1e30) for k, v in state.items()}
    elif attack == "record-1e3":
        state = {k: v * 1e3 for k, v in state.items()}
    elif attack == "record-shape":
        t = state[first]
        state[first] = t.reshape(-1) if t.dim() > 1 else torch.cat([t, t[:1]])
    elif attack == "record-key":
        del state[last]
    return ArrayRecord(state)


def attack_handler(attack: str, real, bad: list[int]):
    shared = {}

    def handler(i, msg: Message):
        if msg.metadata.message_type != "train" or i not in bad or attack == "clean":
            return real(i, msg)
        if attack == "label-flip":
            return _flipped_labels(real, i, msg)
        if attack == "crash":  # not an attack: the malicious nodes fail (tests compare with it)
            raise RuntimeError("malicious node crashed")
        out = real(i, msg)
        if attack == "steps-tiny":
            out.content["metrics"]["local-steps"] = 1e-300
            return out
        if attack.startswith("record-"):
            for name in [k for k in out.content.array_records if k != "arrays"]:
                out.content[name] = bad_record(attack, out.content[name])
            return out
        phi = msg.content["arrays"].to_torch_state_dict()
        w = out.content["arrays"].to_torch_state_dict()
        n = out.content["metrics"]["num-examples"]
        f = {k: v.is_floating_point() for k, v in phi.items()}
        u = {k: (w[k] - phi[k]) if f[k] else None for k in phi}

        def model(scale):
            return {k: phi[k] + scale * u[k] if f[k] else w[k] for k in phi}

        if attack == "sign-flip":
            return replaced(out, model(-1.0), n)
        if attack.startswith("scale-"):
            return replaced(out, model(float(attack.split("-")[1])), n)
        if attack == "examples-1e308x2":
            return replaced(out, model(-1.0), 1e308)
        if attack.startswith("examples-"):  # examples-<claim>: 1e18 in the table
            return replaced(out, model(-1.0), float(attack.split("-")[1]))
        if attack == "nan-inf":
            bad_w = model(1.0)
            keys = [k for k in phi if f[k]]
            bad_w[keys[0]].view(-1)[0] = float("nan")
            bad_w[keys[-1]].view(-1)[-1] = float("inf")
            return replaced(out, bad_w, n)
        if attack == "sybil":
            rnd = msg.content["config"]["server-round"]
            if rnd not in shared:
                shared[rnd] = model(-3.0)
            return replaced(out, shared[rnd], n)
        raise ValueError(attack)

    return handler


def largest_partition(setup: str, **extra) -> int:
    """The largest client partition of a set-up's split: what the server knows (its summary)."""
    from feddata import DataSettings
    from feddata.summary import partition_summary
    from run_config import resolve

    data = DataSettings.from_config(resolve({**BASE, **extra}))
    return partition_summary(data, SETUPS[setup][0])["size-max"]


def run_attack(attack: str, setup: str, aggregator: str = "defaults", out_dir: Path | None = None,
               state: bool = False, **extra) -> dict:
    """One run; returns {'acc': final test accuracy, 'theta': final model, 'rounds': rows} and,
    with `state`, 'state': the server rule's state at the end (from the run's checkpoint)."""
    import server_app.app as server
    from flwr.supercore.task_identity import TaskIdentity

    # Message() outside Flower's runtime needs a task identity (the tests' conftest sets the same)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    num_nodes, bad = SETUPS[setup]
    f = len(bad)
    overrides = {k: (f if v == "f" else max(0, min(f, (num_nodes - 3) // 4)) if v == "f-bulyan"
                     else v) for k, v in AGGREGATORS[aggregator].items()}
    folder = Path(out_dir or tempfile.mkdtemp(prefix="attack-"))
    rc = {**BASE, "out-dir": str(folder), "run-name": "run", **overrides, **extra}
    if state:  # a checkpoint after the last round holds the server state
        rc["checkpoint-every"] = rc["num-server-rounds"]
    handler = attack_handler(attack, client_app_handler(rc, num_nodes), bad)
    grid = DuplicatingGrid(num_nodes, handler)
    grid.twice = set(bad) if attack in ("examples-1e308x2", "sybil") else set()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: threads only contend on a shared machine
    try:
        server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                  run_config=rc))
    finally:
        torch.set_num_threads(threads)
    results = json.loads((folder / "run" / "results.json").read_text())
    theta = torch.load(folder / "run" / "final_model.pt", weights_only=True)
    out = {"acc": results["summary"]["final-test-acc"], "theta": theta,
           "rounds": results["rounds"]}
    if state:
        from server_app.checkpoint import load_checkpoint

        out["state"] = load_checkpoint(folder / "run" / "checkpoint.pt")["strategy"]
    if out_dir is None:  # a folder of our own: nothing in it is needed any more
        shutil.rmtree(folder, ignore_errors=True)
    return out


def tensors_of(state, path: str = "") -> dict:
    """Every tensor in a (nested) server state: path -> tensor."""
    if isinstance(state, torch.Tensor):
        return {path: state}
    items = state.items() if isinstance(state, dict) else \
        enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {k: v for key, value in items for k, v in tensors_of(value, f"{path}/{key}").items()}


def non_finite(state) -> list[str]:
    """The tensors of a server state that hold NaN or Inf."""
    return [k for k, v in tensors_of(state).items()
            if v.is_floating_point() and not torch.isfinite(v).all()]


def has_records(method: str) -> bool:
    """Whether the method's server rule reads extra reply records (its `up`)."""
    import methods

    return bool(methods.SERVER_RULES[methods.METHODS[method].server_rule].up)


def applies(attack: str, method: str) -> bool:
    """Whether an attack changes anything for a method: record attacks need extra records,
    `steps-tiny` a server that reads local-steps (FedCM)."""
    if attack.startswith("record-"):
        return has_records(method)
    return attack != "steps-tiny" or method == "fedcm"


def grid(title: str, rows, columns, cell, echo: bool = False, setups=tuple(SETUPS)) -> str:
    """A markdown table per set-up: one row per attack, `cell(attack, setup, column)` each."""
    lines = []
    for setup in setups:
        lines += [f"**{setup} clients malicious** ({title}, {BASE['num-server-rounds']} rounds)",
                  "", "| attack | " + " | ".join(columns) + " |",
                  "| --- " * (len(columns) + 1) + "|"]
        if echo:
            print("\n".join(lines[-4:]), flush=True)
        for attack in rows:
            cells = [cell(attack, setup, column) for column in columns]
            lines.append(f"| {attack} | " + " | ".join(cells) + " |")
            if echo:
                print(lines[-1], flush=True)
        lines.append("")
    return "\n".join(lines)


def table(echo: bool = False, setups=tuple(SETUPS)) -> str:
    """Final test accuracy of fedacg under each attack and each aggregator."""
    return grid("final test accuracy, digits, fedacg", ATTACKS, AGGREGATORS,
                lambda attack, setup, agg: f"{run_attack(attack, setup, agg)['acc']:.3f}",
                echo, setups)


def stateful_cell(attack: str, setup: str, method: str) -> str:
    if not applies(attack, method):
        return "-"
    res = run_attack(attack, setup, state=True, method=method)
    bad = non_finite(res["state"]) + non_finite(res["theta"])
    return f"{res['acc']:.3f}" + (" NON-FINITE" if bad else "")


def stateful_table(echo: bool = False, setups=tuple(SETUPS)) -> str:
    """Final test accuracy of each stateful method (its preset) under each attack, default
    limits; a cell is marked `NON-FINITE` when any tensor of the server's state is (none is);
    `-` where the attack changes nothing for the method. Row `crash`: the malicious nodes fail."""
    return grid("final test accuracy, digits, each method's preset, default limits",
                ["crash", *ATTACKS, *RECORD_ATTACKS], STATEFUL, stateful_cell, echo, setups)


if __name__ == "__main__":
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)
    t = time.time()
    args = sys.argv[1:]
    if args[:1] == ["--stateful"]:  # python tests/attacks.py --stateful [1-of-5]
        stateful_table(echo=True, setups=args[1:] or tuple(SETUPS))
    else:  # e.g. python tests/attacks.py 1-of-5
        table(echo=True, setups=args or tuple(SETUPS))
    print(f"({time.time() - t:.0f} s)")
