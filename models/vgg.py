"""VGG-11 without BatchNorm (8 conv + 3 fc); the three fc layers are the classifier (GC-Fed).

The feature extractor is PyTorch's VGG-11 configuration. A max-pool is kept only while the
feature map is at least 2x2 (so 8x8 inputs work). Two heads:

* `vgg11` (`VGG11`): a global average pool feeds a 512-512-C head.
* `vgg11-gcfed` (`VGG11Torchvision`): GC-Fed's VGG-11, i.e. torchvision's `vgg11()` shape written
  in plain torch: a 7x7 adaptive average pool feeds a 25088-4096-4096-C head with ReLU and dropout
  (p = 0.5) after each hidden layer. On 32x32 and larger inputs it is torchvision's network layer
  for layer (module names and parameter shapes included).
"""

from torch import nn

_CFG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11_features(in_channels: int, size: int) -> nn.Sequential:
    """VGG-11's convolutions (3x3, padding 1, ReLU) and max-pools (skipped below 2x2)."""
    layers, cin = [], in_channels
    for v in _CFG:
        if v == "M":
            if size >= 2:
                layers.append(nn.MaxPool2d(2))
                size //= 2
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
            cin = v
    return nn.Sequential(*layers)


class VGG11(nn.Module):
    classifier_names = (
        "classifier.0.weight", "classifier.0.bias", "classifier.2.weight",
        "classifier.2.bias", "classifier.4.weight", "classifier.4.bias",
    )

    def __init__(self, in_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.features = vgg11_features(in_shape[0], min(in_shape[1:]))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
            nn.Linear(512, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


class VGG11Torchvision(nn.Module):
    classifier_names = (
        "classifier.0.weight", "classifier.0.bias", "classifier.3.weight",
        "classifier.3.bias", "classifier.6.weight", "classifier.6.bias",
    )
    # init = 'torchvision' (models/initialization.py): GC-Fed's code puts a fresh last linear
    # layer on torchvision's network, so that one keeps PyTorch's default initialisation.
    torchvision_default_layers = ("classifier.6",)

    def __init__(self, in_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.features = vgg11_features(in_shape[0], min(in_shape[1:]))
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))
