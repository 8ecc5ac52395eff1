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

    def preactivation(self, x):
        """The block's output before its last ReLU."""
        out = self.act(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return out + self.shortcut(x)

    def forward(self, x):
        return self.act(self.preactivation(x))


class ResNet18GN(nn.Module):
    classifier_names = ("linear.weight", "linear.bias")
    # init = 'torchvision' (models/initialization.py): GC-Fed's code puts a fresh 3x3 stem and
    # classifier on torchvision's resnet18, so those two keep PyTorch's default initialisation.
    torchvision_default_layers = ("conv1", "linear")

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

    # FedMLB's view of the network (docs/baselines.md#fedmlb): level 0 is the stem, levels 1-4
    # the four stages; each ends in a ReLU of its pre-activation output a_l.
    levels = 5

    def stages(self) -> tuple[nn.Module, ...]:
        return (self.layer1, self.layer2, self.layer3, self.layer4)

    def forward_preactivations(self, x):
        """(logits, [a_0, ..., a_4]) in one pass: the same logits as `forward`, and the
        pre-activation outputs of the stem (a_0) and of stages 1-4 (the last block's output
        before its ReLU)."""
        a = [self.gn1(self.conv1(x))]
        for stage in self.stages():
            out = self.act(a[-1])
            for block in stage[:-1]:
                out = block(out)
            a.append(stage[-1].preactivation(out))
        return self.linear(self.pool(self.act(a[-1])).flatten(1)), a

    def forward_from(self, level: int, h):
        """The logits from h = ReLU(a_level): stages level+1..4, the pool and the classifier of
        this model (FedMLB runs them on the frozen teacher; the gradient flows back into h)."""
        if not 0 <= level < self.levels:
            raise ValueError(f"level {level} is not one of 0..{self.levels - 1}")
        for stage in self.stages()[level:]:
            h = stage(h)
        return self.linear(self.pool(h).flatten(1))
