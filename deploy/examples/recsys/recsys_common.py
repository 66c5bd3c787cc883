"""recsys_common.py - what dlrm.py and deepfm.py share: the MLP block, the
per-column EmbeddingBags over ids % vocab, the export through the
flotilla Python package and the command line of both."""
import argparse
import os
import sys

import torch
import torch.nn as nn

N_DENSE, N_SPARSE = 13, 26
# the source tree's python/ (an installed flotilla package is found anyway)
_SRC_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python")
if os.path.isdir(os.path.join(_SRC_PY, "flotilla")):
    sys.path.insert(0, _SRC_PY)


def mlp(sizes, last_relu):
    """Linear layers over sizes[0] -> ... -> sizes[-1], ReLU between (and
    after the last one with last_relu)."""
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Tables(nn.Module):
    """26 nn.EmbeddingBag (mode sum) of `vocab` rows of `dim`, table c over
    column c's ids modulo vocab (the modulo in the graph, so the exported
    model takes the reader's 63-bit hashed ids), rows uniform in
    +-1/sqrt(vocab).  Output [B, 26, dim].
    sparse=True: sparse gradients (torch_train.py)."""

    def __init__(self, vocab, dim, sparse=False):
        super().__init__()
        self.vocab = vocab
        self.bags = nn.ModuleList(nn.EmbeddingBag(vocab, dim, mode="sum", sparse=sparse)
                                  for _ in range(N_SPARSE))
        for bag in self.bags:  # DLRM's initialisation: uniform in +-sqrt(1 / rows)
            nn.init.uniform_(bag.weight, -vocab ** -0.5, vocab ** -0.5)

    def forward(self, sparse):
        ids = torch.remainder(sparse, self.vocab)
        return torch.stack([bag(ids[:, c:c + 1]) for c, bag in enumerate(self.bags)], dim=1)


def example_inputs(batch=4):
    return (torch.rand(batch, N_DENSE), torch.randint(0, 1 << 62, (batch, N_SPARSE)))


def export(module, path, check=True):
    """The module as ONNX (inputs `dense` float [B, 13], `sparse` int64
    [B, 26], output `logit` [B, 1]) through flotilla.export, checked by
    flotilla-trainer's importer unless check is False."""
    import flotilla
    return flotilla.export(module, example_inputs(), path, input_names=["dense", "sparse"],
                           output_names=["logit"], loss="bce_with_logits", check=check)


def main(build, what):
    ap = argparse.ArgumentParser(description=f"export the {what} module to ONNX")
    ap.add_argument("cmd", choices=["export"])
    ap.add_argument("out", help="the .onnx file to write")
    ap.add_argument("--vocab", type=int, default=10000, help="rows per table (ids %% vocab)")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-check", action="store_true", help="skip the importer's check")
    a = ap.parse_args()
    export(build(seed=a.seed, vocab=a.vocab, dim=a.dim), a.out, check=not a.no_check)
    print(f"wrote {a.out}")
