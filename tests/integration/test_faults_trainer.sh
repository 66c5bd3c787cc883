#!/bin/bash
# Faults of trainers in collective mode and of trainer checkpoints, with
# the real flotilla-trainer processes on 127.0.0.1 (faults_lib.sh), each
# part bounded in time:
#   kill -9 of a collective rank: the others exit 1 within
#     collective_timeout_s, naming rank 1; the last checkpoint rank 0 wrote
#     verifies, and the three ranks restarted with --resume go on from it;
#   SIGSTOP of a collective rank (a hang): the others exit 1 when it has
#     not answered within collective_timeout_s, naming it;
#   a corrupted newest trainer checkpoint: --resume skips it with a warning
#     naming the file and resumes from the one before;
#   a full disk (a 256 KiB tmpfs as checkpoint_dir): the first checkpoint
#     is written, the second fails with "No space left on device", the
#     trainer exits 1 saying so, the first stays unchanged, nothing else is
#     left in the directory, and --resume starts from it.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
TIMEOUT=6

# job FILE EPOCHS CHECKPOINT_DIR [HIDDEN]
job() {
  cat > "$1" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [${4:-32}]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 2048, test_samples: 128, seed: 3}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
train: {epochs: $2, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1,
        checkpoint_dir: $3, checkpoint_interval: 10, eval: false}
cluster: {mode: collective, collective_timeout_s: $TIMEOUT}
EOF
}

# The ranks other than 1 exit 1 within TIMEOUT (+ slack) of $t_fault,
# naming rank 1 with the reason REGEX.
others_fail() {
  for r in 0 2; do
    wait_exit "$(eval echo \$TR$r)" $((TIMEOUT + 25))
    [ "$rc" = 1 ] || fail "$1: rank $r exit $rc (want 1)"
    has "$tmp/$1.tr$r.log" "collective rank $r: .*rank 1 \(127\.0\.0\.1:[0-9]+\) $2" "$1: rank $r"
  done
  [ $((SECONDS - t_fault)) -le $((TIMEOUT + 10)) ] ||
    fail "$1: the ranks took $((SECONDS - t_fault)) s to give up (timeout $TIMEOUT s)"
}

# ------------------------------------------- kill -9 of a collective rank
n=coll_kill
job "$tmp/$n.yaml" 1000 "$tmp/$n.ck"
coll_job $n "$tmp/$n.yaml" 3 127.0.0.1
f0=$fails
wait_log "$tmp/$n.tr0.log" 'checkpoint: step [1-9]' 30 || fail "$n: no checkpoint"
kill -KILL "$TR1"
t_fault=$SECONDS
others_fail $n '(closed the connection|did not respond)'
"$PROBE" latest "$tmp/$n.ck" > "$tmp/$n.latest" 2>&1 || fail "$n: $(cat "$tmp/$n.latest")"
step=$(sed -n 's/^step //p' "$tmp/$n.latest")
if [ -n "$step" ]; then
  for r in 0 1 2; do mv "$tmp/$n.tr$r.log" "$tmp/$n.tr$r.first.log"; done
  sed -i 's/epochs: 1000/epochs: 1000, max_steps: '$((step + 10))'/' "$tmp/$n.yaml"
  TRAINER_ARGS=--resume coll_job $n "$tmp/$n.yaml" 3 127.0.0.1
  for r in 0 1 2; do
    wait_exit "$(eval echo \$TR$r)" 60
    [ "$rc" = 0 ] || fail "$n: resumed rank $r exit $rc"
  done
  has "$tmp/$n.tr0.log" "resumed from .*ckpt-$step.flc: step $step" "$n: rank 0 after --resume"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

# ------------------------------------------- SIGSTOP of a collective rank
n=coll_stop
job "$tmp/$n.yaml" 1000 "$tmp/$n.ck"
coll_job $n "$tmp/$n.yaml" 3 127.0.0.1
f0=$fails
wait_log "$tmp/$n.tr1.log" '^\[Epoch 0, batch 40\]' 30 || fail "$n: rank 1 did not train"
kill -STOP "$TR1"
t_fault=$SECONDS
others_fail $n "did not respond within $TIMEOUT.0 s"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

# ------------------------------------- corrupted newest trainer checkpoint
n=corrupt
job "$tmp/$n.yaml" 100 "$tmp/$n.ck"
f0=$fails
spawn T "$tmp/$n.log" FLOTILLA_MODE=local -- "$TRAINER" --config "$tmp/$n.yaml" --max-steps 30
wait_exit "$T" 60
[ "$rc" = 0 ] || fail "$n: first run exit $rc"
f=$tmp/$n.ck/ckpt-30.flc
if [ -f "$f" ] && [ -f "$tmp/$n.ck/ckpt-20.flc" ]; then
  printf '\x5a' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") / 2)) conv=notrunc status=none
  spawn T "$tmp/$n.resume.log" FLOTILLA_MODE=local -- "$TRAINER" --config "$tmp/$n.yaml" --resume \
    --max-steps 40
  wait_exit "$T" 60
  [ "$rc" = 0 ] || fail "$n: --resume exit $rc"
  has "$tmp/$n.resume.log" "skipping .*ckpt-30.flc" "$n: --resume"
  has "$tmp/$n.resume.log" "resumed from .*ckpt-20.flc: step 20" "$n: --resume"
  "$PROBE" latest "$tmp/$n.ck" > "$tmp/$n.latest" 2>&1
  has "$tmp/$n.latest" '^step 40$' "$n: newest checkpoint after --resume"
else
  fail "$n: the first run left no ckpt-20 and ckpt-30"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

# ------------------------------------------------- full disk (tmpfs)
n=fulldisk
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=256k flotilla-test "$tmp/full" 2> "$tmp/$n.mount"; then
  fl_mounts="$fl_mounts $tmp/full"
  # 19k parameters + momentum: one checkpoint (~150 KiB) fits, two do not.
  job "$tmp/$n.yaml" 100 "$tmp/full" 256
  f0=$fails
  spawn T "$tmp/$n.log" FLOTILLA_MODE=local -- "$TRAINER" --config "$tmp/$n.yaml" --max-steps 30
  wait_exit "$T" 60
  [ "$rc" = 1 ] || fail "$n: exit $rc (want 1: a checkpoint could not be written)"
  has "$tmp/$n.log" 'checkpoint: step 10 .*saved' "$n: trainer"
  has "$tmp/$n.log" 'write failed at offset [0-9]+: No space left on device' "$n: trainer"
  "$PROBE" latest "$tmp/full" > "$tmp/$n.latest" 2>&1
  has "$tmp/$n.latest" '^step 10$' "$n: newest valid checkpoint"
  [ "$(ls -A "$tmp/full")" = "ckpt-10.flc" ] ||
    fail "$n: left in the checkpoint dir: $(ls -A "$tmp/full" | tr '\n' ' ')"
  spawn T "$tmp/$n.resume.log" FLOTILLA_MODE=local -- "$TRAINER" --config "$tmp/$n.yaml" --resume \
    --max-steps 10
  wait_exit "$T" 60
  [ "$rc" = 0 ] || fail "$n: --resume exit $rc"
  has "$tmp/$n.resume.log" 'resumed from .*ckpt-10.flc: step 10' "$n: --resume"
  ran=$((ran + 1))
  [ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log
else
  echo "SKIP: $n (cannot mount a tmpfs here: $(cat "$tmp/$n.mount"))"
fi

finish
