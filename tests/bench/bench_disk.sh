#!/bin/sh
# bench_disk.sh - the disk's random 4 KiB read rate and the ceiling it puts
# on the disk tier (tests/bench/bench_disk.c): a file of SIZE bytes
# (docs/DESIGN.md's runs: 8 GiB, far above the 10^7-row bench's 500 MiB
# cgroup) read with O_DIRECT, then through the page cache by a process in
# a memory cgroup (v1) limited to LIMIT bytes (there 500 MiB, the limit of
# bench_tier_cgroup.sh at 10^7 rows; skipped without root), each depth
# for SECONDS.  MEMORY_ROWS_PER_S is the table in memory's pull+push rate
# (bench_tier memory's pull_push_rows_per_s) and each NAME:MISS:BLOCKS a
# tier run's pull_push_miss_fraction and pull_push_lookup_blocks_per_miss.
# The file goes under TMPDIR (default /var/tmp) and is removed at the end.
#   tests/bench/bench_disk.sh BUILDDIR SIZE SECONDS MEMORY_ROWS_PER_S LIMIT [NAME:MISS:BLOCKS ...]
set -eu
[ $# -ge 5 ] || { echo "usage: $0 BUILDDIR SIZE SECONDS MEMORY_ROWS_PER_S LIMIT [NAME:MISS:BLOCKS ...]" >&2; exit 2; }
b=$1 size=$2 secs=$3 mem=$4 limit=$5
shift 5
bin=$b/tests/bench/bench_disk
. "$(dirname "$0")/cgroup_lib.sh"
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/fl_bench_disk.XXXXXX")
cg=$cg_root/flotilla_bench_disk_$$
trap cg_cleanup EXIT INT TERM
"$bin" direct "$tmp/data" "$size" "$secs" "$mem" "$@"
if ! cg_usable; then
  echo "buffered: skipped (needs root and a cgroup v1 memory controller at $cg_root)"
  exit 0
fi
mkdir "$cg"
echo "$limit" > "$cg/memory.limit_in_bytes"
cg_run "$bin" buffered "$tmp/data" "$size" "$secs" "$mem" "$@" | sed 's/^/buffered /'
echo "buffered cgroup_peak: $(($(cat "$cg/memory.max_usage_in_bytes") / 1048576)) MiB (limit $((limit / 1048576)) MiB)"
