import math

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


# --- GC-Fed's models and initialisations (docs/data.md#models) ----------------------------------


def test_gcfed_vgg11_is_torchvision_s_shape():
    """vgg11-gcfed: torchvision's vgg11() layer for layer, counted by hand: 8 convs 3x3 (+ bias)
    and a 25088-4096-4096-C head; torchvision documents 132,863,336 parameters for 1000 classes."""
    convs = [(3, 64), (64, 128), (128, 256), (256, 256), (256, 512), (512, 512), (512, 512),
             (512, 512)]
    features = sum(cin * cout * 9 + cout for cin, cout in convs)
    assert features == 9_220_480

    def head(c):
        return 512 * 7 * 7 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * c + c

    assert features + head(1000) == 132_863_336
    with torch.device("meta"):  # shapes only: ~130M parameters, no memory
        assert sum(p.numel() for p in build_model("vgg11-gcfed", (3, 32, 32), 1000)
                   .parameters()) == features + head(1000)
        model = build_model("vgg11-gcfed", (3, 32, 32), 100)
        assert model(torch.empty(2, 3, 32, 32)).shape == (2, 100)
    assert sum(p.numel() for p in model.parameters()) == features + head(100)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    conv_names = [f"features.{i}.weight" for i in (0, 3, 6, 8, 11, 13, 16, 18)]  # torchvision's
    assert [shapes[n] for n in conv_names] == [(o, i, 3, 3) for i, o in convs]
    assert (shapes["classifier.0.weight"], shapes["classifier.3.weight"],
            shapes["classifier.6.weight"]) == ((4096, 25088), (4096, 4096), (100, 4096))
    assert [type(m).__name__ for m in model.classifier] == [
        "Linear", "ReLU", "Dropout", "Linear", "ReLU", "Dropout", "Linear"]
    assert model.avgpool.output_size == 7 and model.classifier[2].p == 0.5
    # the layer GC-Fed's code puts on torchvision's network keeps PyTorch's init (below)
    assert model.torchvision_default_layers == ("classifier.6",)


def test_gcfed_mlp_is_784_512_256_62():
    model = build_model("mlp-gcfed", (1, 28, 28), 62)
    assert [tuple(p.shape) for p in model.parameters()] == [
        (512, 784), (512,), (256, 512), (256,), (62, 256), (62,)]
    assert sum(p.numel() for p in model.parameters()) == (784 * 512 + 512 + 512 * 256 + 256
                                                          + 256 * 62 + 62)
    assert build_model("mlp", (1, 28, 28), 62).fc1.out_features == 200  # today's mlp stays


@pytest.mark.parametrize("name", ["cnn", "mlp-gcfed"])
def test_kaiming_init_is_gcfed_s(name):
    """init 'kaiming' = GC-Fed's init_weights(model, 'kaiming', 1.0): every Conv / Linear weight
    ~ N(0, 2 / fan_in) drawn in module order, zero biases (a second implementation here)."""
    shape = (3, 32, 32) if name == "cnn" else (1, 28, 28)
    model = build_model(name, shape, 10, seed=5, init="kaiming")
    build_model(name, shape, 10, seed=5)  # the same construction draws, then GC-Fed's
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    for layer in layers:
        fan_in = layer.weight[0].numel()
        expected = torch.randn(layer.weight.shape) * math.sqrt(2.0 / fan_in)
        torch.testing.assert_close(layer.weight.data, expected, rtol=1e-5, atol=1e-8)
        assert (layer.bias == 0).all()


@pytest.mark.parametrize("name,keep", [("vgg11", set()), ("resnet18", {"conv1", "linear"})])
def test_torchvision_init_as_gcfed_runs_it(name, keep):
    """init 'torchvision': convs ~ N(0, 2 / fan_out), linears ~ N(0, 0.01^2), biases 0, norms 1/0,
    in module order; the layers GC-Fed's code replaces (ResNet-18's stem and classifier) keep
    PyTorch's default: the values of the default build from the same seed."""
    args = (name, (3, 16, 16), 7)
    model = build_model(*args, seed=2, init="torchvision")
    default = build_model(*args, seed=2)  # same construction; the global RNG goes on from there
    assert set(getattr(model, "torchvision_default_layers", ())) == keep
    checked = 0
    for layer_name, layer in default.named_modules():
        mine = model.get_submodule(layer_name) if layer_name else model
        if layer_name in keep:
            assert torch.equal(mine.weight, layer.weight), layer_name
            continue
        if isinstance(layer, torch.nn.Conv2d):
            fan_out = layer.weight.shape[0] * layer.weight[0, 0].numel()
            expected = torch.randn(layer.weight.shape) * math.sqrt(2.0 / fan_out)
        elif isinstance(layer, torch.nn.Linear):
            expected = torch.randn(layer.weight.shape) * 0.01
        elif isinstance(layer, torch.nn.GroupNorm):
            assert (mine.weight == 1).all() and (mine.bias == 0).all()
            continue
        else:
            continue
        torch.testing.assert_close(mine.weight.data, expected, rtol=1e-5, atol=1e-8)
        assert mine.bias is None or (mine.bias == 0).all()
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("name", [m for m in IMAGE_MODELS if m != "vgg11-gcfed"])  # (130M)
def test_default_init_draws_nothing_more(name):
    """init 'default' leaves the layers' own initialisation: the model of earlier versions, and
    the global generator where the construction left it."""
    from models import _build

    torch.manual_seed(4)
    built = _build(name, (1, 8, 8), 10, 2).state_dict()
    after_construction = torch.randn(3)
    model = build_model(name, (1, 8, 8), 10, seed=4, init="default").state_dict()
    assert torch.equal(torch.randn(3), after_construction)
    assert all(torch.equal(built[k], model[k]) for k in built)
