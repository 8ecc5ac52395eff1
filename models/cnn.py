"""McMahan et al.'s CNN as GC-Fed uses it: conv5x5 32, pool, conv5x5 64, pool, fc 512, fc C.

Convolutions are 'same'-padded (as in McMahan's model), so 8x8 digits and 32x32 images both fit.
"""

from torch import nn


class CNN(nn.Module):
    classifier_names = ("fc2.weight", "fc2.bias")
    conv_map_layer = "fc1"  # its input is the flattened conv map (models.features 'conv-map')

    def __init__(self, in_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        c, h, w = in_shape
        self.conv1 = nn.Conv2d(c, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * (h // 4) * (w // 4), 512)
        self.fc2 = nn.Linear(512, num_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        return self.fc2(self.act(self.fc1(x.flatten(1))))
