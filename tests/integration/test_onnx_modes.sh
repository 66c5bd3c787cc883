#!/bin/sh
# test_onnx_modes.sh - an imported ONNX model (tests/fixtures/onnx) in every
# mode and strategy of flotilla-trainer, on synthetic images, checked by
# the parameters of the final checkpoints (ckpt_maxdiff):
#   1. PS sync, 2 pservers (dense blocks of 100 floats) x 2 trainers of 16,
#      ends with the parameters of one local trainer of 32 (within 1e-5);
#      geo (a_sync_configs.k_steps 2) runs to the end too;
#   2. collective, 2 ranks of 16 = local 32 (within 1e-5);
#   3. collective with sync_batch_norm on the residual fixture (six
#      BatchNormalization nodes, one on the downsampling shortcut):
#      = local 32, running statistics included (within 1e-5); without
#      sync_batch_norm the ranks' batch statistics differ and so do the
#      parameters (> 1e-4), so part 3 does test the synchronisation;
#   4. PS sync with batch norm (the statistics stay on each trainer):
#      trains to the end and rank 0 writes train.export_onnx;
#   5. recompute with recompute_configs.checkpoints naming ONNX values
#      ends with the bits of the plain run, and holds fewer activation
#      bytes; a name that is no value of the graph stops the trainer at
#      start, naming it;
#   6. --resume from step 30 of 48 ends with the bits of the uninterrupted
#      run (batch-norm statistics included);
#   7. the amp_configs lists reach the model: an op type on both lists is
#      refused at start, a name of no op type is reported.
# Each run is a few dozen steps of a tiny model: seconds in all.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
T=$FL_BUILDDIR/flotilla-trainer
RUN=$FL_BUILDDIR/flotilla-run
DIFF=$FL_BUILDDIR/tests/integration/ckpt_maxdiff
fx=$FL_SRCDIR/tests/fixtures/onnx
tmp=$(mktemp -d /tmp/fl_onnx_modes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# job NAME FIXTURE INPUT_SHAPE CLASSES BATCH MODE STRATEGY [TRAIN_EXTRA]
job() {
  cat > "$tmp/$1.yaml" <<EOF
model: {kind: onnx, path: $fx/$2.onnx, input_shape: $3, num_classes: $4}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 768, test_samples: 128, seed: 3}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
train: {epochs: 2, batch_size: $5, seed: 7, log_interval: 1000, num_threads: 1, checkpoint_dir: $tmp/$1.ck${8:+, $8}}
cluster: {mode: $6, heartbeat_timeout_s: 20, collective_timeout_s: 60}
pserver: {dense_block_size: 100}
strategy: {$7}
EOF
}

# local NAME: one flotilla-trainer; distributed NAME FLAGS...: flotilla-run
local_run() {
  timeout 120 "$T" --config "$tmp/$1.yaml" > "$tmp/$1.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { tail -n 20 "$tmp/$1.out"; fail "$1: exit $rc"; return 1; }
}
dist_run() {
  name=$1
  shift
  timeout 120 "$RUN" --log_dir "$tmp/$name.log" "$@" "$tmp/$name.yaml" > "$tmp/$name.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { tail -n 20 "$tmp/$name.out" "$tmp/$name.log"/*log.* 2> /dev/null
    fail "$name: exit $rc"; return 1; }
}

# same A B BOUND: the final checkpoints of jobs A and B within BOUND
same() {
  if "$DIFF" "$tmp/$1.ck" "$tmp/$2.ck" "$3" > "$tmp/$1-$2.diff" 2>&1; then
    echo "ok: $1 = $2 ($(cat "$tmp/$1-$2.diff"))"
  else
    cat "$tmp/$1-$2.diff"
    fail "$1 and $2 differ by more than $3"
  fi
}

mlp="mlp [1,3,4] 5"      # (N, 12) -> 5 classes: Gemm, Relu, Tanh
res="residual [2,6,6] 3" # (N, 2, 6, 6) -> 3: Conv, 6 x BatchNormalization, Add, GAP

# 1. PS sync and geo
# shellcheck disable=SC2086 # fixture, shape, classes: word-split
{
  job ps_mlp $mlp 16 ps "a_sync: false"
  job local_mlp $mlp 32 local ""
  job geo_mlp $mlp 16 ps "a_sync: true, a_sync_configs: {k_steps: 2}"
}
dist_run ps_mlp --mode ps --server_num 2 --nproc_per_node 2 && local_run local_mlp &&
  same ps_mlp local_mlp 1e-5
if dist_run geo_mlp --mode ps --server_num 2 --nproc_per_node 2; then
  if grep -q "done: 48 steps, 2 epochs" "$tmp/geo_mlp.out"; then
    echo "ok: geo_mlp trained 48 steps"
  else
    fail "geo_mlp: did not train 48 steps"
  fi
fi

# 2. collective
# shellcheck disable=SC2086
job coll_mlp $mlp 16 collective ""
dist_run coll_mlp --nproc_per_node 2 && same coll_mlp local_mlp 1e-5

