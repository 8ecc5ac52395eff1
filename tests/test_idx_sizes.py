"""Sizes before reads (docs/security.md#dataset-files-sizes-before-reads): an IDX file's header
is checked against the dataset named (Fashion-MNIST: 28x28 images, at most 60,000 training and
10,000 test images, as many labels as images) before its body is read or decompressed, in Python
integers. Each case changes ONE thing of a good pair of files, on each side of each boundary.

A file that is a header only (no body) proves the order: refused for its header, never for being
truncated. A gzip's decompressed bytes are counted at zlib (the decompressor gzip builds), so a
bound holds by what was decompressed, not by timing."""

import gzip
import struct
import zlib
from pathlib import Path

import pytest

from feddata.idx import IdxRefused, read_idx_split

TRAIN, TEST = 60_000, 10_000  # Fashion-MNIST's published splits (Zalando's README)


def header(magic: bytes, dims) -> bytes:
    """An IDX header written by hand: the four magic bytes, each dim big-endian 32-bit."""
    return magic + b"".join(struct.pack(">I", d) for d in dims)


def write_pair(folder: Path, prefix: str, n: int, *, hw=(28, 28), labels=None, image_magic=None,
               label_magic=None, image_body=None, label_body=None, gz=False) -> Path:
    """`<prefix>-images/labels` files of `n` blank images (labels 0..9 in turn), each part
    replaceable: the header's count of labels, the magic numbers, the bodies."""
    folder.mkdir(parents=True, exist_ok=True)
    count = n if labels is None else labels
    files = {
        "images-idx3-ubyte": header(image_magic or b"\0\0\x08\x03", (n, *hw))
        + (bytes(n * hw[0] * hw[1]) if image_body is None else image_body),
        "labels-idx1-ubyte": header(label_magic or b"\0\0\x08\x01", (count,))
        + (bytes(i % 10 for i in range(count)) if label_body is None else label_body),
    }
    for what, data in files.items():
        name = f"{prefix}-{what}" + (".gz" if gz else "")
        (folder / name).write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    return folder


def read(folder: Path, split: str = "test"):
    return read_idx_split(folder, split, "fashion-mnist")


# --- the count of images against the split's published size -------------------------------
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_the_test_split_holds_exactly_its_published_size(tmp_path, gz):
    images, labels = read(write_pair(tmp_path, "t10k", TEST, gz=gz))
    assert images.shape == (10_000, 28, 28) and labels.shape == (10_000,)
    assert labels[:12].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]


@pytest.mark.parametrize("split,prefix,n", [("test", "t10k", TEST + 1),
                                            ("train", "train", TRAIN + 1)])
def test_one_image_more_than_the_split_is_refused_from_the_header(tmp_path, split, prefix, n):
    # a header and no body: refused for its count, not for being truncated (nothing read)
    write_pair(tmp_path, prefix, n, image_body=b"", label_body=b"")
    with pytest.raises(IdxRefused, match=f"declares {n:,} images, more than the "
                       f"{n - 1:,} of dataset 'fashion-mnist''s {split} split"):
        read(tmp_path, split)


def test_the_train_split_at_its_published_size_is_read(tmp_path):
    images, _ = read(write_pair(tmp_path, "train", TRAIN, gz=True), "train")
    assert images.shape == (60_000, 28, 28)


def test_caps_are_the_dataset_named_not_the_largest(tmp_path):
    """EMNIST ByClass's test split is 116,323 images: 10,001 is within it, but the file is read
    as Fashion-MNIST's, whose test split is 10,000."""
    write_pair(tmp_path, "t10k", TEST + 1, image_body=b"", label_body=b"")
    with pytest.raises(IdxRefused, match="10,001 images"):
        read(tmp_path)


# --- the image size --------------------------------------------------------------------------
@pytest.mark.parametrize("hw", [(28, 29), (29, 28), (27, 28), (256, 256)])
def test_an_image_size_other_than_28x28_is_refused_from_the_header(tmp_path, hw):
    write_pair(tmp_path, "t10k", 10, hw=hw, image_body=b"")  # (no body: never read)
    with pytest.raises(IdxRefused, match=f"holds {hw[0]}x{hw[1]} images, and dataset "
                       "'fashion-mnist' takes 28x28"):
        read(tmp_path)


@pytest.mark.parametrize("dims", [(2**32 - 1,) * 3, (10, 2**32 - 1, 2**32 - 1)],
                         ids=["all-max", "pixels-overflow"])
