"""The node-local partition cache and the light ClientApp import path (deployment cost)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from feddata import DATA_KEYS, DataSettings, load_client_data
from feddata import disk_cache
from feddata.disk_cache import (CACHE_KEY_NAMES, cache_dir, cache_file, cache_key,
                                 load_prepared_partition)
from run_config import resolve

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("datasets", "flwr_datasets", "sklearn", "pandas", "pyarrow", "feddata.loading")


def data(overrides: dict) -> DataSettings:
    """The data settings of the run config `overrides` (resolved), as the apps take them."""
    return DataSettings.from_config(resolve(overrides))


def test_every_data_key_is_part_of_the_cache_key():
    from run_config.schema import KEYS

    assert set(DATA_KEYS) <= set(CACHE_KEY_NAMES)
    # the schema's data group, in order, and the seed: a data key added there is keyed here too
    assert CACHE_KEY_NAMES == tuple(k.name for k in KEYS if k.group == "data") + ("seed",)
    cfg = data({})
    base = cache_file(Path("/c"), cache_key(cfg, 0, 4))
    for key, value in (("dirichlet-alpha", 0.7), ("seed", 3), ("client-val-fraction", 0.25)):
        assert cache_file(Path("/c"), cache_key(data({key: value}), 0, 4)) != base, key
    assert cache_file(Path("/c"), cache_key(cfg, 1, 4)) != base
    assert cache_file(Path("/c"), cache_key(cfg, 0, 5)) != base
    # training keys do not split the cache: the next run with another lr reuses the files
    assert cache_file(Path("/c"), cache_key(data({"lr": 0.3, "method": "gcfed"}), 0, 4)) == base


def test_data_settings_are_the_cache_keys_with_the_schemas_defaults():
    from run_config.schema import KEYS

    settings = DataSettings()
    assert set(settings.as_config()) == set(CACHE_KEY_NAMES)
    # the defaults (for callers without a run config: python -m feddata check) are the schema's
    assert settings == DataSettings.from_config({k.name: k.default for k in KEYS})
    assert settings == DataSettings.from_config(resolve({}))
    assert hash(data({"seed": 3})) == hash(data({"seed": 3})) != hash(settings)
    with pytest.raises(KeyError, match="dataset-path"):  # the edge names a key it lacks
        DataSettings.from_config({"dataset": "digits"})


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDACG_CACHE_DIR", str(tmp_path / "env"))
    assert cache_dir({"cache-dir": str(tmp_path / "node")}) == tmp_path / "node"
    assert cache_dir({}) == tmp_path / "env"
    assert cache_dir({"cache-dir": "off"}) is None
    monkeypatch.delenv("FEDACG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir(None) == tmp_path / "xdg" / "fedacg-gc" / "partitions"


def test_miss_writes_and_a_fresh_process_reads_without_heavy_imports(tmp_path):
    cfg = data({"partitioner": "lda", "lda-alpha": 0.5, "seed": 4})
    part = load_prepared_partition(cfg, 2, 6, tmp_path)
    ref = load_client_data(cfg, 2, 6)
    files = list(tmp_path.glob("*.pt"))
    assert len(files) == 1 and files[0].name.startswith("digits-p2of6-")
    assert torch.equal(part.train_x, ref.train_x) and torch.equal(part.val_y, ref.val_y)
    assert part.in_shape == (1, 8, 8) and part.num_classes == 10

    code = (
        "import sys, torch\n"
        "from feddata.disk_cache import load_prepared_partition\n"
        "from feddata.settings import DataSettings\n"
        "from run_config import resolve\n"
        "cfg = DataSettings.from_config(resolve({'partitioner': 'lda', 'lda-alpha': 0.5, "
        "'seed': 4}))\n"
        f"p = load_prepared_partition(cfg, 2, 6, __import__('pathlib').Path({str(tmp_path)!r}))\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], "
        "len(p.train_y), float(p.train_x.sum()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "[]", out  # a hit imports none of the data libraries
    assert int(out[1]) == len(ref.train_y)
    assert abs(float(out[2]) - float(ref.train_x.sum())) < 1e-3


def test_corrupt_or_foreign_file_is_rebuilt(tmp_path):
    cfg = data({})
    path = cache_file(tmp_path, cache_key(cfg, 0, 3))
    path.write_bytes(b"not a torch file")
    disk_cache._memory.clear()
    part = load_prepared_partition(cfg, 0, 3, tmp_path)
    assert len(part.train_y) > 0
    blob = torch.load(path, weights_only=True)
    assert torch.equal(blob["train_y"], part.train_y)
    # a file whose stored key differs (e.g. written by other code) is not trusted either
    blob["key"] = "{}"
    blob["train_y"] = torch.zeros_like(blob["train_y"])
    torch.save(blob, path)
    disk_cache._memory.clear()
    assert torch.equal(load_prepared_partition(cfg, 0, 3, tmp_path).train_y, part.train_y)


def test_client_app_import_is_light():
    code = f"import sys, client_app.app; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out


# --- a node's own data: decoded and checked once, kept while its folder is unchanged ----------
def own_cfg(**extra):
    from feddata.__main__ import DEMO_CUSTOM

    return data({**DEMO_CUSTOM, "test-data": "none", "fraction-evaluate": 0.5, **extra})


def image_folder(tmp_path) -> Path:
    from feddata.__main__ import demo_image_folders

    folder = demo_image_folders(str(tmp_path / "data"), 1)[0]  # node 0: an image folder
    assert (folder / "0").is_dir()
    return folder


def fresh_load(cfg, folder, cache):
    """load_prepared_own_data as the next message's fresh ClientApp process runs it: with no
    memory of earlier loads."""
    disk_cache._memory.clear()
    return disk_cache.load_prepared_own_data(cfg, str(folder), cache)


def same(a, b) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k))
               for k in ("train_x", "train_y", "val_x", "val_y")) and a.in_shape == b.in_shape


def test_own_data_is_read_once_and_a_fresh_process_opens_no_image(tmp_path):
    """The first load decodes the folder (as prepared_own_data does); a fresh process (the
    next round's ClientApp) gets the same tensors with every image reader made to fail."""
    from feddata.own_data import prepared_own_data

    folder, cache = image_folder(tmp_path), tmp_path / "cache"
    cfg = own_cfg()
    disk_cache._memory.clear()
    first = disk_cache.load_prepared_own_data(cfg, str(folder), cache)
    assert same(first, prepared_own_data(cfg, str(folder)))
    assert len(list(cache.glob("own-*.pt"))) == 1
    code = (
        "import sys, torch, PIL.Image, feddata.own_data as own\n"
        "def refuse(*a, **k): raise AssertionError('an image was read')\n"
        "PIL.Image.open = own.read_own_data = own.prepared_own_data = refuse\n"
        "from feddata.__main__ import DEMO_CUSTOM\n"
        "from feddata.disk_cache import load_prepared_own_data\n"
        "from feddata.settings import DataSettings\n"
        "from run_config import resolve\n"
        "cfg = DataSettings.from_config(resolve({**DEMO_CUSTOM, 'test-data': 'none', "
        "'fraction-evaluate': 0.5}))\n"
        f"p = load_prepared_own_data(cfg, {str(folder)!r}, "
        f"__import__('pathlib').Path({str(cache)!r}))\n"
        f"torch.save([p.train_x, p.train_y, p.val_x, p.val_y], {str(tmp_path / 'out.pt')!r})\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    again = torch.load(tmp_path / "out.pt", weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(again, (first.train_x, first.train_y,
                                                         first.val_x, first.val_y)))


