"""The run folder of the real ServerApp + ClientApp (in-process): traffic, clients, summary, plots,
and dynamic clients."""

import csv
import json

import pytest
from flwr.app import ArrayRecord, Context, RecordDict

import server_app.app as server
from fakegrid import FakeGrid, client_app_handler
from feddata import DataSettings, load_client_data
from strategies.population import ClientPopulation
from models import build_model
from run_config import resolve
from test_reporting import assert_plot


def array_bytes(content):
    return sum(rec.count_bytes() for rec in content.array_records.values())


def run_app(out, num_nodes, wrap=None, **overrides):
    """Run the ServerApp; `wrap(handler)` may replace the client handler. Returns results.json
    and the client-side log of (round, node, message type, bytes received, bytes sent, config)."""
    rc = {"out-dir": str(out), "run-name": "run", "local-iterations": 1, **overrides}
    real = client_app_handler(rc, num_nodes)
    seen = []

    def handler(i, msg):
        reply = (wrap or (lambda h: h))(real)(i, msg)  # the ClientApp's reply Message
        if msg.metadata.message_type != "query":
            seen.append({"round": msg.content["config"]["server-round"], "node": i,
                         "type": msg.metadata.message_type, "down": array_bytes(msg.content),
                         "up": array_bytes(reply.content), "config": dict(msg.content["config"]),
                         "num-examples": reply.content["metrics"]["num-examples"]})
        return reply

    server.main(FakeGrid(num_nodes, handler),
                Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    return json.loads((out / "run" / "results.json").read_text()), seen


def test_bytes_per_round_are_the_arrays_sent_and_received(tmp_path):
    state = build_model("cnn", (1, 8, 8), 10).state_dict()
    model_bytes = ArrayRecord(state).count_bytes()
    raw = sum(t.numel() * t.element_size() for t in state.values())
    assert raw < model_bytes < 1.01 * raw  # the arrays themselves, plus npy headers and key names
    per_method = {}
    for method in ("fedavg", "fedacg"):
        results, seen = run_app(tmp_path / method, 6, method=method, **{"num-server-rounds": 3})
        rows = results["rounds"][1:]
        down_total = up_total = 0
        for row in rows:
            msgs = [s for s in seen if s["round"] == row["round"] and s["type"] == "train"]
            assert row["clients-sampled"] == row["clients-replied"] == len(msgs) == 2
            assert row["clients-failed"] == 0
            # what the clients received and sent, counted on their side ...
            assert row["bytes-down"] == sum(s["down"] for s in msgs)
            assert row["bytes-up"] == sum(s["up"] for s in msgs)
            # ... is the model once per client each way
            assert row["bytes-down"] == row["bytes-up"] == 2 * model_bytes
            down_total += row["bytes-down"]
            up_total += row["bytes-up"]
            assert (row["bytes-down-total"], row["bytes-up-total"]) == (down_total, up_total)
        summary = results["summary"]
        assert summary["bytes-total"] == down_total + up_total == 3 * 4 * model_bytes
        per_method[method] = [(r["bytes-down"], r["bytes-up"]) for r in rows]
    assert per_method["fedacg"] == per_method["fedavg"]  # the look-ahead costs no extra bytes


def test_failed_clients_are_counted(tmp_path):
    def failing(real):
        def handler(i, msg):
            if i == 2 and msg.metadata.message_type == "train":
                raise RuntimeError("out of memory")
            return real(i, msg)
        return handler

    results, _ = run_app(tmp_path, 4, wrap=failing,
                         **{"num-server-rounds": 2, "fraction-train": 1.0})
    model_bytes = ArrayRecord(build_model("cnn", (1, 8, 8), 10).state_dict()).count_bytes()
    for row in results["rounds"][1:]:
        assert (row["clients-sampled"], row["clients-replied"], row["clients-failed"]) == (4, 3, 1)
        assert row["train-replies"] == 3
        assert (row["bytes-down"], row["bytes-up"]) == (4 * model_bytes, 3 * model_bytes)


def test_run_folder_summary_csv_and_plots(tmp_path):
    results, _ = run_app(tmp_path, 4, **{"num-server-rounds": 4, "acc-at-rounds": "2,4,10",
                                         "target-accs": "1,99.9"})
    run = tmp_path / "run"
    rows, summary = results["rounds"], results["summary"]
    assert summary["complete"] is True
    ema = {r["round"]: r["ema-acc"] for r in rows[1:]}
    assert summary["acc-at-round"] == {"2": ema[2], "4": ema[4], "10": None}
    assert summary["rounds-to-acc"] == {"1": 1, "99.9": "4+"}
    assert summary["wall-seconds"] > 0 and summary["rounds"] == 4
    with open(run / "metrics.csv") as f:
        table = list(csv.DictReader(f))
    assert [int(r["round"]) for r in table] == [0, 1, 2, 3, 4]
    assert float(table[3]["ema-acc"]) == pytest.approx(ema[3])
    assert int(table[4]["bytes-up-total"]) == rows[4]["bytes-up-total"]
    for name in ("accuracy.png", "accuracy_vs_bytes.png"):
        assert_plot(run / name)
    assert json.loads((run / "config.json").read_text())["num-server-rounds"] == 4
    assert (run / "final_model.pt").stat().st_size > 0


def test_dynamic_clients_train_on_replaced_partitions(tmp_path):
    rc = {"num-server-rounds": 5, "fraction-train": 1.0, "partitioner": "lda", "lda-min-size": 5,
          "dynamic-replace-prob": 0.5, "dynamic-replace-every": 2, "dynamic-pool-factor": 2.0,
          "seed": 1}
    results, seen = run_app(tmp_path, 6, **rc)
    expected = ClientPopulation(0.5, 2, 2.0, seed=1)
    data = DataSettings.from_config(resolve({**rc, "local-iterations": 1}))
    trained = {}
    for s in seen:
        assert s["config"]["num-partitions"] == 12  # the pool: 2 x 6 clients
        assert s["config"]["partition-id"] == expected.assignment(s["round"], 6)[s["node"]]
        # the client trained on that partition (LDA partitions differ in size)
        pid = s["config"]["partition-id"]
        assert s["num-examples"] == len(load_client_data(data, pid, 12).train_y)
        trained.setdefault(s["round"], {})[s["node"]] = pid
    assert trained[1] == trained[2] == {i: i for i in range(6)}  # stage 0: slot i, partition i
    assert trained[3] == trained[4] and trained[5] != trained[3]
    changed = sum(trained[3][i] != trained[1][i] for i in range(6))
    assert 0 < changed < 6 and changed == expected.replaced(3, 6)
    assert all(trained[3][i] >= 6 for i in range(6) if trained[3][i] != trained[1][i])  # fresh ones
    assert results["summary"]["complete"]


def test_without_dynamic_clients_nodes_keep_their_partition(tmp_path):
    _, seen = run_app(tmp_path, 4, **{"num-server-rounds": 2, "fraction-train": 1.0})
    assert all("partition-id" not in s["config"] for s in seen)
