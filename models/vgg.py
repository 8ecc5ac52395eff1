"""VGG-11 without BatchNorm (8 conv + 3 fc); the three fc layers are the classifier (GC-Fed).

The feature extractor is PyTorch's VGG-11 configuration. A max-pool is kept only while the
feature map is at least 2x2 (so 8x8 inputs work); a global average pool feeds a 512-512-C head.
"""

from torch import nn

_CFG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG11(nn.Module):
    classifier_names = (
        "classifier.0.weight", "classifier.0.bias", "classifier.2.weight",
        "classifier.2.bias", "classifier.4.weight", "classifier.4.bias",
    )

    def __init__(self, in_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        layers, cin, size = [], in_shape[0], min(in_shape[1:])
        for v in _CFG:
            if v == "M":
                if size >= 2:
                    layers.append(nn.MaxPool2d(2))
                    size //= 2
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
                cin = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
            nn.Linear(512, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))
