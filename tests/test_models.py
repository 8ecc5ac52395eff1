import pytest
import torch

from feddata import DATASET_BY_NAME
from models import IMAGE_MODELS, MODELS, build_model


@pytest.mark.parametrize("name", IMAGE_MODELS)
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


# Each dataset with the papers' model for it, on inputs of the dataset's shape.
@pytest.mark.parametrize("dataset", [d for d in DATASET_BY_NAME if d != "digits"])
def test_each_dataset_with_its_model(dataset):
    spec = DATASET_BY_NAME[dataset]
    model = build_model(spec.model, spec.in_shape, spec.num_classes)
    if spec.kind == "chars":
        x = torch.randint(0, spec.num_classes, (3, *spec.in_shape), dtype=torch.uint8)
    else:
        x = torch.randn(3, *spec.in_shape)
    assert model(x).shape == (3, spec.num_classes)
    names = [n for n, _ in model.named_parameters()]
    assert tuple(names[-len(model.classifier_names):]) == model.classifier_names
    assert len(model.state_dict()) == len(names)


def test_parameter_counts_and_leaf_classifiers():
    def count(m):
        return sum(p.numel() for p in m.parameters())

    assert count(build_model("resnet18", (3, 32, 32), 10)) == 11_173_962  # ~11.2M
    femnist = build_model("femnist-cnn", (1, 28, 28), 62)
    assert count(femnist) == 6_603_710  # LEAF's FEMNIST CNN (conv 32, conv 64, fc 2048, fc 62)
    assert femnist.classifier_names == ("fc2.weight", "fc2.bias")
    celeba = build_model("celeba-cnn", (3, 84, 84), 2)
    assert celeba.fc.in_features == 32 * 6 * 6  # 84 -> 42 -> 21 -> 11 -> 6
    lstm = build_model("char-lstm", (80,), 80)
    assert lstm.embedding.embedding_dim == 8 and lstm.lstm.hidden_size == 256
    assert lstm.lstm.num_layers == 2 and lstm.classifier_names == ("fc.weight", "fc.bias")
    assert set(MODELS) - set(IMAGE_MODELS) == {"char-lstm"}


def test_gn_groups_and_seeded_init():
    m = build_model("resnet18", (3, 32, 32), 10, gn_groups=32)
    assert m.gn1.num_groups == 32
    a = build_model("cnn", (1, 8, 8), 10, seed=3).state_dict()
    b = build_model("cnn", (1, 8, 8), 10, seed=3).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
