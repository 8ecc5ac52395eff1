"""What each dataset is: where it lives on the Hugging Face hub, its columns, splits and input
shape.

Plain data, no heavy imports (the ClientApp imports this on every message in deployment).

Column names, feature types and splits are those of the hub copies (their dataset cards); for
each dataset: hub id; input; label; splits; natural id.

- cifar10: uoft-cs/cifar10; img (Image 32x32 RGB); label (ClassLabel 10); train / test; -
- cifar100: uoft-cs/cifar100; img (Image 32x32 RGB); fine_label (ClassLabel 100); train / test; -
- tiny-imagenet: zh-plus/tiny-imagenet; image (Image 64x64, a few grey); label (ClassLabel 200);
  train / valid; -
- emnist: (none, see `save.py --from-idx`); image (Image 28x28 L); label (ClassLabel 62);
  train / test; -
- femnist: flwrlabs/femnist; image (Image 28x28 L); character (ClassLabel 62); train only;
  writer_id (str)
- shakespeare: flwrlabs/shakespeare; x (str, 80 chars); y (str, 1 char); train only (csv);
  character_id (str)
- celeba: flwrlabs/celeba, subset img_align+identity+attr; image (Image 178x218 RGB);
  Smiling (bool); train / valid / test; celeb_id (int)
- fashion-mnist: zalando-datasets/fashion_mnist; image (Image 28x28 L); label (ClassLabel 10);
  train / test; - (also read from a folder of its four IDX files: feddata/idx.py)
- digits: (scikit-learn, bundled); image (Array2D 8x8 float); label (ClassLabel 10); (one set); -
"""

from __future__ import annotations

from dataclasses import dataclass

from .settings import DataSettings


@dataclass(frozen=True)
class DatasetSpec:
    in_shape: tuple[int, ...]  # model input: (C, H, W) for images, (sequence length,) for text
    num_classes: int
    image: str  # input column
    label: str  # label column
    mean: tuple[float, ...]  # per channel, in units of `scale` (e.g. 0.4914 of 255)
    std: tuple[float, ...]
    scale: float = 255.0  # the stored value that means 1.0 (255 for 8-bit images)
    kind: str = "image"  # 'image' (PIL/bytes), 'array' (numbers), 'chars' (strings)
    hub: str = ""  # Hugging Face dataset id; '' = no hub copy (needs dataset-path)
    subset: str | None = None  # hub config name
    test_splits: tuple[str, ...] = ("test",)  # the first present is the server's test set
    natural_id: str | None = None  # column naming the natural client (writer, speaker, celebrity)
    temporal: bool = False  # held-out examples are the last of each id (text), not random ones
    augment: str = "none"  # what augment = 'auto' means for this dataset
    model: str = "cnn"  # the papers' model for it (documentation and set-ups)
    class_names: tuple[str, ...] = ()  # the label names of a local copy made here ('' = none)
    idx: bool = False  # a local copy may be a folder of IDX files (feddata/idx.py)
    # the published splits' sizes: the most examples an IDX file of a split may declare
    # (its header is checked against them before anything is read: feddata/idx.py)
    split_sizes: tuple[tuple[str, int], ...] = ()


# LEAF's 80 characters (leaf/models/utils/language_utils.py); others map to ' '.
# Fashion-MNIST's classes, as the hub copy names them (label 0 .. 9)
FASHION_MNIST_CLASSES = ("T - shirt / top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")

LEAF_CHARS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
              "abcdefghijklmnopqrstuvwxyz}")

_CIFAR10 = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))  # FedACG / GC-Fed code
_CIFAR100 = ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))  # FedACG code
_TINY = ((0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821))  # FedACG code

DATASET_BY_NAME: dict[str, DatasetSpec] = {
    "digits": DatasetSpec((1, 8, 8), 10, "image", "label", (4.88,), (6.02,), scale=1.0,
                          kind="array", test_splits=()),
    "cifar10": DatasetSpec((3, 32, 32), 10, "img", "label", *_CIFAR10, hub="uoft-cs/cifar10",
                           augment="crop-flip", model="resnet18"),
    "cifar100": DatasetSpec((3, 32, 32), 100, "img", "fine_label", *_CIFAR100,
                            hub="uoft-cs/cifar100", augment="crop-flip", model="resnet18"),
    "tiny-imagenet": DatasetSpec((3, 64, 64), 200, "image", "label", *_TINY,
                                 hub="zh-plus/tiny-imagenet", test_splits=("valid", "validation"),
                                 augment="crop-flip", model="resnet18"),
    # GC-Fed's EMNIST (ByClass, 62 classes) with its normalization; no plain hub copy is known.
    "emnist": DatasetSpec((1, 28, 28), 62, "image", "label", (0.1751,), (0.3333,),
                          model="mlp-gcfed",  # ByClass: NIST's 697,932 + 116,323 images
                          split_sizes=(("train", 697_932), ("test", 116_323))),
    # Zalando's Fashion-MNIST, normalized by its training set's mean and std (60,000 images)
    "fashion-mnist": DatasetSpec((1, 28, 28), 10, "image", "label", (0.2860,), (0.3530,),
                                 hub="zalando-datasets/fashion_mnist", model="mlp-gcfed",
                                 class_names=FASHION_MNIST_CLASSES, idx=True,
                                 split_sizes=(("train", 60_000), ("test", 10_000))),
    # FedACG's LEAF set-ups: FEMNIST as ToTensor() (no normalization), CelebA at 84x84, 0.5/0.5.
    "femnist": DatasetSpec((1, 28, 28), 62, "image", "character", (0.0,), (1.0,),
                           hub="flwrlabs/femnist", test_splits=(), natural_id="writer_id",
                           model="femnist-cnn"),
    "celeba": DatasetSpec((3, 84, 84), 2, "image", "Smiling", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5),
                          hub="flwrlabs/celeba", subset="img_align+identity+attr",
                          natural_id="celeb_id", model="celeba-cnn"),
    "shakespeare": DatasetSpec((80,), len(LEAF_CHARS), "x", "y", (), (), scale=1.0, kind="chars",
                               hub="flwrlabs/shakespeare", test_splits=(),
                               natural_id="character_id", temporal=True, model="char-lstm"),
}

