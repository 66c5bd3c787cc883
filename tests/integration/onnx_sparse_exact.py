#!/usr/bin/python3
"""onnx_sparse_exact.py - data, references and comparisons of
test_onnx_sparse_exact.sh (the click model of onnx_sparse.py, its tables
emb.weight (padding id 0) and bag.weight trained on the pservers).
  onnx_sparse_exact.py data DIR: onnx_sparse.py's model.onnx (and
      oob.onnx: one Embedding read by ids without a modulo) over N samples,
      and for T in MERGE_T the training set reordered as mT_*.npy: T
      trainers' strided shards of a step of BATCH, one after the other, so
      1 trainer merging T micro-batches of BATCH / T takes trainer j's
      samples as its micro-batch j;
  onnx_sparse_exact.py check DIR FILE: the checks FILE lists, one a line:
    same A B WHAT: exports A and B hold the same ids and row bits;
    bits A B WHAT: those, and the same bits of every dense initializer;
    differ A B WHAT: their rows do not;
    close A B TOL WHAT: the same ids, the rows and dense initializers
      within TOL;
    ref EXPORT OPT STEPS BATCH WHAT: EXPORT's tables within 1e-5 of the
      tables after STEPS steps of BATCH samples (file order), the dense
      parameters by SGD lr 0.3 and the rows by OPT (the pservers' rule on
      the rows a step names, docs/DESIGN.md section 5, in numpy; SGD and
      Adagrad also by torch.optim, and Adam by torch.optim.Adam on the rows
      every step touched: dense Adam also moves a row of zero gradient,
      and SparseAdam adds eps before the bias correction, ~1e-5 apart);
    range EXPORT R WHAT: every row in [-R, R], not all equal;
  prints "ok: WHAT" or "FAIL: WHAT: what differs" per line."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "deploy", "examples", "recsys"))
import onnx_sparse as base  # noqa: E402
import load_sparse_export as lse  # noqa: E402

N = 48
BATCH, MERGE_T = 12, (2, 3)
TABLES = ("emb.weight", "bag.weight")
# the pservers' hyperparameters of each row optimizer (the job's keys)
HP = {"sgd": {"lr": 0.3}, "adagrad": {"lr": 0.3, "eps": 1e-10},
      "adam": {"lr": 0.05, "b1": 0.9, "b2": 0.999, "eps": 1e-8},
      "rowwise_adagrad": {"lr": 0.3, "eps": 1e-8},
      "ftrl": {"lr": 0.3, "l1": 0.01, "l2": 0.02, "beta": 0.5, "lr_power": -0.5}}


class Oob(torch.nn.Module):
    """An Embedding read by the ids as they come (no modulo)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(base.V1, 2)
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, ids, bag):
        return self.fc(self.emb(ids).sum(1)) + 0 * bag.float().sum(1, keepdim=True)