def test_own_data_whose_links_may_leave_the_folder_is_never_cached(tmp_path):
    """data-follow-links: a link's target outside the folder is not in the cache's listing, so
    such a folder is read in every process (a change out there would otherwise go unseen)."""
    from feddata import own_data

    folder, cache = image_folder(tmp_path), tmp_path / "cache"
    cfg = own_cfg()
    disk_cache._memory.clear()
    read = disk_cache.load_prepared_own_data(cfg, str(folder), cache, follow_links=True)
    assert same(read, own_data.prepared_own_data(cfg, str(folder), follow_links=True))
    assert not cache.exists() or list(cache.glob("own-*.pt")) == []


def test_own_data_a_changed_folder_is_read_again_and_its_older_copy_removed(tmp_path):
    import os
    import shutil

    folder, cache = image_folder(tmp_path), tmp_path / "cache"
    cfg = own_cfg()
    first = fresh_load(cfg, folder, cache)
    n = len(first.train_y) + len(first.val_y)
    images = sorted((folder / "3").iterdir())
    shutil.copy(images[0], folder / "3" / "extra.png")  # one more image
    part = fresh_load(cfg, folder, cache)
    assert len(part.train_y) + len(part.val_y) == n + 1
    files = list(cache.glob("own-*.pt"))
    assert len(files) == 1  # the older copy is gone
    # other pixels in a file of the same name, size and modification time (a copy that kept
    # the time): read again, as its change time moved
    by_size: dict[int, list[Path]] = {}
    for image in images:
        by_size.setdefault(image.stat().st_size, []).append(image)
    a, b = next(v for v in by_size.values() if len(v) > 1
                and v[0].read_bytes() != v[1].read_bytes())[:2]
    stat = a.stat()
    a.write_bytes(b.read_bytes())
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = fresh_load(cfg, folder, cache)
    assert not same(changed, part)
    assert list(cache.glob("own-*.pt")) != files and len(list(cache.glob("own-*.pt"))) == 1


