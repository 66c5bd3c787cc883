#!/bin/sh
# test_tier.sh - pserver.memory_budget end to end: the CTR model in PS sync
# mode (2 trainers, 1 pserver, a small table of about 10^4 rows) once with
# every row in memory and once with a budget of about 1% of the rows (the
# others demoted to the RocksDB tier and promoted back as they are used);
# the pservers' final checkpoints hold the same rows, bit for bit (values,
# optimizer state, update counts; ps_rows_digest reads the tiered one's
# rows from the file and its .tier copy), and the same dense values.
# Then the same pair with admission (ids seen twice; one trainer, so that
# the order of sightings is the same in both runs) and expiry on, its
# sweeps walking the disk rows' marks.  A sync pserver expires rows at each
# step's apply (by the table's clock), so a short limit (4 steps) expires
# the same rows in every run: the rows expired are counted and must be
# some.
# Seconds.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
RUN=$FL_BUILDDIR/flotilla-run
DIGEST=$FL_BUILDDIR/tests/integration/ps_rows_digest
tmp=$(mktemp -d /tmp/fl_tier.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

. "$FL_SRCDIR/tests/integration/tier_lib.sh"
# job NAME BUDGET [SPARSE-EXTRA]
job() { tier_job "$tmp/$1.yaml" "$tmp/$1.ck" "$2" "${3:-}"; }

# run NAME [TRAINERS]
run() {
  timeout 120 "$RUN" --log_dir "$tmp/$1.log" --mode ps --server_num 1 --nproc_per_node "${2:-2}" \
    "$tmp/$1.yaml" > "$tmp/$1.out" 2>&1 && return 0
  tail -n 20 "$tmp/$1.out" "$tmp/$1.log"/*log.* 2> /dev/null
  echo "FAIL: $1 did not finish"
  exit 1
}

# About 10^4 rows of 68 bytes (row-wise Adagrad, dim 8): 0.7 MB; a budget
# of 8000 bytes keeps 6000 of them (about 90 rows, ~1%) in memory.
job mem 0
job tier 8000
run mem
run tier
"$DIGEST" "$(tier_last "$tmp/mem.ck")" > "$tmp/mem.digest" || { echo "FAIL: digest mem"; exit 1; }
"$DIGEST" "$(tier_last "$tmp/tier.ck")" > "$tmp/tier.digest" || { echo "FAIL: digest tier"; exit 1; }
cat "$tmp/tier.digest"
if ! grep -q "^tier ctr.emb: [0-9]\{4,\} of its rows on disk" "$tmp/tier.digest"; then
  echo "FAIL: the budgeted run kept its rows in memory"
  exit 1
fi
if ! diff "$tmp/mem.digest" "$(grep -v '^tier ' "$tmp/tier.digest" > "$tmp/tier.cmp"; echo "$tmp/tier.cmp")"; then
  echo "FAIL: with pserver.memory_budget the rows or dense values differ"
  exit 1
fi
echo "PASS: same bits with and without pserver.memory_budget"

# Admission and expiry: a trainer's 16 steps, rows unseen for 4 expire.
ae="    admit_threshold: 2
    expire_after_steps: 4"
job amem 0 "$ae"
job atier 8000 "$ae"
run amem 1
run atier 1
"$DIGEST" "$(tier_last "$tmp/amem.ck")" > "$tmp/amem.digest" || { echo "FAIL: digest amem"; exit 1; }
"$DIGEST" "$(tier_last "$tmp/atier.ck")" > "$tmp/atier.digest" || { echo "FAIL: digest atier"; exit 1; }
cat "$tmp/amem.digest" "$tmp/atier.digest"
if ! grep -q "^tier ctr.emb: [0-9]\{3,\} of its rows on disk" "$tmp/atier.digest"; then
  echo "FAIL: the budgeted run with admission kept its rows in memory"
  exit 1
fi
grep -v '^tier ' "$tmp/atier.digest" > "$tmp/atier.cmp"
if ! diff "$tmp/amem.digest" "$tmp/atier.cmp"; then
  echo "FAIL: with admission, expiry and pserver.memory_budget the rows or dense values differ"
  exit 1
fi
# the log line at each checkpoint counts the rows expired: some, and as many
expired() { sed -n 's/.*sparse table ctr.emb:.* expired \([0-9]*\),.*/\1/p' "$tmp/$1.log"/serverlog.0 | tail -n 1; }
ex=$(expired amem)
case $ex in '' | 0 | *[!0-9]*) ex=none ;; esac
if [ "$ex" = none ] || [ "$ex" != "$(expired atier)" ]; then
  echo "FAIL: rows expired: '$(expired amem)' all in memory, '$(expired atier)' with the budget (want as many, some)"
  exit 1
fi
echo "PASS: same bits with admission and expiry ($ex rows of ctr.emb expired), with and without pserver.memory_budget"
