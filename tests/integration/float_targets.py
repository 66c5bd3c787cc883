#!/usr/bin/python3
"""float_targets.py DIR LOSS - data and model of test_examples_onnx.sh's
float-target case: a learnable synthetic task as numpy.save files
(train/test x: float32 (n, 8); y: float32 (n, 2) = x @ W for mse, or
(x @ W > 0) for bce_with_logits) and a small PyTorch MLP 8-16-2 exported as
Flotilla imports it (DIR/model.onnx)."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "deploy", "examples", "onnx"))
import fmnist_onnx  # noqa: E402

d, loss = sys.argv[1], sys.argv[2]
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
