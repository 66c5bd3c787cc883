"""test_python.py - the flotilla Python package end to end (run by
test_python.sh with FLOTILLA_BINDIR set to the build tree): a small MLP on
a learnable random task is exported (and a model with an op Flotilla lacks
refused with the importer's message), trained by Job(...).run() as one
flotilla-trainer and as two trainers under flotilla-run, and loaded back
with load_trained; a model of two named inputs (data.inputs) likewise with
one trainer.  The metrics returned must be those of trainer 0's log
(and metrics.csv), and the loaded module's test accuracy the one the
trainer logged.  Then the refusals: an unknown Job argument, a strategy
the job loader refuses (Job.check, one trainer, flotilla-run), a module of
another shape or other names."""
import os
import re
import sys
import tempfile

import torch

import flotilla

fails = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        fails.append(what)


def mlp(hidden=16):
    return torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 3))


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(600, 8, generator=g)
    y = (x @ torch.randn(8, 3, generator=g)).argmax(1)
    return x[:400], y[:400], x[400:], y[400:]


def log_test_line(path):
    """(loss, acc1, acc5 or None) of the last test line of a trainer log
    (acc5 is logged only with more than 5 classes)."""
    pat = re.compile(r"^\[Epoch \d+\] test loss: ([0-9.]+), acc1: ([0-9.]+)"
                     r"(?:, acc5: ([0-9.]+))?$")
    found = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = pat.match(line.rstrip("\n"))
            if m:
                found = tuple(None if v is None else float(v) for v in m.groups())
    return found


def accuracy(module, x, y):
    module.eval()
    with torch.no_grad():
        return (module(x).argmax(1) == y).double().mean().item()


def check_run(name, job, metrics, xt, yt, epochs):
    logged = log_test_line(metrics["log"])
    check(logged is not None and (metrics["test_loss"], metrics["test_acc1"],
                                  metrics.get("test_acc5")) == logged,
          f"{name}: metrics {metrics.get('test_loss')}, {metrics.get('test_acc1')} are the "
          f"log's last test line {logged}")
    check(len(metrics["history"]) == epochs and metrics["epoch"] == epochs - 1,
          f"{name}: one history record per epoch ({len(metrics['history'])})")
    if "metrics_csv" in metrics:
        with open(metrics["metrics_csv"], encoding="utf-8") as f:
            tests = [r.split(",") for r in f.read().splitlines() if r.startswith("test,")]
        check(abs(float(tests[-1][7]) - metrics["test_acc1"]) < 1e-6,
              f"{name}: metrics.csv's last test acc {tests[-1][7]} is the returned one")
    net = mlp()
    names = flotilla.load_trained(net, job.trained_path)
    check(names == list(net.state_dict()), f"{name}: load_trained copied {names}")
    acc = accuracy(net, xt, yt)
    # the same weights on the same samples: at most one argmax tie apart
    check(abs(acc - metrics["test_acc1"]) <= 1.0 / len(xt) + 1e-5,
          f"{name}: the loaded module's test accuracy {acc:.5f} is the logged "
          f"{metrics['test_acc1']:.5f}")


def expect(exc, fn, needle, what):
    try:
        fn()
    except exc as e:
        check(needle in str(e), f"{what}: {type(e).__name__} names '{needle}'")
        return
    check(False, f"{what}: no {exc.__name__}")


def test_export(tmp):
    torch.manual_seed(0)
    net = mlp()
    path = flotilla.export(net, torch.zeros(2, 8), os.path.join(tmp, "mlp.onnx"))
    check(os.path.exists(path), "export wrote the file and the importer took it")

    class WithDet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            m = self.fc(x).reshape(-1, 2, 2)
            return torch.stack([torch.linalg.det(m), m.sum((1, 2))], 1)

    expect(flotilla.ExportError,
           lambda: flotilla.export(WithDet(), torch.zeros(2, 4), os.path.join(tmp, "det.onnx")),
           "op type 'Det' is not supported", "export of a model with Det")
    return net, path


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, a, b):
        return self.out(torch.relu(self.fc(torch.cat([a, b], 1))))


def test_two_inputs(tmp, x, y, xt, yt):
    """Named inputs: export names them after forward's arguments, Job
    writes data.inputs / test_inputs, the trained model loads back."""
    torch.manual_seed(0)
    net = TwoInputs()
    path = flotilla.export(net, (torch.zeros(2, 5), torch.zeros(2, 3)),
                           os.path.join(tmp, "two.onnx"))
    job = flotilla.Job(workdir=os.path.join(tmp, "two"), model=path,
                       data=dict(inputs={"a": x[:, :5], "b": x[:, 5:]}, train_y=y,
                                 test_inputs={"a": xt[:, :5], "b": xt[:, 5:]}, test_y=yt),
                       train=dict(epochs=2, batch_size=32, num_threads=1))
    want = os.path.join(tmp, "two", "data", "inputs.a.npy")
    check(f"  inputs:\n    a: {want}\n" in job.yaml(), "data.inputs: one .npy file per input")
    metrics = job.run()
    flotilla.load_trained(net, job.trained_path)
    with torch.no_grad():
        acc = (net(xt[:, :5], xt[:, 5:]).argmax(1) == yt).double().mean().item()
    check(abs(acc - metrics["test_acc1"]) <= 1.0 / len(xt) + 1e-5,
          f"two named inputs: the loaded module's test accuracy {acc:.5f} is the logged "
          f"{metrics['test_acc1']:.5f}")


def main():
    tmp = tempfile.mkdtemp(prefix="fl_python.")
    net, path = test_export(tmp)
    x, y, xt, yt = data()
    job = flotilla.Job(workdir=os.path.join(tmp, "job"), model=path,
                       data=dict(x=x, y=y, test_x=xt, test_y=yt),
                       optimizer=dict(name="momentum", lr=0.1),
                       train=dict(epochs=3, batch_size=32, log_interval=4, num_threads=1),
                       gradient_merge=True, gradient_merge_configs=dict(k_steps=2))
    check("gradient_merge: true" in job.yaml(), "a strategy key at the top level")
    job.check()
    check_run("one trainer", job, job.run(progress=True), xt, yt, 3)
    check_run("two trainers", job, job.run(nproc_per_node=2, log_dir=os.path.join(tmp, "log2")),
              xt, yt, 3)
    expect(TypeError, lambda: flotilla.Job(model=path, epochs=3), "'epochs'", "unknown argument")
    test_two_inputs(tmp, x, y, xt, yt)
    bad = flotilla.Job(workdir=os.path.join(tmp, "bad"), model=path, dgc=True,
                       data=dict(x=x, y=y))
    expect(flotilla.JobError, bad.check, "strategy.dgc is not supported", "Job.check")
    expect(flotilla.RunError, bad.run, "strategy.dgc is not supported", "a strategy refused")
    expect(flotilla.RunError, lambda: bad.run(nproc_per_node=2), "strategy.dgc is not supported",
           "a strategy refused by flotilla-run")
    expect(flotilla.LoadError, lambda: flotilla.load_trained(mlp(12), job.trained_path),
           "0.weight has shape (16, 8) in the file, (12, 8) in the module", "another shape")
    other = torch.nn.Sequential(torch.nn.Linear(8, 3))
    other.add_module("head", torch.nn.Linear(3, 3))
    expect(flotilla.LoadError, lambda: flotilla.load_trained(other, job.trained_path),
           "no initializer for head.weight, head.bias", "other names")
    if fails:
        print(f"{len(fails)} failed; files kept in {tmp}")
        return 1
    print("PASS: export, Job.run (trainer and flotilla-run), load_trained, refusals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
