#!/usr/bin/python3
"""onnx_presets_torch.py - the PyTorch side of test_onnx_export.sh.

  data DIR
      writes train_x/train_y/test_x/test_y .npy: 1x8x8 float32 images whose
      class (of 4) is the argmax of a fixed linear map of the pixels, so a
      few epochs learn something (512 training, 256 test samples).
  eval ONNX DIR --kind K [--act relu|tanh] [--norm none|bn] [--hidden 16,8]
       [--conv 4,8] [--kernel 3] [--fc-hidden 12] [--bn-eps 1e-5]
      runs onnx.checker on the exported model, builds the PyTorch module that
      defines the preset (flotilla's logreg / mlp / cnn, PyTorch's parameter
      names), loads the model's initializers into it by name (every one must
      be used, every parameter and buffer set), evaluates DIR's test set in
      eval mode and prints "test loss: L, acc1: A".
Needs Debian's python3-torch and python3-onnx.
"""
import argparse
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

IN = (1, 8, 8)
CLASSES = 4


def data(d):
    os.makedirs(d, exist_ok=True)
    g = np.random.default_rng(3)
    w = g.standard_normal((CLASSES, int(np.prod(IN)))).astype(np.float32)
    for split, n in (("train", 512), ("test", 256)):
        x = g.standard_normal((n, *IN)).astype(np.float32)
        y = (x.reshape(n, -1) @ w.T).argmax(1).astype(np.int64)
        np.save(os.path.join(d, f"{split}_x.npy"), x)
        np.save(os.path.join(d, f"{split}_y.npy"), y)


class Preset(nn.Module):
    """flotilla's presets: logreg = fc0; mlp = fc0..fcN with the activation
    between; cnn = 2 x [conv (padding k//2; no bias before bn) -> bn -> act
    -> 2x2 max-pool], flatten, fc0 (fc_hidden) -> act, fc1."""

    def __init__(self, a):
        super().__init__()
        self.kind = a.kind
        self.act = nn.ReLU() if a.act == "relu" else nn.Tanh()
        d = int(np.prod(IN))
        if a.kind == "logreg":
            self.fc0 = nn.Linear(d, CLASSES)
        elif a.kind == "mlp":
            sizes = [d] + a.hidden + [CLASSES]
            self.n = len(sizes) - 1
            for i in range(self.n):
                setattr(self, f"fc{i}", nn.Linear(sizes[i], sizes[i + 1]))
        else:
            c0, c1 = a.conv
            bn = a.norm == "bn"
            self.bn = bn
            self.conv0 = nn.Conv2d(IN[0], c0, a.kernel, padding=a.kernel // 2, bias=not bn)
            self.conv1 = nn.Conv2d(c0, c1, a.kernel, padding=a.kernel // 2, bias=not bn)
            if bn:
                self.bn0 = nn.BatchNorm2d(c0, eps=a.bn_eps)
                self.bn1 = nn.BatchNorm2d(c1, eps=a.bn_eps)
            flat = c1 * (IN[1] // 4) * (IN[2] // 4)
            self.fc0 = nn.Linear(flat, a.fc_hidden)
            self.fc1 = nn.Linear(a.fc_hidden, CLASSES)

    def forward(self, x):
        if self.kind == "logreg":
            return self.fc0(x.flatten(1))
        if self.kind == "mlp":
            h = x.flatten(1)
            for i in range(self.n):
                h = getattr(self, f"fc{i}")(h)
                if i < self.n - 1:
                    h = self.act(h)
            return h
        h = x
        for i in range(2):
            h = getattr(self, f"conv{i}")(h)
            if self.bn:
                h = getattr(self, f"bn{i}")(h)
            h = nn.functional.max_pool2d(self.act(h), 2)
        return self.fc1(self.act(self.fc0(h.flatten(1))))


def evaluate(a):
    m = onnx.load(a.onnx)
    onnx.checker.check_model(m, full_check=True)
    net = Preset(a)
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
             for t in m.graph.initializer}
    state = net.state_dict()
    want = {k for k in state if not k.endswith("num_batches_tracked")}
    if set(inits) != want:
        raise SystemExit(f"initializers {sorted(inits)} are not the module's {sorted(want)}")
    net.load_state_dict(inits, strict=False)
    net.eval()
    x = torch.from_numpy(np.load(os.path.join(a.dir, "test_x.npy")))
    y = torch.from_numpy(np.load(os.path.join(a.dir, "test_y.npy")))
    with torch.no_grad():
        out = net(x)
    loss = nn.functional.cross_entropy(out, y).item()
    acc = (out.argmax(1) == y).double().mean().item()
    print(f"test loss: {loss:.5f}, acc1: {acc:.5f}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("dir")
    e = sub.add_parser("eval")
    e.add_argument("onnx")
    e.add_argument("dir")
    e.add_argument("--kind", required=True)
    e.add_argument("--act", default="relu")
    e.add_argument("--norm", default="none")
    e.add_argument("--hidden", default="16,8", type=lambda s: [int(v) for v in s.split(",")])
    e.add_argument("--conv", default="4,8", type=lambda s: [int(v) for v in s.split(",")])
    e.add_argument("--kernel", default=3, type=int)
    e.add_argument("--fc-hidden", default=12, type=int)
    e.add_argument("--bn-eps", default=1e-5, type=float)
    a = p.parse_args()
    torch.set_num_threads(1)
    data(a.dir) if a.cmd == "data" else evaluate(a)


if __name__ == "__main__":
    main()
