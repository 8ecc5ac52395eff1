"""Paper-style numbers, table and plots (the `reporting` package, no Flower), dynamic clients."""

import matplotlib.image
import numpy as np
import pytest

from strategies.population import ClientPopulation
from reporting.metrics import ema_series, rounds_to_target, run_summary, value_at_round
from reporting.plots import plot_ema_curves, plot_run
from reporting.table import MethodRuns, comparison, format_acc, format_rounds
from run_config import ConfigError, acc_at_rounds, resolve, target_accs


def rows_of(accs, start=1, step=1, mb=None):
    """Per-round rows as the RunRecorder writes them (EMA from ema_series)."""
    rounds = list(range(start, start + step * len(accs), step))
    rows = [{"round": 0, "test-acc": 0.1}]
    for i, (r, a, e) in enumerate(zip(rounds, accs, ema_series(accs))):
        row = {"round": r, "test-acc": a, "ema-acc": e, "seconds": 1.5}
        if mb is not None:
            row.update({"bytes-down-total": mb * (i + 1), "bytes-up-total": 2 * mb * (i + 1)})
        rows.append(row)
    return rows


def test_ema_by_hand():
    # 0.5; 0.9*0.5 + 0.1*0.7 = 0.52; 0.9*0.52 + 0.1*0.9 = 0.558; 0.9*0.558 + 0.09 = 0.5922
    assert ema_series([0.5, 0.7, 0.9, 0.9]) == pytest.approx([0.5, 0.52, 0.558, 0.5922])
    assert ema_series([]) == []


def test_rounds_to_target_and_t_plus():
    rounds, ema = [1, 2, 3, 4], ema_series([0.5, 0.7, 0.9, 0.9])
    assert rounds_to_target(rounds, ema, 50, 4) == 1
    assert rounds_to_target(rounds, ema, 52, 4) == 2  # reached exactly (0.52 within rounding)
    assert rounds_to_target(rounds, ema, 55, 4) == 3
    assert rounds_to_target(rounds, ema, 59.22, 4) == 4
    assert rounds_to_target(rounds, ema, 60, 4) == "4+"  # never reached within T = 4
    assert rounds_to_target(rounds[:2], ema[:2], 55, 1000) == "1000+"


def test_value_at_round_with_eval_every():
    rounds, values = [2, 4, 5], [0.3, 0.5, 0.6]
    assert value_at_round(rounds, values, 1) is None  # nothing measured yet
    assert value_at_round(rounds, values, 2) == 0.3
    assert value_at_round(rounds, values, 3) == 0.3  # the last measured at or before round 3
    assert value_at_round(rounds, values, 5) == 0.6
    assert value_at_round(rounds, values, 6) is None  # the run did not get there


def test_summary_of_a_known_series():
    rows = rows_of([0.5, 0.7, 0.9, 0.9], mb=1000)
    s = run_summary(rows, acc_at_rounds=[2, 4, 8], target_accs=[55, 60], total_rounds=4)
    assert s["rounds"] == 4
    assert s["acc-at-round"] == {"2": pytest.approx(0.52), "4": pytest.approx(0.5922), "8": None}
    assert s["rounds-to-acc"] == {"55": 3, "60": "4+"}
    assert (s["final-test-acc"], s["final-ema-acc"]) == (0.9, pytest.approx(0.5922))
    assert (s["bytes-down-total"], s["bytes-up-total"], s["bytes-total"]) == (4000, 8000, 12000)
    assert s["train-seconds"] == pytest.approx(6.0)
    assert s["last10-acc"] == pytest.approx((0.5 + 0.7 + 0.9 + 0.9) / 4)  # (4 rounds of 10)


def test_the_last_rounds_mean_counts_the_rounds_measured_in_the_last_10():
    """Rounds 1 .. 15, test-acc measured every 2nd round and at the last: the last 10 rounds
    are 6 .. 15, measured at 6, 8, 10, 12, 14, 15."""
    from reporting.metrics import mean_of_last

    rows = [{"round": 0, "test-acc": 0.05}] + [
        {"round": r, **({"test-acc": r / 100} if r % 2 == 0 or r == 15 else {})}
        for r in range(1, 16)]
    assert mean_of_last(rows, "test-acc") == pytest.approx(
        (0.06 + 0.08 + 0.10 + 0.12 + 0.14 + 0.15) / 6)
    assert mean_of_last(rows[:4], "test-acc") == pytest.approx(0.02)  # rounds 1-3: only 2
    assert mean_of_last(rows[:1], "test-acc") is None  # round 0 alone: nothing trained
    assert mean_of_last(rows, "fed-acc") is None


def test_table_cells():
    assert format_acc([0.80, 0.82]) == "81.00 ± 1.41"  # sample std of 80, 82
    assert format_acc([0.8]) == "80.00"
    assert format_acc([0.8, None]) == "80.00 (1/2)"
    assert format_acc([None, None]) == "-"
    assert format_rounds([10, 14], 100) == "12 ± 2.8"  # sample std of 10, 14 = 2.83
    assert format_rounds([10, 13], 100) == "11.5 ± 2.1"
    assert format_rounds(["100+", "100+"], 100) == "100+"
    assert format_rounds([40, "100+"], 100) == "70+ (1/2 reached)"  # lower bound, unreached = T


