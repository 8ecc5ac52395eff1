"""Pins of the server round (docs/algorithms.md#server-round) on fixed client replies, each against
a hand computation: uniform weights with unequal sizes, global GC with gc-vectors, non-float
buffers from the first good reply, and max-update-norm measured from phi."""


import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord

import fakegrid
from strategies.round_loop import NothingLearned
from pins_helpers import (broadcast_of, config_of, error_reply, is_evaluate, is_query, is_train,
                          lookahead_strategy, make_reply, metrics_reply, node_wait_timeout_error,
                          partition_reply, run_strategy, run_strategy_result,
                          strategy_from_config, strategy_state, virtual_node_wait_clock)

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots

SIZES = [10, 30, 25, 5]  # unequal on purpose


def states(seed: int, n: int, scale: float = 1.0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"w": scale * torch.randn(3, 4, generator=g), "b": scale * torch.randn(3, generator=g)}
            for _ in range(n)]


def answering(models: list[dict], sizes: list[int], seen: list | None = None):
    """Node i answers the partition query with i, and a train instruction with models[i]."""

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, len(models))
        if seen is not None:
            seen.append((config_of(msg)["server-round"], i, broadcast_of(msg)))
        return make_reply(models[i], sizes[i])

    return handler


@pytest.mark.parametrize("aggregation", ["uniform", "examples"])
def test_client_weights_with_unequal_sizes(aggregation):
    init, models = states(0, 1)[0], states(1, 4)
    strategy = strategy_from_config({"method": "fedavg", "aggregation": aggregation,
                                     "fraction-train": 1.0, "min-train-nodes": 4})
    theta, _ = run_strategy(strategy, answering(models, SIZES), init, rounds=1, num_nodes=4)
    # lam = 0, eta = 1: theta_1 = sum_i w_i * w_i_K; uniform: 1/4 each, examples: n_i / 70
    weights = [0.25] * 4 if aggregation == "uniform" else [10 / 70, 30 / 70, 25 / 70, 5 / 70]
    for k in init:
        want = sum(w * m[k] for w, m in zip(weights, models))
        assert torch.allclose(theta[k], want, atol=1e-6, rtol=0), k


@pytest.mark.parametrize("vectors", ["center", "skip"])
@pytest.mark.parametrize("global_gc", ["all", "classifier"])
def test_global_gc_and_gc_vectors_on_the_server(vectors, global_gc):
    """The server step with global GC is P(d) on the configured tensors; 1-D ones only with
    gc-vectors = 'center'. (fedavg, uniform weights: d = mean_i(w_i) - theta.)"""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))  # 0.*: features
    model.classifier_names = ("1.weight", "1.bias")
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(5)
    models = [{k: v + torch.randn(v.shape, generator=g) for k, v in init.items()}
              for _ in range(4)]
    strategy = strategy_from_config({"method": "fedavg", "aggregation": "uniform",
                                     "global-gc": global_gc, "gc-vectors": vectors,
                                     "fraction-train": 1.0, "min-train-nodes": 4}, model)
    theta, _ = run_strategy(strategy, answering(models, SIZES), init, rounds=1, num_nodes=4)
    for k in init:
        d = sum(m[k] for m in models) / 4 - init[k]
        centred = global_gc == "all" or k.startswith("1.")
        if centred and d.dim() == 2:
            d = d - d.mean(dim=1, keepdim=True)
        elif centred and vectors == "center":
            d = d - d.mean()
        assert torch.allclose(theta[k] - init[k], d, atol=1e-6, rtol=0), k


