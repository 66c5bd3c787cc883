#!/bin/bash
# Faults in PServer mode, with the real flotilla-pserver and
# flotilla-trainer processes on 127.0.0.1 (faults_lib.sh), each part
# bounded in time:
#   kill -9 of a trainer, sync and async: the pservers declare it dead
#     within heartbeat_timeout_s and go on with the live trainer, which
#     finishes; every pserver's checkpoint of the end verifies;
#   SIGSTOP of a trainer (a hang): declared dead the same way while the
#     other trains on; after SIGCONT it registers again and the job ends
#     with every process exiting 0;
#   kill -9 of a pserver mid-step, then a restart: it loads its newest
#     checkpoint, and (trainers held still meanwhile) its state is exactly
#     that checkpoint - a SaveCheckpoint of it gives the same bytes - so
#     every update committed before the checkpoint is there; the trainers
#     retry, and the job completes;
#   a full disk (a 256 KiB tmpfs as checkpoint_dir): the first checkpoint
#     is written, the next ones fail with "No space left on device", the
#     daemon says which checkpoint stays, that one is unchanged and still
#     verifies, no temporary file is left, and the pserver exits 1 because
#     its final checkpoint could not be written;
#   a corrupted newest checkpoint: a restarted pserver skips it with a
#     warning naming the file and loads the one before (its step is then
#     the one Stats reports); with every checkpoint corrupt it refuses to
#     start.
# Every checkpoint found is named after the step it holds.  The parts wait
# on what the daemons log or answer (bounded), never on a guess of how long
# something takes.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"

# job FILE A_SYNC EPOCHS HEARTBEAT [BLOCK_SIZE [HIDDEN [CHECKPOINT_DIR]]]
job() {
  cat > "$1" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [${6:-32}]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 2048, test_samples: 128, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: $3, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1}
cluster: {mode: ps, heartbeat_timeout_s: $4, rpc_timeout_s: 5}
pserver:
  dense_block_size: ${5:-500}
  checkpoint_dir: ${7:-$tmp/$(basename "$1" .yaml).ck}
  checkpoint_interval_steps: 20
strategy: {a_sync: $2}
EOF
}

# The newest checkpoint of pserver S of job NAME verifies and holds the
# step of its name: that step in $ck_step.
ckpt_ok() {
  "$PROBE" latest "$tmp/$1.ck/pserver-$2" > "$tmp/$1.latest$2" 2>&1
  ck_step=$(sed -n 's/^step //p' "$tmp/$1.latest$2")
  [ -n "$ck_step" ] || fail "$1: pserver $2 has no valid checkpoint: $(cat "$tmp/$1.latest$2")"
  has "$tmp/$1.latest$2" "^recorded_step $ck_step\$" "$1: pserver $2's ckpt-$ck_step.flc"
}

# grows FILE REGEX SECONDS: 0 once FILE has more lines matching REGEX than
# when called.
grows() {
  _n0=$(grep -Ec -- "$2" "$1")
  _end=$((SECONDS + $3))
  while [ $SECONDS -lt $_end ]; do
    [ "$(grep -Ec -- "$2" "$1")" -gt "$_n0" ] && return 0
    sleep 0.1
  done
  return 1
}

# ------------------------------------------------ kill -9 of a trainer
for mode in sync async; do
  a_sync=false
  [ $mode = async ] && a_sync=true
  n=kill_$mode
  job "$tmp/$n.yaml" $a_sync 3 2
  ps_job $n "$tmp/$n.yaml" 2 2
  wait_log "$tmp/$n.tr1.log" '^\[Epoch 0, batch 20\]' 30 || fail "$n: trainer 1 did not train"
  kill -KILL "$TR1"
  t_kill=$SECONDS
  wait_exit "$TR0" 60
  [ "$rc" = 0 ] || fail "$n: trainer 0 exit $rc after trainer 1 was killed"
  for s in 0 1; do
    wait_exit "$(eval echo \$PS$s)" 20
    [ "$rc" = 0 ] || fail "$n: pserver $s exit $rc"
    has "$tmp/$n.ps$s.log" 'trainer 1 declared dead: silent for' "$n: pserver $s"
    has "$tmp/$n.ps$s.log" 'every trainer completed' "$n: pserver $s"
    ckpt_ok $n $s
    has "$tmp/$n.ps$s.log" "checkpoint of step $ck_step written .*\(job complete\)" "$n: pserver $s"
  done
  has "$tmp/$n.tr0.log" 'done: 192 steps' "$n: trainer 0"
  [ $((SECONDS - t_kill)) -le 40 ] || fail "$n: the job took $((SECONDS - t_kill)) s after the kill"
  ran=$((ran + 1))
  [ $fails = 0 ] && ok "$n" || show "$tmp/$n".*.log
done

