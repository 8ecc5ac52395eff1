"""What a run-config key is (`Key`): its name, type, default, range, help text and the topic of
docs/configuration.md it is listed under; and what a part receives of the run config, its
settings object (`Settings`, made from its `Key`s and the app keys it `Uses`). The app's own
keys are declared in `run_config/schema.py`; a method's own knobs in its module, as the
`settings` of its server rule or client part (docs/extending.md#a-methods-knobs).
`run_config.schema.KEYS` gathers both: the same `Key` validates a run, makes the pyproject
section and the docs, and types the part's settings object.

Nothing here imports torch or Flower (the run config reads the keys without them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, make_dataclass
from dataclasses import field as dataclass_field
from typing import Any, ClassVar

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


class SettingError(ValueError):
    """A part refuses a setting it was built with (e.g. FedCM with server momentum), or its
    settings object cannot be built (a value of the wrong type): the message names the key and
    the fix. The run config's own checks raise `run_config.ConfigError`."""


class MissingSetting(SettingError, KeyError):
    """A part's settings built from a config that lacks a key it reads: a KeyError of that key,
    as the config would raise (`args == (key,)`), whose message says which part reads it and
    how to build its settings."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(key)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Uses:
    """A run-config key a part reads that no part declares, an app key of run_config/schema.py
    (e.g. 'lr', 'aggregation'), as a field of the part's settings (`Part.Settings`): its type
    and its default, those of the schema's key (a preset-controlled key's `base`;
    tests/test_settings_objects.py holds them to it). A type that admits None (`int | None`)
    marks a key that a named strategy's settings (`run_config.resolve_strategy`,
    `resolve_client`) do not hold, its clients' loop and folders being its user's: the field is
    None where the config lacks the key (`Settings.from_config`)."""

    name: str
    kind: Any  # the field's type: bool, int, float, str, or a union such as `int | None`
    default: Any
    # Whether it does something only through the parts that read it (e.g. 'robust-aggregator'):
    # a run that sets it away from its default and uses none of them is refused, as it is for a
    # part's own knobs. False for the keys the app reads too ('lr', 'seed', 'local-epochs').
    knob: bool = False


class Settings:
    """The base of a part's settings object (`Part.Settings`): a frozen dataclass with one field
    per run-config key the part reads, '-' written '_' (`beta`, `fedcm_alpha`, `lr`), made from
    its `Key`s and `Uses`. The registry and the strategy assembly build it once from the
    resolved run config (`from_config`), where a missing key is named; a test or an app of one's
    own builds it by keyword, `ProximalTerm.Settings(beta=0.1)`, with the key's default for
    every field not given (a preset-controlled key's: its `base`, plain FedAvg's)."""

    part: ClassVar[type] = object  # the part (server rule, client part, codec) it belongs to

    def __post_init__(self) -> None:
        for f in fields(self):
            value, kind = getattr(self, f.name), f.type
            if kind in (float, float | str) and type(value) is int:
                object.__setattr__(self, f.name, float(value))  # 1 for 1.0, as the config does
            elif not isinstance(value, kind) or (isinstance(value, bool) and bool not in
                                                 getattr(kind, "__args__", (kind,))):
                raise SettingError(
                    f"{self.part.__name__}: setting '{f.metadata['key']}' = {value!r}: expected "
                    f"{getattr(kind, '__name__', kind)}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """The settings from a resolved run config (or a named strategy's, `run_config.
        resolve_strategy` / `resolve_client`): one value per field, the key's; None for a key
        the config lacks whose field admits None (`Uses`: a key a named strategy does not
        know); any other key the config lacks is named (`MissingSetting`)."""
        values, missing = {}, []
        for f in fields(cls):
            key = f.metadata["key"]
            if key in config:
                values[f.name] = config[key]
            elif isinstance(None, f.type):
                values[f.name] = None
            else:
                missing.append(key)
        if missing:
            raise MissingSetting(missing[0], (
                f"{cls.part.__name__} reads the run-config key(s) "
                f"{', '.join(repr(k) for k in missing)}, which its config lacks: build its "
                "settings from a resolved run config (run_config.resolve), or by keyword "
                f"({cls.part.__name__}.Settings({_field(missing[0])}=...))"))
        return cls(**values)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The run-config keys of its fields, in field order."""
        return tuple(f.metadata["key"] for f in fields(cls))

    def as_config(self) -> dict[str, Any]:
        """run-config key -> value, for the log and for comparing settings."""
        return {f.metadata["key"]: getattr(self, f.name) for f in fields(self)}


def _field(key: str) -> str:
    """A run-config key as a field (and keyword) name: '-' written '_'."""
    return key.replace("-", "_")


def key_type(key: Key) -> Any:
    """The type of a `Key`'s value in a settings object: its kind, or its kind or str where it
    also takes strings other than 'preset' ('gc-borderline': a fraction or 'classifier')."""
    if key.kind is not str and set(key.choices) - {PRESET}:
        return key.kind | str
    return key.kind


def key_default(key: Key) -> Any:
    """A `Key`'s default in a settings object: plain FedAvg's (`base`) for a preset-controlled
    key, else its default."""
    return key.base if key.default == PRESET else key.default


def settings_class(part: type, declared: Sequence[Key | Uses], base: type[Settings]
                   ) -> type[Settings]:
    """The frozen dataclass of `part`'s settings: `base`'s fields (its base class's settings,
    or none) and one per declared key, typed and defaulted by it."""
    specs = []
    for entry in declared:
        if isinstance(entry, Key):
            kind, default, knob = key_type(entry), key_default(entry), True
        else:
            kind, default, knob = entry.kind, entry.default, entry.knob
        meta = {"key": entry.name, "knob": knob, "declared": entry}
        specs.append((_field(entry.name), kind, dataclass_field(default=default, metadata=meta)))
    made = make_dataclass(f"{part.__name__}Settings", specs, bases=(base,), frozen=True,
                          kw_only=True,
                          namespace={"part": part, "__module__": part.__module__,
                                     "__doc__": f"The settings of {part.__name__} "
                                     "(methods.settings.Settings)."})
    made.__qualname__ = f"{part.__qualname__}.Settings"
    return made
