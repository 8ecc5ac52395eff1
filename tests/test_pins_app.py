"""Pins of whole runs: the real ServerApp and ClientApp built from a run config as `flwr run`
builds them, in-process (a FakeGrid instead of the Flower runtime). Each rule is checked against a
computation written here: the decayed lr the client trains with, the GC layer sets and
gc-vectors (docs/algorithms.md#gc-layer-sets), the server evaluating theta and never phi
(docs/algorithms.md#server-round, #reporting)."""

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pins_helpers import (Crash, broadcast_of, checkpoint, checkpoint_error, client_inputs,
                          config_of, crashing_grid, final_model, is_query, make_reply,
                          partition_reply, read_checkpoint, real_client, recording, results_rows,
                          run_folder, run_server_app, save_checkpoint_file, server_model,
                          server_test_set)

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

NODES = 4
MLP = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]


def base(tmp_path, **overrides) -> dict:
    return {"out-dir": str(tmp_path), "run-name": "run", "model": "mlp", "num-server-rounds": 1,
            "local-iterations": 1, "fraction-train": 1.0, "min-train-nodes": NODES,
            "checkpoint-every": 0, **overrides}


def run(rc: dict) -> list[dict]:
    log = []
    run_server_app(rc, NODES, handler=recording(real_client(rc, NODES), log))
    return log


def grad_at(rc: dict, phi: dict, partition: int) -> dict:
    """The full-batch cross-entropy gradient at phi on the client's training part, by hand."""
    model = server_model(rc)
    model.load_state_dict(phi)
    x, y = client_inputs(rc, partition, NODES)
    loss = F.cross_entropy(model(x), y)
    names = [n for n, _ in model.named_parameters()]
    return dict(zip(names, torch.autograd.grad(loss, list(model.parameters()))))


def test_the_client_trains_with_the_decayed_lr_the_server_sends(tmp_path):
    """One full-batch SGD step, nothing else: w_K - phi = -lr_t * grad(phi) with
    lr_t = lr * lr_decay^(t-1), not the run config's lr."""
    rc = base(tmp_path, method="fedavg", **{
        "num-server-rounds": 3, "fraction-train": 0.5, "min-train-nodes": 2, "lr": 0.2,
        "lr-decay": 0.5, "batch-size": 100000, "weight-decay": 0.0, "local-momentum": 0.0,
        "grad-clip": 0.0})
    log = run(rc)
    assert sorted({e["round"] for e in log}) == [1, 2, 3] and len(log) == 6
    for e in log:
        lr_t = 0.2 * 0.5 ** (e["round"] - 1)
        g = grad_at(rc, e["phi"], e["partition"])
        for k in MLP:
            step = e["model"][k] - e["phi"][k]
            assert torch.allclose(step, -lr_t * g[k], atol=1e-6, rtol=1e-4), (e["round"], k)
            if e["round"] > 1:
                assert not torch.allclose(step, -0.2 * g[k], atol=1e-6, rtol=1e-4)


def mean_share(t: torch.Tensor) -> float:
    """The share of t's norm in its per-row means (rows = output channels; 1-D: the whole
    vector): 0 for a centred tensor, well above 0 for a raw gradient step."""
    t = t.double()
    rows = t.reshape(len(t), -1) if t.dim() >= 2 else t.reshape(1, -1)
    means = rows.mean(dim=1, keepdim=True).expand_as(rows)
    return float(means.norm() / rows.norm())


# The cross-entropy gradient of the classifier's bias sums to zero over the classes (softmax
# minus one-hot), so that tensor is centred with or without GC: it tells nothing and is left out.
TOLD = [k for k in MLP if k != "fc3.bias"]


def centred(update: dict) -> set[str]:
    shares = {k: mean_share(update[k]) for k in TOLD}
    unclear = {k: s for k, s in shares.items() if 1e-4 <= s <= 1e-2}
    assert not unclear, f"neither centred nor raw: {unclear}"
    return {k for k, s in shares.items() if s < 1e-4}


WEIGHTS = {"fc1.weight", "fc2.weight", "fc3.weight"}


