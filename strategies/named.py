"""The methods as Flower strategies, for a ServerApp of your own (docs/own-app.md).

    strategy = FedACG(fraction_train=0.1, lam=0.85, beta=0.01)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                            train_config=ConfigRecord({"lr": 0.01}), num_rounds=100)

Each class is the round loop (`round_loop.MethodStrategy`) around its method's server rule
(`methods`), built like Flower's own strategies and from `initial_arrays` alone, for any
PyTorch model: no run config, no model of this project. The clients' share of the method
(FedACG's proximal term, GC-Fed's local GC, ...) travels in every train instruction's config as
`method.*` keys, read in the client's own training loop by `client_app.own_app.LocalMethod`.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Sequence
from logging import INFO
from typing import Any, ClassVar

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.common import log

import methods
from methods.registry import parse_objective
from models.centralization import ModelLayout
from run_config import ConfigError, coerce, resolve_strategy
from run_config.schema import KEYS, KEYS_BY_NAME

from .assembly import make_rule, rule_settings, strategy_arguments
from .round_loop import MethodStrategy

PREFIX = methods.parts.CONFIG_PREFIX  # the train config's keys that carry the method
TRAIN_CONFIG_LR = "train_config's 'lr'"  # the clients' learning rate, where lr=... is not given
# The run-config keys a strategy takes as keyword arguments ('-' written '_'): those the schema
# marks `strategy` (the method's and the baselines' knobs, the clients' learning rate, the
# screening of replies, sampling, the population); the rest configure this project's app.
def strategy_settings() -> frozenset[str]:
    """The keys a named strategy takes as keywords: the schema's strategy keys, read when asked
    (a method registered later, e.g. from a file, brings its knobs)."""
    return frozenset(k.name for k in KEYS if k.strategy)


# Flower FedAvgM's keywords, where they mean this project's settings: its momentum vector
# v = server_momentum * v + d and step theta += server_learning_rate * v are the momentum rule's
# m = lam * m + eta * d, theta += m with m = eta * v (docs/algorithms.md#server-round).
FLOWER_ALIASES = {"server_momentum": "lam", "server_learning_rate": "eta"}


def _kw(key: str) -> str:
    """A run-config key as a keyword argument."""
    return key.replace("-", "_")


def _check_classifier(name: str, classifier: Any) -> None:
    """Refuse at construction what `ModelLayout` could not read as a classifier."""
    if classifier is None:
        return
    ok = (isinstance(classifier, str) and classifier != "") or (
        isinstance(classifier, Sequence) and not isinstance(classifier, str) and classifier
        and all(isinstance(c, str) and c for c in classifier))
    if not ok:
        raise ValueError(f"{name}: classifier={classifier!r}: give the classifier's parameter or "
                         "module names, a non-empty str or sequence of str (e.g. 'fc' or "
                         "['fc.weight', 'fc.bias']), or None to find it from initial_arrays")


def _own_names(name: str, cls: type, given: dict[str, Any], flower: dict[str, Any]
               ) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings (keyword form) from what the user passed: a named strategy's knobs under
    their setting's name, Flower's aliases resolved, the class's defaults for knobs not given.
    Also: setting key (run-config form) -> the name the user knows it by, for errors."""
    settings: dict[str, Any] = {}
    by: dict[str, str] = {}  # setting (keyword form) -> the user's name for it
    passed = {**given, **{k: v for k, v in flower.items() if v is not None}}
    for user, value in passed.items():
        setting = FLOWER_ALIASES.get(user) or cls.RENAMED.get(user, user)
        if setting in by:
            raise ValueError(f"{name}: {by[setting]}={settings[setting]!r} and {user}={value!r} "
                             f"set the same knob ({setting}): give one of them")
        settings[setting], by[setting] = value, user
    defaults = cls.knob_defaults()
    for knob in cls.KNOBS:
        setting = cls.RENAMED.get(knob, knob)
        if setting not in settings:
            settings[setting], by[setting] = defaults[knob], knob
    names = {setting.replace("_", "-"): user for setting, user in by.items()}
    return settings, names


