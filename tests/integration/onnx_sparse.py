#!/usr/bin/python3
"""onnx_sparse.py DIR - model, data and PyTorch's reference numbers of
test_onnx_sparse.sh: a click model over two named int64 inputs whose two
embedding tables train on the pservers (pserver.sparse_tables):
  ids [N, 3] -> nn.Embedding(V1, 3, padding_idx=0) of ids % V1, summed;
  bag [N, 4] -> nn.EmbeddingBag(V2, 2, mode sum) of bag % V2 (fixed bags);
  the two concatenated -> Linear -> one logit (BCE with logits).
The ids are drawn beyond the tables (the model takes them modulo V, in the
graph) and some land on the padding row.  Writes DIR/model.onnx, the .npy
inputs and float targets of a training set (N samples) and a test set, and
DIR/ref.txt: per line the training loss before step s and, after it, the
test log loss and AUC (full-batch SGD, lr 0.5, every parameter), for
STEPS steps; DIR/matmul.onnx: a table "w" read by a MatMul (refused).
DIRsoftmax: the same with a head of 3 classes, int64 class ids and
cross-entropy; its ref.txt holds the training loss, the test loss and the
test accuracy.
  onnx_sparse.py DIR check EXPORT: the exported model (dense initializers
from EXPORT, tables from EXPORT.<table>.{ids,rows}.npy through
deploy/examples/recsys/load_sparse_export.py) scored on the test set:
prints "logloss L auc A small-vocabulary refused" (the last: the
tables into a module of a smaller vocabulary are refused)."""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

N, NT, V1, V2, D1, D2, STEPS, LR = 16, 24, 10, 7, 3, 2, 3, 0.3
CLASSES = 1  # 3 while making DIRsoftmax


class Click(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V1, D1, padding_idx=0)
        self.bag = nn.EmbeddingBag(V2, D2, mode="sum")
        self.fc = nn.Linear(D1 + D2, CLASSES)

    def forward(self, ids, bag):
        e = self.emb(ids % V1).sum(1)
        b = self.bag(bag % V2)
        return self.fc(torch.cat([e, b], 1))


def auc(p, y):
    """Mann-Whitney AUC with ties counted half."""
    p, y = np.asarray(p, np.float64), np.asarray(y) > 0.5
    pos, neg = p[y], p[~y]
    if len(pos) == 0 or len(neg) == 0:
        return 0.5
    gt = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return gt / (len(pos) * len(neg))


def loss_of(z, y):
    if CLASSES > 1:
        return nn.functional.cross_entropy(z, y)
    return nn.functional.binary_cross_entropy_with_logits(z, y)


def metrics(model, x, y):
    """Test loss and AUC (one logit) or accuracy (classes)."""
    with torch.no_grad():
        z = model(*x)
        if CLASSES > 1:
            return loss_of(z, y).item(), (z.argmax(1) == y).double().mean().item()
        return loss_of(z, y).item(), auc(torch.sigmoid(z).flatten().numpy(), y.flatten().numpy())


def data(g, n):
    ids = g.integers(0, 3 * V1, (n, 3)).astype(np.int64)
    ids[0, 0] = V1  # the padding row, through the modulo
    bag = g.integers(0, 3 * V2, (n, 4)).astype(np.int64)
    if CLASSES > 1:
        return ids, bag, g.integers(0, CLASSES, n).astype(np.int64)
    y = (g.random((n, 1)) < 0.5).astype(np.float32)
    return ids, bag, y


def tensors(d, prefix):
    return ((torch.from_numpy(np.load(os.path.join(d, prefix + "ids.npy"))),
             torch.from_numpy(np.load(os.path.join(d, prefix + "bag.npy")))),
            torch.from_numpy(np.load(os.path.join(d, prefix + "y.npy"))))


def make(d):
    os.makedirs(d, exist_ok=True)
    g = np.random.default_rng(5)
    for prefix, n in (("", N), ("test_", NT)):
        ids, bag, y = data(g, n)
        np.save(os.path.join(d, prefix + "ids.npy"), ids)
        np.save(os.path.join(d, prefix + "bag.npy"), bag)
        np.save(os.path.join(d, prefix + "y.npy"), y)
    torch.manual_seed(6)
    model = Click()
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sample = (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 4, dtype=torch.int64))
    torch.onnx.export(model, sample, os.path.join(d, "model.onnx"), opset_version=17,
                      input_names=["ids", "bag"], output_names=["logit"],
                      dynamic_axes={"ids": {0: "batch"}, "bag": {0: "batch"},
                                    "logit": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model.load_state_dict(sd)
    x, y = tensors(d, "")
    tx, ty = tensors(d, "test_")
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    lines = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_of(model(*x), y)
        loss.backward()
        opt.step()
        tl, ta = metrics(model, tx, ty)
        lines.append("%.8f %.8f %.8f\n" % (loss.item(), tl, ta))
    with open(os.path.join(d, "ref.txt"), "w") as f:
        f.write("".join(lines))
    matmul(d)


class MatMulTable(nn.Module):
    """A table read by a MatMul (what a sparse table cannot be)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 2))

    def forward(self, ids, bag):
        return (ids.float() @ self.w).sum(1, keepdim=True) + bag.float().sum(1, keepdim=True)


def matmul(d):
    sample = (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 4, dtype=torch.int64))
    torch.onnx.export(MatMulTable(), sample, os.path.join(d, "matmul.onnx"), opset_version=17,
                      input_names=["ids", "bag"], output_names=["logit"],
                      dynamic_axes={"ids": {0: "batch"}, "bag": {0: "batch"},
                                    "logit": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def check(d, export):
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "deploy", "examples", "recsys"))
    import load_sparse_export as lse
    model = Click()
    lse.load_onnx_initializers(model, export)
    lse.load_sparse_export(model, export)
    tl, ta = metrics(model, *tensors(d, "test_"))
    small = nn.Module()
    small.emb = nn.Embedding(V1 // 2, D1)  # a vocabulary the export's ids overflow
    try:
        lse.load_sparse_export(small, export, ["emb.weight"])
        refused = "not refused"
    except ValueError as e:
        refused = "refused" if "outside the module's vocabulary" in str(e) else str(e)
    print("logloss %.8f auc %.8f small-vocabulary %s" % (tl, ta, refused))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "check":
        check(sys.argv[1], sys.argv[3])
    else:
        make(sys.argv[1])
        CLASSES = 3
        make(sys.argv[1] + "softmax")
