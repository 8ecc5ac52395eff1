"""benchmarks/deploy_rounds.py --against floor: the floor ServerApp's round lines read back, the
app's round over the floor's (medians of rounds 2-N, pooled over runs) and the split of the
extra, against hand computations; its arguments; and (slow) the floor app and the app deployed on
one deployment of 2 nodes for 2 rounds (`long`). No timing is asserted."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.deploy_rounds import against, floor_rows, parse_args, repeat_ratios

ROOT = Path(__file__).resolve().parents[1]

LOG = """INFO :      Starting logstream for run_id `1`
floor round 1: 2 replies, 16.5297 s, start 8.9250 s
floor round 2: 2 replies, 5.0000 s, start 2.0000 s
floor round 2: 2 replies, 5.0000 s, start 2.0000 s
floor round 3: 1 replies, 7.5000 s
"""


def test_floor_rows_read_each_round_once_with_the_start_when_reported():
    assert floor_rows(LOG, 3) == [
        {"round": 1, "replies": 2, "seconds": 16.5297, "train-start-seconds": 8.925},
        {"round": 2, "replies": 2, "seconds": 5.0, "train-start-seconds": 2.0},
        {"round": 3, "replies": 1, "seconds": 7.5}]


def test_floor_rows_refuse_a_log_without_every_round():
    with pytest.raises(RuntimeError, match=r"rounds \[1, 2, 3\], not 1-4"):
        floor_rows(LOG, 4)


def test_app_over_floor_is_medians_of_rounds_2_to_n_pooled_and_the_extra_split():
    def app_row(rnd, s, start, load, train, ev):
        return {"round": rnd, "seconds": s, "train-start-seconds": start,
                "train-load-seconds": load, "train-seconds": train, "eval-seconds": ev}

    # two runs of 3 rounds; round 0 (the initial evaluation) and round 1 are left out
    app = [{"round": 0, "seconds": 0.1}, app_row(1, 90.0, 9.0, 9.0, 9.0, 9.0),
           app_row(2, 10.0, 3.0, 0.1, 2.0, 0.2), app_row(3, 12.0, 3.5, 0.3, 2.5, 0.1),
           {"round": 0, "seconds": 0.1}, app_row(1, 80.0, 9.0, 9.0, 9.0, 9.0),
           app_row(2, 11.0, 4.0, 0.2, 3.0, 0.3), app_row(3, 30.0, 3.2, 0.2, 1.0, 0.2)]
    floor = [{"round": 1, "seconds": 50.0, "train-start-seconds": 9.0},
             {"round": 2, "seconds": 8.0, "train-start-seconds": 2.0},
             {"round": 3, "seconds": 9.0},  # a round whose ClientApps report no start: 0
             {"round": 1, "seconds": 40.0}, {"round": 2, "seconds": 7.0,
                                             "train-start-seconds": 3.0}]
    out = against(app, floor)
    # app rounds 2-3: 10, 12, 11, 30 -> median 11.5; floor rounds 2-3: 8, 9, 7 -> 8
    assert out["app-round"] == pytest.approx(11.5) and out["floor-round"] == pytest.approx(8.0)
    assert out["ratio"] == pytest.approx(11.5 / 8.0)
    assert out["extra"] == pytest.approx(3.5)
    # starts: app 3.0, 3.5, 4.0, 3.2 -> 3.35; floor 2.0, 0.0, 3.0 -> 2.0
    assert out["app-start"] == pytest.approx(3.35) and out["floor-start"] == pytest.approx(2.0)
    assert out["extra-start"] == pytest.approx(1.35)
    assert out["load"] == pytest.approx(0.2)  # 0.1, 0.3, 0.2, 0.2
    assert out["train"] == pytest.approx(2.25)  # 2.0, 2.5, 3.0, 1.0
    assert out["server-eval"] == pytest.approx(0.2)  # 0.2, 0.1, 0.3, 0.2
    assert out["extra-rest"] == pytest.approx(3.5 - 1.35 - 0.2 - 2.25 - 0.2)
    # each repeat on its own: run k of the app against run k of the floor
    assert repeat_ratios(app, floor) == pytest.approx([11.0 / 8.5, 20.5 / 7.0])


def test_app_over_floor_needs_rounds_after_the_first():
    with pytest.raises(ValueError, match="at least 2 rounds"):
        against([{"round": 0, "seconds": 1.0}, {"round": 1, "seconds": 2.0}],
                [{"round": 1, "seconds": 1.0}, {"round": 2, "seconds": 1.0}])


def test_arguments():
    args = parse_args(["--against", "floor", "--nodes", "2", "--rounds", "3", "--repeats", "1",
                       "--also", "local-iterations=1", "--also", "batch-size=8"])
    assert (args.nodes, args.rounds, args.repeats) == ([2], 3, 1)
    assert args.also == ["local-iterations=1", "batch-size=8"] and args.app == (ROOT,)
    twice = ["--against", "floor", "--app", str(ROOT), "--app", str(ROOT / "fileio" / "..")]
    assert parse_args(twice).app == (ROOT, ROOT)  # each app in turn, resolved
    assert parse_args([]).against == "simulation" and parse_args([]).nodes == [2, 3]
    for bad in (["--against", "floor", "--rounds", "1"], ["--against", "floor", "--repeats", "0"],
                ["--nodes", "0"], ["--also", "local-iterations=1"], ["--rounds", "3"],
                ["--against", "nothing"], ["--against", "floor", "--app", "/"],
                ["--app", str(ROOT), "--app", str(ROOT)]):
        with pytest.raises(SystemExit):
            parse_args(bad)


@pytest.mark.slow
@pytest.mark.long  # (75 s; the tests above pin its arithmetic, test_deployment.py a
# deployment in the default run)
def test_floor_and_app_deployed_on_the_same_two_nodes(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.deploy_rounds", "--against", "floor", "--nodes", "2",
         "--rounds", "2", "--repeats", "1", "--json", str(tmp_path / "f.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (res,) = json.loads((tmp_path / "f.json").read_text())
    assert [(r["round"], r["replies"]) for r in res["floor-rows"]] == [(1, 2), (2, 2)]
    assert all(r["train-start-seconds"] > 0 for r in res["floor-rows"])  # deployed ClientApps
    (app,) = res["apps"]
    assert app["run-config"] == "num-server-rounds=2 fraction-train=1.0"
    assert [r["round"] for r in app["rows"]] == [0, 1, 2]
    assert app["ratio"] == pytest.approx(app["app-round"] / app["floor-round"])
    assert "| 2 | `num-server-rounds=2 fraction-train=1.0` |" in out.stdout


def test_the_floor_reads_its_process_age_with_the_apps_one_reader(tmp_path):
    """One reader of a ClientApp's process age, client_app/process_age.py: the app's ClientApp
    imports it, and the floor app's package (benchmarks.sim_floor.floor_app) gets a copy of the
    file, so the floor app still imports nothing of the project: its modules import the standard
    library, torch, flwr and its own package only, and importing its ClientApp loads no module
    of the project."""
    import ast

    import client_app.app as ours
    import fedacg_gc
    from benchmarks.sim_floor import floor_app
    from client_app import process_age

    assert ours.process_seconds is process_age.process_seconds
    assert ours.deployed_process is process_age.deployed_process
    package = floor_app(tmp_path / "app", 2) / "floor_app"
    assert (package / "process_age.py").read_bytes() == \
        (ROOT / "client_app" / "process_age.py").read_bytes()
    outside = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            outside += [f"{path.name}: {n}" for n in names if n.split(".")[0] not in
                        ("torch", "flwr") and n.split(".")[0] not in sys.stdlib_module_names]
    assert outside == []
    project = sorted({*fedacg_gc.PACKAGES, "fedacg_gc", "benchmarks", "experiments", "pages"})
    probe = (f"import sys; sys.path.insert(0, {str(package.parent)!r})\n"
             "import floor_app.client_app as c\n"
             f"print([m for m in sys.modules if m.split('.')[0] in {project!r}], "
             "c.process_seconds() > 0, c.deployed_process())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[]", "True", "False"]
