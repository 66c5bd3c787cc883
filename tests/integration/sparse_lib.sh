# sparse_lib.sh - sourced (by sh) by test_onnx_sparse.sh and
# test_onnx_sparse_exact.sh: their common set-up (the skip without torch
# and onnx, a temporary directory removed at exit unless KEEP is set,
# fail), the job file of onnx_sparse.py's click model and the check that a
# job is refused with a message.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
RUN=$FL_BUILDDIR/flotilla-run
py=/usr/bin/python3
"$py" -c 'import torch, onnx' 2>/dev/null || { echo "SKIP: no torch/onnx for $py"; exit 77; }
tmp=$(mktemp -d "/tmp/fl_${0##*/}.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# click_job NAME BATCH TABLES [EXTRA]: $tmp/NAME.yaml, the click model's
# job (SGD lr 0.3, exported to $tmp/NAME.onnx) with pserver.sparse_tables
# TABLES and EXTRA appended, over $dd (the data directory): the model
# $dd/$model.onnx (model), the training set $dd/${pre}*.npy (pre empty),
# loss $loss (bce_with_logits), cluster.mode $mode (ps), $epochs epochs
# (1) and max_steps $max_steps (0: no limit).
click_job() {
  # shellcheck disable=SC2154 # dd: set by the sourcing script
  cat > "$tmp/$1.yaml" <<EOT
model: {kind: onnx, path: $dd/${model:-model}.onnx, loss: ${loss:-bce_with_logits}}
data:
  format: npy
  inputs: {ids: $dd/${pre:-}ids.npy, bag: $dd/${pre:-}bag.npy}
  train_y: $dd/${pre:-}y.npy
  test_inputs: {ids: $dd/test_ids.npy, bag: $dd/test_bag.npy}
  test_y: $dd/test_y.npy
  shuffle: false
optimizer: {name: sgd, lr: 0.3}
train: {epochs: ${epochs:-1}, max_steps: ${max_steps:-0}, batch_size: $2, eval_batch_size: 24, seed: 1, log_interval: 1, num_threads: 1, export_onnx: $tmp/$1.onnx}
cluster: {mode: ${mode:-ps}, heartbeat_timeout_s: 20, collective_timeout_s: 30}
pserver: {sparse_tables: {$3}}
${4:-}
EOT
}

# refused NAME PATTERN [MODE]: job NAME (1 pserver, cluster mode MODE, ps)
# stopped, saying PATTERN
refused() {
  if timeout 60 "$RUN" --log_dir "$tmp/$1.log" --mode "${3:-ps}" --server_num 1 "$tmp/$1.yaml" \
      > "$tmp/$1.out" 2>&1; then
    fail "$1: not refused"
  elif ! cat "$tmp/$1.out" "$tmp/$1.log"/* 2> /dev/null | grep -q "$2"; then
    tail -n 5 "$tmp/$1.out"
    fail "$1: no message '$2'"
  else
    echo "ok: $1 refused ($2)"
  fi
}
