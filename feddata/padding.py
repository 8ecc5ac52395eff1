"""GC-Fed's padding of a client's training data (run config `pad-to-full-batches`).

GC-Fed's code (`dataloader.py`, `DatasetSubset._balance_dataset`) extends every client's data to
a multiple of the batch size with copies of its first examples, cycling through them when the
client holds fewer examples than are missing: n examples become ceil(n / b) * b, example i of the
extension being example i mod n. Every local epoch then has full batches, and everything counted
over the training data (FedLC's class counts) counts the copies too.
"""

from __future__ import annotations

import torch


def full_batch_index(n: int, batch_size: int, device=None) -> torch.Tensor:
    """Indices 0..n-1, then 0, 1, ... (mod n) until the length is a multiple of `batch_size`."""
    missing = -n % batch_size if n else 0
    return torch.cat([torch.arange(n, device=device), torch.arange(missing, device=device) % n])


def pad_to_full_batches(x: torch.Tensor, y: torch.Tensor,
                        batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) padded to a multiple of `batch_size` examples by GC-Fed's rule (unchanged when it
    is one already)."""
    if len(y) % batch_size == 0:
        return x, y
    index = full_batch_index(len(y), batch_size, device=y.device)
    return x[index], y[index]
