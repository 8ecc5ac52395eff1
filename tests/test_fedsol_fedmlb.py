"""FedSOL and FedMLB (docs/baselines.md#fedsol, #fedmlb): their invariants, one step's gradient and
one loss value against plain second implementations written here, the models' stage outputs, the
config's refusals, and short runs through the real ServerApp and ClientApp in-process."""

from __future__ import annotations

import copy
import json
import math
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

import methods
from client_app.client_step import LocalContext
from client_app.local_update import LocalConfig, local_update
from methods.fedmlb import MultiLevelBranches
from methods.fedsol import SolPerturbation, sol_perturbation
from methods.parts import ClientPart, MethodDefinition
from models import ResNet18GN
from experiments.superlink import CONNECTION
from run_config import ConfigError, resolve
from test_preset_referee import final_theta

# --- FedSOL ----------------------------------------------------------------------------------


def test_sol_perturbation_by_hand():
    # w - phi = [[3, 0], [-4, 1]]: columns of |w - phi| normalised -> [[.6, 0], [.8, 1]];
    # g_p = ([[1, 2], [2, 2]], [4, 0]) has norm sqrt(1+4+4+4+16) = sqrt(29); bias moved by
    # |[1, -2]| / sqrt(5)
    w = [torch.tensor([[3.0, 0.0], [-4.0, 1.0]]), torch.tensor([1.0, -2.0])]
    phi = [torch.zeros(2, 2), torch.zeros(2)]
    g = [torch.tensor([[1.0, 2.0], [2.0, 2.0]]), torch.tensor([4.0, 0.0])]
    e = sol_perturbation(w, phi, g, rho=0.5)
    s = 0.5 / (math.sqrt(29) + 1e-12)
    assert torch.allclose(e[0], torch.tensor([[0.6 * 1, 0.0], [0.8 * 2, 1.0 * 2]]) * s)
    assert torch.allclose(e[1], torch.tensor([1 / math.sqrt(5) * 4, 0.0]) * s)
    # at w = phi nothing moves, whatever the gradient; a parameter without gradient stays
    assert all(torch.equal(t, torch.zeros_like(t)) for t in sol_perturbation(phi, phi, g, 1.0))
    assert torch.equal(sol_perturbation(w, phi, [g[0], None], 1.0)[1], torch.zeros(2))


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 4))


def _data(n: int = 12, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=g), torch.randint(0, 4, (n,), generator=g)


def _train(model, parts, steps, ctx=None, **cfg):
    x, y = _data()
    local = LocalConfig(**{"lr": 0.3, "local_iterations": steps, "batch_size": 4, **cfg})
    local_update(model, x, y, local, torch.Generator().manual_seed(3), parts=parts, ctx=ctx)
    return model


def _equal(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(),
                                                  b.state_dict().values()))


def test_fedsol_at_phi_first_step_is_plain_ce_and_rho_zero_is_fedavg():
    sol = SolPerturbation(SolPerturbation.Settings(sol_rho=1.0))
    # w = phi at the first step: e = 0 exactly, so the step is FedAvg's, bit for bit
    assert _equal(_train(_mlp(), [sol], 1, local_momentum=0.9, weight_decay=1e-3),
                  _train(_mlp(), [], 1, local_momentum=0.9, weight_decay=1e-3))
    # rho = 0: FedAvg at every step
    assert _equal(_train(_mlp(), [SolPerturbation(SolPerturbation.Settings(sol_rho=0.0))], 5),
                  _train(_mlp(), [], 5))
    # once w has left phi, rho > 0 takes other steps
    assert not _equal(_train(_mlp(), [sol], 5), _train(_mlp(), [], 5))


def _reference_sol_gradient(model, teacher, x, y, rho):
    """A plain second implementation of one FedSOL gradient (functional, no loop)."""
    names = [n for n, _ in model.named_parameters()]
    w = {n: p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()}
    phi = dict(teacher.named_parameters())
    p_t = torch.softmax(teacher(x) / 3, dim=1).detach()
    log_q = torch.log_softmax(functional_call(model, w, (x,)) / 3, dim=1)
    kl = (p_t * (p_t.log() - log_q)).sum(1).mean()
    g_p = torch.autograd.grad(kl, [w[n] for n in names])
    norm = torch.sqrt(sum((g ** 2).sum() for g in g_p))
    moved = {}
    for n, g in zip(names, g_p):
        d = (w[n] - phi[n]).abs().detach()
        col = d.pow(2).sum(0, keepdim=True).sqrt().clamp_min(1e-12)
        moved[n] = (w[n].detach() + rho * d / col * g / (norm + 1e-12)).requires_grad_(True)
    ce = F.cross_entropy(functional_call(model, moved, (x,)), y)
    return dict(zip(names, torch.autograd.grad(ce, [moved[n] for n in names])))


