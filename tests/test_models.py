import pytest
import torch

from models import MODELS, build_model


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("shape,classes", [((1, 8, 8), 10), ((3, 32, 32), 100)])
def test_shapes_and_classifier(name, shape, classes):
    model = build_model(name, shape, classes)
    assert model(torch.randn(2, *shape)).shape == (2, classes)
    names = [n for n, _ in model.named_parameters()]
    k = len(model.classifier_names)
    assert tuple(names[-k:]) == model.classifier_names
    assert dict(model.named_parameters())[model.classifier_names[-1]].shape == (classes,)
    # GroupNorm models only: every state_dict entry is a float parameter (no buffers to average)
    assert len(model.state_dict()) == len(names)


def test_gn_groups_and_seeded_init():
    m = build_model("resnet18", (3, 32, 32), 10, gn_groups=32)
    assert m.gn1.num_groups == 32
    a = build_model("cnn", (1, 8, 8), 10, seed=3).state_dict()
    b = build_model("cnn", (1, 8, 8), 10, seed=3).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