class Method(MethodStrategy):
    """Any method of this project as a Flower strategy, by name: `Method("scaffold")`,
    `Method("fedprox", beta=0.1)`, `Method("fedacg", local_gc="all")`
    (the methods: docs/baselines.md, `python -m pages --methods`).

    Parameters
    ----------
    method : str
        The method's name, e.g. 'fedacg', 'gcfed', 'fedacg+gcfed', 'scaffold', 'moon'.
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes,
    min_available_nodes, weighted_by_key, arrayrecord_key, configrecord_key,
    train_metrics_aggr_fn, evaluate_metrics_aggr_fn
        As for Flower's `FedAvg`, with the same defaults.
    classifier : str | Sequence[str] | None (default: None)
        The model's classifier, for GC-Fed's local GC (only the layers before it, the
        'features', get it): parameter names or module names (e.g. 'fc', or 'classifier' for
        every parameter under it), which must be the model's last parameters. None: found from
        `initial_arrays`' names, as the last weight (2-D or more) and its bias; a model that
        ends otherwise is refused with an error that asks for it.
    server_momentum, server_learning_rate : float | None (default: None)
        Flower FedAvgM's keywords, accepted where they mean the same thing: `server_momentum`
        is `lam` (the server momentum; for FedACG also its look-ahead step) and
        `server_learning_rate` is `eta` (the server step on the averaged update; FedAGM's
        `tau`). Give each knob once, under one name.
    identify_nodes : bool (default: False)
        Ask each node once for its `partition-id` / `num-partitions` (a query message, which
        the ClientApp answers with `client_app.own_app.query_reply`): the server rules that
        weigh by the number of clients N or keep a table per client (SCAFFOLD, FedDyn, FedDC,
        FedVARP) need it.
    **settings
        The method's settings: the run-config keys of docs/configuration.md with '_' for '-'
        (`lam`, `beta`, `local_gc`, `moon_mu`, `max_update_norm`, ...), with the same defaults
        and ranges; the method's presets fill the ones not given. `lr` (and `lr_decay`): the
        clients' learning rate, then sent in every train instruction as 'lr' (times
        lr_decay^(t-1)); without it, the 'lr' of `start`'s `train_config` is the one the
        server rules that use it (SCAFFOLD, FedCM, FedDC) read. The screening of replies is
        the app's (docs/security.md), its extra records' included.
    """

    # A named strategy's method, its own keywords (their defaults: the method's preset, else
    # the key's default; `knob_defaults`), and those of them that are a setting of another name
    # (FedAGM's tau is eta): see `FedACG` below.
    METHOD: ClassVar[str] = ""
    KNOBS: ClassVar[tuple[str, ...]] = ()
    RENAMED: ClassVar[dict[str, str]] = {}

    @classmethod
    def knob_defaults(cls) -> dict[str, Any]:
        """Each of its own keywords' default: the value of its setting under the method's
        preset (`methods.MethodDefinition.preset`), else the run-config key's default, as
        `run_config.resolve_strategy` gives it for the method alone."""
        if not cls.KNOBS:
            return {}
        resolved = resolve_strategy({"method": cls.METHOD})
        return {knob: resolved[cls.RENAMED.get(knob, knob).replace("_", "-")]
                for knob in cls.KNOBS}

    def __init__(
        self,
        method: str,
        *,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        train_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        evaluate_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        classifier: str | Sequence[str] | None = None,
        identify_nodes: bool = False,
        server_momentum: float | None = None,
        server_learning_rate: float | None = None,
        **settings: Any,
    ) -> None:
        name = f"Method({method!r})" if type(self) is Method else type(self).__name__
        self.label = name  # for errors
        _check_classifier(name, classifier)
        settings, self._user_names = _own_names(
            name, type(self), settings,
            {"server_momentum": server_momentum, "server_learning_rate": server_learning_rate})
        if method not in methods.METHODS:
            close = difflib.get_close_matches(method, methods.method_names(), n=1)
            raise ValueError(f"{name}: unknown method {method!r}"
                             + (f" (did you mean {close[0]!r}?)" if close else "")
                             + f"; the methods: {', '.join(methods.method_names())}")
        self.settings = {k.replace("_", "-"): v for k, v in settings.items()}
        allowed = strategy_settings()
        for key in self.settings:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                raise ValueError(
                    f"{name}: {self._user(key)} is "
                    + ("a setting of this project's app, not of a strategy" if key in
                       KEYS_BY_NAME else "not a setting")
                    + (f" (did you mean {_kw(close[0])}?)" if close else "")
                    + f"; the settings: {', '.join(sorted(map(_kw, allowed)))}")
        try:  # the settings, typed and checked by the run config's keys (no app keys)
            self.cfg = resolve_strategy({"method": method, **self.settings})
        except ConfigError as err:  # the value's key under the name the user gave it
            text = err.sentence(self._user(err.key)) if err.key else str(err)
            raise ValueError(f"{name}: {text} (the settings are the run-config keys of "
                             "docs/configuration.md with '_' for '-')") from None
        # a part that runs on one of this project's models only (FedMLB) tells the clients,
        # which check their settings against it, that model in `model` (the strategy itself
        # builds its rule for whatever model `initial_arrays` hold)
        for part in (methods.CLIENT_PARTS[n] for n in parse_objective(
                self.cfg["client-objective"])):
            if part.models:
                self.settings.setdefault("model", part.models[0])
        super().__init__(
            None, **strategy_arguments(self.cfg, min_available_nodes=min_available_nodes,
                                       identify_nodes=identify_nodes, checkpoints=False),
            fraction_train=fraction_train, fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes, min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes, weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key, configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn)
        self.method = method
        # the server rule's settings object, built once here (lr=... or train_config's 'lr', where
        # it reads it, replaced when the rule is built for the arrays)
        self.rule_settings = rule_settings(self.cfg)
        self.classifier = classifier
        self.client_config: dict[str, Any] = {}  # the method.* keys of each train instruction
        self._train_config: ConfigRecord | None = None
        self._built_for: ArrayRecord | None = None

    def _user(self, key: str) -> str:
        """A run-config key by the name the user gave it (FedAGM's tau for eta)."""
        return self._user_names.get(key, _kw(key))

    def summary(self) -> None:
        log(INFO, "\t├──> %s: method '%s' %s", type(self).__name__, self.method, self.settings)
        if self.rule is not None:
            super().summary()

    # --- built from the initial arrays ------------------------------------------------------
    def start(self, grid, initial_arrays: ArrayRecord, num_rounds: int = 3,
              timeout: float = 3600, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None, evaluate_fn=None, **kwargs):
        """Flower's `Strategy.start`: the server rule is built from `initial_arrays` first."""
        self._train_config = train_config
        self._build(initial_arrays)
        return super().start(grid, initial_arrays, num_rounds, timeout, train_config,
                             evaluate_config, evaluate_fn, **kwargs)

    def _start_rule(self, arrays: ArrayRecord) -> None:
        if arrays is not self._built_for:  # configure_train without start, or a new model
            self._build(arrays)
        super()._start_rule(arrays)

    def _build(self, arrays: ArrayRecord) -> None:
        """The server rule for these arrays' model, and what the clients are sent."""
        name, given = self.label, dict(self._train_config or {})
        taken = sorted(k for k in given if k.startswith(PREFIX))
        if taken:
            raise ValueError(f"{name}: train_config has {taken}: the '{PREFIX}' keys carry the "
                             "method to the clients; rename them")
        lr = self._clients_lr(given)
        state = arrays.to_torch_state_dict()
        layout = ModelLayout.from_arrays(state, self.classifier)
        try:
            classifier = list(layout.classifier_names)
        except ValueError as err:
            local_gc_needs_it = self.cfg["local-gc"] == "features" and \
                self.cfg["gc-borderline"] == "classifier"
            if local_gc_needs_it or self.classifier is not None:
                raise ValueError(f"{name}: {err}") from None
            classifier = []  # not needed: a model that ends otherwise is fine
        rule = self.cfg["server-rule"]
        if lr is None and methods.SERVER_RULES[rule].uses_lr:
            raise ValueError(f"{name}: server-rule '{rule}' needs the clients' learning rate: "
                             "pass lr=... or start(..., train_config=ConfigRecord({'lr': ...}))")
        # the rule reads 'lr' only where it uses it (`uses_lr`): then it is the clients' own
        settings = self.rule_settings
        if lr is not None and "lr" in settings.keys():
            settings = dataclasses.replace(settings, lr=lr)
        try:
            self.rule, self.up_records = make_rule(settings, layout, state)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        sent = {**self.settings, **({} if lr is None else {"lr": lr})}
        self.client_config = {PREFIX + "name": self.method,
                              **{PREFIX + k: v for k, v in sent.items()}}
        if classifier:
            self.client_config[PREFIX + "classifier"] = classifier
        self._built_for = arrays

    def _clients_lr(self, given: dict[str, Any]) -> float | None:
        """The clients' learning rate: lr=..., else a number under train_config's 'lr' (typed
        and checked by the run-config key 'lr'), else None (not known to the strategy)."""
        name = self.label
        if "lr" in self.settings:
            if "lr" in given and given["lr"] != self.lr:
                raise ValueError(f"{name}: lr={self.lr} and train_config's 'lr' = "
                                 f"{given['lr']}: give the clients' learning rate once")
            return self.cfg["lr"]
        if not isinstance(given.get("lr"), (int, float)):
            return None  # (absent, or not a number: the clients' own business)
        try:
            return coerce(KEYS_BY_NAME["lr"], given["lr"])
        except ConfigError as err:
            raise ValueError(f"{name}: {err.sentence(TRAIN_CONFIG_LR)}") from None

    def round_config(self, server_round: int, config: ConfigRecord) -> ConfigRecord:
        """The train instruction's config: the given one, 'lr' when the strategy sets it, the
        round, and the method for the clients (`method.*`)."""
        out = ConfigRecord(dict(config))
        if "lr" in self.settings:
            out["lr"] = self.lr * self.lr_decay ** (server_round - 1)
        out["server-round"] = server_round
        for key, value in self.client_config.items():
            out[key] = value
        return out


