#!/usr/bin/python3
"""torch_mlp.py - the reference side of bench_train.sh: the same MLP
(784-256-128-100-10, ReLU), data normalisation, optimizer and batch size as
deploy/examples/mlp_fmnist.yaml, trained with PyTorch on one thread.

Prints `name: value unit` lines:
  torch_version, torch_blas (the libblas.so.3 PyTorch loaded),
  torch_mlp_samples_per_s (training steps: gathering the shuffled batch from
  the in-memory set, forward, loss, backward, optimizer step), or with
  --pregather torch_mlp_pregathered_samples_per_s (the batches gathered
  before the clock starts), and with --eval the test accuracy after the
  epochs run.  *_cpu_samples_per_s divide by the process's CPU time
  instead of wall time (steadier on a shared machine).
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    x = read_idx(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
    return x.reshape(len(x), -1), y


def loaded_blas():
    """The BLAS shared objects mapped into this process."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "blas" in os.path.basename(path):
                libs.add(os.path.realpath(path))
    return ",".join(sorted(libs)) or "none"


def openblas_threads():
    """Threads of the OpenBLAS PyTorch loaded (it does not follow
    torch.set_num_threads; bench_train.sh sets OPENBLAS_NUM_THREADS)."""
    import ctypes
    for lib in loaded_blas().split(","):
        if "openblas" in os.path.basename(lib):
            try:
                return ctypes.CDLL(lib).openblas_get_num_threads()
            except (OSError, AttributeError):
                pass
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--pregather", action="store_true",
                    help="gather each epoch's batches before timing (untimed)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load("train")
    mean, std = float(xtr.mean(dtype=np.float64)), float(xtr.std(dtype=np.float64))
    xtr = torch.from_numpy((xtr - mean) / std)
    ytr = torch.from_numpy(ytr)
    model = nn.Sequential(
        nn.Linear(784, 256), nn.ReLU(),
        nn.Linear(256, 128), nn.ReLU(),
        nn.Linear(128, 100), nn.ReLU(),
        nn.Linear(100, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    lossf = nn.CrossEntropyLoss()
    nb = len(xtr) // a.batch
    g = torch.Generator().manual_seed(a.seed)
    rates, cpu_rates = [], []
    for _ in range(a.epochs):
        perm = torch.randperm(len(xtr), generator=g)[: nb * a.batch].reshape(nb, a.batch)
        if a.pregather:  # PyTorch's best case: contiguous batches made untimed
            xs, ys = xtr[perm.reshape(-1)].reshape(nb, a.batch, 784), ytr[perm.reshape(-1)].reshape(nb, a.batch)
        model.train()
        t0, c0 = time.perf_counter(), time.process_time()
        for b in range(nb):
            if a.pregather:
                x, y = xs[b], ys[b]
            else:
                # gathered inside the timed loop, as flotilla-trainer does
                # with data.prefetch: 0 in bench_train.sh
                x, y = xtr.index_select(0, perm[b]), ytr.index_select(0, perm[b])
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
        rates.append(nb * a.batch / (time.perf_counter() - t0))
        cpu_rates.append(nb * a.batch / (time.process_time() - c0))
    print(f"torch_version: {torch.__version__}")
    print(f"torch_blas: {loaded_blas()}")
    print(f"torch_threads: {torch.get_num_threads()}")
    print(f"torch_openblas_threads: {openblas_threads()}")
    name = "torch_mlp_pregathered" if a.pregather else "torch_mlp"
    print(f"{name}_samples_per_s: {sorted(rates)[len(rates) // 2]:.1f} samples/s")
    print(f"{name}_cpu_samples_per_s: {sorted(cpu_rates)[len(cpu_rates) // 2]:.1f} samples/s")
    if a.eval:
        xte, yte = load("t10k")
        xte = torch.from_numpy((xte - mean) / std)
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == torch.from_numpy(yte)).float().mean().item()
        print(f"torch_mlp_test_acc1: {acc:.4f}")


if __name__ == "__main__":
    main()
