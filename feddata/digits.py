"""scikit-learn's bundled 8x8 digits (1797 images, 10 classes) as a Hugging Face Dataset."""

from __future__ import annotations

import numpy as np
from datasets import Array2D, ClassLabel, Dataset, Features


def load_digits_dataset() -> Dataset:
    from sklearn.datasets import load_digits

    digits = load_digits()
    features = Features({"image": Array2D((8, 8), "float32"), "label": ClassLabel(num_classes=10)})
    return Dataset.from_dict(
        {"image": digits.images.astype(np.float32), "label": digits.target}, features=features
    )