@pytest.mark.parametrize("local_gc", [False, True])
def test_fedsol_step_gradient_matches_a_second_implementation(local_gc):
    model, teacher = _mlp(0), _mlp(5).requires_grad_(False)  # w far from phi: e != 0
    x, y = _data()
    expected = _reference_sol_gradient(model, teacher, x, y, rho=0.7)
    if local_gc:  # GC acts on the step's final gradient (the one taken at w + e)
        expected = {n: g - g.mean(dim=tuple(range(1, g.dim())) or None, keepdim=True)
                    for n, g in expected.items()}
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    ctx = LocalContext(_teacher=teacher)
    local = LocalConfig(lr=1.0, local_iterations=1, batch_size=len(y),
                        local_gc_layers=4 if local_gc else 0)
    local_update(model, x, y, local,
                 parts=[SolPerturbation(SolPerturbation.Settings(sol_rho=0.7))], ctx=ctx)
    for n, p in model.named_parameters():  # lr 1, no momentum or decay: w_1 = w_0 - g
        assert torch.allclose(w0[n] - p.detach(), expected[n], atol=1e-6), n
    assert not torch.allclose(expected["0.weight"],
                              _reference_sol_gradient(model, teacher, x, y, rho=0.0)["0.weight"])


# --- FedMLB: the model's levels ----------------------------------------------------------------


def _resnet(seed: int = 0) -> ResNet18GN:
    torch.manual_seed(seed)
    return ResNet18GN((3, 4, 4), 10, gn_groups=2)


