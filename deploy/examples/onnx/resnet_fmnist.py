#!/usr/bin/python3
"""resnet_fmnist.py - a small ResNet for Fashion-MNIST, defined in PyTorch
and exported to ONNX for Flotilla (deploy/examples/onnx/resnet_fmnist.yaml).

  stem    conv3x3(1->24) BN ReLU                      28x28
  stage1  basic block 24                              28x28
  stage2  basic block 24->48, stride 2 (1x1 conv+BN shortcut)   14x14
  stage3  basic block 48->96, stride 2 (1x1 conv+BN shortcut)    7x7
  head    global average pooling, linear 96->10

A basic block is conv3x3-BN-ReLU-conv3x3-BN plus the shortcut, then ReLU
(He et al., 2016).  About 174 K parameters: at 16-32-64 channels (78 K)
the model stopped short of 0.93 test accuracy in 10 epochs (0.928-0.929,
15 epochs included), at 24-48-96 it reaches it.

    /usr/bin/python3 deploy/examples/onnx/resnet_fmnist.py export OUT.onnx [--seed N]
    /usr/bin/python3 deploy/examples/onnx/resnet_fmnist.py torch DATA_DIR [--epochs E]
the second trains the same model in PyTorch with the job's settings (the
reference of tests/bench/bench_onnx.sh).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist_onnx  # noqa: E402

# the job's settings (resnet_fmnist.yaml), for the PyTorch reference
JOB = dict(epochs=10, batch=128, opt_name="momentum", lr=0.1, momentum=0.9, weight_decay=5e-4)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNetFMNIST(nn.Module):
    def __init__(self, widths=(24, 48, 96), classes=10):
        super().__init__()
        self.stem = nn.Conv2d(1, widths[0], 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(widths[0])
        self.layer1 = BasicBlock(widths[0], widths[0])
        self.layer2 = BasicBlock(widths[0], widths[1], stride=2)
        self.layer3 = BasicBlock(widths[1], widths[2], stride=2)
        self.fc = nn.Linear(widths[2], classes)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def build(seed=1):
    torch.manual_seed(seed)
    return ResNetFMNIST()


if __name__ == "__main__":
    fmnist_onnx.main(__doc__, build, JOB, "ResNet")
