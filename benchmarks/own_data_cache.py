"""A node's own data read the first time (decoded and checked) and from its cache, each in a
fresh process as a deployed ClientApp reads it (docs/deployment.md#deployment-cost).

    python -m benchmarks.own_data_cache                  # 4,000 images, 3 repeats
    python -m benchmarks.own_data_cache --images 10000 --json out.json

The folder: the digits of `python -m feddata demo-folders --images` (8x8 grey PNG, dataset
'custom'), node 0's image folder copied under new names until it holds `--images` files. Each
repeat starts a process that loads the folder through `feddata.disk_cache` with an empty cache
(the first read), then one that loads it from the cache; the seconds are those of the call
alone (not Python's start or the imports), the medians and their ratio are printed with the
load average, as the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD = """
import sys, time
from pathlib import Path
from feddata.__main__ import DEMO_CUSTOM
from feddata import DataSettings
from feddata.disk_cache import load_prepared_own_data
from run_config import resolve
cfg = resolve({**DEMO_CUSTOM, "test-data": "none", "fraction-evaluate": 0.5})
t = time.perf_counter()
part = load_prepared_own_data(DataSettings.from_config(cfg), sys.argv[1], Path(sys.argv[2]))
print(time.perf_counter() - t, len(part.train_y) + len(part.val_y))
"""


def image_folder(out: Path, images: int) -> Path:
    """An image folder of at least `images` PNG files (the demo digits, copied)."""
    from feddata.__main__ import demo_image_folders

    source = demo_image_folders(str(out / "demo"), 1)[0]
    files = sorted(p for p in source.rglob("*.png"))
    folder = out / "images"
    for i in range(images):
        src = files[i % len(files)]
        target = folder / src.parent.name / f"{i:06d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    return folder


def timed_load(folder: Path, cache: Path) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", LOAD, str(folder), str(cache)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1])


def measure(images: int, repeats: int) -> dict:
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="own-data-cache-") as tmp:
        folder = image_folder(Path(tmp), images)
        first, cached = [], []
        for r in range(repeats):
            cache = Path(tmp) / f"cache-{r}"
            seconds, n = timed_load(folder, cache)  # empty cache: decode and check
            first.append(seconds)
            cached.append(timed_load(folder, cache)[0])
    return {"images": n, "first-read-seconds": first, "cached-read-seconds": cached,
            "first-median": statistics.median(first),
            "cached-median": statistics.median(cached),
            "ratio": statistics.median(first) / statistics.median(cached),
            "load-average": load_before, "load-average-end": list(os.getloadavg())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = measure(args.images, args.repeats)
    first = ", ".join(f"{s:.2f}" for s in res["first-read-seconds"])
    cached = ", ".join(f"{s:.3f}" for s in res["cached-read-seconds"])
    print(f"{res['images']} images: first read {res['first-median']:.2f} s ({first}), cached "
          f"{res['cached-median']:.3f} s ({cached}), {res['ratio']:.0f}x; load average "
          f"{res['load-average']} -> {res['load-average-end']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
