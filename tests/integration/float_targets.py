#!/usr/bin/python3
"""float_targets.py DIR LOSS - data and model of test_examples_onnx.sh's
float-target case: a learnable synthetic task as numpy.save files
(train/test x: float32 (n, 8); y: float32 (n, 2) = x @ W for mse, or
(x @ W > 0) for bce_with_logits) and a small PyTorch MLP 8-16-2 exported as
Flotilla imports it (DIR/model.onnx), with the untrained model's test
outputs (DIR/test_out0.npy).
float_targets.py DIR check LINE - LINE, the trainer's test line of the
untrained mse model, must carry numpy's MSE, MAE and R² (over all target
values) of those outputs; exits 1 otherwise."""
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "deploy", "examples", "onnx"))
import fmnist_onnx  # noqa: E402


def check(d, line):
    out, t = np.load(os.path.join(d, "test_out0.npy")), np.load(os.path.join(d, "test_y.npy"))
    e = out.astype(np.float64) - t
    want = {"mse": (e * e).mean(), "mae": np.abs(e).mean(),
            "r2": 1 - (e * e).sum() / ((t - t.mean()) ** 2).sum()}
    got = dict(re.findall(r"(mse|mae|r2): ([-0-9.naif]+)", line))
    bad = [k for k, v in want.items()
           if k not in got or abs(float(got[k]) - v) > 1e-4 * max(1, abs(v))]
    print(f"{'FAIL' if bad else 'ok'}: mse metrics: logged {got}, numpy "
          f"{ {k: round(float(v), 5) for k, v in want.items()} }")
    sys.exit(1 if bad else 0)


d, loss = sys.argv[1], sys.argv[2]
if loss == "check":
    check(d, sys.argv[3])
os.makedirs(d, exist_ok=True)
g = np.random.default_rng(5)
w = g.standard_normal((8, 2)).astype(np.float32)
for split, n in (("train", 1024), ("test", 256)):
    x = g.standard_normal((n, 8)).astype(np.float32)
    t = x @ w
    if loss != "mse":
        t = (t > 0).astype(np.float32)
    np.save(os.path.join(d, f"{split}_x.npy"), x)
    np.save(os.path.join(d, f"{split}_y.npy"), t)
torch.manual_seed(1)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
fmnist_onnx.export(m, os.path.join(d, "model.onnx"), sample_shape=(8,))
with torch.no_grad():
    np.save(os.path.join(d, "test_out0.npy"), m(torch.from_numpy(x)).numpy())
