"""The training input pipeline: batched crop/flip/rotation on the device, seeded; none at test
time."""

import pytest
import torch

from client_app.local_update import LocalConfig, local_update
from feddata import DATASET_BY_NAME, TrainTransform
from feddata.augment import hflip, random_crop, rotate
from feddata.decode import char_indices, normalize
from models import build_model

CIFAR = DATASET_BY_NAME["cifar10"]


def batch(n=16, c=3, h=32, w=32, seed=0):
    return torch.randint(0, 256, (n, c, h, w), generator=torch.Generator().manual_seed(seed),
                         dtype=torch.uint8)


def test_crop_offsets_shift_the_image_with_black_padding():
    x = batch(4).float()
    assert torch.equal(random_crop(x, 4, torch.full((4, 2), 4)), x)  # centred window = identity
    out = random_crop(x, 4, torch.tensor([[0, 0], [8, 8], [0, 8], [2, 5]]))
    assert torch.equal(out[0, :, 4:, 4:], x[0, :, :-4, :-4]) and out[0, :, :4].abs().sum() == 0
    assert torch.equal(out[1, :, :-4, :-4], x[1, :, 4:, 4:]) and out[1, :, -4:].abs().sum() == 0
    assert torch.equal(out[2, :, 4:, :-4], x[2, :, :-4, 4:])
    assert torch.equal(out[3, :, 2:, :], torch.nn.functional.pad(x[3], (-1, 1))[:, :-2, :])


def test_flip_and_rotation_are_exact():
    x = batch(3).float()
    out = hflip(x, torch.tensor([True, False, True]))
    assert torch.equal(out[0], x[0].flip(2)) and torch.equal(out[1], x[1])
    assert torch.equal(rotate(x, torch.zeros(3)), x)
    quarter = rotate(x, torch.full((3,), 90.0))
    assert torch.equal(quarter, torch.rot90(x, 1, (2, 3))) or \
        torch.equal(quarter, torch.rot90(x, -1, (2, 3)))
    tilted = rotate(x, torch.full((3,), 10.0))
    assert tilted[:, :, 0, 0].abs().sum() == 0  # corners leave the image: black
    assert (tilted[:, :, 12:20, 12:20] == x[:, :, 12:20, 12:20]).float().mean() > 0.5


def test_train_transform_shapes_ranges_and_seed():
    t = TrainTransform(CIFAR, "crop-flip", padding=4, rotation=10.0)
    x = batch(64)
    a = t(x, torch.Generator().manual_seed(7))
    b = t(x, torch.Generator().manual_seed(7))
    c = t(x, torch.Generator().manual_seed(8))
    assert a.shape == (64, 3, 32, 32) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    lo = (0 - torch.tensor(CIFAR.mean)) / torch.tensor(CIFAR.std)
    hi = (1 - torch.tensor(CIFAR.mean)) / torch.tensor(CIFAR.std)
    per_channel = a.transpose(0, 1).reshape(3, -1)
    assert ((per_channel.min(1).values >= lo - 1e-5).all()
            and (per_channel.max(1).values <= hi + 1e-5).all())
    assert torch.isclose(per_channel.min(1).values, lo, atol=1e-5).all()  # black padding appears
    assert not torch.equal(a, normalize(x, CIFAR))  # it did augment


def test_flips_and_offsets_are_uniform():
    t = TrainTransform(CIFAR, "crop-flip", padding=0)
    x = torch.zeros(2000, 1, 1, 2, dtype=torch.uint8)
    x[..., 0] = 255  # bright left pixel: it moves right when flipped
    out = t(x, torch.Generator().manual_seed(0))
    flipped = (out[:, 0, 0, 1] > out[:, 0, 0, 0]).float().mean().item()
    assert 0.45 < flipped < 0.55


