"""Make the local copy of the data this example trains on, in the Hugging Face hub's format.

scikit-learn's bundled 8x8 digits (1797 grey images, 10 classes; no download) written as a hub
dataset repository would hold them: `data/train-00000-of-00001.parquet` (1437 images) and
`data/test-00000-of-00001.parquet` (360), with an `Image()` column `image` (PNG bytes) and a
`ClassLabel` column `label`. `flwr_datasets.FederatedDataset(dataset=<folder>)` loads the folder
like a hub dataset, offline.

    python prepare_data.py                       # into ~/.cache/fedacg-gc-example/digits
    python prepare_data.py --out /some/folder    # then run with dataset-path='/some/folder'
"""

import argparse
from pathlib import Path

import numpy as np
from datasets import ClassLabel, Dataset, Features, Image
from PIL import Image as PILImage
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

DEFAULT = "~/.cache/fedacg-gc-example/digits"


def prepare(out: Path) -> Path:
    digits = load_digits()
    pixels = np.clip(digits.images * 16, 0, 255).astype(np.uint8)  # 0..16 -> 0..255
    features = Features({"image": Image(), "label": ClassLabel(names=[str(d) for d in range(10)])})
    train, test = train_test_split(np.arange(len(pixels)), test_size=0.2, random_state=0,
                                   stratify=digits.target)
    (out / "data").mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train), ("test", test)):
        images = [PILImage.fromarray(pixels[i], mode="L") for i in rows]
        Dataset.from_dict({"image": images, "label": digits.target[rows]}, features=features) \
            .to_parquet(str(out / "data" / f"{split}-00000-of-00001.parquet"))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT, help=f"the folder to write (default {DEFAULT})")
    folder = prepare(Path(parser.parse_args().out).expanduser())
    print(f"wrote {folder}: pass --run-config \"dataset-path='{folder}'\" if it is not the "
          "default")
