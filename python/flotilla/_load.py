"""flotilla.load_trained: the initializers of a trained ONNX file (the
trainer's train.export_onnx) copied into a PyTorch module by name, as
deploy/examples/onnx/eval_onnx.py does; every name the module has must be
there with its shape."""
from ._errors import LoadError


def load_trained(module, path):
    """Copy the initializers of the ONNX file `path` into `module`'s
    state_dict by name.  The file is checked with onnx.checker first.
    LoadError names the module's entries the file lacks (batch norm's
    num_batches_tracked excepted) or the first shape that differs.
    Returns the names copied, in the state_dict's order."""
    import numpy as np
    import onnx
    import torch
    from google.protobuf.message import DecodeError
    from onnx import numpy_helper
    try:
        proto = onnx.load(path)
        onnx.checker.check_model(proto)
    except (OSError, DecodeError, onnx.checker.ValidationError) as e:
        raise LoadError(f"{path}: not a valid ONNX file: {e}") from None
    inits = {i.name: i for i in proto.graph.initializer}
    sd = module.state_dict()
    missing = [k for k in sd if k not in inits and not k.endswith("num_batches_tracked")]
    if missing:
        raise LoadError(f"{path}: no initializer for {', '.join(missing)} (the file has "
                        f"{', '.join(sorted(inits)) or 'none'})")
    new, copied = {}, []
    for k, v in sd.items():
        if k not in inits:
            new[k] = v
            continue
        a = torch.from_numpy(np.array(numpy_helper.to_array(inits[k])))
        if tuple(a.shape) != tuple(v.shape):
            raise LoadError(f"{path}: {k} has shape {tuple(a.shape)} in the file, "
                            f"{tuple(v.shape)} in the module")
        new[k] = a.to(v.dtype)
        copied.append(k)
    module.load_state_dict(new)
    return copied
