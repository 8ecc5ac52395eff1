"""Fixed client replies for strategy tests: client i returns a fixed model or phi + delta_i."""

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict


def reply(arrays: dict, n: int) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({k: v.clone() for k, v in arrays.items()}),
                       "metrics": MetricRecord({"num-examples": n, "train-loss": float(n)})})


def fixed_models(models: list[dict], sizes: list[int]):
    """Node i always answers with models[i] (whatever was broadcast)."""
    return lambda i, msg: reply(models[i], sizes[i])


def deltas(ds: list[dict], sizes: list[int], seen: list):
    """Node i answers phi + ds[i]; every broadcast phi is recorded in `seen`."""

    def handler(i, msg):
        phi = msg.content["arrays"].to_torch_state_dict()
        seen.append((msg.content["config"]["server-round"], i, phi))
        return reply({k: phi[k] + ds[i][k] for k in phi}, sizes[i])

    return handler


def random_state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"conv": torch.randn(4, 3, 3, 3, generator=g),
            "fc.weight": torch.randn(5, 6, generator=g),
            "fc.bias": torch.randn(5, generator=g)}
