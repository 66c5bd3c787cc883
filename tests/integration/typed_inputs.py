#!/usr/bin/python3
"""typed_inputs.py DIR CASE - model, data and reference losses of
test_typed_inputs.sh: a tiny token model over two named inputs, int64 ids
[N, L] and a bool mask [N, L] (Embedding, the mask as float, Linear),
exported with PyTorch as Flotilla imports it, its .npy data, and the loss
PyTorch computes on the whole set before and after one SGD step (lr 0.5),
one per line in DIR/ref.txt.
  CASE pooled: masked mean of the embeddings, one class per sample ([N]
               labels, output [N, C]);
  CASE tokens: a class per token (output [N, L, C], labels [N, L] with -100
               at the masked positions, CrossEntropyLoss(ignore_index=-100)
               on the logits' transpose as a PyTorch user writes it);
  CASE castids: the ids as a float input that the model casts to int64
               (x.long()), the data saved as uint8: what the trainer must
               refuse (no reference)."""
import os
import sys

import numpy as np
import torch

N, L, V, D, C = 12, 5, 9, 4, 7


class Token(torch.nn.Module):
    def __init__(self, per_token):
        super().__init__()
        self.per_token = per_token
        self.emb = torch.nn.Embedding(V, D)
        self.fc = torch.nn.Linear(D, C)

    def forward(self, ids, mask):
        m = mask.unsqueeze(-1).float()
        e = self.emb(ids) * m
        if self.per_token:  # the reshape reads the int64 input's shape (a bind-time value)
            return self.fc(e).reshape(ids.shape[0], ids.shape[1], C)
        return self.fc(e.sum(1) / m.sum(1))


class CastIds(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.fc = torch.nn.Linear(D, C)

    def forward(self, ids):
        return self.fc(self.emb(ids.long()).sum(1))


def cast_ids(d):
    ids = np.random.default_rng(3).integers(0, V, (N, L)).astype(np.uint8)
    np.save(os.path.join(d, "ids.npy"), ids)
    np.save(os.path.join(d, "y.npy"), np.zeros(N, np.int64))
    torch.onnx.export(CastIds(), (torch.zeros(2, L),), os.path.join(d, "model.onnx"),
                      opset_version=17, input_names=["ids"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def loss_of(model, ids, mask, y, per_token):
    out = model(ids, mask)
    if per_token:
        return torch.nn.functional.cross_entropy(out.transpose(1, 2), y, ignore_index=-100)
    return torch.nn.functional.cross_entropy(out, y)


def main():
    d, case = sys.argv[1], sys.argv[2]
    per_token = case == "tokens"
    os.makedirs(d, exist_ok=True)
    if case == "castids":
        cast_ids(d)
        return
    g = np.random.default_rng(3)
    ids = g.integers(0, V, (N, L)).astype(np.int64)
    mask = g.random((N, L)) < 0.7
    mask[:, 0] = True  # every sample has a token
    y = g.integers(0, C, (N, L) if per_token else (N,)).astype(np.int64)
    if per_token:
        y[~mask] = -100
    np.save(os.path.join(d, "ids.npy"), ids)
    np.save(os.path.join(d, "mask.npy"), mask)
    np.save(os.path.join(d, "y.npy"), y)
    torch.manual_seed(4)
    model = Token(per_token)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sample = (torch.zeros(2, L, dtype=torch.int64), torch.ones(2, L, dtype=torch.bool))
    torch.onnx.export(model, sample, os.path.join(d, "model.onnx"), opset_version=17,
                      input_names=["ids", "mask"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "batch"}, "mask": {0: "batch"},
                                    "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model.load_state_dict(sd)
    ti, tm, ty = torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(y)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = loss_of(model, ti, tm, ty, per_token)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(d, "ref.txt"), "w") as f:
        f.write("".join("%.8f\n" % v for v in losses))


main()
