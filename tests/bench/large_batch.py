#!/usr/bin/env python3
"""large_batch.py - the large-batch study: does LARS / LAMB keep the accuracy
of a small batch when the global batch grows to 4k, 8k and 16k samples,
where plain momentum and Adam lose it?  (issue 8; the results page is
deploy/examples/large_batch/RESULTS.md.)

A benchmark, never a pass/fail test.  Python 3 standard library only; the
training is done by flotilla-trainer, one job file per configuration.

Subcommands (default: grid):
  sweep     the learning-rate sweep that picks each method's base LR (on a
            validation split of the training set, never on the test set),
            written to sweep.tsv; then `generate`.
  generate  write the job files deploy/examples/large_batch/*.yaml from the
            study's constants below and the best LRs of sweep.tsv.
  grid      run every job file of deploy/examples/large_batch/ one after the
            other, write results.tsv, then `report`.  Prints two lines per
            run, `<job>_acc1: <test acc1 | diverged | failed>` and
            `<job>_wall_s: <seconds> s` (e.g. mlp_b8192_lars_acc1), and
            large_batch_grid_wall_s at the end.
  report    rewrite the generated part of RESULTS.md (between its markers)
            and accuracy_vs_batch.png (gnuplot) from results.tsv and sweep.tsv.

Options: --builddir DIR (default $FL_BUILDDIR, else ./build) holds
flotilla-trainer; --only SUBSTR runs only the jobs whose name contains it
(grid; results of the other jobs in results.tsv are kept); --models
mlp,cnn picks the models of the sweep (default both); the sweep reuses
the points already in sweep.tsv unless --redo (use it after changing any
constant below).

The protocol (the same for every method, written out in RESULTS.md):
  - batch 128 baselines (momentum, Adam): micro-batch 128, no merge;
  - global batches 4096, 8192, 16384 = micro-batches of 512 merged by
    strategy.gradient_merge (k_steps 8, 16, 32, avg) on one trainer;
  - every method has a base LR eta0 for batch 128 and runs at batch B with
    lr = eta0 * B / 128 (linear scaling), a linear warmup over the first 10%
    of its optimizer steps, then polynomial decay (power 2) to 0;
  - same epoch budget for every batch of a model;
  - eta0 is picked per method by the sweep: grid {1,3}x10^n, 4 values
    (0.01..0.3 for momentum and LARS, 1e-4..3e-3 for Adam and LAMB), at
    batch 8192 for the four large-batch methods and at batch 128 for the two
    baselines, scored by the last epoch's accuracy on the last 10,000
    training images (trained on the first 50,000); when the best value is at
    an end of the grid the next value beyond it is run too, and when no
    value reached 0.5 validation accuracy (chance is 0.1) the next smaller
    one is run (at most 4 extensions in all).
"""
import argparse
import gzip
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
JOBDIR = os.path.join(TOP, "deploy", "examples", "large_batch")
DATADIR = "/usr/share/datasets/fashion-mnist"
TRAIN_IMAGES = DATADIR + "/train-images-idx3-ubyte.gz"
TRAIN_LABELS = DATADIR + "/train-labels-idx1-ubyte.gz"
TEST_IMAGES = DATADIR + "/t10k-images-idx3-ubyte.gz"
TEST_LABELS = DATADIR + "/t10k-labels-idx1-ubyte.gz"

BASE_BATCH = 128            # the small-batch baselines, and the reference of linear scaling
MICRO_BATCH = 512           # micro-batch of the large-batch runs
LARGE_BATCHES = (4096, 8192, 16384)
SWEEP_BATCH = 8192          # batch at which the large-batch methods are swept
WARMUP_FRACTION = 0.10      # of the run's optimizer steps
DECAY_POWER = 2.0
SEED = 1
N_TRAIN = 60000
N_SWEEP_TRAIN = 50000       # sweep: train on the first 50k, validate on the last 10k

