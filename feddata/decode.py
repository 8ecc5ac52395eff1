"""A `datasets.Dataset` (hub format) -> tensors: stored values for training, normalized for
evaluation.

* images (`Image()` features: PIL images or `{"bytes", "path"}` as the hub stores them) are decoded
  once, read as 8-bit pixels by `pixels_8bit` (the one rule of pixel formats, also for a node's
  own data: docs/data.md#pixels), converted to the spec's mode (L or RGB; Tiny-ImageNet has a few
  grey images), resized to the spec's size where they differ (CelebA 178x218 -> 84x84, as LEAF),
  and kept as uint8 [N, C, H, W]: a quarter of the memory of floats; `normalize` or the training
  transform turn a batch into floats on the training device;
* numbers (`Array2D`, digits) are kept as float32 [N, C, H, W];
* text (Shakespeare) becomes LEAF's character indices, uint8 [N, 80]; the model embeds them;
* labels become int64 (ClassLabel ints, booleans such as CelebA's `Smiling`, or characters).
"""

from __future__ import annotations

import functools
import io
import math
import warnings

import numpy as np
import torch

from .specs import LEAF_CHARS, DatasetSpec

_CHAR_TABLE = np.full(256, LEAF_CHARS.index(" "), dtype=np.uint8)
for _i, _c in enumerate(LEAF_CHARS):
    _CHAR_TABLE[ord(_c)] = _i


def char_indices(texts: list[str], length: int) -> np.ndarray:
    """LEAF character indices [len(texts), length]; texts are cut or space-padded to `length`."""
    if not texts:
        return np.zeros((0, length), dtype=np.uint8)
    joined = "".join(t[:length].ljust(length) for t in texts)
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    codes = np.where(codes < 256, codes, ord(" "))
    return _CHAR_TABLE[codes].reshape(len(texts), length)


class PixelsRefused(ValueError):
    """An image whose pixels have no one reading as 8-bit grey or RGB, or that is no image: the
    message says why and what to do (the caller names the file or row)."""


# torchvision's IMG_EXTENSIONS: the files an image folder's reader decodes
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# EXIF orientation -> the transpose that shows the image upright (as PIL's exif_transpose)
_UPRIGHT = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
            6: "ROTATE_270", 7: "TRANSVERSE", 8: "ROTATE_90"}
_NO_RANGE = {"I": "32-bit integers", "F": "32-bit floats", "CMYK": "CMYK", "YCbCr": "YCbCr",
             "LAB": "L*a*b*", "HSV": "HSV"}


def open_image(source):
    """The image in `source` (a path or a binary file) with its header read and nothing decoded;
    PixelsRefused for what is no image, an image of several frames, or one whose header
    declares more pixels than PIL's decompression-bomb limit."""
    from PIL import Image

    try:
        with warnings.catch_warnings():  # (the size is checked before decoding: no warning)
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(source)
    except Image.DecompressionBombError as err:
        raise PixelsRefused(f"its header declares too many pixels ({err}): a decompression "
                            "bomb, or an image far larger than the dataset's") from None
    except Image.UnidentifiedImageError:
        raise PixelsRefused("not a readable image (no image format PIL knows): remove it, or "
                            "replace it with a PNG or JPEG") from None
    except Exception as err:  # PIL's OSError, SyntaxError, ... of a damaged header
        raise PixelsRefused(f"not a readable image ({type(err).__name__}: {err}): remove it, "
                            "or replace it with a PNG or JPEG") from None
    frames = getattr(img, "n_frames", 1)
    if frames > 1:
        raise PixelsRefused(f"it holds {frames} frames (an animation or a stack): save the one "
                            "image it should be on its own")
    return img


def _orientation(img) -> int:
    """The EXIF orientation in the header (1: upright); never decodes (PNG's own getexif
    would)."""
    from PIL import Image

    try:
        return int(Image.Image.getexif(img).get(0x0112, 1))
    except Exception:  # an unreadable EXIF block: shown as stored
        return 1


def shown_size(img) -> tuple[int, int]:
    """(width, height) of `img` as shown, its EXIF orientation applied, from the header."""
    w, h = img.size
    return (h, w) if _orientation(img) in (5, 6, 7, 8) else (w, h)


