"""pytorchexample: the model, the data and the training loop."""

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from datasets import load_dataset
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import DirichletPartitioner
from torch.utils.data import DataLoader


class Net(nn.Module):
    """A small CNN for 8x8 grey digits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = self.pool(F.relu(self.conv2(x)))
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


fds = None  # the FederatedDataset, made once per process


def local_copy(path: str) -> str:
    folder = Path(path).expanduser()
    if not (folder / "data").is_dir():
        raise FileNotFoundError(f"no local copy of the data at {folder}: make it with "
                                f"`python prepare_data.py --out {folder}`")
    return str(folder)


def apply_transforms(batch):
    """PIL images -> tensors of shape (1, 8, 8) in [-1, 1]."""
    batch["image"] = [torch.from_numpy(np.asarray(img, dtype=np.float32) / 127.5 - 1.0)
                      .unsqueeze(0) for img in batch["image"]]
    return batch


def load_data(partition_id: int, num_partitions: int, batch_size: int, path: str):
    """This node's partition of the training split (a Dirichlet(0.5) split over the labels):
    80% to train on, 20% to evaluate on."""
    global fds
    if fds is None:
        partitioner = DirichletPartitioner(num_partitions=num_partitions, partition_by="label",
                                           alpha=0.5, seed=42)
        fds = FederatedDataset(dataset=local_copy(path), partitioners={"train": partitioner})
    partition = fds.load_partition(partition_id)
    partition_train_test = partition.train_test_split(test_size=0.2, seed=42)
    partition_train_test = partition_train_test.with_transform(apply_transforms)
    trainloader = DataLoader(partition_train_test["train"], batch_size=batch_size, shuffle=True)
    testloader = DataLoader(partition_train_test["test"], batch_size=batch_size)
    return trainloader, testloader


def load_centralized_dataset(path: str):
    """The test split, for the server's evaluation of the global model."""
    test_dataset = load_dataset(local_copy(path), split="test")
    return DataLoader(test_dataset.with_transform(apply_transforms), batch_size=128)


def train(net, trainloader, epochs, lr, device, method):
    """Train the model on the training set."""
    net.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            images = batch["image"].to(device)
            labels = batch["label"].to(device)
            optimizer.zero_grad()
            loss = method.backward(images, labels)
            method.before_step()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net, testloader, device):
    """Loss and accuracy of the model on the test set."""
    net.to(device)
    net.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for batch in testloader:
            images = batch["image"].to(device)
            labels = batch["label"].to(device)
            outputs = net(images)
            loss += F.cross_entropy(outputs, labels, reduction="sum").item()
            correct += (outputs.argmax(1) == labels).sum().item()
    return loss / len(testloader.dataset), correct / len(testloader.dataset)