def test_own_data_key_holds_the_settings_the_reader_uses_and_no_others(tmp_path):
    from dataclasses import fields

    from feddata.own_data import prepared_own_data
    from feddata.settings import config_name

    names = {f.name for f in fields(DataSettings)}
    read: set = set()

    class Reading(DataSettings):
        """Settings that record the fields read from them, as their run-config keys."""

        def __getattribute__(self, name):
            if name in names:
                read.add(config_name(name))
            return super().__getattribute__(name)

    folder = image_folder(tmp_path)
    prepared_own_data(Reading(**vars(own_cfg())), str(folder))
    assert read and read <= set(disk_cache.OWN_DATA_KEY_NAMES), read
    base = disk_cache.own_data_file(tmp_path, disk_cache.own_data_key(own_cfg(), str(folder)))
    for key, value in (("seed", 3), ("client-val-fraction", 0.3), ("custom-mean", "0.5")):
        other = disk_cache.own_data_key(own_cfg(**{key: value}), str(folder))
        assert disk_cache.own_data_file(tmp_path, other) != base, key
    # training keys do not: the next run with another lr loads the same file
    other = disk_cache.own_data_key(own_cfg(lr=0.3, method="gcfed"), str(folder))
    assert disk_cache.own_data_file(tmp_path, other) == base


def test_own_data_key_opens_no_file_and_follows_no_link(tmp_path, monkeypatch):
    import builtins
    import os

    folder = tmp_path / "mine"
    (folder / "0").mkdir(parents=True)
    (folder / "0" / "a.png").write_bytes(b"x" * 10)
    outside = tmp_path / "outside"
    (outside / "1").mkdir(parents=True)
    (outside / "1" / "b.png").write_bytes(b"y")
    (folder / "0" / "link.png").symlink_to(outside / "1" / "b.png")
    (folder / "1").symlink_to(outside / "1")  # a link to a folder outside

    def refuse(*args, **kwargs):
        raise AssertionError(f"opened {args[0]}")

    cfg = own_cfg()
    with monkeypatch.context() as m:
        m.setattr(builtins, "open", refuse)
        m.setattr(os, "open", refuse)
        key = disk_cache.own_data_key(cfg, str(folder))
    assert key["entries"] == 4  # 0/, 0/a.png, 0/link.png, 1 (the link, not its files)
    (outside / "1" / "b.png").write_bytes(b"yyyy")  # what the links point to changes
    (outside / "1" / "c.png").write_bytes(b"z")
    assert disk_cache.own_data_key(cfg, str(folder)) == key
    (folder / "0" / "link.png").unlink()  # a link pointed elsewhere is a change
    (folder / "0" / "link.png").symlink_to(outside / "1" / "c.png")
    assert disk_cache.own_data_key(cfg, str(folder))["listing"] != key["listing"]
    # the folder named through a link is the folder itself
    (tmp_path / "alias").symlink_to(folder)
    assert disk_cache.own_data_key(cfg, str(tmp_path / "alias"))["own-data"] == str(folder)
    assert disk_cache.own_data_key(cfg, str(tmp_path / "missing")) is None