def test_non_float_buffers_come_from_the_first_good_reply():
    """Partition 0's reply is bad (NaN) and dropped; the integer buffer is then taken from the
    first good reply in partition order (partition 1), never averaged; floats are averaged over
    the good replies."""
    init = {"w": torch.zeros(2), "count": torch.tensor([0, 0])}
    models = [{"w": torch.tensor([float("nan"), 0.0]), "count": torch.tensor([100, 100])},
              {"w": torch.tensor([1.0, 2.0]), "count": torch.tensor([11, 21])},
              {"w": torch.tensor([3.0, 4.0]), "count": torch.tensor([12, 22])},
              {"w": torch.tensor([5.0, 9.0]), "count": torch.tensor([13, 23])}]
    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=4, identify_nodes=True,
                                  aggregation="uniform", seed=3)
    theta, grid = run_strategy(strategy, answering(models, [1, 1, 1, 1]), init, rounds=1,
                               num_nodes=4)
    sent = [grid.node_ids.index(n) for n in grid.sent[0]]
    assert sent != sorted(sent)  # replies arrive out of partition order
    assert theta["count"].tolist() == [11, 21]
    assert theta["count"].dtype == torch.int64
    assert theta["w"].tolist() == [3.0, 5.0]
    assert set(strategy_state(strategy)["m"]) == {"w"}  # no momentum for integer buffers


def test_max_update_norm_is_measured_from_phi_not_theta():
    """FedACG, lam = 0.5, eta = 10. Round 1 (phi = theta = 0): replies +0.1 and +0.3 (norms
    under the limit 1): d = 0.2, m1 = 2, theta1 = 2, so phi2 = theta1 + 0.5 * m1 = 3.
    Round 2: node 0 answers phi + 0.1 (0.1 from phi, 1.1 from theta: kept), node 1 answers
    theta1 - 0.1 (1.1 from phi: dropped, although only 0.1 from theta).
    Only node 0 counts: d = 0.1, m2 = 0.5 * 2 + 10 * 0.1 = 2, theta2 = 4."""
    seen = []

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, 2)
        rnd, phi = config_of(msg)["server-round"], broadcast_of(msg)["w"]
        seen.append((rnd, i, phi.clone()))
        if rnd == 1:
            return make_reply({"w": phi + (0.1 if i == 0 else 0.3)}, 1)
        return make_reply({"w": phi + 0.1 if i == 0 else phi - 1.1}, 1)

    strategy = lookahead_strategy(lam=0.5, eta=10.0, lookahead=True, fraction_train=1.0,
                                  min_train_nodes=2, aggregation="uniform", max_update_norm=1.0)
    theta, _ = run_strategy(strategy, handler, {"w": torch.zeros(1)}, rounds=2, num_nodes=2)
    assert [p.item() for r, _, p in seen if r == 2] == pytest.approx([3.0, 3.0])
    assert theta["w"].item() == pytest.approx(4.0)
    assert strategy_state(strategy)["m"]["w"].item() == pytest.approx(2.0)


def test_zero_examples_skip_an_examples_weighted_round_but_not_a_uniform_one():
    init, models = states(0, 1)[0], states(1, 2)
    for aggregation in ("examples", "uniform"):
        strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=2,
                                      aggregation=aggregation)
        seen = []
        strategy.round_metrics_fn = lambda r, m: seen.append(dict(m))
        if aggregation == "examples":  # no weights to take: the round is skipped, theta kept,
            with pytest.raises(NothingLearned):  # and a run that aggregated nothing fails
                run_strategy_result(strategy, answering(models, [0, 0]), init, rounds=1,
                                    num_nodes=2)
            theta = dict(strategy.rule.theta)
            assert all(torch.equal(theta[k], init[k]) for k in init)
            assert seen[0]["skipped"] == 1
            continue
        result = run_strategy_result(strategy, answering(models, [0, 0]), init, rounds=1,
                                     num_nodes=2)
        theta = dict(result.arrays.to_torch_state_dict())
        assert all(torch.allclose(theta[k], (models[0][k] + models[1][k]) / 2, atol=1e-6)
                   for k in init)
        assert result.train_metrics_clientapp[1]["skipped"] == 0


