"""Every key is checked for type, range and choice, and cross-key rules, before anything starts."""

import math

import pytest

from run_config import KEYS, ConfigError, resolve


@pytest.mark.parametrize("key", KEYS, ids=lambda k: k.name)
def test_every_key_refuses_a_wrong_type_and_out_of_range_values(key):
    wrong_type = 1.5 if key.kind in (str, bool, int) else "not-a-number"
    with pytest.raises(ConfigError, match=f"'{key.name}'"):
        resolve({key.name: wrong_type})
    with pytest.raises(ConfigError, match=f"'{key.name}'"):
        resolve({key.name: [1]})
    if key.kind is str and key.choices:
        with pytest.raises(ConfigError, match=f"'{key.name}'.*unknown choice"):
            resolve({key.name: "no-such-choice"})
    if key.low is not None:
        below = key.low if key.low_open else key.low - 1
        with pytest.raises(ConfigError, match=f"'{key.name}'.*out of range"):
            resolve({key.name: key.kind(below)})
    if key.high is not None:
        above = key.high if key.high_open else (
            key.high + 1 if key.kind is int else math.nextafter(key.high, math.inf))
        with pytest.raises(ConfigError, match=f"'{key.name}'.*out of range"):
            resolve({key.name: key.kind(above)})
    if key.kind is float:
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(ConfigError, match=f"'{key.name}'.*finite"):
                resolve({key.name: value})


def test_every_numeric_key_has_a_finite_range():
    """No numeric key takes values no run can use (lr=1e30, beta=1e308, rounds=1e30 passed the
    check and ended as runs that learned nothing): each has a finite upper bound."""
    unbounded = [k.name for k in KEYS if k.kind in (int, float)
                 and (k.low is None or k.high is None or not math.isfinite(k.high))]
    assert unbounded == []


@pytest.mark.parametrize("bad,words", [
    ({"model": "resnet18", "gn-groups": 3}, ["'gn-groups' = 3", "divide 64"]),
    ({"run-name": "a/b"}, ["'run-name'", "plain folder name"]),
    ({"run-name": ".."}, ["'run-name'", "plain folder name"]),
    ({"out-dir": "  "}, ["'out-dir' is empty"]),
    ({"method": "fedyogi", "resume": "latest"}, ["'resume'", "'fedyogi'"]),
    ({"min-train-clients": 0}, ["'min-train-clients'", "out of range"]),
    ({"max-update-norm": -1.0}, ["'max-update-norm'", "out of range"]),
    ({"checkpoint-every": -1}, ["'checkpoint-every'", "out of range"]),
])
def test_cross_key_and_new_key_errors(bad, words):
    with pytest.raises(ConfigError) as err:
        resolve(bad)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_reliability_keys_resolve():
    cfg = resolve({"min-train-clients": 3, "max-update-norm": 50, "checkpoint-every": 0,
                   "resume": "latest", "model": "resnet18", "gn-groups": 32})
    assert (cfg["min-train-clients"], cfg["max-update-norm"], cfg["checkpoint-every"],
            cfg["resume"]) == (3, 50.0, 0, "latest")
    assert isinstance(cfg["max-update-norm"], float)