def test_own_data_hidden_entries_do_not_change_the_key(tmp_path):
    """The reader skips hidden entries (a Finder's .DS_Store, a .cache folder): their changes
    leave the key, and so the cached copy, as it is."""
    folder = image_folder(tmp_path)
    cfg = own_cfg()
    before = disk_cache.own_data_key(cfg, str(folder))
    (folder / ".DS_Store").write_bytes(b"finder")
    (folder / ".cache" / "x").mkdir(parents=True)
    (folder / ".cache" / "x" / "y.pt").write_bytes(b"1")
    assert disk_cache.own_data_key(cfg, str(folder)) == before
    (folder / "3" / "new.png").write_bytes(b"not hidden")
    assert disk_cache.own_data_key(cfg, str(folder))["listing"] != before["listing"]


def test_a_cache_folder_inside_the_data_folder_is_refused(tmp_path):
    folder = image_folder(tmp_path)
    with pytest.raises(ValueError, match="is inside the node's data folder"):
        fresh_load(own_cfg(), folder, folder / "cache")
    assert not (folder / "cache").exists()
    part = fresh_load(own_cfg(), folder, folder / ".cache")  # hidden: the reader skips it
    assert same(part, fresh_load(own_cfg(), folder, folder / ".cache"))
    assert len(list((folder / ".cache").glob("own-*.pt"))) == 1



# --- trust: a private folder, tensors that fit the dataset, a full disk (issue 50) ----------
@pytest.fixture
def node_log():
    """The warnings a node logs (the 'flwr' logger, whose records Flower may not propagate)."""
    import logging

    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def fresh_partition(cfg, folder):
    disk_cache._memory.clear()
    return load_prepared_partition(cfg, 0, 3, folder)


def reference(cfg):
    """Partition 0 of 3 as the loader makes it, no cache involved."""
    ref = load_client_data(cfg, 0, 3)
    return ref.train_x, ref.train_y, ref.val_x, ref.val_y


def as_read(part):
    return part.train_x, part.train_y, part.val_x, part.val_y


def all_equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_the_cache_folder_and_its_files_are_private_whatever_the_umask(tmp_path):
    import os
    import stat

    cfg = data({})
    folder = tmp_path / "a" / "cache"
    old = os.umask(0)
    try:
        fresh_partition(cfg, folder)
        disk_cache._memory.clear()
        disk_cache.load_prepared_own_data(own_cfg(), str(image_folder(tmp_path)), folder)
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = sorted(folder.glob("*.pt"))
    assert len(files) == 2 and {f.name[:4] for f in files} == {"digi", "own-"}
    assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o600, 0o600]


@pytest.mark.parametrize("mode, used", [
    (0o700, True), (0o750, True), (0o755, True), (0o500 | 0o200, True),
    (0o720, False), (0o702, False), (0o770, False), (0o777, False), (0o1777, False),
])
def test_a_cache_folder_others_may_write_is_not_used(tmp_path, node_log, mode, used):
    """Group or others could plant a file there that the node would train on: not used
    (logged), the node trains on the data as read and writes nothing there."""
    cfg = data({})
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    part = fresh_partition(cfg, folder)
    assert all_equal(as_read(part), reference(cfg))
    assert bool(list(folder.glob("*.pt"))) == used
    refused = [line for line in node_log if "may be written by its group or others" in line]
    assert bool(refused) != used, node_log
    if refused:
        assert f"mode {mode & 0o7777:o}" in refused[0] and f"chmod 700 {folder}" in refused[0]


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0,
                    reason="makes a folder another user's with chown (root only)")
