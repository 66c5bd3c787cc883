#!/bin/bash
# kill -9 of a pserver with pserver.memory_budget while its RocksDB store
# compacts: a CTR job in PS async mode (1 pserver, 2 trainers, a budget of
# a few rows, so that rows go to the store all the time and its 64 KiB
# memtables flush and compact every few steps), checkpoints every 4 steps.
# Once the pserver's /metrics shows a compaction running
# (flotilla_ps_tier_background{work="compactions"}, RocksDB's property read
# at every 100 ms tick: the store's info LOG keeps fatal messages only), the
# trainers are held and, the gauge still showing it, the pserver killed -9
# (tried again until the kill lands during one).  The restart removes the live store, loads its last
# checkpoint and the store's copy beside it: a checkpoint it writes then
# (SaveCheckpoint, trainers held) holds the same rows, bit for bit, as the
# one it loaded (ps_rows_digest reads both tiers): nothing lost beyond the
# documented window (the updates after that checkpoint).  The job is not
# run to its end (test_tier.sh covers a whole budgeted job).  Then the
# same job with delta checkpoints: kill -9 between a base and its first
# delta, and during a delta write (below).  Seconds.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
DIGEST=$FL_BUILDDIR/tests/integration/ps_rows_digest
n=compact
. "$FL_SRCDIR/tests/integration/tier_lib.sh"
# The CTR job, async, checkpoints every 4 steps (plus PSERVER-EXTRA).
# kill_job NAME [PSERVER-EXTRA]
kill_job() {
  buckets=20011 samples=16384 batch=32 evaluate=false log_every=4 heartbeat=10 rpc_timeout=5 \
    a_sync=true tier_job "$tmp/$1.yaml" "$tmp/$1.ck" 8000 "" "  checkpoint_interval_steps: 4
${2:-}"
}
kill_job $n
# The pserver (not the trainers) serves /metrics on port $mport.
mport=$(free_port)
printf '#!/bin/sh\nexec "%s" --metrics_addr=127.0.0.1:%s "$@"\n' "$PSERVER" "$mport" > "$tmp/pserver"
chmod +x "$tmp/pserver"
PLAIN_PSERVER=$PSERVER PSERVER=$tmp/pserver
# compacting: 0 while the pserver's /metrics shows a compaction running.
compacting() {
  curl -s -m 1 "http://127.0.0.1:$mport/metrics" |
    grep -Eq '^flotilla_ps_tier_background\{work="compactions"\} [1-9]'
}

JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 1 2
wait_log "$tmp/$n.ps0.log" 'checkpoint of step [0-9]+ written to ' 60 ||
  fail "$n: the pserver wrote no checkpoint"
caught=
for ((try = 0; try < 20 && fails == 0; try++)); do
  for ((i = 0; i < 1000; i++)); do compacting && break; done
  kill -STOP "$TR0" "$TR1"
  if compacting; then
    kill -KILL "$PS0"
    caught=$try
    break
  fi
  kill -CONT "$TR0" "$TR1"
  running "$TR0" || break
done
if [ -z "$caught" ]; then
  echo "SKIP: $n: no kill landed during a compaction in $try tries"
