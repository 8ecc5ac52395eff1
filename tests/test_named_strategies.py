"""The methods as Flower strategies for a ServerApp of one's own (strategies/named.py,
docs/own-app.md): built like Flower's, from `initial_arrays` alone, against Flower's FedAvg, hand
computations and the app's own strategy."""

import random

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp.strategy import FedAvg, Strategy

from fakegrid import FakeGrid
from models import build_model
from models.centralization import ModelLayout, find_classifier
from run_config import resolve
from strategies.assembly import build_strategy
from strategies import FedACG, FedACGGCFed, FedAGM, GCFed, Method
from strategies.round_loop import NothingLearned
from strategy_helpers import deltas, random_state

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

SIZES = [10, 30, 25, 5]


def run(strategy, handler, init, rounds=3, nodes=4, train_config=None):
    """Flower's own call, as in quickstart-pytorch."""
    result = strategy.start(grid=FakeGrid(nodes, handler), initial_arrays=ArrayRecord(init),
                            num_rounds=rounds,
                            train_config=ConfigRecord({"lr": 0.1}) if train_config is None
                            else train_config)
    return result.arrays.to_torch_state_dict()


def small_deltas(seed: int, nodes: int, template: dict) -> list[dict]:
    """One update per node, of similar size (so that honest-reply screening keeps them all)."""
    g = torch.Generator().manual_seed(seed)
    return [{k: 0.01 * torch.randn(v.shape, generator=g) for k, v in template.items()}
            for _ in range(nodes)]


def test_they_are_flower_strategies():
    for cls in (FedACG, FedAGM, GCFed, FedACGGCFed, Method):
        assert issubclass(cls, Strategy)
    assert FedACG(fraction_train=0.1, lam=0.85, beta=0.01).fraction_train == 0.1
    assert FedAGM(tau=0.7, alpha=0.5).cfg["eta"] == 0.7
    assert GCFed().cfg["aggregation"] == "uniform"
    # the screening of replies is the app's, with its defaults (the clipping off unless asked)
    assert (FedACG().max_update_norm, FedACG().influence) == (0.0, (30.0, 10.0))
    assert (FedACG().update_clip_ratio, FedACG().record_norm_ratio) == (0.0, 30.0)
    assert FedACG(update_clip_ratio=2.0).update_clip_ratio == 2.0


def test_fedacg_without_momentum_and_proximal_term_is_flower_fedavg():
    init = random_state(99)
    ds = small_deltas(1, 4, init)
    ours = run(FedACG(lam=0.0, beta=0.0, min_train_nodes=4, fraction_evaluate=0.0),
               deltas(ds, SIZES, []), init)
    flower = run(FedAvg(min_train_nodes=4, min_available_nodes=4, fraction_evaluate=0.0),
                 deltas(ds, SIZES, []), init)
    for k in init:
        torch.testing.assert_close(ours[k], flower[k], atol=1e-6, rtol=0)
    moved = run(FedACG(lam=0.5, beta=0.0, min_train_nodes=4, fraction_evaluate=0.0),
                deltas(ds, SIZES, []), init)
    assert max((moved[k] - flower[k]).abs().max() for k in init) > 1e-3  # lam is used


def test_fedacg_two_rounds_by_hand_and_what_the_clients_are_sent():
    """theta0; two clients answer phi + d_i with n = 1 and 3; lam = 0.5 (docs/algorithms.md
    #server-round), computed here in float64."""
    theta0 = {"fc.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
              "fc.bias": torch.tensor([0.5, -0.5])}
    d1 = {"fc.weight": torch.tensor([[0.5, 0.0], [0.0, 0.25]]), "fc.bias": torch.tensor([1., 0.])}
    d2 = {"fc.weight": torch.tensor([[0.0, 1.0], [0.5, 0.0]]), "fc.bias": torch.tensor([0., 2.])}
    seen, configs = [], []

    def handler(i, msg):
        configs.append(dict(msg.content["config"]))
        return deltas([d1, d2], [1, 3], seen)(i, msg)

    strategy = FedACG(lam=0.5, beta=0.02, min_train_nodes=2, fraction_evaluate=0.0)
    theta = run(strategy, handler, theta0, rounds=2, nodes=2)
    lam = 0.5
    d = {k: (0.25 * d1[k] + 0.75 * d2[k]).double() for k in theta0}
    theta1 = {k: theta0[k].double() + d[k] for k in d}  # m1 = d
    phi2 = {k: theta1[k] + lam * d[k] for k in d}
    theta2 = {k: theta1[k] + (lam * d[k] + d[k]) for k in d}  # m2 = lam m1 + d
    for r, _, phi in seen:
        for k in phi:
            torch.testing.assert_close(phi[k].double(), theta0[k].double() if r == 1 else phi2[k])
    for k in theta:
        torch.testing.assert_close(theta[k].double(), theta2[k])
    assert {c["method.name"] for c in configs} == {"fedacg"}
    assert configs[0]["method.beta"] == 0.02 and configs[0]["method.lam"] == 0.5
    assert configs[0]["lr"] == 0.1 and configs[-1]["server-round"] == 2  # the user's own config
    assert configs[0]["method.classifier"] == ["fc.weight", "fc.bias"]


