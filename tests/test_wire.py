"""models.wire: views of npy bytes equal NumPy's own reading, with the header parsed once."""

import io

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord

from models import wire


def npy(arr: np.ndarray, version=None) -> bytes:
    bio = io.BytesIO()
    if version is None:
        np.save(bio, arr, allow_pickle=False)
    else:
        np.lib.format.write_array(bio, arr, version=version, allow_pickle=False)
    return bio.getvalue()


ARRAYS = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    np.array(3.5, dtype=np.float16),  # 0-d
    np.zeros((0, 5), dtype=np.int64),
    np.arange(7, dtype=">i4"),  # big-endian
    np.array([True, False]),
]


@pytest.mark.parametrize("version", [None, (1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("index", range(len(ARRAYS)))
def test_view_equals_numpy_load(index, version):
    arr = ARRAYS[index]
    data = npy(arr, version)
    view = wire.array_view(data)
    ref = np.load(io.BytesIO(data), allow_pickle=False)
    assert view.dtype == ref.dtype and view.shape == ref.shape
    assert view.flags.f_contiguous == ref.flags.f_contiguous
    np.testing.assert_array_equal(view, ref)
    if version != (3, 0) and arr.size:  # a view of the bytes themselves, not a copy
        assert not view.flags.writeable


def test_header_parsed_once_per_distinct_header():
    wire._npy_header.cache_clear()
    record = ArrayRecord({f"t{i}": torch.full((3, 4), float(i)) for i in range(5)})
    first = wire.state_view(record)
    again = wire.state_view(ArrayRecord({f"t{i}": torch.full((3, 4), -1.0) for i in range(5)}))
    info = wire._npy_header.cache_info()
    assert info.misses == 1 and info.hits == 9  # 10 arrays, one header
    for i in range(5):
        assert torch.equal(first[f"t{i}"], torch.full((3, 4), float(i)))
        assert torch.equal(again[f"t{i}"], torch.full((3, 4), -1.0))


@pytest.mark.parametrize("data", [
    b"not an npy file at all",
    npy(np.ones(4, np.float32))[:9],  # cut inside the header length
    npy(np.ones(4, np.float32))[:40],  # cut inside the header
    npy(np.ones(4, np.float32))[:-1],  # one data byte short
    npy(np.ones(4, np.float32)).replace(b"'descr': '<f4'", b"'descr': 'xyz'"),
])
def test_bad_bytes_raise_every_time(data):
    for _ in range(2):  # an error is not cached as a header
        with pytest.raises(ValueError):
            wire.array_view(data)


def test_object_arrays_are_refused():
    header = npy(np.ones(2, np.float32)).replace(b"'<f4'", b"'|O' ")
    with pytest.raises(ValueError):
        wire.array_view(header)


def odd_state() -> dict[str, torch.Tensor]:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "w": torch.nn.Parameter(torch.randn(5, 3)),  # requires grad: detached, as Flower does
        "transposed": base.t(),  # F-contiguous: NumPy writes it in Fortran order
        "strided": base[:, ::2],  # neither C nor F contiguous
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 7),
        "count": torch.tensor(7, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "half": torch.randn(4, dtype=torch.float16),
        "bytes": torch.arange(5, dtype=torch.uint8),
    }


@pytest.mark.parametrize("which", ["cnn", "resnet18", "odd"])
def test_array_record_equals_flowers(which):
    from models import build_model

    state = odd_state() if which == "odd" else build_model(which, (3, 32, 32), 10).state_dict()
    ours, flowers = wire.array_record(state), ArrayRecord(state)
    assert list(ours.keys()) == list(flowers.keys())
    for name in flowers.keys():
        a, b = ours[name], flowers[name]
        assert (a.dtype, tuple(a.shape), a.stype, a.data) == \
            (b.dtype, tuple(b.shape), b.stype, b.data), name
    assert ours.object_id == flowers.object_id  # what the wire carries is the same
    back = wire.state_view(ours)
    for name, tensor in state.items():
        assert torch.equal(back[name], tensor.detach()), name
