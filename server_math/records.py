"""What the methods declare about the records a reply carries, and the server screens against
(`reply_screen`): the layouts `PARAMETERS` and `FLOATS`, an extra record (`UpRecord`) and a
number read from the reply's metrics (`ReplyMetric`). Below both the methods and the round loop;
no torch, no Flower: the run config reads the methods' registry without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PARAMETERS = "parameters"  # one tensor per model parameter (named_parameters): its shape, dtype
FLOATS = "floats"  # one tensor per float tensor of the model's state_dict: its shape, dtype


@dataclass(frozen=True)
class UpRecord:
    """What an extra reply record holds (the values of a part's and its server rule's `up`):
    the server screens every reply's record against it before any rule reads it
    (server_math/reply_screen.py, docs/security.md#records): its keys, shapes and dtypes, finite
    values and, with `limit_norm`, its norm against the round's median norm of the same record
    (`record-norm-ratio`), measured from the point the server rule's `up_centers()` gives for it
    (0 when none). A reply whose record does not match is dropped whole.

    `holds`: PARAMETERS, FLOATS, or the layout itself, {key: (shape, dtype name)} (e.g.
    {"drift": ((1,), "float32")}).
    """

    holds: str | Mapping[str, tuple[tuple[int, ...], str]] = PARAMETERS
    limit_norm: bool = True


@dataclass(frozen=True)
class ReplyMetric:
    """A number a server rule reads from each reply's MetricRecord (its `up_metrics`): a reply
    without it, or with a value that is not a finite number in [low, high] (a whole number with
    `integer`), is dropped before the rule sees it."""

    low: float = float("-inf")
    high: float = float("inf")
    integer: bool = False


# The numbers this project's ClientApp reports, and their ranges: a value outside its range (or
# not a finite number) is left out of the round's metrics, the reply itself is kept
# (`reply_screen.screen_metrics`). A metric not named here must be a finite number.
REPORTED_METRICS = {
    "train-loss": ReplyMetric(0.0, 1e6),  # cross-entropy: >= 0
    "train-acc": ReplyMetric(0.0, 1.0),
    "local-steps": ReplyMetric(0.0, 1e9, integer=True),
    "train-seconds": ReplyMetric(0.0, 1e7),
    "eval-loss": ReplyMetric(0.0, 1e6),
    "eval-acc": ReplyMetric(0.0, 1.0),
}