def merge_order(t):
    """Sample positions of the merge file: micro-batch m = s T + j of
    BATCH / T samples is trainer j's share of step s (the loader's shard of
    rank j takes samples j, j + T, ...)."""
    b = BATCH // t
    return [((p // b // t) * b + p % b) * t + (p // b) % t for p in range(N)]


def data(d):
    base.N = N
    base.make(d)
    for t in MERGE_T:
        order = merge_order(t)
        assert sorted(order) == list(range(N))
        for name in ("ids", "bag", "y"):
            a = np.load(os.path.join(d, name + ".npy"))
            np.save(os.path.join(d, "m%d_%s.npy" % (t, name)), a[order])
    sample = (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 4, dtype=torch.int64))
    torch.onnx.export(Oob(), sample, os.path.join(d, "oob.onnx"), opset_version=17,
                      input_names=["ids", "bag"], output_names=["logit"],
                      dynamic_axes={"ids": {0: "batch"}, "bag": {0: "batch"},
                                    "logit": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


class RowOpt:
    """The pservers' rule for one table, on float64 rows (state per row)."""

    def __init__(self, kind, w):
        self.kind, self.hp, self.w = kind, HP[kind], w
        self.s1, self.s2 = np.zeros_like(w), np.zeros_like(w)
        self.t = np.zeros(w.shape[0], np.int64)

    def step(self, rows, g):
        h, p = self.hp, self.w
        for r, gr in zip(rows, g):
            self.t[r] += 1
            getattr(self, self.kind)(h, p, r, gr)

    def sgd(self, h, p, r, g):
        p[r] -= h["lr"] * g

    def adagrad(self, h, p, r, g):
        self.s1[r] += g * g
        p[r] -= h["lr"] * g / (np.sqrt(self.s1[r]) + h["eps"])

    def adam(self, h, p, r, g):
        t = self.t[r]
        self.s1[r] = h["b1"] * self.s1[r] + (1 - h["b1"]) * g
        self.s2[r] = h["b2"] * self.s2[r] + (1 - h["b2"]) * g * g
        mh, vh = self.s1[r] / (1 - h["b1"] ** t), self.s2[r] / (1 - h["b2"] ** t)
        p[r] -= h["lr"] * mh / (np.sqrt(vh) + h["eps"])

    def rowwise_adagrad(self, h, p, r, g):
        self.s1[r, 0] += np.mean(g * g)
        p[r] -= h["lr"] / (np.sqrt(self.s1[r, 0]) + h["eps"]) * g

    def ftrl(self, h, p, r, g):
        z, n = self.s1, self.s2
        n2 = n[r] + g * g
        z[r] += g - (np.sqrt(n2) - np.sqrt(n[r])) / h["lr"] * p[r]
        n[r] = n2
        den = (h["beta"] + np.sqrt(n[r])) / h["lr"] + 2 * h["l2"]
        p[r] = np.where(np.abs(z[r]) <= h["l1"], 0.0, (np.sign(z[r]) * h["l1"] - z[r]) / den)


def touched(x, v, pad):
    ids = np.unique(x.numpy() % v)
    return ids[ids != pad] if pad is not None else ids


def train(d, kind, steps, batch, use_torch):
    """The tables after the steps: by RowOpt, or (use_torch) by torch.optim;
    and per table the rows every step touched."""
    model = base.Click()
    lse.load_onnx_initializers(model, os.path.join(d, "model.onnx"))
    (ids, bag), y = base.tensors(d, "")
    params = dict(model.named_parameters())
    ops = {n: RowOpt(kind, params[n].detach().double().numpy().copy()) for n in TABLES}
    if use_torch:
        h, tables = HP[kind], [params[n] for n in TABLES]
        topt = {"sgd": lambda: torch.optim.SGD(tables, lr=h["lr"]),
                "adagrad": lambda: torch.optim.Adagrad(tables, lr=h["lr"], eps=h["eps"]),
                "adam": lambda: torch.optim.Adam(tables, lr=h["lr"], betas=(h["b1"], h["b2"]),
                                                 eps=h["eps"])}[kind]()
    every = {n: None for n in TABLES}
    for s in range(steps):
        lo = (s * batch) % ids.shape[0]
        x = (ids[lo:lo + batch], bag[lo:lo + batch])
        model.zero_grad()
        base.loss_of(model(*x), y[lo:lo + batch]).backward()
        with torch.no_grad():
            for name, v, pad, xx in (("emb.weight", base.V1, 0, x[0]),
                                     ("bag.weight", base.V2, None, x[1])):
                rows = touched(xx, v, pad)
                every[name] = rows if every[name] is None else np.intersect1d(every[name], rows)
                ops[name].step(rows, params[name].grad.double().numpy()[rows])
                if not use_torch:
                    params[name].copy_(torch.from_numpy(ops[name].w))
            for p in model.fc.parameters():
                p -= 0.3 * p.grad
            if use_torch:
                topt.step()
    return {n: params[n].detach().double().numpy() for n in TABLES}, every


def ref(d, kind, steps, batch, export):
    """The largest difference of EXPORT's rows from the references'."""
    worst = 0.0
    for use_torch in ((0, 1) if kind in ("sgd", "adagrad", "adam") else (0,)):
        want, every = train(d, kind, steps, batch, use_torch)
        for name in TABLES:
            eids, erows = lse.read_table(export, name)
            if use_torch and kind == "adam":  # Adam moves a row no step touched
                keep = np.isin(eids, every[name])
                eids, erows = eids[keep], erows[keep]
            worst = max(worst, float(np.abs(erows - want[name][eids]).max()))
    return worst


def sorted_table(export, name):
    ids, rows = lse.read_table(export, name)
    o = np.argsort(ids, kind="stable")
    return ids[o], np.ascontiguousarray(rows[o])


def dense(export):
    """The export's initializers other than the tables, by name."""
    import onnx
    from onnx import numpy_helper
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(export).graph.initializer
            if i.name not in TABLES}


def differs(name, ra, rb, tol):
    """"" when ra and rb are within tol (0: the same bits), else how not."""
    if ra.shape != rb.shape:
        return "%s: shapes %s and %s" % (name, ra.shape, rb.shape)
    ra, rb = np.ascontiguousarray(ra), np.ascontiguousarray(rb)
    if (ra.tobytes() == rb.tobytes() if tol == 0 else np.abs(ra - rb).max() <= tol):
        return ""
    return "%s: %d values differ, by at most %.3g" % (
        name, int((ra != rb).sum()), float(np.abs(ra - rb).max()))


def same(a, b, tol=0.0, rows_only=True):
    """"" when A and B hold the same ids, and rows (and unless rows_only
    dense initializers) within tol (0: the same bits), else what differs."""
    bad = []
    for name in TABLES:
        (ia, ra), (ib, rb) = sorted_table(a, name), sorted_table(b, name)
        bad.append("%s: ids differ" % name if not np.array_equal(ia, ib)
                   else differs(name, ra, rb, tol))
    if not rows_only:
        da, db = dense(a), dense(b)
        if sorted(da) != sorted(db):
            bad.append("dense initializers %s and %s" % (sorted(da), sorted(db)))
        else:
            bad.extend(differs(name, da[name], db[name], tol) for name in sorted(da))
    return "; ".join(x for x in bad if x)


def in_range(export, r):
    """"" when every row lies in [-R, R] and not all are equal."""
    out = []
    for name in TABLES:
        _, rows = lse.read_table(export, name)
        if rows.size == 0 or np.abs(rows).max() > r or np.all(rows == rows.flat[0]):
            out.append("%s: [%g, %g] over %d rows" % (name, rows.min(), rows.max(),
                                                      rows.shape[0]))
    return "; ".join(out)


def checks(d, path):
    """Each line of PATH: a check of the module's docstring; prints ok or
    FAIL lines."""
    for line in open(path):
        w = line.split()
        if w[0] in ("same", "bits"):
            bad, what = same(w[1], w[2], rows_only=w[0] == "same"), " ".join(w[3:])
        elif w[0] == "differ":
            bad = "" if same(w[1], w[2]) else "the same bits"
            what = " ".join(w[3:])
        elif w[0] == "close":
            bad, what = same(w[1], w[2], float(w[3]), False), " ".join(w[4:])
        elif w[0] == "ref":
            m, what = ref(d, w[2], int(w[3]), int(w[4]), w[1]), " ".join(w[5:])
            bad = "" if m <= 1e-5 else "differs from the reference by %.3g" % m
            what += " (within %.3g)" % m
        else:
            bad, what = in_range(w[1], float(w[2])), " ".join(w[3:])
        print("FAIL: %s: %s" % (what, bad) if bad else "ok: " + what)


if __name__ == "__main__":
    if sys.argv[1] == "data":
        data(sys.argv[2])
    else:
        checks(sys.argv[2], sys.argv[3])
