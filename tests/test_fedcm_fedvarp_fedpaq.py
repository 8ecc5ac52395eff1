"""FedCM, FedVARP and FedPAQ's uplink codec (docs/baselines.md#fedcm, #fedvarp, #fedpaq):
the maths against hand computations and second plain implementations, and each method end to
end through the real ServerApp and ClientApp in-process."""

import math
from types import SimpleNamespace

import pytest
import torch

from methods.fedcm import FedCMRule, fedcm_grad_
from methods.fedpaq import (UplinkDecoder, UplinkQuantizer, dequantize, pack_codes, quantize,
                            quantized_names, unpack_codes)
from methods.fedvarp import FedVARPRule, UpdateTable, varp_step
from pins_helpers import final_model, real_client, recording, resolved, run_folder, run_server_app

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

NODES = 4
BASE = {"dataset": "digits", "num-server-rounds": 2, "local-iterations": 2, "fraction-train": 0.5,
        "seed": 3}


def run(tmp_path, name, **keys):
    rc = {**BASE, **keys, "out-dir": str(tmp_path), "run-name": name}
    log = []
    run_server_app(rc, NODES, handler=recording(real_client(rc, NODES), log))
    return rc, log


def flat(state):
    return torch.cat([v.reshape(-1).float() for v in state.values()])