class FedACG(Method):
    """FedACG: Federated learning with Accelerated Client Gradient.

    Kim, Kim, Han. Communication-Efficient Federated Learning with Accelerated Client Gradient.
    CVPR 2024, https://arxiv.org/abs/2201.03172 (Algorithm 1; docs/algorithms.md).

    The server keeps a momentum m and broadcasts the look-ahead point phi = theta + lam * m;
    each client minimizes CE + beta/2 * ||w - phi||^2 from phi (`client_app.own_app.LocalMethod`
    adds the term's gradient); the server averages the clients' models weighted by their
    examples, d = sum_i n_i/n * w_i - phi, then m = lam * m + d and theta = theta + m.

    Parameters
    ----------
    lam : float (default: 0.85)
        The server momentum lambda, also the look-ahead step; in [0, 1). Flower FedAvgM's
        `server_momentum` is accepted for it.
    beta : float (default: 0.01)
        The weight beta of the clients' proximal term; >= 0.
    **kwargs
        Flower's FedAvg keywords (`fraction_train`, `fraction_evaluate`, `min_train_nodes`,
        `min_evaluate_nodes`, `min_available_nodes`, `weighted_by_key`, `arrayrecord_key`,
        `configrecord_key`, `train_metrics_aggr_fn`, `evaluate_metrics_aggr_fn`) and further
        settings, as for `Method` (e.g. `eta`, `local_gc`, `lr`, `max_update_norm`).
    """

    METHOD, KNOBS = "fedacg", ("lam", "beta")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.METHOD, **kwargs)