def test_result_holds_every_rounds_metrics_and_round_zero_evaluation():
    """Flower's Strategy.start contract: the Result carries the final arrays, the aggregated
    train metrics (example-weighted) and the server-side evaluation of every round, round 0
    (the initial model) included."""
    init, models = states(0, 1)[0], states(1, 2)
    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=2)
    seen = []

    def evaluate_fn(rnd, arrays):
        seen.append(rnd)
        return MetricRecord({"w-sum": float(arrays.to_torch_state_dict()["w"].sum())})

    handler = answering(models, [1, 3])

    def with_loss(i, msg):
        out = handler(i, msg)
        if is_train(msg):
            out["metrics"]["train-loss"] = float(i + 1)
        return out

    grid = fakegrid.FakeGrid(2, with_loss)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=2,
                            evaluate_fn=evaluate_fn)
    assert seen == [0, 1, 2]
    assert sorted(result.evaluate_metrics_serverapp) == [0, 1, 2]
    assert result.evaluate_metrics_serverapp[0]["w-sum"] == pytest.approx(float(init["w"].sum()))
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    assert result.train_metrics_clientapp[2]["train-loss"] == pytest.approx((1 * 1 + 2 * 3) / 4)
    final = dict(result.arrays.to_torch_state_dict())
    assert result.evaluate_metrics_serverapp[2]["w-sum"] == pytest.approx(float(final["w"].sum()))


def test_federated_evaluation_drops_bad_replies_and_weights_the_rest():
    """fraction-evaluate 1: node 0 fails, node 1 sends a negative example count, node 4 a NaN
    one; nodes 2 and 3 (10 and 30 examples, accuracy 0.5 and 0.9) give 0.8 weighted by
    examples. Every evaluate instruction carries the evaluate config and the round."""
    init, models = states(0, 1)[0], states(1, 5)
    train = answering(models, SIZES + [7])
    configs = []

    def handler(i, msg):
        if not is_evaluate(msg):
            return train(i, msg)
        configs.append(config_of(msg))
        if i == 0:
            return error_reply(msg)
        n, acc = {1: (-5, 0.0), 2: (10, 0.5), 3: (30, 0.9), 4: (float("nan"), 0.0)}[i]
        return metrics_reply({"num-examples": n, "eval-acc": acc})

    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=5, seed=1)
    strategy.fraction_evaluate, strategy.min_evaluate_nodes = 1.0, 5
    result = run_strategy_result(strategy, handler, init, rounds=2, num_nodes=5,
                                 evaluate_config={"k": 7})
    assert result.evaluate_metrics_clientapp[1]["eval-acc"] == pytest.approx(0.8)
    assert sorted((c["server-round"], c["k"]) for c in configs) == [(1, 7)] * 5 + [(2, 7)] * 5


def test_nodes_are_asked_for_their_partition_once():
    strategy = strategy_from_config({"method": "fedavg", "fraction-train": 0.5,
                                     "min-train-nodes": 2})
    result_grid = fakegrid.FakeGrid(6, answering(states(1, 6), [1] * 6))
    run_strategy_result(strategy, None, states(0, 1)[0], rounds=3, num_nodes=6, grid=result_grid)
    # The first node is asked alone (it says whether nodes are simulated: these are not), then
    # every other node once; no node is asked again in later rounds.
    first, *rest = sorted(result_grid.node_ids)
    assert [sorted(q) for q in result_grid.queries] == [[first], rest]


def test_too_few_nodes_fail_after_node_wait_timeout():
    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=5, node_wait_timeout=0.3)
    with pytest.raises(node_wait_timeout_error(), match="only 3 node"):
        run_strategy(strategy, answering(states(1, 3), [1, 1, 1]), states(0, 1)[0], rounds=1,
                     num_nodes=3)


def test_an_update_exactly_at_max_update_norm_is_kept():
    """The limit drops updates whose norm exceeds it: ||(1, 0)|| = 1 is kept under
    max-update-norm 1, ||(0, 1.5)|| is dropped."""
    init = {"w": torch.zeros(2)}
    models = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1.5])}]
    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=2, aggregation="uniform",
                                  max_update_norm=1.0)
    theta, _ = run_strategy(strategy, answering(models, [1, 1]), init, rounds=1, num_nodes=2)
    assert theta["w"].tolist() == [1.0, 0.0]


