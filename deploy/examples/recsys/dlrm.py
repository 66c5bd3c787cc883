#!/usr/bin/python3
"""dlrm.py - DLRM (Naumov et al., 2019) for Criteo-format data: a bottom
MLP over the 13 dense features, 26 EmbeddingBag tables (mode sum) over
each column's ids modulo the vocabulary, the pairwise dot products of the
27 vectors (bottom output and embeddings, strictly lower triangle), a top
MLP over [bottom output, interactions] to one logit (bce_with_logits).

    /usr/bin/python3 deploy/examples/recsys/dlrm.py export OUT.onnx \
        [--vocab V] [--dim D] [--seed S]
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recsys_common import N_DENSE, N_SPARSE, Tables, main, mlp  # noqa: E402


class DLRM(nn.Module):
    def __init__(self, vocab=10000, dim=8, bottom=(32,), top=(64, 32), sparse=False):
        super().__init__()
        self.bottom = mlp([N_DENSE, *bottom, dim], last_relu=True)
        self.tables = Tables(vocab, dim, sparse)
        n = N_SPARSE + 1
        rows, cols = torch.tril_indices(n, n, offset=-1)
        # positions of the lower triangle in the flattened [n, n] products
        self.register_buffer("pairs", rows * n + cols, persistent=False)
        self.top = mlp([dim + n * (n - 1) // 2, *top, 1], last_relu=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        t = torch.cat([x.unsqueeze(1), self.tables(sparse)], dim=1)   # [B, 27, dim]
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1)                # [B, 27 * 27]
        return self.top(torch.cat([x, torch.index_select(z, 1, self.pairs)], dim=1))


def build(seed=1, vocab=10000, dim=8, sparse=False):
    torch.manual_seed(seed)
    return DLRM(vocab=vocab, dim=dim, sparse=sparse)


if __name__ == "__main__":
    main(build, "DLRM")