def test_dims_whose_product_overflows_64_bits_are_refused_by_name(tmp_path, dims):
    """(2**32-1)**3 is about 2**96; numpy's int64 product wrapped and gave a bare ValueError."""
    assert dims[0] * dims[1] * dims[2] >= 2**64  # (Python integers)
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(header(b"\0\0\x08\x03", dims))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(header(b"\0\0\x08\x01", (10,)))
    with pytest.raises(IdxRefused, match="t10k-images-idx3-ubyte"):
        read(tmp_path)


# --- the magic number, one byte at a time ----------------------------------------------------
@pytest.mark.parametrize("magic,words", [
    (b"\x01\0\x08\x03", "magic number is 0x01000803"),
    (b"\0\x01\x08\x03", "magic number is 0x00010803"),
    (b"\0\0\x09\x03", "magic number is 0x00000903"),
    (b"\0\0\x08\x04", "4-dimensional"),
    (b"\0\0\x08\x02", "2-dimensional"),
])
def test_one_byte_of_the_magic_number_wrong_is_refused(tmp_path, magic, words):
    write_pair(tmp_path, "t10k", 10, image_magic=magic)
    with pytest.raises(IdxRefused, match=words):
        read(tmp_path)


# --- labels against images ------------------------------------------------------------------
@pytest.mark.parametrize("labels", [11, 9, 2**32 - 1])
def test_labels_other_than_the_images_count_are_refused_before_their_body(tmp_path, labels):
    write_pair(tmp_path, "t10k", 10, labels=labels, label_body=b"")  # (no body: never read)
    with pytest.raises(IdxRefused, match=f"holds 10 images and .*t10k-labels-idx1-ubyte "
                       f"{labels:,} labels"):
        read(tmp_path)


# --- the body: exactly what the header declares ----------------------------------------------
@pytest.mark.parametrize("change,words", [
    (lambda body: body[:-1], "truncated"),
    (lambda body: body + b"\0", "more bytes than the 10x28x28 values"),
], ids=["one-short", "one-more"])
def test_a_body_one_byte_off_is_refused(tmp_path, change, words):
    write_pair(tmp_path, "t10k", 10, image_body=change(bytes(10 * 28 * 28)))
    with pytest.raises(IdxRefused, match=words):
        read(tmp_path)


class CountingZlib:
    """zlib as gzip uses it, each decompressor's output bytes added to `out`."""

    def __init__(self):
        self.out = 0

    def __getattr__(self, name):
        return getattr(zlib, name)

    def decompressobj(self, *args, **kwargs):
        inner, counter = zlib.decompressobj(*args, **kwargs), self

        class Counted:
            def __getattr__(self, name):
                return getattr(inner, name)

            def decompress(self, data, max_length=0):
                out = inner.decompress(data, max_length)
                counter.out += len(out)
                return out

        return Counted()


ZEROS = 64 * 2**20  # 64 MiB of zeros: 64 KiB gzipped


@pytest.mark.parametrize("case", ["256x256", "1.37 million images", "extra bytes"])
def test_a_gzip_is_decompressed_no_further_than_its_header_allows(tmp_path, monkeypatch, case):
    """The findings' bombs, at 64 MiB: each refused with at most its declared values and two
    8 KiB buffers decompressed (gzip's read-ahead), not the 64 MiB behind them."""
    n, hw, words = {"256x256": (10, (256, 256), "256x256 images"),
                    "1.37 million images": (1_370_000, (28, 28), "1,370,000 images"),
                    "extra bytes": (10, (28, 28), "more bytes than")}[case]
    write_pair(tmp_path, "t10k", n, hw=hw, gz=True, image_body=bytes(ZEROS))
    counting = CountingZlib()
    monkeypatch.setattr(gzip, "zlib", counting)
    with pytest.raises(IdxRefused, match=words):
        read(tmp_path)
    declared = 10 * 28 * 28 if case == "extra bytes" else 0
    # the declared values, one 8 KiB read-ahead buffer of each file, their headers
    assert 0 < counting.out <= declared + 2 * 8192 + 16 + 8, counting.out


def test_a_good_gzip_is_decompressed_to_its_end_exactly(tmp_path, monkeypatch):
    """The counter itself: a good pair decompresses its two files whole, no more."""
    write_pair(tmp_path, "t10k", 10, gz=True)
    counting = CountingZlib()
    monkeypatch.setattr(gzip, "zlib", counting)
    read(tmp_path)
    assert counting.out == (16 + 10 * 28 * 28) + (8 + 10)
