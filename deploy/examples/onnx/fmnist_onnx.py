"""fmnist_onnx.py - what the two ONNX examples share: the Fashion-MNIST .npy
files (fmnist_to_npy.py), exporting a module as Flotilla imports it, copying
an ONNX file's initializers back into the module, test accuracy, a plain
PyTorch training loop (the reference the benchmark compares against), and
the command line of an example's script.

Used by resnet_fmnist.py, vit_fmnist.py, eval_onnx.py and
tests/bench/torch_onnx_train.py; run them with /usr/bin/python3 (Debian's
python3-torch and python3-onnx).
"""
import argparse
import copy
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

OPSET = 17
SCALE = 1.0 / 255.0  # data.scale's default: uint8 pixels to [0, 1], as ToTensor


def load_split(data_dir, split, limit=0):
    """(x float32 [N,1,28,28] in [0,1], y int64 [N]) as Flotilla feeds them."""
    x = np.load(os.path.join(data_dir, f"{split}_x.npy"), mmap_mode="r")
    y = np.load(os.path.join(data_dir, f"{split}_y.npy"))
    if limit:
        x, y = x[:limit], y[:limit]
    xt = torch.from_numpy(np.asarray(x, dtype=np.float32) * np.float32(SCALE))
    return xt, torch.from_numpy(y.astype(np.int64))


def export(model, path, sample_shape=(1, 28, 28)):
    """Write model as Flotilla imports it: opset 17, one input `input` with a
    dynamic batch axis, one output `output` (the logits), training mode so
    BatchNormalization keeps its running statistics as initializers, no
    constant folding so every parameter stays an initializer named as in
    the state_dict.  The model itself is left untouched."""
    import onnx
    m = copy.deepcopy(model)  # a training-mode export runs a forward
    m.train()
    x = torch.zeros((2,) + tuple(sample_shape))
    torch.onnx.export(m, (x,), path, opset_version=OPSET, input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    # the file must carry the module's own initial values (not the ones the
    # export's forward moved): rewrite them from the untouched state_dict
    sd = model.state_dict()
    from onnx import numpy_helper
    for i, init in enumerate(proto.graph.initializer):
        if init.name in sd:
            proto.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(sd[init.name].detach().numpy(), init.name))
    onnx.save(proto, path)
    return proto


def load_onnx_into(model, path):
    """Copy the initializers of an ONNX file into model's state_dict, by
    name (a Flotilla-exported model keeps the imported names).  Checks the
    file with onnx.checker first; returns the names copied."""
    import onnx
    from onnx import numpy_helper
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    sd = model.state_dict()
    missing = [k for k in sd if k not in inits and not k.endswith("num_batches_tracked")]
    if missing:
        raise SystemExit(f"{path}: no initializer for {', '.join(missing)}")
    new = {}
    for k, v in sd.items():
        if k in inits:
            a = torch.from_numpy(np.array(inits[k]))
            if tuple(a.shape) != tuple(v.shape):
                raise SystemExit(f"{path}: {k} has shape {tuple(a.shape)}, the module "
                                 f"{tuple(v.shape)}")
            new[k] = a.to(v.dtype)
        else:
            new[k] = v
    model.load_state_dict(new)
    return [k for k in sd if k in inits]


@torch.no_grad()
def accuracy(model, x, y, batch=1000):
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    return correct / len(x)


def lr_at(step, total, base, warmup=0):
    """Flotilla's cosine schedule: linear warmup from 0, then cosine to 0."""
    if step < warmup:
        return base * step / warmup
    t = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * t))


def augment(xb, g, hflip, crop_padding):
    """torchvision's RandomCrop(28, padding=P) then RandomHorizontalFlip on
    a batch [B,C,H,W], drawn from generator g (as data.augment does; the
    draws themselves differ from Flotilla's)."""
    if crop_padding:
        p = crop_padding
        h, w = xb.shape[2], xb.shape[3]
        padded = F.pad(xb, (p, p, p, p))
        off = torch.randint(0, 2 * p + 1, (len(xb), 2), generator=g)
        xb = torch.stack([padded[i, :, a:a + h, b:b + w]
                          for i, (a, b) in enumerate(off.tolist())])
    if hflip:
        flip = torch.rand(len(xb), generator=g) < 0.5
        xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
    return xb


def train(model, x, y, xt, yt, epochs, batch, opt_name, lr, momentum=0.9, weight_decay=0.0,
          warmup_steps=0, seed=1, hflip=False, crop_padding=0, log=print):
    """Plain PyTorch training as the Flotilla job describes it: one shuffle
    per epoch, full batches only, cosine learning rate per step, the job's
    augmentation.  Returns (test accuracy, samples per second of the
    training steps)."""
    if opt_name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                              weight_decay=weight_decay)
    steps = len(x) // batch
    total = steps * epochs
    g = torch.Generator().manual_seed(seed)
    samples, seconds, step, acc = 0, 0.0, 0, 0.0
    for ep in range(epochs):
        model.train()
        perm = torch.randperm(len(x), generator=g)
        t0 = time.perf_counter()
        for s in range(steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, lr, warmup_steps)
            idx = perm[s * batch:(s + 1) * batch]
            loss = F.cross_entropy(model(augment(x[idx], g, hflip, crop_padding)), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        dt = time.perf_counter() - t0
        samples += steps * batch
        seconds += dt
        acc = accuracy(model, xt, yt)
        log(f"[torch epoch {ep}] loss {loss.item():.4f}, {steps * batch / dt:.1f} samples/s, "
            f"test acc1 {acc:.4f}")
    return acc, samples / seconds if seconds > 0 else 0.0


def main(doc, build, job, name):
    """The command line of an example's script (doc its docstring, job its
    job's settings): `export OUT.onnx [--seed N]` writes build(seed),
    untrained, as ONNX; `torch DATA_DIR [--epochs E]` trains build() in
    PyTorch with the job's settings.  name (the model's) labels the output."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write the untrained model as ONNX")
    e.add_argument("out")
    e.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("torch", help="train it in PyTorch with the job's settings")
    t.add_argument("data_dir")
    t.add_argument("--epochs", type=int, default=job["epochs"])
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "export":
        m = build(a.seed)
        export(m, a.out)
        n = sum(p.numel() for p in m.parameters())
        print(f"{a.out}: {name}, {n} parameters")
        return
    torch.set_num_threads(a.threads)
    x, y = load_split(a.data_dir, "train", a.limit)
    xt, yt = load_split(a.data_dir, "test")
    acc, sps = train(build(), x, y, xt, yt, **dict(job, epochs=a.epochs))
    print(f"torch {name.lower()}: test acc1 {acc:.4f}, {sps:.1f} samples/s")