def test_gcfed_two_rounds_by_hand():
    """Uniform mean of the updates, then P on every tensor of d (rows of the 2-D weight, the
    whole bias with gc_vectors='center'), no momentum."""
    theta0 = {"conv.weight": torch.zeros(2, 1, 2, 2), "fc.weight": torch.zeros(2, 3),
              "fc.bias": torch.zeros(2)}
    ds = small_deltas(3, 2, theta0)
    theta = run(GCFed(min_train_nodes=2, fraction_evaluate=0.0), deltas(ds, [1, 9], []),
                theta0, rounds=2, nodes=2)
    for k in theta0:
        d = (ds[0][k].double() + ds[1][k].double()) / 2
        if d.dim() >= 2:
            p = d - d.mean(dim=tuple(range(1, d.dim())), keepdim=True)
        else:
            p = d - d.mean()
        torch.testing.assert_close(theta[k].double(), 2 * p)
        assert theta[k].sum().abs() < 1e-6


@pytest.mark.parametrize("method, cls, kwargs", [
    ("fedacg+gcfed", FedACGGCFed, {}),
    ("fedacg", FedACG, {"local_gc": "features", "global_gc": "classifier"}),
    ("gcfed", GCFed, {}),
])
def test_same_rule_and_results_as_the_apps_strategy(method, cls, kwargs):
    """Built from the project's CNN's arrays alone: the same GC layer sets as the app's strategy
    built with the model, and the same thetas on the same replies."""
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    ds = small_deltas(5, 4, init)
    app = build_strategy(resolve({"method": method, "fraction-train": 1.0,
                                  **{k.replace("_", "-"): v for k, v in kwargs.items()}}), model)
    ours = cls(min_train_nodes=4, fraction_evaluate=0.0, **kwargs)

    def handler(i, msg):
        if msg.metadata.message_type == "query":  # the app's strategy asks for partition ids
            from flwr.app import MetricRecord, RecordDict
            return RecordDict({"metrics": MetricRecord({"partition-id": i, "num-partitions": 4,
                                                        "simulated": 0})})
        return deltas(ds, SIZES, [])(i, msg)

    a = run(app, handler, init)
    b = run(ours, handler, init)
    assert ours.rule.global_gc_layers == app.rule.global_gc_layers
    assert ours.rule.describe() == app.rule.describe()
    for k in init:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)


def assembled(strategy) -> dict:
    """What a strategy is assembled with besides its server rule, read attribute by attribute."""
    nodes, pop = strategy.nodes, strategy.nodes.population
    return {
        "sampling": (nodes.sampling, nodes.rng.getstate(), nodes.identify_nodes,
                     nodes.min_available_nodes, nodes.node_wait_timeout, nodes.num_clients),
        "population": None if pop is None else (pop.replace_prob, pop.replace_every,
                                                pop.pool_factor, pop.seed),
        "client-state": None if strategy.client_state is None else (
            type(strategy.client_state).__name__, strategy.client_state.checkpoints),
        "lr": (strategy.lr, strategy.lr_decay),
        "screening": (strategy.min_train_clients, strategy.max_skipped_rounds,
                      strategy.max_update_norm, strategy.influence, strategy.update_clip_ratio,
                      strategy.record_norm_ratio),
        "uplink": None if strategy.uplink is None else type(strategy.uplink).__name__,
    }


