#!/bin/bash
# Delta checkpoints of the pservers' sparse tables with the CTR preset
# (deploy/examples/ctr_ps_synthetic.yaml, cut short; async, 2 pservers, 2
# trainers, admission and expiry on), with the real daemons on 127.0.0.1
# (faults_lib.sh), each part bounded in time.  The trainers are held
# (SIGSTOP) before the pserver is killed: a restarted async pserver
# refuses pushes more than a few steps past the step it loaded (the step
# window), which trainers left running while it is down reach - a limit of
# async restarts, not of deltas; held, the state at the kill is exactly
# that of the pserver's last checkpoint, so the restart must stand at it.
#   kill -9 of a pserver right after a base checkpoint, before its first
#     delta: the restart loads that base and replays nothing; its state is
#     that of the base (a SaveCheckpoint with the trainers held answers its
#     step), and the job completes;
#   kill -9 of a pserver after deltas, with what a write cut short leaves
#     (the writer's temporary, half written, put there by the test): the
#     temporary is removed at start, the restart replays every delta
#     committed before the kill, in order, and stands at the step of the
#     last one, and the job completes;
#   kill -9 of a pserver during a delta write (its temporary file
#     caught being written): the temporary is removed at start, the
#     restart replays every delta committed before the kill, in order, and
#     stands at the step of the last one - nothing lost beyond the
#     documented window (the updates after the last committed checkpoint:
#     none here, the trainers being held) - and the job completes.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"

# job FILE CKDIR: the CTR preset, 32768 samples in batches of 32 (512
# steps per trainer), checkpoints every 4 steps, a whole base every 3
# deltas.
job() {
  sed -e "s/train_samples: 65536/train_samples: 32768/" -e "s/test_samples: 8192/test_samples: 512/" \
    -e "s/batch_size: 256/batch_size: 32/" \
    -e 's/epochs: 2/epochs: 1/' -e 's/hash_buckets: 100003/hash_buckets: 20011/' \
    -e 's/log_interval: 50/log_interval: 4/' \
    -e 's/^cluster:/cluster:\n  heartbeat_timeout_s: 10\n  rpc_timeout_s: 5/' \
    -e "s|^pserver:|pserver:\n  checkpoint_dir: $2\n  checkpoint_interval_steps: 4\n  checkpoint_delta: {every: 3}|" \
    -e 's/    max_rows: 1000000/    max_rows: 1000000\n    admit_threshold: 2\n    admit_sketch_bytes: 65536\n    expire_after_steps: 400/' \
    "$FL_SRCDIR/deploy/examples/ctr_ps_synthetic.yaml" > "$1"
}

# killed_after NAME REGEX WANT: once pserver 1 of job NAME logs a
# checkpoint whose path matches REGEX, hold the trainers; until its last
# checkpoint matches WANT, have it write one more (SaveCheckpoint: the
# next of its schedule); then kill -9 it.  Its last checkpoint's step
# and path into $last_step and $last_path.
killed_after() {
  wait_log "$tmp/$1.ps1.log" "checkpoint of step [0-9]+ written to .*$2" 60 ||
    fail "$1: pserver 1 wrote no checkpoint matching $2"
  kill -STOP "$TR0" "$TR1"
  sleep 0.5 # the calls in flight are answered
  _l=$(grep -E 'checkpoint of step [0-9]+ written to ' "$tmp/$1.ps1.log" | tail -n 1)
  for ((_k = 0; _k < 5; _k++)); do
    echo "$_l" | grep -Eq -- "written to .*$3 " && break
    "$PROBE" save "${PSLIST#*,}" > "$tmp/$1.save0" 2>&1 ||
      fail "$1: SaveCheckpoint: $(cat "$tmp/$1.save0")"
    _l=$(grep -E 'checkpoint of step [0-9]+ written to ' "$tmp/$1.ps1.log" | tail -n 1)
  done
  kill -KILL "$PS1"
  wait_exit "$PS1" 5
  last_step=$(echo "$_l" | sed -n 's/.*checkpoint of step \([0-9]*\) written to \([^ ]*\) .*/\1/p')
  last_path=$(echo "$_l" | sed -n 's/.*checkpoint of step \([0-9]*\) written to \([^ ]*\) .*/\2/p')
  mv "$tmp/$1.ps1.log" "$tmp/$1.ps1.first.log"
}

