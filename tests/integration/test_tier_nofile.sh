#!/bin/bash
# test_tier_nofile.sh - pserver.memory_budget with delta checkpoints under
# a low descriptor limit: the CTR job of test_tier.sh (PS sync, 1 pserver,
# 2 trainers, two sparse tables of 16 stripes each, a budget of a few
# rows, checkpoints every 2 steps, a base every 5 deltas) with the pserver
# under `ulimit -n $NOFILE`.  The disk tier's record of demoted rows once
# took a descriptor per stripe (32 here) besides RocksDB's share, and the
# store then failed its flushes with EMFILE and wrote no checkpoint.  Now
# the run must name no descriptor shortage, write a base and deltas, and
# a pserver restarted (under the same limit) from that chain must hold,
# bit for bit, the rows of the same job all in memory (ps_rows_digest of a
# checkpoint it saves).  A few seconds.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
. "$FL_SRCDIR/tests/integration/tier_lib.sh"
DIGEST=$FL_BUILDDIR/tests/integration/ps_rows_digest
NOFILE=${FL_TIER_NOFILE:-64}

# The pserver under the limit (exec: the pid is the pserver's).
cat > "$tmp/pserver" << EOF
#!/bin/sh
ulimit -n $NOFILE && exec "$PSERVER" "\$@"
EOF
chmod +x "$tmp/pserver"
PSERVER=$tmp/pserver

# job NAME BUDGET [PSERVER-EXTRA]
job() { evaluate=false tier_job "$tmp/$1.yaml" "$tmp/$1.ck" "$2" "" "${3:-}"; }

job mem 0
ps_job mem "$tmp/mem.yaml" 1 2
tier_run_to_end mem
"$DIGEST" "$(tier_last "$tmp/mem.ck")" > "$tmp/mem.digest" 2>&1 || fail "digest mem: $(cat "$tmp/mem.digest")"

n=tier log=$tmp/tier.ps0.log
job $n 8000 "  checkpoint_interval_steps: 2
  checkpoint_delta: {every: 5}"
JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 1 2
tier_chain_restart $n 20
first=$tmp/$n.ps0.first.log
hasnt "$first" 'Too many open files|out of file descriptors|cannot open the record' "$n: under ulimit -n $NOFILE"
has "$first" "checkpoint of step [0-9]+ written to .* \(job complete\)" "$n: the final checkpoint"
hasnt "$log" 'Too many open files|out of file descriptors|cannot open the record' "$n: restarted under ulimit -n $NOFILE"
grep -q "^tier ctr.emb: [0-9]\{3,\} of its rows on disk" "$tmp/$n.digest" ||
  fail "$n: the budgeted run kept its rows in memory: $(grep '^tier ' "$tmp/$n.digest")"
diff -q "$tmp/mem.digest" "$tmp/$n.cmp" > /dev/null ||
  fail "$n: the rows restored from the chain differ from those of the job all in memory"
ran=$((ran + 1))
[ $fails = 0 ] && ok "ulimit -n $NOFILE: a base and deltas written, restored to the rows of the job all in memory" ||
  show "$tmp/$n".*.log
finish
