#!/bin/sh
# test_seq_models.sh - models with ids, masks and sequences against
# PyTorch: tests/integration/whole_models.py (a BiLSTM text classifier with
# int64 ids and a padding mask, a GRU tagger with [N, L] labels and
# ignore_index, a TCN, a U-Net-style ConvTranspose model and a GroupNorm
# CNN: 20 steps' losses within 1e-4 of PyTorch's, and PyTorch's accuracy
# on the trainer's export equal to the logged one), then the two sequence
# examples of deploy/examples/onnx run as their headers say (two trainers,
# shortened to 40 steps) with PyTorch's evaluation of the export equal to
# the logged test accuracy.  Skips (77) without Debian's torch and onnx.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
py=/usr/bin/python3
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
"$py" -c 'import torch, onnx' 2> /dev/null || { echo "SKIP: $py lacks torch or onnx"; exit 77; }
ex=$FL_SRCDIR/deploy/examples/onnx
tmp=$(mktemp -d /tmp/fl_seq_models.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

timeout 300 "$py" "$FL_SRCDIR/tests/integration/whole_models.py" "$FL_BUILDDIR/flotilla-trainer" \
  "$FL_SRCDIR" > "$tmp/whole.out" 2>&1 || fail "whole models (see below)"
cat "$tmp/whole.out"

for m in text_classifier seq_tagger; do
  d=$tmp/$m
  mkdir -p "$d"
  timeout 120 "$py" "$ex/$m.py" data "$d" > "$d/data.out" 2>&1 &&
    timeout 120 "$py" "$ex/$m.py" export "$d/model.onnx" > "$d/export.out" 2>&1 ||
    { cat "$d"/*.out; fail "$m: data or export"; continue; }
  case $m in text_classifier) dir=/tmp/flotilla-text/ ;; *) dir=/tmp/flotilla-tagger/ ;; esac
  sed "s|$dir|$d/|g" "$ex/$m.yaml" > "$d/job.yaml"
  args=$(sed -n "s|^#   flotilla-run \(.*\)deploy/examples/onnx/$m.yaml$|\1|p" "$ex/$m.yaml")
  [ -n "$args" ] || { fail "$m: no '#   flotilla-run' line in the job's header"; continue; }
  # shellcheck disable=SC2086 # the documented flags, word-split
  timeout 300 "$FL_BUILDDIR/flotilla-run" --log_dir "$d/log" $args "$d/job.yaml" \
    -- --max-steps 40 > "$d/run.out" 2>&1 ||
    { tail -n 30 "$d/run.out" "$d"/log/workerlog.*; fail "$m: flotilla-run exited non-zero"; continue; }
  ours=$(sed -n 's/^\[Epoch [0-9]*\] test loss: [0-9.]*, acc1: \([0-9.]*\).*/\1/p' \
    "$d/log/workerlog.0" | tail -n 1)
  [ -n "$ours" ] || { cat "$d/log/workerlog.0"; fail "$m: no test line"; continue; }
  timeout 120 "$py" "$ex/$m.py" eval "$d/trained.onnx" "$d" > "$d/eval.out" 2>&1 ||
    { cat "$d/eval.out"; fail "$m: PyTorch refused the export"; continue; }
  theirs=$(sed -n 's/^test acc1: \([0-9.]*\).*/\1/p' "$d/eval.out")
  # the same weights on the same test set: at most one argmax tie apart
  if awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; exit !(d < 0.0006 && d > -0.0006) }'; then
    echo "ok: $m (flotilla acc1 $ours, PyTorch on the export $theirs)"
  else
    fail "$m: flotilla logged acc1 $ours, PyTorch on the exported model $theirs"
  fi
done
[ "$fails" -eq 0 ] || exit 1
echo "PASS: sequence models and examples against PyTorch"