else
  wait_exit "$PS0" 5
  before=$(grep -E 'checkpoint of step [0-9]+ written to ' "$tmp/$n.ps0.log" | tail -n 1 |
    sed -n 's/.*checkpoint of step \([0-9]*\) written to .*/\1/p')
  mv "$tmp/$n.ps0.log" "$tmp/$n.ps0.first.log"

  JOB_ENV=FLOTILLA_RUN_ID=$n start_pserver $n "$tmp/$n.yaml" 0 2
  wait_log "$tmp/$n.ps0.log" '\] serving ' 20 || fail "$n: the restarted pserver does not serve"
  loaded=$(sed -n 's/.*loaded checkpoint \([^ ]*\.flc\): step \([0-9]*\)$/\1 \2/p' "$tmp/$n.ps0.log" | tail -n 1)
  [ -n "$loaded" ] || fail "$n: the restarted pserver loaded no checkpoint"
  path=${loaded% *} step=${loaded#* }
  [ -n "$loaded" ] && [ "$step" -ge "$before" ] ||
    fail "$n: restarted at step $step, before the last checkpoint written ($before)"
  # The checkpoint loaded, both tiers, before anything is written over it.
  "$DIGEST" "$path" > "$tmp/loaded.digest" 2>&1 || fail "$n: digest of $path: $(cat "$tmp/loaded.digest")"
  grep -q '^tier .*[1-9][0-9]* of its rows on disk' "$tmp/loaded.digest" ||
    fail "$n: the checkpoint loaded keeps no rows on disk"
  for ((i = 0; i < 5; i++)); do
    FL_PROBE_TIMEOUT=20 "$PROBE" save "$PSLIST" > "$tmp/$n.save" 2>&1 && break
    sleep 1
  done
  [ $i -lt 5 ] || fail "$n: SaveCheckpoint: $(cat "$tmp/$n.save")"
  has "$tmp/$n.save" "^step $step\$" "$n: SaveCheckpoint after the restart"
  again=$(sed -n 's/^path //p' "$tmp/$n.save")
  "$DIGEST" "$again" > "$tmp/again.digest" 2>&1 || fail "$n: digest of $again: $(cat "$tmp/again.digest")"
  grep -v '^tier ' "$tmp/loaded.digest" > "$tmp/loaded.cmp"
  grep -v '^tier ' "$tmp/again.digest" > "$tmp/again.cmp"
  diff -q "$tmp/loaded.cmp" "$tmp/again.cmp" > /dev/null ||
    fail "$n: the restarted pserver's rows differ from the checkpoint it loaded"
  ran=$((ran + 1))
  [ "$fails" = 0 ] && ok "$n: killed during a compaction (try $((caught + 1))), restarted at step $step of ${path##*/}, same rows" ||
    show "$tmp/$n".*.log
fi
kill -KILL "$PS0" "$TR0" "$TR1" 2> /dev/null
PSERVER=$PLAIN_PSERVER

# ------------------------------------- delta checkpoints with the budget
# The same job with a base every 3 deltas.  The trainers held, the pserver
# is made to write checkpoints (SaveCheckpoint) until its last is a base,
# whose rows (ps_rows_digest: file and store copy) are the state to come
# back to; then it is killed -9 before any delta of that base; restarted,
# it loads the base, replays nothing, and a checkpoint it writes then
# holds the same rows.  Then a delta (nothing changed since, the trainers
# held) is written and the pserver killed -9 while it is (the store's copy
# or the file's temporary caught on disk; tried again until a kill lands
# there): the restart replays the deltas committed before the kill,
# settles the chain's rows against the last one's store copy, and a
# checkpoint it writes holds the same rows again.
n=deltas
f0=$fails
kill_job $n "  checkpoint_delta: {every: 3}"
dir=$tmp/$n.ck/pserver-0
JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 1 2
wait_log "$tmp/$n.ps0.log" 'written to .*delta-[0-9]+\+1\.flc' 60 || fail "$n: the pserver wrote no delta"
kill -STOP "$TR0" "$TR1"
sleep 0.5 # the calls in flight are answered
for ((k = 0; k < 5; k++)); do
  "$PROBE" save "$PSLIST" > "$tmp/$n.save0" 2>&1 || fail "$n: SaveCheckpoint: $(cat "$tmp/$n.save0")"
  grep -q '^path .*/ckpt-[0-9]*\.flc$' "$tmp/$n.save0" && break
done
base=$(sed -n 's/^path //p' "$tmp/$n.save0")
step=$(sed -n 's/^step //p' "$tmp/$n.save0")
"$DIGEST" "$base" > "$tmp/$n.want" 2>&1 || fail "$n: digest of $base: $(cat "$tmp/$n.want")"
grep -q '^tier .*[1-9][0-9]* of its rows on disk' "$tmp/$n.want" ||
  fail "$n: the base $base keeps no rows on disk"
grep -v '^tier ' "$tmp/$n.want" > "$tmp/$n.want.cmp"
kill -KILL "$PS0"
wait_exit "$PS0" 5

# restart_same NAME WHAT: pserver 0 of job NAME started again stands at
# $step, and a checkpoint it writes holds the rows of $tmp/NAME.want.cmp.
restart_same() {
  mv "$tmp/$1.ps0.log" "$tmp/$1.ps0.$(date +%s%N).log"
  JOB_ENV=FLOTILLA_RUN_ID=$1 start_pserver "$1" "$tmp/$1.yaml" 0 2
  if ! wait_log "$tmp/$1.ps0.log" '\] serving ' 20; then
    fail "$1: $2: the restarted pserver does not serve"
    return
  fi
  for ((i = 0; i < 5; i++)); do
    FL_PROBE_TIMEOUT=20 "$PROBE" save "$PSLIST" > "$tmp/$1.save" 2>&1 && break
    sleep 1
  done
  has "$tmp/$1.save" "^step $step\$" "$1: $2: SaveCheckpoint after the restart"
  _again=$(sed -n 's/^path //p' "$tmp/$1.save")
  "$DIGEST" "$_again" 2>&1 | grep -v '^tier ' > "$tmp/$1.again.cmp"
  diff -q "$tmp/$1.want.cmp" "$tmp/$1.again.cmp" > /dev/null ||
    fail "$1: $2: the restarted pserver's rows differ from those at the kill"
  hasnt "$tmp/$1.ps0.log" 'truncated or corrupt|lost its copy' "$1: $2: the restarted pserver"
}
restart_same $n "killed after a base"
has "$tmp/$n.ps0.log" "loaded checkpoint .*${base##*/}: step $step\$" "$n: restarted after a base"
hasnt "$tmp/$n.ps0.log" 'replayed [0-9]+ delta' "$n: restarted after a base"

caught=
for try in 1 2 3 4 5 6 7 8 9 10 11 12; do
  "$PROBE" save "$PSLIST" > /dev/null 2>&1 &
  probe=$!
  for ((i = 0; i < 5000; i++)); do
    caught=$(compgen -G "$dir/tier.tmp" || compgen -G "$dir/.*.flc.tmp.*") && break
  done
  if [ -n "$caught" ]; then
    kill -KILL "$PS0"
    break
  fi
  wait $probe
done
if [ -z "$caught" ]; then
  echo "SKIP: $n: no kill landed during a delta write in $try tries"
else
  wait_exit "$PS0" 5
  wait $probe
  restart_same $n "killed during a write (try $try, ${caught##*/} there)"
  how=" (${caught##*/} there)"
  has "$tmp/$n.ps0.log" 'disk tier: the store is the copy beside ' "$n: restarted during a write"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n: killed after a base and ${caught:+during a write (try $try${how:-})}, restarted at step $step, same rows" ||
  show "$tmp/$n".*.log
finish
