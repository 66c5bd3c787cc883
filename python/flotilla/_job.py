"""flotilla.Job: a job file built from keyword arguments, its data written
as .npy files, and its run by flotilla-trainer (one process) or
flotilla-run (several, or pservers), as the README's "Running jobs" does
by hand.  Nothing is interpreted here: the job loader, the importer and the
launcher refuse with their own messages, raised as exceptions."""
import os
import signal
import subprocess
import sys
import tempfile
import threading

from . import _bin, _progress, _yaml
from ._errors import JobError, RunError

SECTIONS = ("model", "data", "optimizer", "lr_schedule", "train", "cluster", "pserver",
            "strategy", "elastic")

# Paddle's DistributedStrategy names the job's strategy section takes
# (common/config.c); given to Job at the top level they go there.
STRATEGY_KEYS = frozenset("""
a_sync a_sync_configs gradient_merge gradient_merge_configs lars lars_configs lamb
lamb_configs amp amp_configs recompute recompute_configs fuse_all_reduce_ops
fuse_grad_size_in_MB fuse_grad_size_in_TFLOPS use_hierarchical_allreduce
hierarchical_allreduce_inter_nranks nccl_comm_num sync_nccl_allreduce sync_batch_norm
grad_compression fp16_allreduce auto semi_auto dgc dgc_configs localsgd localsgd_configs
adaptive_localsgd adaptive_localsgd_configs pipeline pipeline_configs sharding
sharding_configs tensor_parallel tensor_parallel_configs hybrid_configs elastic qat
qat_configs asp heter_ccl_mode find_unused_parameters without_graph_optimization
fuse_grad_merge calc_comm_same_stream last_comm_group_size_MB gradient_scale_configs
cudnn_exhaustive_search conv_workspace_size_limit cudnn_batchnorm_spatial_persistent
build_strategy execution_strategy""".split())

# data keys that name one file, and their short forms
DATA_FILES = ("train_x", "train_y", "test_x", "test_y", "train_images", "train_labels",
              "test_images", "test_labels", "train_path", "test_path")
DATA_ALIASES = {"x": "train_x", "y": "train_y"}
# data keys that name a list of files or globs (data.format criteo)
DATA_FILE_LISTS = ("train_files", "test_files")
# data keys that map input names to files
DATA_INPUTS = ("inputs", "test_inputs")
# other keys holding a path, made absolute
PATH_KEYS = {"model": ("path", "plugin_path"), "train": ("checkpoint_dir", "export_onnx"),
             "cluster": ("token_file",)}
EXPORTABLE = ("onnx", "logreg", "mlp", "cnn")
# flotilla-run options flotilla-trainer takes as well (a one-process run)
TRAINER_FLAGS = ("resume", "fresh")
DONE_GRACE_S = 30


def _is_array(v):
    return hasattr(v, "shape") and hasattr(v, "dtype")


def _to_numpy(v):
    """A numpy array of v (a torch tensor or array), as the .npy reader
    takes it: C order, float64 as float32."""
    import numpy as np
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    a = np.ascontiguousarray(v)
    return a.astype(np.float32) if a.dtype == np.float64 else a


def _section(name, value):
    if value is None:
        return {}
    if name == "model" and isinstance(value, (str, os.PathLike)):
        return {"kind": "onnx", "path": os.fspath(value)}
    if not isinstance(value, dict):
        raise TypeError(f"Job({name}=...): want a dict of the job file's {name} section, "
                        f"got {type(value).__name__}")
    return dict(value)


