#!/bin/bash
# Restarts of a job with sparse tables: the CTR preset (model.kind ctr) in
# sync PServer mode, 2 pservers and 2 trainers, pserver checkpoints every
# few steps, the rows pulled pipelined (pserver.sparse.pipeline, default).
#   trainer: trainer 1 is killed with kill -9 mid-epoch and started again
#     by hand; it rejoins at the pservers' step, and the run ends exactly
#     as an uninterrupted one: the same test AUC and log loss, the same
#     final tables (every pserver's final checkpoint equal to the
#     uninterrupted run's), and the pservers dropped no push of the
#     restarted trainer as an old duplicate beyond the step it died in.
#     A kill after the trainer's dense pushes of a step went out (during
#     backward) and before its rows' pushes did (right after) included:
#     the servers apply a step's dense blocks only after its rows
#     (docs/DESIGN.md), so the step waits, whole, for the restarted
#     trainer; no server may apply a step "with what it has";
#   pserver: the trainers are held still mid-run (SIGSTOP), pserver 1
#     writes a checkpoint on request (the last checkpoint: no step after
#     it), is killed with kill -9 and restarted from it; the trainers go on
#     (they register again and repeat what the dead server may have lost)
#     and the run ends exactly as the uninterrupted one too;
#   pserver, unheld: pserver 1 killed with kill -9 right after one of its
#     interval checkpoints while the trainers run on, and restarted from
#     it: the run completes, every step done, the restarted server
#     continues its tables from the checkpoint's step (so what the trainers
#     send again of older steps is dropped as a duplicate, and nothing
#     newer is);
#   commit: trainer 1 ends (a test hook) after committing a step to
#     pserver 0 only, which applied it, pserver 1 holding its pushes
#     staged; restarted, it commits the step to pserver 1 instead of
#     computing it again, and the run ends exactly as the uninterrupted one;
#   async: trainer 1 killed and restarted the same way in async mode: it
#     rejoins from its own last push and the job completes, every step
#     done, with no push refused and a test AUC near the sync run's (async
#     runs differ by the order of the pushes, so not bit for bit).
# Every part waits on log lines, bounded; the job is small (a few seconds).
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
. "$FL_SRCDIR/tests/integration/elastic_ps_lib.sh"
DIGEST=$FL_SRCDIR/tests/integration/ps_ckpt_digest.py
PY=/usr/bin/python3
# PIPELINE=false runs the same parts with today's sequential pulls.
PIPELINE=${PIPELINE:-true}

# job FILE NAME [A_SYNC]: the CTR job, pserver checkpoints in $tmp/NAME.ck
# every 8 steps (3 epochs of 64 steps per trainer).
job() {
  samples=8192 test_samples=1024 epochs=3 log_every=4 heartbeat=30 pipeline=$PIPELINE
  strategy="a_sync: ${3:-false}"
  pserver_extra="  checkpoint_dir: $tmp/$2.ck
  checkpoint_interval_steps: 8"
  sparse_job "$1"
}

# The final evaluation line of a trainer's log.
final_eval() { grep -E '^\[Epoch 2\] test auc' "$1" | tail -n 1; }

# ends NAME: every process of job NAME exits 0 (bounded).
ends() {
  for t in 0 1; do
    wait_exit "$(eval echo \$TR$t)" 120
    [ "$rc" = 0 ] || fail "$1: trainer $t exit $rc"
  done
  for s in 0 1; do
    wait_exit "$(eval echo \$PS$s)" 30
    [ "$rc" = 0 ] || fail "$1: pserver $s exit $rc"
  done
}

# same NAME: job NAME ended as the uninterrupted one (base).
same() {
  for t in 0 1; do
    a=$(final_eval "$tmp/base.tr$t.log") b=$(final_eval "$tmp/$1.tr$t.log")
    [ -n "$b" ] && [ "$a" = "$b" ] || fail "$1: trainer $t ends '$b', uninterrupted '$a'"
  done
  for s in 0 1; do
    for r in base "$1"; do
      "$PY" "$DIGEST" "$(ls "$tmp/$r.ck/pserver-$s"/ckpt-*.flc | sort -V | tail -n 1)" > "$tmp/$r.dig$s"
    done
    diff "$tmp/base.dig$s" "$tmp/$1.dig$s" > "$tmp/$1.diff$s" ||
      fail "$1: pserver $s's final checkpoint differs in: $(cut -d' ' -f2 "$tmp/$1.diff$s" | sort -u | tr '\n' ' ')"
  done
}

