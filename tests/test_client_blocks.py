"""The client's share of a method in a training loop of one's own (client_app/own_app.py,
docs/own-app.md), against hand computations and the app's own local update."""

import pytest
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import FedAvgM as FlowerFedAvgM
from flwr.serverapp.strategy import FedProx as FlowerFedProx
from torch import nn

from client_app import LocalMethod, query_reply
from client_app.client_step import LocalContext
from client_app.local_update import LocalConfig, batches, local_update
from client_app.settings import client_parts, local_gc_layers
from fakegrid import FakeGrid
from methods.fedpaq import UplinkQuantizer
from models import build_model
from run_config import resolve
from strategies import FedACG, FedACGGCFed, GCFed, Method


def instruction(strategy, model, lr=0.1, nodes=2) -> Message:
    """The train instruction the strategy sends first (what a node receives); lr=None: a
    train_config without 'lr'."""
    arrays = ArrayRecord(model.state_dict())
    given = {} if lr is None else {"lr": lr}
    strategy._train_config = ConfigRecord(given)
    return list(strategy.configure_train(1, arrays, ConfigRecord(given),
                                         FakeGrid(nodes, None)))[0]


def own_loop(msg, model, x, y, steps, lr, batch=4, context=None, **kw):
    """A user's loop: plain SGD over fixed mini-batches, with the method's two calls."""
    method = LocalMethod(msg, model, context, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for k in range(steps):
        xb, yb = x[k * batch:(k + 1) * batch], y[k * batch:(k + 1) * batch]
        opt.zero_grad()
        method.backward(xb, yb)
        method.before_step()
        opt.step()
    return method


def data(n=8, d=3, classes=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def grads64(model, w, x, y):
    """The CE gradient at weights w (name -> float64 tensor), computed apart in float64."""
    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    logits = torch.func.functional_call(model.double(), params, (x.double(),))
    model.float()
    return dict(zip(params, torch.autograd.grad(F.cross_entropy(logits, y), list(params.values()))))


def test_fedacg_proximal_term_two_steps_by_hand():
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(3, 2), data()
    phi = {k: v.detach().double().clone() for k, v in model.named_parameters()}
    msg = instruction(FedACG(beta=0.5), model)
    own_loop(msg, model, x, y, steps=2, lr=0.1)
    # w1 = phi - lr g(phi);  w2 = w1 - lr (g(w1) + beta (w1 - phi))
    g1 = grads64(nn.Linear(3, 2), phi, x[:4], y[:4])
    w1 = {k: phi[k] - 0.1 * g1[k] for k in phi}
    g2 = grads64(nn.Linear(3, 2), w1, x[4:], y[4:])
    w2 = {k: w1[k] - 0.1 * (g2[k] + 0.5 * (w1[k] - phi[k])) for k in phi}
    for k, v in model.named_parameters():
        torch.testing.assert_close(v.detach().double(), w2[k], atol=1e-6, rtol=0)


def test_gcfed_local_gc_centralizes_the_features_only():
    torch.manual_seed(1)
    model, (x, y) = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), data()
    w0 = {k: v.detach().double().clone() for k, v in model.named_parameters()}
    msg = instruction(GCFed(), model)
    assert msg.content["config"]["method.classifier"] == ["2.weight", "2.bias"]
    method = own_loop(msg, model, x, y, steps=1, lr=0.1)
    assert [p is q for p, q in zip(method.local_gc, list(model.parameters())[:2])] == [True] * 2
    g = grads64(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), w0, x[:4], y[:4])
    expected = {"0.weight": g["0.weight"] - g["0.weight"].mean(dim=1, keepdim=True),
                "0.bias": g["0.bias"] - g["0.bias"].mean(),  # gc_vectors 'center'
                "2.weight": g["2.weight"], "2.bias": g["2.bias"]}  # the classifier: no GC
    for k, v in model.named_parameters():
        torch.testing.assert_close(v.detach().double(), w0[k] - 0.1 * expected[k],
                                   atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", ["fedacg+gcfed", "fedagm", "fedlc", "fedsol", "moon",
                                    "fedntd", "fedacg+fedpaq"])
