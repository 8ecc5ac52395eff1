"""Failing clients and bad updates: each bad reply is dropped and counted, and the result equals
aggregating the good replies alone; a round with too few good replies leaves theta and m as they
were (in-process FakeGrid; the same through Flower's runtime is in test_faults_simulation.py)."""

import json

import pytest
import torch
from flwr.app import ArrayRecord, Context, Error, Message, MetricRecord, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from server_math.reply_screen import BadUpdate, check_norms, check_reply, update_norm
from run_config import resolve
from strategy_helpers import LookaheadFedAvg, random_state, reply

SIZES = [10, 30, 25, 5]
DELTAS = [{k: 0.1 * v for k, v in random_state(40 + i).items()} for i in range(4)]



def check_update(content, phi, weight_key, max_norm=0.0, metrics=None):
    """One reply screened as screen_replies screens it: its layout, then its values."""
    model, n = check_reply(content, phi, weight_key, metrics)
    return model, n, check_norms(model, phi, update_norm(model, phi), max_norm)


def corrupt(kind: str, model: dict) -> dict | RecordDict:
    """A bad version of a good reply's model (or a whole bad reply)."""
    m = {k: v.clone() for k, v in model.items()}
    if kind == "nan":
        m["fc.weight"][2, 3] = float("nan")
    elif kind == "inf":
        m["conv"][0, 0, 0, 0] = float("-inf")
    elif kind == "missing-key":
        del m["fc.bias"]
    elif kind == "extra-key":
        m["backdoor"] = torch.zeros(3)
    elif kind == "wrong-shape":
        m["fc.weight"] = m["fc.weight"].T.contiguous()
    elif kind == "wrong-dtype":
        m["conv"] = m["conv"].double()
    elif kind == "huge-norm":
        m["fc.bias"] += 1e6
    elif kind == "no-weight":
        return RecordDict({"arrays": ArrayRecord(m), "metrics": MetricRecord({"train-loss": 1.0})})
    elif kind == "two-arrayrecords":
        return RecordDict({"arrays": ArrayRecord(m), "more": ArrayRecord(m),
                           "metrics": MetricRecord({"num-examples": 5})})
    return m


# kind -> the reason it is counted under (`dropped-<reason>`)
BAD = {"nan": "non-finite", "inf": "non-finite", "missing-key": "keys", "extra-key": "keys",
       "wrong-shape": "shape", "wrong-dtype": "dtype", "huge-norm": "norm",
       "no-weight": "malformed", "two-arrayrecords": "malformed"}


def handler_with(bad_node: int | None, kind: str | None, rounds_bad=(1, 2, 3)):
    """Node i answers phi + DELTAS[i] (SIZES[i] examples); `bad_node` answers `kind` instead."""

    def handler(i, msg):
        phi = msg.content["arrays"].to_torch_state_dict()
        good = {k: phi[k] + DELTAS[i][k] for k in phi}
        rnd = msg.content["config"]["server-round"]
        if i != bad_node or rnd not in rounds_bad:
            return reply(good, SIZES[i])
        if kind == "error":
            raise RuntimeError("client crashed")
        if kind == "timeout":
            return None
        out = corrupt(kind, good)
        return out if isinstance(out, RecordDict) else reply(out, SIZES[i])

    return handler


def run_strategy(num_nodes, handler, rounds=3, out=None, **kw):
    """FedACG-style strategy over every node; theta, m and round metrics after each round (into
    `out`, a ([], {}) pair, when given: they are kept if the run raises)."""
    strategy = LookaheadFedAvg(lam=0.5, eta=1.0, lookahead=True, fraction_train=1.0,
                               min_train_nodes=num_nodes, fraction_evaluate=0.0,
                               max_update_norm=100.0, **kw)
    states, metrics = out if out is not None else ([], {})
    strategy.round_metrics_fn = lambda r, m: metrics.__setitem__(r, dict(m))
    strategy.start(grid=FakeGrid(num_nodes, handler), initial_arrays=ArrayRecord(random_state(99)),
                   num_rounds=rounds,
                   round_end_fn=lambda r, a: states.append(strategy.state_dict()))
    return states, metrics


def assert_equal_states(a: list, b: list):
    for sa, sb in zip(a, b, strict=True):
        for part in ("theta", "m"):
            for k in sa[part]:
                assert torch.equal(sa[part][k], sb[part][k]), (part, k)


