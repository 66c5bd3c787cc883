#!/bin/sh
# test_onnx_export.sh - flotilla-trainer's ONNX export end to end.
#   1. --export-onnx refuses clearly: no value (exit 2), no checkpoint
#      directory, an empty one (exit 1, naming it), a gn CNN (GroupNormalization
#      is not in opset 17); a truncated model file and one with an unknown op
#      stop training at start (exit 1) naming the file, node and op;
#   2. an imported model (the cnn_bn fixture) trained with train.export_onnx
#      and checkpoints: the file written at the end and the one --export-onnx
#      writes from the newest checkpoint are the same bytes;
#   3. the presets (logreg, mlp with tanh, cnn with batch norm) trained on
#      learnable .npy data and exported: onnx.checker passes, and the
#      PyTorch module that defines each preset, loaded with the exported
#      initializers, gives the test accuracy flotilla-trainer logged
#      (+-0.001) (onnx_presets_torch.py).  Part 3 needs Debian's
#      python3-torch and python3-onnx; without them it is skipped.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
T=$FL_BUILDDIR/flotilla-trainer
fx=$FL_SRCDIR/tests/fixtures/onnx
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/fl_onnx_export.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# job NAME MODEL TRAIN [DATA_DIR]: a job file of the fixture's 4 samples (or
# DATA_DIR's npy files).
job() {
  if [ -n "${4:-}" ]; then
    tr="$4/train_x.npy" ty="$4/train_y.npy" vx="$4/test_x.npy" vy="$4/test_y.npy" bs=32
  else
    tr="$fx/cnn_bn.x.npy" ty="$fx/cnn_bn.y.npy" vx=$tr vy=$ty bs=2
  fi
  cat > "$tmp/$1.yaml" <<EOF
model: $2
data: {format: npy, train_x: $tr, train_y: $ty, test_x: $vx, test_y: $vy}
optimizer: {name: momentum, lr: 0.05}
train: {batch_size: $bs, eval_batch_size: 64, log_interval: 1000, seed: 3, $3}
EOF
}

# run NAME WANT_EXIT ARGS...: flotilla-trainer with its output in NAME.out
run() {
  name=$1 want=$2
  shift 2
  timeout 120 "$T" "$@" > "$tmp/$name.out" 2>&1
  rc=$?
  [ "$rc" -eq "$want" ] || { tail -n 20 "$tmp/$name.out"; fail "$name: exit $rc, want $want"; return 1; }
}

expect_log() { grep -qF -- "$2" "$tmp/$1.out" || { cat "$tmp/$1.out"; fail "$1: no '$2'"; }; }

# 1. refusals
onnx="{kind: onnx, path: $fx/cnn_bn.onnx, num_classes: 4}"
job nockdir "$onnx" "epochs: 1"
run noval 2 --config "$tmp/nockdir.yaml" --export-onnx && expect_log noval "--export-onnx needs a value"
run nockdir 1 --config "$tmp/nockdir.yaml" --export-onnx "$tmp/x.onnx" &&
  expect_log nockdir "--export-onnx reads the newest checkpoint, but the job has no train.checkpoint_dir"
mkdir "$tmp/empty"
job emptyck "$onnx" "epochs: 1, checkpoint_dir: $tmp/empty"
run emptyck 1 --config "$tmp/emptyck.yaml" --export-onnx "$tmp/x.onnx" &&
  expect_log emptyck "no checkpoint in $tmp/empty to export"
[ ! -e "$tmp/x.onnx" ] || fail "a refused export left $tmp/x.onnx"
gn="{kind: cnn, norm: gn, gn_groups: 2, conv_channels: [4, 8], conv_kernel: 3, input_shape: [1, 8, 8], num_classes: 4}"
job gn "$gn" "epochs: 1, checkpoint_dir: $tmp/gnck"
run gntrain 0 --config "$tmp/gn.yaml" &&
  run gn 1 --config "$tmp/gn.yaml" --export-onnx "$tmp/gn.onnx" &&
  expect_log gn "is a GroupNormalization, which ONNX has only from opset 18"

# a bad model file stops the trainer at start, naming the file (and the node)
head -c 700 "$fx/cnn_bn.onnx" > "$tmp/cut.onnx"
job cut "{kind: onnx, path: $tmp/cut.onnx, num_classes: 4}" "epochs: 1"
run cut 1 --config "$tmp/cut.yaml" && expect_log cut "$tmp/cut.onnx: not an ONNX model"
sed 's/MaxPool/MinPool/g' "$fx/cnn_bn.onnx" > "$tmp/minpool.onnx"
job minpool "{kind: onnx, path: $tmp/minpool.onnx, num_classes: 4}" "epochs: 1"
run minpool 1 --config "$tmp/minpool.yaml" &&
  expect_log minpool "(MinPool): op type 'MinPool' is not supported; supported: "

# 2. end of training and --export-onnx agree
job imported "$onnx" "epochs: 2, checkpoint_dir: $tmp/ck, export_onnx: $tmp/end.onnx"
if run imported 0 --config "$tmp/imported.yaml"; then
  expect_log imported "with its 13 trained initializers to $tmp/end.onnx"
  run fromck 0 --config "$tmp/imported.yaml" --export-onnx "$tmp/fromck.onnx" &&
    { cmp -s "$tmp/end.onnx" "$tmp/fromck.onnx" || fail "the end-of-training export and --export-onnx differ"; }
fi

# 3. presets into PyTorch
if ! "$py" -c 'import torch, onnx' 2> /dev/null; then
  echo "skip: part 3 ($py lacks torch or onnx)"
else
  timeout 120 "$py" "$FL_SRCDIR/tests/integration/onnx_presets_torch.py" data "$tmp/data" ||
    fail "onnx_presets_torch.py data"
  geo="input_shape: [1, 8, 8], num_classes: 4, hidden: [16, 8], conv_channels: [4, 8], conv_kernel: 3, fc_hidden: 12"
  for p in "logreg relu none" "mlp tanh none" "cnn relu bn"; do
    # shellcheck disable=SC2086 # three words
    set -- $p
    name=$1_$2_$3
    job "$name" "{kind: $1, activation: $2, norm: $3, $geo}" \
      "epochs: 3, export_onnx: $tmp/$name.onnx" "$tmp/data"
    run "$name" 0 --config "$tmp/$name.yaml" || continue
    ours=$(sed -n 's/^\[Epoch [0-9]*\] test loss: [0-9.]*, acc1: \([0-9.]*\).*/\1/p' "$tmp/$name.out" | tail -n 1)
    [ -n "$ours" ] || { cat "$tmp/$name.out"; fail "$name: no test line"; continue; }
    timeout 120 "$py" "$FL_SRCDIR/tests/integration/onnx_presets_torch.py" eval "$tmp/$name.onnx" \
      "$tmp/data" --kind "$1" --act "$2" --norm "$3" > "$tmp/$name.eval" 2>&1 ||
      { cat "$tmp/$name.eval"; fail "$name: PyTorch refused the export"; continue; }
    theirs=$(sed -n 's/^test loss: [0-9.]*, acc1: \([0-9.]*\)$/\1/p' "$tmp/$name.eval")
    if awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; exit !(b != "" && d <= 0.001 && d >= -0.001) }'; then
      echo "ok: $name (flotilla acc1 $ours, PyTorch on the export $theirs)"
    else
      fail "$name: flotilla logged acc1 $ours, PyTorch on the exported model '$theirs'"
    fi
  done
fi
[ $fails -eq 0 ] || exit 1
echo "PASS: ONNX export"
