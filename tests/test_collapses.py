"""Combinations a results page saw collapse on every seed (run_config/collapses.py): which cells
make an entry (by hand: every seed, two or more, diverged or under 1.5 / classes), the warning
a run of the same combination gets from `python -m run_config check` and the ServerApp, and none
for another combination or a lone seed."""

import json

import pytest

from run_config import resolve
from run_config.collapses import collapse_warnings, combination, entries, load, replace_page

SETUP = "gcfed-t5-fmnist-5of100-lda0.1"


def _cell(method, seed, last10, diverged=False):
    return {"setting": "s", "method": method, "seed": seed,
            "summary": {"last10-acc": last10, "diverged": diverged}}


def test_a_combination_is_an_entry_when_every_seed_collapsed():
    cells = [_cell("A", 0, None, True), _cell("A", 1, None, True), _cell("A", 2, None, True),
             _cell("B", 0, 0.1499, False), _cell("B", 1, None, True),  # at chance + diverged
             _cell("C", 0, 0.15, False), _cell("C", 1, None, True),  # 0.15 is not under 1.5/10
             _cell("D", 0, None, True),  # one seed only
             _cell("E", 0, 0.05, False), _cell("E", 1, 0.9, False)]
    configs = {("s", m): {"method": m.lower()} for m in "ABCDE"}
    got = entries("docs/p.md", cells, configs, {("s", m): 10 for m in "ABCDE"})
    assert [(e["cell"], e["seeds"], e["diverged"], e["at-chance"]) for e in got] == [
        ("s/A", 3, 3, 0), ("s/B", 2, 1, 1)]
    assert got[0]["page"] == "docs/p.md"
    # with 5 classes 1.5 / 5 = 0.3: C's 0.15 is at chance
    five = entries("docs/p.md", cells, configs, {("s", m): 5 for m in "ABCDE"})
    assert [e["cell"] for e in five] == ["s/A", "s/B", "s/C"]


def test_a_run_of_the_same_combination_is_warned_whatever_its_seed_or_folder(tmp_path):
    path = tmp_path / "collapses.json"
    cell = resolve({"setup": SETUP, "method": "fedcm", "seed": 0, "out-dir": "/tmp/x",
                    "dataset-path": "/usr/share/datasets/fashion-mnist"})
    entry = {"page": "docs/fashion-mnist.md", "cell": "5of100-lda0.1/FedCM", "seeds": 3,
             "diverged": 3, "at-chance": 0, "config": combination(cell)}
    replace_page("docs/fashion-mnist.md", [entry], path)
    assert "seed" not in entry["config"] and "lam" in entry["config"]
    mine = resolve({"setup": SETUP, "method": "fedcm", "seed": 7, "num-server-rounds": 50})
    (line,) = collapse_warnings(mine, path)
    assert line.startswith("this combination diverged on 3 of 3 seeds in "
                           "docs/fashion-mnist.md (its cell 5of100-lda0.1/FedCM)")
    assert "ended at chance" not in line  # (none did: not said)
    for other in ({"lr": 0.02}, {"method": "fedavg"}, {"setup": ""}):
        assert collapse_warnings(resolve({"setup": SETUP, "method": "fedcm", **other}),
                                 path) == []
    # another page's entries are kept when a page writes its own
    replace_page("docs/other.md", [], path)
    assert [e["page"] for e in load(path)] == ["docs/fashion-mnist.md"]
    replace_page("docs/fashion-mnist.md", [], path)
    assert load(path) == [] and collapse_warnings(mine, path) == []


def test_the_check_command_prints_the_warning_and_still_passes(tmp_path, monkeypatch, capsys):
    import run_config.collapses as collapses
    from run_config.check import main

    path = tmp_path / "collapses.json"
    cfg = resolve({"setup": SETUP, "method": "fedcm"})
    replace_page("docs/p.md", [{"page": "docs/p.md", "cell": "x/FedCM", "seeds": 2,
                                "diverged": 0, "at-chance": 2,
                                "config": combination(cfg)}], path)
    monkeypatch.setattr(collapses, "COLLAPSES", path)
    assert main(["--run-config", f"setup='{SETUP}' method='fedcm' seed=3",
                 "--run-config", f"out-dir='{tmp_path}'"]) == 0
    err = capsys.readouterr().err
    assert "warning: this combination ended at chance on 2 of 2 seeds in docs/p.md" in err
    assert "diverged on" not in err
    assert main(["--run-config", f"setup='{SETUP}' method='fedavg'",
                 "--run-config", f"out-dir='{tmp_path}'"]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("text", ["[]", '{"collapses": {}}', '{"collapses": [{"page": 1}]}',
                                  "not json"])
def test_a_damaged_list_gives_one_line_and_never_stops_a_run(tmp_path, text):
    path = tmp_path / "collapses.json"
    path.write_text(text)
    (line,) = collapse_warnings(resolve({}), path)
    assert "could not be read" in line


def test_the_shipped_list_is_one_the_pages_wrote():
    known = load()
    assert isinstance(known, list)
    for e in known:
        assert e["page"].startswith("docs/") and set(e) == {
            "page", "cell", "seeds", "diverged", "at-chance", "config"}
    assert json.loads(json.dumps(known)) == known


def test_the_serverapp_says_it_with_its_first_lines(tmp_path, monkeypatch, caplog):
    import logging

    from flwr.app import Context, RecordDict

    import run_config.collapses as collapses
    import server_app.app as server
    from fakegrid import FakeGrid, client_app_handler

    rc = {"method": "fedavg", "num-server-rounds": 1, "out-dir": str(tmp_path),
          "run-name": "run", "fraction-train": 0.5, "local-iterations": 1}
    path = tmp_path / "collapses.json"
    replace_page("docs/p.md", [{"page": "docs/p.md", "cell": "x/FedAvg", "seeds": 3,
                                "diverged": 3, "at-chance": 0,
                                "config": combination(resolve({**rc, "seed": 5}))}], path)
    monkeypatch.setattr(collapses, "COLLAPSES", path)
    caplog.set_level(logging.WARNING)
    server.main(FakeGrid(4, client_app_handler(rc, 4)),
                Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    said = [r.getMessage() for r in caplog.records if "this combination" in r.getMessage()]
    assert said == ["this combination diverged on 3 of 3 seeds in docs/p.md (its cell "
                    "x/FedAvg): read the page before spending a run on it"]
