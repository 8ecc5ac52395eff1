"""Gradient centralization P (docs/algorithms.md#gradient-centralization) and the layer sets
(docs/algorithms.md#gc-layer-sets)."""

import pytest
import torch

from models import build_model
from models.centralization import borderline_index, centralize_, gc_layer_names


def P(g, vectors="center"):
    return centralize_(g.clone(), vectors)


@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (6, 7), (5,)])
def test_idempotent_and_linear(shape):
    torch.manual_seed(0)
    g, h = torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)
    assert torch.allclose(P(P(g)), P(g), atol=1e-12)
    assert torch.allclose(P(2.5 * g - 0.7 * h), 2.5 * P(g) - 0.7 * P(h), atol=1e-12)
    assert P(g).abs().sum() > 0


def test_each_output_row_has_zero_mean():
    g = torch.randn(8, 3, 3, 3, dtype=torch.float64)
    means = P(g).mean(dim=(1, 2, 3))
    assert means.abs().max() < 1e-12
    assert g.mean(dim=(1, 2, 3)).abs().max() > 1e-3  # it was not centred before


def test_hand_example():
    g = torch.tensor([[1.0, 2.0, 3.0], [4.0, 4.0, 7.0]])
    assert torch.equal(P(g), torch.tensor([[-1.0, 0.0, 1.0], [-1.0, -1.0, 2.0]]))


def test_vectors_center_or_skip():
    b = torch.tensor([1.0, 2.0, 6.0])
    assert torch.equal(P(b, "center"), torch.tensor([-2.0, -1.0, 3.0]))
    assert torch.equal(P(b, "skip"), b)
    w = torch.tensor([[1.0, 3.0]])
    assert torch.equal(P(w, "skip"), torch.tensor([[-1.0, 1.0]]))  # >= 2-D always centred


def test_layer_sets_follow_the_classifier():
    cnn = build_model("cnn", (1, 8, 8), 10)
    names = [n for n, _ in cnn.named_parameters()]
    assert borderline_index(cnn, "classifier") == 6
    assert gc_layer_names(cnn, "features", "classifier") == names[:6]
    assert gc_layer_names(cnn, "classifier", "classifier") == ["fc2.weight", "fc2.bias"]
    assert gc_layer_names(cnn, "all", "classifier") == names
    assert gc_layer_names(cnn, "none", "classifier") == []
    vgg = build_model("vgg11", (3, 32, 32), 10)
    assert len(gc_layer_names(vgg, "classifier", "classifier")) == 6  # the last three linears
    # A fraction gc_lambda: the first floor(gc_lambda * L) tensors (L = 8 for the CNN).
    assert borderline_index(cnn, 0.5) == 4
    assert borderline_index(cnn, 0.8) == 6
    assert gc_layer_names(cnn, "features", 1.0) == names
