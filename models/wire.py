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
import math
import warnings

from collections.abc import Mapping

import numpy as np
import torch
from flwr.app import Array, ArrayRecord
from flwr.common.constant import SType


MAGIC = b"\x93NUMPY"
HEADER_WIDTH = {b"\x01\x00": 2, b"\x02\x00": 4}  # npy version -> bytes of the header length


@functools.lru_cache(maxsize=1024)
def _npy_header(head: bytes) -> tuple[tuple[int, ...], str, np.dtype, int]:
    """(shape, "F" or "C" order, dtype, number of elements) of an npy header (`head`: magic,
    length and dict), parsed by NumPy once per distinct header: a model's headers repeat in
    every reply and round, and NumPy's parser (`ast.literal_eval`) costs more than the view
    itself. NumPy's checks apply (an error is raised again each time, never cached)."""
    bio = io.BytesIO(head)
    if np.lib.format.read_magic(bio) == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(bio)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(bio)
    if dtype.hasobject:
        raise ValueError("object arrays are not model state")
    return shape, "F" if fortran else "C", dtype, math.prod(shape)


def array_view(data: bytes) -> np.ndarray:
    """A read-only NumPy view of an npy-serialized array (Flower's Array.data)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    width = HEADER_WIDTH.get(data[6:8]) if data[:6] == MAGIC else None
    if width is None:  # not npy (NumPy says why), or a rarer version: NumPy reads it (a copy)
        np.lib.format.read_magic(io.BytesIO(data))
        return np.load(io.BytesIO(data), allow_pickle=False)
    start = 8 + width + int.from_bytes(data[8:8 + width], "little")
    shape, order, dtype, count = _npy_header(data[:start])
    return np.frombuffer(data, dtype=dtype, count=count, offset=start).reshape(shape, order=order)


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