def test_another_users_cache_folder_is_not_used_even_with_a_good_file_in_it(tmp_path, node_log):
    import os

    cfg = data({})
    folder = tmp_path / "cache"
    fresh_partition(cfg, folder)  # a file of the right key, written by the node itself
    planted = cache_file(folder, cache_key(cfg, 0, 3))
    blob = torch.load(planted, weights_only=True)
    blob["train_y"] = (blob["train_y"] + 1) % 10  # labels another user chose
    torch.save(blob, planted)
    os.chown(folder, 65534, 65534)
    part = fresh_partition(cfg, folder)
    assert all_equal(as_read(part), reference(cfg))
    assert any("belongs to another user (uid 65534)" in line for line in node_log), node_log
    assert torch.equal(torch.load(planted, weights_only=True)["train_y"], blob["train_y"])


@pytest.mark.parametrize("make, says", [
    ("file", "is a regular file, not a folder"),
    ("link", "is a link"),
    ("proc", "is in /proc"),
    ("sys", "is in /sys"),
    ("under-file", "cannot be made"),
])
def test_a_cache_folder_that_is_no_folder_of_ones_own_is_not_used(tmp_path, node_log, make,
                                                                    says):
    cfg = data({})
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    folder = {"file": tmp_path / "cache", "link": tmp_path / "cache",
              "proc": Path("/proc/self/fedacg-cache"), "sys": Path("/sys/fedacg-cache"),
              "under-file": tmp_path / "cache" / "sub"}[make]
    if make in ("file", "under-file"):
        (tmp_path / "cache").write_text("a file")
    elif make == "link":
        folder.symlink_to(real)
    part = fresh_partition(cfg, folder)
    assert all_equal(as_read(part), reference(cfg))
    assert any(says in line and "without the cache" in line for line in node_log), node_log
    assert list(real.iterdir()) == []
    if make in ("file", "under-file"):
        assert (tmp_path / "cache").read_text() == "a file"


def _spoil(blob, how):
    """A cache file's tensors as someone else made them, its key left as the node wrote it."""
    if how == "label = classes":
        blob["train_y"][0] = 10
    elif how == "label -1":
        blob["val_y"][-1] = -1
    elif how == "labels int32":
        blob["train_y"] = blob["train_y"].to(torch.int32)
    elif how == "labels 2-d":
        blob["train_y"] = blob["train_y"][:, None]
    elif how == "inputs float64":
        blob["train_x"] = blob["train_x"].double()
    elif how == "inputs of another shape":
        blob["train_x"] = blob["train_x"].reshape(len(blob["train_x"]), 1, 4, 16)
    elif how == "held-out NaN":
        blob["val_x"][0, 0, 0, 0] = float("nan")
    elif how == "in_shape":
        blob["in_shape"] = [1, 4, 16]
    elif how == "num_classes":
        blob["num_classes"] = 11
    elif how == "num_classes a bool":
        blob["num_classes"], blob["train_y"] = True, torch.zeros_like(blob["train_y"])
    elif how == "one label fewer":
        blob["train_y"] = blob["train_y"][:-1]
    return blob


@pytest.mark.parametrize("how", [
    "label = classes", "label -1", "labels int32", "labels 2-d", "inputs float64",
    "inputs of another shape", "held-out NaN", "in_shape", "num_classes",
    "num_classes a bool", "one label fewer"])
