#!/usr/bin/python3
"""torch_ddp_mlp.py - the PyTorch side of bench_coll_train: the same MLP
(784-256-128-100-10, ReLU), batch 64 per rank, SGD momentum 0.9 lr 0.05 and
one thread per rank, trained by 2 processes with DistributedDataParallel
over gloo on this machine, on Fashion-MNIST (synthetic data of the same
shape when the data set is not installed).

Each rank takes every world-th sample of a shared shuffled order, as
flotilla-trainer shards.  The figure counts the training steps only
(batch gather, forward, loss, backward with DDP's allreduce, optimizer
step), after 20 warm-up steps; the slowest rank's time counts.
Prints `torch_ddp_gloo_samples_per_s_2r: N samples/s` and
`torch_ddp_gloo_step_ms_2r: N ms`.
"""
import argparse
import gzip
import os
import socket
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = struct.unpack(">I", raw[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def load():
    img = os.path.join(DATA, "train-images-idx3-ubyte.gz")
    lab = os.path.join(DATA, "train-labels-idx1-ubyte.gz")
    if os.path.exists(img) and os.path.exists(lab):
        x = read_idx(img).reshape(-1, 784).astype(np.float32) / 255.0
        y = read_idx(lab).astype(np.int64)
    else:
        g = np.random.default_rng(1)
        x = g.random((60000, 784), dtype=np.float32)
        y = g.integers(0, 10, 60000)
    x = (x - x.mean()) / x.std()
    return torch.from_numpy(x), torch.from_numpy(y)


def worker(rank, world, port, steps, batch, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    x, y = load()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 100), nn.ReLU(), nn.Linear(100, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(len(x), generator=g)[rank::world]
    nb = len(order) // batch
    warm = 20

    def step(i):
        idx = order[(i % nb) * batch:(i % nb + 1) * batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()

    for i in range(warm):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(warm, warm + steps):
        step(i)
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    if rank == 0:
        out.put(dt.item())
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.world, port, a.steps, a.batch, q))
             for r in range(a.world)]
    for p in procs:
        p.start()
    dt = q.get()
    for p in procs:
        p.join()
    print(f"torch_ddp_gloo_step_ms_{a.world}r: {dt / a.steps * 1e3:.3f} ms")
    print(f"torch_ddp_gloo_samples_per_s_{a.world}r: {a.world * a.batch * a.steps / dt:.0f} samples/s")


if __name__ == "__main__":
    main()
