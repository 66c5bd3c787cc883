#!/bin/sh
# test_serving_export.sh - pserver.serving_export: at every checkpoint
# (the first a base, the others its deltas) each pserver writes its sparse tables
# for serving (ids and rows of the base, of each delta, the ids deleted,
# a manifest); deploy/examples/recsys/apply_serving_deltas.py applies base
# and deltas, and the result equals the trainer's final export
# (train.export_onnx: a full DumpSparse) bit for bit.  onnx_sparse_exact.py's
# oob.onnx (one Embedding read by ids 0..29 without a modulo) over its 48
# samples, sync PS, 2 trainers, 2 pservers, admission on, at most 10 rows on a
# pserver (evictions: the deltas carry deleted ids; not expiry, whose sweep
# at the last checkpoint could delete rows after the trainer's export), a
# checkpoint every step; once all in memory, once with pserver.memory_budget
# (a few rows in memory, the others read from the disk tier's copy).
# Needs /usr/bin/python3 with torch and onnx (skipped without).  Seconds.
# KEEP=1 keeps the temporary directory.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
RUN=$FL_BUILDDIR/flotilla-run
py=/usr/bin/python3
aux=$FL_SRCDIR/tests/integration/onnx_sparse_exact.py
apply=$FL_SRCDIR/deploy/examples/recsys/apply_serving_deltas.py
"$py" -c 'import torch, onnx' 2>/dev/null || { echo "SKIP: no torch/onnx for $py"; exit 77; }
tmp=$(mktemp -d /tmp/fl_serving_export.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
d=$tmp/data
timeout 120 "$py" "$aux" data "$d" > "$tmp/py.out" 2>&1 ||
  { cat "$tmp/py.out"; echo "FAIL: onnx_sparse_exact.py data"; exit 1; }

# export_run NAME DELETED [PSERVER-EXTRA]: the job (its files under
# $tmp/NAME), its serving export applied and compared with the trainer's
# export; DELETED 1: the deltas kept must have deleted ids.
export_run() {
  _t=$tmp/$1
  mkdir -p "$_t"
  cat > "$_t/job.yaml" <<EOF
model: {kind: onnx, path: $d/oob.onnx, loss: bce_with_logits}
data:
  format: npy
  inputs: {ids: $d/ids.npy, bag: $d/bag.npy}
  train_y: $d/y.npy
  test_inputs: {ids: $d/test_ids.npy, bag: $d/test_bag.npy}
  test_y: $d/test_y.npy
  shuffle: false
optimizer: {name: sgd, lr: 0.3}
train: {epochs: 3, batch_size: 6, eval_batch_size: 24, seed: 1, log_interval: 1, num_threads: 1, export_onnx: $_t/out.onnx}
cluster: {mode: ps, heartbeat_timeout_s: 20, collective_timeout_s: 30}
pserver:
  sparse_tables: {emb.weight: {optimizer: {name: adagrad, lr: 0.3}}}
  sparse: {admit_threshold: 2, max_rows: 10}
  checkpoint_dir: $_t/ck
  checkpoint_interval_steps: 1
  checkpoint_delta: {every: 100}
  serving_export: $_t/serving
${3:-}
EOF
  if ! timeout 90 "$RUN" --log_dir "$_t/log" --mode ps --server_num 2 --nproc_per_node 2 \
      "$_t/job.yaml" > "$_t/run.out" 2>&1; then
    tail -n 5 "$_t/run.out" "$_t/log"/* 2> /dev/null
    fail "$1: flotilla-run failed"
    return
  fi
  for s in 0 1; do
    m=$_t/serving/pserver-$s/manifest.json
    [ -f "$m" ] || fail "$1: pserver $s wrote no serving manifest"
  done
  ls "$_t/serving"/pserver-*/ | grep -q 'delta-[0-9]*-[0-9]*\.deleted\.npy' ||
    fail "$1: no delta was exported"
  timeout 60 "$py" "$apply" "$_t/serving" "$_t/applied" > "$_t/apply.out" 2>&1 ||
    { cat "$_t/apply.out"; fail "$1: apply_serving_deltas.py"; }
  timeout 60 "$py" - "$_t" "$2" > "$_t/cmp.out" 2>&1 <<'PY' || { cat "$_t/cmp.out"; fail "$1: applied serving export against the trainer's export"; }
import glob, os, sys
import numpy as np
tmp = sys.argv[1]
deleted = sum(len(np.load(f)) for f in glob.glob(tmp + "/serving/pserver-*/*.deleted.npy"))
assert deleted > 0 or sys.argv[2] == "0", "no deletion in any delta"
for t in ("emb.weight",):
    a_ids, a_rows = np.load("%s/applied.%s.ids.npy" % (tmp, t)), np.load("%s/applied.%s.rows.npy" % (tmp, t))
    e_ids, e_rows = np.load("%s/out.onnx.%s.ids.npy" % (tmp, t)), np.load("%s/out.onnx.%s.rows.npy" % (tmp, t))
    assert a_ids.dtype == e_ids.dtype and a_rows.dtype == e_rows.dtype, t
    assert np.array_equal(a_ids, e_ids), "%s: ids %s vs %s" % (t, a_ids, e_ids)
    assert a_rows.tobytes() == e_rows.tobytes(), "%s: rows differ" % t
    print("%s: %d rows equal" % (t, len(a_ids)))
print("deleted ids in deltas: %d" % deleted)
PY
  sed "s/^/$1: /" "$_t/cmp.out"
}

export_run mem 1
# With a disk tier of about 4 rows a pserver: most rows are read from the
# store's copy beside each checkpoint (a base's all of them, a delta's
# those changed and demoted since the checkpoint before).  Its deltas
# overflow sooner (the keys demoted in an interval, listed for the export,
# reach max_rows), so bases come more often: the last may have no deletion.
export_run tier 0 "  memory_budget: 400"
grep -q 'disk tier .*sparse rows in memory within' "$tmp/tier/log"/serverlog.0 ||
  fail "tier: the pserver has no disk tier"
grep -q 'serving export of step [0-9]* (delta [0-9]* of base' "$tmp/tier/log"/serverlog.0 ||
  fail "tier: pserver 0 exported no delta"
[ "$fails" = 0 ] && echo "ok: serving export (base + deltas) equals the trainer's export, all in memory and with pserver.memory_budget" && exit 0
[ -n "${KEEP:-}" ] && echo "kept $tmp"
exit 1