# restarted NAME: start pserver 1 again; it must stand at $last_step (a
# SaveCheckpoint answers it), then the trainers go on and the job completes.
restarted() {
  JOB_ENV=FLOTILLA_RUN_ID=$1 start_pserver "$1" "$tmp/$1.yaml" 1 2
  if wait_log "$tmp/$1.ps1.log" '\] serving ' 20; then
    "$PROBE" save "${PSLIST#*,}" > "$tmp/$1.save" 2>&1 || fail "$1: SaveCheckpoint: $(cat "$tmp/$1.save")"
    has "$tmp/$1.save" "^step $last_step\$" "$1: SaveCheckpoint after the restart"
  else
    fail "$1: the restarted pserver does not serve"
  fi
  kill -CONT "$TR0" "$TR1"
  for t in 0 1; do
    wait_exit "$(eval echo \$TR$t)" 60
    [ "$rc" = 0 ] || fail "$1: trainer $t exit $rc"
  done
  for s in 0 1; do
    wait_exit "$(eval echo \$PS$s)" 30
    [ "$rc" = 0 ] || fail "$1: pserver $s exit $rc"
  done
  has "$tmp/$1.ps1.log" 'sparse table .*: [0-9]+ rows; admitted [0-9]+, refused [1-9][0-9]* \(below admit_threshold\)' "$1: pserver 1"
}

