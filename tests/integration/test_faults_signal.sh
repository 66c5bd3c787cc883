#!/bin/bash
# SIGTERM and SIGINT of trainers, with the real
# flotilla-trainer (and flotilla-pserver) on 127.0.0.1 (faults_lib.sh),
# each part bounded in time and waiting on log lines:
#   local: SIGINT finishes the step, checkpoints at it (checkpoint_interval
#     0: no checkpoint would exist otherwise) and exits 0; the same run
#     started again resumes from that step and finishes;
#   a second signal exits at once (130 for SIGINT after SIGTERM), without
#     the checkpoint;
#   collective, SIGTERM to rank 1 only: the ranks agree on the step to stop
#     at, rank 0 checkpoints it and both exit 0 at the same step;
#   ps: SIGTERM of the trainer: it checkpoints and exits 0 without telling
#     the pserver it completed (the job is not over: the pserver goes on
#     serving until its own SIGTERM);
#   ctr (ps): SIGTERM of the trainer of the sparse model: it stops after
#     its step and exits 0, the pserver goes on serving;
#   ps sync, SIGTERM to every process at once (fault 6): the two pservers'
#     final checkpoints hold the same step, in each of three rounds.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"

# job FILE MODE CHECKPOINT_DIR
job() {
  cat > "$1" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 2048, test_samples: 64, seed: 3}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
train: {epochs: 100000, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1,
        checkpoint_dir: $3, checkpoint_interval: 0, eval: false}
cluster: {mode: $2, collective_timeout_s: 20, heartbeat_timeout_s: 5, rpc_timeout_s: 5}
EOF
}

stop_step() { sed -n 's/.*stopped by a signal at step \([0-9]*\) .*/\1/p' "$1" | tail -n 1; }

# ------------------------------------------------------- local, SIGINT
n=local
job "$tmp/$n.yaml" local "$tmp/$n.ck"
f0=$fails
spawn TR0 "$tmp/$n.log" FLOTILLA_MODE=local FLOTILLA_RUN_ID=sig -- "$TRAINER" --config "$tmp/$n.yaml"
wait_log "$tmp/$n.log" '^\[Epoch 1, batch' 60 || fail "$n: no training"
kill -INT "$TR0"
wait_exit "$TR0" 60
[ "$rc" = 0 ] || fail "$n: exit $rc after SIGINT (want 0)"
s=$(stop_step "$tmp/$n.log")
if [ -n "$s" ]; then
  has "$tmp/$n.log" "checkpoint: step $s .* saved in $tmp/$n.ck" "$n"
  [ -f "$tmp/$n.ck/ckpt-$s.flc" ] || fail "$n: no ckpt-$s.flc"
  sed -i "s/epochs: 100000/epochs: 100000, max_steps: $((s + 10))/" "$tmp/$n.yaml"
  spawn TR0 "$tmp/$n.again.log" FLOTILLA_MODE=local FLOTILLA_RUN_ID=sig -- "$TRAINER" \
    --config "$tmp/$n.yaml"
  wait_exit "$TR0" 60
  [ "$rc" = 0 ] || fail "$n: exit $rc of the restarted run"
  has "$tmp/$n.again.log" "resuming from step $s\$" "$n: restarted run"
  has "$tmp/$n.again.log" "done: $((s + 10)) steps" "$n: restarted run"
else
  fail "$n: no 'stopped by a signal at step' line"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (stopped at step $s)" || show "$tmp/$n".*log

# ------------------------------------------------ a second signal
n=twice
job "$tmp/$n.yaml" local "$tmp/$n.ck"
f0=$fails
spawn TR0 "$tmp/$n.log" FLOTILLA_MODE=local -- "$TRAINER" --config "$tmp/$n.yaml"
wait_log "$tmp/$n.log" '^\[Epoch 1, batch' 60 || fail "$n: no training"
# both pending when it runs again: the second is handled right after the first
kill -STOP "$TR0"
kill -TERM "$TR0"
kill -INT "$TR0"
kill -CONT "$TR0"
wait_exit "$TR0" 30
[ "$rc" = 130 ] || [ "$rc" = 143 ] || fail "$n: exit $rc (want 130 or 143: at once)"
hasnt "$tmp/$n.log" 'stopped by a signal' "$n"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*log

# --------------------------------------- collective, SIGTERM to rank 1
n=coll
job "$tmp/$n.yaml" collective "$tmp/$n.ck"
f0=$fails
coll_job $n "$tmp/$n.yaml" 2 127.0.0.1
wait_log "$tmp/$n.tr1.log" '^\[Epoch 1, batch' 60 || fail "$n: no training"
kill -TERM "$TR1"
for r in 0 1; do
  wait_exit "$(eval echo \$TR$r)" 60
  [ "$rc" = 0 ] || fail "$n: rank $r exit $rc (want 0)"
