#!/usr/bin/python3
"""whole_models.py - whole models written in PyTorch, trained by
flotilla-trainer and by PyTorch from the same initializers on the same
batches, then the trainer's exported model evaluated by PyTorch.

Models: a BiLSTM text classifier (int64 ids and a bool padding mask), a
GRU sequence tagger ([N, L] labels with ignore_index), multi-head attention
with a key_padding_mask and a causal triu mask, a TCN (dilated
causal Conv1d over F.pad), a U-Net-style model (Conv down, ConvTranspose
up, a skip Concat) and a GroupNorm CNN. Each: 20 SGD steps of 16 samples
in file order (one epoch), the loss logged at every step within 1e-4
relative of PyTorch's, then the test accuracy the trainer logged equal to
PyTorch's on the exported file (within one sample).

    /usr/bin/python3 tests/integration/whole_models.py FLOTILLA_TRAINER SRCDIR [MODEL ...]

Prints one line per model and exits 1 when any fails.
"""
import copy
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS, B, N_TEST, LR = 20, 16, 200, 0.05
IGNORE = -100


class MaskedAttention(nn.Module):
    """Embedding, nn.MultiheadAttention with a key_padding_mask (from the
    bool input) and a causal triu attn_mask, mean over the real tokens."""

    def __init__(self, vocab=200, d=8, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mha = nn.MultiheadAttention(d, 2, batch_first=True)
        self.head = nn.Linear(d, classes)

    def forward(self, ids, mask):
        x = self.emb(ids)
        L = ids.shape[1]
        causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
        h = self.mha(x, x, x, key_padding_mask=~mask, attn_mask=causal, need_weights=False)[0]
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1.0))


class TCN(nn.Module):
    """Two dilated causal conv layers (left padding by F.pad), a head."""

    def __init__(self, c=4, h=8, classes=3):
        super().__init__()
        self.c1 = nn.Conv1d(c, h, 3, dilation=1)
        self.c2 = nn.Conv1d(h, h, 3, dilation=2)
        self.head = nn.Linear(h, classes)

    def forward(self, x):
        x = torch.relu(self.c1(F.pad(x, (2, 0))))
        x = torch.relu(self.c2(F.pad(x, (4, 0))))
        return self.head(x[:, :, -1])


class UNet(nn.Module):
    """Conv down (stride 2), ConvTranspose up, skip Concat, pool, head."""

    def __init__(self, classes=3):
        super().__init__()
        self.inc = nn.Conv2d(1, 4, 3, padding=1)
        self.down = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.out = nn.Conv2d(8, 4, 3, padding=1)
        self.head = nn.Linear(4, classes)

    def forward(self, x):
        a = torch.relu(self.inc(x))
        b = torch.relu(self.down(a))
        u = torch.cat([a, self.up(b)], dim=1)
        return self.head(torch.relu(self.out(u)).mean(dim=(2, 3)))


class GNCNN(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.gn1 = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.gn2 = nn.GroupNorm(4, 8)
        self.head = nn.Linear(8 * 2 * 2, classes)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.gn1(self.conv1(x))), 2)
        x = F.max_pool2d(torch.relu(self.gn2(self.conv2(x))), 2)
        return self.head(x.flatten(1))


def seq_models(src):
    sys.path.insert(0, os.path.join(src, "deploy", "examples", "onnx"))
    import seq_tagger
    import text_classifier
    return text_classifier, seq_tagger


def data_for(name, src, n, g):
    """{input name: tensor}, labels, and the input order of forward."""
    if name in ("bilstm_text", "gru_tagger", "mha_mask"):
        tc, st = seq_models(src)
        rng = np.random.default_rng(int(torch.randint(0, 1 << 30, (1,), generator=g)))
        import seq_data
        ids, mask = seq_data.tokens(n, rng)
        if name in ("bilstm_text", "mha_mask"):
            y = tc.labels(ids)
            return {"ids": torch.from_numpy(ids), "mask": torch.from_numpy(mask)}, \
                torch.from_numpy(y), ["ids", "mask"]
        return {"ids": torch.from_numpy(ids)}, torch.from_numpy(st.tags(ids, mask)), ["ids"]
    if name == "tcn":
        x = torch.randn(n, 4, 12, generator=g)
        return {"input": x}, (x[:, 0, -3:].sum(1) > 0).long() + (x[:, 1, -1] > 1).long(), ["input"]
    x = torch.randn(n, 1, 8, 8, generator=g)
    return {"input": x}, (x.mean(dim=(1, 2, 3)) > 0).long() + (x[:, 0, 0, 0] > 1).long(), ["input"]


def build(name, src):
    torch.manual_seed(3)
    if name == "bilstm_text":
        return seq_models(src)[0].TextClassifier(emb=8, hidden=8)
    if name == "gru_tagger":
        return seq_models(src)[1].Tagger(emb=8, hidden=8)
    if name == "mha_mask":
        return MaskedAttention()
    return {"tcn": TCN, "unet": UNet, "gn_cnn": GNCNN}[name]()