# local-gc, global-gc, gc-borderline, gc-vectors -> centred client updates, centred server update
# (hand-written from the MLP's parameters: fc1.w, fc1.b, fc2.w, fc2.b, fc3.w, fc3.b; the
# classifier is fc3; a fraction f puts the first floor(f * 6) tensors before the borderline)
GC_CASES = [
    ("features", "none", "classifier", "center", set(MLP[:4]), set(MLP[:4])),
    ("features", "none", 0.5, "center", set(MLP[:3]), set(MLP[:3])),
    ("all", "none", "classifier", "center", set(MLP), set(MLP)),
    ("none", "classifier", "classifier", "center", set(), set(MLP[4:])),
    ("none", "classifier", 0.5, "center", set(), set(MLP[3:])),
    ("none", "all", "classifier", "center", set(), set(MLP)),
    ("features", "classifier", 0.34, "center", set(MLP[:2]), set(MLP)),
    ("all", "none", "classifier", "skip", WEIGHTS, WEIGHTS),
    ("none", "all", "classifier", "skip", set(), WEIGHTS),
]


@pytest.mark.parametrize("local_gc,global_gc,borderline,vectors,client_set,server_set", GC_CASES)
def test_run_config_selects_the_gc_layer_sets(tmp_path, local_gc, global_gc, borderline, vectors,
                                              client_set, server_set):
    """One round, one plain SGD step per client (no decay, momentum, proximal term): a tensor's
    client update is centred exactly when it is in the local-GC set, and the server's update
    theta_1 - theta_0 (lam = 0, eta = 1) exactly when it is in the local or global set."""
    rc = base(tmp_path, method="fedavg", lr=0.5, **{
        "local-gc": local_gc, "global-gc": global_gc, "gc-borderline": borderline,
        "gc-vectors": vectors, "weight-decay": 0.0, "local-momentum": 0.0})
    log = run(rc)
    assert len(log) == NODES
    for e in log:
        assert centred({k: e["model"][k] - e["phi"][k] for k in MLP}) == client_set - {"fc3.bias"}
    theta0 = {k: v.detach() for k, v in server_model(rc).state_dict().items()}
    assert all(torch.equal(log[0]["phi"][k], theta0[k]) for k in MLP)
    theta1 = final_model(rc)
    assert centred({k: theta1[k] - theta0[k] for k in MLP}) == server_set - {"fc3.bias"}