done
s0=$(stop_step "$tmp/$n.tr0.log")
s1=$(stop_step "$tmp/$n.tr1.log")
[ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "$n: ranks stopped at steps '$s0' and '$s1'"
[ -n "$s0" ] && [ $((s0 % 4)) = 0 ] || fail "$n: stop step '$s0' is not an agreed one"
[ -n "$s0" ] && [ -f "$tmp/$n.ck/ckpt-$s0.flc" ] || fail "$n: no checkpoint of step $s0"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (both ranks at step $s0)" || show "$tmp/$n".*.log

# ------------------------------------------------------ ps, SIGTERM
n=ps
job "$tmp/$n.yaml" ps "$tmp/$n.ck"
f0=$fails
JOB_ENV=FLOTILLA_RUN_ID=pssig ps_job $n "$tmp/$n.yaml" 1 1
wait_log "$tmp/$n.tr0.log" '^\[Epoch 1, batch' 60 || fail "$n: no training"
kill -TERM "$TR0"
wait_exit "$TR0" 60
[ "$rc" = 0 ] || fail "$n: trainer exit $rc (want 0)"
s=$(stop_step "$tmp/$n.tr0.log")
[ -n "$s" ] && [ -f "$tmp/$n.ck/ckpt-$s.flc" ] || fail "$n: no trainer checkpoint of step '$s'"
hasnt "$tmp/$n.ps0.log" 'trainer 0 completed' "$n: pserver"
running "$PS0" || fail "$n: the pserver ended with the stopped trainer"
kill -TERM "$PS0"
wait_exit "$PS0" 30
[ "$rc" = 0 ] || fail "$n: pserver exit $rc after SIGTERM"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

# -------------------------------------------------- ctr (ps), SIGTERM
# The ctr model's state is the pservers': its trainer stops after the step
# in flight, exits 0 without telling the pserver it completed.
n=ctr
f0=$fails
sed -e 's/train_samples: 65536/train_samples: 200000/; s/epochs: 2/epochs: 100/' \
  -e 's/log_interval: 50/log_interval: 10/' \
  "$FL_SRCDIR/deploy/examples/ctr_ps_synthetic.yaml" > "$tmp/$n.yaml"
JOB_ENV=FLOTILLA_RUN_ID=ctrsig ps_job $n "$tmp/$n.yaml" 1 1
wait_log "$tmp/$n.tr0.log" '^\[Epoch 0, batch 20\]' 60 || fail "$n: no training"
kill -TERM "$TR0"
wait_exit "$TR0" 60
[ "$rc" = 0 ] || fail "$n: trainer exit $rc (want 0)"
has "$tmp/$n.tr0.log" "stopped by a signal at step [0-9]* .*the ctr model's state is the pservers'" "$n: trainer"
hasnt "$tmp/$n.tr0.log" 'done: ' "$n: trainer"
hasnt "$tmp/$n.ps0.log" 'trainer 0 completed' "$n: pserver"
running "$PS0" || fail "$n: the pserver ended with the stopped trainer"
kill -TERM "$PS0"
wait_exit "$PS0" 30
[ "$rc" = 0 ] || fail "$n: pserver exit $rc after SIGTERM"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

# ----------------- ps sync: SIGTERM to everybody, shards agree (fault 6)
# As flotilla-run stops a job: every process gets SIGTERM at once.  The
# trainers finish their step, the pservers take it before their final
# checkpoints, which then hold the same step (the audit saw 210 and 211).
n=pssync
f0=$fails
job "$tmp/$n.yaml" ps "$tmp/$n.tck"
cat >> "$tmp/$n.yaml" << EOF
pserver: {checkpoint_dir: $tmp/$n.ck, dense_block_size: 100}
EOF
steps=""
for round in 1 2 3; do
  JOB_ENV=FLOTILLA_RUN_ID=pssync$round ps_job $n.$round "$tmp/$n.yaml" 2 2
  wait_log "$tmp/$n.$round.tr1.log" "^\[Epoch $round, batch" 60 || fail "$n: round $round: no training"
  kill -TERM "$PS0" "$PS1" "$TR0" "$TR1"
  for p in TR0 TR1 PS0 PS1; do
    wait_exit "$(eval echo \$$p)" 60
    [ "$rc" = 0 ] || fail "$n: round $round: $p exit $rc"
  done
  s0=$("$PROBE" latest "$tmp/$n.ck/pserver-0" 2> /dev/null | sed -n 's/^step //p')
  s1=$("$PROBE" latest "$tmp/$n.ck/pserver-1" 2> /dev/null | sed -n 's/^step //p')
  [ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "$n: round $round: the shards' checkpoints hold steps '$s0' and '$s1'"
  steps="$steps $s0"
  has "$tmp/$n.$round.ps0.log" 'SIGTERM: finishing the step in flight' "$n: round $round: pserver 0"
  mv "$tmp/$n.ck" "$tmp/$n.ck.$round"
  rm -rf "$tmp/$n.tck"
done
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (steps$steps)" || show "$tmp/$n".*.log

finish
