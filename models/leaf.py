"""The LEAF benchmark's models (FedACG Tables 7-8), each naming its classifier for GC.

* `FemnistCNN`: LEAF's FEMNIST CNN, two 5x5 'same' convolutions (32, 64) each with 2x2 max-pool,
  a 2048-unit fully connected layer and the 62-way classifier.
* `CelebaCNN`: LEAF's CelebA CNN, four blocks of 3x3 'same' convolution (32), normalization,
  2x2 max-pool ('same', ceil) and ReLU, then the linear classifier. LEAF normalizes with
  BatchNorm; here it is GroupNorm (`gn_groups` groups), as FedACG does for ResNet-18, so the
  model has no running-statistics buffers for the server to average
  (docs/algorithms.md#server-round).
* `CharLSTM`: LEAF's Shakespeare model, an 8-dimensional character embedding, a 2-layer LSTM with
  256 units, and a linear classifier on the last step's output: next-character prediction over
  LEAF's 80 characters. Inputs are character indices (any integer dtype).
"""

from __future__ import annotations

from torch import nn


class FemnistCNN(nn.Module):
    classifier_names = ("fc2.weight", "fc2.bias")

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, hidden: int = 2048):
        super().__init__()
        c, h, w = in_shape
        self.conv1 = nn.Conv2d(c, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * (h // 4) * (w // 4), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        return self.fc2(self.act(self.fc1(x.flatten(1))))


class CelebaCNN(nn.Module):
    classifier_names = ("fc.weight", "fc.bias")

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, gn_groups: int = 2,
                 channels: int = 32):
        super().__init__()
        if channels % gn_groups:
            raise ValueError(f"gn-groups = {gn_groups} must divide {channels}")
        c, h, w = in_shape
        blocks = []
        for i in range(4):
            blocks += [nn.Conv2d(c if i == 0 else channels, channels, 3, padding=1),
                       nn.GroupNorm(gn_groups, channels), nn.MaxPool2d(2, ceil_mode=True),
                       nn.ReLU()]
            h, w = -(-h // 2), -(-w // 2)
        self.features = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels * h * w, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


class CharLSTM(nn.Module):
    classifier_names = ("fc.weight", "fc.bias")

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, embed: int = 8,
                 hidden: int = 256, layers: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(num_classes, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x):
        out, _ = self.lstm(self.embedding(x.long()))
        return self.fc(out[:, -1])