def pixels_8bit(img):
    """`img` (`open_image`) decoded, turned upright by its EXIF orientation (as `datasets`
    does), and read as 8-bit grey (L) or RGB by the one rule of pixel formats
    (docs/data.md#pixels): 8-bit grey and RGB as stored; 1-bit as 0 / 255; 16-bit samples by
    their high byte (value / 256, as PIL reads 16-bit colour PNGs); a palette by its colours
    (grey when every colour is grey); an alpha channel dropped only when every pixel is opaque.
    32-bit integer or float pixels (no fixed range), CMYK and the other colour spaces, and
    transparent pixels are refused (PixelsRefused)."""
    from PIL import Image

    orientation = _orientation(img)
    try:
        img.load()
    except Exception as err:  # a truncated or damaged file: whatever PIL's decoder raises
        raise PixelsRefused(f"cannot be decoded ({type(err).__name__}: {err}): it is damaged; "
                            "replace it") from None
    if orientation in _UPRIGHT:
        img = img.transpose(getattr(Image.Transpose, _UPRIGHT[orientation]))
    mode = img.mode
    if mode in ("L", "RGB"):
        return img
    if mode == "1" or mode == "RGBX":
        return img.convert("L" if mode == "1" else "RGB")
    if mode.startswith("I;16"):
        high = (np.asarray(img).astype(np.uint16) >> 8).astype(np.uint8)
        return Image.fromarray(high, "L")
    if mode in ("P", "PA"):
        alpha = mode == "PA" or "transparency" in img.info or (
            img.palette is not None and img.palette.mode == "RGBA")
        img = img.convert("RGBA" if alpha else "RGB")
    if img.mode in ("RGBA", "RGBa", "LA", "La"):
        if img.getchannel("A").getextrema() != (255, 255):
            raise PixelsRefused("it has transparent pixels (alpha below 255), which no model "
                                "input holds: flatten it onto a background, or make it opaque")
        img = img.convert("RGB" if img.mode.startswith("RGB") else "L")
    if img.mode not in ("L", "RGB"):
        raise PixelsRefused(f"its pixels are {_NO_RANGE.get(mode, mode)} (PIL mode {mode}), "
                            "which have no one 8-bit reading: convert it to 8- or 16-bit grey "
                            "or RGB (PNG)")
    if mode in ("P", "PA"):  # a palette of grey colours only is a grey image
        arr = np.asarray(img)
        if (arr == arr[..., :1]).all():
            return img.getchannel("R")
    return img


