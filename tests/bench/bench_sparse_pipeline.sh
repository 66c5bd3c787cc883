#!/bin/bash
# The CTR preset's share of step time spent waiting for sparse rows, with
# and without pipelined pulls (pserver.sparse.pipeline): the shipped
# example deploy/examples/ctr_ps_synthetic.yaml (async) and the same job in
# sync mode, 2 pservers x 2 trainers on loopback through flotilla-run.
# Prints `name: value unit` lines (the mean of the trainers' per-epoch
# `pull_wait` lines) and the throughput of each run; never pass/fail.
#   FL_BUILDDIR=build tests/bench/bench_sparse_pipeline.sh
set -eu
B=${FL_BUILDDIR:-build}
S=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/bench_sparse_pipeline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# run NAME PIPELINE A_SYNC: one job; its logs in $tmp/NAME.
run() {
  sed -e "s/^  a_sync: .*/  a_sync: $3/" "$S/deploy/examples/ctr_ps_synthetic.yaml" > "$tmp/$1.yaml"
  # the example's pserver section gains the key
  sed -i "s/^    max_rows: \(.*\)$/    max_rows: \1\n    pipeline: $2/" "$tmp/$1.yaml"
  grep -q "pipeline: $2" "$tmp/$1.yaml" || { echo "bench: cannot set pipeline in the example"; exit 1; }
  timeout 600 "$B/flotilla-run" --mode ps --server_num 2 --nproc_per_node 2 \
    --log_dir "$tmp/$1" "$tmp/$1.yaml" > "$tmp/$1.out" 2>&1 ||
    { echo "bench: $1 failed"; tail -n 20 "$tmp/$1.out"; exit 1; }
}

# share NAME: the mean pull_wait share over the trainers' epochs.
share() {
  sed -n 's/.*\] pull_wait: \([0-9.]*\) of the step time.*/\1/p' "$tmp/$1"/workerlog.* |
    awk '{ s += $1; n++ } END { printf "%.4f", n ? s / n : 0 }'
}

# rate NAME: the trainers' mean samples/s over their epochs.
rate() {
  sed -n 's/.* samples, [0-9.]* s, \([0-9.]*\) samples\/s.*/\1/p' "$tmp/$1"/workerlog.* |
    awk '{ s += $1; n++ } END { printf "%.0f", n ? s / n : 0 }'
}

for mode in async sync; do
  a=true
  [ $mode = sync ] && a=false
  run "$mode.pipe" true $a
  run "$mode.seq" false $a
  suffix=""
  [ $mode = sync ] && suffix=_sync
  p=$(share "$mode.pipe") q=$(share "$mode.seq")
  echo "ctr_pull_wait_share_pipelined$suffix: $p share"
  echo "ctr_pull_wait_share_sequential$suffix: $q share"
  echo "ctr_samples_per_s_pipelined$suffix: $(rate "$mode.pipe") samples/s per trainer"
  echo "ctr_samples_per_s_sequential$suffix: $(rate "$mode.seq") samples/s per trainer"
  awk -v p="$(rate "$mode.pipe")" -v q="$(rate "$mode.seq")" -v m="$mode" \
    'BEGIN { if (q > 0) printf "ctr_speedup_pipelined_%s: %.2f x\n", m, p / q }'
done