def evaluate_by_hand(rc: dict, state: dict) -> tuple[float, float]:
    model = server_model(rc)
    model.load_state_dict(state)
    model.eval()
    x, y = server_test_set(rc)
    with torch.no_grad():
        logits = model(x)
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def test_the_server_evaluates_theta_not_the_lookahead_point(tmp_path):
    """FedACG (lam = 0.85, look-ahead) for 3 rounds. From the observed client replies the server
    round is recomputed here (phi = theta + lam m, d = sum n_i/n (w_i - phi), m = lam m + d,
    theta += m): every broadcast phi matches, the final model is theta, and each round's
    recorded test loss and accuracy are those of theta, which differ from those of phi."""
    rc = base(tmp_path, method="fedacg", **{"num-server-rounds": 3, "fraction-train": 0.5,
                                            "min-train-nodes": 2, "local-iterations": 2})
    lam = 0.85
    log = run(rc)
    rows = results_rows(rc)
    theta = {k: v.detach().clone() for k, v in server_model(rc).state_dict().items()}
    m = {k: torch.zeros_like(v) for k, v in theta.items()}
    first = evaluate_by_hand(rc, theta)
    assert (rows[0]["test-loss"], rows[0]["test-acc"]) == pytest.approx(first)
    for t in (1, 2, 3):
        replies = [e for e in log if e["round"] == t]
        phi = {k: theta[k] + lam * m[k] for k in theta}
        for e in replies:
            assert all(torch.allclose(e["phi"][k], phi[k], atol=1e-6) for k in phi), t
        total = sum(e["n"] for e in replies)
        for k in theta:
            d = sum(e["n"] / total * (e["model"][k] - phi[k]) for e in replies)
            m[k] = lam * m[k] + d
            theta[k] = theta[k] + m[k]
        loss, acc = evaluate_by_hand(rc, theta)
        assert rows[t]["test-loss"] == pytest.approx(loss, rel=1e-5), t
        assert rows[t]["test-acc"] == pytest.approx(acc), t
        ahead_loss, _ = evaluate_by_hand(rc, {k: theta[k] + lam * m[k] for k in theta})
        assert not math.isclose(ahead_loss, loss, rel_tol=1e-3), t  # phi would show
    final = final_model(rc)
    assert all(torch.allclose(final[k], theta[k], atol=1e-5) for k in theta)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_resume_restores_the_process_rng_states(tmp_path):
    """Clients that share the server's process (as in this in-process run, or a simulation's
    actor) draw from the global Python, NumPy and torch RNGs: here every reply adds noise from
    all three. A run stopped after its round-2 checkpoint and resumed in a 'new process' (every
    global RNG re-seeded elsewhere) must draw the same noise and end bitwise equal to the
    uninterrupted run."""
    draws: dict[str, list] = {}

    def noisy(tag):
        def handler(i, msg):
            if is_query(msg):
                return partition_reply(i, NODES)
            phi = broadcast_of(msg)
            noise = (random.random(), float(np.random.rand()), float(torch.rand(())))
            draws.setdefault(tag, []).append((config_of(msg)["server-round"], i, noise))
            return make_reply({k: v + 1e-3 * sum(noise) for k, v in phi.items()}, 10 + i)
        return handler

    def config(folder):
        return base(folder, method="fedacg", **{"num-server-rounds": 4, "checkpoint-every": 2,
                                                "fraction-train": 0.5, "min-train-nodes": 2})

    ref, cut = config(tmp_path / "ref"), config(tmp_path / "cut")
    seed_everything(0)
    run_server_app(ref, NODES, handler=noisy("ref"))
    seed_everything(0)
    with pytest.raises(Crash):
        run_server_app(cut, NODES, grid=crashing_grid(NODES, noisy("cut"), crash_round=3))
    assert draws["cut"] == draws["ref"][:4] and checkpoint(cut)["round"] == 2
    seed_everything(12345)  # a new process: other RNG states
    run_server_app({**cut, "resume": str(run_folder(cut))}, NODES, handler=noisy("cut"))
    assert draws["cut"] == draws["ref"]
    a, b = final_model(ref), final_model(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_are_format_1_and_other_formats_are_refused(tmp_path):
    """Checkpoint files on disk say format 1; a file of another format is refused by name."""
    ref = base(tmp_path, method="fedacg", **{"num-server-rounds": 1, "checkpoint-every": 1,
                                            "local-iterations": 1})
    run_server_app(ref, NODES)
    saved = checkpoint(ref)
    assert saved["format"] == 1 and saved["round"] == 1
    for fmt, ok in ((1, True), (2, False), (0, False)):
        path = save_checkpoint_file(tmp_path, {**saved, "format": fmt})
        if ok:
            assert read_checkpoint(path)["round"] == 1
        else:
            with pytest.raises(checkpoint_error(), match=f"checkpoint format {fmt}"):
                read_checkpoint(path)


def test_a_checkpoint_lacking_one_part_is_refused(tmp_path):
    """Every part of a checkpoint (format, round, config, strategy, rng, rows) must be there
    (and be what it says: the RNG states are the process's, as set_rng_state takes them)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    rng = {"python": random.getstate(), "torch": torch.get_rng_state(),
           "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)}
    full = {"format": 1, "round": 2, "config": {}, "strategy": {}, "rng": rng, "rows": []}
    assert read_checkpoint(save_checkpoint_file(tmp_path, full))["round"] == 2
    for part in full:
        path = save_checkpoint_file(tmp_path, {k: v for k, v in full.items() if k != part})
        with pytest.raises(checkpoint_error(), match=rf"lacks \['{part}'\]"):
            read_checkpoint(path)