class FedAGM(Method):
    """FedAGM: Federated learning with Acceleration of Global Momentum.

    Kim, Kim, Han. Communication-Efficient Federated Learning with Acceleration of Global
    Momentum, https://arxiv.org/abs/2201.03172v1 (Algorithm 2; docs/algorithms.md).

    FedACG's round (look-ahead broadcast phi = theta + lam * m, proximal term beta/2 *
    ||w - phi||^2) with a server step tau, m = lam * m + tau * d, and the clients' loss weight
    alpha: alpha * CE + beta/2 * ||w - phi||^2. With tau = 1 and alpha = 1 it is FedACG.

    Parameters
    ----------
    lam : float (default: 0.85)
        The server momentum lambda, also the look-ahead step; in [0, 1).
    beta : float (default: 0.01)
        The weight beta of the clients' proximal term; >= 0.
    tau : float (default: 1.0)
        The server step tau on the averaged update (Flower FedAvgM's `server_learning_rate`).
    alpha : float (default: 1.0)
        The weight alpha of the clients' cross-entropy.
    **kwargs
        Flower's FedAvg keywords and further settings, as for `FedACG`.
    """

    METHOD, KNOBS = "fedagm", ("lam", "beta", "tau", "alpha")
    RENAMED = {"tau": "eta"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.METHOD, **kwargs)