# Where each setting of the cases below lands in a strategy.
WHERE = {
    "num-clients": lambda s: s.nodes.num_clients,
    "seed": lambda s: s.nodes.rng.getstate() == random.Random(3).getstate() and 3,
    "node-wait-timeout": lambda s: s.nodes.node_wait_timeout,
    "dynamic-replace-prob": lambda s: s.nodes.population.replace_prob,
    "dynamic-replace-every": lambda s: s.nodes.population.replace_every,
    "dynamic-pool-factor": lambda s: s.nodes.population.pool_factor,
    "lr": lambda s: s.lr, "lr-decay": lambda s: s.lr_decay,
    "max-update-norm": lambda s: s.max_update_norm,
    "max-skipped-rounds": lambda s: s.max_skipped_rounds,
    "min-train-clients": lambda s: s.min_train_clients,
    "update-norm-ratio": lambda s: s.influence[0], "num-examples-ratio": lambda s: s.influence[1],
    "update-clip-ratio": lambda s: s.update_clip_ratio,
    "record-norm-ratio": lambda s: s.record_norm_ratio,
    "uplink-bits": lambda s: s.uplink.bits,
}


@pytest.mark.parametrize("method, settings", [
    ("scaffold", {"num-clients": 7, "max-update-norm": 50.0, "update-norm-ratio": 5.0,
                  "seed": 3, "lr": 0.02, "lr-decay": 0.99, "max-skipped-rounds": 2}),
    ("fedacg", {"dynamic-replace-prob": 0.5, "dynamic-replace-every": 2,
                "dynamic-pool-factor": 3.0, "num-clients": 4, "node-wait-timeout": 30.0}),
    ("moon", {"record-norm-ratio": 20.0, "update-clip-ratio": 3.0, "min-train-clients": 2}),
    ("fedpaq", {"uplink-bits": 4, "num-examples-ratio": 4.0}),
])
def test_a_named_strategy_is_assembled_as_the_apps(method, settings):
    """The app's ServerApp and a named strategy in an app of one's own get the same nodes
    (seeded sampling, N, the dynamic population), the same per-client state rounds, learning
    rate, screening and uplink codec from the same settings."""
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    # (the app without checkpoints, as a named strategy: no client keeps older versions for one)
    app = build_strategy(resolve({"method": method, "min-train-nodes": 3, "checkpoint-every": 0,
                                  **settings}), model)
    named = Method(method, min_train_nodes=3, min_available_nodes=3, identify_nodes=True,
                   **{k.replace("-", "_"): v for k, v in settings.items()})
    assert assembled(named) == assembled(app)
    for key, value in settings.items():  # each setting reached both strategies (no defaults)
        assert value != resolve({"method": method})[key], key
        for strategy in (app, named):
            assert WHERE[key](strategy) == value, key
    stateful = method in ("scaffold", "moon")
    assert (app.client_state is not None) == stateful
    assert (app.nodes.population is not None) == ("dynamic-replace-prob" in settings)


def test_classifier_from_the_arrays_names():
    from torch import nn

    class Net(nn.Module):
        def __init__(self, head_bias=True, norm_last=False):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.head = nn.Linear(4, 3, bias=head_bias)
            if norm_last:
                self.norm = nn.LayerNorm(3)

    def found(model, given=None):
        return ModelLayout.from_arrays(model.state_dict(), given).classifier_names

    assert found(Net()) == ("head.weight", "head.bias")  # bn's running stats are not parameters
    assert found(Net(head_bias=False)) == ("head.weight",)
    assert found(nn.Linear(3, 2)) == ("weight", "bias")
    with pytest.raises(ValueError, match=r"cannot tell the classifier.*\['norm.weight', "
                                         r"'norm.bias'\].*classifier="):
        found(Net(norm_last=True))
    assert found(Net(norm_last=True), ["head", "norm"]) == (
        "head.weight", "head.bias", "norm.weight", "norm.bias")
    with pytest.raises(ValueError, match="must be the model's last parameters"):
        found(Net(norm_last=True), "head")
    with pytest.raises(ValueError, match=r"classifier \['fc'\] names no parameter"):
        found(Net(), "fc")
    layout = ModelLayout.from_arrays(Net().state_dict())
    assert [n for n, _ in layout.named_parameters()] == [
        n for n, _ in Net().named_parameters()]
    for name in ("mlp", "cnn", "resnet18", "vgg11", "femnist-cnn", "char-lstm"):
        shape = {"mlp": (1, 28, 28), "femnist-cnn": (1, 28, 28), "char-lstm": (80,)}
        model = build_model(name, shape.get(name, (3, 32, 32)), 10)
        given = "classifier" if name == "vgg11" else None  # VGG-11's is three linear layers
        assert found(model, given) == model.classifier_names, name
        assert find_classifier(list(model.named_parameters()), given) == model.classifier_names