class Job:
    """A Flotilla job: keyword arguments mirror the job file's sections
    (model, data, optimizer, lr_schedule, train, cluster, pserver, strategy;
    each a dict of the README's keys), and Paddle's DistributedStrategy
    names (gradient_merge, amp, lars, lamb, fuse_grad_size_in_MB, a_sync,
    their *_configs, ...) are taken at the top level too.

    model="file.onnx" is short for {kind: onnx, path: file.onnx}.  In data,
    numpy arrays or torch tensors (x / y or train_x, train_y, test_x,
    test_y; inputs / test_inputs as {name: array}) are written as .npy
    files into `workdir` (float64 becomes float32; data.format becomes npy).
    Relative paths are taken from the current directory.  Unless the job
    says otherwise, train.export_onnx is workdir/trained.onnx (the
    `trained_path` to give load_trained).  workdir defaults to a fresh
    temporary directory, which is kept."""

    def __init__(self, workdir=None, **kwargs):
        self.workdir = os.path.abspath(workdir) if workdir else tempfile.mkdtemp(
            prefix="flotilla-job-")
        os.makedirs(self.workdir, exist_ok=True)
        self.path = os.path.join(self.workdir, "job.yaml")
        self.sections = {}
        strategy = {}
        for key, value in kwargs.items():
            if key in SECTIONS:
                self.sections[key] = _section(key, value)
            elif key in STRATEGY_KEYS:
                strategy[key] = value
            else:
                raise TypeError(f"Job(): unknown argument '{key}': want a section "
                                f"({', '.join(SECTIONS)}) or a strategy key (gradient_merge, "
                                f"amp, lars, lamb, a_sync, ...)")
        if strategy:
            self.sections.setdefault("strategy", {}).update(strategy)
        self.arrays = {}
        self._resolve()

    def _resolve(self):
        """Paths made absolute, arrays set aside for write(), defaults."""
        for sec, keys in PATH_KEYS.items():
            d = self.sections.get(sec, {})
            for k in keys:
                if isinstance(d.get(k), (str, os.PathLike)) and d[k]:
                    d[k] = os.path.abspath(os.fspath(d[k]))
        data = self.sections.get("data")
        if data is not None:
            self.sections["data"] = self._resolve_data(data)
        model = self.sections.get("model", {})
        if "path" in model:
            model.setdefault("kind", "onnx")
        if model.get("kind") in EXPORTABLE:
            train = self.sections.setdefault("train", {})
            train.setdefault("export_onnx", os.path.join(self.workdir, "trained.onnx"))

    def _file(self, name, value):
        """value's file: an array is set aside to be written as name.npy."""
        if _is_array(value):
            path = os.path.join(self.workdir, "data", name + ".npy")
            self.arrays[path] = value
            return path
        return os.path.abspath(os.fspath(value))

    def _resolve_data(self, data):
        out = {}
        for key, value in data.items():
            key = DATA_ALIASES.get(key, key)
            if key in out:
                raise TypeError(f"Job(data=...): {key} given twice")
            if key in DATA_FILES and value is not None:
                out[key] = self._file(key, value)
            elif key in DATA_FILE_LISTS and value is not None:
                paths = [value] if isinstance(value, (str, os.PathLike)) else value
                out[key] = [os.path.abspath(os.fspath(p)) for p in paths]
            elif key in DATA_INPUTS and value is not None:
                out[key] = {n: self._file(f"{key}.{n}", v) for n, v in value.items()}
            else:
                out[key] = value
        if self.arrays:
            out.setdefault("format", "npy")
        return out

    @property
    def trained_path(self):
        """Where the run writes the trained model (train.export_onnx), or None."""
        return self.sections.get("train", {}).get("export_onnx")

    def yaml(self):
        """The job file's text."""
        doc = {k: self.sections[k] for k in SECTIONS if k in self.sections}
        return "# Written by flotilla.Job (Python)\n" + _yaml.dump(doc) + "\n"

    def write(self):
        """Write the data files (once: the arrays are then let go) and the
        job file; returns the job file's path."""
        import numpy as np
        for path, value in self.arrays.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            np.save(path, _to_numpy(value))
        self.arrays.clear()
        try:
            text = self.yaml()
        except TypeError as e:
            raise JobError(f"{self.path}: {e}") from None
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(text)
        return self.path

    def check(self, timeout=120):
        """Write the job and have flotilla-trainer load it and build its
        model (--check_model; no data is read); JobError with its message
        when it refuses."""
        self.write()
        rc, out = _bin.check_output([_bin.find("flotilla-trainer"), "--config", self.path,
                                     "--check_model"], timeout)
        if rc != 0:
            raise JobError(f"{self.path}: flotilla-trainer refused the job:\n"
                           f"{_bin.error_message(out)}", out)

    def run(self, nproc_per_node=1, mode=None, server_num=None, log_dir=None, max_steps=None,
            progress=None, timeout=None, **launcher):
        """Train: flotilla-trainer for one local process, else flotilla-run
        (nproc_per_node trainers, `mode` collective or ps, `server_num`
        pservers a node; further launcher options by their flotilla-run
        names: ips, gpus, port, max_restart, resume, fresh, ...).  Logs go
        to log_dir (default workdir/log; trainer 0's in workerlog.0).
        `progress`: a bar on stderr (default: when stderr is a terminal).
        Returns trainer 0's metrics (see _progress.parse) with log_dir,
        log, metrics_csv and trained_onnx paths where they exist; RunError
        with the programs' message when the run fails."""
        self.write()
        log_dir = os.path.abspath(log_dir or os.path.join(self.workdir, "log"))
        os.makedirs(log_dir, exist_ok=True)
        given = {k for k, v in launcher.items() if v not in (None, False)}
        local = (nproc_per_node == 1 and mode in (None, "local") and server_num is None
                 and given <= set(TRAINER_FLAGS)
                 and self.sections.get("cluster", {}).get("mode", "local") == "local")
        tail = ["--max_steps", str(max_steps)] if max_steps else []
        if local:
            args = [_bin.find("flotilla-trainer"), "--config", self.path]
            args += _launcher_flags(**launcher) + tail
        else:
            args = [_bin.find("flotilla-run"), "--log_dir", log_dir,
                    "--nproc_per_node", str(nproc_per_node)]
            args += _launcher_flags(mode=mode, server_num=server_num, **launcher)
            args += [self.path] + (["--"] + tail if tail else [])
        if progress is None:
            progress = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        lines, rc, timed_out = _stream(
            args, os.path.join(log_dir, "workerlog.0") if local else None,
            _progress.Bar() if progress else None, timeout)
        out = "\n".join(lines)
        if timed_out:
            raise RunError(f"{self.path}: stopped after the timeout of {timeout} s", out, rc,
                           log_dir)
        if rc != 0:
            why = _bin.error_message(out) if local else _logs_errors(out, log_dir)
            raise RunError(f"{self.path}: {os.path.basename(args[0])} failed (exit {rc}):\n"
                           f"{why}", out, rc, log_dir)
        return self._metrics(log_dir)

    def _metrics(self, log_dir):
        log = os.path.join(log_dir, "workerlog.0")
        with open(log, encoding="utf-8", errors="replace") as f:
            m = _progress.parse(f.read().splitlines())
        m["log_dir"], m["log"] = log_dir, log
        csv = os.path.join(log_dir, "metrics.csv")
        if os.path.exists(csv):
            m["metrics_csv"] = csv
        if self.trained_path and os.path.exists(self.trained_path):
            m["trained_onnx"] = self.trained_path
        return m