# 3. sync_batch_norm on every BatchNormalization
# shellcheck disable=SC2086
{
  job coll_res_sync $res 16 collective "sync_batch_norm: true"
  job coll_res_nosync $res 16 collective ""
  job local_res $res 32 local ""
}
if local_run local_res && dist_run coll_res_sync --nproc_per_node 2; then
  same coll_res_sync local_res 1e-5
  if dist_run coll_res_nosync --nproc_per_node 2; then
    if "$DIFF" "$tmp/coll_res_nosync.ck" "$tmp/local_res.ck" 1e-4 > "$tmp/nosync.diff" 2>&1; then
      fail "without sync_batch_norm the ranks still match the global batch ($(cat "$tmp/nosync.diff"))"
    else
      echo "ok: without sync_batch_norm: $(cat "$tmp/nosync.diff")"
    fi
  fi
fi

# 4. PS with batch-norm buffers, and the export at the end
# shellcheck disable=SC2086
job ps_res $res 16 ps "a_sync: false" "export_onnx: $tmp/ps_res.onnx"
if dist_run ps_res --mode ps --server_num 2 --nproc_per_node 2; then
  before=$fails
  grep -q "done: 48 steps, 2 epochs" "$tmp/ps_res.out" || fail "ps_res: did not train 48 steps"
  [ -s "$tmp/ps_res.onnx" ] || fail "ps_res: no $tmp/ps_res.onnx"
  # 20 trained initializers and the 12 running statistics
  grep -q "with its 32 trained initializers to $tmp/ps_res.onnx" "$tmp/ps_res.out" ||
    { grep -i "onnx" "$tmp/ps_res.out"; fail "ps_res: no export line for 32 initializers"; }
  [ $fails -ne "$before" ] || echo "ok: ps_res trained 48 steps with batch norm and exported"
fi

# 5. recompute, segments bounded by ONNX value names
# shellcheck disable=SC2086
{
  job rc_res $res 32 local "recompute: true, recompute_configs: {checkpoints: [/Relu_output_0, /Relu_2_output_0, /Relu_4_output_0]}"
  job rc_bad $res 32 local "recompute: true, recompute_configs: {checkpoints: [/Relu_output_0, /no/such/value]}"
}
if local_run rc_res; then
  same rc_res local_res 0
  plain=$(sed -n 's/.*activations \([0-9]*\) bytes.*/\1/p' "$tmp/local_res.out")
  rc=$(sed -n 's/.*activations \([0-9]*\) bytes.*/\1/p' "$tmp/rc_res.out")
  if [ -n "$plain" ] && [ -n "$rc" ] && [ "$rc" -lt "$plain" ]; then
    echo "ok: recompute holds $rc activation bytes, the plain run $plain"
  else
    fail "recompute: activation bytes '$rc', plain '$plain'"
  fi
fi
if timeout 60 "$T" --config "$tmp/rc_bad.yaml" > "$tmp/rc_bad.out" 2>&1; then
  fail "rc_bad: a checkpoint naming no value was accepted"
else
  grep -q "recompute checkpoint '/no/such/value' names no tensor of the graph" "$tmp/rc_bad.out" ||
    { cat "$tmp/rc_bad.out"; fail "rc_bad: no message naming the value"; }
  echo "ok: a checkpoint naming no value is refused at start"
fi

# 6. --resume: stopped at step 30 (mid-epoch) and resumed, the residual
#    model (batch-norm statistics in the checkpoint) ends with the bits of
#    the uninterrupted run
# shellcheck disable=SC2086
job resume_res $res 32 local ""
if timeout 60 "$T" --config "$tmp/resume_res.yaml" --max-steps 30 > "$tmp/resume_res.1.out" 2>&1 &&
   timeout 60 "$T" --config "$tmp/resume_res.yaml" --resume > "$tmp/resume_res.out" 2>&1; then
  same resume_res local_res 0
else
  tail -n 20 "$tmp/resume_res.1.out" "$tmp/resume_res.out"
  fail "resume_res: a run stopped at step 30 or its --resume failed"
fi

# 7. amp_configs lists reach the model (the GEMM precision they choose is
#    a gpu matter, tested in test_graph): an op type on both lists stops
#    the trainer at start naming both; a name of no op type is reported
# shellcheck disable=SC2086
{
  job amp_both $mlp 32 local "amp: true, amp_configs: {custom_white_list: [Gemm], custom_black_list: [mul]}"
  job amp_unknown $mlp 32 local "amp: true, amp_configs: {custom_white_list: [matmul_v2, fused_gemm_epilogue]}"
}
if timeout 60 "$T" --config "$tmp/amp_both.yaml" > "$tmp/amp_both.out" 2>&1; then
  fail "amp_both: an op type on both AMP lists was accepted"
elif grep -q "'Gemm' (custom_white_list) and 'mul' (custom_black_list) name the same op type (Gemm)" "$tmp/amp_both.out"; then
  echo "ok: an op type on both AMP lists is refused at start"
else
  cat "$tmp/amp_both.out"
  fail "amp_both: no message naming both lists"
fi
if local_run amp_unknown; then
  if grep -q "custom_white_list: 'fused_gemm_epilogue' is no op type Flotilla knows" "$tmp/amp_unknown.out"; then
    echo "ok: an AMP list name of no op type is reported"
  else
    fail "amp_unknown: no warning naming fused_gemm_epilogue"
  fi
fi

[ $fails -eq 0 ] || exit 1
echo "PASS: ONNX models in ps, collective, sync_batch_norm, recompute, resume and AMP lists"