def test_gc_needs_a_classifier_only_where_it_is_used():
    from torch import nn

    init = dict(nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)).state_dict())
    ds = small_deltas(0, 2, init)
    run(FedACG(min_train_nodes=2, fraction_evaluate=0.0), deltas(ds, [1, 1], []), init,
        rounds=1, nodes=2)  # no GC: the ending does not matter
    run(Method("globalgc", min_train_nodes=2, fraction_evaluate=0.0), deltas(ds, [1, 1], []),
        init, rounds=1, nodes=2)  # global GC on every tensor: no classifier needed either
    with pytest.raises(ValueError, match="GCFed: cannot tell the classifier"):
        run(GCFed(min_train_nodes=2), deltas(ds, [1, 1], []), init, rounds=1, nodes=2)
    strategy = GCFed(classifier="1", min_train_nodes=2, fraction_evaluate=0.0)
    run(strategy, deltas(ds, [1, 1], []), init, rounds=1, nodes=2)
    assert strategy.client_config["method.classifier"] == ["1.weight", "1.bias"]


def test_settings_are_checked_when_built_and_name_the_fix():
    with pytest.raises(ValueError, match=r"FedACG: lam = 1.5: out of range"):
        FedACG(lam=1.5)
    with pytest.raises(ValueError, match="dataset is a setting of this project's app"):
        FedACG(dataset="cifar10")
    with pytest.raises(ValueError, match="betta is not a setting .did you mean beta"):
        FedACG(betta=0.1)
    with pytest.raises(ValueError, match="unknown method 'fedac' .did you mean 'fedacg'"):
        Method("fedac")
    with pytest.raises(ValueError, match=r"Method\('fedavg'\): beta = 0.5 is a knob of "
                                         "'proximal'"):
        Method("fedavg", beta=0.5)
    init = random_state(0)
    handler = deltas(small_deltas(0, 2, init), [1, 1], [])
    with pytest.raises(ValueError, match=r"'method.name'\]: the 'method.' keys"):
        run(FedACG(min_train_nodes=2), handler, init, nodes=2,
            train_config=ConfigRecord({"method.name": "x"}))
    with pytest.raises(ValueError, match="give the clients' learning rate once"):
        run(FedACG(min_train_nodes=2, lr=0.05), handler, init, nodes=2,
            train_config=ConfigRecord({"lr": 0.1}))
    with pytest.raises(ValueError, match=r"Method\('fedcm'\): 'lam' = 0.5: .* set lam = 0"):
        run(Method("fedcm", lam=0.5, min_train_nodes=2), handler, init, nodes=2)
    with pytest.raises(ValueError, match=r"server-rule 'fedcm' needs the clients' learning "
                                         "rate: pass lr="):
        run(Method("fedcm", min_train_nodes=2), handler, init, nodes=2,
            train_config=ConfigRecord())


def test_lr_set_by_the_strategy_decays_and_reaches_the_rules():
    init = random_state(0)
    configs = []

    def handler(i, msg):
        configs.append(dict(msg.content["config"]))
        return deltas(small_deltas(0, 2, init), [1, 1], [])(i, msg)

    run(FedACG(lr=0.2, lr_decay=0.5, min_train_nodes=2, fraction_evaluate=0.0), handler, init,
        nodes=2, rounds=2, train_config=ConfigRecord())
    assert [c["lr"] for c in configs] == [0.2, 0.2, 0.1, 0.1]
    assert {c["method.lr"] for c in configs} == {0.2}
    # without lr=..., a rule that needs it reads train_config's (FedCM: Delta = -d / (K lr)),
    # and the clients are sent it (SCAFFOLD's: their K lr)
    for method in ("fedcm", "scaffold"):
        strategy = Method(method, min_train_nodes=2, fraction_evaluate=0.0)
        with pytest.raises(NothingLearned):  # (these replies lack the method's metric, record)
            run(strategy, handler, init, nodes=2, rounds=1,
                train_config=ConfigRecord({"lr": 0.03}))
        assert configs[-1]["method.lr"] == 0.03 and configs[-1]["method.name"] == method
        if method == "fedcm":
            assert strategy.rule.lr == 0.03


def test_train_configs_lr_is_checked_as_the_run_configs():
    init = random_state(0)
    handler = deltas(small_deltas(0, 2, init), [1, 1], [])
    for bad in (0.0, -0.1, 2000.0, True):
        with pytest.raises(ValueError, match=r"FedACG: train_config's 'lr' = .*(out of range|"
                                             r"expected float); allowed: float in \(0, 1000\]"):
            run(FedACG(min_train_nodes=2), handler, init, nodes=2,
                train_config=ConfigRecord({"lr": bad}))


