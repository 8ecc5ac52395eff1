"""Flower's FedAdam/FedYogi/FedAdagrad as server rules: they compute in float64, and theta must
come back in the model's own dtypes, or every reply of the next round is dropped for its dtype
and the run silently stops training after round 1."""

import json

import pytest
import torch
from flwr.app import Context, RecordDict

# the runs' plots are not drawn here: nothing asserts them (tests/conftest.py)
pytestmark = pytest.mark.no_run_plots


@pytest.mark.parametrize("method", ["fedadam", "fedyogi", "fedadagrad"])
def test_flower_fedopt_keeps_training_after_round_one(tmp_path, method):
    import server_app.app as server
    from fakegrid import FakeGrid, client_app_handler

    rc = {"out-dir": str(tmp_path), "run-name": "run", "method": method, "seed": 3,
          "num-server-rounds": 3, "local-iterations": 2, "checkpoint-every": 0,
          "eval-every": 3, "test-max-examples": 50}
    grid = FakeGrid(4, client_app_handler(rc, 4))
    server.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                              run_config=rc))
    run_dir = next(p.parent for p in tmp_path.rglob("results.json"))
    rows = [r for r in json.loads((run_dir / "results.json").read_text())["rounds"]
            if r["round"] > 0]
    assert [r["round"] for r in rows] == [1, 2, 3]
    for r in rows:  # every sampled client's reply was aggregated, in every round
        assert r["train-dropped"] == 0 and r["train-skipped"] == 0, r
        assert r["clients-replied"] == r["clients-sampled"] > 0, r
    theta = torch.load(run_dir / "final_model.pt", weights_only=True)
    assert all(v.dtype == torch.float32 for v in theta.values())
