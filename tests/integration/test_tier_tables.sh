#!/bin/bash
# test_tier_tables.sh - pserver.memory_budget with many sparse tables: the
# DLRM example (deploy/examples/recsys: 26 EmbeddingBag tables, each a
# sparse table of 16 lock stripes, 416 tables in the pserver's one RocksDB
# store; rows from the model, 260,000 of them) in PS sync mode, 1 pserver
# and 2 trainers, once all in memory and once with a budget of about 2% of
# its rows, checkpoints every 2 steps as deltas (a base every 5).  The store
# once held at most 64 tables (stripes) and the budgeted job failed at its
# first demotion.  Now the budgeted run must write a base and deltas, and a
# pserver restarted from that chain must hold, bit for bit, the rows of
# every table (and the dense values) of the job all in memory
# (ps_rows_digest of a checkpoint it saves), most of them on disk.  Skips
# (77) without Debian's torch and onnx (the model's export).  Seconds.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
. "$FL_SRCDIR/tests/integration/tier_lib.sh"
DIGEST=$FL_BUILDDIR/tests/integration/ps_rows_digest
py=/usr/bin/python3
ex=$FL_SRCDIR/deploy/examples/recsys
STEPS=6
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
"$py" -c 'import torch, onnx' 2> /dev/null || { echo "SKIP: $py lacks torch or onnx"; exit 77; }

"$py" "$ex/gen_criteo.py" --rows 2000 --seed 1 --out "$tmp/train.tsv" > /dev/null 2>&1 &&
  FLOTILLA_BINDIR=$FL_BUILDDIR timeout 60 "$py" "$ex/dlrm.py" export "$tmp/dlrm.onnx" \
    > "$tmp/export.out" 2>&1 || { cat "$tmp/export.out"; fail "data or export"; finish; }

# job NAME BUDGET [PSERVER-EXTRA]: dlrm_sync.yaml on the files here, no
# shuffle, evaluation or export, its checkpoints in NAME.ck.
job() {
  sed -e "s|/tmp/flotilla-recsys/train.tsv|$tmp/train.tsv|" -e '/test_files:/d' \
    -e "s|/tmp/flotilla-recsys/|$tmp/|" -e 's/shuffle_buffer: .*/shuffle_buffer: 0/' \
    -e 's/eval: true/eval: false/' -e '/export_onnx:/d' "$ex/dlrm_sync.yaml" |
    awk -v ck="$tmp/$1.ck" -v b="$2" -v extra="${3:-}" '
      { print }
      /^pserver:/ { print "  checkpoint_dir: " ck; print "  memory_budget: " b
                    if (extra != "") print extra }' > "$tmp/$1.yaml"
}
TRAINER_ARGS="--max-steps $STEPS"

job mem 0
ps_job mem "$tmp/mem.yaml" 1 2
tier_run_to_end mem
"$DIGEST" "$(tier_last "$tmp/mem.ck")" > "$tmp/mem.digest" 2>&1 || fail "digest mem: $(cat "$tmp/mem.digest")"

# About 260,000 rows of 8 floats and their Adagrad state: a budget of
# 1 MB keeps about 2% of them in memory.
n=tier
job $n 1000000 "  checkpoint_interval_steps: 2
  checkpoint_delta: {every: 5}"
JOB_ENV=FLOTILLA_RUN_ID=$n ps_job $n "$tmp/$n.yaml" 1 2
tier_chain_restart $n 30
hasnt "$tmp/$n.ps0.first.log" 'tables \(stripes\)|out of memory for the entry' "$n: 416 stripes in one store"
# every table mostly on disk (of its 10,000 rows)
disk=$(grep -c '^tier tables\.bags\.[0-9]*\.weight: [0-9]\{4,\} of its rows on disk' "$tmp/$n.digest")
[ "$disk" = 26 ] || fail "$n: $disk of the 26 tables hold 1000 rows or more on disk: $(grep '^tier ' "$tmp/$n.digest")"
[ "$(wc -l < "$tmp/$n.cmp")" = 27 ] || fail "$n: the digest lists $(wc -l < "$tmp/$n.cmp") tables, not 26 and the dense values"
diff -q "$tmp/mem.digest" "$tmp/$n.cmp" > /dev/null ||
  fail "$n: the rows restored from the chain differ from those of the job all in memory"
ran=$((ran + 1))
[ $fails = 0 ] && ok "26 tables x 16 stripes in one store: a base and deltas written, restored to the rows of the job all in memory" ||
  show "$tmp/$n".*.log "$tmp/mem".*.log
finish