def test_the_rules_that_read_lr_say_so():
    """A named strategy refuses to build a rule that reads the clients' learning rate when it
    has none (`ServerRule.uses_lr`): every registered rule, built without 'lr', fails on it
    exactly when it says it uses it."""
    import methods
    from run_config import resolve_strategy
    from strategies.assembly import build_rule

    state = build_model("cnn", (1, 8, 8), 10, seed=0).state_dict()
    layout = ModelLayout.from_arrays(state)
    seen = set()
    for name in methods.method_names():
        settings = resolve_strategy({"method": name})
        rule = settings["server-rule"]
        if rule in seen:
            continue
        seen.add(rule)
        without = {k: v for k, v in settings.items() if k != "lr"}
        try:
            build_rule(without, layout, state)
            reads_lr = False
        except KeyError as err:
            assert err.args == ("lr",), (rule, err)
            reads_lr = True
        assert reads_lr == methods.SERVER_RULES[rule].uses_lr, rule
    assert {"fedcm", "momentum", "scaffold", "feddc", "fedadam"} <= seen


def test_a_named_strategys_settings_are_the_apps_for_its_keys_and_no_others():
    """The settings a named strategy builds its rule from: the run config's values of the
    strategy keys (same defaults, presets and types), and none of the app's keys."""
    import methods
    from run_config import KEYS

    strategy_keys = {k.name for k in KEYS if k.strategy} | {"method"}
    for name in methods.method_names():
        ours = Method(name).cfg
        assert set(ours) == strategy_keys, name
        parts = [methods.CLIENT_PARTS[p] for p in methods.METHODS[name].client_parts]
        model = [p.models[0] for p in parts if p.models][:1]  # FedMLB: ResNet-18's
        app = resolve({"method": name, **({"model": model[0]} if model else {})})
        assert ours == {k: app[k] for k in strategy_keys}, name
    ours = FedAGM(tau=2, alpha=0.5, lr=1).cfg  # typed as the run config types them
    assert (ours["eta"], ours["alpha"], ours["lr"]) == (2.0, 0.5, 1.0)
    assert type(ours["eta"]) is float and type(ours["lr"]) is float


def test_every_method_is_reachable_by_name_from_arrays_alone():
    """Method(name) for every registered method builds its server rule from a model's arrays
    (no run config, no model object), and tells the clients which method it is."""
    import methods

    arrays = ArrayRecord(build_model("cnn", (1, 8, 8), 10, seed=0).state_dict())
    assert len(methods.method_names()) >= 30
    for name in methods.method_names():
        strategy = Method(name)
        strategy._train_config = ConfigRecord({"lr": 0.05})
        strategy._build(arrays)
        assert strategy.rule.name == strategy.cfg["server-rule"], name
        assert strategy.client_config["method.name"] == name
        # its reply records are screened as declared (SCAFFOLD's, FedDC's: one tensor per
        # parameter, here every array of the CNN)
        assert set(strategy.up_records) == set(strategy.rule.up), name
        for layout in strategy.up_records.values():
            assert {k: v.shape for k, v in layout.items()} == {
                k: a.numpy().shape for k, a in arrays.items()}, name


def test_the_summary_names_the_method_and_after_start_its_rule(caplog):
    import logging

    strategy = FedACGGCFed(lam=0.5, min_train_nodes=2, fraction_evaluate=0.0)
    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy.summary()  # before start: no rule yet
        assert "FedACGGCFed: method 'fedacg+gcfed'" in caplog.text
        assert "Server rule" not in caplog.text
        init = random_state(0)
        run(strategy, deltas(small_deltas(0, 2, init), [1, 1], []), init, rounds=1, nodes=2)
    assert "Server rule: momentum: lookahead=True lam=0.5" in caplog.text


