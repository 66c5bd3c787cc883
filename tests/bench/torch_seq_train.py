#!/usr/bin/python3
"""torch_seq_train.py - the PyTorch side of bench_seq.sh: the text
classifier example's module (deploy/examples/onnx/text_classifier.py: the
very module Flotilla imports) trained by PyTorch on the same .npy files
with the job's optimizer (Adam, lr 0.01) and cross-entropy.
  --mode speed   one process, one thread: --steps steps of --batch after 5
                 warm-up steps; prints `torch_lstm_samples_per_s: N samples/s`
  --mode ddp     --world processes, DistributedDataParallel over gloo on
                 127.0.0.1, one thread each, --batch per rank, each rank
                 taking every world-th sample of a shared shuffled order;
                 the slowest rank's time counts; prints
                 `torch_ddp_lstm_samples_per_s_<world>r: N samples/s`
Each timed step gathers its batch, runs forward, loss, backward and the
optimizer step, as Flotilla's step does."""
import argparse
import os
import socket
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "deploy", "examples", "onnx"))
import seq_data  # noqa: E402
import text_classifier  # noqa: E402


def timed_steps(model, opt, d, perm, batch, steps, offset=0, stride=1):
    def step(s):
        idx = perm[(offset + stride * (s * batch + torch.arange(batch))) % len(perm)]
        loss = F.cross_entropy(model(d["ids"][idx], d["mask"][idx]), d["y"][idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.train()
    for s in range(5):
        step(s)
    t0 = time.perf_counter()
    for s in range(5, 5 + steps):
        step(s)
    return time.perf_counter() - t0


def load(data):
    return seq_data.load_split(data, "train", ["ids", "mask", "y"])


def ddp_worker(rank, a, port, q):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.world)
    d = load(a.data)
    model = DDP(text_classifier.build())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    perm = torch.randperm(len(d["y"]), generator=torch.Generator().manual_seed(1))
    dist.barrier()
    dt = timed_steps(model, opt, d, perm, a.batch, a.steps, offset=rank, stride=a.world)
    t = torch.tensor([dt])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        q.put(t.item())
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="directory of text_classifier.py data")
    ap.add_argument("--mode", choices=("speed", "ddp"), default="speed")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    print(f"torch_version: {torch.__version__}")
    if a.mode == "ddp":
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.start_processes(ddp_worker, args=(a, free_port(), q), nprocs=a.world, join=True,
                           start_method="spawn")
        dt = q.get()
        print(f"torch_ddp_lstm_samples_per_s_{a.world}r: "
              f"{a.world * a.steps * a.batch / dt:.1f} samples/s")
        return
    torch.set_num_threads(1)
    d = load(a.data)
    model = text_classifier.build()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    perm = torch.randperm(len(d["y"]), generator=torch.Generator().manual_seed(1))
    dt = timed_steps(model, opt, d, perm, a.batch, a.steps)
    print(f"torch_lstm_samples_per_s: {a.steps * a.batch / dt:.1f} samples/s")


if __name__ == "__main__":
    main()