# Model sections and epoch budgets.  The CNN is about 10x slower per sample
# on one core than the MLP, so it is smaller than deploy/examples/cnn_fmnist
# (8 and 16 channels, 3x3 kernels), trains on the first 49152 images (= 3 x
# 16384, so the 16k batch drops no sample) and for fewer epochs.
MODELS = {
    "mlp": {
        "epochs": 15,
        "limit_train": 0,
        "yaml": ("model:\n"
                 "  kind: mlp\n"
                 "  input_shape: [1, 28, 28]\n"
                 "  num_classes: 10\n"
                 "  hidden: [256, 128, 100]\n"
                 "  activation: relu\n"),
        "exclude": [".bias"],
    },
    "cnn": {
        "epochs": 5,
        "limit_train": 49152,
        "yaml": ("model:\n"
                 "  kind: cnn\n"
                 "  input_shape: [1, 28, 28]\n"
                 "  num_classes: 10\n"
                 "  conv_channels: [8, 16]\n"
                 "  conv_kernel: 3\n"
                 "  fc_hidden: 64\n"
                 "  norm: bn\n"
                 "  activation: relu\n"),
        "exclude": [".bias", "bn"],
    },
}

# Methods: optimizer section + strategy section, and the sweep's grid
# (indices i of the half-decade ladder value(i) = {1,3}[i%2] * 10^(i//2)).
METHODS = {
    "momentum": {"family": "sgd", "grid": (-4, -1)},
    "lars": {"family": "sgd", "grid": (-4, -1)},
    "adam": {"family": "adam", "grid": (-8, -5)},
    "lamb": {"family": "adam", "grid": (-8, -5)},
}
OPT_LABEL = {"momentum": "Momentum", "adam": "Adam", "lars": "LARS", "lamb": "LAMB"}
MOMENTUM_WD = 0.0005    # momentum: L2 weight decay, the same as LARS's
LARS_COEFF = 0.001
LARS_WD = 0.0005
LAMB_WD = 0.01
SWEEP_EXTEND = 4        # grid extensions allowed (until the best is inside)
SWEEP_TRAINED = 0.5     # a best below this (chance is 0.1) trained at no LR: go lower

BEGIN_MARK = "<!-- BEGIN GENERATED by tests/bench/large_batch.py report -->"
END_MARK = "<!-- END GENERATED -->"


