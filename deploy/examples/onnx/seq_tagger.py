#!/usr/bin/python3
"""seq_tagger.py - a sequence tagger: Embedding, a bidirectional GRU and a
Linear head per token, trained with per-token labels [N, L] whose padding
positions carry ignore_index (-100), as nn.CrossEntropyLoss has it.
Defined in PyTorch, exported to ONNX, trained by Flotilla (seq_tagger.yaml).

The synthetic task: ids 1..40 are "triggers"; a token's tag is 1 when the
token before it is a trigger, 2 when the one after it is, 3 when both are,
4 when neither is but it is one itself, else 0: the tagger needs context
on both sides, hence the bidirectional GRU.

    /usr/bin/python3 deploy/examples/onnx/seq_tagger.py data DIR
    /usr/bin/python3 deploy/examples/onnx/seq_tagger.py export OUT.onnx [--seed N]
    /usr/bin/python3 deploy/examples/onnx/seq_tagger.py eval TRAINED.onnx DIR
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seq_data  # noqa: E402

INPUTS = ["ids"]
TAGS = 5


class Tagger(nn.Module):
    def __init__(self, vocab=seq_data.VOCAB, emb=24, hidden=24, tags=TAGS):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, ids):
        h, _ = self.gru(self.emb(ids))
        return self.head(h)  # [N, L, tags]


def build(seed=1):
    torch.manual_seed(seed)
    return Tagger()


def tags(ids, mask):
    prev = np.concatenate([np.zeros_like(ids[:, :1]), ids[:, :-1]], axis=1)
    nxt = np.concatenate([ids[:, 1:], np.zeros_like(ids[:, :1])], axis=1)
    trig = lambda a: (a >= 1) & (a <= 40)  # noqa: E731
    t = (trig(prev).astype(np.int64) + 2 * trig(nxt))
    t = np.where((t == 0) & trig(ids), 4, t).astype(np.int64)
    t[~mask] = seq_data.IGNORE
    return t


def make_data(out_dir, n_train=8000, n_test=2000, seed=0):
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("test", n_test)):
        ids, mask = seq_data.tokens(n, rng)
        seq_data.save_split(out_dir, split, {"ids": ids, "y": tags(ids, mask)})


def main():
    seq_data.cli(__doc__, build, make_data, INPUTS,
                 (torch.zeros(2, seq_data.SEQ_LEN, dtype=torch.int64),),
                 unit="tokens")


if __name__ == "__main__":
    main()
