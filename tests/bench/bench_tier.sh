#!/bin/sh
# bench_tier.sh - the sparse tables' disk tier, scaled down: one table of
# IDS ids (default 10^6; the full size is 10^8) of 32-float rows
# with row-wise Adagrad, all in memory and with pserver.memory_budget at
# 10% of its row bytes; prints table_fill_rows_per_s, the rows/s of
# pull+push of 4096 Zipf(1.05) ids per batch, their ratio
# (tier_pull_push_vs_memory; _cpu: per CPU second of the process, every
# thread, steadier on a shared machine) and peak RSS.  Not a pass/fail test.
#   tests/bench/bench_tier.sh [BUILDDIR] [IDS] [BATCHES]
set -eu
b=${1:-build}
ids=${2:-1000000}
batches=${3:-200}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fl_bench_tier.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$b/tests/bench/bench_tier" memory "$ids" "$batches" "$tmp" | tee "$tmp/mem"
"$b/tests/bench/bench_tier" tier "$ids" "$batches" "$tmp" | tee "$tmp/tier"
m=$(sed -n 's/^memory pull_push_rows_per_s: \([0-9]*\).*/\1/p' "$tmp/mem")
t=$(sed -n 's/^tier pull_push_rows_per_s: \([0-9]*\).*/\1/p' "$tmp/tier")
mc=$(sed -n 's/^memory pull_push_rows_per_cpu_s: \([0-9]*\).*/\1/p' "$tmp/mem")
tc=$(sed -n 's/^tier pull_push_rows_per_cpu_s: \([0-9]*\).*/\1/p' "$tmp/tier")
awk -v m="$m" -v t="$t" -v mc="$mc" -v tc="$tc" -v n="$ids" 'BEGIN {
  printf "tier_pull_push_vs_memory: %.3f ratio (%d ids, budget 10%%)\n", t / m, n
  printf "tier_pull_push_vs_memory_cpu: %.3f ratio (rows per CPU second)\n", tc / mc
}'
