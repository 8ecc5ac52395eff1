"""Stand-in copies of the papers' datasets at the hub copies' own size, format and id structure.

    python -m benchmarks.standins                      # every dataset, full size (cached)
    python -m benchmarks.standins cifar10 femnist      # some
    python -m benchmarks.standins --scale 0.01 --data-dir /tmp/standins   # a small copy

Each copy has the hub copy's row counts, image sizes, columns, feature types and splits, and for
the LEAF datasets the natural ids (FEMNIST writers, Shakespeare speakers, CelebA celebrities)
with realistic per-id counts; it is written in the layout `tests/hubformats.py` uses for that
dataset (the layouts a user's local copy has), so `dataset-path` reads it through feddata exactly
as it reads a real copy. The pixels are smooth gradients with light noise (the mean brightness
follows the label): cheap to make, small on disk (PNG or JPEG as the hub stores them), and as
costly to decode and train on as real images. Nothing here is meant to be learnt from.

The copies go to `--data-dir`, else $FEDACG_STANDIN_DIR, else
`$XDG_CACHE_HOME/fedacg-gc/standins` (`~/.cache/...`), one folder per dataset and scale; a
folder is complete when its `standin.json` exists (written last), and is then reused.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import gzip
import io
import json
import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VERSION = 1  # bump when the copies change: older folders are rebuilt


@dataclass(frozen=True)
class Real:
    """What the hub copy holds: rows per split, image (H, W, channels, format), ids."""

    splits: dict
    image: tuple = ()  # (height, width, channels, 'PNG' | 'JPEG')
    classes: int = 0
    ids: dict | None = None  # split -> number of natural ids
    source: str = ""


# Row counts of the hub copies (their dataset cards / the original releases).
REAL = {
    "cifar10": Real({"train": 50_000, "test": 10_000}, (32, 32, 3, "PNG"), 10,
                    source="uoft-cs/cifar10"),
    "cifar100": Real({"train": 50_000, "test": 10_000}, (32, 32, 3, "PNG"), 100,
                     source="uoft-cs/cifar100"),
    "tiny-imagenet": Real({"train": 100_000, "valid": 10_000}, (64, 64, 3, "JPEG"), 200,
                          source="zh-plus/tiny-imagenet"),
    "emnist": Real({"train": 697_932, "test": 116_323}, (28, 28, 1, "PNG"), 62,
                   source="NIST EMNIST ByClass (IDX files)"),
    "femnist": Real({"train": 814_277}, (28, 28, 1, "PNG"), 62, ids={"train": 3_597},
                    source="flwrlabs/femnist"),
    "shakespeare": Real({"train": 4_226_158}, ids={"train": 1_129},
                        source="flwrlabs/shakespeare"),
    "celeba": Real({"train": 162_770, "valid": 19_867, "test": 19_962}, (218, 178, 3, "JPEG"),
                   2, ids={"train": 8_192, "valid": 985, "test": 1_000},
                   source="flwrlabs/celeba img_align+identity+attr"),
}
DATASETS = tuple(REAL)
CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                 "truck"]
CELEBA_ATTRS = ["5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Smiling", "Young"]
CHUNK = 20_000


def default_dir() -> Path:
    if os.environ.get("FEDACG_STANDIN_DIR"):
        return Path(os.environ["FEDACG_STANDIN_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "fedacg-gc" / "standins"


def rows(name: str, split: str, scale: float) -> int:
    return max(2, int(round(REAL[name].splits[split] * scale)))


def num_ids(name: str, split: str, scale: float) -> int:
    n = REAL[name].ids[split]
    return max(2, min(int(round(n * scale)), rows(name, split, scale) // 2))


def id_counts(n_rows: int, n_ids: int, rng, kind: str) -> np.ndarray:
    """Examples per natural id, summing to n_rows: FEMNIST writers ~ N(227, 89) (LEAF's stats),
    Shakespeare speakers log-normal (LEAF: mean 3,743, std 6,212 lines), CelebA ~ N(20, 6)
    capped at 35 images per celebrity."""
    if kind == "shakespeare":
        w = rng.lognormal(0.0, 1.15, n_ids)
    elif kind == "celeba":
        w = np.clip(rng.normal(20, 6, n_ids), 3, 35)
    else:
        w = np.clip(rng.normal(227, 89, n_ids), 20, 700)
    floor = 2
    counts = np.full(n_ids, floor) + np.floor(w / w.sum() * (n_rows - floor * n_ids)).astype(int)
    np.add.at(counts, rng.integers(0, n_ids, int(n_rows - counts.sum())), 1)
    return counts


def smooth_images(rng, labels: np.ndarray, h: int, w: int, c: int) -> np.ndarray:
    """uint8 (n, h, w, c): a gradient per image, brightness by label, light noise."""
    n = len(labels)
    yy = np.linspace(0, 1, h, dtype=np.float32)[None, :, None, None]
    xx = np.linspace(0, 1, w, dtype=np.float32)[None, None, :, None]
    base = (40 + 170 * ((labels % 10) / 9.0)).astype(np.float32)[:, None, None, None]
    gy = rng.uniform(-40, 40, (n, 1, 1, c)).astype(np.float32)
    gx = rng.uniform(-40, 40, (n, 1, 1, c)).astype(np.float32)
    img = base + gy * yy + gx * xx + rng.normal(0, 3, (n, h, w, c)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def encoded_images(rng, labels: np.ndarray, image: tuple) -> list[dict]:
    """The hub's Image() cells ({'bytes', 'path'}), made CHUNK images at a time."""
    from PIL import Image as PILImage

    h, w, c, fmt = image
    out, chunk = [], max(1, min(CHUNK, 20_000_000 // (h * w * c)))
    for start in range(0, len(labels), chunk):
        arr = smooth_images(rng, labels[start:start + chunk], h, w, c)
        for a in arr:
            buf = io.BytesIO()
            pil = PILImage.fromarray(a[:, :, 0] if c == 1 else a, mode="L" if c == 1 else "RGB")
            if fmt == "PNG":
                pil.save(buf, format="PNG", compress_level=1)
            else:
                pil.save(buf, format="JPEG", quality=90)
            out.append({"bytes": buf.getvalue(), "path": None})
    return out


def _readme(configs: str) -> str:
    return f"---\nconfigs:\n{configs}---\n# stand-in copy (benchmarks/standins.py)\n"


def _cifar10(folder: Path, rng, scale: float) -> None:
    from datasets import ClassLabel, Dataset, Features, Image

    feats = Features({"img": Image(), "label": ClassLabel(names=CIFAR10_NAMES)})
    (folder / "plain_text").mkdir(parents=True)
    for split in ("train", "test"):
        y = rng.integers(0, 10, rows("cifar10", split, scale))
        Dataset.from_dict({"img": encoded_images(rng, y, REAL["cifar10"].image), "label": y},
                          features=feats) \
            .to_parquet(str(folder / "plain_text" / f"{split}-00000-of-00001.parquet"))
    (folder / "README.md").write_text(_readme(
        "- config_name: plain_text\n  data_files:\n  - split: train\n    path: plain_text/train-*\n"
        "  - split: test\n    path: plain_text/test-*\n"))


def _cifar100(folder: Path, rng, scale: float) -> None:
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image

    feats = Features({"img": Image(), "fine_label": ClassLabel(names=[f"f{i}" for i in range(100)]),
                      "coarse_label": ClassLabel(names=[f"c{i}" for i in range(20)])})
    splits = {}
    for split in ("train", "test"):
        fine = rng.integers(0, 100, rows("cifar100", split, scale))
        splits[split] = Dataset.from_dict(
            {"img": encoded_images(rng, fine, REAL["cifar100"].image), "fine_label": fine,
             "coarse_label": fine // 5}, features=feats)
    DatasetDict(splits).save_to_disk(str(folder))


def _tiny_imagenet(folder: Path, rng, scale: float) -> None:
    from datasets import ClassLabel, Dataset, Features, Image

    feats = Features({"image": Image(),
                      "label": ClassLabel(names=[f"n{i:08d}" for i in range(200)])})
    (folder / "data").mkdir(parents=True)
    for split in ("train", "valid"):
        n = rows("tiny-imagenet", split, scale)
        y = np.arange(n) % 200  # 500 (50) per class, as the hub copy
        imgs = encoded_images(rng, y, REAL["tiny-imagenet"].image)
        from PIL import Image as PILImage
        for i in range(0, n, 500):  # the hub copy has a few grey images
            buf = io.BytesIO()
            PILImage.open(io.BytesIO(imgs[i]["bytes"])).convert("L").save(buf, format="JPEG")
            imgs[i] = {"bytes": buf.getvalue(), "path": None}
        Dataset.from_dict({"image": imgs, "label": y}, features=feats).to_parquet(
            str(folder / "data" / f"{split}-00000-of-00001-1359597a978bc4fa.parquet"))


def _emnist(folder: Path, rng, scale: float) -> None:
    """NIST's gzip IDX files, then `feddata.save`'s --from-idx conversion (the documented way
    to make the local copy: EMNIST has no plain hub copy)."""
    from feddata.save import emnist_from_idx

    idx = folder.parent / (folder.name + "-gzip")
    shutil.rmtree(idx, ignore_errors=True)
    idx.mkdir(parents=True)
    for split in ("train", "test"):
        n = rows("emnist", split, scale)
        labels = rng.integers(0, 62, n).astype(np.uint8)
        images = np.concatenate([smooth_images(rng, labels[s:s + CHUNK], 28, 28, 1)[..., 0]
                                 for s in range(0, n, CHUNK)])
        with gzip.open(idx / f"emnist-byclass-{split}-images-idx3-ubyte.gz", "wb",
                       compresslevel=1) as f:
            f.write(struct.pack(">HBBIII", 0, 8, 3, n, 28, 28) + images.tobytes())
        with gzip.open(idx / f"emnist-byclass-{split}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">HBBI", 0, 8, 1, n) + labels.tobytes())
    emnist_from_idx(str(idx)).save_to_disk(str(folder))
    shutil.rmtree(idx, ignore_errors=True)


def _femnist(folder: Path, rng, scale: float) -> dict:
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value

    names = [str(d) for d in range(10)] + [chr(c) for c in range(65, 91)] + \
        [chr(c) for c in range(97, 123)]
    feats = Features({"image": Image(), "writer_id": Value("string"), "hsf_id": Value("int64"),
                      "character": ClassLabel(names=names)})
    n = rows("femnist", "train", scale)
    counts = id_counts(n, num_ids("femnist", "train", scale), rng, "femnist")
    writer = np.repeat(np.arange(len(counts)), counts)
    chars = rng.integers(0, 62, n)
    ds = Dataset.from_dict({"image": encoded_images(rng, chars, REAL["femnist"].image),
                            "writer_id": [f"f{w:04d}_{w % 50:02d}" for w in writer],
                            "hsf_id": (writer % 8).tolist(), "character": chars},
                           features=feats)
    DatasetDict({"train": ds}).save_to_disk(str(folder))
    return {"ids": len(counts), "per-id": _stats(counts)}


def _shakespeare(folder: Path, rng, scale: float) -> dict:
    from feddata.specs import LEAF_CHARS

    folder.mkdir(parents=True)
    n = rows("shakespeare", "train", scale)
    counts = id_counts(n, num_ids("shakespeare", "train", scale), rng, "shakespeare")
    alphabet = np.frombuffer(LEAF_CHARS.encode(), dtype=np.uint8)
    with open(folder / "shakespeare.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["character_id", "x", "y"])
        for s, k in enumerate(counts):  # one text per speaker, the LEAF windows over it
            text = alphabet[rng.integers(0, len(alphabet), int(k) + 80)].tobytes().decode()
            sid = f"PLAY_{s // 20:03d}_SPEAKER_{s:04d}"
            w.writerows((sid, text[i:i + 80], text[i + 80]) for i in range(int(k)))
    (folder / "README.md").write_text(_readme(
        "- config_name: default\n  data_files:\n  - split: train\n    path: shakespeare.csv\n"))
    return {"ids": len(counts), "per-id": _stats(counts)}


def _celeba(folder: Path, rng, scale: float) -> dict:
    from datasets import Dataset, Features, Image, Value

    cols = {"image": Image(), "celeb_id": Value("int64")}
    cols.update({a: Value("bool") for a in CELEBA_ATTRS})
    feats = Features(cols)
    sub = folder / "img_align+identity+attr"
    sub.mkdir(parents=True)
    info, offset = {}, 1
    for split in ("train", "valid", "test"):
        n = rows("celeba", split, scale)
        counts = id_counts(n, num_ids("celeba", split, scale), rng, "celeba")
        smiling = rng.random(n) < 0.48
        data = {"image": encoded_images(rng, smiling.astype(int) * 5, REAL["celeba"].image),
                "celeb_id": (offset + np.repeat(np.arange(len(counts)), counts)).tolist()}
        offset += len(counts)
        data.update({a: (smiling if a == "Smiling" else rng.random(n) < 0.5).tolist()
                     for a in CELEBA_ATTRS})
        Dataset.from_dict(data, features=feats).to_parquet(
            str(sub / f"{split}-00000-of-00001.parquet"))
        info[split] = {"ids": len(counts), "per-id": _stats(counts)}
    (folder / "README.md").write_text(_readme(
        "- config_name: img_align+identity+attr\n  data_files:\n"
        + "".join(f"  - split: {s}\n    path: img_align+identity+attr/{s}-*\n"
                  for s in ("train", "valid", "test"))))
    return info


def _stats(counts: np.ndarray) -> dict:
    return {"min": int(counts.min()), "median": float(np.median(counts)),
            "mean": round(float(counts.mean()), 1), "max": int(counts.max())}


WRITERS = {"cifar10": _cifar10, "cifar100": _cifar100, "tiny-imagenet": _tiny_imagenet,
           "emnist": _emnist, "femnist": _femnist, "shakespeare": _shakespeare,
           "celeba": _celeba}


def folder_of(name: str, scale: float = 1.0, data_dir: Path | None = None) -> Path:
    tag = "" if scale == 1.0 else f"-x{scale:g}"
    return Path(data_dir or default_dir()) / f"{name}{tag}"


def du_mb(path: Path) -> float:
    """Bytes under `path` (files only), in MB."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total / 2**20


def ensure(name: str, scale: float = 1.0, data_dir: Path | None = None, seed: int = 0,
           log=print) -> Path:
    """The stand-in copy of `name` (made now unless a complete one is cached): its folder, to
    pass as dataset-path."""
    if name not in WRITERS:
        raise ValueError(f"no stand-in for {name!r}; one of {list(WRITERS)}")

    folder = folder_of(name, scale, data_dir)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer; the others wait and reuse its copy
        return _ensure(name, scale, folder, seed, log)


def _ensure(name: str, scale: float, folder: Path, seed: int, log) -> Path:
    marker = folder / "standin.json"
    if marker.exists():
        try:
            if json.loads(marker.read_text()).get("version") == VERSION:
                return folder
        except (OSError, ValueError):
            pass
    shutil.rmtree(folder, ignore_errors=True)
    log(f"making the stand-in copy of {name} (scale {scale:g}) in {folder} ...")
    t = time.perf_counter()
    rng = np.random.default_rng([seed, sum(name.encode())])
    extra = WRITERS[name](folder, rng, scale) or {}
    info = {"version": VERSION, "dataset": name, "scale": scale, "source": REAL[name].source,
            "rows": {s: rows(name, s, scale) for s in REAL[name].splits},
            "image": list(REAL[name].image), "natural-ids": extra,
            "seconds": round(time.perf_counter() - t, 1), "mb": round(du_mb(folder), 1)}
    tmp = folder / "standin.json.tmp"
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, marker)
    log(f"  {name}: {info['rows']} in {info['seconds']} s, {info['mb']} MB")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="*", help=f"default: all of {list(WRITERS)}")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the real row and id counts (1 = the hub's size)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where the copies go (default: $FEDACG_STANDIN_DIR or "
                             "$XDG_CACHE_HOME/fedacg-gc/standins)")
    args = parser.parse_args(argv)
    for name in args.datasets or WRITERS:
        folder = ensure(name, args.scale, args.data_dir)
        print(folder, (folder / "standin.json").read_text().replace("\n", ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
