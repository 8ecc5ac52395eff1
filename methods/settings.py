"""What a run-config key is (`Key`): its name, type, default, range, help text and the topic of
docs/configuration.md it is listed under. The app's own keys are declared in
`run_config/schema.py`; a method's own knobs in its module, as the `settings` of its server rule
or client part (docs/extending.md#a-methods-knobs). `run_config.schema.KEYS` gathers both: the
same `Key` validates a run, makes the pyproject section and the docs.

Nothing here imports torch or Flower (the run config reads the keys without them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PRESET = "preset"  # value of a preset-controlled key that means "take it from `method`"


@dataclass(frozen=True)
class Key:
    name: str
    kind: type  # bool, int, float or str
    default: Any
    help: str
    group: str  # the pyproject section's comment above it: 'server', 'client', 'data', ...
    choices: tuple[str, ...] = ()  # allowed strings (for str keys: the only values)
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low < value instead of low <= value
    high_open: bool = False
    # May differ between a checkpoint's config and the config that resumes it (operational keys
    # that do not change the maths); every other key must be equal.
    resume_may_differ: bool = False
    # A keyword of the named strategies (strategies.named: FedACG(lam=...), Method(...)): the
    # method's and the baselines' knobs, the clients' learning rate, the screening of replies,
    # sampling and the clients' population; the other keys configure this project's app.
    strategy: bool = False
    # Allowed strings read from the methods registry when asked (methods may be registered after
    # this module is imported, e.g. by a test); added to `choices`.
    registry: Callable[[], tuple[str, ...]] | None = None
    # The topic of docs/configuration.md (a title of run_config/topics.py); '' = the one its
    # group belongs to there.
    topic: str = ""
    # A preset-controlled key (default 'preset'): its value when the method's preset does not
    # set it (plain FedAvg's, docs/algorithms.md#presets).
    base: Any = None

    def __post_init__(self) -> None:
        if self.base is not None and self.default != PRESET:
            raise ValueError(f"run-config key '{self.name}': only a key whose default is "
                             f"'preset' has a `base` (its value under plain FedAvg)")

    def options(self) -> tuple[str, ...]:
        return self.choices + (self.registry() if self.registry else ())

    @property
    def preset(self) -> bool:
        return PRESET in self.choices and self.kind is not str

    def allowed(self) -> str:
        """Human-readable description of the allowed values."""
        if self.kind is str:
            options = self.options()
            return " | ".join(f"'{c}'" for c in options) if options else "any string"
        parts = []
        if self.kind is bool:
            parts.append("true | false")
        else:
            lo = "-inf" if self.low is None else f"{self.low:g}"
            hi = "inf" if self.high is None else f"{self.high:g}"
            lb = "(" if self.low_open or self.low is None else "["
            rb = ")" if self.high_open or self.high is None else "]"
            parts.append(f"{self.kind.__name__} in {lb}{lo}, {hi}{rb}")
        parts += [f"'{c}'" for c in self.choices]
        return " | ".join(parts)
