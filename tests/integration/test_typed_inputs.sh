#!/bin/sh
# test_typed_inputs.sh - a PyTorch token model with two named inputs (int64
# ids and a bool mask, both [N, L]) trained by flotilla-trainer from
# data.inputs, against PyTorch (typed_inputs.py):
#   1. pooled: one class per sample; the loss of the first step and of the
#      second (after one SGD step) and the test loss after the first epoch
#      equal PyTorch's within 1e-4;
#   2. tokens: a class per token ([N, L] labels, -100 skipped; the output
#      reshaped by the int64 input's shape, a bind-time value): the same;
#   3. refusals, each naming what is wrong: a named input the model lacks,
#      a model input left unfed, uint8 ids for a float input that the
#      model casts to int64.
# Needs /usr/bin/python3 with torch and onnx (skipped without).  Seconds.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
T=$FL_BUILDDIR/flotilla-trainer
py=/usr/bin/python3
gen=$FL_SRCDIR/tests/integration/typed_inputs.py
"$py" -c 'import torch, onnx' 2>/dev/null || { echo "SKIP: no torch/onnx for $py"; exit 77; }
tmp=$(mktemp -d /tmp/fl_typed_inputs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# job DIR INPUTS: a job over DIR's files, evaluated on the training set
job() {
  cat > "$1/job.yaml" <<EOF2
model: {kind: onnx, path: $1/model.onnx}
data:
  format: npy
  inputs: {$2}
  train_y: $1/y.npy
  test_inputs: {$2}
  test_y: $1/y.npy
optimizer: {name: sgd, lr: 0.5}
train: {epochs: 2, batch_size: 12, eval_batch_size: 5, seed: 1, log_interval: 1, num_threads: 1}
EOF2
}

# close A B: |A - B| <= 1e-4 * max(1, |B|)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
  if (m < 1) m = 1; exit !(d <= 1e-4 * m) }'; }

for case in pooled tokens; do
  d=$tmp/$case
  timeout 60 "$py" "$gen" "$d" "$case" > "$tmp/py.out" 2>&1 ||
    { cat "$tmp/py.out"; fail "$case: typed_inputs.py"; continue; }
  job "$d" "ids: $d/ids.npy, mask: $d/mask.npy"
  timeout 60 "$T" --config "$d/job.yaml" > "$d/out" 2>&1 ||
    { tail -n 5 "$d/out"; fail "$case: trainer"; continue; }
  r1=$(sed -n 1p "$d/ref.txt"); r2=$(sed -n 2p "$d/ref.txt")
  l1=$(sed -n 's/^\[Epoch 0, batch 0\] loss: \([0-9.]*\),.*/\1/p' "$d/out")
  l2=$(sed -n 's/^\[Epoch 1, batch 0\] loss: \([0-9.]*\),.*/\1/p' "$d/out")
  te=$(sed -n 's/^\[Epoch 0\] test loss: \([0-9.]*\),.*/\1/p' "$d/out")
  close "${l1:-x}" "$r1" || fail "$case: first loss $l1, PyTorch $r1"
  close "${l2:-x}" "$r2" || fail "$case: second loss $l2, PyTorch $r2"
  close "${te:-x}" "$r2" || fail "$case: test loss after one step $te, PyTorch $r2"
  echo "$case: losses $l1 $l2 (PyTorch $r1 $r2), test $te"
done

# refused RUN_NAME PATTERN: the trainer failed, and said PATTERN
refused() {
  if timeout 60 "$T" --config "$2/job.yaml" > "$2/bad.out" 2>&1; then
    fail "$1: the trainer did not refuse"
  elif ! grep -q "$3" "$2/bad.out"; then
    tail -n 3 "$2/bad.out"
    fail "$1: no message '$3'"
  fi
}
d=$tmp/pooled
if [ -f "$d/model.onnx" ]; then
  job "$d" "ids: $d/ids.npy, mask: $d/mask.npy, extra: $d/mask.npy"
  refused unknown "$d" "data.inputs names 'extra', which is no input of"
  job "$d" "ids: $d/ids.npy"
  refused unfed "$d" "input 'mask' of .* is not fed"
fi
d=$tmp/castids
if timeout 60 "$py" "$gen" "$d" castids > "$tmp/py.out" 2>&1; then
  job "$d" "ids: $d/ids.npy"
  refused castids "$d" "ids.npy: input 'ids' holds uint8 for a float model input that the graph"
else
  cat "$tmp/py.out"; fail "castids: typed_inputs.py"
fi
[ $fails -eq 0 ] || exit 1
echo "PASS: typed inputs"
