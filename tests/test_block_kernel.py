"""server_math/block_kernel.py: the compiled pass gives the numbers of a float64 computation and
of the PyTorch pass, and the server runs the PyTorch pass wherever the compiled one cannot run."""

import logging
import math

import pytest
import torch

from server_math import block_kernel
from server_math.blocks import flat, norms_and_sum, plan, weighted_sum_minus

needs_cc = pytest.mark.skipif(block_kernel.compiler() is None, reason="no C compiler here")

SHAPES = {"conv": (7, 3, 5, 5), "bias": (7,), "scalar": (), "empty": (0, 3), "fc": (40, 30)}


def states(n: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    phi = {k: torch.randn(s, generator=gen) for k, s in SHAPES.items()}
    models = [{k: v + torch.randn(v.shape, generator=gen) for k, v in phi.items()}
              for _ in range(n)]
    return phi, models


def pass_of(models, phi, weights, block=100, minus_scale=1.0, norms=True, mean=True):
    """The compiled pass over blocks of `block` elements (tensors split and grouped)."""
    keys = list(SHAPES)
    sizes = tuple(phi[k].numel() for k in keys)
    out = {k: torch.full_like(phi[k], 7.0) for k in keys}  # garbage: the pass zeroes it
    sq = block_kernel.run([flat(m, keys) for m in models], flat(phi, keys),
                          flat(out, keys) if mean else None, weights, plan(sizes, block), sizes,
                          minus_scale, norms)
    return sq, out


@pytest.fixture(autouse=True)
def fresh_kernel():
    """Each test starts in mode "auto" and leaves the loaded loop (or its absence) as found."""
    block_kernel.set_mode("auto")
    yield
    block_kernel.set_mode("auto")


@needs_cc
@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 9])  # groups of four and the ones left over
@pytest.mark.parametrize("minus_scale", [1.0, 0.0, 0.375])
def test_the_compiled_pass_is_the_float64_sum_and_norms(n, minus_scale):
    phi, models = states(n)
    weights = [0.5 + i for i in range(n)]  # all different: a swapped or reused weight shows
    sq, out = pass_of(models, phi, weights, minus_scale=minus_scale)
    assert sq.shape == (n, len(plan(tuple(v.numel() for v in phi.values()), 100)))
    for m, got in zip(models, sq.sum(1).sqrt().tolist()):
        want = math.sqrt(sum(float((m[k].double() - phi[k].double()).square().sum())
                             for k in SHAPES))
        assert got == pytest.approx(want, rel=1e-6)
    for k in SHAPES:
        want = (sum(w * m[k].double() for w, m in zip(weights, models))
                - minus_scale * phi[k].double())
        torch.testing.assert_close(out[k].double(), want, rtol=1e-6, atol=1e-5)


@needs_cc
def test_norms_alone_and_sum_alone_are_the_same_numbers_as_both():
    phi, models = states(6)
    weights = [0.1, 0.2, 0.3, 0.15, 0.15, 0.1]
    sq, out = pass_of(models, phi, weights)
    sq_only, _ = pass_of(models, phi, weights, mean=False)
    none, out_only = pass_of(models, phi, weights, norms=False)
    assert none is None
    torch.testing.assert_close(sq_only, sq, rtol=1e-6, atol=0)
    assert all(torch.equal(out_only[k], out[k]) for k in SHAPES)


@needs_cc
def test_the_compiled_pass_is_the_pytorch_pass_in_any_thread_count():
    phi, models = states(9, seed=1)
    keys, weights = list(SHAPES), [1 / 9] * 9
    block_kernel.set_mode("torch")
    plain_norms, plain = norms_and_sum(models, phi, keys, weights)
    block_kernel.set_mode("auto")
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 3):  # the blocks of each range are computed alike: the same bits
            torch.set_num_threads(count)
            results.append(norms_and_sum(models, phi, keys, weights))
    finally:
        torch.set_num_threads(threads)
    (norms, mean), (norms3, mean3) = results
    assert norms == norms3 and all(torch.equal(mean[k], mean3[k]) for k in keys)
    assert norms == pytest.approx(plain_norms, rel=1e-5)
    for k in keys:  # one rounding apart at most (PyTorch's FMA or plain kernels)
        torch.testing.assert_close(mean[k], plain[k], rtol=1e-6, atol=1e-6)
    again = weighted_sum_minus(models, weights, phi, keys)  # the sum alone: the same bits
    assert all(torch.equal(again[k], mean[k]) for k in keys)


