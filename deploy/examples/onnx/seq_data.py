"""seq_data.py - what the two sequence examples share: synthetic token data
written as .npy files (int64 ids, a bool padding mask, class ids per
sequence or per token), loading a Flotilla-trained ONNX file back into the
PyTorch module by initializer name, and accuracy as the trainer counts it.

The data are synthetic so the examples need nothing downloaded: sequences
of 8 to SEQ_LEN token ids from 1..VOCAB-1, padded with id 0 (mask False)."""
import argparse
import os

import numpy as np
import torch

VOCAB, SEQ_LEN = 200, 24
IGNORE = -100  # nn.CrossEntropyLoss's ignore_index, the job's model.ignore_index


def tokens(n, rng):
    """n padded sequences: ids [n, SEQ_LEN] int64 and mask [n, SEQ_LEN] bool."""
    lens = rng.integers(8, SEQ_LEN + 1, size=n)
    ids = rng.integers(1, VOCAB, size=(n, SEQ_LEN)).astype(np.int64)
    mask = np.arange(SEQ_LEN)[None, :] < lens[:, None]
    ids[~mask] = 0
    return ids, mask


def save_split(out_dir, split, arrays):
    """arrays: {name: ndarray}, saved as <split>_<name>.npy."""
    os.makedirs(out_dir, exist_ok=True)
    for name, a in arrays.items():
        np.save(os.path.join(out_dir, f"{split}_{name}.npy"), a)


def load_split(data_dir, split, names, limit=0):
    out = {}
    for name in names:
        a = np.load(os.path.join(data_dir, f"{split}_{name}.npy"))
        out[name] = torch.from_numpy(a[:limit] if limit else a)
    return out


def load_onnx_into(model, path):
    """Copy the initializers of the ONNX file at path into model's
    state_dict by name (Flotilla keeps the imported names; export with
    do_constant_folding=False so PyTorch keeps them too); onnx.checker
    first. Returns the names copied; exits naming a missing or misshapen one."""
    import onnx
    from onnx import numpy_helper
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    sd = model.state_dict()
    missing = [k for k in sd if k not in inits]
    if missing:
        raise SystemExit(f"{path}: no initializer for {', '.join(missing)}")
    new = {}
    for k, v in sd.items():
        a = torch.from_numpy(np.array(inits[k]))
        if tuple(a.shape) != tuple(v.shape):
            raise SystemExit(f"{path}: {k} has shape {tuple(a.shape)}, the module {tuple(v.shape)}")
        new[k] = a.to(v.dtype)
    model.load_state_dict(new)
    return list(sd)


def accuracy(logits, y):
    """Top-1 accuracy over the labels that are not IGNORE (per sequence
    [N] with logits [N, C], or per token [N, L] with logits [N, L, C])."""
    keep = y != IGNORE
    return ((logits.argmax(-1) == y) & keep).sum().item() / max(keep.sum().item(), 1)


def export(model, example, input_names, out):
    """Export as the importer wants it: opset 17, training mode, names kept,
    dynamic batch on every input and the output."""
    axes = {n: {0: "batch"} for n in input_names}
    axes["logits"] = {0: "batch"}
    torch.onnx.export(model, example, out, opset_version=17, input_names=input_names,
                      output_names=["logits"], dynamic_axes=axes,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def cli(doc, build, make_data, inputs, examples, unit="samples"):
    """The examples' command line: `data DIR`, `export OUT.onnx [--seed N]`,
    `eval TRAINED.onnx DIR [--limit N]`. examples: the export's example
    inputs (a tuple of tensors, one per name in inputs)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("data").add_argument("dir")
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--seed", type=int, default=1)
    v = sub.add_parser("eval")
    v.add_argument("onnx")
    v.add_argument("dir")
    v.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "data":
        make_data(a.dir)
    elif a.cmd == "export":
        export(build(a.seed), examples, inputs, a.out)
    else:
        m = build()
        load_onnx_into(m, a.onnx)
        d = load_split(a.dir, "test", inputs + ["y"], a.limit)
        m.eval()
        with torch.no_grad():
            acc = accuracy(m(*[d[k] for k in inputs]), d["y"])
        counted = int((d["y"] != IGNORE).sum())
        print(f"test acc1: {acc:.4f} ({counted} {unit} of {len(d['y'])} sequences)")