def _image_array(img, mode: str, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    if img is None:
        raise PixelsRefused("it has no image (null): remove the example, or give it its image")
    if isinstance(img, dict):  # undecoded {"bytes", "path"}
        img = open_image(io.BytesIO(img["bytes"]) if img.get("bytes") else img["path"])
    img = pixels_8bit(img)
    if img.mode != mode:
        img = img.convert(mode)
    if img.size != size:  # PIL sizes are (width, height)
        img = img.resize(size, Image.BILINEAR)
    arr = np.asarray(img, dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _is_pixel_array(ds, spec: DatasetSpec) -> bool:
    """True when the image column of `ds` holds uint8 arrays of the spec's grey image size (the
    pixels of an IDX folder) rather than images."""
    feature = getattr(ds, "features", {}).get(spec.image)
    return (spec.in_shape[0] == 1 and getattr(feature, "dtype", None) == "uint8"
            and tuple(getattr(feature, "shape", ())) == tuple(spec.in_shape[1:]))


def input_tensor(ds, spec: DatasetSpec) -> torch.Tensor:
    """The stored input values of every example: uint8 images, float32 arrays, uint8 characters."""
    n = len(ds)
    if spec.kind == "chars":
        return torch.from_numpy(char_indices(ds[spec.image], spec.in_shape[0]))
    if spec.kind == "array":
        arrays = ds.with_format("numpy")[spec.image] if n else np.zeros((0,) + spec.in_shape[1:])
        return torch.from_numpy(np.asarray(arrays, dtype=np.float32).reshape(n, *spec.in_shape))
    c, h, w = spec.in_shape
    if _is_pixel_array(ds, spec):  # an IDX folder's pixels, kept as stored (sources.py)
        return pixel_tensor(ds.select_columns([spec.image]).with_format("arrow")[:][spec.image],
                            spec)
    path_only = first_path_only_image(ds, spec.image)
    if path_only is not None:  # (before `ds[...]`: `datasets` would open it as it decodes)
        i, path = path_only
        raise PixelsRefused(f"example {i}: the image is not in the data, only its path "
                            f"{path!r}: a local copy holds its images' bytes (python -m "
                            "feddata.save writes one)")
    mode = "L" if c == 1 else "RGB"
    out = np.empty((n, c, h, w), dtype=np.uint8)
    for i, img in enumerate(ds[spec.image] if n else []):
        try:
            out[i] = _image_array(img, mode, (w, h))
        except PixelsRefused as err:
            raise PixelsRefused(f"example {i}: {err}") from None
    return torch.from_numpy(out)


def first_path_only_image(ds, column: str) -> tuple[int, str] | None:
    """(example, path) of the first example of `ds` (in its order) whose image the data holds
    only as a path, no bytes; None when every image is in the data. Read from the Arrow
    storage of `column` (struct<bytes, path>, as datasets' `Image` stores it) without decoding
    anything: `datasets` opens such a path wherever it points (any file on the machine, through
    links, a named pipe that never answers, a URL), and a node's own data refuses it too
    (docs/data.md#own-data-folders)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = getattr(ds, "data", None)
    if table is None or column not in table.column_names:
        return None
    stored = table.column(column)
    chunks, kind = stored.chunks, stored.type
    if not (pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0
            and kind.get_field_index("path") >= 0):
        return None
    rows = []
    for chunk in chunks:  # a row with a path, no bytes, and not null as a whole
        only = pc.and_(pc.and_(chunk.is_valid(), pc.is_null(pc.struct_field(chunk, "bytes"))),
                       pc.is_valid(pc.struct_field(chunk, "path")))
        rows.append(np.asarray(only.to_numpy(zero_copy_only=False), dtype=bool))
    bad = np.concatenate(rows) if rows else np.zeros(0, dtype=bool)
    if not bad.any():
        return None
    mapping = getattr(ds, "_indices", None)  # example -> table row, after a select or shuffle
    order = (mapping.column(0).to_numpy().astype(np.int64) if mapping is not None
             else np.arange(len(bad)))
    hits = np.flatnonzero(bad[order])
    if not len(hits):  # (only rows outside `ds`' selection: never decoded here)
        return None
    row = int(order[hits[0]])
    return int(hits[0]), str(stored[row]["path"])


def pixel_tensor(column, spec: DatasetSpec) -> torch.Tensor:
    """The uint8 [N, C, H, W] pixels of an Arrow column of an IDX folder's grey images (rows of
    H x W uint8 arrays, `_is_pixel_array`): one copy of its buffers."""
    rows = [chunk.storage.flatten().flatten().to_numpy() for chunk in column.chunks]
    pixels = np.concatenate(rows) if rows else np.zeros(0, np.uint8)
    return torch.from_numpy(pixels.astype(np.uint8).reshape(len(column), *spec.in_shape))


class LabelRefused(ValueError):
    """A stored label that is no class index: `index` is its example."""

    def __init__(self, index: int, why: str):
        super().__init__(f"example {index}: {why}")
        self.index, self.why = index, why


def class_indices(values) -> np.ndarray:
    """Stored labels as int64 class indices, read as stored: integers, booleans (0 / 1) and
    floats that are whole numbers; LabelRefused naming the first other one (no label, 2.7, 'cat',
    a number beyond int64). Never truncated (docs/data.md#labels)."""
    arr = np.asarray(values)
    if arr.ndim == 1 and arr.dtype.kind in "iub" and not (
            arr.dtype.kind == "u" and arr.size and arr.max() >= 2**63):  # (beyond int64: below)
        return arr.astype(np.int64)
    if arr.ndim == 1 and arr.dtype.kind == "f":
        whole = np.isfinite(arr) & (arr == np.round(arr)) & (np.abs(arr) < 2.0**62)
        if whole.all():
            return arr.astype(np.int64)
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        if value is None:
            raise LabelRefused(i, "it has no label (null)")
        number = value.item() if isinstance(value, np.generic) else value
        if isinstance(number, float) and math.isfinite(number) and number.is_integer():
            number = int(number)
        if not isinstance(number, int) or not -2**63 <= number < 2**63:
            raise LabelRefused(i, f"its label {value!r} is not a class index (a whole number)")
        out[i] = number
    return out


def label_tensor(ds, spec: DatasetSpec) -> torch.Tensor:
    values = ds[spec.label] if len(ds) else []
    if spec.kind == "chars":
        return torch.from_numpy(char_indices(values, 1)[:, 0].astype(np.int64))
    return torch.from_numpy(class_indices(values).reshape(len(ds)))


def normalize(x: torch.Tensor, spec: DatasetSpec) -> torch.Tensor:
    """Stored values -> model input: (x / scale - mean) / std per channel; text is left as it is."""
    if spec.kind == "chars":
        return x
    mean, std = _mean_std(tuple(spec.mean), tuple(spec.std), x.dim(), x.device)
    return (x.float() / spec.scale - mean) / std


@functools.lru_cache(maxsize=64)
def _mean_std(mean: tuple, std: tuple, dim: int, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel mean and std as tensors shaped to broadcast over `dim` dimensions, made
    once per dataset, shape and device (normalize runs on every training batch)."""
    shape = (1, -1) + (1,) * (dim - 2)
    return (torch.tensor(mean, dtype=torch.float32, device=device).view(shape),
            torch.tensor(std, dtype=torch.float32, device=device).view(shape))
