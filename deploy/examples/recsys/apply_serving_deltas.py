#!/usr/bin/python3
"""apply_serving_deltas.py - the sparse tables of a pserver.serving_export
directory (a base and its deltas, per pserver) as one export in the layout
of the trainer's (load_sparse_export.py): OUT.<table>.ids.npy (int64 [n],
ascending) and OUT.<table>.rows.npy (float32 [n, width]).

The pservers write, at every checkpoint, into EXPORT_DIR/pserver-<i>:
  <table>.base-<N>.ids.npy / .rows.npy      all rows at base checkpoint N
  <table>.delta-<N>-<K>.ids.npy / .rows.npy the rows seen or changed since
                                            the checkpoint before (delta K
                                            of base N)
  <table>.delta-<N>-<K>.deleted.npy         int64: ids deleted since then
                                            (expired, evicted): applied
                                            before the delta's rows
  manifest.json                             {"format": 1, "step": S,
                                            "base": N, "deltas": K,
                                            "tables": [{"name", "dim"}]}
each file written whole (a temporary renamed), the manifest last.  Each
pserver holds its own share of the ids; the shares are merged.

  apply_serving_deltas.py EXPORT_DIR OUT   # writes OUT.<table>.*.npy
  import apply_serving_deltas as asd
  tables = asd.read_serving(EXPORT_DIR)    # {table: (ids, rows)}"""
import glob
import json
import os
import sys

import numpy as np


def apply_delta(ids, rows, d_ids, d_rows, deleted):
    """ids/rows after one delta: deleted ids go, then its rows replace or
    join the others; ids stay ascending."""
    keep = ~np.isin(ids, deleted) & ~np.isin(ids, d_ids)
    ids = np.concatenate([ids[keep], d_ids])
    rows = np.concatenate([rows[keep], d_rows.reshape(-1, rows.shape[1])])
    order = np.argsort(ids, kind="stable")
    return ids[order], rows[order]


def read_shard(shard):
    """{table: (ids, rows)} of one pserver's directory, as its manifest says."""
    with open(os.path.join(shard, "manifest.json")) as f:
        man = json.load(f)
    if man.get("format") != 1:
        raise ValueError("%s: manifest format %s, this script reads 1" % (shard, man.get("format")))
    base, deltas, out = man["base"], man["deltas"], {}
    for t in man["tables"]:
        name, dim = t["name"], t["dim"]
        stem = os.path.join(shard, "%s.base-%d" % (name, base))
        ids, rows = np.load(stem + ".ids.npy"), np.load(stem + ".rows.npy").reshape(-1, dim)
        for k in range(1, deltas + 1):
            stem = os.path.join(shard, "%s.delta-%d-%d" % (name, base, k))
            ids, rows = apply_delta(ids, rows, np.load(stem + ".ids.npy"),
                                    np.load(stem + ".rows.npy"), np.load(stem + ".deleted.npy"))
        out[name] = (ids, rows)
    return out


def read_serving(export_dir):
    """{table: (ids int64 [n] ascending, rows float32 [n, width])} merged over
    the pservers' directories of export_dir."""
    shards = sorted(glob.glob(os.path.join(glob.escape(export_dir), "pserver-*")))
    if not shards:
        raise ValueError("%s: no pserver-* directory (is it pserver.serving_export?)" % export_dir)
    parts = {}
    for s in shards:
        for name, (ids, rows) in read_shard(s).items():
            parts.setdefault(name, []).append((ids, rows))
    out = {}
    for name, ps in parts.items():
        ids = np.concatenate([p[0] for p in ps])
        rows = np.concatenate([p[1] for p in ps])
        order = np.argsort(ids, kind="stable")
        ids, rows = ids[order], rows[order]
        if len(ids) > 1 and (np.diff(ids) == 0).any():
            raise ValueError("%s: table %s: an id on two pservers" % (export_dir, name))
        out[name] = (ids, rows)
    return out


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__ + "\n")
        return 2
    for name, (ids, rows) in read_serving(argv[1]).items():
        np.save("%s.%s.ids.npy" % (argv[2], name), ids.astype(np.int64))
        np.save("%s.%s.rows.npy" % (argv[2], name), rows.astype(np.float32))
        print("%s: %d rows of %d" % (name, len(ids), rows.shape[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
