"""Pins of the client's local update (docs/algorithms.md#local-update): the order inside one step
with every part active at once, and local GC replacing the gradient by P(g), each against a
plain-torch computation written here."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pins_helpers import borderline, local_train

LR, ALPHA, BETA, CLIP, WD, MOM = 0.3, 1.5, 2.0, 0.05, 0.1, 0.9


def tiny_net() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))


def data():
    g = torch.Generator().manual_seed(11)
    return torch.randn(6, 4, generator=g), torch.tensor([0, 1, 2, 2, 1, 0])


def P(g: torch.Tensor, vectors: str) -> torch.Tensor:
    """Centre each output row (>= 2-D) or the whole vector (1-D, 'center'); by hand."""
    if g.dim() >= 2:
        return g - g.reshape(len(g), -1).mean(dim=1).reshape((-1,) + (1,) * (g.dim() - 1))
    return g - g.mean() if vectors == "center" else g


def by_hand(net: nn.Module, x, y, steps: int, local_gc: int, vectors: str, *, variant: str = "",
            clip_bites: list | None = None):
    """`steps` full-batch steps of: task grad, + beta (w - phi), clip, P on the first
    `local_gc` tensors, SGD with weight decay and momentum. `variant` computes a wrong order."""
    w = [p.detach().clone() for p in net.parameters()]
    phi = [t.clone() for t in w]
    bufs = [None] * len(w)
    for _ in range(steps):
        leaves = [t.clone().requires_grad_(True) for t in w]
        h = torch.relu(x @ leaves[0].T + leaves[1])
        ce = F.cross_entropy(h @ leaves[2].T + leaves[3], y)
        g = list(torch.autograd.grad(ALPHA * ce, leaves))
        prox = [BETA * (wi - p) for wi, p in zip(w, phi)]
        if variant != "prox-after-clip":
            g = [gi + pi for gi, pi in zip(g, prox)]
        if variant == "gc-before-clip":
            g = [P(gi, vectors) if i < local_gc else gi for i, gi in enumerate(g)]
        total = torch.sqrt(sum((gi ** 2).sum() for gi in g))
        if clip_bites is not None:
            clip_bites.append(total.item() > CLIP)
        coef = min(1.0, CLIP / (total.item() + 1e-6))
        g = [gi * coef for gi in g]
        if variant == "prox-after-clip":
            g = [gi + pi for gi, pi in zip(g, prox)]
        if variant == "gc-zeroes":
            g = [torch.zeros_like(gi) if i < local_gc else gi for i, gi in enumerate(g)]
        elif variant != "gc-before-clip":
            g = [P(gi, vectors) if i < local_gc else gi for i, gi in enumerate(g)]
        for i in range(len(w)):
            d = g[i] + WD * w[i]  # SGD weight decay: on top of the centred gradient
            if variant == "gc-after-wd" and i < local_gc:
                d = P(g[i] + WD * w[i], vectors)
            bufs[i] = d if bufs[i] is None else MOM * bufs[i] + d  # torch SGD momentum
            if variant == "no-momentum":
                bufs[i] = d
            w[i] = w[i] - LR * bufs[i]
    return w


@pytest.mark.parametrize("vectors", ["center", "skip"])
def test_one_client_step_in_the_documented_order_with_every_part_active(vectors):
    x, y = data()
    net = tiny_net()
    bites = []
    expected = by_hand(net, x, y, steps=3, local_gc=2, vectors=vectors, clip_bites=bites)
    assert all(bites), "clipping must bite at every step"
    # each wrong order gives a clearly different result, so the comparison below can fail
    for variant in ("prox-after-clip", "gc-before-clip", "gc-zeroes", "gc-after-wd",
                    "no-momentum"):
        wrong = by_hand(net, x, y, steps=3, local_gc=2, vectors=vectors, variant=variant)
        assert max((a - b).abs().max() for a, b in zip(wrong, expected)) > 1e-4, variant

    local_train(net, x, y, lr=LR, steps=3, batch_size=len(y), alpha=ALPHA, beta=BETA,
                grad_clip=CLIP, momentum=MOM, weight_decay=WD, local_gc_layers=2,
                gc_vectors=vectors)
    for name, (p, e) in zip(("W1", "b1", "W2", "b2"), zip(net.parameters(), expected)):
        gap = (p.detach() - e).abs().max()
        assert torch.allclose(p.detach(), e, atol=1e-6, rtol=0), (name, gap)


@pytest.mark.parametrize("vectors", ["center", "skip"])
def test_local_gc_replaces_the_gradient_by_its_projection(vectors):
    """lr = 1, no decay, no momentum, no clipping: the step of a local-GC tensor is -P(g) exactly
    (not zero, not g), and of the other tensors -g."""
    x, y = data()
    net = tiny_net()
    before = [p.detach().clone() for p in net.parameters()]
    g = torch.autograd.grad(F.cross_entropy(net(x), y), list(net.parameters()))
    local_train(net, x, y, lr=1.0, steps=1, batch_size=len(y), local_gc_layers=3,
                gc_vectors=vectors)
    steps = [b - p.detach() for b, p in zip(before, net.parameters())]
    for i, (step, gi) in enumerate(zip(steps, g)):
        want = P(gi, vectors) if i < 3 else gi
        assert want.abs().max() > 1e-3  # a zeroed gradient cannot pass
        assert torch.allclose(step, want, atol=1e-6, rtol=0), i
    assert not torch.allclose(steps[0], g[0], atol=1e-4)  # and P did change the gradient
    assert torch.allclose(steps[1], g[1], atol=1e-7) == (vectors == "skip")  # 1-D: centred or not


def test_mini_batches_and_train_metrics():
    """3 steps with batch size 4 over 6 examples: epoch 1 = a permutation cut in batches of 4
    and 2, epoch 2 = a new permutation; the reported train loss is the example-weighted mean of
    the batches' cross-entropy (before each step), the accuracy the share of correct
    predictions, by hand."""
    x, y = data()
    net = tiny_net()
    w = [p.detach().clone() for p in net.parameters()]
    g = torch.Generator().manual_seed(5)
    first, second = torch.randperm(6, generator=g), torch.randperm(6, generator=g)
    loss_sum, correct, seen = 0.0, 0, 0
    for idx in (first[:4], first[4:], second[:4]):
        leaves = [t.clone().requires_grad_(True) for t in w]
        logits = torch.relu(x[idx] @ leaves[0].T + leaves[1]) @ leaves[2].T + leaves[3]
        ce = F.cross_entropy(logits, y[idx])
        grads = torch.autograd.grad(ce, leaves)
        w = [t - 0.5 * gi for t, gi in zip(w, grads)]
        loss_sum += ce.item() * len(idx)
        correct += int((logits.argmax(1) == y[idx]).sum())
        seen += len(idx)
    out = local_train(net, x, y, lr=0.5, steps=3, batch_size=4,
                      generator=torch.Generator().manual_seed(5))
    assert all(torch.allclose(p.detach(), e, atol=1e-6) for p, e in zip(net.parameters(), w))
    assert out["train-loss"] == pytest.approx(loss_sum / seen, rel=1e-6)
    assert out["train-acc"] == pytest.approx(correct / seen)
    assert out["local-steps"] == 3 and seen == 10 and 0 < correct < seen


def test_training_runs_in_train_mode_and_without_a_generator_is_repeatable():
    """A model left in eval mode (the ClientApp shares one model between evaluate and train)
    trains in train mode (dropout on); without a generator the mini-batches are the same on
    every call."""
    seen_modes = []

    class Spy(nn.Module):
        def forward(self, x):
            seen_modes.append(self.training)
            return x

    x, y = data()
    results = []
    for _ in range(2):
        torch.manual_seed(0)  # same weights; the global RNG differs between the two calls below
        net = nn.Sequential(Spy(), nn.Linear(4, 3))
        net.eval()
        torch.rand(7 + len(results))
        local_train(net, x, y, lr=0.5, steps=3, batch_size=4)
        results.append([p.detach().clone() for p in net.parameters()])
    assert seen_modes and all(seen_modes)
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_a_classifier_that_is_not_last_is_refused():
    net = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3))
    net.classifier_names = ("1.weight", "1.bias")
    assert borderline(net, "classifier") == 2
    net.classifier_names = ("0.weight", "0.bias")
    with pytest.raises(ValueError, match="must be its last parameters"):
        borderline(net, "classifier")


def test_train_metrics_of_a_single_example():
    """One correctly classified example, one step: the loss is its cross-entropy and the
    accuracy 1."""
    x, y = data()
    net = tiny_net()
    with torch.no_grad():
        logits = net(x)
    i = int((logits.argmax(1) == y).nonzero()[0])  # an example the initial net gets right
    out = local_train(net, x[i:i + 1], y[i:i + 1], lr=0.1, steps=1, batch_size=1)
    assert out["train-acc"] == 1.0
    assert out["train-loss"] == pytest.approx(
        F.cross_entropy(logits[i:i + 1], y[i:i + 1]).item(), rel=1e-6)


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_the_proximal_part_at_small_beta_and_at_zero(beta):
    """client-objective 'proximal' with beta <= 1 (0: e.g. fedacg with beta overridden to 0):
    two full-batch steps of w - lr * (grad CE(w) + beta * (w - phi)), by hand."""
    from client_app.local_update import LocalConfig, local_update
    from methods.fedprox import ProximalTerm

    x, y = data()
    net = tiny_net()
    phi = [p.detach().clone() for p in net.parameters()]
    w = [t.clone() for t in phi]
    for _ in range(2):
        leaves = [t.clone().requires_grad_(True) for t in w]
        ce = F.cross_entropy(torch.relu(x @ leaves[0].T + leaves[1]) @ leaves[2].T + leaves[3], y)
        grads = torch.autograd.grad(ce, leaves)
        w = [wi - LR * (gi + beta * (wi - p)) for wi, gi, p in zip(w, grads, phi)]
    local_update(net, x, y, LocalConfig(lr=LR, local_iterations=2, batch_size=len(y)),
                 parts=[ProximalTerm(ProximalTerm.Settings(beta=beta))])
    assert all(torch.allclose(p.detach(), e, atol=1e-6) for p, e in zip(net.parameters(), w))


def test_gc_leaves_scalars_alone_and_vectors_as_gc_vectors_says():
    """P: a 0-d tensor is left alone; a vector is centred ('center') or left alone ('skip')."""
    from models.centralization import centralize_

    for vectors in ("center", "skip"):
        assert centralize_(torch.tensor(3.0), vectors).item() == 3.0
    assert centralize_(torch.tensor([1.0, 2.0, 6.0]), "center").tolist() == [-2.0, -1.0, 3.0]
    assert centralize_(torch.tensor([1.0, 2.0, 6.0]), "skip").tolist() == [1.0, 2.0, 6.0]