@pytest.mark.parametrize("method", ["fedyogi", "fedavg"])
def test_reply_screening_settings_reach_every_strategy(method):
    """max-update-norm and min-train-clients from the run config, for our strategy and for
    Flower's baselines: with a limit of 1, node 1's update (norm 5) is dropped; with
    min-train-clients 2 the round is then skipped."""
    init = {"w": torch.zeros(2), "b": torch.zeros(3)}
    models = [{"w": torch.full((2,), 0.1), "b": torch.full((3,), 0.1)},
              {"w": torch.tensor([3.0, 4.0]), "b": torch.zeros(3)}]
    for min_clients, skipped in ((1, 0), (2, 1)):
        strategy = strategy_from_config(
            {"method": method, "fraction-train": 1.0, "min-train-nodes": 2,
             "max-update-norm": 1.0, "min-train-clients": min_clients},
            model=torch.nn.Linear(2, 3, bias=False))
        seen = []
        strategy.round_metrics_fn = lambda r, m: seen.append(dict(m))
        try:
            run_strategy_result(strategy, answering(models, [1, 1]), init, rounds=1, num_nodes=2)
        except NothingLearned:  # (the skipped round was the run's only one)
            assert skipped
        metrics = seen[0]
        assert (metrics["dropped"], metrics["dropped-norm"], metrics["skipped"]) == \
            (1, 1, skipped), metrics


@pytest.mark.parametrize("method", ["fedyogi", "fedavg"])
def test_every_strategy_gives_up_waiting_for_nodes_after_node_wait_timeout(method, monkeypatch):
    """Flower's own sampling waits for nodes forever; ours, for Flower's baselines too, fails
    after node-wait-timeout (here 30 s, not the default 120 s) naming the numbers. The wait runs
    on a virtual clock: it gives up after the first 1-second poll past the timeout."""
    clock = virtual_node_wait_clock(monkeypatch)
    strategy = strategy_from_config({"method": method, "min-train-nodes": 5,
                                     "node-wait-timeout": 30.0})
    with pytest.raises(node_wait_timeout_error(), match="only 3 node.*after 30 s"):
        run_strategy(strategy, answering(states(1, 3), [1, 1, 1]), states(0, 1)[0], rounds=1,
                     num_nodes=3)
    assert 30.0 < sum(clock.slept) <= 31.0 and set(clock.slept) == {1.0}, clock.slept


# --- screening helpers, each against hand-worked numbers --------------------------------------


def _good(models: list[dict], sizes: list[float]):
    """Screened good replies: (a stand-in message with a node id, the model, its weight)."""
    from types import SimpleNamespace

    from server_math.reply_screen import Screened

    items = [(SimpleNamespace(metadata=SimpleNamespace(src_node_id=i)), m, float(n))
             for i, (m, n) in enumerate(zip(models, sizes))]
    return Screened(good=items, counts={"replies": len(items), "errors": 0, "timeouts": 0,
                                        "dropped": 0})


def test_influence_limits_at_ratio_one_with_three_and_two_replies():
    """Update norms 1, 3, 2 (median 2) under update-norm-ratio 1: the norm-3 update is dropped;
    the two left claim 10 and 20 examples (median 15) under weight-ratio 1: 20 is cut to 15.
    With two replies alone, norms 1 and 3 (median 2): the norm-3 update is dropped."""
    from server_math.influence import limit_influence

    phi = {"w": torch.zeros(2)}
    models = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 3.0])},
              {"w": torch.tensor([0.0, -2.0])}]
    screened = _good(models, [10, 100, 20])
    assert limit_influence(1, screened, phi, 1.0, 1.0, str) is screened
    assert [(m, n) for _, m, n in screened.good] == [(models[0], 10.0), (models[2], 15.0)]
    assert screened.counts == {"replies": 2, "errors": 0, "timeouts": 0, "dropped": 1,
                               "dropped-outlier": 1, "capped-weight": 1}
    two = _good(models[:2], [10, 10])
    limit_influence(1, two, phi, 1.0, 0.0, str)
    assert [m for _, m, _ in two.good] == [models[0]] and two.counts["dropped-outlier"] == 1


def test_influence_limits_of_zero_are_off():
    from server_math.influence import limit_influence

    phi = {"w": torch.zeros(2)}
    models = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1e6])}]
    screened = limit_influence(1, _good(models, [1, 1e9]), phi, 0.0, 0.0, str)
    assert [n for _, _, n in screened.good] == [1.0, 1e9] and screened.counts["dropped"] == 0
    assert "capped-weight" not in screened.counts


