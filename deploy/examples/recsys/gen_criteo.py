#!/usr/bin/python3
"""Write synthetic click logs in Criteo's display-advertising TSV format.

Each line is  label <TAB> I1..I13 <TAB> C1..C26  as in the Kaggle and 1TB
Criteo files, with statistics of the same kind:
  * categoricals: column c has its own vocabulary (sizes spread
    log-uniformly from 10 to 10^6 over the 26 columns) and its values are
    drawn from a Zipf law (exponent 1.05..1.4), so a few values are
    frequent and most are rare; each is written as 8 hex digits (a
    bijective scramble of the value's rank) and is empty with a
    per-column probability (0..30%);
  * integers: heavy-tailed (floor of a log-normal), I2 sometimes negative
    (-1..-3, as in the real data), empty with a per-column probability;
  * labels: a planted model.  The click probability is
    sigmoid(b + sum of per-value weights of 8 columns
               + 3 pairwise crosses <u_c1[value], u_c2[value]> (dim 4)
               + 0.25 * (log1p(I1) + log1p(I5)) - mean),
    b calibrated so that the mean click rate is about 0.25; a model that
    learns the per-value weights and the crosses beats a constant
    predictor measurably (AUC well above 0.5).
The same --seed gives the same file.  Needs numpy only.

  gen_criteo.py --rows 100000 --seed 1 --out train.tsv [--gzip]
"""
import argparse
import gzip
import sys

import numpy as np

N_INT, N_CAT = 13, 26
SIGNAL = [0, 2, 5, 8, 13, 16, 19, 23]     # columns with per-value weights
CROSSES = [(1, 3), (4, 9), (10, 20)]      # columns whose values interact
TABLE = 1 << 16                            # planted weights per column (value rank mod TABLE)
BASE_CTR = 0.25


class Planted:
    """The columns' vocabularies and value laws and the planted model."""

    def __init__(self, seed):
        rng = np.random.default_rng([seed, 0])
        self.vocab = np.round(np.logspace(1, 6, N_CAT)).astype(np.int64)
        rng.shuffle(self.vocab)
        self.alpha = rng.uniform(1.05, 1.4, N_CAT)
        self.cat_empty = rng.uniform(0.0, 0.3, N_CAT)
        self.int_empty = rng.uniform(0.0, 0.45, N_INT)
        self.int_mu = rng.uniform(0.0, 4.0, N_INT)
        self.int_sigma = rng.uniform(0.5, 2.0, N_INT)
        self.salt = rng.integers(0, 1 << 32, N_CAT, dtype=np.uint64)
        self.w = {c: rng.normal(0.0, 0.8, TABLE) for c in SIGNAL}
        self.u = {c: rng.normal(0.0, 0.6, (TABLE, 4)) for pair in CROSSES for c in pair}
        self.cdf = [self._zipf_cdf(c) for c in range(N_CAT)]
        self.bias = 0.0
        self.bias = self._calibrate(seed)

    def _zipf_cdf(self, c):
        p = 1.0 / np.arange(1, self.vocab[c] + 1, dtype=np.float64) ** self.alpha[c]
        cdf = np.cumsum(p)
        return cdf / cdf[-1]

    def draw(self, rng, n):
        """n rows: integer features (with NaN for empty), value ranks (-1 empty)."""
        ints = np.maximum(np.floor(np.exp(rng.normal(self.int_mu, self.int_sigma, (n, N_INT)))) - 1.0, 0.0)
        neg = rng.random(n) < 0.05
        ints[neg, 1] = -rng.integers(1, 4, neg.sum())
        ints[rng.random((n, N_INT)) < self.int_empty] = np.nan
        ranks = np.empty((n, N_CAT), dtype=np.int64)
        for c in range(N_CAT):
            ranks[:, c] = np.searchsorted(self.cdf[c], rng.random(n))
            ranks[rng.random(n) < self.cat_empty[c], c] = -1
        return ints, ranks

    def logit(self, ints, ranks):
        z = np.full(len(ranks), self.bias)
        for c in SIGNAL:
            r = ranks[:, c]
            z += np.where(r >= 0, self.w[c][r % TABLE], 0.0)
        for a, b in CROSSES:
            ra, rb = ranks[:, a], ranks[:, b]
            dot = np.sum(self.u[a][ra % TABLE] * self.u[b][rb % TABLE], axis=1)
            z += np.where((ra >= 0) & (rb >= 0), dot, 0.0)
        dense = np.log1p(np.nan_to_num(np.maximum(ints[:, [0, 4]], 0.0)))
        return z + 0.25 * (dense.sum(axis=1) - 2.0)

    def _calibrate(self, seed):
        ints, ranks = self.draw(np.random.default_rng([seed, 1]), 20000)
        z = self.logit(ints, ranks)
        lo, hi = -20.0, 20.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if np.mean(1.0 / (1.0 + np.exp(-(z + mid)))) > BASE_CTR:
                hi = mid
            else:
                lo = mid
        return (lo + hi) / 2

    def hex_values(self, ranks, c):
        """A bijective 32-bit scramble of the ranks of column c."""
        r = ranks.astype(np.uint64)
        v = (r * np.uint64(2654435761) + self.salt[c]) & np.uint64(0xFFFFFFFF)
        return v


def format_rows(pl, ints, ranks, labels):
    cols = [labels.astype(np.int64).astype(str)]
    for j in range(N_INT):
        x = ints[:, j]
        s = np.where(np.isnan(x), "", np.nan_to_num(x).astype(np.int64).astype(str))
        cols.append(s)
    for c in range(N_CAT):
        hx = np.char.zfill(np.char.mod("%x", pl.hex_values(ranks[:, c], c)), 8)
        cols.append(np.where(ranks[:, c] < 0, "", hx))
    return ["\t".join(row) + "\n" for row in zip(*cols)]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True, help="output file ('-' for stdout)")
    ap.add_argument("--gzip", action="store_true", help="gzip the output")
    a = ap.parse_args(argv)
    if a.rows < 1:
        ap.error("--rows must be >= 1")
    pl = Planted(a.seed)
    rng = np.random.default_rng([a.seed, 2])
    if a.out == "-":
        out = sys.stdout.buffer
    else:
        out = gzip.open(a.out, "wb") if a.gzip else open(a.out, "wb")
    done, clicks = 0, 0
    while done < a.rows:
        n = min(50000, a.rows - done)
        ints, ranks = pl.draw(rng, n)
        p = 1.0 / (1.0 + np.exp(-pl.logit(ints, ranks)))
        labels = (rng.random(n) < p).astype(np.int64)
        out.write("".join(format_rows(pl, ints, ranks, labels)).encode())
        done += n
        clicks += int(labels.sum())
    if out is not sys.stdout.buffer:
        out.close()
    print("%s: %d rows, click rate %.4f" % (a.out, done, clicks / done), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