def _images(n: int = 3, seed: int = 2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 4, 4, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_resnet_levels_are_the_plain_forward_pass():
    model, (x, _) = _resnet(), _images()
    logits, a = model.forward_preactivations(x)
    assert torch.equal(logits, model(x)) and len(a) == 5
    # ReLU(a_0) is the stem's output, ReLU(a_l) stage l's output, computed module by module here
    out = torch.relu(model.gn1(model.conv1(x)))
    assert torch.equal(torch.relu(a[0]), out) and (a[0] < 0).any()
    for level, stage in enumerate((model.layer1, model.layer2, model.layer3, model.layer4), 1):
        out = stage(out)
        assert torch.equal(torch.relu(a[level]), out) and (a[level] < 0).any(), level
    for level in range(5):  # the rest of the same model from ReLU(a_l) gives its logits
        assert torch.allclose(model.forward_from(level, torch.relu(a[level])), logits, atol=1e-6)
    # the checkpoint names stay those of ResNet-18-GN
    names = list(model.state_dict())
    assert names[:2] == ["conv1.weight", "gn1.weight"] and names[-2:] == ["linear.weight",
                                                                        "linear.bias"]
    assert len(names) == 62 and "layer4.1.gn2.bias" in names


# --- FedMLB: the loss ------------------------------------------------------------------------


def _conv_gn(x, sd, conv, gn, stride, padding):
    x = F.conv2d(x, sd[f"{conv}.weight"], stride=stride, padding=padding)
    return F.group_norm(x, 2, sd[f"{gn}.weight"], sd[f"{gn}.bias"], eps=1e-5)


def _plain_block(x, sd, pre, stride):
    """A BasicBlock written out: the output before its last ReLU."""
    out = torch.relu(_conv_gn(x, sd, f"{pre}.conv1", f"{pre}.gn1", stride, 1))
    out = _conv_gn(out, sd, f"{pre}.conv2", f"{pre}.gn2", 1, 1)
    if f"{pre}.shortcut.0.weight" in sd:
        x = _conv_gn(x, sd, f"{pre}.shortcut.0", f"{pre}.shortcut.1", stride, 0)
    return out + x


STRIDES = (1, 2, 2, 2)


def _plain_stage(h, sd, s):
    h = torch.relu(_plain_block(h, sd, f"layer{s}.0", STRIDES[s - 1]))
    return _plain_block(h, sd, f"layer{s}.1", 1)


def _plain_head(h, sd):
    return F.linear(h.mean(dim=(2, 3)), sd["linear.weight"], sd["linear.bias"])


def _plain_mlb_objective(sd, sd_t, x, y, l1, l2, temp):
    """CE(main) + l1 mean_l CE(h_l) + l2 mean_l KL(softmax(h_l/T) || softmax(main/T)), from the
    weights alone (sd local, sd_t teacher)."""
    a = [_conv_gn(x, sd, "conv1", "gn1", 1, 1)]
    for s in range(1, 5):
        a.append(_plain_stage(torch.relu(a[-1]), sd, s))
    main = _plain_head(torch.relu(a[-1]), sd)
    ces, kls = [], []
    for level in range(5):
        h = torch.relu(a[level])
        for s in range(level + 1, 5):
            h = torch.relu(_plain_stage(h, sd_t, s))
        h = _plain_head(h, sd_t)
        ces.append(F.cross_entropy(h, y))
        kls.append(F.kl_div(F.log_softmax(main / temp, 1), F.softmax(h / temp, 1),
                            reduction="batchmean"))
    return F.cross_entropy(main, y) + l1 * sum(ces) / 5 + l2 * sum(kls) / 5


def _mlb(l1=1.0, l2=1.0, temp=1.0):
    return MultiLevelBranches(MultiLevelBranches.Settings(mlb_lambda1=l1, mlb_lambda2=l2,
                                                          mlb_temperature=temp))


def _loop_objective(model, part, x, y, teacher=None):
    """The local update's loss for one batch with the part (as the loop computes it)."""
    ctx = LocalContext(model=model, _teacher=teacher)
    part.begin(ctx)
    logits = part.model_forward(ctx, x)
    return F.cross_entropy(logits, y) + part.loss(ctx, logits, x, y)


def test_fedmlb_with_zero_weights_is_the_plain_local_update():
    x, y = _images(6)
    local = LocalConfig(lr=0.1, local_iterations=1, batch_size=6)
    plain, mlb = _resnet(), _resnet()
    local_update(plain, x, y, local, torch.Generator().manual_seed(0))
    local_update(mlb, x, y, local, torch.Generator().manual_seed(0), parts=[_mlb(0.0, 0.0)])
    assert _equal(mlb, plain)


def test_fedmlb_at_phi_is_one_plus_lambda1_ce_with_zero_kl():
    model, (x, y) = _resnet(), _images()
    ce = F.cross_entropy(model(x), y)
    loss = _loop_objective(model, _mlb(l1=0.6, l2=0.7), x, y)
    assert torch.allclose(loss, (1 + 0.6) * ce, atol=1e-6)
    # the KL terms alone: zero, with zero gradient
    model.zero_grad()
    kl = _loop_objective(model, _mlb(l1=0.0, l2=1.0), x, y) - F.cross_entropy(model(x), y)
    kl.backward()
    assert abs(kl.item()) < 1e-6
    assert max(p.grad.abs().max().item() for p in model.parameters()) < 1e-6


def test_fedmlb_loss_and_gradient_match_a_second_implementation():
    model, (x, y) = _resnet(0), _images()
    teacher = copy.deepcopy(model)
    with torch.no_grad():  # a teacher away from w, so every branch term is non-trivial
        for p in teacher.parameters():
            p.add_(0.05 * torch.randn_like(p))
    teacher.requires_grad_(False)
    loss = _loop_objective(model, _mlb(0.6, 0.7, 2.0), x, y, teacher)
    loss.backward()
    sd = {n: p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()}
    sd_t = dict(teacher.named_parameters())
    expected = _plain_mlb_objective(sd, sd_t, x, y, 0.6, 0.7, 2.0)
    assert torch.allclose(loss, expected, rtol=1e-5), (loss.item(), expected.item())
    expected.backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, sd[n].grad, rtol=1e-4, atol=1e-6), n
    assert all(p.grad is None for p in teacher.parameters())  # the teacher stays frozen


# --- config ----------------------------------------------------------------------------------


class _OtherStepper(ClientPart):
    name = "other-stepper"

    def step_grad(self, ctx, x, y, objective):
        return super().step_grad(ctx, x, y, objective)