DATASETS = tuple(DATASET_BY_NAME)


class DataSettingError(ValueError):
    """A data setting (a run-config key of the data group) that the data cannot be read with."""


@dataclass(frozen=True)
class Bounds:
    """The range of a data key's value: [low, high], or [low, high) with `high_open`."""

    low: float
    high: float
    high_open: bool = False

    def holds(self, value) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and self.low <= value and (value < self.high if self.high_open
                                           else value <= self.high))

    def text(self) -> str:
        return f"[{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


# The ranges of the keys a node's own data is read with, defined once: run_config/schema.py
# takes its keys' ranges from here, and `python -m feddata check` checks its options by them
# (`own_data_settings`), so the check and a node's run config agree
# (docs/data.md#files-and-the-check).
CLIENT_VAL_FRACTION = Bounds(0.0, 1.0, high_open=True)
CUSTOM_CLASSES = Bounds(2, 1_000_000)  # (the schema's low is 0: not a custom dataset)


def number_list(value: object, name: str, kind: type, low: float, high: float, allowed: str,
                example: str) -> list:
    """The comma-separated numbers of `value`, the setting `name`'s (none for ''), each of
    `kind` in [low, high]; DataSettingError naming the setting, what is `allowed` and an
    `example`."""
    text = str(value).replace(" ", "")
    try:
        values = [kind(v) for v in text.split(",")] if text else []
    except ValueError:
        values = None
    if values is None or any(not low <= v <= high for v in values):
        raise DataSettingError(f"run config '{name}' = '{value}': expected {allowed}, "
                               f"comma-separated (e.g. {name}='{example}').")
    return values


def custom_dataset(settings: DataSettings) -> tuple[int, tuple[int, ...], tuple, tuple]:
    """dataset = 'custom': (classes, (C, H, W), mean, std) from the custom-* keys, checked
    (DataSettingError naming the key otherwise)."""
    classes = settings.custom_classes
    if not isinstance(classes, int) or not CUSTOM_CLASSES.holds(classes):
        raise DataSettingError(f"run config 'custom-classes' = {classes}: dataset = 'custom' "
                               "needs its number of classes, at least 2 and at most "
                               f"{CUSTOM_CLASSES.high:,} (e.g. custom-classes=10).")
    shape = number_list(settings.custom_shape, "custom-shape", int, 1, 4096, "C,H,W",
                        "3,32,32")
    if len(shape) != 3 or shape[0] not in (1, 3):
        raise DataSettingError(f"run config 'custom-shape' = '{settings.custom_shape}': dataset "
                               "= 'custom' needs the images' shape C,H,W with C = 1 (grey) or 3 "
                               "(RGB), e.g. custom-shape='3,32,32'.")
    stats = []
    for key, text, fill, low in (("custom-mean", settings.custom_mean, 0.0, -1e3),
                                 ("custom-std", settings.custom_std, 1.0, 1e-6)):
        values = number_list(text, key, float, low, 1e3, f"{shape[0]} number(s), one per "
                             "channel, pixel values scaled to [0, 1]",
                             ",".join(["0.5"] * shape[0])) or [fill] * shape[0]
        if len(values) != shape[0]:
            raise DataSettingError(f"run config '{key}' = '{text}' has {len(values)} "
                                   f"value(s) and the images {shape[0]} channel(s): give one "
                                   "per channel.")
        stats.append(tuple(values))
    return classes, tuple(shape), stats[0], stats[1]


def own_data_settings(settings: DataSettings) -> DatasetSpec:
    """The dataset a node's own folder is read as (`spec_of`), with the data keys that reading
    takes checked by their ranges above; DataSettingError naming the key otherwise. The run
    config's check runs it too (run_config.resolve), and `python -m feddata check` with its
    options, so both refuse what the other refuses."""
    fraction = settings.client_val_fraction
    if not CLIENT_VAL_FRACTION.holds(fraction):
        raise DataSettingError(f"run config 'client-val-fraction' = {fraction!r}: out of range; "
                               f"allowed: a number in {CLIENT_VAL_FRACTION.text()} (e.g. 0.1).")
    return spec_of(settings)


def spec_of(settings: DataSettings) -> DatasetSpec:
    """The run's dataset: a known one, or dataset = 'custom' as its custom-* keys declare it
    (images; columns 'image' and 'label' in a local copy)."""
    if settings.dataset != "custom":
        return DATASET_BY_NAME[settings.dataset]
    classes, shape, mean, std = custom_dataset(settings)
    return DatasetSpec(shape, classes, "image", "label", mean, std, scale=255.0, kind="image",
                       test_splits=("test",), model="cnn")