def ladder(i):
    """Half-decade ladder: ..., 0.01, 0.03, 0.1, 0.3, 1, ... (i = 2 * log10)."""
    return (1.0 if i % 2 == 0 else 3.0) * 10.0 ** (i // 2)


def fmt_float(x):
    return "%.6g" % x


def job_name(model, batch, method):
    return "%s_b%d_%s" % (model, batch, method)


def configurations():
    """Every (model, batch, method) of the grid, in run order."""
    out = []
    for model in MODELS:
        for method in ("momentum", "adam"):
            out.append((model, BASE_BATCH, method))
        for batch in LARGE_BATCHES:
            for method in ("momentum", "lars", "adam", "lamb"):
                out.append((model, batch, method))
    return out


def steps_of(n_train, batch):
    """Optimizer steps per epoch, as the trainer counts them (remainders dropped)."""
    micro = batch if batch <= BASE_BATCH else MICRO_BATCH
    k = batch // micro
    return (n_train // micro) // k, micro, k


def job_yaml(model, batch, method, eta0, n_train, data=None, header=""):
    """The job file text of one configuration.  data: dict overriding the
    four IDX paths (the sweep's validation split)."""
    m = MODELS[model]
    n_used = min(n_train, m["limit_train"]) if m["limit_train"] else n_train
    per_epoch, micro, k = steps_of(n_used, batch)
    total = per_epoch * m["epochs"]
    warmup = max(1, int(round(WARMUP_FRACTION * total)))
    lr = eta0 * batch / BASE_BATCH
    d = data or {"train_images": TRAIN_IMAGES, "train_labels": TRAIN_LABELS,
                 "test_images": TEST_IMAGES, "test_labels": TEST_LABELS}
    y = [header, m["yaml"], "data:\n", "  format: idx\n"]
    for key in ("train_images", "train_labels", "test_images", "test_labels"):
        y.append("  %s: %s\n" % (key, d[key]))
    y.append("  shuffle: true\n  prefetch: 4\n")
    if m["limit_train"]:
        y.append("  limit_train: %d\n" % m["limit_train"])
    y.append("optimizer:\n")
    if method in ("momentum", "lars"):
        y.append("  name: momentum\n  lr: %s\n  momentum: 0.9\n" % fmt_float(lr))
        if method == "momentum":
            y.append("  weight_decay: %s\n" % fmt_float(MOMENTUM_WD))
    else:
        y.append("  name: adam\n  lr: %s\n  beta1: 0.9\n  beta2: 0.999\n" % fmt_float(lr))
    y.append("lr_schedule:\n  kind: polynomial\n  warmup_steps: %d\n  power: %s\n  end_lr: 0\n"
             % (warmup, fmt_float(DECAY_POWER)))
    y.append("train:\n  epochs: %d\n  batch_size: %d\n  seed: %d\n  eval: true\n"
             "  eval_batch_size: 1000\n  log_interval: 1000000\n  num_threads: 1\n"
             % (m["epochs"], micro, SEED))
    strat = []
    if k > 1:
        strat.append("  gradient_merge: true\n  gradient_merge_configs:\n"
                     "    k_steps: %d\n    avg: true\n" % k)
    excl = "[%s]" % ", ".join('"%s"' % e for e in m["exclude"])
    if method == "lars":
        strat.append("  lars: true\n  lars_configs:\n    lars_coeff: %s\n"
                     "    lars_weight_decay: %s\n    epsilon: 0\n"
                     "    exclude_from_weight_decay: %s\n"
                     % (fmt_float(LARS_COEFF), fmt_float(LARS_WD), excl))
    if method == "lamb":
        strat.append("  lamb: true\n  lamb_configs:\n    lamb_weight_decay: %s\n"
                     "    exclude_from_weight_decay: %s\n" % (fmt_float(LAMB_WD), excl))
    if strat:
        y.append("strategy:\n")
        y.extend(strat)
    return "".join(y), {"lr": lr, "steps": total, "warmup": warmup, "micro": micro, "k": k}


# ------------------------------------------------------------------ tsv files

def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]
    if not lines:
        return []
    head = lines[0]
    return [dict(zip(head, row)) for row in lines[1:]]


def write_tsv(path, head, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write("\t".join(head) + "\n")
        for r in rows:
            f.write("\t".join(str(r[h]) for h in head) + "\n")
    os.replace(path + ".tmp", path)


SWEEP_TSV = os.path.join(JOBDIR, "sweep.tsv")
SWEEP_HEAD = ["model", "batch", "method", "eta0", "lr", "val_acc1", "wall_s"]
RESULTS_TSV = os.path.join(JOBDIR, "results.tsv")
RESULTS_HEAD = ["name", "model", "batch", "micro", "k", "method", "lr", "epochs", "steps",
                "test_acc1", "wall_s"]


def best_eta0(sweep, model, batch, method):
    """The eta0 with the best validation accuracy (ties: the smaller one), or None."""
    rows = [r for r in sweep if r["model"] == model and int(r["batch"]) == batch
            and r["method"] == method]
    if not rows:
        return None
    rows.sort(key=lambda r: (-acc_or(r["val_acc1"]), float(r["eta0"])))
    return float(rows[0]["eta0"])


def acc_or(s, bad=-1.0):
    try:
        v = float(s)
        return v if math.isfinite(v) else bad
    except ValueError:
        return bad


# -------------------------------------------------------------- the trainer

def trainer_path(builddir):
    t = os.path.join(builddir, "flotilla-trainer")
    if not os.access(t, os.X_OK):
        sys.exit("large_batch.py: no %s (build first, or pass --builddir)" % t)
    return t


EVAL_RE = re.compile(r"^\[Epoch (\d+)\] test loss: (\S+), acc1: ([^,\s]+)")


def run_job(trainer, path, logpath):
    """Run one job; returns (result, epochs evaluated, wall s).  result is
    the last epoch's test acc1 as "0.8712", "diverged" when that epoch's
    test loss is not finite (the kernel then reports a meaningless acc1:
    NaN logits rank the label first), or "failed" (non-zero exit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
    t0 = time.monotonic()
    with open(logpath, "w") as log:
        rc = subprocess.call([trainer, "--config", path], stdout=log, stderr=subprocess.STDOUT,
                             env=env)
    wall = time.monotonic() - t0
    result, epochs = "failed", 0
    with open(logpath) as log:
        for ln in log:
            mt = EVAL_RE.match(ln)
            if mt:
                epochs += 1
                loss = float(mt.group(2))
                result = "%.4f" % float(mt.group(3)) if math.isfinite(loss) else "diverged"
    if rc != 0:
        print("large_batch.py: %s exited with %d (log: %s)" % (path, rc, logpath),
              file=sys.stderr)
        result = "failed"
    return result, epochs, wall


# --------------------------------------------------------------- generate

def header_of(model, batch, method, info, eta0):
    m = MODELS[model]
    if info["k"] > 1:
        how = "global batch %d = %d micro-batches of %d merged (gradient merge)" % (
            batch, info["k"], info["micro"])
    else:
        how = "batch %d (small-batch baseline)" % batch
    data = ("First %d training images" % m["limit_train"]) if m["limit_train"] else \
        "All 60000 training images"
    return ("# Large-batch study (deploy/examples/large_batch/RESULTS.md): %s,\n"
            "# %s, %s.\n"
            "# %s, %d epochs, %d optimizer steps; lr = %s x %d/%d = %s (linear\n"
            "# scaling), warmup %d steps, polynomial decay (power %s) to 0.\n"
            "# Generated by `tests/bench/large_batch.py generate`; do not edit by hand.\n"
            "#   flotilla-trainer --config deploy/examples/large_batch/%s.yaml\n"
            % (model.upper(), how, OPT_LABEL[method], data, m["epochs"], info["steps"], fmt_float(eta0),
               batch, BASE_BATCH, fmt_float(info["lr"]), info["warmup"],
               fmt_float(DECAY_POWER), job_name(model, batch, method)))


def cmd_generate(args):
    sweep = read_tsv(SWEEP_TSV)
    os.makedirs(JOBDIR, exist_ok=True)
    n = 0
    for model, batch, method in configurations():
        sb = BASE_BATCH if batch == BASE_BATCH else SWEEP_BATCH
        # the model's own sweep if it has one, else the MLP's
        eta0 = best_eta0(sweep, model, sb, method)
        if eta0 is None:
            eta0 = best_eta0(sweep, "mlp", sb, method)
        if eta0 is None:
            sys.exit("large_batch.py: sweep.tsv has no %s run at batch %d; run `sweep` first"
                     % (method, sb))
        _, info = job_yaml(model, batch, method, eta0, N_TRAIN)
        text, _ = job_yaml(model, batch, method, eta0, N_TRAIN,
                           header=header_of(model, batch, method, info, eta0))
        path = os.path.join(JOBDIR, job_name(model, batch, method) + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        n += 1
    print("large_batch.py: wrote %d job files to %s" % (n, JOBDIR), file=sys.stderr)


# ------------------------------------------------------------------- sweep

def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    return magic, dims, raw[4 + 4 * ndim:]


def write_idx(path, magic, dims, body):
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack(">I", magic))
        f.write(struct.pack(">%dI" % len(dims), *dims))
        f.write(body)
    os.replace(path + ".tmp", path)


def validation_split(cache):
    """Training set cut into the first N_SWEEP_TRAIN (train) and the rest
    (validation), as plain IDX files under cache."""
    os.makedirs(cache, exist_ok=True)
    out = {"train_images": os.path.join(cache, "split-train-images-idx3-ubyte"),
           "train_labels": os.path.join(cache, "split-train-labels-idx1-ubyte"),
           "test_images": os.path.join(cache, "split-val-images-idx3-ubyte"),
           "test_labels": os.path.join(cache, "split-val-labels-idx1-ubyte")}
    if all(os.path.exists(p) for p in out.values()):
        return out
    for src, tr, va in ((TRAIN_IMAGES, "train_images", "test_images"),
                        (TRAIN_LABELS, "train_labels", "test_labels")):
        magic, dims, body = read_idx(src)
        per = 1
        for d in dims[1:]:
            per *= d
        n = dims[0]
        cut = N_SWEEP_TRAIN * per
        write_idx(out[tr], magic, (N_SWEEP_TRAIN,) + tuple(dims[1:]), body[:cut])
        write_idx(out[va], magic, (n - N_SWEEP_TRAIN,) + tuple(dims[1:]), body[cut:])
    return out


def cmd_sweep(args):
    trainer = trainer_path(args.builddir)
    cache = os.path.join(args.builddir, "large_batch_cache")
    split = validation_split(cache)
    logdir = os.path.join(args.builddir, "large_batch_logs")
    os.makedirs(logdir, exist_ok=True)
    rows = read_tsv(SWEEP_TSV)
    t_all = time.monotonic()
    for model in args.models:
        for batch, methods in ((BASE_BATCH, ("momentum", "adam")),
                               (SWEEP_BATCH, ("momentum", "lars", "adam", "lamb"))):
            for method in methods:
                lo, hi = METHODS[method]["grid"]
                idx = list(range(lo, hi + 1))
                done = {}

                def one(i):
                    eta0 = ladder(i)
                    prev = [r for r in rows if r["model"] == model and
                            int(r["batch"]) == batch and r["method"] == method and
                            r["eta0"] == fmt_float(eta0)]
                    name = "sweep_%s_eta%s" % (job_name(model, batch, method), fmt_float(eta0))
                    if prev and not args.redo:
                        done[i] = acc_or(prev[0]["val_acc1"])
                        print("%s_val_acc1: %s (from sweep.tsv)" % (name, prev[0]["val_acc1"]))
                        return
                    text, info = job_yaml(model, batch, method, eta0, N_SWEEP_TRAIN, data=split)
                    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                        f.write(text)
                        path = f.name
                    try:
                        res, _, wall = run_job(trainer, path, os.path.join(logdir, name + ".log"))
                    finally:
                        os.unlink(path)
                    done[i] = acc_or(res)
                    rows[:] = [r for r in rows if r not in prev]
                    rows.append({"model": model, "batch": batch, "method": method,
                                 "eta0": fmt_float(eta0), "lr": fmt_float(info["lr"]),
                                 "val_acc1": res, "wall_s": "%.1f" % wall})
                    write_tsv(SWEEP_TSV, SWEEP_HEAD, rows)
                    print("%s_val_acc1: %s" % (name, res))
                    sys.stdout.flush()

                for i in idx:
                    one(i)
                for _ in range(SWEEP_EXTEND):
                    best = max(sorted(done), key=lambda i: (done[i], -i))
                    if best == min(done) or done[best] < SWEEP_TRAINED:
                        one(min(done) - 1)
                    elif best == max(done):
                        one(best + 1)
                    else:
                        break
                best = max(sorted(done), key=lambda i: (done[i], -i))
                print("%s_best_eta0: %s" % (job_name(model, batch, method), fmt_float(ladder(best))))
    print("large_batch_sweep_wall_s: %.0f s" % (time.monotonic() - t_all))
    cmd_generate(args)


# -------------------------------------------------------------------- grid

def cmd_grid(args):
    trainer = trainer_path(args.builddir)
    logdir = os.path.join(args.builddir, "large_batch_logs")
    os.makedirs(logdir, exist_ok=True)
    old = {r["name"]: r for r in read_tsv(RESULTS_TSV)}
    rows = []
    t_all = time.monotonic()
    for model, batch, method in configurations():
        name = job_name(model, batch, method)
        path = os.path.join(JOBDIR, name + ".yaml")
        if args.only and args.only not in name:
            if name in old:
                rows.append(old[name])
            continue
        if not os.path.exists(path):
            sys.exit("large_batch.py: no %s (run `generate`)" % path)
        with open(path) as f:
            text = f.read()
        lr = re.search(r"^  lr: (\S+)$", text, re.M).group(1)
        m = MODELS[model]
        per_epoch, micro, k = steps_of(m["limit_train"] or N_TRAIN, batch)
        steps = per_epoch * m["epochs"]
        accs, epochs, wall = run_job(trainer, path, os.path.join(logdir, name + ".log"))
        rows.append({"name": name, "model": model, "batch": batch, "micro": micro, "k": k,
                     "method": method, "lr": lr, "epochs": epochs, "steps": steps,
                     "test_acc1": accs, "wall_s": "%.1f" % wall})
        print("%s_acc1: %s" % (name, accs))
        print("%s_wall_s: %.1f s" % (name, wall))
        sys.stdout.flush()
        write_tsv(RESULTS_TSV, RESULTS_HEAD, rows + [old[n] for n in old
                                                     if n not in {r["name"] for r in rows}])
    print("large_batch_grid_wall_s: %.0f s" % (time.monotonic() - t_all))
    write_tsv(RESULTS_TSV, RESULTS_HEAD, rows)
    cmd_report(args)


# ------------------------------------------------------------------ report


def cmd_report(args):
    results = read_tsv(RESULTS_TSV)
    sweep = read_tsv(SWEEP_TSV)
    if not results:
        sys.exit("large_batch.py: no results in %s (run `grid`)" % RESULTS_TSV)
    md = ["", "### Test accuracy (last epoch) against global batch", "",
          "| model | global batch | micro-batch x k | optimizer | lr | epochs | steps "
          "| test acc1 | vs best baseline | wall time |",
          "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    total = 0.0
    for model in MODELS:
        rs = [r for r in results if r["model"] == model]
        base = max([acc_or(r["test_acc1"]) for r in rs if int(r["batch"]) == BASE_BATCH] or [-1])
        for r in rs:
            a = acc_or(r["test_acc1"])
            delta = "%+.2f pt" % (100 * (a - base)) if a >= 0 and base >= 0 else "-"
            md.append("| %s | %s | %s x %s | %s | %s | %s | %s | %s | %s | %s s |" % (
                model.upper(), r["batch"], r["micro"], r["k"], OPT_LABEL[r["method"]], r["lr"],
                r["epochs"], r["steps"], r["test_acc1"], delta, r["wall_s"]))
            total += float(r["wall_s"])
    md += ["", "Sum of the runs' wall times: %.0f s (%.1f min)." % (total, total / 60), ""]
    if sweep:
        md += ["### Learning-rate sweep (validation accuracy, last epoch)", "",
               "Base LR eta0 is for batch %d; the run's LR is eta0 x batch / %d. "
               "Best per row in bold." % (BASE_BATCH, BASE_BATCH), ""]
        keys = []
        for r in sweep:
            key = (r["model"], int(r["batch"]), r["method"])
            if key not in keys:
                keys.append(key)
        md += ["| model | batch | optimizer | eta0: val acc1 |", "|---|---:|---|---|"]
        for model, batch, method in keys:
            rs = [r for r in sweep if (r["model"], int(r["batch"]), r["method"]) ==
                  (model, batch, method)]
            rs.sort(key=lambda r: float(r["eta0"]))
            best = best_eta0(sweep, model, batch, method)
            cells = []
            for r in rs:
                c = "%s: %s" % (r["eta0"], r["val_acc1"])
                cells.append("**%s**" % c if float(r["eta0"]) == best else c)
            md.append("| %s | %d | %s | %s |" % (model.upper(), batch, OPT_LABEL[method],
                                                 ", ".join(cells)))
        swall = sum(float(r["wall_s"]) for r in sweep)
        md += ["", "Sum of the sweep runs' wall times: %.0f s (%.1f min)." % (swall, swall / 60),
               ""]
    page = os.path.join(JOBDIR, "RESULTS.md")
    text = open(page).read() if os.path.exists(page) else "# Large-batch study\n\n%s\n%s\n" % (
        BEGIN_MARK, END_MARK)
    if BEGIN_MARK not in text or END_MARK not in text:
        sys.exit("large_batch.py: %s lacks the generated-block markers" % page)
    pre, rest = text.split(BEGIN_MARK, 1)
    _, post = rest.split(END_MARK, 1)
    with open(page + ".tmp", "w") as f:
        f.write(pre + BEGIN_MARK + "\n" + "\n".join(md) + "\n" + END_MARK + post)
    os.replace(page + ".tmp", page)
    plot(results)
    print("large_batch.py: wrote %s and accuracy_vs_batch.png" % page, file=sys.stderr)


def plot(results):
    png = os.path.join(JOBDIR, "accuracy_vs_batch.png")
    with tempfile.TemporaryDirectory() as tmp:
        gp = ["set terminal pngcairo size 1100,460 font 'sans,10'",
              "set output '%s'" % png,
              "set multiplot layout 1,%d title 'Fashion-MNIST: test accuracy against global "
              "batch (same epoch budget per model, linear LR scaling, warmup, poly decay)'"
              % len(MODELS),
              "set logscale x 2", "set xrange [90:23000]",
              "set xtics ('128' 128, '4k' 4096, '8k' 8192, '16k' 16384)",
              "set xlabel 'global batch'", "set ylabel 'test acc1'",
              "set key bottom left Left reverse", "set grid"]
        styles = {"momentum": (7, "#1f77b4"), "adam": (5, "#ff7f0e"),
                  "lars": (9, "#2ca02c"), "lamb": (11, "#d62728")}
        for model in MODELS:
            rs = [r for r in results if r["model"] == model]
            accs = [acc_or(r["test_acc1"]) for r in rs if acc_or(r["test_acc1"]) >= 0]
            ylo = max(0.0, math.floor((min(accs or [0]) - 0.02) * 20) / 20)
            yhi = min(1.0, math.ceil((max(accs or [0.9]) + 0.01) * 50) / 50)
            plots = []
            for method in METHODS:
                mine = [r for r in rs if r["method"] == method]
                pts = sorted((int(r["batch"]), acc_or(r["test_acc1"])) for r in mine
                             if acc_or(r["test_acc1"]) >= 0)
                bad = sorted(int(r["batch"]) for r in mine if r["test_acc1"] == "diverged")
                if pts:
                    dat = os.path.join(tmp, "%s_%s.dat" % (model, method))
                    with open(dat, "w") as f:
                        f.write("".join("%d %.4f\n" % p for p in pts))
                    plots.append("'%s' using 1:2 with linespoints lw 2 pt %d lc rgb '%s' "
                                 "title '%s'" % (dat, styles[method][0], styles[method][1],
                                                 OPT_LABEL[method]))
                if bad:
                    dat = os.path.join(tmp, "%s_%s_diverged.dat" % (model, method))
                    with open(dat, "w") as f:
                        f.write("".join("%d\n" % b for b in bad))
                    plots.append("'%s' using 1:(%.3f) with points pt 2 ps 2.5 lw 2 "
                                 "lc rgb '%s' notitle" % (dat, ylo + 0.004, styles[method][1]))
            base = max([acc_or(r["test_acc1"]) for r in rs if int(r["batch"]) == BASE_BATCH]
                       or [-1])
            if base >= 0:
                plots.append("%.4f with lines dt 2 lw 1 lc rgb 'gray40' title 'best batch-%d "
                             "baseline'" % (base, BASE_BATCH))
                plots.append("%.4f with lines dt 3 lw 1 lc rgb 'gray40' title 'baseline - 1 "
                             "point'" % (base - 0.01))
            if any(r["test_acc1"] == "diverged" for r in rs):
                plots.append("NaN with points pt 2 ps 2.5 lc rgb 'black' "
                             "title 'diverged (NaN loss), drawn on the x axis'")
            ep = rs[0]["epochs"] if rs else "?"
            gp += ["set title '%s (%s epochs)'" % (model.upper(), ep),
                   "set yrange [%.2f:%.2f]" % (ylo, yhi), "plot " + ", ".join(plots)]
        gp.append("unset multiplot")
        script = os.path.join(tmp, "plot.gp")
        with open(script, "w") as f:
            f.write("\n".join(gp) + "\n")
        subprocess.check_call(["gnuplot", script])


def main():
    ap = argparse.ArgumentParser(description="Large-batch study (LARS/LAMB vs momentum/Adam).")
    ap.add_argument("command", nargs="?", default="grid",
                    choices=("grid", "sweep", "generate", "report"))
    ap.add_argument("--builddir", default=os.environ.get("FL_BUILDDIR",
                                                         os.path.join(TOP, "build")))
    ap.add_argument("--only", default="", help="grid: run only jobs whose name contains this")
    ap.add_argument("--models", default="mlp,cnn", help="sweep: comma-separated models")
    ap.add_argument("--redo", action="store_true",
                    help="sweep: rerun points already in sweep.tsv (default: reuse them)")
    args = ap.parse_args()
    args.builddir = os.path.abspath(args.builddir)
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in MODELS:
            sys.exit("large_batch.py: unknown model %s" % m)
    {"grid": cmd_grid, "sweep": cmd_sweep, "generate": cmd_generate,
     "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    main()