def test_config_presets_and_refusals():
    cfg = resolve({"method": "fedsol"})
    assert (cfg["client-objective"], cfg["aggregation"], cfg["sol-rho"]) == ("sol", "uniform", 1.0)
    # FedSOL composes with look-ahead and with GC (GC on the step's final gradient)
    resolve({"method": "fedsol", "lookahead": True, "lam": 0.85, "local-gc": "features",
             "global-gc": "all"})
    mlb = resolve({"method": "fedmlb", "model": "resnet18"})
    assert (mlb["client-objective"], mlb["mlb-lambda1"], mlb["mlb-lambda2"],
            mlb["mlb-temperature"], mlb["lookahead"]) == ("mlb", 1.0, 1.0, 1.0, False)
    acg = resolve({"method": "fedmlb+acg", "model": "resnet18"})
    assert (acg["client-objective"], acg["lookahead"], acg["lam"], acg["beta"]) == \
        ("mlb", True, 0.85, 0.0)
    with pytest.raises(ConfigError, match="'mlb' runs only on model 'resnet18' .not 'cnn'"):
        resolve({"method": "fedmlb"})
    for gc in ({"local-gc": "features"}, {"global-gc": "all"}):
        with pytest.raises(ConfigError, match="untested.*allow-untested-combinations"):
            resolve({"method": "fedmlb", "model": "resnet18", **gc})
        allowed = resolve({"method": "fedmlb", "model": "resnet18", **gc,
                           "allow-untested-combinations": True})
        assert len(methods.untested_combinations(allowed)) == 1
    items = (_OtherStepper, MethodDefinition("two-steppers", "test only", "momentum",
                                             ("sol", "other-stepper")))
    methods.register(*items)
    try:
        with pytest.raises(ConfigError, match="'sol' and 'other-stepper' both replace"):
            resolve({"method": "two-steppers"})
    finally:
        methods.unregister(*items)


def test_paper_rows_run_the_presets():
    from run_config import load_setup, setup_names

    found = set()
    for setup in setup_names():
        for row in load_setup(setup)["reported"]["rows"]:
            if "sol" in row or "mlb" in row:  # `setup = ...` + `method = <row>` runs it
                found.add(row)
                cfg = resolve({"setup": setup, "method": row})
                assert cfg["client-objective"] == ("sol" if "sol" in row else "mlb")
    assert found == {"fedsol", "fedmlb", "fedmlb+acg"}
    acg = load_setup("fedacg-t1a-cifar100")["reported"]["rows"]["fedmlb+acg"]
    assert acg == [61.32, 65.67, 216, 316]


# --- end to end, in-process (the real ServerApp and ClientApp through an in-memory grid) -----

E2E = {"num-server-rounds": 2, "local-iterations": 2, "seed": 7, "checkpoint-every": 0,
       "eval-every": 2, "test-max-examples": 50}


def test_fedsol_runs_end_to_end_and_rho_zero_is_fedavg(tmp_path):
    """rho = 0 runs FedAvg's very operations: bitwise equal in one process (same kernels)."""
    fedavg = final_theta(tmp_path / "a", {**E2E, "method": "fedavg", "aggregation": "uniform"}, 4)
    sol0 = final_theta(tmp_path / "b", {**E2E, "method": "fedsol", "sol-rho": 0.0}, 4)
    sol = final_theta(tmp_path / "c", {**E2E, "method": "fedsol"}, 4)
    assert all(torch.equal(sol0[k], v) for k, v in fedavg.items())
    assert not all(torch.equal(sol[k], v) for k, v in fedavg.items())


def test_fedmlb_runs_end_to_end(tmp_path):
    rc = {**E2E, "model": "resnet18", "num-server-rounds": 1, "local-iterations": 1,
          "batch-size": 8, "eval-every": 1}
    final_theta(tmp_path, {**rc, "method": "fedmlb+acg"}, 2)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["config"]["client-objective"] == "mlb", results.keys()


@pytest.mark.slow
@pytest.mark.each_method
def test_flwr_run_fedsol_and_fedmlb(superlink):
    """Each method through `flwr run` on digits: 2 rounds, 4 simulated nodes."""
    env, home = superlink
    for method, extra in (("fedsol", "local-gc='features' global-gc='all'"),
                          ("fedmlb+acg", "model='resnet18' local-iterations=2 batch-size=8")):
        run = method.replace("+", "-")
        out = subprocess.run(
            ["flwr", "run", ".", CONNECTION, "--stream", "--federation-config",
             "num-supernodes=4", "--run-config",
             f"method='{method}' {extra} num-server-rounds=2 out-dir='{home}/runs' "
             f"run-name='{run}'"],
            cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
            timeout=400)
        assert out.returncode == 0 and "[round 2/2] test-acc" in out.stdout, \
            out.stdout[-3000:] + out.stderr[-3000:]
        results = json.loads((home / "runs" / run / "results.json").read_text())
        assert results["config"]["method"] == method and results["status"] == "complete", results