# ------------------------------------------- SIGSTOP of a trainer (sync)
# Small blocks make a step a few dozen calls, so the job outlasts the stop.
n=stop
job "$tmp/$n.yaml" false 20 2 100
ps_job $n "$tmp/$n.yaml" 1 3
f0=$fails
wait_log "$tmp/$n.tr2.log" '^\[Epoch 0, batch 20\]' 30 || fail "$n: trainer 2 did not train"
kill -STOP "$TR2"
wait_log "$tmp/$n.ps0.log" 'trainer 2 declared dead: silent for' 8 ||
  fail "$n: the stopped trainer 2 was not declared dead within 8 s"
# the others go on while it hangs
grows "$tmp/$n.tr0.log" '^\[Epoch' 15 || fail "$n: trainer 0 made no progress while trainer 2 hung"
running "$TR0" || fail "$n: trainer 0 ended before trainer 2 was resumed (job too short)"
kill -CONT "$TR2"
for t in 0 1 2; do
  wait_exit "$(eval echo \$TR$t)" 90
  [ "$rc" = 0 ] || fail "$n: trainer $t exit $rc"
done
wait_exit "$PS0" 20
[ "$rc" = 0 ] || fail "$n: pserver exit $rc"
has "$tmp/$n.ps0.log" 'trainer 2 registered again after being declared dead' "$n: pserver"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

# ------------------------------- kill -9 of a pserver mid-step, restart
n=restart
job "$tmp/$n.yaml" false 6 5
ps_job $n "$tmp/$n.yaml" 2 2
f0=$fails
wait_log "$tmp/$n.ps1.log" 'checkpoint of step [1-9][0-9]* .*\(interval_steps\)' 30 ||
  fail "$n: pserver 1 wrote no checkpoint"
kill -KILL "$PS1"
wait_exit "$PS1" 5
# The trainers see it gone (and retry) before they are held still: the
# restarted server's state can then be read before anything new reaches it.
for t in 0 1; do
  wait_log "$tmp/$n.tr$t.log" 'pserver 1 .* UNAVAILABLE .*retrying' 20 ||
    fail "$n: trainer $t did not report pserver 1 unavailable"
done
kill -STOP "$TR0" "$TR1"
ckpt_ok $n 1
loaded=$ck_step
cp "$tmp/$n.ck/pserver-1/ckpt-$loaded.flc" "$tmp/$n.loaded.flc"
mv "$tmp/$n.ps1.log" "$tmp/$n.ps1.first.log"
start_pserver $n "$tmp/$n.yaml" 1 2
if wait_log "$tmp/$n.ps1.log" '\] serving ' 20; then
  has "$tmp/$n.ps1.log" "loaded checkpoint .*ckpt-$loaded.flc: step $loaded" "$n: restarted pserver"
  # started by hand without FLOTILLA_RUN_ID: it says why it continues
  has "$tmp/$n.ps1.log" "no FLOTILLA_RUN_ID: taken as a restart of the same run .*continuing from step $loaded; .*--fresh" "$n: restarted pserver"
  "$PROBE" save "${PSLIST#*,}" > "$tmp/$n.save" 2>&1 || fail "$n: SaveCheckpoint: $(cat "$tmp/$n.save")"
  has "$tmp/$n.save" "^step $loaded\$" "$n: SaveCheckpoint answer"
  cmp -s "$tmp/$n.loaded.flc" "$tmp/$n.ck/pserver-1/ckpt-$loaded.flc" ||
    fail "$n: the restarted pserver's state differs from the checkpoint it loaded (step $loaded)"
else
  fail "$n: the restarted pserver does not serve"
fi
kill -CONT "$TR0" "$TR1"
for t in 0 1; do
  wait_exit "$(eval echo \$TR$t)" 90
  [ "$rc" = 0 ] || fail "$n: trainer $t exit $rc"
  has "$tmp/$n.tr$t.log" 'pserver 1 .* UNAVAILABLE .*retrying' "$n: trainer $t"
done
for s in 0 1; do
  wait_exit "$(eval echo \$PS$s)" 20
  [ "$rc" = 0 ] || fail "$n: pserver $s exit $rc"
done
ckpt_ok $n 1
[ "$ck_step" -ge "$loaded" ] || fail "$n: final step $ck_step < loaded step $loaded"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (state after restart = checkpoint of step $loaded)" || show "$tmp/$n".*.log