def test_flower_fedavgm_keywords_mean_the_same_as_flowers_fedavgm():
    """server_momentum / server_learning_rate are lam / eta: the same three rounds as Flower's
    own FedAvgM with those keywords."""
    from flwr.serverapp.strategy import FedAvgM

    init = random_state(7)
    ds = small_deltas(3, 4, init)
    ours = run(Method("fedavgm", server_momentum=0.5, server_learning_rate=0.7,
                      min_train_nodes=4, fraction_evaluate=0.0), deltas(ds, SIZES, []), init)
    flower = run(FedAvgM(server_momentum=0.5, server_learning_rate=0.7, min_train_nodes=4,
                         min_available_nodes=4, fraction_evaluate=0.0),
                 deltas(ds, SIZES, []), init)
    for k in init:
        torch.testing.assert_close(ours[k], flower[k], atol=1e-6, rtol=0)
    assert FedACG(server_momentum=0.6).cfg["lam"] == 0.6
    assert FedAGM(server_learning_rate=0.4).cfg["eta"] == 0.4


def test_the_signatures_show_flowers_keywords_and_the_knobs():
    import inspect

    fedavg = {n: p.default for n, p in inspect.signature(FedAvg).parameters.items()}
    for cls, knobs in [(FedACG, {"lam": 0.85, "beta": 0.01}),
                       (FedAGM, {"lam": 0.85, "beta": 0.01, "tau": 1.0, "alpha": 1.0}),
                       (GCFed, {"gc_vectors": "center", "classifier": None}),
                       (FedACGGCFed, {"lam": 0.85, "beta": 0.01, "gc_vectors": "center"}),
                       (Method, {"method": inspect.Parameter.empty})]:
        shown = {n: p.default for n, p in inspect.signature(cls).parameters.items()}
        assert {n: shown.get(n, "missing") for n in fedavg} == fedavg, cls
        assert {n: shown.get(n, "missing") for n in knobs} == knobs, cls
        assert shown["server_momentum"] is None and shown["server_learning_rate"] is None
    # the shown defaults are the ones used
    assert (FedAGM().cfg["lam"], FedAGM().cfg["eta"], FedAGM().cfg["alpha"]) == (0.85, 1.0, 1.0)


@pytest.mark.parametrize("build, message", [
    (lambda: FedAGM(tau=0), r"FedAGM: tau = 0.0: out of range"),
    (lambda: FedACG(lam=0.5, server_momentum=0.9),
     r"FedACG: lam=0.5 and server_momentum=0.9 set the same knob \(lam\)"),
    (lambda: FedAGM(tau=0.5, server_learning_rate=0.9),
     r"FedAGM: tau=0.5 and server_learning_rate=0.9 set the same knob \(eta\)"),
    (lambda: GCFed(classifier=123), r"GCFed: classifier=123: give the classifier's"),
    (lambda: FedACGGCFed(classifier=[]), r"FedACGGCFed: classifier=\[\]: give"),
    (lambda: Method("gcfed", classifier=["fc", 3]), r"classifier=\['fc', 3\]: give"),
    (lambda: FedACG(server_momentum=1.5), r"FedACG: server_momentum = 1.5: out of range"),
], ids=["tau", "lam-twice", "eta-twice", "classifier-int", "classifier-empty",
        "classifier-mixed", "alias-range"])
def test_every_error_names_the_argument_the_user_passed(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_start_logs_what_flowers_fedavg_start_logs(caplog):
    """The class's name, the initial and per-round global evaluation of evaluate_fn, and the
    sampled nodes as nodes (their partitions only where the strategy knows them): the lines of
    Flower's own FedAvg.start, side by side."""
    import logging

    init = random_state(0)
    calls = []

    def evaluate_fn(server_round, arrays):
        calls.append(server_round)
        return MetricRecord({"accuracy": 0.25 * server_round})

    logs = {}
    for strategy in (FedAvg(min_train_nodes=2, min_available_nodes=2, fraction_evaluate=0.0),
                     FedACG(min_train_nodes=2, fraction_evaluate=0.0)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="flwr"):
            strategy.start(grid=FakeGrid(2, deltas(small_deltas(0, 2, init), [1, 1], [])),
                           initial_arrays=ArrayRecord(init), num_rounds=2,
                           train_config=ConfigRecord({"lr": 0.1}), evaluate_fn=evaluate_fn)
        logs[type(strategy).__name__] = [r.getMessage() for r in caplog.records]
    for name, lines in logs.items():
        assert f"Starting {name} strategy:" in lines, name
        assert "Initial global evaluation results: {'accuracy': 0.0}" in lines, name
        assert lines.count("Global evaluation") == 2, name
        assert "\t└──> MetricRecord: {'accuracy': 0.5}" in lines, name
    sampled = [line for line in logs["FedACG"] if "sampled 2 nodes" in line]
    assert sampled and all("(nodes [" in line for line in sampled), sampled
    assert calls == [0, 1, 2] * 2
