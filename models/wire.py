"""Model state from Flower's ArrayRecord without extra copies.

`ArrayRecord.to_torch_state_dict()` runs `np.load` on every array, which copies its bytes. Here
each tensor is a read-only view of the record's own bytes (the npy header is parsed, the data is
not copied): the server only reads the clients' models, and the client copies the broadcast
straight into its parameters with `load_state_dict`.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from flwr.app import ArrayRecord


def array_view(data: bytes) -> np.ndarray:
    """A read-only NumPy view of an npy-serialized array (Flower's Array.data)."""
    bio = io.BytesIO(data)
    version = np.lib.format.read_magic(bio)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(bio)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(bio)
    else:  # a rarer header: let NumPy read it (a copy)
        return np.load(io.BytesIO(data), allow_pickle=False)
    if dtype.hasobject:
        raise ValueError("object arrays are not model state")
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=bio.tell())
    return flat.reshape(shape, order="F" if fortran else "C")


def state_view(arrays: ArrayRecord) -> dict[str, torch.Tensor]:
    """name -> tensor views of `arrays` (read-only: never modify them in place)."""
    with warnings.catch_warnings():  # torch warns that the buffer is not writable: we only read
        warnings.simplefilter("ignore", UserWarning)
        return {k: torch.from_numpy(array_view(arrays[k].data)) for k in arrays.keys()}