# ----------------------------------- kill -9 between a base and its first delta
n=base
f0=$fails
job "$tmp/$n.yaml" "$tmp/$n.ck"
JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 2 2
# held after a third delta, killed once its last checkpoint is a base
killed_after $n '/delta-[0-9]+\+3\.flc' '/ckpt-[0-9]+\.flc'
case "$last_path" in
*/ckpt-$last_step.flc) ;;
*) fail "$n: the checkpoint after the third delta is $last_path, not a base" ;;
esac
restarted $n
has "$tmp/$n.ps1.log" "loaded checkpoint .*ckpt-$last_step.flc: step $last_step\$" "$n: restarted pserver 1"
hasnt "$tmp/$n.ps1.log" 'replayed [0-9]+ delta' "$n: restarted pserver 1"
hasnt "$tmp/$n.ps1.log" 'truncated or corrupt' "$n: restarted pserver 1"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (restarted at step $last_step from ${last_path##*/})" || show "$tmp/$n".*.log

# ---------------------------------------- kill -9 during a delta write
# The trainers held, pserver 1 writes a checkpoint of everything so far
# (SaveCheckpoint: base or delta), then a delta, killed -9 while its
# temporary file is being written (tried again until the kill lands
# mid-write; after a base, there is no delta to replay).  The
# restart removes the temporary, replays every committed delta in order
# and stands at the step of the last one: with the trainers held, all the
# state there was.
n=midwrite
f0=$fails
job "$tmp/$n.yaml" "$tmp/$n.ck"
JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 2 2
dir=$tmp/$n.ck/pserver-1
wait_log "$tmp/$n.ps1.log" 'written to .*delta-[0-9]+\+1\.flc' 60 || fail "$n: pserver 1 wrote no delta"
caught=
for try in 1 2 3 4 5 6 7 8 9 10 11 12; do
  kill -STOP "$TR0" "$TR1"
  sleep 0.3
  "$PROBE" save "${PSLIST#*,}" > "$tmp/$n.save0" 2>&1 || fail "$n: SaveCheckpoint: $(cat "$tmp/$n.save0")"
  "$PROBE" save "${PSLIST#*,}" > /dev/null 2>&1 &
  probe=$!
  for ((i = 0; i < 5000; i++)); do
    caught=$(compgen -G "$dir/.delta-*.tmp.*") && break
  done
  if [ -n "$caught" ]; then
    kill -KILL "$PS1"
    break
  fi
  wait $probe
  kill -CONT "$TR0" "$TR1"
  sleep 0.05
done
if [ -z "$caught" ]; then
  echo "SKIP: $n: no kill landed during a write in $try tries"
  kill -CONT "$TR0" "$TR1"
  ran=$((ran - 1))
else
  wait_exit "$PS1" 5
  wait $probe
  left=$(compgen -G "$dir/.delta-*.tmp.*") || left= # empty: the kill landed after the rename
  how=mid-write
  [ -n "$left" ] || how="after the rename"
  last_step=$(sed -n 's/^step //p' "$tmp/$n.save0")
  # the base of the checkpoint before the kill (itself, or a delta's)
  base=$(sed -n -e 's/^path .*\/delta-\([0-9]*\)+[0-9]*\.flc$/\1/p' \
    -e 's/^path .*\/ckpt-\([0-9]*\)\.flc$/\1/p' "$tmp/$n.save0")
  [ -n "$base" ] || fail "$n: SaveCheckpoint before the kill: $(cat "$tmp/$n.save0")"
  seq=0
  while [ -e "$dir/delta-$base+$((seq + 1)).flc" ]; do seq=$((seq + 1)); done
  mv "$tmp/$n.ps1.log" "$tmp/$n.ps1.first.log"
  restarted $n
  [ -z "$left" ] || has "$tmp/$n.ps1.log" "removed \.delta-.*\.tmp\.[0-9]+\.[0-9]+, left by process" "$n: the temporary named"
  [ -z "$(compgen -G "$dir/.delta-*.tmp.*")" ] || fail "$n: the temporary is still there"
  if [ $seq = 0 ]; then
    has "$tmp/$n.ps1.log" "loaded checkpoint .*ckpt-$base.flc: step $last_step\$" "$n: restarted pserver 1"
  else
    has "$tmp/$n.ps1.log" "replayed $seq delta checkpoint\(s\) after .*ckpt-$base.flc: step $last_step\$" "$n: restarted pserver 1"
  fi
  hasnt "$tmp/$n.ps1.log" 'truncated or corrupt' "$n: restarted pserver 1"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] || show "$tmp/$n".*.log
[ -z "$caught" ] || [ $fails != "$f0" ] || ok "$n (killed $how on try $try; restarted at step ${last_step:-?}: base ${base:-?} and ${seq:-?} deltas)"

# ------------------------------- kill -9 after deltas, a write cut short
n=delta
f0=$fails
job "$tmp/$n.yaml" "$tmp/$n.ck"
JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 2 2
killed_after $n '/delta-[0-9]+\+1\.flc' '/delta-[0-9]+\+[23]\.flc'
dir=$tmp/$n.ck/pserver-1
base=${last_path##*/delta-}
base=${base%%+*}
seq=${last_path##*+}
seq=${seq%.flc}
# What the kill of a write leaves: the writer's temporary, half written
# (a dead pid's); the named file appears only by the rename at commit.
next=delta-$base+$((seq + 1)).flc
head -c 3000 "$dir/ckpt-$base.flc" > "$dir/.$next.tmp.999999999.0"
restarted $n
has "$tmp/$n.ps1.log" "removed \.${next//+/\\+}\.tmp\.999999999\.0" "$n: the temporary named"
[ ! -e "$dir/.$next.tmp.999999999.0" ] || fail "$n: the temporary is still there"
[ "$seq" -ge 2 ] || fail "$n: the last checkpoint is $last_path, not a second or third delta"
has "$tmp/$n.ps1.log" "replayed $seq delta checkpoint\(s\) after .*ckpt-$base.flc: step $last_step\$" "$n: restarted pserver 1"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (restarted at step $last_step: base $base and $seq deltas)" || show "$tmp/$n".*.log

finish
