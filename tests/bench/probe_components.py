#!/usr/bin/python3
"""probe_components.py - how many everyday PyTorch components train on
Flotilla with PyTorch's numbers.

Each of the 53 components below is wrapped into a small classifier
(component, flatten, Linear head over 4 classes), exported as a user would
(opset 17, training mode, no constant folding, dynamic batch), and trained
by flotilla-trainer in local mode for 4 steps of plain SGD on 64 random
samples, batches of 16 in file order. The same module, from the same
initializers, is trained by torch.optim.SGD on the same batches. A
component "trains" when the trainer exits 0, and "matches" when its logged
loss of every batch is PyTorch's within 1e-4 relative.

    /usr/bin/python3 tests/bench/probe_components.py BUILD_DIR [NAME ...]

prints one line per component (trains/matches/refused, with the first
error line) and the totals as `name: value unit` lines. Not a pass/fail
test: a benchmark of coverage.
"""
import copy
import os
import re
import subprocess
import sys
import tempfile

import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

B, N, K, STEPS, LR = 16, 64, 4, 4, 0.05


class Head(nn.Module):
    """component -> flatten -> Linear(K); the head's width from a trial forward."""

    def __init__(self, comp, example, pick=None):
        super().__init__()
        self.comp, self.pick = comp, pick
        with torch.no_grad():
            out = self.body(example)
        self.fc = nn.Linear(out.shape[1], K)

    def body(self, *x):
        y = self.comp(*x)
        if self.pick is not None:
            y = self.pick(y)
        return torch.flatten(y, 1)

    def forward(self, *x):
        return self.fc(self.body(*x))


class Call(nn.Module):
    """A function as a module (for components PyTorch spells as functions)."""

    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.p = nn.ParameterList([nn.Parameter(p) for p in params])

    def forward(self, x):
        return self.fn(x, *self.p)


class MHA(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
        self.mask = mask

    def forward(self, x):
        if self.mask == "causal":
            L = x.shape[1]
            m = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
            return self.mha(x, x, x, attn_mask=m, need_weights=False)[0]
        return self.mha(x, x, x, need_weights=False)[0]


class Bag(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.bag = nn.EmbeddingBag(20, 8, mode=mode)

    def forward(self, ids):
        return self.bag(ids)


def inputs(kind, g):
    """(x, dtype name) of N samples for an input kind."""
    if kind == "vec":
        return torch.randn(N, 16, generator=g)
    if kind == "seq":      # [N, L, C]
        return torch.randn(N, 8, 16, generator=g)
    if kind == "chan1d":   # [N, C, L]
        return torch.randn(N, 4, 16, generator=g)
    if kind == "img":      # [N, C, H, W]
        return torch.randn(N, 3, 8, 8, generator=g)
    if kind == "ids":      # int64 token ids [N, L]
        return torch.randint(0, 20, (N, 6), generator=g)
    raise ValueError(kind)


def components():
    """(name, input kind, module factory, pick) for the 53 components."""
    first = lambda y: y[0]  # noqa: E731 (RNNs return (output, state))
    c = [
        ("Linear", "vec", lambda: nn.Linear(16, 12)),
        ("Conv1d", "chan1d", lambda: nn.Conv1d(4, 6, 3, padding=1)),
        ("Conv1d dilated", "chan1d", lambda: nn.Conv1d(4, 6, 3, padding=2, dilation=2)),
        ("Conv2d", "img", lambda: nn.Conv2d(3, 4, 3, padding=1)),
        ("Conv2d groups", "img", lambda: nn.Conv2d(3, 6, 3, padding=1, groups=3)),
        ("ConvTranspose1d", "chan1d", lambda: nn.ConvTranspose1d(4, 3, 3, stride=2)),
        ("ConvTranspose2d", "img", lambda: nn.ConvTranspose2d(3, 2, 2, stride=2)),
        ("MaxPool1d", "chan1d", lambda: nn.MaxPool1d(2)),
        ("MaxPool2d", "img", lambda: nn.MaxPool2d(2)),
        ("AvgPool1d", "chan1d", lambda: nn.AvgPool1d(2)),
        ("AvgPool2d", "img", lambda: nn.AvgPool2d(2)),
        ("AdaptiveAvgPool2d", "img", lambda: nn.AdaptiveAvgPool2d(1)),
        ("BatchNorm1d", "vec", lambda: nn.BatchNorm1d(16)),
        ("BatchNorm2d", "img", lambda: nn.BatchNorm2d(3)),
        ("LayerNorm", "seq", lambda: nn.LayerNorm(16)),
        ("GroupNorm", "img", lambda: nn.GroupNorm(1, 3)),
        ("InstanceNorm1d", "chan1d", lambda: nn.InstanceNorm1d(4, affine=True)),
        ("InstanceNorm2d", "img", lambda: nn.InstanceNorm2d(3, affine=True)),
        ("Dropout", "vec", lambda: nn.Dropout(0.0)),
        ("Embedding", "ids", lambda: nn.Embedding(20, 8)),
        ("EmbeddingBag sum", "ids", lambda: Bag("sum")),
        ("EmbeddingBag mean", "ids", lambda: Bag("mean")),
        ("LSTM", "seq", lambda: nn.LSTM(16, 8, batch_first=True)),
        ("LSTM bidirectional 2 layers", "seq",
         lambda: nn.LSTM(16, 8, num_layers=2, bidirectional=True, batch_first=True)),
        ("GRU", "seq", lambda: nn.GRU(16, 8, batch_first=True)),
        ("RNN", "seq", lambda: nn.RNN(16, 8, batch_first=True)),
        ("MultiheadAttention", "seq", lambda: MHA(None)),
        ("MultiheadAttention causal mask", "seq", lambda: MHA("causal")),
        ("TransformerEncoderLayer", "seq",
         lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)),
        ("ReLU", "vec", nn.ReLU), ("ReLU6", "vec", nn.ReLU6),
        ("LeakyReLU", "vec", nn.LeakyReLU), ("PReLU", "vec", nn.PReLU),
        ("ELU", "vec", nn.ELU), ("SELU", "vec", nn.SELU), ("CELU", "vec", nn.CELU),
        ("GELU", "vec", nn.GELU), ("SiLU", "vec", nn.SiLU), ("Mish", "vec", nn.Mish),
        ("Sigmoid", "vec", nn.Sigmoid), ("Tanh", "vec", nn.Tanh),
        ("Softplus", "vec", nn.Softplus), ("Softsign", "vec", nn.Softsign),
        ("Hardswish", "vec", nn.Hardswish), ("Hardsigmoid", "vec", nn.Hardsigmoid),
        ("Hardtanh", "vec", nn.Hardtanh),
        ("Softmax", "vec", lambda: nn.Softmax(dim=1)),
        ("LogSoftmax", "vec", lambda: nn.LogSoftmax(dim=1)),
        ("Upsample nearest", "img", lambda: nn.Upsample(scale_factor=2, mode="nearest")),
        ("Upsample bilinear", "img",
         lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)),
        ("ZeroPad2d", "img", lambda: nn.ZeroPad2d(1)),
        ("ReflectionPad2d", "img", lambda: nn.ReflectionPad2d(1)),
        ("ReplicationPad2d", "img", lambda: nn.ReplicationPad2d(1)),
    ]
    picks = {"LSTM": first, "LSTM bidirectional 2 layers": first, "GRU": first, "RNN": first}
    return [(n, k, f, picks.get(n)) for n, k, f in c]


