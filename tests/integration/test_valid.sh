#!/bin/sh
# test_valid.sh - validation, keep-best, early stopping, binary metrics
# and batch-norm agreement end to end (trainer/loop_valid.c):
#   1. a cnn with batch norm in ps mode, 2 trainers (their running
#      statistics differ until they are agreed): the test loss and accuracy
#      both ranks log last equal those PyTorch computes on the ONNX export
#      (onnx_presets_torch.py eval, within 2e-5 and 0.001; without the
#      agreement the loss differs by about 1.6e-4);
#   2. an untrained bce_with_logits model (lr 0) in collective mode, 2
#      ranks, validated on files: the test line's auc and logloss over all
#      ranks equal numpy's over PyTorch's outputs (valid_auc.py), the
#      validation line has the same figures; metrics.csv holds a val row
#      in the val_ columns; the Python parser reads them;
#   3. named inputs (typed_inputs.py's token model): validation_inputs in
#      another order than data.inputs, on the test files: every validation
#      line has the test line's figures;
#   4. validation_split with keep_best and early stopping (a min_delta no
#      validation reaches, patience 2): exit 0 at the third validation,
#      best.flc beside the newest checkpoints; the same job again logs the
#      same validation lines (the split is deterministic).
# Parts 1 to 3 need Debian's python3-torch, python3-onnx and numpy;
# without them they are skipped.  Seconds.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
T=$FL_BUILDDIR/flotilla-trainer
RUN=$FL_BUILDDIR/flotilla-run
it=$FL_SRCDIR/tests/integration
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/fl_valid.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

dist_run() {
  name=$1
  shift
  timeout 120 "$RUN" --log_dir "$tmp/$name.log" "$@" "$tmp/$name.yaml" > "$tmp/$name.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { tail -n 20 "$tmp/$name.out" "$tmp/$name.log"/workerlog.* 2> /dev/null
    fail "$name: exit $rc"; return 1; }
}

# 1. batch-norm statistics agreed before the evaluation and the export
part1() {
  timeout 120 "$py" "$it/onnx_presets_torch.py" data "$tmp/d" || { fail "onnx_presets_torch.py data"; return; }
  cat > "$tmp/bn.yaml" << EOF
model: {kind: cnn, activation: relu, norm: bn, input_shape: [1, 8, 8], num_classes: 4, conv_channels: [4, 8], conv_kernel: 3, fc_hidden: 12}
data: {format: npy, train_x: $tmp/d/train_x.npy, train_y: $tmp/d/train_y.npy, test_x: $tmp/d/test_x.npy, test_y: $tmp/d/test_y.npy}
optimizer: {name: momentum, lr: 0.1}
train: {epochs: 2, batch_size: 16, eval_batch_size: 64, log_interval: 1000, seed: 3, num_threads: 1, export_onnx: $tmp/bn.onnx}
cluster: {mode: ps, heartbeat_timeout_s: 20}
strategy: {a_sync: false}
EOF
  dist_run bn --mode ps --server_num 1 --nproc_per_node 2 || return
  l0=$(grep '^\[Epoch 1\] test loss' "$tmp/bn.log/workerlog.0")
  l1=$(grep '^\[Epoch 1\] test loss' "$tmp/bn.log/workerlog.1")
  [ -n "$l0" ] && [ "$l0" = "$l1" ] || fail "bn: the ranks logged '$l0' and '$l1'"
  timeout 120 "$py" "$it/onnx_presets_torch.py" eval "$tmp/bn.onnx" "$tmp/d" --kind cnn \
    --norm bn > "$tmp/bn.eval" 2>&1 || { cat "$tmp/bn.eval"; fail "bn: PyTorch refused the export"; }
  ours=$(echo "$l0" | sed -n 's/.*test loss: \([0-9.]*\), acc1: \([0-9.]*\).*/\1 \2/p')
  theirs=$(sed -n 's/^test loss: \([0-9.]*\), acc1: \([0-9.]*\)$/\1 \2/p' "$tmp/bn.eval")
  if echo "$ours $theirs" | awk 'NF != 4 { exit 1 } { d = $1 - $3; e = $2 - $4
      exit !(d <= 2e-5 && d >= -2e-5 && e <= 0.001 && e >= -0.001) }'; then
    echo "ok: ps batch norm, 2 trainers: logged (loss acc1) $ours, PyTorch on the export $theirs"
  else
    fail "bn: logged '$ours', PyTorch on the export '$theirs'"
  fi
}

