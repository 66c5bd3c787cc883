#!/bin/sh
# bench_engine_vs_seq.sh - MLP training speed of the graph engine against
# the deleted sequential engine (trainer/model_seq.c), side by side in one
# run.  A benchmark, never a pass/fail test.
#
# Usage: tests/bench/bench_engine_vs_seq.sh OLD_BUILDDIR NEW_BUILDDIR
#   OLD_BUILDDIR  a build of 8c73758, the last tree whose presets run on the
#                 sequential engine (its child b5c97bf adds the graph code,
#                 which does not build until ddc2d48 moves the presets onto
#                 it; 402ad1b deletes model_seq.c):
#                   git worktree add --detach /work/wt-oldengine 8c73758
#                   cd /work/wt-oldengine && autoreconf -fi &&
#                     sh deploy/build.sh $PWD/build --without-cuda
#   NEW_BUILDDIR  a build of the tree to measure.
# Environment: BENCH_REPS (5) runs of each side, alternating old, new.
#
# The job is deploy/examples/mlp_fmnist.yaml (MLP 784-256-128-100-10,
# Fashion-MNIST, batch 64, momentum) with one thread, prefetch 0 and no
# eval, 3 epochs (2811 steps) per run.  A run's figure is the median of its
# 3 epochs' samples/s; each side's is the median over its runs.  Prints
# `name: value unit` lines: old_engine_mlp_samples_per_s,
# graph_engine_mlp_samples_per_s, graph_vs_old, and the same per CPU-second
# of the process (*_cpu_*, steadier on a shared machine), and `uptime`
# before and after.
set -eu
old=${1:?usage: bench_engine_vs_seq.sh OLD_BUILDDIR NEW_BUILDDIR}
new=${2:?usage: bench_engine_vs_seq.sh OLD_BUILDDIR NEW_BUILDDIR}
top=$(cd "$(dirname "$0")/../.." && pwd)
reps=${BENCH_REPS:-5}
for b in "$old" "$new"; do
  [ -x "$b/flotilla-trainer" ] || { echo "bench_engine_vs_seq.sh: no $b/flotilla-trainer" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
sed -e "s/^  prefetch: .*/  prefetch: 0/" -e "s/^  num_threads: .*/  num_threads: 1/" \
  -e "s/^  eval: .*/  eval: false/" "$top/deploy/examples/mlp_fmnist.yaml" > "$tmp/mlp.yaml"
median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }
epoch_lines() { grep '^\[Epoch [0-9]*\] train:' "$1"; }
echo "uptime_before: $(uptime)"
i=0
while [ "$i" -lt "$reps" ]; do
  for side in old new; do
    if [ "$side" = old ]; then b=$old; else b=$new; fi
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$b/flotilla-trainer" --config "$tmp/mlp.yaml" \
      --max-steps 2811 > "$tmp/$side.log" 2>&1 || { tail "$tmp/$side.log" >&2; exit 1; }
    epoch_lines "$tmp/$side.log" | sed 's/.*, \([0-9.]*\) samples\/s.*/\1/' | median >> "$tmp/$side.wall"
    epoch_lines "$tmp/$side.log" | sed 's/.* \([0-9]*\) samples, .*cpu \([0-9.]*\) s$/\1 \2/' |
      awk '{printf "%.1f\n", $1 / $2}' | median >> "$tmp/$side.cpu"
  done
  i=$((i + 1))
done
ow=$(median < "$tmp/old.wall") nw=$(median < "$tmp/new.wall")
oc=$(median < "$tmp/old.cpu") nc=$(median < "$tmp/new.cpu")
echo "old_engine_mlp_samples_per_s: $ow samples/s"
echo "graph_engine_mlp_samples_per_s: $nw samples/s"
echo "graph_vs_old: $(awk -v a="$nw" -v b="$ow" 'BEGIN {printf "%.3f", a / b}')"
echo "old_engine_mlp_cpu_samples_per_s: $oc samples/s"
echo "graph_engine_mlp_cpu_samples_per_s: $nc samples/s"
echo "graph_vs_old_cpu: $(awk -v a="$nc" -v b="$oc" 'BEGIN {printf "%.3f", a / b}')"
echo "runs_old_wall: $(tr '\n' ' ' < "$tmp/old.wall")"
echo "runs_new_wall: $(tr '\n' ' ' < "$tmp/new.wall")"
echo "uptime_after: $(uptime)"
