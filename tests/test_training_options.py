"""Pins of the local-training options the papers' set-ups use (docs/algorithms.md#local-update):
GC-Fed's padding of a client's data to full batches, FedACG's per-epoch lr decay and mixed
precision (FedACG's fp16 autocast with a GradScaler), each against a hand computation or a plain
second implementation written here."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from client_app.local_update import LocalConfig, local_update
from client_app.settings import use_amp
from feddata.padding import full_batch_index, pad_to_full_batches
from methods import ClientPart
from run_config import ConfigError, resolve

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

# --- GC-Fed's padding (pad-to-full-batches) ----------------------------------------------------


def test_padding_repeats_the_first_examples_up_to_a_multiple_of_the_batch():
    # by hand, as GC-Fed's _balance_dataset: n=7, b=5 -> 3 copies of examples 0, 1, 2
    assert full_batch_index(7, 5).tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]
    # fewer examples than are missing: it cycles (data[i % n])
    assert full_batch_index(3, 8).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert full_batch_index(10, 5).tolist() == list(range(10))
    x, y = torch.arange(14.0).reshape(7, 2), torch.tensor([3, 1, 1, 0, 2, 2, 2])
    px, py = pad_to_full_batches(x, y, 5)
    assert py.tolist() == [3, 1, 1, 0, 2, 2, 2, 3, 1, 1]
    assert torch.equal(px[7:], x[:3])
    # FedLC's class counts are taken over the padded labels: the copies count
    assert torch.bincount(py, minlength=4).tolist() == [1, 4, 3, 2]
    same = pad_to_full_batches(x[:5], y[:5], 5)
    assert same[0] is not None and torch.equal(same[1], y[:5])


def test_padding_reaches_the_local_update_and_num_examples_stays_true(tmp_path, monkeypatch):
    """Through the real ClientApp: the local update gets ceil(n / b) * b examples (FedLC reads
    ctx.train_y, the padded labels), every step a full batch, and the reply reports n."""
    import client_app.app as client
    from pins_helpers import real_client, recording, run_server_app

    seen = []

    def watched(model, x, y, cfg, generator, transform, parts, ctx):
        seen.append((len(y), len(ctx.train_y), cfg.batch_size, cfg.num_steps(len(y))))
        return local_update(model, x, y, cfg, generator, transform, parts, ctx)

    monkeypatch.setattr(client, "local_update", watched)
    rc = {"out-dir": str(tmp_path), "run-name": "run", "num-server-rounds": 1, "batch-size": 50,
          "local-epochs": 1, "pad-to-full-batches": True, "method": "fedlc-gcfed",
          "fraction-train": 1.0, "checkpoint-every": 0}
    log = []
    run_server_app(rc, 3, handler=recording(real_client(rc, 3), log))
    assert len(seen) == len(log) == 3
    for n, counted, b, steps in seen:
        assert n % b == 0 and counted == n and steps == n // b
    true_sizes = [entry["n"] for entry in sorted(log, key=lambda e: e["partition"])]
    assert all(n % 50 for n in true_sizes)  # not multiples: the padding made the difference
    assert sorted(n for n, *_ in seen) == sorted(math.ceil(n / 50) * 50 for n in true_sizes)


# --- FedACG's per-epoch lr decay (lr-epoch-decay) ----------------------------------------------


class SumOfWeights(ClientPart):
    """loss = sum of every weight: its gradient is 1 everywhere, so each step moves every weight
    by exactly -lr (no weight decay, momentum or clipping)."""

    name = "sum-of-weights"

    def loss(self, ctx, logits, x, y):
        return sum(p.sum() for p in ctx.params)


@pytest.mark.parametrize("iterations,expected", [
    (0, [1, 1, 0.9, 0.9, 0.81, 0.81]),  # 3 epochs of 2 batches: lr, lr d, lr d^2
    (5, [1, 1, 0.9, 0.9, 0.81]),  # 5 iterations cross the epochs at the same steps
])
def test_lr_decays_per_local_epoch(iterations, expected):
    model = nn.Linear(3, 2)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    cfg = LocalConfig(lr=0.5, local_epochs=3, local_iterations=iterations, batch_size=2,
                      alpha=1e-30, lr_epoch_decay=0.9)  # alpha ~ 0: the part's loss alone
    local_update(model, x, y, cfg, parts=[SumOfWeights(SumOfWeights.Settings())])
    moved = 0.5 * sum(expected)  # by hand: the sum of the steps' learning rates
    for b, p in zip(before, model.parameters()):
        torch.testing.assert_close(b - p.detach(), torch.full_like(b, moved))


def test_epoch_decay_one_is_the_round_lr_throughout():
    model, twin = nn.Linear(3, 2), nn.Linear(3, 2)
    twin.load_state_dict(model.state_dict())
    x, y = torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 1, 0])
    local_update(model, x, y, LocalConfig(lr=0.3, local_epochs=3, batch_size=4))
    local_update(twin, x, y, LocalConfig(lr=0.3, local_epochs=3, batch_size=4,
                                         lr_epoch_decay=1.0))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_setups_decay_the_lr_per_epoch_as_fedacg_s_code():
    for name in ("fedacg-t1a-cifar10", "fedacg-t1b-tiny-imagenet", "fedacg-t6-cifar100-100c"):
        cfg = resolve({"setup": name})
        assert cfg["lr-epoch-decay"] == cfg["lr-decay"] < 1, name
    assert resolve({})["lr-epoch-decay"] == 1.0


# --- mixed precision (precision) -------------------------------------------------------------


def test_amp_is_refused_on_the_cpu_with_a_clear_message():
    with pytest.raises(ConfigError, match="'precision' = 'amp'.*CUDA GPU.*'device' = 'cpu'"):
        resolve({"precision": "amp", "device": "cpu"})
    cfg = resolve({"precision": "amp"})  # device auto: decided where the client trains
    with pytest.raises(RuntimeError, match="precision = 'auto'.*or 'fp32'"):
        use_amp(cfg, torch.device("cpu"))
    assert use_amp(cfg, torch.device("cuda"))
    auto = resolve({"precision": "auto"})
    assert not use_amp(auto, torch.device("cpu")) and use_amp(auto, torch.device("cuda"))
    assert not use_amp(resolve({}), torch.device("cuda"))  # fp32, the default
    assert resolve({"setup": "fedacg-t1a-cifar10"})["precision"] == "auto"


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def test_amp_step_is_scaled_backward_then_unscaled_gradient(tmp_path):
    """The amp path on the CPU's fp16 autocast (a GPU is not needed for the logic): each step is
    the forward pass under autocast, backward of loss * S (S = 2^16, GradScaler's start), the
    gradients times 1/S, then clipping and SGD with weight decay, as written out here."""
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 2, 1, 0])
    lr, wd, clip, scale = 0.2, 0.01, 0.5, 2.0 ** 16
    model = tiny()
    by_hand = tiny()
    for _ in range(3):  # full-batch steps: the batch order does not matter for the mean CE
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(by_hand(x), y)
        by_hand.zero_grad()
        (loss.float() * scale).backward()
        with torch.no_grad():
            grads = [p.grad / scale for p in by_hand.parameters()]
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
            coef = min(1.0, clip / (float(norm) + 1e-6))
            for p, g in zip(by_hand.parameters(), grads):
                p -= lr * (g * coef + wd * p)
    cfg = LocalConfig(lr=lr, local_iterations=3, batch_size=6, weight_decay=wd, grad_clip=clip,
                      amp=True)
    local_update(model, x, y, cfg)
    for a, b in zip(model.parameters(), by_hand.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    fp32 = tiny()
    local_update(fp32, x, y, LocalConfig(lr=lr, local_iterations=3, batch_size=6,
                                         weight_decay=wd, grad_clip=clip))
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), fp32.parameters()))


class OverflowOnce(ClientPart):
    """A loss term whose gradient is infinite in the first step only."""

    name = "overflow-once"

    def loss(self, ctx, logits, x, y):
        return ctx.params[0].sum() * (math.inf if ctx.steps_done == 0 else 0.0)


def test_amp_skips_a_step_whose_gradients_overflow():
    """GradScaler's rule: a step with an inf / nan gradient is skipped (the weights stay) and the
    scale halves; without amp the same step makes the weights non-finite."""
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 2, 1, 0])
    start = tiny()
    skipped = tiny()
    local_update(skipped, x, y, LocalConfig(lr=0.2, local_iterations=1, batch_size=6, amp=True),
                 parts=[OverflowOnce(OverflowOnce.Settings())])
    assert all(torch.equal(a, b) for a, b in zip(skipped.parameters(), start.parameters()))
    plain = tiny()
    local_update(plain, x, y, LocalConfig(lr=0.2, local_iterations=1, batch_size=6),
                 parts=[OverflowOnce(OverflowOnce.Settings())])
    assert not all(torch.isfinite(p).all() for p in plain.parameters())
    # skipped, then one good step (at scale 2^15: the same gradient) = one good step
    two = tiny()
    local_update(two, x, y, LocalConfig(lr=0.2, local_iterations=2, batch_size=6, amp=True),
                 parts=[OverflowOnce(OverflowOnce.Settings())])
    one = tiny()
    local_update(one, x, y, LocalConfig(lr=0.2, local_iterations=1, batch_size=6, amp=True))
    for a, b in zip(two.parameters(), one.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