def test_same_steps_as_the_apps_local_update(method):
    """The app's local update and a user's loop with LocalMethod, on the same batches of the
    project's CNN: the same weights and the same reply records (FedPAQ's: the same codes)."""
    settings = {"alpha": 0.7} if method == "fedagm" else {}
    x, y = torch.randn(24, 1, 8, 8), torch.arange(24) % 10
    steps, lr, batch = 3, 0.05, 8
    order = list(batches(len(y), batch, steps, torch.Generator().manual_seed(3)))
    xs, ys = torch.cat([x[i] for i in order]), torch.cat([y[i] for i in order])
    app_model = build_model("cnn", (1, 8, 8), 10, seed=0)
    own_model = build_model("cnn", (1, 8, 8), 10, seed=0)
    msg = instruction(Method(method, **settings), own_model, lr=lr)
    cfg = resolve({"method": method, **settings})
    ctx = LocalContext(state=RecordDict(), num_classes=10, train_y=y, server_round=1)
    # as client_app.app adds it
    codec = (UplinkQuantizer(UplinkQuantizer.Settings.from_config(cfg)) if cfg["uplink-bits"]
             else None)
    local_update(app_model, x, y,
                 LocalConfig(lr=lr, local_iterations=steps, batch_size=batch, alpha=cfg["alpha"],
                             local_gc_layers=local_gc_layers(cfg, app_model),
                             gc_vectors=cfg["gc-vectors"]),
                 torch.Generator().manual_seed(3),
                 parts=(codec,) * bool(codec) + client_parts(cfg), ctx=ctx)
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": 2},
                      state=RecordDict(), run_config={})
    own = own_loop(msg, own_model, xs, ys, steps, lr, batch, context, train_labels=y,
                   num_classes=10)
    assert own.steps == steps
    records = own.end()  # (FedPAQ's end() turns the model into phi + Q(d), as the app's does)
    for (k, a), b in zip(app_model.state_dict().items(), own_model.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=k)
    assert records.keys() - {"arrays"} == ctx.up.keys()
    if codec:
        sent, app_sent = records["arrays"], codec.reply_arrays(app_model)
        assert "fedpaq.norms" in sent and sent.keys() == app_sent.keys()
        for k in sent:
            assert (sent[k].numpy() == app_sent[k].numpy()).all(), k


def test_fedmlb_names_the_model_it_runs_on():
    """FedMLB's part runs on this project's ResNet-18 only: the strategy says so in the
    settings it sends, and another model is refused by the part with the reason."""
    strategy = Method("fedmlb")
    assert strategy.settings["model"] == "resnet18"
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    msg = instruction(strategy, model)
    assert msg.content["config"]["method.model"] == "resnet18"
    with pytest.raises(TypeError, match="FedMLB needs a model with stages .ResNet-18-GN"):
        LocalMethod(msg, model)


def test_the_client_parts_that_read_lr_say_so():
    """A client of a named strategy refuses a part that reads the clients' learning rate when
    the strategy sent none (`ClientPart.uses_lr`): every registered client part, built by the
    client's builder from the clients' settings without 'lr', fails on it exactly when it says
    it uses it (and every one builds with them, 'lr' included: they hold every key it reads);
    the uplink codecs likewise."""
    import methods
    from run_config import resolve_client

    readers = set()
    parts = [(name, None) for name in methods.CLIENT_PARTS]
    for part, codec in [*parts, *((c.name, c) for c in methods.UPLINK_CODECS.values())]:
        settings = resolve_client({"method": "fedavg", "client-objective": part if codec is None
                                   else "none"})
        without = {k: v for k, v in settings.items() if k != "lr"}

        def build(cfg):
            return client_parts(cfg) if codec is None else codec(codec.Settings.from_config(cfg))

        build(settings)
        try:
            build(without)
            reads_lr = False
        except KeyError as err:
            assert err.args == ("lr",), (part, err)
            reads_lr = True
        declared = (codec or methods.CLIENT_PARTS[part]).uses_lr
        assert reads_lr == declared, part
        readers |= {part} if reads_lr else set()
    assert readers == {"scaffold", "feddc"}


def test_a_client_sent_no_lr_refuses_the_parts_that_read_it_only():
    model = nn.Linear(3, 2)
    for method in ("scaffold", "feddc"):
        msg = instruction(Method(method), model, lr=None)
        assert "lr" not in msg.content["config"] and "method.lr" not in msg.content["config"]
        with pytest.raises(ValueError, match=f"method '{method}' needs the clients' learning "
                                             r"rate on the clients: give it to the strategy "
                                             r"\(lr=...\) or in start's train_config"):
            LocalMethod(msg, model, partition_sizes=[4, 4])
    method = LocalMethod(instruction(Method("fedacg"), model, lr=None), model)
    assert method.ctx.lr == 0.0  # (not known: the user's optimizer has it)
    method = LocalMethod(instruction(Method("scaffold", lr=0.3), model, lr=None), model)
    assert method.parts[0].lr == 0.3 and method.ctx.lr == 0.3


