#!/bin/sh
# bench_tier_cgroup.sh - the disk tier at scale, its memory measured by the
# kernel: one table of IDS ids (default 10^7; the issue's full size 10^8)
# of 32-float rows with row-wise Adagrad filled, then BATCHES batches of
# 4096 Zipf(1.05) ids pulled and pushed, with pserver.memory_budget BUDGET
# bytes (default 400 MiB: 10^7 rows are 1.64 GB in memory, 10^8 with
# 4 GiB keep the same ratio), the process in a memory cgroup (v1) limited
# to BUDGET plus the documented overhead, a quarter of the budget (at
# least 64 MiB): the process itself, RocksDB beyond its share, and the
# page cache the cgroup also charges, which the kernel reclaims at the
# limit (docs/DESIGN.md, disk tier).  The same
# Zipf stream on a table of MEMIDS ids (default 10^7) all in memory gives
# the rate to compare.  Prints table_fill_rows_per_s, the pull+push rates,
# tier_pull_push_vs_memory, tier_mem_over_budget (the cgroup's peak usage
# / BUDGET: at the limit whenever the page cache filled it),
# tier_rss_over_budget (the process's own peak), the limit's hits and the
# bytes read from disk (bench_tier's split of them: per miss, look-ups,
# compactions).  Needs root
# and /sys/fs/cgroup/memory (SKIP otherwise).  Not a pass/fail test.
#   tests/bench/bench_tier_cgroup.sh [BUILDDIR] [IDS] [BUDGET] [BATCHES] [MEMIDS]
set -eu
b=${1:-build}
ids=${2:-10000000}
budget=${3:-419430400}
batches=${4:-500}
memids=${5:-10000000}
. "$(dirname "$0")/cgroup_lib.sh"
if ! cg_usable; then
  echo "SKIP: needs root and a cgroup v1 memory controller at $cg_root"
  exit 0
fi
bin=$b/tests/bench/.libs/bench_tier
[ -x "$bin" ] || bin=$b/tests/bench/bench_tier
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/fl_bench_tier_cg.XXXXXX")
cg=$cg_root/flotilla_bench_$$
over=$((budget / 4))
[ "$over" -ge 67108864 ] || over=67108864
limit=$((budget + over))
trap cg_cleanup EXIT INT TERM
mkdir "$cg"
echo "$limit" > "$cg/memory.limit_in_bytes"
echo 0 > "$cg/memory.swappiness" 2> /dev/null || true

# The in-memory rate first (outside the cgroup).
LD_LIBRARY_PATH=$b/.libs "$bin" memory "$memids" "$batches" "$tmp" | tee "$tmp/mem"
# The tiered table: the shell joins the cgroup, then becomes the bench.
cg_run env LD_LIBRARY_PATH="$b/.libs" "$bin" tier "$ids" "$batches" "$tmp" "$budget" | tee "$tmp/tier"
peak=$(cat "$cg/memory.max_usage_in_bytes")
fails=$(cat "$cg/memory.failcnt")
oom=$(sed -n 's/^oom_kill //p' "$cg/memory.oom_control" 2> /dev/null || echo 0)
m=$(sed -n 's/^memory pull_push_rows_per_s: \([0-9]*\).*/\1/p' "$tmp/mem")
t=$(sed -n 's/^tier pull_push_rows_per_s: \([0-9]*\).*/\1/p' "$tmp/tier")
mc=$(sed -n 's/^memory pull_push_rows_per_cpu_s: \([0-9]*\).*/\1/p' "$tmp/mem")
tc=$(sed -n 's/^tier pull_push_rows_per_cpu_s: \([0-9]*\).*/\1/p' "$tmp/tier")
rss=$(sed -n 's/^tier peak_rss: \([0-9.]*\) MB.*/\1/p' "$tmp/tier")
awk -v m="$m" -v t="$t" -v mc="$mc" -v tc="$tc" -v n="$ids" -v mn="$memids" -v p="$peak" \
  -v bu="$budget" -v l="$limit" -v f="$fails" -v o="${oom:-0}" -v r="$rss" 'BEGIN {
  printf "tier_pull_push_vs_memory: %.3f ratio (%d ids tiered vs %d in memory, wall)\n", t / m, n, mn
  printf "tier_pull_push_vs_memory_cpu: %.3f ratio (rows per CPU second)\n", tc / mc
  printf "tier_cgroup_peak: %.1f MB (limit %.1f MB, budget %.1f MB; %d limit hits, %d OOM kills)\n",
    p / 1048576, l / 1048576, bu / 1048576, f, o
  printf "tier_mem_over_budget: %.3f ratio (the cgroup peak, page cache included)\n", p / bu
  printf "tier_rss_over_budget: %.3f ratio (the process peak RSS)\n", r * 1048576 / bu
}'
