"""Reading a trainer's log lines (trainer/loop.c's formats, as
deploy/run_progress.c reads them): a progress bar while the run goes, and
the metrics dict at the end."""
import re
import sys
import time

_PLAN = re.compile(r"training \S+: (\d+) epochs of (\d+) steps \((\d+) x")
# After "loss: X" the lines carry the task's metrics as ", NAME: X" pairs:
# acc1 (and acc5 with more than 5 classes), or mse, mae and r2 (loss mse),
# or auc and logloss (bce_with_logits).  Validation lines end with the step.
_NUM = r"[-0-9.naif]+"
_BATCH = re.compile(r"^\[Epoch (\d+), batch (\d+)\] loss: (%s)((?:, \w+: %s)*)" % (_NUM, _NUM))
_TEST = re.compile(r"^\[Epoch (\d+)\] test loss: (%s)((?:, \w+: %s)*)" % (_NUM, _NUM))
_VAL = re.compile(r"^\[Epoch (\d+)\] val loss: (%s)((?:, \w+: %s)*) \(step (\d+)\)"
                  % (_NUM, _NUM))
_PAIR = re.compile(r", (\w+): (%s)" % _NUM)


def _pairs(prefix, text):
    """The ", NAME: X" pairs of text as {prefix + NAME: X}."""
    return {prefix + k: float(v) for k, v in _PAIR.findall(text)}


def _figures(pairs):
    """The progress bar's figures of a line's pairs: acc1, else auc, else r2."""
    for k, name in (("acc1", "acc"), ("auc", "auc"), ("r2", "r2")):
        if k in pairs:
            return f"  {name} {pairs[k]:.4f}"
    return ""


_EPOCH = re.compile(r"^\[Epoch (\d+)\] train: (\d+) steps, (\d+) samples, ([0-9.]+) s, "
                    r"([0-9.]+) samples/s")
_DONE = re.compile(r"\bdone: (\d+) steps, (\d+) epochs")
_EARLY = re.compile(r"\bearly stopping at step (\d+)")
_BEST = re.compile(r"\bkeep_best: the final test and export use the model of step (\d+)")


def _val(m, history, v):
    """A validation line into m (val_loss, val_NAME, val_step) and its epoch."""
    rec = dict(_pairs("val_", v.group(3)), val_loss=float(v.group(2)), val_step=int(v.group(4)))
    history.setdefault(int(v.group(1)), {"epoch": int(v.group(1))}).update(rec)
    m.update(rec)


def _stops(m, line):
    """early_stopped_at and best_step from their log lines."""
    for rx, key in ((_EARLY, "early_stopped_at"), (_BEST, "best_step")):
        r = rx.search(line)
        if r:
            m[key] = int(r.group(1))


def parse(lines):
    """The metrics of trainer 0's log lines: the last test line's figures
    (test_loss and test_NAME per metric: test_acc1, test_acc5 with more
    than 5 classes, or test_mse, test_mae, test_r2, or test_auc and
    test_logloss; epoch), the last validation's (val_loss, val_NAME,
    val_step), the last training line's (train_loss, train_NAME), steps,
    early_stopped_at and best_step (keep_best), and per epoch `history`
    (test and last validation figures, samples/s).  Keys without a line
    are absent."""
    m, history = {}, {}
    for line in lines:
        b = _BATCH.match(line)
        t = _TEST.match(line)
        e = _EPOCH.match(line)
        d = _DONE.search(line)
        v = _VAL.match(line)
        _stops(m, line)
        if v:
            _val(m, history, v)
        elif b:
            m.update(_pairs("train_", b.group(4)), train_loss=float(b.group(3)))
        elif t:
            ep = int(t.group(1))
            rec = dict(_pairs("test_", t.group(3)), test_loss=float(t.group(2)))
            history.setdefault(ep, {"epoch": ep}).update(rec)
            m.update(rec, epoch=ep)
        elif e:
            ep = int(e.group(1))
            history.setdefault(ep, {"epoch": ep}).update(
                train_steps=int(e.group(2)), train_samples=int(e.group(3)),
                train_seconds=float(e.group(4)), samples_per_s=float(e.group(5)))
            m["samples_per_s"] = float(e.group(5))
        elif d:
            m["steps"], m["epochs"] = int(d.group(1)), int(d.group(2))
    m["history"] = [history[k] for k in sorted(history)]
    return m


class Bar:
    """A one-line progress bar on a stream, fed the trainer's lines."""

    def __init__(self, stream=None, width=30):
        self.out = stream or sys.stderr
        self.width = width
        self.epochs = self.per_epoch = 0
        self.t0 = time.monotonic()
        self.text = ""
        self.test = ""
        self.last = (0, "")  # epoch and figures of the last training line

    def feed(self, line):
        p = _PLAN.search(line)
        if p:
            self.epochs, self.per_epoch = int(p.group(1)), int(p.group(2)) * int(p.group(3))
            return
        t = _TEST.match(line) or _VAL.match(line)
        if t:
            f = _figures(_pairs("", t.group(3)))
            what = "  test " if line.find("] test ") >= 0 else "  val "
            self.test = what + f.strip() if f else ""
        if _DONE.search(line) and self.epochs:
            self.draw(1.0, *self.last)
        b = _BATCH.match(line)
        if b and self.epochs and self.per_epoch:
            done = int(b.group(1)) * self.per_epoch + int(b.group(2)) + 1
            self.last = (int(b.group(1)),
                         f"  loss {float(b.group(3)):.4f}" + _figures(_pairs("", b.group(4))))
            self.draw(done / (self.epochs * self.per_epoch), *self.last)

    def draw(self, frac, epoch, figures):
        frac = min(max(frac, 0.0), 1.0)
        fill = int(frac * self.width)
        el = time.monotonic() - self.t0
        eta = f"  ETA {el / frac - el:.0f} s" if 0 < frac < 1 else f"  {el:.1f} s"
        self.text = (f"\r[{'#' * fill}{'.' * (self.width - fill)}] {100 * frac:3.0f}%  "
                     f"epoch {epoch + 1}/{self.epochs}{figures}{self.test}{eta}")
        self.out.write(self.text + "\033[K")
        self.out.flush()

    def close(self):
        if self.text:
            self.out.write("\n")
            self.out.flush()
