#!/bin/sh
# test_clip_lr.sh - optimizer.grad_clip and the plateau schedule in the
# modes of flotilla-trainer, on the mlp ONNX fixture and synthetic images,
# checked by the parameters of the final checkpoints (ckpt_maxdiff):
#   1. global-norm clipping that bites (max_norm 0.05) moves the parameters
#      away from the unclipped run (> 1e-4), and 2 collective ranks of 16
#      end with the parameters of one local trainer of 32 (within 1e-5):
#      the norm is that of the averaged gradient;
#   2. PS sync with value clipping (each trainer clips before its push)
#      trains to the end;
#   3. lr_schedule kind plateau lowers the rate after an evaluation that
#      does not improve; a run stopped after the first epoch and resumed
#      ends with the bits of the uninterrupted one (the plateau state is in
#      the checkpoint); PS sync refuses it at start, naming the key.
# Seconds in all.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
T=$FL_BUILDDIR/flotilla-trainer
RUN=$FL_BUILDDIR/flotilla-run
DIFF=$FL_BUILDDIR/tests/integration/ckpt_maxdiff
fx=$FL_SRCDIR/tests/fixtures/onnx
tmp=$(mktemp -d /tmp/fl_clip_lr.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# job NAME BATCH MODE OPTIMIZER_EXTRA [LR_SCHEDULE] [STRATEGY]
job() {
  cat > "$tmp/$1.yaml" <<EOF
model: {kind: onnx, path: $fx/mlp.onnx, input_shape: [1,3,4], num_classes: 5}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 768, test_samples: 128, seed: 3}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9$4}
lr_schedule: {${5:-kind: constant}}
train: {epochs: 2, batch_size: $2, seed: 7, log_interval: 1000, num_threads: 1, checkpoint_dir: $tmp/$1.ck}
cluster: {mode: $3, heartbeat_timeout_s: 20, collective_timeout_s: 60}
pserver: {dense_block_size: 100}
strategy: {${6:-}}
EOF
}

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
  [ $rc -eq 0 ] || { tail -n 20 "$tmp/$name.out" "$tmp/$name.log"/workerlog.* 2> /dev/null
    fail "$name: exit $rc"; return 1; }
}
same() {
  if "$DIFF" "$tmp/$1.ck" "$tmp/$2.ck" "$3" > "$tmp/$1-$2.diff" 2>&1; then
    echo "ok: $1 = $2 ($(cat "$tmp/$1-$2.diff"))"
  else
    cat "$tmp/$1-$2.diff"
    fail "$1 and $2 differ by more than $3"
  fi
}

clip=", grad_clip: {kind: global_norm, max_norm: 0.05}"

# 1. clipping bites, and collective = local
job local_plain 32 local ""
job local_clip 32 local "$clip"
job coll_clip 16 collective "$clip"
if local_run local_plain && local_run local_clip; then
  if "$DIFF" "$tmp/local_clip.ck" "$tmp/local_plain.ck" 1e-4 > "$tmp/bite.diff" 2>&1; then
    fail "global_norm clipping at 0.05 changed nothing ($(cat "$tmp/bite.diff"))"
  else
    echo "ok: clipping changes the run: $(cat "$tmp/bite.diff")"
  fi
  dist_run coll_clip --nproc_per_node 2 && same coll_clip local_clip 1e-5
fi

# 2. PS sync, each trainer clipping its own gradient before the push
job ps_clip 16 ps ", grad_clip: {kind: value, clip_value: 0.01}" "" "a_sync: false"
if dist_run ps_clip --mode ps --server_num 1 --nproc_per_node 2; then
  grep -q "done: 48 steps, 2 epochs" "$tmp/ps_clip.out" && echo "ok: ps_clip trained 48 steps" ||
    fail "ps_clip: did not train 48 steps"
fi

# 3. plateau: mode max on the loss, so the second evaluation is no
# improvement (patience 0) and the rate halves
job local_plateau 32 local "" "kind: plateau, mode: max, factor: 0.5, patience: 0"
if local_run local_plateau; then
  grep -q "no improvement for 1 evaluations, lr now 0.025" "$tmp/local_plateau.out" &&
    echo "ok: plateau halved the rate" ||
    { grep -i "epoch" "$tmp/local_plateau.out"; fail "local_plateau: no reduction to 0.025"; }
fi
# stopped after epoch 0 (its evaluation seen), resumed: the reduction
# after epoch 1 needs the restored best metric, and moves epoch 2
for r in plat3 plat3_resumed; do
  job $r 32 local "" "kind: plateau, mode: max, factor: 0.5, patience: 0"
  sed -i 's/epochs: 2/epochs: 3/' "$tmp/$r.yaml"
done
if local_run plat3 && timeout 60 "$T" --config "$tmp/plat3_resumed.yaml" --max-steps 24 \
  > "$tmp/plat3_resumed.1.out" 2>&1 &&
  timeout 60 "$T" --config "$tmp/plat3_resumed.yaml" --resume > "$tmp/plat3_resumed.out" 2>&1; then
  same plat3_resumed plat3 0
else
  tail -n 5 "$tmp/plat3_resumed.1.out" "$tmp/plat3_resumed.out"
  fail "plat3_resumed: the stopped or the resumed run failed"
fi
job ps_plateau 16 ps "" "kind: plateau" "a_sync: false"
timeout 120 "$RUN" --log_dir "$tmp/ps_plateau.log" --mode ps --server_num 1 --nproc_per_node 1 \
  "$tmp/ps_plateau.yaml" > "$tmp/ps_plateau.out" 2>&1 && fail "ps_plateau: ran"
if cat "$tmp/ps_plateau.out" "$tmp/ps_plateau.log"/* 2> /dev/null |
  grep -q "lr_schedule.kind plateau needs local, collective or geo ps mode"; then
  echo "ok: ps sync refuses plateau"
else
  tail -n 5 "$tmp/ps_plateau.out"
  fail "ps_plateau: no refusal naming lr_schedule.kind"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS: test_clip_lr.sh"
