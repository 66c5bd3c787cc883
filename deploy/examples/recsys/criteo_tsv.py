"""criteo_tsv.py - Criteo TSV files read into numpy as Flotilla's reader
(trainer/data_criteo.c) turns them into model inputs, for the PyTorch side
of the recsys examples (torch_train.py, eval_export.py):

  dense  [n, 13] float32: log(1 + x) of each integer, 0 for an empty or
         negative one;
  sparse [n, 26] int64: the splitmix64 finalizer of
         (column << 33) | (present << 32) | value, top bit cleared
         (fl_criteo_hash), modulo hash_buckets when that is > 0;
  label  [n] float32 0/1.

Lines are taken in file order (files in the order given, .gz read as
gzip, CRLF taken); bad lines are refused (the examples' data has none).
Needs numpy only."""
import gzip

import numpy as np

N_DENSE, N_SPARSE = 13, 26
_MASK63 = np.uint64((1 << 63) - 1)


def criteo_hash(column, value, present):
    """fl_criteo_hash over arrays (uint64 arithmetic wraps as in C)."""
    k = (column.astype(np.uint64) << np.uint64(33)) | \
        (present.astype(np.uint64) << np.uint64(32)) | value.astype(np.uint64)
    with np.errstate(over="ignore"):
        k = k + np.uint64(0x9E3779B97F4A7C15)
        k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (k ^ (k >> np.uint64(31))) & _MASK63


def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        for line in f:
            line = line.rstrip("\n").rstrip("\r")
            if line:
                yield line


def read(paths, hash_buckets=0, limit=0):
    """(dense, sparse, label) of the files' samples in order; limit > 0:
    the first `limit` only."""
    labels, ints, cats = [], [], []
    for path in ([paths] if isinstance(paths, str) else paths):
        for line in _lines(path):
            f = line.split("\t")
            if len(f) != 1 + N_DENSE + N_SPARSE:
                raise ValueError(f"{path}: a line of {len(f)} fields, not 40")
            labels.append(float(f[0]))
            ints.append([int(x) if x else 0 for x in f[1:1 + N_DENSE]])
            cats.append([int(x, 16) if x else -1 for x in f[1 + N_DENSE:]])
            if limit and len(labels) == limit:
                break
        if limit and len(labels) == limit:
            break
    i = np.array(ints, dtype=np.int64).reshape(-1, N_DENSE)
    dense = np.where(i > 0, np.log1p(np.maximum(i, 0).astype(np.float64)), 0.0).astype(np.float32)
    c = np.array(cats, dtype=np.int64).reshape(-1, N_SPARSE)
    present = c >= 0
    col = np.broadcast_to(np.arange(N_SPARSE, dtype=np.int64), c.shape)
    ids = criteo_hash(col, np.where(present, c, 0), present)
    if hash_buckets > 0:
        ids = ids % np.uint64(hash_buckets)
    return dense, ids.astype(np.int64), np.array(labels, dtype=np.float32)


def auc(scores, labels):
    """P(score of a positive > score of a negative), ties counting 1/2."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order] > 0.5
    pos, neg = y.sum(), (~y).sum()
    if pos == 0 or neg == 0:
        return float("nan")
    _, start, counts = np.unique(s, return_index=True, return_counts=True)
    neg_below, total = 0.0, 0.0
    for a, n in zip(start, counts):
        p = y[a:a + n].sum()
        total += p * neg_below + p * (n - p) / 2.0
        neg_below += n - p
    return total / (pos * neg)