# 2. auc and log loss over all ranks, validation files
part2() {
  b=$tmp/b
  timeout 120 "$py" "$it/float_targets.py" "$b" bce_with_logits > "$tmp/b.gen" 2>&1 ||
    { cat "$tmp/b.gen"; fail "float_targets.py"; return; }
  cat > "$tmp/bce.yaml" << EOF
model: {kind: onnx, path: $b/model.onnx, loss: bce_with_logits}
data: {format: npy, train_x: $b/train_x.npy, train_y: $b/train_y.npy, test_x: $b/test_x.npy, test_y: $b/test_y.npy, validation_x: $b/test_x.npy, validation_y: $b/test_y.npy}
optimizer: {name: momentum, lr: 0}
train: {epochs: 1, batch_size: 32, eval_batch_size: 100, log_interval: 1000, num_threads: 1}
cluster: {mode: collective, collective_timeout_s: 60}
EOF
  dist_run bce --mode collective --nproc_per_node 2 || return
  w0=$tmp/bce.log/workerlog.0
  grep -q "final test auc 0\.[0-9]*, loss" "$tmp/bce.out" || fail "bce: flotilla-run's last line has no auc"
  line=$(grep '^\[Epoch 0\] test loss: ' "$w0")
  "$py" "$it/valid_auc.py" "$b" "$line" || fail "bce: $line"
  vline=$(grep '^\[Epoch 0\] val loss: ' "$w0")
  [ "${vline% (step 16)}" = "$(echo "$line" | sed 's/ test / val /')" ] ||
    fail "bce: validation '$vline' and test '$line' differ on the same files"
  grep -q '^val,.*,,,,0\.[0-9]*,,0\.[0-9]*$' "$tmp/bce.log/metrics.csv" ||
    { cat "$tmp/bce.log/metrics.csv"; fail "bce: no val row in metrics.csv"; }
  PYTHONPATH=$FL_SRCDIR/python "$py" -c "
import sys
from flotilla import _progress
m = _progress.parse(open('$w0').read().splitlines())
sys.exit(0 if all(k in m for k in ('test_auc', 'test_logloss', 'val_auc', 'val_step')) else 1)" ||
    fail "bce: the Python parser misses the auc or val figures"
}

# 3. named validation inputs
part3() {
  n=$tmp/n
  timeout 60 "$py" "$it/typed_inputs.py" "$n" tokens > "$tmp/n.gen" 2>&1 ||
    { cat "$tmp/n.gen"; fail "typed_inputs.py"; return; }
  cat > "$tmp/named.yaml" << EOF
model: {kind: onnx, path: $n/model.onnx}
data:
  format: npy
  inputs: {ids: $n/ids.npy, mask: $n/mask.npy}
  train_y: $n/y.npy
  test_inputs: {ids: $n/ids.npy, mask: $n/mask.npy}
  test_y: $n/y.npy
  validation_inputs: {mask: $n/mask.npy, ids: $n/ids.npy}
  validation_y: $n/y.npy
optimizer: {name: sgd, lr: 0.5}
train: {epochs: 2, batch_size: 12, eval_batch_size: 5, seed: 1, log_interval: 100, num_threads: 1}
EOF
  timeout 60 "$T" --config "$tmp/named.yaml" > "$tmp/named.out" 2>&1 ||
    { tail -n 20 "$tmp/named.out"; fail "named inputs: exit non-zero"; return; }
  v=$(sed -n 's/^\(\[Epoch [0-9]*\]\) val \(.*\) (step [0-9]*)$/\1 \2/p' "$tmp/named.out")
  t=$(sed -n 's/^\(\[Epoch [0-9]*\]\) test \(.*\)$/\1 \2/p' "$tmp/named.out")
  if [ -n "$v" ] && [ "$v" = "$t" ]; then
    echo "ok: named validation inputs: $(echo "$v" | wc -l) validations equal the tests"
  else
    fail "named inputs: validations '$v', tests '$t'"
  fi
}

if "$py" -c 'import torch, onnx, numpy' 2> /dev/null; then
  part1
  part2
  part3
else
  echo "skip: parts 1 to 3 ($py lacks torch, onnx or numpy)"
fi

# 4. validation_split, keep_best and early stopping
cat > "$tmp/es.yaml" << EOF
model: {kind: mlp, hidden: [16], input_shape: [1, 8, 8], num_classes: 6}
data: {format: synthetic, synthetic: {kind: image, train_samples: 400, test_samples: 100, seed: 5}, validation_split: 0.25}
optimizer: {name: momentum, lr: 0.3}
train: {epochs: 4, batch_size: 8, eval_batch_size: 64, log_interval: 1000, seed: 3, num_threads: 1, checkpoint_dir: $tmp/ck, validate_every: 5, keep_best: val_loss, early_stopping: {metric: val_acc1, patience: 2, min_delta: 2}}
EOF
for n in 1 2; do
  timeout 60 "$T" --config "$tmp/es.yaml" --fresh > "$tmp/es$n.out" 2>&1 ||
    { tail -n 20 "$tmp/es$n.out"; fail "early stopping: run $n exited non-zero"; }
done
grep -q "early stopping at step 15: val_acc1 has not improved by more than 2 for 2 validations" \
  "$tmp/es1.out" || { cat "$tmp/es1.out"; fail "early stopping: not at step 15"; }
[ "$(grep -c '\] val loss: ' "$tmp/es1.out")" = 3 ] || fail "early stopping: not 3 validations"
[ -s "$tmp/ck/best.flc" ] && [ -s "$tmp/ck/ckpt-15.flc" ] ||
  { ls "$tmp/ck"; fail "no best.flc beside ckpt-15.flc"; }
[ "$(grep '\] val loss: ' "$tmp/es1.out")" = "$(grep '\] val loss: ' "$tmp/es2.out")" ] ||
  fail "validation_split: two runs logged different validations"
[ $fails -eq 0 ] || exit 1
echo "PASS: validation, keep_best, early stopping, binary metrics, batch-norm agreement"