@pytest.mark.parametrize("kind", list(BAD) + ["error", "timeout"])
def test_a_bad_reply_is_dropped_and_the_good_ones_alone_are_aggregated(kind):
    # Node 3 misbehaves in every round; nodes 0-2 are the good ones. FakeGrid node ids of 3 nodes
    # are those of the first 3 of 4, and good replies are aggregated in node order, so the result
    # must be bitwise the one of a federation of the good nodes alone.
    bad_states, metrics = run_strategy(4, handler_with(3, kind))
    good_states, good_metrics = run_strategy(3, handler_with(None, None))
    assert_equal_states(bad_states, good_states)
    for rnd in (1, 2, 3):
        m = metrics[rnd]
        assert m["replies"] == 3 and m["skipped"] == 0
        if kind == "error":
            assert (m["errors"], m["timeouts"], m["dropped"]) == (1, 0, 0)
        elif kind == "timeout":
            assert (m["errors"], m["timeouts"], m["dropped"]) == (0, 1, 0)
        else:
            assert (m["errors"], m["timeouts"], m["dropped"]) == (0, 0, 1)
            assert m[f"dropped-{BAD[kind]}"] == 1
        assert m["train-loss"] == good_metrics[rnd]["train-loss"]  # the bad reply's metrics are out


def test_too_few_good_replies_skip_the_round_with_theta_and_m_unchanged():
    def handler(i, msg):
        rnd = msg.content["config"]["server-round"]
        if rnd == 2 and i in (1, 2):  # round 2: only nodes 0 and 3 answer well
            raise RuntimeError("out of memory") if i == 1 else ValueError("bad data")
        return handler_with(None, None)(i, msg)

    states, metrics = run_strategy(4, handler, rounds=3, min_train_clients=3)
    assert metrics[2] == {"replies": 2, "errors": 2, "timeouts": 0, "dropped": 0, "skipped": 1,
                          "nodes-connected": 4, "nodes-refused": 0, "nodes-waiting": 0}
    assert metrics[1]["skipped"] == metrics[3]["skipped"] == 0
    assert_equal_states([states[1]], [states[0]])  # round 2 changed neither theta nor m
    diff = max((states[2]["theta"][k] - states[1]["theta"][k]).abs().max()
               for k in states[1]["theta"])
    assert diff > 1e-3  # round 3 went on training


def test_a_round_without_any_reply_is_skipped():
    """Each round is skipped, the state unchanged; a run that aggregated no round fails at its
    end (docs/results.md#runs-that-learn-nothing)."""
    from strategies.round_loop import NothingLearned

    states, metrics = [], {}
    with pytest.raises(NothingLearned, match=r"no round of 1-2 aggregated a reply \(the last: "
                       r"round 2: 0 good replies, min-train-clients = 1; 0 errors, 2 timeouts"):
        run_strategy(2, lambda i, msg: None, rounds=2, out=(states, metrics))
    assert metrics[1] == {"replies": 0, "errors": 0, "timeouts": 2, "dropped": 0, "skipped": 1,
                          "nodes-connected": 2, "nodes-refused": 0, "nodes-waiting": 0}
    init = random_state(99)
    assert all(torch.equal(states[1]["theta"][k], init[k]) for k in init)
    assert all(not v.any() for v in states[1]["m"].values())


def test_an_error_made_by_the_superlink_counts_once_for_its_node():
    # A node that went away: the SuperLink answers its instruction with an error whose source is
    # the SuperLink (node id 0), not the node; it is matched to the node by message id.
    def handler(i, msg):
        if i == 1:
            err = Message(Error(code=3, reason="Error: Node Unavailable"), reply_to=msg)
            err.metadata.__dict__["_src_node_id"] = 0
            return err
        return handler_with(None, None)(i, msg)

    _, metrics = run_strategy(3, handler, rounds=1)
    assert metrics[1] == {**metrics[1], "replies": 2, "errors": 1, "timeouts": 0, "dropped": 0}


@pytest.mark.parametrize("kinds, says, blames_settings", [
    (("error", "error"), "4 errors and 0 timeouts: the clients' own", False),
    (("error", "timeout"), "2 errors and 2 timeouts", False),
    (("wrong-shape", "error"), "2 replies malformed or repeated", False),
    (("nan", "huge-norm"), "4 replies non-finite or too large", True),
])
def test_the_nothing_learned_hint_blames_the_settings_only_for_diverged_replies(
        kinds, says, blames_settings):
    """Each node fails as `kinds` says in rounds 1, 3 and 4; round 2 aggregates, and the run
    stops after round 4 (max-skipped-rounds = 2): the hint counts what rounds 3-4 left out (2
    nodes x 2 rounds; round 1's were before an update), and names lr / beta / alpha only where
    replies were non-finite or too large."""
    from strategies.round_loop import NothingLearned

    def handler(i, msg):
        return handler_with(i, kinds[i], rounds_bad=(1, 3, 4))(i, msg)

    with pytest.raises(NothingLearned, match=r"2 rounds in a row \(3-4\)") as err:
        run_strategy(2, handler, rounds=5, max_skipped_rounds=2)
    text = str(err.value)
    assert says in text, text
    assert ("(lr, beta, alpha, ...)" in text) == blames_settings, text