def _logs_errors(out, log_dir):
    """flotilla-run's failure: the error lines of every process's log in
    log_dir (the first to fail is often not trainer 0), then its own."""
    errs = []
    for name in sorted(os.listdir(log_dir)):
        if name.startswith(("workerlog.", "serverlog.")):
            with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as f:
                errs += [e for e in _bin.error_lines(f.read()) if e not in errs]
    errs += [e for e in _bin.error_lines(out) if e not in errs]
    return "\n".join(errs) if errs else _bin.error_message(out)


def _launcher_flags(**opts):
    """flotilla-run's --name value pairs of opts (None and False left out)."""
    args = []
    for name, value in opts.items():
        if value is None or value is False:
            continue
        if value is True:
            args.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            args += [f"--{name}", ",".join(str(v) for v in value)]
        else:
            args += [f"--{name}", str(value)]
    return args


def _stream(args, log_path, bar, timeout):
    """Run args, its output line by line to the bar (and to log_path when
    given); on timeout or Ctrl-C the program is asked to stop (SIGTERM:
    the step ends, a checkpoint is written) and then killed.  Returns
    (lines, exit status, whether the timeout stopped it)."""
    log = open(log_path, "w", encoding="utf-8") if log_path else None
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)
    lines = []
    timer = _Deadline(proc, timeout)
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if log:
                log.write(line + "\n")
            if bar:
                bar.feed(line)
        rc = proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        timer.cancel()
        if bar:
            bar.close()
        if log:
            log.close()
    return lines, rc, timer.fired


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(DONE_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Deadline:
    """Stops proc (as _stop) once timeout seconds have passed; None: never."""

    def __init__(self, proc, timeout):
        self.fired = False
        self.timer = None
        if timeout:
            self.timer = threading.Timer(timeout, self._fire, (proc,))
            self.timer.daemon = True
            self.timer.start()

    def _fire(self, proc):
        self.fired = True
        _stop(proc)

    def cancel(self):
        if self.timer:
            self.timer.cancel()