def test_the_clients_settings_are_the_run_configs_for_the_keys_they_read():
    """The settings a client builds its parts from (run_config.resolve_client): the run
    config's values of the keys the client side reads (same defaults, presets and types); the
    server's settings it is sent are allowed and not read; others are refused."""
    import methods
    from run_config import KEYS, resolve_client

    client_keys = ({k.name for k in KEYS if k.strategy and k.group == "client"}
                   | {"method", "seed"})  # (FedPAQ's codec reads the seed)
    for name in methods.method_names():
        ours = resolve_client({"method": name})
        assert set(ours) == client_keys, name
        parts = [methods.CLIENT_PARTS[p] for p in methods.METHODS[name].client_parts]
        model = [p.models[0] for p in parts if p.models][:1]  # FedMLB: ResNet-18's
        app = resolve({"method": name, **({"model": model[0]} if model else {})})
        assert ours == {k: app[k] for k in client_keys}, name
    ours = resolve_client({"method": "fedagm", "alpha": 1, "eta": "x", "model": "resnet18"})
    assert ours["alpha"] == 1.0 and type(ours["alpha"]) is float and "eta" not in ours
    with pytest.raises(ValueError, match=r"^the server's method settings: 'method.beta' = "
                                         r"-1.0: out of range; allowed: float in \[0, 10000\]"
                                         r" \| 'preset'\.$"):
        LocalMethod(_sent({"method.name": "fedprox", "method.beta": -1.0}), nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"the server's method settings: not a setting of a "
                                         r"strategy: 'local-epochs'"):
        LocalMethod(_sent({"method.name": "fedacg", "method.local-epochs": 3}), nn.Linear(2, 2))


def _sent(config) -> Message:
    return Message(RecordDict({"arrays": ArrayRecord(nn.Linear(2, 2).state_dict()),
                               "config": ConfigRecord({"lr": 0.1, **config})}),
                   dst_node_id=1, message_type="train")


def test_feddc_in_a_loop_of_ones_own_takes_its_own_steps_as_k():
    """FedDC's K in d_i / (K lr) (docs/baselines.md#feddc): a loop of one's own, whose
    settings name no local-iterations / local-epochs, takes the steps it took, also where it
    hands the partition sizes (for om_i): G_i+ - G_i = -G/om_i - d_i / (K lr), sent times
    om_i, by hand."""
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(3, 2), data(n=12)
    phi = {k: v.detach().clone() for k, v in model.named_parameters()}
    msg = instruction(Method("feddc"), model, lr=0.1, nodes=3)
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 1,
                                                        "num-partitions": 3},
                      state=RecordDict(), run_config={})
    sizes, steps = [4, 12, 8], 3
    method = own_loop(msg, model, x, y, steps=steps, lr=0.1, context=context,
                      partition_sizes=sizes)
    sent = method.end()["feddc-dg"].to_torch_state_dict()
    g = msg.content["feddc-g"].to_torch_state_dict()
    om = 12 * 3 / sum(sizes)  # n_i N / sum_j n_j
    for k, w in model.named_parameters():
        d = w.detach().double() - phi[k].double()
        expected = om * (-g[k].double() / om - d / (steps * 0.1))
        torch.testing.assert_close(sent[k].double(), expected, atol=1e-6, rtol=0, msg=k)


def flower_instruction(model, **config) -> Message:
    """A train instruction as Flower's own strategies send it: no 'method.*' key."""
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()),
                               "config": ConfigRecord({"lr": 0.1, "server-round": 1, **config})}),
                   dst_node_id=1, message_type="train")


@pytest.mark.parametrize("mu", [None, 0.5], ids=["fedavg", "fedprox"])
def test_an_instruction_of_flowers_own_strategies_trains_plainly_or_with_its_mu(mu, caplog):
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(3, 2), data()
    phi = {k: v.detach().double().clone() for k, v in model.named_parameters()}
    msg = flower_instruction(model, **({} if mu is None else {"proximal-mu": mu}))
    with caplog.at_level("INFO", logger="flwr"):
        method = own_loop(msg, model, x, y, steps=2, lr=0.1)
    assert method.cfg["method"] == ("fedavg" if mu is None else "fedprox")
    # FedProx (Li et al.): loss + mu/2 ||w - phi||^2, gradient + mu (w - phi); FedAvg: mu = 0
    m = mu or 0.0
    g1 = grads64(nn.Linear(3, 2), phi, x[:4], y[:4])
    w1 = {k: phi[k] - 0.1 * g1[k] for k in phi}
    g2 = grads64(nn.Linear(3, 2), w1, x[4:], y[4:])
    w2 = {k: w1[k] - 0.1 * (g2[k] + m * (w1[k] - phi[k])) for k in phi}
    for k, v in model.named_parameters():
        torch.testing.assert_close(v.detach().double(), w2[k], atol=1e-6, rtol=0)
    assert method.end() == {}  # nothing but the user's own records goes back


