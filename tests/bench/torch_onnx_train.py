#!/usr/bin/python3
"""torch_onnx_train.py - the PyTorch side of bench_onnx.sh: the ONNX
examples' models (deploy/examples/onnx/resnet_fmnist.py, vit_fmnist.py),
the very modules Flotilla imports, trained by PyTorch on the same .npy data
with the same optimizer, schedule and batch.

  --mode speed   one process, --threads threads: --steps training steps of
                 --batch after 5 warm-up steps; prints
                 `torch_<model>_samples_per_s: N samples/s`
  --mode ddp     --world processes, DistributedDataParallel over gloo on
                 127.0.0.1, one thread each, --batch per rank, each rank
                 taking every world-th sample of a shared shuffled order (as
                 flotilla-trainer shards); the slowest rank's time counts;
                 prints `torch_ddp_<model>_samples_per_s_<world>r: N samples/s`
                 (all ranks' samples together)
  --mode train   the job's whole training (epochs, cosine schedule), one
                 process; prints `torch_<model>_test_acc1: A`

The timed steps gather their batch from the shuffled data inside the loop,
then forward, loss, backward, optimizer step, as Flotilla's step does.
Also prints torch_version and torch_threads.
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "deploy", "examples", "onnx"))
import fmnist_onnx  # noqa: E402
import resnet_fmnist  # noqa: E402
import vit_fmnist  # noqa: E402

MODELS = {"resnet": resnet_fmnist, "vit": vit_fmnist}


def make_opt(mod, model, lr=None):
    job = mod.JOB
    if job["opt_name"] == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr or job["lr"],
                                 weight_decay=job["weight_decay"])
    return torch.optim.SGD(model.parameters(), lr=lr or job["lr"], momentum=job["momentum"],
                           weight_decay=job["weight_decay"])


def timed_steps(model, opt, x, y, perm, batch, steps, offset=0, stride=1):
    """5 warm-up steps, then `steps` timed ones; returns seconds."""
    def step(s):
        idx = perm[(offset + stride * (s * batch + torch.arange(batch))) % len(perm)]
        loss = F.cross_entropy(model(x[idx]), y[idx])
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


def ddp_worker(rank, a, port, q):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.world)
    mod = MODELS[a.model]
    x, y = fmnist_onnx.load_split(a.data, "train")
    model = DDP(mod.build())
    opt = make_opt(mod, model)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    dist.barrier()
    dt = timed_steps(model, opt, x, y, perm, a.batch, a.steps, offset=rank, stride=a.world)
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
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--data", required=True, help="directory of fmnist_to_npy.py's files")
    ap.add_argument("--mode", choices=("speed", "ddp", "train"), default="speed")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=0, help="train: 0 = the job's")
    a = ap.parse_args()
    print(f"torch_version: {torch.__version__}")
    mod = MODELS[a.model]
    if a.mode == "ddp":
        import torch.multiprocessing as mp
        print("torch_threads: 1 per rank")
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.start_processes(ddp_worker, args=(a, free_port(), q), nprocs=a.world, join=True,
                           start_method="spawn")
        dt = q.get()
        print(f"torch_ddp_{a.model}_samples_per_s_{a.world}r: "
              f"{a.world * a.steps * a.batch / dt:.1f} samples/s")
        return
    torch.set_num_threads(a.threads)
    print(f"torch_threads: {torch.get_num_threads()}")
    x, y = fmnist_onnx.load_split(a.data, "train")
    if a.mode == "train":
        xt, yt = fmnist_onnx.load_split(a.data, "test")
        job = dict(mod.JOB)
        if a.epochs:
            job["epochs"] = a.epochs
        acc, sps = fmnist_onnx.train(mod.build(), x, y, xt, yt, **job,
                                     log=lambda s: print(s, file=sys.stderr))
        print(f"torch_{a.model}_test_acc1: {acc:.4f}")
        print(f"torch_{a.model}_train_samples_per_s: {sps:.1f} samples/s")
        return
    model = mod.build()
    opt = make_opt(mod, model)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    dt = timed_steps(model, opt, x, y, perm, a.batch, a.steps)
    print(f"torch_{a.model}_samples_per_s: {a.steps * a.batch / dt:.1f} samples/s")


if __name__ == "__main__":
    main()