def test_error_reasons_are_shortened_to_their_last_line():
    from server_math.reply_screen import short_reason

    trace = "Traceback (most recent call last):\n  File 'x.py', line 1\nValueError: bad\n\n"
    assert short_reason(trace) == "ValueError: bad"
    assert short_reason("") == short_reason(" \n ") == "(no reason given)"
    assert short_reason("x" * 400) == "x" * 300


def test_node_reports_are_screened():
    """Valid reports say 3 partitions twice and 4 once: 3 is taken (the majority) unless the
    number is known already; out-of-range and non-integer reports are refused with why."""
    from server_math.node_reports import screen_node_reports

    reports = {1: (0, 3), 2: (1, 3), 3: (2, 4), 4: (5, 3), 5: (True, 3), 6: (0, 0)}
    accepted, slots, refused = screen_node_reports(reports)
    assert (accepted, slots, sorted(refused)) == ({1: 0, 2: 1}, 3, [3, 4, 5, 6])
    assert refused[3] == "its num-clients = 4, but the number most nodes report is 3"
    assert refused[4] == "its client-id = 5 is outside [0, num-clients = 3)"
    assert refused[5] == "its client-id = True is not an integer"
    assert refused[6] == "its num-clients = 0 is outside [1, 1000000]"
    accepted, slots, refused = screen_node_reports(reports, num_slots=4,
                                                   slots_from="the run config's num-clients")
    assert (accepted, slots, sorted(refused)) == ({3: 2}, 4, [1, 2, 4, 5, 6])
    assert refused[1] == "its num-clients = 3, but the run config's num-clients is 4"


def test_bulyan_needs_four_f_plus_three_updates():
    """Bulyan with f = 1 needs n >= 7: with 6 the round is skipped (a reason), and the rule
    itself refuses; the other aggregators need no minimum."""
    from server_math.robust import RobustConfig, TooFewUpdates, bulyan, too_few

    assert "at least 7 good replies, got 6" in too_few(RobustConfig("bulyan", num_malicious=1), 6)
    assert too_few(RobustConfig("bulyan", num_malicious=1), 7) is None
    assert too_few(RobustConfig("mean"), 1) is None and too_few(RobustConfig("median"), 2) is None
    phi = {"w": torch.zeros(2)}
    with pytest.raises(TooFewUpdates, match="at least 7 updates, got 6"):
        bulyan(phi, [{"w": torch.full((2,), float(i))} for i in range(6)], 1)


def test_trimmed_mean_trims_less_than_half_and_dp_clipping_keeps_a_zero_update():
    from server_math.robust import RobustConfig, clip_update_

    RobustConfig("trimmed-mean", trim=0.0)
    RobustConfig("trimmed-mean", trim=0.49)
    for trim in (0.5, -0.1):
        with pytest.raises(ValueError, match=r"trim must be in \[0, 0.5\)"):
            RobustConfig("trimmed-mean", trim=trim)
    phi = {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor(4)}
    assert clip_update_(dict(phi), phi, 1.0)["w"].tolist() == [1.0, 2.0]  # ||u|| = 0: kept
    moved = clip_update_({"w": torch.tensor([4.0, 6.0]), "step": torch.tensor(4)}, phi, 1.0)
    assert torch.allclose(moved["w"], torch.tensor([1.6, 2.8]))  # u = (3, 4) -> (0.6, 0.8)


def test_flower_sampling_takes_its_share_of_the_nodes():
    """A Flower-sampled rule (fedyogi) with fraction-train 0.5 of 6 nodes trains 3 a round."""
    strategy = strategy_from_config({"method": "fedyogi", "fraction-train": 0.5,
                                     "min-train-nodes": 2, "fraction-evaluate": 0.0})
    grid = fakegrid.FakeGrid(6, answering(states(1, 6), [1] * 6))
    run_strategy_result(strategy, None, states(0, 1)[0], rounds=2, num_nodes=6, grid=grid)
    assert [len(sent) for sent in grid.sent if sent] == [3, 3]