def test_a_bad_flower_proximal_mu_names_the_key():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="'proximal-mu' is 'x'.*FedProx"):
        LocalMethod(flower_instruction(model, **{"proximal-mu": "x"}), model)
    with pytest.raises(ValueError, match=r"^the train instruction: 'proximal-mu' = -0.5: out of "
                                         r"range; allowed: float in \[0, 10000\]"):
        LocalMethod(flower_instruction(model, **{"proximal-mu": -0.5}), model)


def test_a_bad_classifier_names_the_method():
    other = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    msg = instruction(GCFed(classifier="1"), other)
    with pytest.raises(ValueError, match=r"local GC of method 'gcfed' on this model: classifier "
                                         r"\['1.weight', '1.bias'\] names no parameter"):
        LocalMethod(msg, nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2)))


@pytest.mark.parametrize("node_config", [
    {"client-id": 2, "num-clients": 4},  # deploy/supernode.sh's names
    {"partition-id": 2, "num-partitions": 4},  # the older names
])
def test_the_client_id_is_read_by_either_name(node_config):
    model = nn.Linear(3, 2)
    context = Context(run_id=1, node_id=9, node_config=node_config, state=RecordDict(),
                      run_config={})
    method = LocalMethod(instruction(Method("scaffold"), model), model, context)
    assert (method.ctx.partition_id, method.ctx.num_partitions) == (2, 4)
    reply = query_reply(Message(RecordDict(), dst_node_id=9, message_type="query"), context)
    metrics = reply.content["metrics"]
    assert (metrics["partition-id"], metrics["num-partitions"]) == (2, 4)
    context.node_config.pop(next(iter(node_config)))
    with pytest.raises(KeyError, match="node config lacks client-id"):
        query_reply(Message(RecordDict(), dst_node_id=9, message_type="query"), context)


