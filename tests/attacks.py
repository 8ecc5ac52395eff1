"""Poisoning attacks on an in-process digits federation (FakeGrid + the real ServerApp and
ClientApp), for tests/test_attacks.py and the table of docs/security.md:

    python tests/attacks.py            # prints the markdown tables (all aggregators, both set-ups)
    python tests/attacks.py 2-of-10    # one set-up

Malicious nodes are the last ones (1 of 5: node 4; 2 of 10: nodes 8 and 9). Each attack changes
what they reply to train instructions; `u` is the update an honest node would send (w - phi).
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
from flwr.app import Context, Message, RecordDict

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from fakegrid import FakeGrid, client_app_handler  # noqa: E402
from strategy_helpers import reply  # noqa: E402

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
        phi = msg.content["arrays"].to_torch_state_dict()
        w = out.content["arrays"].to_torch_state_dict()
        n = out.content["metrics"]["num-examples"]
        f = {k: v.is_floating_point() for k, v in phi.items()}
        u = {k: (w[k] - phi[k]) if f[k] else None for k in phi}

        def model(scale):
            return {k: phi[k] + scale * u[k] if f[k] else w[k] for k in phi}

        if attack == "sign-flip":
            return reply(model(-1.0), n)
        if attack.startswith("scale-"):
            return reply(model(float(attack.split("-")[1])), n)
        if attack == "examples-1e308x2":
            return reply(model(-1.0), 1e308)
        if attack.startswith("examples-"):  # examples-<claim>: 1e18 in the table
            return reply(model(-1.0), float(attack.split("-")[1]))
        if attack == "nan-inf":
            bad_w = model(1.0)
            keys = [k for k in phi if f[k]]
            bad_w[keys[0]].view(-1)[0] = float("nan")
            bad_w[keys[-1]].view(-1)[-1] = float("inf")
            return reply(bad_w, n)
        if attack == "sybil":
            rnd = msg.content["config"]["server-round"]
            if rnd not in shared:
                shared[rnd] = model(-3.0)
            return reply(shared[rnd], n)
        raise ValueError(attack)

    return handler


def largest_partition(setup: str, **extra) -> int:
    """The largest client partition of a set-up's split: what the server knows (its summary)."""
    from feddata.summary import partition_summary
    from run_config import resolve

    return partition_summary(resolve({**BASE, **extra}), SETUPS[setup][0])["size-max"]


def run_attack(attack: str, setup: str, aggregator: str = "defaults", out_dir: Path | None = None,
               **extra) -> dict:
    """One run; returns {'acc': final test accuracy, 'theta': final model, 'rounds': rows}."""
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
    if out_dir is None:  # a folder of our own: nothing in it is needed any more
        shutil.rmtree(folder, ignore_errors=True)
    return {"acc": results["summary"]["final-test-acc"], "theta": theta,
            "rounds": results["rounds"]}


def table(echo: bool = False, setups=tuple(SETUPS)) -> str:
    lines = []
    for setup in setups:
        lines += [f"**{setup} clients malicious** (final test accuracy, digits, fedacg, "
                  f"{BASE['num-server-rounds']} rounds)", "",
                  "| attack | " + " | ".join(AGGREGATORS) + " |",
                  "| --- " * (len(AGGREGATORS) + 1) + "|"]
        if echo:
            print("\n".join(lines[-4:]), flush=True)
        for attack in ATTACKS:
            cells = []
            for agg in AGGREGATORS:
                res = run_attack(attack, setup, agg)
                cells.append(f"{res['acc']:.3f}")
            lines.append(f"| {attack} | " + " | ".join(cells) + " |")
            if echo:
                print(lines[-1], flush=True)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)
    t = time.time()
    table(echo=True, setups=sys.argv[1:] or tuple(SETUPS))  # e.g. python tests/attacks.py 1-of-5
    print(f"({time.time() - t:.0f} s)")
