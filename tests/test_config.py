"""Run-config validation: one schema for validation and pyproject (the docs: test_docs.py)."""

import sys
import tomllib
from pathlib import Path

import pytest

from run_config import KEYS, ConfigError, resolve

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_and_presets():
    cfg = resolve({})
    assert cfg["method"] == "fedacg"
    assert (cfg["lookahead"], cfg["lam"], cfg["eta"], cfg["beta"]) == (True, 0.85, 1.0, 0.01)
    gc = resolve({"method": "gcfed"})
    assert (gc["local-gc"], gc["global-gc"], gc["aggregation"], gc["lam"]) == \
        ("features", "all", "uniform", 0.0)
    avgm = resolve({"method": "fedavgm"})
    assert (avgm["lookahead"], avgm["lam"], avgm["beta"]) == (False, 0.85, 0.0)


def test_every_knob_overrides_its_preset():
    cfg = resolve({"method": "fedacg", "lam": 0.9, "beta": 0, "global-gc": "classifier"})
    assert (cfg["lam"], cfg["beta"], cfg["global-gc"], cfg["lookahead"]) == (
        0.9, 0.0, "classifier", True)


def test_uncoerced_values_are_accepted():
    cfg = resolve({"lr": 1, "eta": 2, "gc-borderline": 1, "local-epochs": 3.0})
    assert cfg["lr"] == 1.0 and isinstance(cfg["lr"], float)
    assert cfg["eta"] == 2.0 and cfg["gc-borderline"] == 1.0
    assert cfg["local-epochs"] == 3 and isinstance(cfg["local-epochs"], int)


@pytest.mark.parametrize("bad,words", [
    ({"lrr": 0.1}, ["unknown run-config key", "'lrr'", "did you mean 'lr'"]),
    ({"method": "fedacgg"}, ["'method'", "unknown choice", "did you mean 'fedacg'", "'gcfed'"]),
    ({"lam": 1.0}, ["'lam'", "out of range", "[0, 1)"]),
    ({"lam": 1.5}, ["'lam'", "out of range"]),
    ({"lam": "high"}, ["'lam'", "expected float", "'preset'"]),
    ({"beta": -0.1}, ["'beta'", "out of range", "[0, 10000]"]),
    ({"gc-borderline": 0.0}, ["'gc-borderline'", "(0, 1]", "'classifier'"]),
    ({"gc-borderline": 1.5}, ["'gc-borderline'", "out of range"]),
    ({"gc-borderline": "last"}, ["'gc-borderline'", "'classifier'"]),
    ({"fraction-train": 0}, ["'fraction-train'", "(0, 1]"]),
    ({"lookahead": "yes"}, ["'lookahead'", "true | false"]),
    ({"local-epochs": 1.5}, ["'local-epochs'", "integer"]),
    ({"num-server-rounds": True}, ["'num-server-rounds'", "expected int"]),
    ({"local-epochs": 0, "local-iterations": 0}, ["no local training"]),
    ({"method": "fedadam", "lookahead": True}, ["'lookahead'", "fedadam", "Flower's own"]),
    ({"fraction-evaluate": 0.5, "client-val-fraction": 0.0}, ["client-val-fraction"]),
])
def test_bad_config_gives_a_clear_error(bad, words):
    with pytest.raises(ConfigError) as err:
        resolve(bad)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_pyproject_holds_every_key_with_the_schema_default():
    section = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert section == {k.name: k.default for k in KEYS}
    resolve(section)  # and the defaults are valid


def test_nothing_imports_torchvision():
    import subprocess

    code = ("import sys; import server_app.app, client_app.app, strategies, models, feddata, "
            "run_config; assert 'torchvision' not in sys.modules, 'torchvision imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_data_and_model_choices_are_the_codes():
    import feddata
    import models
    from run_config import schema

    assert tuple(feddata.DATASET_BY_NAME) == feddata.DATASETS
    assert schema.DATASETS == (*feddata.DATASETS, "custom")  # custom: declared by custom-* keys
    assert schema.PARTITIONERS == feddata.PARTITIONERS
    assert schema.AUGMENTATIONS == feddata.AUGMENTATIONS
    assert schema.MODELS == models.MODELS


def test_run_config_and_feddata_import_no_heavy_data_libraries():
    import subprocess

    code = ("import sys; import run_config, feddata, client_app.app; "
            "heavy = [m for m in ('datasets', 'flwr_datasets', 'yaml') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_knob_of_an_unused_part_is_refused_even_when_not_preset_controlled():
    # fedopt-tau is no preset key: set away from its default with a rule that does not read it
    with pytest.raises(ConfigError, match="'fedopt-tau' = 0.1 is a knob of"):
        resolve({"method": "fedavg", "fedopt-tau": 0.1})
    resolve({"method": "fedavg", "fedopt-tau": 1e-3})  # its default: nothing to refuse
    resolve({"method": "fedadam", "fedopt-tau": 0.1})


def removed_key_error(text: str) -> None:
    """The message of a removed key: what became of it and the fix, not a generic unknown key."""
    for words in ("'server-pass' was removed", "PyTorch's now", "Delete the 'server-pass' key"):
        assert words in text, (words, text)
    assert "unknown" not in text, text


def test_a_removed_key_says_it_was_removed_wherever_it_is_given(tmp_path, capsys):
    from run_config import REMOVED_KEYS, load_setup
    from run_config.check import main as check_main

    assert not set(REMOVED_KEYS) & {k.name for k in KEYS}  # removed: no longer a key
    for config in ({"server-pass": "auto"}, {"server-pass": "torch", "lr": 0.1}):
        with pytest.raises(ConfigError) as err:  # --run-config, pyproject: what resolve gets
            resolve(config)
        removed_key_error(str(err.value))
    assert check_main(["--run-config", "server-pass='torch'"]) == 1  # python -m run_config check
    removed_key_error(capsys.readouterr().err)
    setup = tmp_path / "old.yaml"  # a set-up file
    setup.write_text("paper: x\nmethod: fedavg\nfederation: {num-supernodes: 2}\n"
                     "run-config: {server-pass: auto}\nreported: {columns: [a], rows: {}}\n")
    load_setup.cache_clear()
    with pytest.raises(ConfigError) as err:
        resolve({"setup": str(setup)})
    removed_key_error(str(err.value))
    assert "old.yaml" in str(err.value)
    from experiments.sweep import SweepError, load_sweep  # a sweep file

    grid = tmp_path / "grid.yaml"
    grid.write_text("methods: {a: {method: fedacg}}\nrun-config: {server-pass: auto}\n")
    with pytest.raises(SweepError) as err:
        load_sweep(grid)
    removed_key_error(str(err.value))
