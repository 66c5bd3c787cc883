#!/usr/bin/python3
"""deepfm.py - DeepFM (Guo et al., 2017) for Criteo-format data: a
first-order term (a 1-wide EmbeddingBag per column over ids modulo the
vocabulary, and a Linear over the 13 dense features), the factorization
machine's second-order term over the 26 field embeddings
(1/2 sum_d [(sum_f e_fd)^2 - sum_f e_fd^2]) and a deep MLP over the
embeddings and the dense features, summed into one logit
(bce_with_logits).

    /usr/bin/python3 deploy/examples/recsys/deepfm.py export OUT.onnx \
        [--vocab V] [--dim D] [--seed S]
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recsys_common import N_DENSE, N_SPARSE, Tables, main, mlp  # noqa: E402


class DeepFM(nn.Module):
    def __init__(self, vocab=10000, dim=8, hidden=(64, 32), sparse=False):
        super().__init__()
        self.first = Tables(vocab, 1, sparse)
        self.linear = nn.Linear(N_DENSE, 1)
        self.tables = Tables(vocab, dim, sparse)
        self.deep = mlp([N_SPARSE * dim + N_DENSE, *hidden, 1], last_relu=False)

    def forward(self, dense, sparse):
        first = self.first(sparse).sum(dim=1) + self.linear(dense)    # [B, 1]
        e = self.tables(sparse)                                       # [B, 26, dim]
        s = e.sum(dim=1)
        fm = 0.5 * (s * s - (e * e).sum(dim=1)).sum(dim=1, keepdim=True)
        deep = self.deep(torch.cat([e.flatten(1), dense], dim=1))
        return first + fm + deep


def build(seed=1, vocab=10000, dim=8, sparse=False):
    torch.manual_seed(seed)
    return DeepFM(vocab=vocab, dim=dim, sparse=sparse)


if __name__ == "__main__":
    main(build, "DeepFM")
