#!/usr/bin/python3
"""load_sparse_export.py - a Flotilla model trained with pserver.sparse_tables
back into its PyTorch module.

train.export_onnx writes, for a job with sparse tables (rank 0, after the
last step):
  EXPORT                      the ONNX model: every dense initializer holds
                              its trained value; each sparse table's
                              initializer is left as it was in the model file
  EXPORT.<table>.ids.npy      int64 [n]: the ids of the table's rows that
                              exist on the pservers, ascending
  EXPORT.<table>.rows.npy     float32 [n, width]: those rows
<table> is the initializer's name (e.g. emb.weight), which is the module's
parameter name when the model came from torch.onnx.export.

  import load_sparse_export as lse
  lse.load_onnx_initializers(module, "model.trained.onnx")  # dense ones
  lse.load_sparse_export(module, "model.trained.onnx")       # the tables

load_sparse_export places each row at its id in the weight of the
nn.Embedding / nn.EmbeddingBag parameter of the same name; rows the
pservers never created (an id no batch named under init uniform, the
padding id) keep the module's values.  An id at or beyond the module's
vocabulary (the weight's first dimension) is refused with a ValueError.
Run as a script it prints what an export holds:
  load_sparse_export.py EXPORT"""
import glob
import os
import sys

import numpy as np


def tables_of(export):
    """Names of the sparse tables exported next to EXPORT."""
    suffix = ".ids.npy"
    found = sorted(glob.glob(glob.escape(export) + ".*" + suffix))
    return [f[len(export) + 1:-len(suffix)] for f in found]


def read_table(export, table):
    """(ids int64 [n], rows float32 [n, width]) of one exported table."""
    ids = np.load("%s.%s.ids.npy" % (export, table))
    rows = np.load("%s.%s.rows.npy" % (export, table))
    if ids.ndim != 1 or rows.ndim != 2 or rows.shape[0] != ids.shape[0]:
        raise ValueError("%s: table %s: ids %s and rows %s do not match (ids [n], rows "
                         "[n, width])" % (export, table, ids.shape, rows.shape))
    return ids, rows


def load_sparse_export(module, export, tables=None):
    """Each exported table (or those named in tables) into the parameter of
    module called like it; returns the names loaded."""
    import torch
    params = dict(module.named_parameters())
    names = tables if tables is not None else tables_of(export)
    for name in names:
        if name not in params:
            raise ValueError("%s: table %s is no parameter of the module (its parameters: %s)"
                             % (export, name, ", ".join(params)))
        w = params[name]
        ids, rows = read_table(export, name)
        if w.dim() != 2 or rows.shape[1] != w.shape[1]:
            raise ValueError("%s: table %s has rows of %d, the module's %s is %s"
                             % (export, name, rows.shape[1], name, tuple(w.shape)))
        if len(ids) and (ids.min() < 0 or ids.max() >= w.shape[0]):
            bad = ids[(ids < 0) | (ids >= w.shape[0])][0]
            raise ValueError("%s: table %s holds id %d, outside the module's vocabulary of %d "
                             "rows (nn.Embedding(num_embeddings=%d)): use a module with a "
                             "larger vocabulary" % (export, name, bad, w.shape[0], w.shape[0]))
        with torch.no_grad():
            w[torch.from_numpy(ids)] = torch.from_numpy(rows).to(w.dtype)
    return names


def load_onnx_initializers(module, onnx_path):
    """The dense trained initializers of the exported ONNX model into the
    module's parameters and buffers of the same names (sparse tables are
    skipped: their initializers were not trained; load_sparse_export)."""
    import onnx
    import torch
    from onnx import numpy_helper
    sparse = set(tables_of(onnx_path))
    state = module.state_dict()
    for t in onnx.load(onnx_path).graph.initializer:
        if t.name in state and t.name not in sparse:
            state[t.name] = torch.from_numpy(numpy_helper.to_array(t).copy())
    module.load_state_dict(state)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    export = sys.argv[1]
    for name in tables_of(export):
        ids, rows = read_table(export, name)
        print("%s: %d rows of %d, ids %s" % (name, len(ids), rows.shape[1],
                                              "%d..%d" % (ids[0], ids[-1]) if len(ids) else "-"))
    if not os.path.exists(export):
        print("(no %s beside them)" % export)
    return 0


if __name__ == "__main__":
    sys.exit(main())