def test_comparison_table_one_row_per_method():
    a = run_summary(rows_of([0.5, 0.7, 0.9, 0.9], mb=1e5), acc_at_rounds=[2, 4],
                    target_accs=[55, 60], total_rounds=4)
    b = run_summary(rows_of([0.6, 0.8, 0.9, 0.9], mb=1e5), acc_at_rounds=[2, 4],
                    target_accs=[55, 60], total_rounds=4)
    md, csv = comparison([MethodRuns("FedAvg", [a, a]), MethodRuns("FedACG", [a, b])], [2, 4],
                         [55, 60])
    lines = md.strip().splitlines()
    assert lines[0] == ("| Method | Last 10R (%) | Final acc. (%) | Acc. at 2R (%) "
                        "| Acc. at 4R (%) | Rounds to 55% | Rounds to 60% | MB per round "
                        "| Seeds |")
    # last 10R: the mean of the 4 rounds there are (a: 0.75; b: 0.8 -> 77.5 ± sqrt(12.5));
    # final: the last round's test accuracy (0.9 for every seed), not its EMA
    assert lines[2] == ("| FedAvg | 75.00 ± 0.00 | 90.00 ± 0.00 | 52.00 ± 0.00 | 59.22 ± 0.00 "
                        "| 3 ± 0 | 4+ | 0.3 | 2 |")
    # b: EMA 0.6, 0.62, 0.648, 0.6732 -> 55% and 60% at round 1; a: 55% at 3, 60% never (4+)
    # 0.3 MB per round: (1e5 down + 2e5 up) bytes
    assert lines[3].startswith("| FedACG | 77.50 ± 3.54 | 90.00 ± 0.00 | 57.00 ± 7.07 "
                               "| 63.27 ± 5.73 | 2 ± 1.4 | 2.5+ (1/2 reached) |")
    assert len(lines) == 4
    assert csv.splitlines()[0] == ("Method,Last 10R (%),Final acc. (%),Acc. at 2R (%),"
                                   "Acc. at 4R (%),Rounds to 55%,Rounds to 60%,MB per round,"
                                   "Seeds")
    two = comparison([MethodRuns("FedAvg", [a], "iid"), MethodRuns("FedAvg", [b], "dir0.3")], [2],
                     [55])
    assert "### iid" in two[0] and "### dir0.3" in two[0]
    assert two[1].splitlines()[0].startswith("Setting,Method,")
    assert two[1].splitlines()[2].startswith("dir0.3,FedAvg,")


def assert_plot(path, size=(400, 640)):
    """A PNG of the expected size that is not a blank canvas."""
    assert path.stat().st_size > 5000
    img = matplotlib.image.imread(path)
    assert img.shape[:2] == size
    rgb = img[..., :3]
    assert rgb.var() > 1e-3  # not one colour
    assert (rgb.std(axis=2) > 0.1).mean() > 0.002  # some coloured (non-grey) pixels: the curves


def test_run_and_sweep_plots_are_real_images(tmp_path):
    rows = rows_of([0.3, 0.5, 0.6, 0.8, 0.85], mb=1e6)
    paths = plot_run(rows, tmp_path, title="fedacg")
    assert [p.name for p in paths] == ["accuracy.png", "accuracy_vs_bytes.png"]
    for p in paths:
        assert_plot(p)
    curves = {"FedAvg": [([1, 2, 3], [0.2, 0.3, 0.4]), ([1, 2, 3], [0.25, 0.35, 0.45])],
              "FedACG": [([1, 2, 3], [0.3, 0.5, 0.6])]}
    assert_plot(plot_ema_curves(curves, tmp_path / "ema.png", title="t", target_accs=[50]))
    blank = tmp_path / "blank.png"
    from matplotlib.figure import Figure

    Figure(figsize=(6.4, 4.0), dpi=100).savefig(blank)
    with pytest.raises(AssertionError):
        assert_plot(blank)  # the check can fail


def test_the_label_plot_counts_each_clients_labels_and_draws_them(tmp_path):
    from feddata import DataSettings, load_partition
    from feddata.summary import label_counts
    from reporting.plots import plot_label_distribution

    cfg = DataSettings.from_config(
        resolve({"partitioner": "dirichlet-balanced", "dirichlet-alpha": 0.3, "seed": 2}))
    names, counts = label_counts(cfg, 7, max_partitions=5)
    assert names == [str(d) for d in range(10)]  # digits' ClassLabel: every class, in order
    expected = [[int(np.sum(np.asarray(load_partition(cfg, i, 7)["label"]) == j))
                 for j in range(10)] for i in range(5)]  # the first 5 of the 7, the plain way
    assert counts.tolist() == expected
    few = plot_label_distribution(counts, names, tmp_path / "few.png", title="t")
    many = plot_label_distribution(np.tile(counts, (12, 1)), names, tmp_path / "many.png")
    for path in (few, many):
        img = matplotlib.image.imread(path)
        assert img[..., :3].var() > 1e-3 and (img[..., :3].std(axis=2) > 0.1).mean() > 0.05
    assert matplotlib.image.imread(many).shape[1] > matplotlib.image.imread(few).shape[1]