def ce(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), ignore_index=IGNORE)


def torch_steps(model, xs, y, names):
    m = copy.deepcopy(model)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    losses = []
    for s in range(STEPS):
        sl = slice(s * B, (s + 1) * B)
        opt.zero_grad()
        loss = ce(m(*[xs[k][sl] for k in names]), y[sl])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def job_yaml(tmp, onnx_path, names, ncls, export):
    files = lambda split: "".join(  # noqa: E731
        f"    {k}: {tmp}/{split}_{k}.npy\n" for k in names)
    return (f"model:\n  kind: onnx\n  path: {onnx_path}\n  loss: softmax_cross_entropy\n"
            f"  num_classes: {ncls}\n  ignore_index: {IGNORE}\n"
            f"data:\n  format: npy\n  inputs:\n{files('train')}  train_y: {tmp}/train_y.npy\n"
            f"  test_inputs:\n{files('test')}  test_y: {tmp}/test_y.npy\n  shuffle: false\n"
            f"optimizer:\n  name: sgd\n  lr: {LR}\n"
            f"train:\n  epochs: 1\n  batch_size: {B}\n  seed: 1\n  eval: true\n"
            f"  eval_batch_size: {N_TEST}\n  log_interval: 1\n  num_threads: 1\n"
            f"  export_onnx: {export}\n")


def run_one(trainer, src, name, tmp):
    g = torch.Generator().manual_seed(11)
    xs, y, names = data_for(name, src, STEPS * B + N_TEST, g)
    model = build(name, src)
    ncls = int(y[y != IGNORE].max()) + 1 if name != "gru_tagger" else 5
    ncls = max(ncls, 3)
    onnx_path = os.path.join(tmp, "model.onnx")
    axes = {k: {0: "batch"} for k in names}
    axes["logits"] = {0: "batch"}
    torch.onnx.export(copy.deepcopy(model), tuple(xs[k][:2] for k in names), onnx_path,
                      opset_version=17, input_names=names, output_names=["logits"],
                      dynamic_axes=axes, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    ntr = STEPS * B
    for k in names:
        np.save(os.path.join(tmp, f"train_{k}.npy"), xs[k][:ntr].numpy())
        np.save(os.path.join(tmp, f"test_{k}.npy"), xs[k][ntr:].numpy())
    np.save(os.path.join(tmp, "train_y.npy"), y[:ntr].numpy().astype(np.int64))
    np.save(os.path.join(tmp, "test_y.npy"), y[ntr:].numpy().astype(np.int64))
    export = os.path.join(tmp, "trained.onnx")
    job = os.path.join(tmp, "job.yaml")
    with open(job, "w") as f:
        f.write(job_yaml(tmp, onnx_path, names, ncls, export))
    r = subprocess.run([trainer, "--config", job], capture_output=True, text=True, timeout=300)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        err = [ln for ln in log.splitlines() if " E " in ln] or log.splitlines()[-3:]
        return False, f"trainer exited {r.returncode}: {err[0] if err else ''}"
    ours = [float(v) for v in re.findall(r"\[Epoch 0, batch \d+\] loss: ([0-9.eE+-]+)", log)]
    ref = torch_steps(model, xs, y, names)
    if len(ours) != STEPS:
        return False, f"{len(ours)} loss lines, want {STEPS}"
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(ours, ref))
    acc = re.findall(r"test loss: [0-9.]+, acc1: ([0-9.]+)", log)
    if not acc or not os.path.exists(export):
        return False, "no test line or no export"
    trained = build(name, src)
    sys.path.insert(0, os.path.join(src, "deploy", "examples", "onnx"))
    import seq_data
    seq_data.load_onnx_into(trained, export)
    trained.eval()
    with torch.no_grad():
        theirs = seq_data.accuracy(trained(*[xs[k][ntr:] for k in names]), y[ntr:])
    counted = int((y[ntr:] != IGNORE).sum())
    ok = worst <= 1e-4 and abs(float(acc[-1]) - theirs) <= 1.0 / counted + 1e-6
    return ok, (f"loss step {STEPS}: {ours[-1]:.6f} vs PyTorch {ref[-1]:.6f} (max rel diff "
                f"{worst:.2e}); test acc1 {acc[-1]} logged, {theirs:.5f} PyTorch on the export")


def main():
    trainer, src = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or ["bilstm_text", "gru_tagger", "mha_mask", "tcn", "unet", "gn_cnn"]
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    fails = 0
    for name in names:
        with tempfile.TemporaryDirectory(prefix="fl_whole_") as tmp:
            ok, why = run_one(trainer, src, name, tmp)
        print(f"{'ok' if ok else 'FAIL'}: {name}: {why}", flush=True)
        fails += not ok
    print(f"{len(names) - fails} passed, {fails} failed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