def test_cached_tensors_that_do_not_fit_the_dataset_are_a_miss(tmp_path, node_log, how):
    cfg = data({})
    folder = tmp_path / "cache"
    fresh_partition(cfg, folder)
    path = cache_file(folder, cache_key(cfg, 0, 3))
    torch.save(_spoil(torch.load(path, weights_only=True), how), path)
    part = fresh_partition(cfg, folder)
    assert all_equal(as_read(part), reference(cfg))
    assert part.in_shape == (1, 8, 8) and part.num_classes == 10
    # replaced by the node's own copy
    assert all_equal(as_read(fresh_partition(cfg, folder)), reference(cfg))
    blob = torch.load(path, weights_only=True)
    assert torch.equal(blob["train_y"], reference(cfg)[1])
    if how not in ("one label fewer", "num_classes a bool"):  # (refused when read)
        assert any("does not fit dataset 'digits'" in line for line in node_log), node_log


def test_own_data_cached_with_labels_beyond_its_classes_is_read_again(tmp_path, node_log):
    from feddata.own_data import prepared_own_data

    folder, cache = image_folder(tmp_path), tmp_path / "cache"
    cfg = own_cfg()
    fresh_load(cfg, folder, cache)
    (path,) = cache.glob("own-*.pt")
    blob = torch.load(path, weights_only=True)
    blob["train_y"][:] = cfg.custom_classes
    torch.save(blob, path)
    assert same(fresh_load(cfg, folder, cache), prepared_own_data(cfg, str(folder)))
    assert any("outside [0, 10)" in line for line in node_log), node_log


@pytest.mark.parametrize("after", [0, 1000])
def test_a_full_disk_is_logged_and_the_node_trains_on_what_it_read(tmp_path, node_log,
                                                                    disk_full_after, after):
    """The cache write fails (ENOSPC) at its first byte or in the middle of torch's writer
    (which turns the error into a RuntimeError): logged with the fix, no file left, the node
    trains on the data as read."""
    disk_full_after(after)
    cfg = data({})
    folder = tmp_path / "cache"
    part = fresh_partition(cfg, folder)
    assert all_equal(as_read(part), reference(cfg))
    assert list(folder.iterdir()) == []  # neither the file nor a temporary one
    assert any("data cache not written" in line and "No space left on device" in line
               for line in node_log), node_log


@pytest.mark.parametrize("link, target", [
    ("0/x.png", "../.hidden/a.png"),  # a file in a hidden folder
    ("0/y.png", "../.a.png"),  # a hidden file
    ("0/sub", "../.seven"),  # a hidden folder as a sub-folder of a label folder
    ("0/deep.png", "../1/.h/b.png"),  # hidden deeper down
])
def test_a_link_into_a_hidden_entry_is_neither_read_nor_keyed(tmp_path, link, target):
    """Hidden entries are not in the cache's listing: a link into one would let a change there
    go unseen by the cache, so the reader refuses it (naming the link and the fix)."""
    import os
    import shutil

    from feddata.own_data import OwnDataError, prepared_own_data

    folder = image_folder(tmp_path)
    cfg = own_cfg()
    image = next((folder / "0").iterdir())
    (folder / ".hidden").mkdir()
    (folder / "1" / ".h").mkdir()
    for hidden in (".hidden/a.png", ".a.png", "1/.h/b.png", ".seven/c.png"):
        (folder / hidden).parent.mkdir(exist_ok=True)
        shutil.copy(image, folder / hidden)
    key = disk_cache.own_data_key(cfg, str(folder))
    os.symlink(target, folder / link)
    with pytest.raises(OwnDataError, match=r"into the hidden entry '\.[a-z.]+'.*remove the link"):
        prepared_own_data(cfg, str(folder))
    with pytest.raises(OwnDataError, match="into the hidden entry"):
        fresh_load(cfg, folder, tmp_path / "cache")
    assert disk_cache.own_data_key(cfg, str(folder))["entries"] == key["entries"] + 1


