"""The digits read from scikit-learn's bundled file without importing scikit-learn: the arrays of
its `load_digits`, bit for bit, and a clear error where the file is missing."""

import importlib.util

import numpy as np
import pytest

from feddata import digits


def test_the_arrays_are_load_digits_bit_for_bit():
    from sklearn.datasets import load_digits

    reference = load_digits()
    images, labels = digits.load_digits_arrays()
    for ours, theirs in ((images, reference.images), (labels, reference.target)):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert ours.tobytes() == theirs.tobytes()


def test_the_dataset_holds_them_as_float32_and_labels():
    from sklearn.datasets import load_digits

    reference = load_digits()
    ds = digits.load_digits_dataset()
    images = np.asarray(ds.with_format("numpy")["image"])
    assert images.dtype == np.float32
    assert images.tobytes() == reference.images.astype(np.float32).tobytes()
    assert np.array_equal(np.asarray(ds["label"]), reference.target)
    assert ds.features["label"].names == [str(d) for d in range(10)]


def test_no_scikit_learn_is_a_clear_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sklearn" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="scikit-learn is not installed.*pip install"):
        digits.digits_file()


def test_a_scikit_learn_without_the_file_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(digits, "DIGITS_FILE", ("datasets", "data", "none.csv.gz"))
    with pytest.raises(FileNotFoundError, match="none.csv.gz, and none is in"):
        digits.digits_file()
