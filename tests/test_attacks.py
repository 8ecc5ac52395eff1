"""Poisoning attacks on a digits federation in-process (tests/attacks.py): under the defaults
and under every robust aggregator, no attack leaves theta non-finite or zero; the attacks the
defaults are meant to stop (scaling, NaN/Inf) leave theta bitwise as if the malicious nodes had
crashed, weight inflation is capped at the largest partition, repeated replies are dropped and
sybils' long updates clipped. The accuracy table of
docs/security.md comes from `python tests/attacks.py`."""

import math

import pytest
import torch

import attacks
from attacks import ATTACKS, SETUPS, run_attack

FAST = {"num-server-rounds": 3, "local-iterations": 3, "eval-every": 1}


def assert_alive(theta: dict):
    floats = [v for v in theta.values() if v.is_floating_point()]
    assert all(torch.isfinite(v).all() for v in floats), "theta is not finite"
    norm = math.sqrt(sum(float(v.double().square().sum()) for v in floats))
    assert 1.0 < norm < 1e4, f"theta norm {norm}: zeroed or blown up"


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """The malicious nodes fail instead of attacking: what dropping their replies must give."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1  # (module scope)
    return {s: run_attack("crash", s, out_dir=tmp_path_factory.mktemp(s), **FAST) for s in SETUPS}


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("attack", [a for a in ATTACKS if a != "clean"])
def test_defaults_survive_every_attack(attack, setup, crashed, tmp_path):
    res = run_attack(attack, setup, out_dir=tmp_path, **FAST)
    assert_alive(res["theta"])
    last = res["rounds"][-1]
    if attack in ("scale-1e3", "scale-1e12", "nan-inf", "examples-1e308x2", "sybil"):
        # the malicious replies are dropped (norm outliers, non-finite, repeated)
        assert last["train-dropped"] >= len(SETUPS[setup][1]), last
    if attack in ("scale-1e3", "scale-1e12", "nan-inf"):
        for k, v in crashed[setup]["theta"].items():
            assert torch.equal(res["theta"][k], v), k
    if attack.startswith("examples-"):
        assert last["train-capped-weight"] >= 1, last
    if attack == "sybil":  # phi - 3u: 3x an honest norm, scaled down to 2x the median
        assert last["train-clipped-norm"] == len(SETUPS[setup][1]), last


@pytest.mark.parametrize("setup", list(SETUPS))
def test_an_inflated_claim_weighs_as_the_largest_partition(setup, tmp_path):
    # num-examples-check: the server computed the split, so a claim of 1e18 examples weighs
    # exactly as a claim of the largest partition's size, no more (the same sign-flipped reply)
    size_max = attacks.largest_partition(setup, **FAST)
    inflated = run_attack("examples-1e18", setup, out_dir=tmp_path / "a", **FAST)
    at_max = run_attack(f"examples-{size_max}", setup, out_dir=tmp_path / "b", **FAST)
    for k, v in at_max["theta"].items():
        assert torch.equal(inflated["theta"][k], v), k


@pytest.mark.parametrize("aggregator", [a for a in attacks.AGGREGATORS if a != "defaults"])
@pytest.mark.parametrize("attack", ["examples-1e308x2", "sign-flip"])
def test_robust_aggregators_survive(aggregator, attack, tmp_path):
    res = run_attack(attack, "2-of-10", aggregator, out_dir=tmp_path, **FAST)
    assert_alive(res["theta"])


def test_without_the_defaults_the_attacks_do_break_the_model(tmp_path):
    # the same scaled reply with the influence limits off: the model is blown up (the test of
    # the defaults above can fail)
    res = run_attack("scale-1e12", "1-of-5", out_dir=tmp_path, **FAST,
                     **{"update-norm-ratio": 0.0, "update-clip-ratio": 0.0,
                        "num-examples-ratio": 0.0, "num-examples-check": False})
    floats = [v for v in res["theta"].values() if v.is_floating_point()]
    assert max(float(v.abs().max()) for v in floats) > 1e6