# auc_of FILE: the final test AUC in a trainer's log.
auc_of() { final_eval "$1" | sed -n 's/.*test auc: \([0-9.]*\),.*/\1/p'; }

# near NAME BOUND: job NAME's final test AUC within BOUND of base's.
near() {
  a=$(auc_of "$tmp/base.tr0.log") b=$(auc_of "$tmp/$1.tr0.log")
  awk -v a="${a:-0}" -v b="${b:-9}" -v t="$2" 'BEGIN { d = a - b; exit !(d < t && d > -t) }' ||
    fail "$1: test AUC '$b', uninterrupted '$a' (more than $2 apart)"
}

# duplicates NAME S: the duplicate pushes pserver S of job NAME counted.
duplicates() {
  sed -n 's/.* \([0-9]*\) duplicates.*/\1/p' "$tmp/$1.ps$2.log" | tail -n 1
}

# kill_trainer NAME [A_SYNC]: job NAME run with trainer 1 killed (kill -9)
# in epoch 1 and started again; every process ends, the restarted trainer
# rejoined, both trainers did every step.  f0: the failures before.
kill_trainer() {
  n=$1
  job "$tmp/$n.yaml" "$n" "${2:-false}"
  ps_job "$n" "$tmp/$n.yaml" 2 2
  f0=$fails
  if wait_log "$tmp/$n.tr1.log" '^\[Epoch 1, batch 20\]' 60; then
    kill -KILL "$TR1"
    wait_exit "$TR1" 5
    mv "$tmp/$n.tr1.log" "$tmp/$n.tr1.first.log"
    start_trainer "$n" "$tmp/$n.yaml" 1 2
  else
    fail "$n: trainer 1 did not reach epoch 1, batch 20"
  fi
  ends "$n"
  has "$tmp/$n.tr1.log" 'rejoining the running job at step [1-9][0-9]*' "$n: restarted trainer"
  for t in 0 1; do has "$tmp/$n.tr$t.log" 'done: 192 steps, 3 epochs' "$n: trainer $t"; done
}

# kill_pserver NAME: pserver 1 of job NAME killed (kill -9) and started
# again (from its newest checkpoint), serving.
kill_pserver() {
  kill -KILL "$PS1"
  wait_exit "$PS1" 5
  mv "$tmp/$1.ps1.log" "$tmp/$1.ps1.first.log"
  start_pserver "$1" "$tmp/$1.yaml" 1 2
  wait_log "$tmp/$1.ps1.log" '\] serving ' 20 || fail "$1: the restarted pserver does not serve"
}

# ------------------------------------------------------------ uninterrupted
job "$tmp/base.yaml" base
ps_job base "$tmp/base.yaml" 2 2
f0=$fails
ends base
for t in 0 1; do has "$tmp/base.tr$t.log" 'done: 192 steps, 3 epochs' "base: trainer $t"; done
[ -n "$(final_eval "$tmp/base.tr0.log")" ] || fail "base: no final evaluation"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "uninterrupted: $(final_eval "$tmp/base.tr0.log")" || show "$tmp"/base.*.log

# ------------------------------------------------- kill -9 of a trainer
kill_trainer trainer
for s in 0 1; do hasnt "$tmp/$n.ps$s.log" 'applying that step with what it has' "$n: pserver $s"; done
same $n
# at most the parts of the step it died in (sparse and dense, on each server)
for s in 0 1; do
  d=$(duplicates $n $s)
  [ -n "$d" ] && [ "$d" -le 8 ] || fail "$n: pserver $s dropped '$d' pushes as duplicates"
done
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n: killed and restarted, the run ends as the uninterrupted one" ||
  show "$tmp/$n".*.log