# ------------------------------------------------ full disk (tmpfs)
n=fulldisk
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=256k flotilla-test "$tmp/full" 2> "$tmp/$n.mount"; then
  fl_mounts="$fl_mounts $tmp/full"
  # 38k parameters: one checkpoint (~150 KiB) fits, a second does not.
  job "$tmp/$n.yaml" false 2 5 262144 512 "$tmp/full"
  ps_job $n "$tmp/$n.yaml" 1 1
  f0=$fails
  wait_log "$tmp/$n.ps0.log" 'checkpoint of step [0-9]+ written' 30 || fail "$n: no first checkpoint"
  first=$(sed -n 's/.*checkpoint of step \([0-9]*\) written.*/\1/p' "$tmp/$n.ps0.log" | head -1)
  sum=$(md5sum < "$tmp/full/pserver-0/ckpt-$first.flc")
  wait_exit "$TR0" 60
  [ "$rc" = 0 ] || fail "$n: trainer exit $rc"
  wait_exit "$PS0" 20
  [ "$rc" = 1 ] || fail "$n: pserver exit $rc (want 1: its final checkpoint failed)"
  has "$tmp/$n.ps0.log" 'write failed at offset [0-9]+: No space left on device' "$n: pserver"
  has "$tmp/$n.ps0.log" "not written; the newest checkpoint stays that of step $first" "$n: pserver"
  "$PROBE" latest "$tmp/full/pserver-0" > "$tmp/$n.latest" 2>&1
  has "$tmp/$n.latest" "^step $first\$" "$n: newest valid checkpoint"
  [ "$(md5sum < "$tmp/full/pserver-0/ckpt-$first.flc")" = "$sum" ] ||
    fail "$n: checkpoint $first changed"
  [ "$(ls -A "$tmp/full/pserver-0")" = "ckpt-$first.flc" ] ||
    fail "$n: left in the checkpoint dir: $(ls -A "$tmp/full/pserver-0" | tr '\n' ' ')"
  ran=$((ran + 1))
  [ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log
else
  echo "SKIP: $n (cannot mount a tmpfs here: $(cat "$tmp/$n.mount"))"
fi

# ---------------------------------------- corrupted newest checkpoint
# Two checkpoints of different steps for sure: one on request (ps_probe
# save) while the trainer is held early in the job, then the one at its end.
n=corrupt
job "$tmp/$n.yaml" true 8 5
ps_job $n "$tmp/$n.yaml" 1 1
f0=$fails
wait_log "$tmp/$n.tr0.log" '^\[Epoch 0, batch 20\]' 30 || fail "$n: the trainer did not train"
kill -STOP "$TR0"
running "$TR0" || fail "$n: the trainer ended before it was held (job too short)"
"$PROBE" save "$PSLIST" > "$tmp/$n.save" 2>&1 || fail "$n: SaveCheckpoint: $(cat "$tmp/$n.save")"
kill -CONT "$TR0"
wait_exit "$TR0" 60
[ "$rc" = 0 ] || fail "$n: trainer exit $rc"
wait_exit "$PS0" 20
[ "$rc" = 0 ] || fail "$n: pserver exit $rc"
mapfile -t cks < <(ls "$tmp/$n.ck/pserver-0" | sed -n 's/^ckpt-\([0-9]*\)\.flc$/\1/p' | sort -rn)
if [ ${#cks[@]} -ge 2 ]; then
  newest=${cks[0]} prev=${cks[1]}
  f=$tmp/$n.ck/pserver-0/ckpt-$newest.flc
  off=$(($(stat -c %s "$f") / 2))
  # invert one byte in the middle of the data
  byte=$(od -An -tu1 -j $off -N1 "$f" | tr -d ' ')
  printf '%b' "$(printf '\\0%03o' $((byte ^ 255)))" |
    dd of="$f" bs=1 seek=$off conv=notrunc status=none
  mv "$tmp/$n.ps0.log" "$tmp/$n.ps0.first.log"
  start_pserver $n "$tmp/$n.yaml" 0 1
  if wait_log "$tmp/$n.ps0.log" '\] serving ' 20; then
    has "$tmp/$n.ps0.log" "skipping .*ckpt-$newest.flc \(corrupt data\)" "$n: restarted pserver"
    has "$tmp/$n.ps0.log" "loaded checkpoint .*ckpt-$prev.flc: step $prev\$" "$n: restarted pserver"
    "$PROBE" stats "$PSLIST" > "$tmp/$n.stats" 2>&1 || fail "$n: Stats: $(cat "$tmp/$n.stats")"
    has "$tmp/$n.stats" "^step $prev\$" "$n: Stats of the restarted pserver"
  else
    fail "$n: the restarted pserver does not serve"
  fi
  kill -TERM "$PS0"
  wait_exit "$PS0" 20
  [ "$rc" = 0 ] || fail "$n: pserver exit $rc after SIGTERM"
  # every checkpoint corrupt: refuse to start rather than train from scratch
  for s in $(ls "$tmp/$n.ck/pserver-0" | sed -n 's/^ckpt-\([0-9]*\)\.flc$/\1/p'); do
    printf 'XXXX' | dd of="$tmp/$n.ck/pserver-0/ckpt-$s.flc" bs=1 seek=0 conv=notrunc status=none
  done
  mv "$tmp/$n.ps0.log" "$tmp/$n.ps0.second.log"
  start_pserver $n "$tmp/$n.yaml" 0 1
  wait_exit "$PS0" 20
  [ "$rc" = 1 ] || fail "$n: pserver exit $rc over corrupt checkpoints (want 1)"
  has "$tmp/$n.ps0.log" 'refusing to start from scratch' "$n: pserver over corrupt checkpoints"
else
  fail "$n: want 2 checkpoints or more, got ${#cks[@]}"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

finish
