#!/usr/bin/python3
"""vit_fmnist.py - a small Vision Transformer for Fashion-MNIST, defined in
PyTorch and exported to ONNX for Flotilla (deploy/examples/onnx/vit_fmnist.yaml).

  patch embedding  conv 4x4 stride 4 (1->64): 7x7 = 49 tokens of 64, plus a
                   learned position embedding
  4 encoder blocks pre-norm: x + MHSA(LN(x)) (4 heads of 16), then
                   x + MLP(LN(x)) with MLP = linear 64->128, GELU, linear 128->64
  head             LayerNorm, mean over the tokens, linear 64->10

Attention is written out (Linear, Reshape, Transpose, MatMul, Softmax), as
it exports to plain ONNX ops (Dosovitskiy et al., 2021, without the class
token: mean pooling).  About 0.14 M parameters.

    /usr/bin/python3 deploy/examples/onnx/vit_fmnist.py export OUT.onnx [--seed N]
    /usr/bin/python3 deploy/examples/onnx/vit_fmnist.py torch DATA_DIR [--epochs E]
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist_onnx  # noqa: E402

# the job's settings (vit_fmnist.yaml), for the PyTorch reference
JOB = dict(epochs=10, batch=128, opt_name="adamw", lr=2e-3, weight_decay=0.05,
           warmup_steps=468)


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.scale = (d // heads) ** -0.5
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)
        a = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViTFMNIST(nn.Module):
    def __init__(self, d=64, depth=4, heads=4, hidden=128, patch=4, classes=10):
        super().__init__()
        n = (28 // patch) ** 2
        self.patch = nn.Conv2d(1, d, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, n, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, hidden) for _ in range(depth)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.ln(self.blocks(x)).mean(dim=1))


def build(seed=1):
    torch.manual_seed(seed)
    return ViTFMNIST()


if __name__ == "__main__":
    fmnist_onnx.main(__doc__, build, JOB, "ViT")
