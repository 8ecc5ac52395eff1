"""pytorchexample: the ServerApp."""

from logging import INFO
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from strategies import FedACGGCFed

from pytorchexample.task import Net, load_centralized_dataset, test

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The server's round loop: the strategy, from the global model's initial weights."""

    # Read the run config
    fraction_train: float = context.run_config["fraction-train"]
    fraction_evaluate: float = context.run_config["fraction-evaluate"]
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["lr"]
    path: str = context.run_config["dataset-path"]

    # Load the global model
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # The strategy
    strategy = FedACGGCFed(fraction_train=fraction_train, fraction_evaluate=fraction_evaluate)

    # Start the strategy, for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=lambda server_round, arrays: global_evaluate(server_round, arrays, path),
    )

    # The final model: its accuracy on the test split, saved to the run config's model-dir
    final = result.evaluate_metrics_serverapp[num_rounds]
    log(INFO, "Final test accuracy: %.4f", final["accuracy"])
    model_dir = Path(context.run_config["model-dir"]).expanduser()
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(result.arrays.to_torch_state_dict(), model_dir / "final_model.pt")
    log(INFO, "Final model saved to %s", model_dir / "final_model.pt")


def global_evaluate(server_round: int, arrays: ArrayRecord, path: str) -> MetricRecord:
    """Evaluate the global model on the test split."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    loss, accuracy = test(model, load_centralized_dataset(path), device)
    return MetricRecord({"accuracy": accuracy, "loss": loss})