def test_a_link_whose_text_passes_a_hidden_folder_but_lands_outside_it_is_read(tmp_path):
    """Only where a link lands counts: '../.h/../1/a.png' is 1/a.png, which is keyed."""
    import os

    from feddata.own_data import prepared_own_data

    folder = image_folder(tmp_path)
    (folder / "1" / ".h").mkdir()
    first = sorted((folder / "1").glob("*.png"))[0]
    os.symlink(f"../1/.h/../{first.name}", folder / "0" / "zz.png")
    part = fresh_load(own_cfg(), folder, tmp_path / "cache")
    assert same(part, prepared_own_data(own_cfg(), str(folder)))


# --- a Ray simulation's ServerApp prepares the clients' partition files ----------------------

class InMemoryGrid:
    """Named as Flower's simulation grid (what `server_app.app.is_simulation` reads): 6 nodes."""

    def get_node_ids(self):
        return list(range(6))


def test_a_simulations_server_prepares_the_files_a_fresh_client_reads_without_datasets(
        tmp_path, monkeypatch):
    """The ServerApp's start in a simulation writes every partition's file; each holds what the
    client builds itself (no disk: `folder=None`), and a fresh ClientApp process loads its own
    without importing `datasets` or the data readers. A file already there is not rebuilt."""
    from server_app.app import model_and_data

    monkeypatch.setenv("FEDACG_CACHE_DIR", str(tmp_path / "cache"))
    cfg = resolve({"partitioner": "lda", "lda-alpha": 0.5, "seed": 4})
    (tmp_path / "run").mkdir()
    model_and_data(cfg, InMemoryGrid(), tmp_path / "run")
    settings = DataSettings.from_config(cfg)
    files = sorted((tmp_path / "cache").glob("digits-p*of6-*.pt"))
    assert [f.name.split("-")[1] for f in files] == [f"p{i}of6" for i in range(6)]
    for pid in range(6):
        disk_cache._memory.clear()
        own = load_prepared_partition(settings, pid, 6, None)  # the client's build
        read = disk_cache._read(cache_file(tmp_path / "cache", cache_key(settings, pid, 6)),
                                cache_key(settings, pid, 6))
        assert torch.equal(read.train_x, own.train_x) and torch.equal(read.val_y, own.val_y)
        assert torch.equal(read.train_y, own.train_y) and torch.equal(read.val_x, own.val_x)
    assert disk_cache.prepare_partitions(settings, 6, tmp_path / "cache") == 0
    code = (
        "import sys\n"
        "import client_app.app\n"
        "from feddata.disk_cache import load_prepared_partition\n"
        "from feddata.settings import DataSettings\n"
        "from run_config import resolve\n"
        "cfg = DataSettings.from_config(resolve({'partitioner': 'lda', 'lda-alpha': 0.5, "
        "'seed': 4}))\n"
        f"p = load_prepared_partition(cfg, 5, 6, __import__('pathlib').Path("
        f"{str(tmp_path / 'cache')!r}))\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], len(p.train_y))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "[]", out
    assert int(out[1]) == len(load_prepared_partition(settings, 5, 6, None).train_y)


def test_a_server_outside_a_simulation_prepares_nothing(tmp_path, monkeypatch):
    """Deployment (or the in-process grid): the nodes' caches are theirs, not the server's."""
    from server_app.app import model_and_data

    class Grid(InMemoryGrid):
        pass

    monkeypatch.setenv("FEDACG_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "run").mkdir()
    model_and_data(resolve({}), Grid(), tmp_path / "run")
    assert not list((tmp_path / "cache").glob("*.pt"))


def test_a_dynamic_populations_server_prepares_nothing(tmp_path, monkeypatch):
    """With dynamic clients the partitions are a pool's (`num-partitions` > the nodes): files
    for the nodes' count would be built for nothing."""
    from server_app.app import model_and_data

    monkeypatch.setenv("FEDACG_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "run").mkdir()
    cfg = resolve({"dynamic-replace-prob": 0.5, "dynamic-pool-factor": 2.0})
    model_and_data(cfg, InMemoryGrid(), tmp_path / "run")
    assert not list((tmp_path / "cache").glob("*.pt"))