# --- FedPAQ: the quantizer ------------------------------------------------------------------
def draws(x, s, n=10_000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([dequantize(*quantize(x, s, gen), s) for _ in range(n)])


def test_quantizer_is_unbiased_and_within_nu_over_s():
    x = torch.tensor([0.3, -1.2, 0.05, 2.0, -0.7, 0.0])
    s = 4
    q = draws(x, s)
    nu = x.norm()
    sigma = q.std(0) / math.sqrt(len(q))
    assert ((q.mean(0) - x).abs() <= 4 * sigma + 1e-7).all(), (q.mean(0), x)
    assert ((q - x).abs() <= nu / s * (1 + 1e-6)).all()  # every draw, every coordinate
    assert (q[:, 5] == 0).all()  # x_j = 0 is always sent as 0


def test_quantizer_hand_case_3_4_with_one_level():
    q = draws(torch.tensor([3.0, 4.0]), 1)  # nu = 5, r_1 = 0.6, r_2 = 0.8
    assert set(q[:, 0].tolist()) <= {0.0, 5.0} and set(q[:, 1].tolist()) <= {0.0, 5.0}
    p5 = (q[:, 0] == 5).float().mean().item()
    assert abs(p5 - 0.6) <= 4 * math.sqrt(0.6 * 0.4 / len(q)), p5


def test_quantizer_fine_levels_and_zero():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    q = dequantize(*quantize(x, 2 ** 16, torch.Generator().manual_seed(2)), 2 ** 16)
    assert (q - x).abs().max() <= x.norm() * 2 ** -16 * (1 + 1e-5)
    levels, nu = quantize(torch.zeros(5), 8)
    assert nu == 0 and (dequantize(levels, nu, 8) == 0).all()


def test_quantizer_rounding_stream_ignores_the_default_dtype():
    """The rounding noise is drawn in float32 whatever torch's default dtype: the levels are
    those of float32 uniforms from the same generator (u_j < r_j - floor(r_j) rounds up)."""
    x = torch.randn(257, generator=torch.Generator().manual_seed(3))
    s = 8
    r = s * x.abs() / x.norm()
    u = torch.rand(257, generator=torch.Generator().manual_seed(4), dtype=torch.float32)
    expected = torch.sign(x).long() * (r.floor() + (u < r - r.floor()).float()).long()
    old = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            levels, _ = quantize(x, s, torch.Generator().manual_seed(4))
            assert torch.equal(levels, expected), dtype
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("bits", [1, 2, 3, 8, 9])
def test_codes_pack_to_b_plus_1_bits_and_back(bits):
    s = 2 ** (bits - 1)
    levels = torch.tensor([-s, s, 0, 1, -1] + list(range(-s, s + 1)), dtype=torch.int64)
    packed = pack_codes(levels, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(len(levels) * (bits + 1)
                                                                       / 8)
    assert torch.equal(unpack_codes(packed, len(levels), bits), levels)
    # a second plain implementation: code j's bit i is bit (j * (b + 1) + i) of the byte stream
    stream = [(int(byte) >> i) & 1 for byte in packed for i in range(8)]
    again = [sum(stream[j * (bits + 1) + i] << i for i in range(bits + 1)) - s
             for j in range(len(levels))]
    assert again == levels.tolist()


def test_tensor_sets():
    state = {"conv1.weight": torch.zeros(4, 3, 3, 3), "gn.weight": torch.zeros(4),
             "block.conv.weight": torch.zeros(4, 4, 3, 3), "fc1.weight": torch.zeros(5, 4),
             "linear.weight": torch.zeros(2, 5), "linear.bias": torch.zeros(2),
             "steps": torch.zeros(1, dtype=torch.long)}
    assert quantized_names(state, "all") == [k for k in state if k != "steps"]
    assert quantized_names(state, "gymlab") == ["block.conv.weight"]
    assert quantized_names(state, "gymlab-first-last") == ["conv1.weight", "block.conv.weight",
                                                           "linear.weight"]


# --- FedPAQ end to end -------------------------------------------------------------------------
def test_fedpaq_server_model_is_phi_plus_the_mean_of_the_decoded_updates(tmp_path):
    """The replies carry packed codes (the byte meter counts them); round 1's theta is
    phi + sum_i w_i Q(d_i), Q(d_i) decoded here by a second plain implementation."""
    rc, log = run(tmp_path, "paq", method="fedpaq", **{"num-server-rounds": 1})
    cfg = resolved(rc)
    assert cfg["uplink-bits"] == 8 and cfg["uplink-tensors"] == "all"
    phi = log[0]["phi"]
    names = quantized_names(phi, "all")
    n = sum(e["n"] for e in log)
    expect = {k: v.clone().double() for k, v in phi.items()}
    for e in log:
        model = e["model"]
        norms = model["fedpaq.norms"]
        for t, k in enumerate(names):  # the first 500 codes of each tensor, bit by bit
            m = min(500, phi[k].numel())
            bits = [(int(b) >> i) & 1 for b in model[k][:math.ceil(m * 9 / 8)] for i in range(8)]
            codes = torch.tensor([sum(bits[j * 9 + i] << i for i in range(9)) - 128
                                  for j in range(m)], dtype=torch.float64)
            expect[k].view(-1)[:m] += e["n"] / n * norms[t].double() * codes / 128
    theta = final_model(rc)
    for k in phi:
        m = min(500, phi[k].numel())
        torch.testing.assert_close(theta[k].double().view(-1)[:m], expect[k].view(-1)[:m],
                                   atol=1e-6, rtol=0)
    import json

    row = json.loads((run_folder(rc) / "results.json").read_text())["rounds"][1]
    floats = sum(v.numel() for v in phi.values())
    coded = sum(math.ceil(phi[k].numel() * 9 / 8) for k in names) + 4 * len(names)
    assert coded < row["bytes-up"] / 2 < coded + 2000  # + the keys; two clients
    assert 0.27 < row["bytes-up"] / row["bytes-down"] < 0.30  # 9 bits of 32, about 1/4
    assert floats * 4 < row["bytes-down"] / 2


def test_fedpaq_rounding_is_seeded_per_client_and_round(tmp_path):
    _, a = run(tmp_path, "a", method="fedacg+fedpaq", **{"num-server-rounds": 1})
    _, b = run(tmp_path, "b", method="fedacg+fedpaq", **{"num-server-rounds": 1})
    assert [torch.equal(x["model"]["fedpaq.norms"], y["model"]["fedpaq.norms"])
            for x, y in zip(a, b)] == [True] * len(a)
    k = quantized_names(a[0]["phi"], "all")[0]
    assert not torch.equal(a[0]["model"][k], a[1]["model"][k])  # other client, other codes


def test_decoder_refuses_what_is_not_an_encoding():
    phi = {"w": torch.zeros(3)}
    dec = UplinkDecoder(UplinkQuantizer.Settings(uplink_bits=2, uplink_tensors="all"))
    from flwr.app import ArrayRecord

    good = ArrayRecord({"w": pack_codes(torch.tensor([2, -1, 0]), 2),
                        "fedpaq.norms": torch.tensor([3.0])})
    assert torch.equal(dec.decode(good, phi)["w"], torch.tensor([3.0, -1.5, 0.0]))
    for bad in ({"w": torch.zeros(3)},
                {"w": torch.zeros(5, dtype=torch.uint8), "fedpaq.norms": torch.tensor([1.0])},
                {"w": pack_codes(torch.tensor([1, 1, 1]), 2), "fedpaq.norms": torch.ones(2)}):
        with pytest.raises(ValueError):
            dec.decode(ArrayRecord(bad), phi)


def test_no_malformed_uplink_reply_makes_the_decoder_raise():
    """Replies that are not encodings (garbage bytes, codes of another dtype or size, NaN or
    string arrays, the norms missing or too few, a record too many) are marked with why and left
    for the screen to drop (as malformed); a good encoding among them is decoded."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

    phi = {"w": torch.zeros(3), "b": torch.zeros(2)}
    dec = UplinkDecoder(UplinkQuantizer.Settings(uplink_bits=2, uplink_tensors="all"))
    codes = {"w": pack_codes(torch.tensor([2, -1, 0]), 2),
             "b": pack_codes(torch.tensor([1, 0]), 2)}
    norms = torch.tensor([3.0, 1.0])
    import numpy as np

    def arrays(**values):  # an ArrayRecord of any Arrays, as a client could send
        return ArrayRecord({k: v if isinstance(v, Array) else Array(np.asarray(v))
                            for k, v in values.items()})

    garbage = arrays(w=Array(dtype="float32", shape=(3,), stype="numpy.ndarray", data=b"junk"),
                     b=codes["b"].numpy(), **{"fedpaq.norms": norms.numpy()})
    text = arrays(w=np.array(["a", "b", "c"]), b=codes["b"].numpy(),
                  **{"fedpaq.norms": norms.numpy()})
    records = [
        ArrayRecord({**codes, "fedpaq.norms": norms}),  # the good one
        garbage, text,
        ArrayRecord({**codes}),  # no norms
        ArrayRecord({**codes, "fedpaq.norms": norms, "extra": torch.zeros(1)}),
        ArrayRecord({"w": codes["w"].float().fill_(float("nan")), "b": codes["b"],
                     "fedpaq.norms": norms}),
        ArrayRecord({"w": codes["w"][:1], "b": codes["b"], "fedpaq.norms": norms}),
        ArrayRecord({"w": codes["w"], "b": codes["b"], "fedpaq.norms": norms[:1]}),
        arrays(w=codes["w"].numpy(), b=codes["b"].numpy(),
               **{"fedpaq.norms": np.array([3.0 + 1j, 1.0])}),  # complex norms
    ]
    replies = [Message(RecordDict({"arrays": r, "metrics": MetricRecord({"num-examples": 1})}),
                       dst_node_id=i + 1, message_type="train") for i, r in enumerate(records)]
    failed = dec.decode_replies(replies, phi)
    assert torch.equal(replies[0].content["arrays"].to_torch_state_dict()["w"],
                       torch.tensor([3.0, -1.5, 0.0]))
    assert set(failed) == {id(m) for m in replies[1:]}, failed
    assert all("not an uplink-bits = 2 encoding" in why for why in failed.values())


# --- FedCM -------------------------------------------------------------------------------------
def test_fedcm_gradient_hand_value():
    g, delta = [torch.tensor([1.0, -2.0])], [torch.tensor([10.0, 20.0])]
    fedcm_grad_(g, delta, 0.1)
    torch.testing.assert_close(g[0], torch.tensor([0.1 + 9.0, -0.2 + 18.0]))


def fedcm_rule(**keys):
    cfg = resolved({"method": "fedcm", "lr": 0.1, "lr-decay": 0.5, **keys})
    return FedCMRule(FedCMRule.Settings.from_config(cfg), torch.nn.Linear(1, 1))


def reply(steps):
    return SimpleNamespace(content=SimpleNamespace(
        metric_records={"metrics": {"local-steps": steps}}))


def test_fedcm_server_state_two_rounds_by_hand():
    from flwr.app import ArrayRecord

    rule = fedcm_rule()
    rule.start(ArrayRecord({"w": torch.tensor([1.0, 2.0])}))
    assert torch.equal(rule.down_records(1)["fedcm-delta"].to_torch_state_dict()["w"],
                       torch.zeros(2))  # Delta_0 = 0
    phi = {"w": torch.tensor([1.0, 2.0])}
    # round 1: n = 1, 3; K = 5; lr_1 = 0.1
    good = [(reply(5), {"w": torch.tensor([2.0, 2.0])}, 1),
            (reply(5), {"w": torch.tensor([0.0, 4.0])}, 3)]
    rule.aggregate(1, good, phi, [{}, {}])
    # d = 0.25 [2, 2] + 0.75 [0, 4] - [1, 2] = [-0.5, 1.5]; theta = [0.5, 3.5]
    torch.testing.assert_close(rule.theta["w"], torch.tensor([0.5, 3.5]))
    torch.testing.assert_close(rule.delta["w"], torch.tensor([1.0, -3.0]))  # -d / (5 * 0.1)
    # round 2: lr_2 = 0.05, K = 2 and 6 (weighted mean 0.5 * 2 + 0.5 * 6 = 4)
    phi = {"w": rule.theta["w"].clone()}
    good = [(reply(2), {"w": torch.tensor([1.5, 3.5])}, 1),
            (reply(6), {"w": torch.tensor([0.5, 2.5])}, 1)]
    rule.aggregate(2, good, phi, [{}, {}])
    # d = [1.0, 3.0] - [0.5, 3.5] = [0.5, -0.5]; theta = [1.0, 3.0]; Delta = -d / (4 * 0.05)
    torch.testing.assert_close(rule.theta["w"], torch.tensor([1.0, 3.0]))
    torch.testing.assert_close(rule.delta["w"], torch.tensor([-2.5, 2.5]))
    restored = fedcm_rule()
    restored.load_state_dict(rule.state_dict())
    assert torch.equal(restored.down_records(3)["fedcm-delta"].to_torch_state_dict()["w"],
                       rule.delta["w"])


def test_fedcm_with_a_1_is_fedavg(tmp_path):
    avg, _ = run(tmp_path, "avg", method="fedavg")
    cm, log = run(tmp_path, "cm", method="fedcm", **{"fedcm-alpha": 1.0})
    assert "fedcm-delta" not in log[0]["model"]
    a, b = final_model(avg), final_model(cm)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_fedcm_round_1_is_fedavg_with_lr_a_times_lr(tmp_path):
    common = {"num-server-rounds": 1, "weight-decay": 0.0, "grad-clip": 0.0}
    avg, _ = run(tmp_path, "avg", method="fedavg", lr=0.015, **common)
    cm, _ = run(tmp_path, "cm", method="fedcm", lr=0.05, **{"fedcm-alpha": 0.3}, **common)
    a, b = final_model(avg), final_model(cm)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5)


def test_fedcm_with_a_0_repeats_its_update():
    """a = 0: every client steps K times along -lr * Delta and ends at phi - K lr Delta, so the
    next Delta = -d / (K lr) is the same Delta and d repeats (no weight decay, momentum or
    clipping; constant lr): the real local update with FedCM's part, and the server rule."""
    from flwr.app import ArrayRecord

    from client_app.client_step import LocalContext
    from client_app.local_update import LocalConfig, local_update
    from methods.fedcm import FedCMCorrection

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    rule = fedcm_rule(**{"lr-decay": 1.0})
    rule.start(ArrayRecord(model.state_dict()))
    state = rule.state_dict()
    state["fedcm-delta"] = {k: torch.randn(v.shape) for k, v in rule.theta.items()}
    rule.load_state_dict(state)  # a Delta of an earlier round
    part = FedCMCorrection(FedCMCorrection.Settings(fedcm_alpha=0.0))
    cfg = LocalConfig(lr=0.1, local_iterations=4, batch_size=5, grad_clip=0.0)
    updates = []
    for t in (1, 2, 3):
        phi = {k: v.clone() for k, v in rule.theta.items()}
        delta = {k: v.clone() for k, v in rule.delta.items()}
        model.load_state_dict(phi)
        ctx = LocalContext(down={"fedcm-delta": rule.down_records(t)["fedcm-delta"]})
        local_update(model, x, y, cfg, torch.Generator().manual_seed(t), parts=[part], ctx=ctx)
        w = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for k in w:  # phi - K lr Delta
            torch.testing.assert_close(w[k], phi[k] - 4 * 0.1 * delta[k])
        rule.aggregate(t, [(reply(4), w, 1)], phi, [{}])
        updates.append(flat(rule.theta) - flat(phi))
    assert updates[0].abs().max() > 1e-3
    for later in updates[1:]:
        torch.testing.assert_close(later, updates[0])


def test_fedcms_delta_carries_the_weight_decay_at_full_weight():
    """The optimizer adds `wd w` after FedCM's mix, so one step's Delta is
    a g + (1 - a) Delta + wd w (docs/baselines.md#fedcm: a steady state decays by wd / a), not
    a (g + wd w) + (1 - a) Delta. One full-batch step, its gradient taken apart by autograd."""
    from flwr.app import ArrayRecord

    from client_app.client_step import LocalContext
    from client_app.local_update import LocalConfig, local_update
    from methods.fedcm import FedCMCorrection

    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    a, wd, lr = 0.1, 0.05, 0.1
    rule = fedcm_rule(**{"lr-decay": 1.0})
    rule.start(ArrayRecord(model.state_dict()))
    state = rule.state_dict()
    state["fedcm-delta"] = {k: torch.randn(v.shape) for k, v in rule.theta.items()}
    rule.load_state_dict(state)
    phi = {k: v.clone() for k, v in rule.theta.items()}
    delta = {k: v.clone() for k, v in rule.delta.items()}
    reference = torch.nn.Linear(3, 2)
    reference.load_state_dict(phi)
    torch.nn.functional.cross_entropy(reference(x), y).backward()
    g = {"weight": reference.weight.grad, "bias": reference.bias.grad}
    part = FedCMCorrection(FedCMCorrection.Settings(fedcm_alpha=a))
    cfg = LocalConfig(lr=lr, local_iterations=1, batch_size=20, weight_decay=wd)
    ctx = LocalContext(down={"fedcm-delta": rule.down_records(1)["fedcm-delta"]})
    local_update(model, x, y, cfg, torch.Generator().manual_seed(0), parts=[part], ctx=ctx)
    w = {k: v.detach().clone() for k, v in model.state_dict().items()}
    rule.aggregate(1, [(reply(1), w, 1)], phi, [{}])
    for k in phi:
        expected = (a * g[k].double() + (1 - a) * delta[k].double() + wd * phi[k].double())
        torch.testing.assert_close(rule.delta[k].double(), expected, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(rule.delta[k].double(), expected - (1 - a) * wd
                                  * phi[k].double(), atol=1e-3)

# --- FedVARP -----------------------------------------------------------------------------------
def test_varp_step_two_rounds_by_hand():
    table = UpdateTable(3, 1, limit_mb=1.0)
    y = torch.zeros(1)
    v, y = varp_step(y, table, [0, 1], [torch.tensor([3.0]), torch.tensor([6.0])], 3)
    assert v.item() == 4.5 and y.item() == 3.0  # y = (3 + 6 + 0) / 3
    v, y = varp_step(y, table, [1, 2], [torch.tensor([0.0]), torch.tensor([9.0])], 3)
    # v = 3 + ((0 - 6) + (9 - 0)) / 2 = 4.5; y = (3 + 0 + 9) / 3 = 4
    assert v.item() == 4.5 and y.item() == 4.0
    assert table.data[:, 0].tolist() == [3.0, 0.0, 9.0]


def fedvarp_rule(**keys):
    cfg = resolved({"method": "fedvarp", **keys})
    return FedVARPRule(FedVARPRule.Settings.from_config(cfg), torch.nn.Linear(1, 1))


def drive(rule, rounds, sampled, n_clients, seed=0):
    """Run `rule` on random client models; yields (theta before, the d_i, the ids) per round."""
    from flwr.app import ArrayRecord

    gen = torch.Generator().manual_seed(seed)
    rule.start(ArrayRecord({"w": torch.randn(3, 2, generator=gen), "b": torch.zeros(2)}))
    rule.num_clients = n_clients
    for _ in range(rounds):
        phi = {k: v.clone() for k, v in rule.theta.items()}
        ids = sorted(torch.randperm(n_clients, generator=gen)[:sampled].tolist())
        models = [{k: v + torch.randn(v.shape, generator=gen) for k, v in phi.items()}
                  for _ in ids]
        rule.client_ids = ids
        rule.aggregate(1, [(None, m, 1) for m in models], phi, [{} for _ in ids])
        yield phi, [flat(m) - flat(phi) for m in models], ids


def test_fedvarp_full_participation_is_fedavg_and_y_is_the_mean():
    rule = fedvarp_rule()
    for phi, d, _ in drive(rule, 4, 5, 5):
        torch.testing.assert_close(flat(rule.theta), flat(phi) + torch.stack(d).mean(0))
        torch.testing.assert_close(rule.y, rule.table.data.mean(0))


def test_fedvarp_partial_participation_against_a_plain_table():
    rule = fedvarp_rule()
    y_rows = torch.zeros(6, 8)
    for r, (phi, d, ids) in enumerate(drive(rule, 5, 2, 6, seed=1)):
        v = y_rows.mean(0) + torch.stack([d_i - y_rows[j] for j, d_i in zip(ids, d)]).mean(0)
        if r == 0:
            torch.testing.assert_close(v, torch.stack(d).mean(0))  # round 1 = FedAvg
        for j, d_i in zip(ids, d):
            y_rows[j] = d_i
        torch.testing.assert_close(flat(rule.theta), flat(phi) + v)
        torch.testing.assert_close(rule.y, y_rows.mean(0))


def test_fedvarp_with_gc_is_an_untested_combination():
    """GC-Fed keeps GC off variance-reduction methods (docs/baselines.md#combinations: FedVARP +
    GC "no"): local GC is refused unless allow-untested-combinations; global GC and look-ahead
    cannot work with its rule at all."""
    from run_config import ConfigError

    with pytest.raises(ConfigError, match="'local-gc' = 'all' with server-rule 'fedvarp' is "
                       "untested.*allow-untested-combinations"):
        resolved({"method": "fedvarp", "local-gc": "all"})
    assert resolved({"method": "fedvarp", "local-gc": "all",
                     "allow-untested-combinations": True})["local-gc"] == "all"
    for switch in ({"global-gc": "all"}, {"lookahead": True, "lam": 0.5}):
        with pytest.raises(ConfigError, match="cannot be combined with method 'fedvarp'"):
            resolved({"method": "fedvarp", **switch, "allow-untested-combinations": True})


@pytest.mark.parametrize("method, setting, fix", [
    ("fedcm", {"lam": 0.5}, "set lam = 0"),
    ("fedvarp", {"aggregation": "examples"}, "set aggregation = 'uniform'"),
])
def test_a_rule_refuses_its_settings_with_an_error_of_ours(method, setting, fix):
    """The rule's own check raises the methods' `SettingError` (methods import no run_config),
    which the ServerApp prints as one line naming the key and the fix."""
    from methods import SERVER_RULES, SettingError
    from server_app.console import one_line

    cfg = resolved({"method": method, **setting})
    with pytest.raises(SettingError, match=fix) as err:
        rule = SERVER_RULES[cfg["server-rule"]]
        rule(rule.Settings.from_config(cfg), torch.nn.Linear(2, 2))
    assert one_line(err.value).startswith(f"'{next(iter(setting))}' = ")


def test_fedvarp_table_on_disk_and_resume_are_exact():
    in_memory, on_disk = fedvarp_rule(), fedvarp_rule(**{"fedvarp-memory-mb": 1e-6})
    for _ in zip(drive(in_memory, 3, 2, 4, seed=2), drive(on_disk, 3, 2, 4, seed=2)):
        pass
    assert on_disk.table.on_disk and not in_memory.table.on_disk
    assert torch.equal(flat(on_disk.theta), flat(in_memory.theta))
    restored = fedvarp_rule()
    restored.load_state_dict(in_memory.state_dict())
    assert torch.equal(restored.table.data, in_memory.table.data)
    assert torch.equal(restored.y, in_memory.y) and restored.seen == in_memory.seen


def test_fedvarp_checkpoint_of_a_table_on_disk_streams_its_rows_to_a_file(tmp_path):
    """A table beyond fedvarp-memory-mb (500 x ResNet-18 = 22 GB) is never copied into the
    checkpoint's memory: the checkpoint names a file of the seen rows (the last two kept), and a
    resume from it restores the table exactly; a missing file is a clear error."""
    keys = {"fedvarp-memory-mb": 1e-6, "out-dir": str(tmp_path)}
    rule = fedvarp_rule(**keys)
    states = []
    for _ in drive(rule, 3, 2, 6, seed=3):
        states.append(rule.state_dict())
    saved = states[-1]["fedvarp"]
    assert "rows" not in saved and saved["rows-file"].startswith("fedvarp-rows-")
    assert sorted(p.name for p in tmp_path.glob("fedvarp-rows-*")) == sorted(
        s["fedvarp"]["rows-file"] for s in states[-2:])  # the oldest one deleted
    restored = fedvarp_rule(**keys)
    restored.load_state_dict(states[-1])
    assert torch.equal(restored.table.data, rule.table.data) and restored.seen == rule.seen
    in_memory = fedvarp_rule(**{"out-dir": str(tmp_path)})
    in_memory.load_state_dict(states[-1])  # resumable whatever the new limit
    assert torch.equal(in_memory.table.data, rule.table.data)
    rows = tmp_path / saved["rows-file"]
    kept = tmp_path / "elsewhere.f32"
    rows.rename(kept)
    with pytest.raises(ValueError, match="FedVARP table file .* cannot be read"):
        fedvarp_rule(**keys).load_state_dict(states[-1])
    rows.symlink_to(kept)  # a link planted at its name is not followed
    with pytest.raises(ValueError, match="FedVARP table file .* cannot be read .*is a link"):
        fedvarp_rule(**keys).load_state_dict(states[-1])
    rows.unlink()
    kept.write_bytes(kept.read_bytes()[:-4])
    kept.rename(rows)
    with pytest.raises(ValueError, match="FedVARP table file .* is not 6 rows of 8 floats"):
        fedvarp_rule(**keys).load_state_dict(states[-1])


def test_fedvarp_end_to_end_full_participation_is_fedavg(tmp_path):
    keys = {"fraction-train": 1.0, "aggregation": "uniform"}
    avg, _ = run(tmp_path, "avg", method="fedavg", **keys)
    varp, log = run(tmp_path, "varp", method="fedvarp", **keys)
    assert sorted(e["partition"] for e in log if e["round"] == 1) == list(range(NODES))
    a, b = final_model(avg), final_model(varp)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)


def test_fedvarp_resume_is_exact(tmp_path):
    """3 rounds = 2 rounds, checkpoint, resume to 3 (the table is in the checkpoint)."""
    full, _ = run(tmp_path, "full", method="fedvarp", **{"num-server-rounds": 3})
    cut, _ = run(tmp_path, "cut", method="fedvarp", **{"num-server-rounds": 2})
    again = {**cut, "num-server-rounds": 3, "resume": str(run_folder(cut))}
    run_server_app(again, NODES)
    a, b = final_model(full), final_model(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)



# --- through `flwr run` ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.each_method
@pytest.mark.parametrize("method", ["fedcm", "fedvarp", "fedacg+fedpaq"])
def test_flwr_run(superlink, method):
    """One short simulation each through `flwr run` (Ray, serialized messages): completes, and
    the byte meter shows the method's traffic (FedCM 2x down, FedPAQ about 9/32 up)."""
    import json
    import subprocess
    from pathlib import Path

    from experiments.superlink import CONNECTION

    env, home = superlink
    name = method.replace("+", "_")
    out = subprocess.run(
        ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config", "num-supernodes=4",
         "--run-config", f"method='{method}' num-server-rounds=2 local-iterations=3 "
         f"fraction-train=0.5 out-dir='{home}/runs' run-name='{name}'"],
        cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
        timeout=400)
    results = json.loads((Path(home) / "runs" / name / "results.json").read_text())
    assert results["status"] == "complete", (out.stdout + out.stderr)[-3000:]
    row = results["rounds"][2]
    ratio = {"fedcm": (2.0, 1.0), "fedvarp": (1.0, 1.0), "fedacg+fedpaq": (1.0, 0.28)}[method]
    one = row["bytes-down"] / ratio[0]
    assert row["bytes-up"] / one == pytest.approx(ratio[1], abs=0.01)
