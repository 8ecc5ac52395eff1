"""ResNet-18 with GroupNorm (FedACG/FedAGM/GC-Fed): 3x3 stem, no max-pool, global average pool."""

from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = nn.GroupNorm(groups, cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(groups, cout)
            )
        self.act = nn.ReLU()

    def forward(self, x):
        out = self.act(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return self.act(out + self.shortcut(x))


class ResNet18GN(nn.Module):
    classifier_names = ("linear.weight", "linear.bias")

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, gn_groups: int = 2):
        super().__init__()
        if 64 % gn_groups:
            raise ValueError(f"gn-groups = {gn_groups} must divide 64 (the narrowest layer)")
        self.conv1 = nn.Conv2d(in_shape[0], 64, 3, 1, 1, bias=False)
        self.gn1 = nn.GroupNorm(gn_groups, 64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride, gn_groups),
                                        BasicBlock(cout, cout, 1, gn_groups)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(512, num_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.act(self.gn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.linear(self.pool(x).flatten(1))
