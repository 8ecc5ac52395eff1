"""MLP with three fully connected layers: `mlp` (hidden 200-200) and `mlp-gcfed`, GC-Fed's EMNIST
model (hidden 512-256: 784-512-256-62 on EMNIST, GC-Fed's `models.py`)."""

import math

from torch import nn


class MLP(nn.Module):
    classifier_names = ("fc3.weight", "fc3.bias")

    def __init__(self, in_shape: tuple[int, ...], num_classes: int,
                 hidden: tuple[int, int] = (200, 200)):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(in_shape), hidden[0])
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.fc3 = nn.Linear(hidden[1], num_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))
