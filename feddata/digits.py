"""scikit-learn's bundled 8x8 digits (1797 images, 10 classes) as a Hugging Face Dataset.

The numbers are read from the file scikit-learn ships (`sklearn/datasets/data/digits.csv.gz`)
the way its `load_digits` reads them (`np.loadtxt`, comma-separated, the label last), found
without importing scikit-learn: `sklearn.datasets` pulls pandas, pyarrow and scipy into the
process (docs/performance.md#the-simulations-memory). tests/test_digits_file.py holds the arrays
equal to `load_digits`' bit for bit.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

DIGITS_FILE = ("datasets", "data", "digits.csv.gz")  # inside the installed sklearn package


def digits_file() -> Path:
    """The digits file of the installed scikit-learn (which is not imported)."""
    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder).joinpath(*DIGITS_FILE)
        if path.is_file():
            return path
    raise FileNotFoundError(
        "the digits dataset is read from scikit-learn's bundled file "
        f"sklearn/{'/'.join(DIGITS_FILE)}, and "
        + ("scikit-learn is not installed" if spec is None else f"none is in {folders}")
        + ": install scikit-learn (pip install scikit-learn)")


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images float64 [1797, 8, 8], labels int [1797]): `load_digits()`'s `images`, `target`."""
    with gzip.open(digits_file(), mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)


def load_digits_dataset():
    """The digits as a `datasets.Dataset`: `image` Array2D float32 8x8, `label` ClassLabel."""
    from datasets import Array2D, ClassLabel, Dataset, Features

    images, labels = load_digits_arrays()
    features = Features({"image": Array2D((8, 8), "float32"), "label": ClassLabel(num_classes=10)})
    return Dataset.from_dict({"image": images.astype(np.float32), "label": labels},
                             features=features)
