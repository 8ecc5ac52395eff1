"""What a method is made of: client parts (loss terms, gradient corrections, per-client state,
extra payloads) and one server rule. A method module declares a `Method` naming its parts and
preset values; `methods.registry` gathers them. docs/extending.md shows how to add one.

Nothing here imports torch or Flower: the run config reads the registry without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from server_math.records import FLOATS, PARAMETERS, ReplyMetric, UpRecord  # noqa: F401

from .settings import Key, SettingError, Settings, Uses, settings_class  # noqa: F401

Config = dict[str, Any]  # a resolved run config (run_config.resolve), or a named strategy's
# settings (run_config.resolve_strategy): read at the edge only, into each part's `Settings`
# The strategies of `strategies.named` send their method to the clients in each train
# instruction's config as keys with this prefix: 'method.name', 'method.<run-config key>' for each
# setting given, 'method.classifier' (read by `client_app.own_app.LocalMethod`).
CONFIG_PREFIX = "method."


class _SettingsType:
    """`Part.Settings`: the class's settings dataclass, made from its declarations on first use
    (after the registry has checked them) and kept on the class."""

    def __get__(self, instance, owner: type[Part]) -> type[Settings]:
        made = owner.__dict__.get("_settings_type")
        if made is None:
            parent = next((k for k in owner.__mro__[1:] if issubclass(k, Part)), None)
            inherits = "uses" not in vars(owner) and parent is not None
            base = parent.Settings if inherits else Settings
            declared = (*owner.declared(), *vars(owner).get("uses", ()))
            made = settings_class(owner, declared, base)
            owner._settings_type = made
        return made


class Part:
    """What server rules and client parts share: the run-config keys they declare and the
    settings object they are built with (docs/extending.md#a-methods-knobs)."""

    # Its own knobs: the run-config keys its class body declares (`Key`s: type, default, range,
    # help), gathered by run_config.schema from the registry (docs/extending.md#a-methods-knobs).
    settings: ClassVar[tuple[Key, ...]] = ()
    # The other keys it reads: app keys (`Uses`: name, type, default) and other parts' knobs
    # (their `Key`). A class body without `uses` reads what its base class reads, besides its
    # own settings; one with `uses` reads its own settings and those.
    uses: ClassVar[tuple[Key | Uses, ...]] = ()
    # What it is built with: a frozen dataclass with one field per key it reads ('-' written
    # '_'), made from `settings` and `uses` (methods.settings.Settings); nothing else of the
    # run config reaches it.
    Settings: ClassVar[type[Settings]] = _SettingsType()

    @classmethod
    def declared(cls) -> tuple[Key, ...]:
        """The knobs this class declares itself (a subclass does not declare its base's)."""
        return vars(cls).get("settings", ())

    @classmethod
    def reads(cls) -> tuple[str, ...]:
        """Every run-config key it reads: the fields of its settings object."""
        return cls.Settings.keys()

    @classmethod
    def knobs(cls) -> tuple[str, ...]:
        """The keys it reads that do something only through the parts that read them: the
        parts' knobs (`Key`s) and the app keys it `Uses` with `knob=True` (a run that sets one
        of them and uses no part that reads it is refused)."""
        return tuple(f.metadata["key"] for f in fields(cls.Settings) if f.metadata["knob"])


def _check_type(part: Part, settings: Any) -> None:
    """Refuse settings other than the part's own (a run-config dict, another part's)."""
    if not isinstance(settings, type(part).Settings):
        raise SettingError(f"{type(part).__name__} is built with its settings object, "
                           f"{type(part).__name__}.Settings(...) (or "
                           f"{type(part).__name__}.Settings.from_config(resolved run config)), "
                           f"not {type(settings).__name__}")


class ClientPart(Part):
    """One part of the client objective of the local update (docs/algorithms.md
    #local-update). Every hook is optional; the local update calls, in this order:

    begin(ctx)                       once per local update, model at phi, before the first step
    model_forward(ctx, x) -> logits  each step, instead of model(x): for a part that needs more of
                                     the forward pass than the logits (keeps it for its loss)
    task_loss(ctx, logits, y, loss)  each step: the task loss that replaces `loss` (CE, or what
                                     an earlier part made of it) in alpha * task loss
    loss(ctx, logits, x, y)          each step: a tensor added to alpha * task loss before backward
    step_grad(ctx, x, y, objective) -> (logits, ce)
                                     each step, instead of the loop's backward of the step's loss:
                                     leave the step's gradient in p.grad (zeroed by the loop) and
                                     the weights as they were; objective(x, y) -> (loss, logits,
                                     ce) is the loop's loss (the three hooks above) at the current
                                     weights; returns what the train metrics count
    correct_grad_(ctx)               each step: in place on the gradients, after backward and
                                     before clipping, local GC and the optimizer step
    end(ctx) -> {name: ArrayRecord}  after the last step: records added to the reply (`up`)

    At most one part of an objective may override `model_forward`, and one `step_grad`.

    `ctx` is a `client_app.client_step.LocalContext`: the model, its parameters, the received
    records (`down`), the node's persistent state (`ctx.state`, the node's Flower
    Context.state: a RecordDict kept across rounds; per-client state goes through
    `ctx.load_state` / `ctx.save_state`), the round and the learning rate.
    """

    name: ClassVar[str] = ""
    down: ClassVar[tuple[str, ...]] = ()  # records it needs in the train instruction
    up: ClassVar[Mapping[str, UpRecord]] = {}  # records it adds to the reply: what each holds
    # Keeps per-client state across rounds (ctx.load_state / ctx.save_state): one version per
    # round on the node's disk, and the server tells each client which version to start from,
    # so a resumed run restores it exactly (docs/baselines.md#client-state).
    client_state: ClassVar[bool] = False
    # Switches no paper combines with this part: switch ('lookahead', 'local-gc', 'global-gc')
    # -> why. The run config refuses them unless 'allow-untested-combinations' = true.
    untested: ClassVar[dict[str, str]] = {}
    # The models (run config 'model') it can train; empty = any.
    models: ClassVar[tuple[str, ...]] = ()
    # Reads the sizes of every client's partition (FedDC's om_i): a node training on its own
    # data (node config data-path) cannot know them, and refuses it (docs/deployment.md).
    uses_partition_sizes: ClassVar[bool] = False
    # Reads the clients' learning rate 'lr' in `__init__` (SCAFFOLD's and FedDC's K lr): a
    # client of a named strategy (client_app/own_app.py) knows it only where the strategy sends
    # it (its lr=... or start's train_config), and refuses to build such a part without it
    # (tests/test_client_blocks.py holds every registered part to it).
    uses_lr: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        """`settings`: its own settings object (`self.Settings`, built by the ClientApp from the
        run config, or by keyword: `ProximalTerm(ProximalTerm.Settings(beta=0.1))`); a part
        keeps what it uses as typed attributes (e.g. `self.beta = settings.beta`)."""
        _check_type(self, settings)

    def begin(self, ctx) -> None:
        pass

    def model_forward(self, ctx, x):
        return ctx.model(x)

    def task_loss(self, ctx, logits, y, loss):
        return loss

    def loss(self, ctx, logits, x, y):
        return None

    def step_grad(self, ctx, x, y, objective):
        loss, logits, ce = objective(x, y)
        loss.backward()
        return logits, ce

    def correct_grad_(self, ctx) -> None:
        pass

    def end(self, ctx) -> dict:
        return {}

    # which hooks a subclass overrides (the local update skips the others)
    @classmethod
    def has(cls, hook: str) -> bool:
        return getattr(cls, hook) is not getattr(ClientPart, hook)


class UplinkCodec(ClientPart):
    """How client models travel up when not as plain tensors (FedPAQ's quantization), for any
    method: registered like the parts, switched on by the run config (`on`), found by the apps
    through `methods.uplink_codec` (docs/extending.md#uplink-codecs).

    Client side (this class): a client part put first, so that its `end` (which turns the model
    into what the server will rebuild) runs before the method's own `end` hooks;
    `reply_arrays(model)` is the reply's 'arrays' record.
    Server side (`decoder(settings)`, from the codec's settings object):
    `decode_replies(replies, phi)` replaces each reply's 'arrays' by the model it encodes, in
    place, before screening, and returns {id(reply): why} for the replies that do not decode
    (screening drops them, as malformed, with that reason); nothing a client sends may make it
    raise.
    """

    decoder: ClassVar[type]

    @classmethod
    def on(cls, settings: Settings) -> bool:
        """Whether these settings (the codec's, from the run config) switch the codec on."""
        return False

    def reply_arrays(self, model):
        raise NotImplementedError


class ServerRule(Part):
    """How the screened replies and the server state turn into the next theta
    (docs/algorithms.md #server-round). The round loop calls, each round:

    start(theta_record)               once, on a fresh run (theta_0)
    broadcast(round) -> ArrayRecord   the point phi the sampled clients start from
    down_records(round) -> {name: ArrayRecord}   extra records of the train instruction
    up_centers() -> {name: {key: tensor}}       where the screen measures a record's norm from
    aggregate(round, good, phi, up) -> (ArrayRecord | None, skip reason | None)
                                      good: [(reply Message, its model as name -> tensor, n_i)],
                                      screened and in a stable order; up: per good reply, its
                                      records named in `up`, screened as they declare
                                      ({name: {key: tensor}}, read-only views)
    theta_record() -> ArrayRecord     the current theta (after start, aggregate, load_state_dict)
    state_dict() / load_state_dict()  everything the rule needs to resume exactly (checkpoints)
    state_to_check()                  the state checked finite after every update (default:
                                      state_dict())
    """

    name: ClassVar[str] = ""
    down: ClassVar[tuple[str, ...]] = ()  # records it adds to the train instruction
    up: ClassVar[Mapping[str, UpRecord]] = {}  # records it needs in every reply: what each holds
    # numbers it reads from each reply's MetricRecord (besides num-examples): name -> the range
    up_metrics: ClassVar[Mapping[str, ReplyMetric]] = {}
    # the config switches it implements (others must stay off): 'lookahead', 'global-gc',
    # 'aggregation=uniform', 'dynamic-clients', 'resume'
    supports: ClassVar[frozenset[str]] = frozenset()
    # 'seeded': the strategy's own RNG over nodes in partition-id order (same partitions in every
    # run, resumable); 'flower': Flower's own sample_nodes with Python's global `random`.
    sampling: ClassVar[str] = "seeded"
    # Switches it supports that no paper combines with it: switch -> why (as ClientPart.untested)
    untested: ClassVar[dict[str, str]] = {}
    summary: ClassVar[str] = ""  # one line for the method table
    # Reads the clients' learning rate 'lr' (and 'lr-decay'): a named strategy
    # (strategies/named.py) knows it only from its lr=... or start's train_config, and refuses
    # to build such a rule without it (tests/test_named_strategies.py holds every rule to it).
    uses_lr: ClassVar[bool] = False
    # N, the number of clients (partitions) of the federation: set by the round loop before
    # each `aggregate` (rules such as SCAFFOLD's and FedDyn's weigh by it)
    num_clients: int = 0
    # the client (partition) of each good reply, in `good`'s order: set by the round loop
    # before each `aggregate` (rules with a per-client table, such as FedVARP's)
    client_ids: list = []
    # the weighted mean sum_i p_i w_i - phi the screen computed in its pass over the replies
    # (server_math.reply_pass.PreparedMean, from `mean_weights`), set by the round loop before each
    # `aggregate`: `aggregate_update(..., prepared=self.prepared_mean)` takes it if it fits
    prepared_mean = None
    # where that mean may be written (a rule that keeps no reference to its d gives its last d)
    mean_buffer = None

    def __init__(self, settings: Settings, model=None) -> None:
        """`settings`: its own settings object (`self.Settings`, built by the strategy assembly
        from the run config, or by keyword: `MomentumRule(MomentumRule.Settings(lam=0.9),
        model)`); a rule keeps what it uses as typed attributes. `model`: the module, or the
        `ModelLayout` of its arrays (None: a rule that needs neither)."""
        _check_type(self, settings)

    def describe(self) -> str:
        """The rule and its settings, for the log."""
        return self.name

    def start(self, theta_record) -> None:
        raise NotImplementedError

    def broadcast(self, server_round: int):
        raise NotImplementedError

    def down_records(self, server_round: int) -> dict:
        return {}

    def up_centers(self) -> dict:
        """{record name: {key: tensor}}: for a record of `up` whose honest values share a common
        part, the point its norm is measured from by the screen's norm limit (called after
        `broadcast`, before `aggregate`). E.g. SCAFFOLD's delta-c_i = -c + drift_i: from -c, so
        that the clients' drifts are compared, not c, which every record holds."""
        return {}

    def mean_weights(self, num_examples: list[float]) -> list[float] | None:
        """The weights p_i of the mean sum_i p_i w_i - phi this rule's `aggregate` computes (with
        `aggregate_update`) over replies of these claims, or None (no such mean): the screen
        then computes it in the same pass as the update norms."""
        return None

    def aggregate(self, server_round: int, good: list, phi: dict, up: list):
        raise NotImplementedError

    def theta_record(self):
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def state_to_check(self) -> dict[str, Any]:
        """The server state the round loop checks for NaN and Inf after every update
        (strategies/state_check.py): name -> tensor, or dicts / lists of them. By default the
        state_dict(); a rule whose state_dict() is costly (copies of large tables) or not there
        gives what stands for its state."""
        return self.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@dataclass(frozen=True)
class MethodDefinition:
    """A named method: its paper, its server rule, its client parts and preset values.

    `preset` gives the value of every preset-controlled key (run_config.schema: `'preset'`) under
    this method; `server_rule` and `client_parts` are the defaults of the `server-rule` and
    `client-objective` keys, both overridable from the config.
    """

    name: str
    paper: str  # reference (with a link) for the method table
    server_rule: str
    client_parts: tuple[str, ...] = ()
    preset: dict[str, Any] = field(default_factory=dict)