def test_labels_without_class_names_are_the_values_found(tmp_path):
    import hubformats
    from feddata import DataSettings, load_partition
    from feddata.summary import label_counts

    path = hubformats.celeba(tmp_path, np.random.default_rng(0))  # Smiling: a bool column
    cfg = DataSettings.from_config(
        resolve({"dataset": "celeba", "dataset-path": str(path), "partitioner": "natural"}))
    names, counts = label_counts(cfg, 3)
    assert names == ["False", "True"]
    assert counts.tolist() == [[int(np.sum(~np.asarray(p))), int(np.sum(np.asarray(p)))]
                               for p in (load_partition(cfg, i, 3)["Smiling"] for i in range(3))]


def test_report_keys_are_validated():
    cfg = resolve({"num-server-rounds": 1000})
    assert acc_at_rounds(cfg) == [500, 1000] and target_accs(cfg) == [80.0, 90.0]
    cfg = resolve({"acc-at-rounds": "1000, 500", "target-accs": "38,30"})
    assert acc_at_rounds(cfg) == [500, 1000] and target_accs(cfg) == [30.0, 38.0]
    for bad, words in [({"acc-at-rounds": "500R"}, ["'acc-at-rounds'", "rounds >= 1"]),
                       ({"acc-at-rounds": "0"}, ["'acc-at-rounds'"]),
                       ({"target-accs": "0.8,120"}, ["'target-accs'", "(0, 100]"]),
                       ({"dynamic-replace-prob": 0.5, "method": "fedyogi"},
                        ["'dynamic-replace-prob'", "fedyogi"]),
                       ({"dynamic-replace-prob": 0.5, "dynamic-pool-factor": 1.0},
                        ["'dynamic-pool-factor'"]),
                       ({"dynamic-replace-prob": 1.5}, ["'dynamic-replace-prob'", "[0, 1]"])]:
        with pytest.raises(ConfigError) as err:
            resolve(bad)
        for w in words:
            assert w in str(err.value), (w, str(err.value))


def test_population_replaces_clients_at_the_configured_rate():
    n, p, k = 400, 0.3, 5
    pop = ClientPopulation(replace_prob=p, replace_every=k, pool_factor=2.0, seed=3)
    assert pop.pool_size(n) == 800
    first = pop.assignment(1, n)
    assert first == list(range(n))  # slot i starts with partition i
    changed = []
    for stage in range(1, 9):
        start = 1 + stage * k
        before, now = pop.assignment(start - 1, n), pop.assignment(start, n)
        assert pop.assignment(start + k - 1, n) == now  # fixed within a stage
        assert len(set(now)) == n and all(0 <= q < 800 for q in now)  # distinct, from the pool
        new = [i for i in range(n) if now[i] != before[i]]
        assert all(now[i] not in before for i in new)  # a fresh client: nobody held it before
        assert pop.replaced(start, n) == len(new)
        changed.append(len(new) / n)
    # Binomial(400, 0.3) per stage: mean 0.3, sd 0.023; over 8 stages sd 0.008
    assert all(0.2 < c < 0.4 for c in changed), changed
    assert abs(np.mean(changed) - p) < 0.03, changed
    again = ClientPopulation(p, k, 2.0, seed=3)
    assert again.assignment(26, n) == pop.assignment(26, n)  # seeded: any query order
    assert ClientPopulation(p, k, 2.0, seed=4).assignment(26, n) != pop.assignment(26, n)
    off = ClientPopulation(0.0, 1, 2.0)
    assert off.assignment(50, 10) == list(range(10))
    with pytest.raises(ValueError):
        pop.assignment(3, n + 1)


def test_reporting_imports_neither_flower_nor_torch():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; import reporting.metrics, reporting.table, reporting.plots, "
            "experiments.sweep, experiments.superlink; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('flwr', 'torch')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                   check=True)


def test_a_diverged_seed_is_named_not_dropped():
    """GC-Fed writes a method that diverged "Failed": the final accuracy is the other seeds'
    mean (sample std by hand: 0.8 and 0.7 -> 75.00 +- 7.07) with how many failed."""
    from reporting.table import format_final

    ok = [{"final-test-acc": 0.8}, {"final-test-acc": 0.7}]
    diverged = {"final-test-acc": 0.1, "diverged": True}
    assert format_final(ok) == "75.00 ± 7.07"
    assert format_final(ok + [diverged]) == "75.00 ± 7.07 (1/3 failed)"
    assert format_final([ok[0], diverged]) == "80.00 (1/2 failed)"
    assert format_final([diverged, diverged]) == "Failed (2/2)"
