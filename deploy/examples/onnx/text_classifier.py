#!/usr/bin/python3
"""text_classifier.py - a text classifier with token ids and a padding
mask: Embedding, a bidirectional LSTM, the mean of its outputs over the
real (unmasked) tokens, a Linear head over 3 classes. Defined in PyTorch,
exported to ONNX, trained by Flotilla (text_classifier.yaml) with two
int64/bool inputs (`ids`, `mask`) read from .npy files.

The synthetic task: tokens 1..20 are "positive" words, 21..40 "negative";
the class is 0 when positives outnumber negatives, 1 when negatives do,
2 on a tie. The model has to count over the whole padded sequence.

    /usr/bin/python3 deploy/examples/onnx/text_classifier.py data DIR
    /usr/bin/python3 deploy/examples/onnx/text_classifier.py export OUT.onnx [--seed N]
    /usr/bin/python3 deploy/examples/onnx/text_classifier.py eval TRAINED.onnx DIR
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seq_data  # noqa: E402

INPUTS = ["ids", "mask"]


class TextClassifier(nn.Module):
    def __init__(self, vocab=seq_data.VOCAB, emb=32, hidden=32, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids, mask):
        h, _ = self.lstm(self.emb(ids))
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)


def build(seed=1):
    torch.manual_seed(seed)
    return TextClassifier()


def labels(ids):
    pos = ((ids >= 1) & (ids <= 20)).sum(axis=1)
    neg = ((ids >= 21) & (ids <= 40)).sum(axis=1)
    return np.where(pos > neg, 0, np.where(neg > pos, 1, 2)).astype(np.int64)


def make_data(out_dir, n_train=8000, n_test=2000, seed=0):
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("test", n_test)):
        ids, mask = seq_data.tokens(n, rng)
        # one sequence in two leans on the sentiment words, so classes balance
        lean = rng.random(n) < 0.5
        words = rng.integers(1, 41, size=ids.shape)
        pick = (rng.random(ids.shape) < 0.3) & mask & lean[:, None]
        ids[pick] = words[pick]
        seq_data.save_split(out_dir, split, {"ids": ids, "mask": mask, "y": labels(ids)})


def main():
    seq_data.cli(__doc__, build, make_data, INPUTS,
                 (torch.zeros(2, seq_data.SEQ_LEN, dtype=torch.int64),
                  torch.ones(2, seq_data.SEQ_LEN, dtype=torch.bool)),
                 unit="samples")


if __name__ == "__main__":
    main()