def test_test_time_path_leaves_inputs_unchanged():
    x = batch(8)
    plain = TrainTransform(CIFAR, "none", rotation=10.0)  # 'none' turns rotation off too
    assert not plain.augments and plain.rotation == 0
    assert torch.equal(plain(x, torch.Generator().manual_seed(0)), normalize(x, CIFAR))
    # 'auto': crop-flip for CIFAR/Tiny-ImageNet, nothing for characters and digits
    assert TrainTransform(CIFAR, "auto").augments
    assert not TrainTransform(DATASET_BY_NAME["femnist"], "auto").augments
    assert not TrainTransform(DATASET_BY_NAME["digits"], "auto").augments
    tokens = torch.from_numpy(char_indices(["to be, or not to be"], 80))
    shakespeare = TrainTransform(DATASET_BY_NAME["shakespeare"], "crop-flip")
    assert shakespeare(tokens, torch.Generator()) is tokens
    # LEAF's indices (ALL_LETTERS.find) of "to be"
    assert tokens[0, :5].tolist() == [72, 67, 1, 54, 57]


def test_local_update_with_augmentation_is_deterministic():
    x, y = batch(40, seed=1), torch.arange(40) % 10
    t = TrainTransform(CIFAR, "crop-flip", rotation=10.0)
    cfg = LocalConfig(lr=0.05, local_iterations=3, batch_size=8)
    weights = []
    for _ in range(2):
        model = build_model("cnn", (3, 32, 32), 10, seed=0)
        local_update(model, x, y, cfg, torch.Generator().manual_seed(3), t)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(weights[0], weights[1])
    model = build_model("cnn", (3, 32, 32), 10, seed=0)
    local_update(model, x, y, cfg, torch.Generator().manual_seed(3), TrainTransform(CIFAR, "none"))
    assert not torch.equal(weights[0],
                           torch.cat([p.detach().flatten() for p in model.parameters()]))


def test_prepare_normalizes_the_partition_once_to_the_same_values():
    """Without augmentation the client normalizes its partition once (TrainTransform.prepare):
    every mini-batch and the trained model are bit for bit those of batch-by-batch
    normalization."""
    x, y = batch(40, seed=2), torch.arange(40) % 10
    t = TrainTransform(CIFAR, "none")
    whole, left = t.prepare(x)
    assert left is None and whole.dtype == torch.float32
    idx = torch.randperm(40, generator=torch.Generator().manual_seed(0))[:8]
    assert torch.equal(whole[idx], t(x[idx], torch.Generator()))
    cfg = LocalConfig(lr=0.05, local_epochs=2, batch_size=8)
    weights = []
    for inputs, transform in ((x, t), (whole, left)):
        model = build_model("cnn", (3, 32, 32), 10, seed=0)
        local_update(model, inputs, y, cfg, torch.Generator().manual_seed(3), transform)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(weights[0], weights[1])
    # augmentation, or a float copy above max_bytes: batch by batch as before; text as it is
    crop = TrainTransform(CIFAR, "crop-flip")
    assert crop.prepare(x) == (x, crop)
    assert t.prepare(x, max_bytes=x.numel() * 4 - 1) == (x, t)
    assert t.prepare(x, max_bytes=x.numel() * 4)[1] is None
    tokens = torch.from_numpy(char_indices(["to be"], 80))
    assert TrainTransform(DATASET_BY_NAME["shakespeare"], "none").prepare(tokens) == (tokens, None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_transform_on_the_gpu_matches_the_cpu():
    t = TrainTransform(CIFAR, "crop-flip", rotation=10.0)
    x = batch(32)
    cpu = t(x, torch.Generator().manual_seed(5))
    gpu = t(x.cuda(), torch.Generator().manual_seed(5))
    assert gpu.is_cuda and torch.allclose(cpu, gpu.cpu(), atol=1e-5)


def test_crop_of_every_offset_is_the_window_of_the_padded_image():
    """Each image's window, cut one image at a time from its own padded copy by slicing (the
    definition), for every offset, several channels and a non-square image."""
    for c, h, w, pad in ((1, 28, 28, 4), (3, 5, 7, 2)):
        x = batch(2 * (2 * pad + 1) ** 2, c, h, w, seed=c).float()
        offsets = torch.tensor([(dy, dx) for dy in range(2 * pad + 1)
                                for dx in range(2 * pad + 1)] * 2)
        out = random_crop(x, pad, offsets)
        assert out.shape == x.shape
        for i, (dy, dx) in enumerate(offsets.tolist()):
            padded = torch.zeros(c, h + 2 * pad, w + 2 * pad)
            padded[:, pad:pad + h, pad:pad + w] = x[i]
            assert torch.equal(out[i], padded[:, dy:dy + h, dx:dx + w]), (c, i, dy, dx)