class GCFed(Method):
    """GC-Fed: Gradient Centralized Federated Learning.

    Seo, Catak, Rong, Hong, Kim. GC-Fed: Gradient Centralized Federated Learning with Partial
    Client Participation. Information Fusion 2026, https://arxiv.org/abs/2503.13180
    (Algorithm 1; docs/algorithms.md#gradient-centralization).

    The clients centralize the gradients of the feature layers (the parameters before the
    classifier) at every step, P(G)[c] = G[c] - mean(G[c]) per output unit (local GC,
    `client_app.own_app.LocalMethod`); the server averages the updates uniformly and
    centralizes the aggregated update of every layer (global GC) before applying it.

    Parameters
    ----------
    classifier : str | Sequence[str] | None (default: None)
        The model's classifier (no local GC on it): parameter or module names; None: the last
        weight/bias pair of `initial_arrays` (see `Method`).
    gc_vectors : str (default: 'center')
        One-dimensional tensors (biases): 'center' subtracts their mean (GC-Fed's code),
        'skip' leaves them alone.
    **kwargs
        Flower's FedAvg keywords and further settings, as for `FedACG`.
    """

    METHOD, KNOBS = "gcfed", ("gc_vectors",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.METHOD, **kwargs)


class FedACGGCFed(Method):
    """FedACG and GC-Fed at once (this project's combination, docs/algorithms.md#presets).

    FedACG's look-ahead broadcast, server momentum and proximal term
    (https://arxiv.org/abs/2201.03172) with GC-Fed's local GC on the feature layers and
    global GC on the aggregated update (https://arxiv.org/abs/2503.13180); the updates are
    averaged by the clients' numbers of examples.

    Parameters
    ----------
    lam : float (default: 0.85)
        The server momentum lambda, also the look-ahead step; in [0, 1).
    beta : float (default: 0.01)
        The weight beta of the clients' proximal term; >= 0.
    classifier : str | Sequence[str] | None (default: None)
        The model's classifier (no local GC on it), as for `GCFed`.
    gc_vectors : str (default: 'center')
        GC of one-dimensional tensors, as for `GCFed`.
    **kwargs
        Flower's FedAvg keywords and further settings, as for `FedACG`.
    """

    METHOD, KNOBS = "fedacg+gcfed", ("lam", "beta", "gc_vectors")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.METHOD, **kwargs)


def _signature(cls: type[Method]) -> inspect.Signature:
    """What `help()`, `inspect.signature` and IDEs that ask show for a named strategy: its own
    knobs with their defaults, then Method's keywords (Flower FedAvg's, with FedAvg's defaults;
    classifier, identify_nodes, Flower FedAvgM's aliases), then the further settings."""
    own = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v)
           for k, v in cls.knob_defaults().items()]
    base = [p for p in inspect.signature(Method.__init__).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in cls.KNOBS]
    rest = inspect.Parameter("settings", inspect.Parameter.VAR_KEYWORD, annotation=Any)
    return inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                              *own, *base, rest], return_annotation=None)


for _cls in (FedACG, FedAGM, GCFed, FedACGGCFed):
    _cls.__init__.__signature__ = _signature(_cls)
