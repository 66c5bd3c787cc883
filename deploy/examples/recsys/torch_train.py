#!/usr/bin/python3
"""torch_train.py - the PyTorch reference of the recsys examples: the same
module (dlrm.py / deepfm.py, same seed, so the same initial values as the
exported ONNX file), trained on the same Criteo files in file order (the
job's data.criteo.shuffle_buffer 0), batches of --batch with the last
short one dropped as Flotilla drops it, one thread, sparse embedding
gradients, the optimizer named (sgd or adagrad, Flotilla's epsilon).
Prints each step's loss (--print-steps), then the test AUC, log loss and
the training throughput:

    /usr/bin/python3 deploy/examples/recsys/torch_train.py --model dlrm \\
        --train DIR/train.tsv --test DIR/test.tsv --vocab 10000 --epochs 2
"""
import argparse
import os
import sys
import time

# One thread in every pool, set before torch loads its BLAS: with
# torch.set_num_threads(1) alone, OpenBLAS/OpenMP worker threads still
# spin-wait between calls, and their CPU time (counted by process_time)
# halved the samples per CPU-second measured on an idle machine.
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import criteo_tsv  # noqa: E402
import deepfm  # noqa: E402
import dlrm  # noqa: E402

MODELS = {"dlrm": dlrm.build, "deepfm": deepfm.build}
EPS = 1e-8  # optimizer.epsilon's default in Flotilla


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    return torch.optim.Adagrad(params, lr=lr, eps=EPS)


def predict(model, dense, sparse, batch=4096):
    out = []
    with torch.no_grad():
        for i in range(0, len(dense), batch):
            out.append(model(torch.from_numpy(dense[i:i + batch]),
                             torch.from_numpy(sparse[i:i + batch])).squeeze(1))
    return torch.cat(out)


def test_metrics(model, test):
    logits = predict(model, test[0], test[1])
    y = torch.from_numpy(test[2])
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y).item()
    return criteo_tsv.auc(torch.sigmoid(logits).numpy(), test[2]), loss


def train(model, data, a):
    opt = make_optimizer(a.optimizer, model.parameters(), a.lr)
    lossf = torch.nn.BCEWithLogitsLoss()
    dense, sparse, label = (torch.from_numpy(x) for x in data)
    nb = len(label) // a.batch
    step, samples, t0 = 0, 0, time.process_time()
    for epoch in range(a.epochs):
        for b in range(nb):
            s = slice(b * a.batch, (b + 1) * a.batch)
            opt.zero_grad()
            loss = lossf(model(dense[s], sparse[s]).squeeze(1), label[s])
            loss.backward()
            opt.step()
            step += 1
            samples += a.batch
            if step <= a.print_steps:
                print(f"step {step} loss {loss.item():.7f}", flush=True)
            if a.max_steps and step >= a.max_steps:
                return samples, time.process_time() - t0
    return samples, time.process_time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="dlrm")
    ap.add_argument("--train", nargs="+", required=True)
    ap.add_argument("--test", nargs="*", default=[])
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--print-steps", type=int, default=0, help="print the first N steps' losses")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = MODELS[a.model](seed=a.seed, vocab=a.vocab, dim=a.dim, sparse=True)
    samples, cpu = train(model, criteo_tsv.read(a.train), a)
    print(f"torch_samples_per_cpu_s: {samples / max(cpu, 1e-9):.1f} samples/s")
    if a.test:
        auc, loss = test_metrics(model, criteo_tsv.read(a.test))
        print(f"torch_auc: {auc:.5f}")
        print(f"torch_test_loss: {loss:.5f}")


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
