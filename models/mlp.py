"""MLP with three fully connected layers (GC-Fed's EMNIST model)."""

import math

from torch import nn


class MLP(nn.Module):
    classifier_names = ("fc3.weight", "fc3.bias")

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, hidden: int = 200):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(in_shape), hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))