def test_replies_without_the_rules_records_are_dropped_and_counted():
    """A rule that needs a record in every reply (tests/median_method.py: 'drift'): of 4
    replies, the 2 without it are dropped (counted as dropped-payload), and theta is the
    coordinate median of the other 2 (torch's: the lower of the two values)."""
    import methods
    import median_method

    methods.register(*median_method.ITEMS)
    try:
        strategy = strategy_from_config({"method": "median-anchor", "fraction-train": 1.0,
                                         "min-train-nodes": 4, "fraction-evaluate": 0.0},
                                        model=torch.nn.Linear(4, 3))
    finally:
        methods.unregister(*median_method.ITEMS)
    models = states(1, 4)

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, 4)
        reply = make_reply(models[i], 10)
        if i < 2:
            reply["drift"] = ArrayRecord({"drift": torch.tensor([0.5])})
        return reply

    result = run_strategy_result(strategy, handler, states(0, 1)[0], rounds=1, num_nodes=4)
    metrics = result.train_metrics_clientapp[1]
    assert (metrics["replies"], metrics["dropped"], metrics["dropped-payload"]) == (2, 2, 2)
    theta = result.arrays.to_torch_state_dict()
    assert all(torch.equal(theta[k], torch.minimum(models[0][k], models[1][k])) for k in theta)


def test_simulated_slots_follow_the_nodes_connected_each_round():
    """Simulated nodes: slot p is the p-th connected node by id in every round; when the node
    ids change, the train messages name the partitions by the new order."""
    from flwr.app import ConfigRecord, RecordDict

    def handler(i, msg):
        assert is_query(msg)
        return RecordDict({"metrics": MetricRecord({"partition-id": i, "num-partitions": 4,
                                                    "simulated": 1})})

    grid = fakegrid.FakeGrid(4, handler)
    strategy = lookahead_strategy(identify_nodes=True, fraction_train=1.0, min_train_nodes=4)
    arrays = ArrayRecord({"w": torch.zeros(2)})
    for server_round, ids in ((1, [40, 10, 30, 20]), (2, [40, 5, 30, 20])):
        grid.node_ids = ids
        messages = strategy.configure_train(server_round, arrays, ConfigRecord(), grid)
        named = {m.metadata.dst_node_id: m.content["config"]["partition-id"] for m in messages}
        assert named == {n: p for p, n in enumerate(sorted(ids))}


def test_client_metrics_that_cannot_be_aggregated_do_not_stop_the_round():
    """Flower cannot average list metrics of different lengths: the round still aggregates
    the models (theta = their mean), and its train metrics hold the server's counts alone."""
    models = states(2, 2)

    def handler(i, msg):
        if is_query(msg):
            return partition_reply(i, 2)
        reply = make_reply(models[i], 5)
        reply["metrics"]["v"] = [1.0, 2.0][: i + 1]
        return reply

    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=2)
    result = run_strategy_result(strategy, handler, states(0, 1)[0], rounds=1, num_nodes=2)
    metrics = result.train_metrics_clientapp[1]
    assert "v" not in metrics and (metrics["replies"], metrics["skipped"]) == (2, 0)
    theta = result.arrays.to_torch_state_dict()
    assert all(torch.allclose(theta[k], (models[0][k] + models[1][k]) / 2) for k in theta)


def test_no_client_metrics_give_an_empty_record():
    from strategies.round_loop import safe_metrics

    def never(contents, key):
        raise AssertionError("not called without replies")

    assert safe_metrics(never, [], "num-examples") == MetricRecord()


def test_a_repeated_reply_is_dropped_once_and_counted():
    """Node 1's reply arrives twice: the copy is dropped (dropped 1, dropped-duplicate 1) and
    theta is the mean of the 2 replies, node 1's counted once (weights 1 and 3: not 1 and 6)."""
    from attacks import DuplicatingGrid

    models = states(3, 2)
    grid = DuplicatingGrid(2, answering(models, [1, 3]))
    grid.twice = {1}
    strategy = lookahead_strategy(fraction_train=1.0, min_train_nodes=2)
    result = run_strategy_result(strategy, None, states(0, 1)[0], rounds=1, num_nodes=2,
                                 grid=grid)
    metrics = result.train_metrics_clientapp[1]
    assert (metrics["replies"], metrics["dropped"], metrics["dropped-duplicate"]) == (2, 1, 1)
    theta = result.arrays.to_torch_state_dict()
    assert all(torch.allclose(theta[k], (models[0][k] + 3 * models[1][k]) / 4) for k in theta)
