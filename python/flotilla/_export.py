"""flotilla.export: a PyTorch module to an ONNX file the way Flotilla's
importer wants it (the README's "Export" step), then checked by the
importer itself (flotilla-trainer --check_model), so a refusal shows here
with the importer's message rather than at the start of a run."""
import copy
import inspect
import os
import tempfile

from . import _bin, _yaml
from ._errors import ExportError

OPSET = 17
CHECK_TIMEOUT_S = 120


def _as_tuple(example_inputs):
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    return (example_inputs,)


def _input_names(module, n):
    """The forward's argument names for n inputs, else input0, input1, ..."""
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) >= n:
        return [p.name for p in params[:n]]
    return ["input"] if n == 1 else [f"input{i}" for i in range(n)]


def _output_names(module, inputs):
    """output, or output0, output1, ... when forward returns several tensors."""
    import torch
    with torch.no_grad():
        out = copy.deepcopy(module).train()(*inputs)
    n = len(out) if isinstance(out, (list, tuple)) else 1
    return ["output"] if n == 1 else [f"output{i}" for i in range(n)]


def _write_onnx(module, inputs, path, input_names, output_names):
    """torch.onnx.export as the importer wants it, with the module's own
    initial values (a training-mode export runs a forward, which moves batch
    norm's running statistics)."""
    import onnx
    import torch
    from onnx import numpy_helper
    m = copy.deepcopy(module).train()
    axes = {name: {0: "batch"} for name in list(input_names) + list(output_names)}
    torch.onnx.export(m, inputs, path, opset_version=OPSET, input_names=list(input_names),
                      output_names=list(output_names), dynamic_axes=axes,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    proto = onnx.load(path)
    sd = module.state_dict()
    for i, init in enumerate(proto.graph.initializer):
        if init.name in sd:
            value = sd[init.name].detach().cpu().numpy()
            proto.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, init.name))
    onnx.checker.check_model(proto)
    onnx.save(proto, path)


def check_model(path, loss="softmax_cross_entropy", output=None):
    """Load the ONNX file `path` with flotilla-trainer's importer
    (--check_model on a one-line job); ExportError with the importer's
    message when it refuses.  Returns the trainer's one-line summary."""
    trainer = _bin.find("flotilla-trainer")
    model = {"kind": "onnx", "path": os.path.abspath(path), "loss": loss, "output": output}
    with tempfile.TemporaryDirectory(prefix="flotilla-check-") as tmp:
        job = os.path.join(tmp, "job.yaml")
        with open(job, "w", encoding="utf-8") as f:
            f.write(_yaml.dump({"model": model}) + "\n")
        rc, out = _bin.check_output([trainer, "--config", job, "--check_model"], CHECK_TIMEOUT_S)
    if rc != 0:
        raise ExportError(f"Flotilla's importer refused the model:\n"
                          f"{_bin.error_message(out)}", out)
    return out.strip().splitlines()[-1] if out.strip() else ""


def export(module, example_inputs, path, input_names=None, output_names=None,
           loss="softmax_cross_entropy", output=None, check=True):
    """Export `module` to the ONNX file `path` as Flotilla imports it.

    Opset 17, training mode (batch norm keeps its running statistics as
    initializers), no constant folding (every parameter stays an initializer
    named as in the state_dict), a dynamic batch axis on every input and
    output; the file holds the module's own values.  `example_inputs` is a
    tensor or a tuple of tensors, batch first.  Input names default to the
    forward's argument names, output names to "output" (or output0, ...).
    With check=True the file is loaded by flotilla-trainer's importer
    (`loss` and `output` as the job's model.loss and model.output) and
    ExportError carries its message when it refuses.  The module is left
    untouched.  Returns path."""
    inputs = _as_tuple(example_inputs)
    if input_names is None:
        input_names = _input_names(module, len(inputs))
    if output_names is None:
        output_names = _output_names(module, inputs)
    _write_onnx(module, inputs, path, input_names, output_names)
    if check:
        check_model(path, loss=loss, output=output)
    return path
