#!/usr/bin/python3
"""valid_auc.py DIR LINE - test_valid.sh's check of a binary model's
evaluation line: LINE (the trainer's "... auc: A, logloss: L" line of the
untrained bce_with_logits model of float_targets.py in DIR) must carry the
AUC (Mann-Whitney, ties counting half) and the mean log loss that numpy
computes over every output value of PyTorch's test outputs
(DIR/test_out0.npy, through the sigmoid) against DIR/test_y.npy; exits 1
otherwise."""
import os
import re
import sys

import numpy as np


def auc(p, y):
    order = np.argsort(p, kind="mergesort")
    p, y = p[order], y[order]
    # ranks with ties averaged
    ranks = np.empty(len(p))
    i = 0
    while i < len(p):
        j = i
        while j < len(p) and p[j] == p[i]:
            j += 1
        ranks[i:j] = (i + j + 1) / 2.0
        i = j
    pos = y > 0.5
    npos, nneg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - npos * (npos + 1) / 2.0) / (npos * nneg)


d, line = sys.argv[1], sys.argv[2]
out = np.load(os.path.join(d, "test_out0.npy")).astype(np.float32).ravel()
y = np.load(os.path.join(d, "test_y.npy")).ravel()
p = (1.0 / (1.0 + np.exp(-out.astype(np.float64)))).astype(np.float32).astype(np.float64)
q = np.clip(p, 1e-15, 1 - 1e-15)
want = {"auc": auc(p, y), "logloss": float(-(y * np.log(q) + (1 - y) * np.log(1 - q)).mean())}
got = dict(re.findall(r"(auc|logloss): ([-0-9.naif]+)", line))
bad = [k for k, v in want.items() if k not in got or abs(float(got[k]) - v) > 2e-5]
print(f"{'FAIL' if bad else 'ok'}: logged {got}, numpy "
      f"{ {k: round(float(v), 5) for k, v in want.items()} }")
sys.exit(1 if bad else 0)