# ------------------------- a trainer killed among its commits (sync)
# FLOTILLA_TEST_EXIT_AT=70: trainer 1 commits step 70 to pserver 0 alone
# (every server acknowledged its pushes of it), waits until pserver 0
# applied it and exits; pserver 1 holds its pushes staged.  Restarted, it
# finds the step applied on one server and staged on the other, commits it
# there instead of computing it again, and the run ends as the
# uninterrupted one, bit for bit.
n=commit
job "$tmp/$n.yaml" $n
PSLIST="127.0.0.1:$(free_port 127.0.0.1),127.0.0.1:$(free_port 127.0.0.1)"
f0=$fails
for s in 0 1; do start_pserver $n "$tmp/$n.yaml" $s 2; done
start_trainer $n "$tmp/$n.yaml" 0 2
JOB_ENV=FLOTILLA_TEST_EXIT_AT=70 start_trainer $n "$tmp/$n.yaml" 1 2
wait_exit "$TR1" 60
[ "$rc" = 9 ] || fail "$n: trainer 1 exit $rc, not the test hook's 9"
has "$tmp/$n.tr1.log" 'FLOTILLA_TEST_EXIT_AT=70: step committed to pserver 0 only' "$n: trainer 1"
mv "$tmp/$n.tr1.log" "$tmp/$n.tr1.first.log"
start_trainer $n "$tmp/$n.yaml" 1 2
ends $n
has "$tmp/$n.tr1.log" 'step 70 is applied on some pservers and staged on the others' "$n: restarted trainer"
has "$tmp/$n.tr1.log" 'rejoining the running job at step 71' "$n: restarted trainer"
for t in 0 1; do has "$tmp/$n.tr$t.log" 'done: 192 steps, 3 epochs' "$n: trainer $t"; done
for s in 0 1; do hasnt "$tmp/$n.ps$s.log" 'applying that step with what it has' "$n: pserver $s"; done
same $n
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n: killed between its commits of a step, ends as the uninterrupted run" ||
  show "$tmp/$n".*.log

# --------------------------------------- kill -9 of a trainer (async)
kill_trainer async true
for f in "$tmp/$n".*.log; do hasnt "$f" 'INVALID_ARGUMENT' "$n: $f"; done
auc=$(auc_of "$tmp/$n.tr0.log") base_auc=$(auc_of "$tmp/base.tr0.log")
near $n 0.05
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n: killed and restarted, test AUC $auc (sync uninterrupted: $base_auc)" ||
  show "$tmp/$n".*.log

# ------------------------------------------------- kill -9 of a pserver
n=pserver
job "$tmp/$n.yaml" $n
ps_job $n "$tmp/$n.yaml" 2 2
f0=$fails
if wait_log "$tmp/$n.tr0.log" '^\[Epoch 1, batch 20\]' 60; then
  kill -STOP "$TR0" "$TR1"
  "$PROBE" save "${PSLIST#*,}" > "$tmp/$n.save" 2>&1 || fail "$n: SaveCheckpoint: $(cat "$tmp/$n.save")"
  saved=$(sed -n 's/^step //p' "$tmp/$n.save")
  kill_pserver $n
  has "$tmp/$n.ps1.log" "loaded checkpoint .*ckpt-$saved.flc: step $saved" "$n: restarted pserver"
  kill -CONT "$TR0" "$TR1"
else
  fail "$n: trainer 0 did not reach epoch 1, batch 20"
fi
ends $n
for t in 0 1; do has "$tmp/$n.tr$t.log" 'done: 192 steps, 3 epochs' "$n: trainer $t"; done
same $n
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n: restarted from its checkpoint of step ${saved:-?}, ends as the uninterrupted run" ||
  show "$tmp/$n".*.log

# ---------------------------------------- kill -9 of a pserver, unheld
n=unheld
job "$tmp/$n.yaml" $n
ps_job $n "$tmp/$n.yaml" 2 2
f0=$fails
if wait_log "$tmp/$n.ps1.log" 'checkpoint of step (4|5|6)[0-9] .*\(interval_steps\)' 60; then
  kill_pserver $n
  has "$tmp/$n.ps1.log" "loaded checkpoint .*ckpt-[0-9]*.flc: step [1-9][0-9]*" "$n: restarted pserver"
else
  fail "$n: pserver 1 wrote no interval checkpoint of step 40 to 69"
fi
ends $n
for t in 0 1; do has "$tmp/$n.tr$t.log" 'done: 192 steps, 3 epochs' "$n: trainer $t"; done
for f in "$tmp/$n".*.log; do hasnt "$f" 'INVALID_ARGUMENT' "$n: $f"; done
hasnt "$tmp/$n.ps1.log" 'sparse table .*: moving from step 0 ' "$n: restarted pserver"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n: killed after an interval checkpoint and restarted, the run completes" ||
  show "$tmp/$n".*.log
finish