def test_check_update_names_the_tensor_and_the_norm():
    phi = random_state(1)
    with pytest.raises(BadUpdate, match=r"'fc.weight' has shape \(6, 5\), expected \(5, 6\)"):
        check_update(reply(corrupt("wrong-shape", phi), 3), phi, "num-examples")
    with pytest.raises(BadUpdate, match="'fc.weight' has 1 NaN/Inf"):
        check_update(reply(corrupt("nan", phi), 3), phi, "num-examples")
    huge = corrupt("huge-norm", phi)
    assert update_norm(huge, phi) == pytest.approx(1e6 * 5 ** 0.5)
    with pytest.raises(BadUpdate, match="max-update-norm = 1000"):
        check_update(reply(huge, 3), phi, "num-examples", max_norm=1000.0)
    model, n, norm = check_update(reply(huge, 3), phi, "num-examples")  # no limit: accepted
    assert n == 3.0 and torch.equal(model["fc.bias"], huge["fc.bias"])
    assert norm == update_norm(huge, phi)  # the norm measured once, for the influence limits


def run_app(tmp_path, num_nodes, handler_wrapper, **overrides):
    rc = {"out-dir": str(tmp_path), "run-name": "run", "num-server-rounds": 3,
          "local-iterations": 2, "fraction-train": 1.0, **overrides}
    grid = FakeGrid(num_nodes, handler_wrapper(client_app_handler(rc, num_nodes)))
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    return json.loads((tmp_path / "run" / "results.json").read_text())["rounds"]


def faulty(real):
    """Real ClientApp; partition 1 raises in every round, partition 2 hangs (no reply) in
    round 2 and sends NaNs in round 3."""

    def handler(i, msg):
        rnd = msg.content["config"]["server-round"] if "config" in msg.content else 0
        if msg.metadata.message_type == "train":
            if i == 1:
                raise RuntimeError("injected failure")
            if i == 2 and rnd == 2:
                return None
        out = real(i, msg)
        if msg.metadata.message_type == "train" and i == 2 and rnd == 3:
            arrays = out.content["arrays"].to_torch_state_dict()
            next(iter(arrays.values()))[0] = float("nan")
            out = reply(arrays, 7)
        return out

    return handler


@pytest.mark.parametrize("method", ["fedacg", "fedyogi"])
def test_the_app_survives_failures_and_records_them(tmp_path, method):
    rows = run_app(tmp_path, 4, faulty, method=method, **{"min-train-clients": 3})
    counts = [(r["train-replies"], r["train-errors"], r["train-timeouts"], r["train-dropped"],
               r["train-skipped"]) for r in rows[1:]]
    assert counts == [(3, 1, 0, 0, 0), (2, 1, 1, 0, 1), (2, 1, 0, 1, 1)]
    assert rows[3]["train-dropped-non-finite"] == 1
    # skipped rounds 2 and 3 evaluate the very model of round 1
    assert rows[1]["test-loss"] == rows[2]["test-loss"] == rows[3]["test-loss"]
    assert rows[1]["test-loss"] < rows[0]["test-loss"]  # round 1 trained


@pytest.mark.parametrize("steps", [float("nan"), float("inf"), -1, 2.5, 1e-300, [3], None])
def test_a_metric_the_rule_reads_is_screened(steps):
    """FedCM divides by its clients' local-steps: a reply without a whole number >= 0 there is
    dropped before the rule sees it (`up_metrics`); 0, 3 and 3.0 pass."""
    from methods.fedcm import FedCMRule

    phi = random_state(1)
    content = reply(phi, 3)
    if steps is not None:
        content["metrics"]["local-steps"] = steps
    with pytest.raises(BadUpdate, match="metric 'local-steps' = .*, expected a finite whole "
                       "number in \\[0, 1e\\+09\\]") as err:
        check_update(content, phi, "num-examples", metrics=FedCMRule.up_metrics)
    assert err.value.reason == "malformed"
    for good in (0, 3, 3.0):
        content["metrics"]["local-steps"] = good
        check_update(content, phi, "num-examples", metrics=FedCMRule.up_metrics)
    # 1e15 steps (which made Delta ~0) are out of range; with local-iterations set, more than
    # that many steps are (every honest client takes exactly that many)
    content["metrics"]["local-steps"] = 1e15
    with pytest.raises(BadUpdate, match="'local-steps' = 1000000000000000.0, "):
        check_update(content, phi, "num-examples", metrics=FedCMRule.up_metrics)
    from models import build_model

    settings = FedCMRule.Settings.from_config(resolve({"method": "fedcm",
                                                       "local-iterations": 5}))
    rule = FedCMRule(settings,
                     build_model("mlp", (1, 8, 8), 10))
    content["metrics"]["local-steps"] = 6
    with pytest.raises(BadUpdate, match=r"'local-steps' = 6, .* in \[0, 5\]"):
        check_update(content, phi, "num-examples", metrics=rule.up_metrics)
