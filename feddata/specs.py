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
- digits: (scikit-learn, bundled); image (Array2D 8x8 float); label (ClassLabel 10); (one set); -
"""

from __future__ import annotations

from dataclasses import dataclass


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


# LEAF's 80 characters (leaf/models/utils/language_utils.py); others map to ' '.
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
                          model="mlp-gcfed"),
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


def spec_of(cfg: dict) -> DatasetSpec:
    """The run's dataset: a known one, or dataset = 'custom' as its custom-* keys declare it
    (images; columns 'image' and 'label' in a local copy)."""
    if cfg["dataset"] != "custom":
        return DATASET_BY_NAME[cfg["dataset"]]
    from run_config.resolve import custom_dataset

    classes, shape, mean, std = custom_dataset(cfg)
    return DatasetSpec(shape, classes, "image", "label", mean, std, scale=255.0, kind="image",
                       test_splits=("test",), model="cnn")
