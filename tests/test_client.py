"""The local update (docs/algorithms.md#local-update): proximal gradient, local GC, one SGD step by
hand."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from client_app.local_update import LocalConfig, local_update
from methods.fedprox import ProximalTerm, add_proximal_grad_
from models import build_model
from models.centralization import borderline_index


def test_proximal_term_adds_beta_times_w_minus_phi():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    phi = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    x, y, beta = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1]), 0.37
    # autograd of the full objective
    loss = F.cross_entropy(model(x), y) + beta / 2 * sum(
        ((p - q) ** 2).sum() for p, q in zip(model.parameters(), phi))
    full = torch.autograd.grad(loss, list(model.parameters()))
    # CE gradient + our added term
    params = list(model.parameters())
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    ce = [p.grad.clone() for p in params]
    add_proximal_grad_(params, phi, beta)
    for p, q, g_full, g_ce in zip(params, phi, full, ce):
        assert torch.allclose(p.grad - g_ce, beta * (p.detach() - q), atol=1e-7)
        assert torch.allclose(p.grad, g_full, atol=1e-6)


def test_local_gc_centres_feature_layers_and_leaves_the_classifier():
    torch.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    cut = borderline_index(model, "classifier")
    before = [p.detach().clone() for p in model.parameters()]
    raw = torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))
    cfg = LocalConfig(lr=1.0, local_iterations=1, batch_size=8, local_gc_layers=cut)
    local_update(model, x, y, cfg)
    steps = [b - p.detach() for b, p in zip(before, model.parameters())]  # = lr * used gradient
    names = [n for n, _ in model.named_parameters()]
    for i, (name, step, g) in enumerate(zip(names, steps, raw)):
        if i < cut:
            dims = tuple(range(1, step.dim())) if step.dim() > 1 else (0,)
            assert step.mean(dim=dims).abs().max() < 1e-6, name
            assert g.mean(dim=dims).abs().max() > 1e-6, name  # the raw gradient was not centred
        else:
            assert torch.allclose(step, g, atol=1e-6), name  # classifier: the raw gradient


def test_one_and_two_sgd_steps_by_hand():
    # Linear(2 -> 2), W = I, b = 0, one example x = [1, 2], label 1.
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    x, y = torch.tensor([[1.0, 2.0]]), torch.tensor([1])
    lr, alpha, wd, beta = 0.5, 2.0, 0.1, 0.3

    def grads(W, b):  # hand: dCE/dlogits = softmax - onehot, dW = outer(g, x), db = g
        z = [W[0][0] * 1 + W[0][1] * 2 + b[0], W[1][0] * 1 + W[1][1] * 2 + b[1]]
        e = [math.exp(v - max(z)) for v in z]
        g = [e[0] / sum(e), e[1] / sum(e) - 1]
        return [[g[0] * 1, g[0] * 2], [g[1] * 1, g[1] * 2]], g

    W0, b0 = [[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0]
    gW, gb = grads(W0, b0)  # step 1: w = phi, so the proximal term adds nothing
    W1 = [[W0[i][j] - lr * (alpha * gW[i][j] + wd * W0[i][j]) for j in range(2)] for i in range(2)]
    b1 = [b0[i] - lr * (alpha * gb[i] + wd * b0[i]) for i in range(2)]
    gW, gb = grads(W1, b1)  # step 2: + beta * (w - phi)
    W2 = [[W1[i][j] - lr * (alpha * gW[i][j] + beta * (W1[i][j] - W0[i][j]) + wd * W1[i][j])
           for j in range(2)] for i in range(2)]
    b2 = [b1[i] - lr * (alpha * gb[i] + beta * (b1[i] - b0[i]) + wd * b1[i]) for i in range(2)]

    cfg = LocalConfig(lr=lr, local_iterations=2, batch_size=1, alpha=alpha, weight_decay=wd)
    out = local_update(model, x, y, cfg, parts=[ProximalTerm(ProximalTerm.Settings(beta=beta))])
    assert torch.allclose(model.weight, torch.tensor(W2), atol=1e-6)
    assert torch.allclose(model.bias, torch.tensor(b2), atol=1e-6)
    assert out["local-steps"] == 2


def test_gradient_clipping_bounds_the_step():
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2) * 10)
        model.bias.zero_()
    before = [p.detach().clone() for p in model.parameters()]
    x, y = torch.tensor([[1.0, -3.0]]), torch.tensor([1])  # confidently wrong: big gradient
    local_update(model, x, y, LocalConfig(lr=1.0, local_iterations=1, batch_size=1, grad_clip=0.1))
    norm = torch.sqrt(sum(((b - p.detach()) ** 2).sum()
                          for b, p in zip(before, model.parameters())))
    assert abs(norm.item() - 0.1) < 1e-5  # raw gradient norm is far above 0.1


def test_epochs_and_iterations():
    # FedACG: 5 ep = 50 it
    assert LocalConfig(lr=1, local_epochs=5, batch_size=50).num_steps(500) == 50
    assert LocalConfig(lr=1, local_epochs=2, batch_size=16).num_steps(65) == 10
    assert LocalConfig(lr=1, local_epochs=2, local_iterations=7).num_steps(65) == 7


def test_partition_moves_to_the_training_device_once():
    from client_app.app import on_device
    from feddata.partition import PreparedPartition

    data = PreparedPartition(torch.zeros(4, 1, 8, 8, dtype=torch.uint8),
                             torch.zeros(4, dtype=torch.long),
                             torch.zeros(1, 1, 8, 8), torch.zeros(1, dtype=torch.long),
                             (1, 8, 8), 10)
    assert on_device(data, torch.device("cpu"))[0] is data.train_x  # CPU: the cached tensors
    moved = on_device(data, torch.device("meta"))  # stands in for a GPU on this machine
    assert moved[0].device.type == "meta" and moved[0].shape == (4, 1, 8, 8)
    assert on_device(data, torch.device("meta"))[0] is moved[0]  # moved once, then reused