def torch_losses(model, x, y):
    m = copy.deepcopy(model)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    out = []
    for s in range(STEPS):
        xb, yb = x[s * B:(s + 1) * B], y[s * B:(s + 1) * B]
        opt.zero_grad()
        loss = F.cross_entropy(m(xb), yb)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


JOB = """model:
  kind: onnx
  path: {onnx}
  loss: softmax_cross_entropy
  num_classes: {K}
data:
  format: npy
{inputs}  train_y: {y}
  test_y: {y}
  shuffle: false
optimizer:
  name: sgd
  lr: {LR}
train:
  epochs: 1
  batch_size: {B}
  seed: 1
  eval: false
  log_interval: 1
  num_threads: 1
  max_steps: {STEPS}
"""


def probe(build, tmp, name, kind, make, pick, g):
    torch.manual_seed(0)
    x = inputs(kind, g)
    y = torch.randint(0, K, (N,), generator=g)
    model = Head(make(), x[:2], pick)
    tag = re.sub(r"[^A-Za-z0-9]+", "_", name)
    onnx_path = os.path.join(tmp, tag + ".onnx")
    try:
        torch.onnx.export(copy.deepcopy(model), (x[:B],), onnx_path, opset_version=17,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    except Exception as e:  # noqa: BLE001 (a component PyTorch cannot export)
        return "no-export", str(e).splitlines()[0][:120]
    xp, yp = os.path.join(tmp, tag + ".x.npy"), os.path.join(tmp, tag + ".y.npy")
    np.save(xp, x.numpy())
    np.save(yp, y.numpy().astype(np.int64))
    job = os.path.join(tmp, tag + ".yaml")
    with open(job, "w") as f:
        inp = (f"  inputs:\n    input: {xp}\n  test_inputs:\n    input: {xp}\n" if kind == "ids"
               else f"  train_x: {xp}\n  test_x: {xp}\n")
        f.write(JOB.format(onnx=onnx_path, inputs=inp, y=yp, K=K, LR=LR, B=B, STEPS=STEPS))
    r = subprocess.run([os.path.join(build, "flotilla-trainer"), "--config", job],
                       capture_output=True, text=True, timeout=120)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        err = [ln for ln in log.splitlines() if " E " in ln] or log.strip().splitlines()[-1:] or [""]
        return "refused", err[0].split(" E ", 1)[-1][:220]
    ours = [float(v) for v in re.findall(r"\[Epoch 0, batch \d+\] loss: ([0-9.eE+-]+|nan|inf)", log)]
    ref = torch_losses(model, x, y)
    if len(ours) < STEPS:
        return "trains", f"{len(ours)} loss lines"
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(ours, ref))
    return ("matches" if worst <= 1e-4 else "trains"), f"max rel loss diff {worst:.2e}"


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    only = set(sys.argv[2:])
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(7)
    counts = {"matches": 0, "trains": 0, "refused": 0, "no-export": 0}
    comps = components()
    keep = os.environ.get("PROBE_KEEP")
    with tempfile.TemporaryDirectory(prefix="fl_probe_") as tmp0:
        tmp = keep or tmp0
        for name, kind, make, pick in comps:
            if only and name not in only:
                continue
            status, why = probe(build, tmp, name, kind, make, pick, g)
            counts[status] += 1
            print(f"{name:32s} {status:9s} {why}", flush=True)
    total = sum(counts.values())
    trained = counts["matches"] + counts["trains"]
    print(f"components_probed: {total} components")
    print(f"components_train: {trained} of {total}")
    print(f"components_match_torch: {counts['matches']} of {total}")
    print(f"components_share_training: {trained / max(total, 1):.3f} ratio")


if __name__ == "__main__":
    main()
