"""Model state to and from Flower's ArrayRecord without extra copies.

`ArrayRecord.to_torch_state_dict()` runs `np.load` on every array, which copies its bytes. Here
each tensor is a read-only view of the record's own bytes (the npy header is parsed, the data is
not copied): the server only reads the clients' models, and the client copies the broadcast
straight into its parameters with `load_state_dict`. The other way, `ArrayRecord(state_dict)`
(`np.save` into a buffer) copies each tensor's bytes three times; `array_record` makes the same
record, byte for byte, with one copy.
"""

from __future__ import annotations

import functools
import io
import warnings

from collections.abc import Mapping

import numpy as np
import torch
from flwr.app import Array, ArrayRecord
from flwr.common.constant import SType


@functools.lru_cache(maxsize=1024)
def _npy_header(head: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of an npy header (`head`: magic, length and dict), parsed
    by NumPy once per distinct header: a model's headers repeat in every reply and round, and
    NumPy's parser (`ast.literal_eval`) costs more than the view itself. NumPy's checks apply
    (an error is raised again each time, never cached)."""
    bio = io.BytesIO(head)
    if np.lib.format.read_magic(bio) == (1, 0):
        return np.lib.format.read_array_header_1_0(bio)
    return np.lib.format.read_array_header_2_0(bio)


def array_view(data: bytes) -> np.ndarray:
    """A read-only NumPy view of an npy-serialized array (Flower's Array.data)."""
    version = np.lib.format.read_magic(io.BytesIO(data))
    if version not in ((1, 0), (2, 0)):  # a rarer header: let NumPy read it (a copy)
        return np.load(io.BytesIO(data), allow_pickle=False)
    width = 2 if version == (1, 0) else 4  # bytes of the header-length field, after the magic
    start = 8 + width + int.from_bytes(data[8:8 + width], "little")
    shape, fortran, dtype = _npy_header(bytes(data[:start]))
    if dtype.hasobject:
        raise ValueError("object arrays are not model state")
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=start)
    return flat.reshape(shape, order="F" if fortran else "C")


def state_view(arrays: ArrayRecord) -> dict[str, torch.Tensor]:
    """name -> tensor views of `arrays` (read-only: never modify them in place)."""
    with warnings.catch_warnings():  # torch warns that the buffer is not writable: we only read
        warnings.simplefilter("ignore", UserWarning)
        return {k: torch.from_numpy(array_view(arrays[k].data)) for k in arrays.keys()}


def npy_bytes(arr: np.ndarray) -> bytes:
    """The bytes `np.save(buffer, arr, allow_pickle=False)` writes, made with one copy of the
    data (numbers and booleans in C order; anything else goes through `np.save` itself)."""
    if arr.dtype.kind not in "biufc" or not arr.flags.c_contiguous:
        bio = io.BytesIO()
        np.save(bio, arr, allow_pickle=False)
        return bio.getvalue()
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(arr))
    return b"".join((head.getvalue(), arr.data))


def array_record(state: Mapping[str, torch.Tensor]) -> ArrayRecord:
    """`ArrayRecord(state)`: the same keys, dtypes, shapes and bytes, made faster."""
    record = ArrayRecord()
    for name, tensor in state.items():
        arr = tensor.detach().cpu().numpy()
        record[name] = Array(dtype=str(arr.dtype), shape=tuple(arr.shape), stype=SType.NUMPY,
                             data=npy_bytes(arr))
    return record