# --- end to end: the strategies with a ClientApp of one's own -------------------------------
def own_client_app(seed=0):
    """A user's ClientApp `train` on its own tiny linearly separable data, one node per
    partition: `LocalMethod` in its loop, `query_reply` for partition queries."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(3, 6, generator=g) * 3

    def node_data(pid):
        g = torch.Generator().manual_seed(100 + pid)
        y = torch.randint(0, 3, (30,), generator=g)
        return centers[y] + torch.randn(30, 6, generator=g), y

    def train(msg, context):
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        x, y = node_data(context.node_id)
        method = LocalMethod(msg, model, context, train_labels=y, num_classes=3)
        opt = torch.optim.SGD(model.parameters(), lr=msg.content["config"]["lr"])
        for i in range(0, 30, 10):
            opt.zero_grad()
            loss = method.backward(x[i:i + 10], y[i:i + 10])
            method.before_step()
            opt.step()
        metrics = MetricRecord({"num-examples": 30, "train-loss": float(loss),
                                "local-steps": method.steps})
        return RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics,
                           **method.end()})

    contexts = {}

    def handler(i, msg):
        node_config = {"client-id": i, "num-clients": 4} if i % 2 else {  # supernode.sh's
            "partition-id": i, "num-partitions": 4}  # names, and the older ones
        context = contexts.setdefault(i, Context(
            run_id=1, node_id=i, node_config=node_config, state=RecordDict(), run_config={}))
        if msg.metadata.message_type == "query":
            return query_reply(msg, context)
        return train(msg, context)

    return handler, node_data


@pytest.mark.parametrize("strategy", [
    lambda: FedACGGCFed(),
    lambda: Method("scaffold", identify_nodes=True, local_momentum=0.0),
    lambda: Method("fedpaq"),
    lambda: Method("feddyn-fedacg", identify_nodes=True),
    lambda: Method("fedcm"),
    lambda: Method("fedlc-gcfed"),
    lambda: Method("fedadam", eta=0.1),
    lambda: Method("moon"),
    lambda: Method("feddecorr"),
], ids=["fedacg+gcfed", "scaffold", "fedpaq", "feddyn-fedacg", "fedcm", "fedlc-gcfed",
        "fedadam", "moon", "feddecorr"])
def test_every_reply_of_a_clientapp_of_ones_own_is_used_and_it_learns(strategy):
    strategy = strategy()
    strategy.min_train_nodes = strategy.min_available_nodes = 4
    strategy.fraction_evaluate = 0.0
    handler, node_data = own_client_app()
    seen = []
    strategy.round_metrics_fn = lambda r, m: seen.append(dict(m))
    torch.manual_seed(0)  # the initial model: the same whatever ran before
    init = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    # 10 rounds: FedCM's clients follow the global direction mostly (alpha 0.1) and learn
    # slowest; over 10 initial models its accuracy after 10 rounds was 0.69-1.0, after 4 0.4-1.0
    result = strategy.start(grid=FakeGrid(4, handler), num_rounds=10,
                            initial_arrays=ArrayRecord(init.state_dict()),
                            train_config=ConfigRecord({"lr": 0.1}))
    assert [(m["replies"], m["dropped"], m["skipped"]) for m in seen] == [(4, 0, 0)] * 10
    init.load_state_dict(result.arrays.to_torch_state_dict())
    x, y = zip(*(node_data(p) for p in range(4)))
    acc = (init(torch.cat(x)).argmax(1) == torch.cat(y)).float().mean()
    assert acc > 0.6, acc  # 3 classes: chance is 1/3


@pytest.mark.parametrize("strategy", [
    lambda: FlowerFedAvg(fraction_evaluate=0.0, min_train_nodes=4, min_available_nodes=4),
    lambda: FlowerFedProx(proximal_mu=0.01, fraction_evaluate=0.0, min_train_nodes=4,
                          min_available_nodes=4),
    lambda: FlowerFedAvgM(server_momentum=0.5, fraction_evaluate=0.0, min_train_nodes=4,
                          min_available_nodes=4),
    lambda: FedACG(fraction_evaluate=0.0, min_train_nodes=4, min_available_nodes=4),
], ids=["flower-fedavg", "flower-fedprox", "flower-fedavgm", "fedacg"])
def test_the_same_clientapp_learns_under_flowers_strategies_and_ours(strategy):
    """One ClientApp with LocalMethod in its loop, unchanged, under each server strategy."""
    handler, node_data = own_client_app()
    torch.manual_seed(0)  # the initial model: the same whatever ran before
    init = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    result = strategy().start(grid=FakeGrid(4, handler), num_rounds=4,
                              initial_arrays=ArrayRecord(init.state_dict()),
                              train_config=ConfigRecord({"lr": 0.1}))
    assert sorted(result.train_metrics_clientapp) == [1, 2, 3, 4]
    init.load_state_dict(result.arrays.to_torch_state_dict())
    x, y = zip(*(node_data(p) for p in range(4)))
    acc = (init(torch.cat(x)).argmax(1) == torch.cat(y)).float().mean()
    assert acc > 0.6, acc  # 3 classes: chance is 1/3


def test_a_clientapp_of_ones_own_keeps_client_state_by_round_as_the_apps_nodes(tmp_path,
                                                                             monkeypatch):
    """SCAFFOLD in an app of one's own: the strategy names the version of each client's state
    to start from (as the app's does) and `LocalMethod` keeps one version per round on the
    node's disk, none in Context.state; every client of every round found the version named."""
    monkeypatch.setenv("FEDACG_CACHE_DIR", str(tmp_path))
    strategy = Method("scaffold", identify_nodes=True, min_train_nodes=4, min_available_nodes=4,
                      fraction_evaluate=0.0)
    assert strategy.client_state is not None
    handler, _ = own_client_app()
    torch.manual_seed(0)
    init = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    strategy.start(grid=FakeGrid(4, handler), num_rounds=3,
                   initial_arrays=ArrayRecord(init.state_dict()),
                   train_config=ConfigRecord({"lr": 0.1}))
    token = strategy.client_state.run_token
    folders = sorted((tmp_path / "client-state" / token).iterdir())
    assert [f.name for f in folders] == ["p0", "p1", "p2", "p3"]
    for folder in folders:  # the version each started round 3 from and round 3's; no older one
        assert sorted(f.name for f in folder.iterdir()) == ["scaffold-c-i.r2.pt",
                                                            "scaffold-c-i.r3.pt"]
    assert strategy.client_state.accepted == {0: 3, 1: 3, 2: 3, 3: 3}
