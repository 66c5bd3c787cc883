#!/bin/bash
# test_tier_diskfull.sh - pserver.memory_budget on a disk that fills up: the
# CTR job of test_tier.sh (PS sync, 1 pserver, 2 trainers, a budget of a
# few rows, checkpoints every 2 steps, a base every 3 deltas) with its
# checkpoint directory, and so the RocksDB store, on a small tmpfs (we are
# root; SKIP where mount is refused).  The store's flushes and the
# checkpoints meet ENOSPC; RocksDB's error handler used to abort the
# process, writing its info LOG on the same full disk.  Each run must not
# abort, must name the store and the errno's text in its errors and refuse
# the checkpoints it cannot write while the trainers go on; then the
# trainers are held, the tmpfs grown, and SaveCheckpoint tried until
# RocksDB took writes again (by itself, seconds later); the job finishes,
# and its final checkpoint, as written, holds bit for bit the rows of the
# same job all in memory on a big disk (ps_rows_digest: both tiers, of a
# row in both the copy a load keeps): no row lost.  Two runs, tmpfs sizes
# in SIZES.  About 20 s.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
. "$FL_SRCDIR/tests/integration/tier_lib.sh"
DIGEST=$FL_BUILDDIR/tests/integration/ps_rows_digest
SIZES="1m 2m"

mkdir -p "$tmp/try"
if ! mount -t tmpfs -o size=1m flotilla-test "$tmp/try" 2> /dev/null; then
  echo "SKIP: cannot mount a tmpfs here (not root?)"
  exit 77
fi
umount "$tmp/try"

# job NAME BUDGET CKDIR
job() {
  buckets=20011 samples=32768 batch=64 evaluate=false tier_job "$tmp/$1.yaml" "$3" "$2" "" \
    "  checkpoint_interval_steps: 2
  checkpoint_delta: {every: 3}"
}

job mem 0 "$tmp/mem.ck"
ps_job mem "$tmp/mem.yaml" 1 2
tier_run_to_end mem
"$DIGEST" "$(tier_last "$tmp/mem.ck")" > "$tmp/mem.digest" 2>&1 || fail "digest mem: $(cat "$tmp/mem.digest")"

k=0
for size in $SIZES; do
  n=full$k k=$((k + 1)) f0=$fails
  disk=$tmp/$n.disk log=$tmp/$n.ps0.log
  mkdir -p "$disk"
  mount -t tmpfs -o size="$size" flotilla-test "$disk" || fail "$n: mount"
  fl_mounts="$fl_mounts $disk"
  job $n 8000 "$disk/ck"
  JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 1 2
  wait_log "$log" 'RocksDB flush or compaction failed' 30 || fail "$n: no background error"
  wait_log "$log" 'checkpoint of step [0-9]+ \(interval_steps\) not written' 20 ||
    fail "$n: no checkpoint refused on the full disk"
  kill -STOP "$TR0" "$TR1"
  mount -o remount,size=64m "$disk"
  for ((i = 0; i < 30; i++)); do
    "$PROBE" save "$PSLIST" > "$tmp/$n.save" 2>&1 && break
    sleep 0.5
  done
  [ $i -lt 30 ] || fail "$n: SaveCheckpoint refused 15 s after space was freed: $(cat "$tmp/$n.save")"
  kill -CONT "$TR0" "$TR1"
  tier_run_to_end $n
  ! grep -Eq 'Assertion|Aborted|core dumped' "$tmp/$n".*.log ||
    fail "$n: aborted: $(grep -Eh 'Assertion|Aborted|core dumped' "$tmp/$n".*.log)"
  has "$log" "disk tier $disk/ck/pserver-0/tier.rocksdb: writing [0-9]+ bytes of demoted rows failed: .*No space left on device" "$n: the store's write error"
  has "$log" "disk tier .*tier.rocksdb: a RocksDB flush or compaction failed \([0-9]+ background error\(s\); [0-9.]+ MiB free there\)" "$n: RocksDB's background error"
  has "$log" "disk tier .*: no copy of the store for the checkpoint|checkpoint .*No space left on device" "$n: why a checkpoint was refused"
  has "$log" "checkpoint of step [0-9]+ written to .*/ckpt-[0-9]+\.flc \(job complete\)" "$n: the final checkpoint, a base"
  # A row promoted while its copy could not be removed is in both tiers of
  # the checkpoint: the digest keeps the copy a load keeps (the newer).
  "$DIGEST" "$(sed -n 's/.*checkpoint of step [0-9]* written to \(.*\) (job complete).*/\1/p' "$log")" \
    > "$tmp/$n.digest" 2>&1 || fail "digest $n: $(cat "$tmp/$n.digest")"
  grep -v '^tier ' "$tmp/$n.digest" > "$tmp/$n.cmp"
  diff -q "$tmp/mem.digest" "$tmp/$n.cmp" > /dev/null ||
    fail "$n: the rows after the full disk differ from those of the job all in memory"
  both=$(sed -n 's/.*, \([0-9]*\) of them also in the file.*/\1/p' "$tmp/$n.digest" | awk '{ s += $1 } END { print s + 0 }')
  ran=$((ran + 1))
  [ $fails = "$f0" ] &&
    ok "$n: a $size disk filled, $(grep -c ' not written' "$log") checkpoint(s) refused, no abort, SaveCheckpoint again at try $((i + 1)), same rows at the end (${both:-0} in both tiers)" ||
    tail -n 5 "$tmp/$n".*.log
done
finish
