"""Small datasets made here in exactly the hub formats (columns, feature types, splits, layout).

Images are stored as the hub stores them (PNG bytes inside `Image()` features); each dataset is
written the way a user's local copy would look:

| dataset | written as |
| --- | --- |
| cifar10 | hub snapshot: README.md with `configs` + |
|  | `plain_text/{train,test}-00000-of-00001.parquet` |
| cifar100 | `DatasetDict.save_to_disk` folder |
| tiny-imagenet | parquet `data/{train,valid}-...parquet`, no README |
|  | (datasets names the split `validation`) |
| emnist | NIST IDX files (gzip), saved by `python -m feddata.save emnist --from-idx` |
| femnist | `save_to_disk` folder, train split only |
| shakespeare | hub snapshot: README.md with `configs` + `shakespeare.csv`, train split only |
| celeba | hub snapshot: README.md with `configs` + |
|  | `img_align+identity+attr/{train,valid,test}-*.parquet` |
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value
from PIL import Image as PILImage

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                 "truck"]
CELEBA_ATTRS = ["5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Smiling", "Young"]


def _images(rng, n, h, w, mode="RGB", labels=None):
    """Random images; with `labels`, the mean brightness depends on the label (learnable)."""
    out = []
    for i in range(n):
        base = 30 + (200 * (labels[i] % 10) // 10 if labels is not None else 100)
        shape = (h, w) if mode == "L" else (h, w, 3)
        arr = np.clip(rng.normal(base, 25, shape), 0, 255).astype(np.uint8)
        out.append(PILImage.fromarray(arr, mode=mode))
    return out


def _readme(configs: str) -> str:
    return f"---\nconfigs:\n{configs}---\n# test copy\n"


def cifar10(root: Path, rng) -> Path:
    feats = Features({"img": Image(), "label": ClassLabel(names=CIFAR10_NAMES)})
    folder = root / "cifar10"
    (folder / "plain_text").mkdir(parents=True)
    for split, n in (("train", 80), ("test", 30)):
        y = np.arange(n) % 10
        Dataset.from_dict({"img": _images(rng, n, 32, 32, labels=y), "label": y}, features=feats) \
            .to_parquet(str(folder / "plain_text" / f"{split}-00000-of-00001.parquet"))
    (folder / "README.md").write_text(_readme(
        "- config_name: plain_text\n  data_files:\n  - split: train\n    path: plain_text/train-*\n"
        "  - split: test\n    path: plain_text/test-*\n"))
    return folder


def cifar100(root: Path, rng) -> Path:
    feats = Features({"img": Image(), "fine_label": ClassLabel(names=[f"f{i}" for i in range(100)]),
                      "coarse_label": ClassLabel(names=[f"c{i}" for i in range(20)])})
    splits = {}
    for split, n in (("train", 120), ("test", 30)):
        fine = rng.integers(0, 100, n)
        splits[split] = Dataset.from_dict(
            {"img": _images(rng, n, 32, 32, labels=fine), "fine_label": fine,
             "coarse_label": fine // 5}, features=feats)
    DatasetDict(splits).save_to_disk(str(root / "cifar100"))
    return root / "cifar100"


def tiny_imagenet(root: Path, rng) -> Path:
    feats = Features({"image": Image(),
                      "label": ClassLabel(names=[f"n{i:08d}" for i in range(200)])})
    folder = root / "tiny-imagenet" / "data"
    folder.mkdir(parents=True)
    for split, n in (("train", 60), ("valid", 20)):
        y = rng.integers(0, 200, n)
        imgs = _images(rng, n, 64, 64, labels=y)
        imgs[0] = imgs[0].convert("L")  # the hub copy has a few grey images
        Dataset.from_dict({"image": imgs, "label": y}, features=feats) \
            .to_parquet(str(folder / f"{split}-00000-of-00001-1359597a978bc4fa.parquet"))
    return root / "tiny-imagenet"


def emnist_idx(root: Path, rng) -> Path:
    """NIST's gzip IDX files for EMNIST ByClass (tiny)."""
    folder = root / "emnist-gzip"
    folder.mkdir()
    for split, n in (("train", 70), ("test", 20)):
        labels = (np.arange(n) % 62).astype(np.uint8)
        images = np.clip(rng.normal(100, 60, (n, 28, 28)), 0, 255).astype(np.uint8)
        with gzip.open(folder / f"emnist-byclass-{split}-images-idx3-ubyte.gz", "wb") as f:
            f.write(struct.pack(">HBBIII", 0, 8, 3, n, 28, 28) + images.tobytes())
        with gzip.open(folder / f"emnist-byclass-{split}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">HBBI", 0, 8, 1, n) + labels.tobytes())
    return folder


def femnist(root: Path, rng, writers: int = 6, per_writer: int = 12) -> Path:
    names = [str(d) for d in range(10)] + [chr(c) for c in range(65, 91)] + \
        [chr(c) for c in range(97, 123)]
    feats = Features({"image": Image(), "writer_id": Value("string"), "hsf_id": Value("int64"),
                      "character": ClassLabel(names=names)})
    n = writers * per_writer
    wid = [f"f{w:04d}_{w % 50:02d}" for w in range(writers) for _ in range(per_writer)]
    chars = rng.integers(0, 62, n)
    ds = Dataset.from_dict({"image": _images(rng, n, 28, 28, "L", labels=chars), "writer_id": wid,
                            "hsf_id": [w % 8 for w in range(n)], "character": chars},
                           features=feats)
    DatasetDict({"train": ds}).save_to_disk(str(root / "femnist"))
    return root / "femnist"


def shakespeare(root: Path, rng, speakers: int = 5, per_speaker: int = 20) -> Path:
    import csv

    folder = root / "shakespeare"
    folder.mkdir()
    text = ("To be, or not to be, that is the question: "
            "Whether 'tis nobler in the mind to suffer\n") * 8
    with open(folder / "shakespeare.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["character_id", "x", "y"])
        for s in range(speakers):
            for i in range(per_speaker):
                start = int(rng.integers(0, len(text) - 81))
                w.writerow([f"THE_PLAY_{s}_SPEAKER", text[start:start + 80], text[start + 80]])
    (folder / "README.md").write_text(_readme(
        "- config_name: default\n  data_files:\n  - split: train\n    path: shakespeare.csv\n"))
    return folder


def celeba(root: Path, rng, celebs: int = 6, per_celeb: int = 5) -> Path:
    cols = {"image": Image(), "celeb_id": Value("int64")}
    cols.update({a: Value("bool") for a in CELEBA_ATTRS})
    feats = Features(cols)
    folder = root / "celeba"
    sub = folder / "img_align+identity+attr"
    sub.mkdir(parents=True)
    for split, offset in (("train", 0), ("valid", 100), ("test", 200)):
        n = celebs * per_celeb if split == "train" else 8
        smiling = rng.random(n) < 0.5
        data = {"image": _images(rng, n, 218, 178, labels=smiling.astype(int) * 5),
                "celeb_id": [offset + i // per_celeb for i in range(n)]}
        data.update({a: (smiling if a == "Smiling" else rng.random(n) < 0.5).tolist()
                     for a in CELEBA_ATTRS})
        Dataset.from_dict(data, features=feats).to_parquet(
            str(sub / f"{split}-00000-of-00001.parquet"))
    (folder / "README.md").write_text(_readme(
        "- config_name: img_align+identity+attr\n  data_files:\n"
        + "".join(f"  - split: {s}\n    path: img_align+identity+attr/{s}-*\n"
                  for s in ("train", "valid", "test"))))
    return folder
