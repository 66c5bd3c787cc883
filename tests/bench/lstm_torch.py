#!/usr/bin/python3
"""lstm_torch.py - the BiLSTM text classifier of bench_lstm.sh in PyTorch 1.13.

The model: an embedding's output x [batch, seq, emb] (batch_first) through
one bidirectional nn.LSTM, its two final hidden states into a Linear head,
softmax cross-entropy.

    lstm_torch.py export OUT.onnx     the model as ONNX (training mode,
                                      dynamic batch), what Flotilla loads
    lstm_torch.py time STEPS REPS     one thread: REPS runs of STEPS timed
                                      forward+backward steps (after 3 warm-up
                                      steps), prints `torch_lstm_samples_per_s:`
                                      with the median of the runs (wall time)
                                      and `torch_lstm_samples_per_cpu_s:` (the
                                      process's CPU time)
"""
import statistics
import sys
import time

import torch
import torch.nn as nn

BATCH, SEQ, EMB, HIDDEN, CLASSES = 64, 32, 64, 64, 4


class BiLSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(EMB, HIDDEN, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h.transpose(0, 1).flatten(1))


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQ, EMB, generator=g)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return x, y


def export(path):
    torch.manual_seed(0)
    x, _ = data()
    torch.onnx.export(BiLSTMClassifier(), (x,), path, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def step(model, x, y):
    model.zero_grad(set_to_none=False)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()


def timed(steps, reps):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = BiLSTMClassifier()
    x, y = data()
    for _ in range(3):
        step(model, x, y)
    rates, cpu_rates = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(model, x, y)
        rates.append(steps * BATCH / (time.perf_counter() - t0))
        cpu_rates.append(steps * BATCH / (time.process_time() - c0))
    print(f"torch_lstm_samples_per_s: {statistics.median(rates):.1f} samples/s")
    print(f"torch_lstm_samples_per_cpu_s: {statistics.median(cpu_rates):.1f} samples/s")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "export":
        export(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "time":
        timed(int(sys.argv[2]), int(sys.argv[3]))
    else:
        raise SystemExit(__doc__)