@needs_cc
def test_a_reply_that_is_not_finite_has_that_norm_and_no_other():
    phi, models = states(5)
    models[1]["fc"][3, 4] = float("nan")
    models[4]["bias"][0] = float("inf")
    models[2]["conv"][0, 0, 0, 0] = 3e38  # finite, but its square overflows float32
    sq, _ = pass_of(models, phi, [0.2] * 5)
    norms = sq.sum(1).sqrt().tolist()
    assert math.isnan(norms[1]) and norms[2] == norms[4] == math.inf
    assert math.isfinite(norms[0]) and math.isfinite(norms[3])


@needs_cc
def test_sizes_that_do_not_fit_the_plan_are_refused_before_any_pointer_is_passed():
    phi, models = states(2)
    keys = list(SHAPES)
    sizes = tuple(phi[k].numel() for k in keys)
    short = flat(models[1], keys)
    short[-1] = short[-1][:-1]  # one element short: the loop would read past its end
    with pytest.raises(ValueError, match="do not fit"):
        block_kernel.run([flat(models[0], keys), short], flat(phi, keys), None, None,
                         plan(sizes, 100), sizes)


def test_other_tensors_and_mode_torch_go_to_pytorch():
    phi, models = states(2)
    keys = list(SHAPES)
    sizes = tuple(phi[k].numel() for k in keys)
    as64 = lambda s: {k: v.double() for k, v in s.items()}  # noqa: E731
    assert block_kernel.run([flat(as64(m), keys) for m in models], flat(as64(phi), keys), None,
                            None, plan(sizes), sizes) is False
    block_kernel.set_mode("torch")
    assert block_kernel.run([flat(m, keys) for m in models], flat(phi, keys), None, None,
                            plan(sizes), sizes) is False
    with pytest.raises(ValueError, match="choose one of auto, torch"):
        block_kernel.set_mode("fast")
    norms, _ = norms_and_sum([as64(m) for m in models], as64(phi), keys)  # PyTorch's, in f64
    want = math.sqrt(sum(float((models[0][k].double() - phi[k].double()).square().sum())
                         for k in keys))
    assert norms[0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("why", ["no compiler", "a compiler that fails", "a library that "
                                 "does not load"])
def test_without_a_working_compiler_the_server_says_so_once_and_runs_pytorch(
        monkeypatch, caplog, why):
    if why == "no compiler":
        monkeypatch.setattr(block_kernel, "compiler", lambda: None)
    elif why == "a compiler that fails":
        monkeypatch.setenv("CC", "false")  # exits 1 for every command line
    else:  # e.g. /tmp mounted noexec: dlopen refuses the file
        monkeypatch.setenv("CC", "true")  # "builds" nothing: there is no file to load
    block_kernel._load.cache_clear()
    try:
        phi, models = states(3)
        keys = list(SHAPES)
        with caplog.at_level(logging.INFO, logger="flwr"):
            norms, mean = norms_and_sum(models, phi, keys, [0.2, 0.3, 0.5])
            norms_and_sum(models, phi, keys)
        said = [r.getMessage() for r in caplog.records if "Server pass: PyTorch" in r.getMessage()]
        assert len(said) == 1
        assert ("no C compiler" in said[0]) == (why == "no compiler")
        assert ("did not load" in said[0]) == why.startswith("a library")
        want = sum(w * m["fc"].double() for w, m in zip([0.2, 0.3, 0.5], models))
        torch.testing.assert_close(mean["fc"].double(), want - phi["fc"].double(), rtol=0,
                                   atol=1e-5)
    finally:
        block_kernel._load.cache_clear()  # the next test compiles (or not) afresh


@pytest.mark.parametrize("mode", ["torch", "auto"])
def test_the_run_config_key_picks_the_pass_of_the_servers_run(monkeypatch, tmp_path, mode):
    """`server-pass` reaches the ServerApp's strategy: with 'torch' the compiled pass is never
    even looked for; with 'auto' it is (here it "fails to build": the run goes on in PyTorch)."""
    from inprocess import run_in_process

    looked = []
    monkeypatch.setattr(block_kernel, "_load", lambda: looked.append(1))
    block_kernel.set_mode("torch" if mode == "auto" else "auto")  # the run must set it
    run_in_process({"model": "mlp", "num-server-rounds": 1, "local-iterations": 1,
                    "checkpoint-every": 0, "plot-every": 0, "out-dir": str(tmp_path),
                    "run-name": mode, "server-pass": mode}, 2)
    assert bool(looked) == (mode == "auto")
    assert (tmp_path / mode / "final_model.pt").exists()
