#!/bin/bash
# run_bench_algos_netns.sh - the allreduce algorithms on NODES network
# namespaces of one rank each (tests/integration/netns_lib.sh), every
# node's link shaped to 1 Gbit/s with 0.1 ms delay: 64 KiB latency of
# ring, halving_doubling and tree, and the automatic choice's bus
# bandwidth against each single algorithm at 64 KiB, 1 MiB and 16 MiB.
# Prints the bench's `time_...`/`busbw_...` lines per algorithm
# (label algo_<name>_<NODES>x1).
# Usage (root): bash tests/bench/run_bench_algos_netns.sh [BUILDDIR] [--nodes 8] [--iters N]
#               [--sizes 64K,1M,16M] [--algos ring,halving_doubling,tree,auto]
# Never pass/fail; exits 0 with SKIP where namespaces are unavailable.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=. nodes=8 iters=5 sizes=64K,1M,16M algos=ring,halving_doubling,tree,auto
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift ;;
    --iters) iters=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --algos) algos=$2; shift ;;
    *) build=$1 ;;
  esac
  shift
done
build=$(cd "$build" && pwd)
BENCH=$build/tests/bench/bench_allreduce_rank
export FL_NS_WIRE=$build/tests/integration/netns_wire
. "$src/tests/integration/netns_lib.sh"
tmp=$(mktemp -d /tmp/fl_bench_algos.XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill -KILL "$p" 2> /dev/null; done
  for p in $pids; do wait "$p" 2> /dev/null; done
  fl_ns_cleanup
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fl_ns_setup "$nodes" || exit 0
for ((k = 0; k < nodes; k++)); do fl_ns_shape $k 1gbit 100us - > /dev/null || exit 0; done
export FLOTILLA_TOKEN=bench-algos-token
echo "# $nodes nodes x 1 rank, 1 Gbit/s, 0.1 ms; $(nproc) CPUs"
run() {
  local algo=$1 sizes=$2 r eps="" base=$((20000 + RANDOM % 20000)) p=()
  for ((r = 0; r < nodes; r++)); do eps="$eps${eps:+,}${FL_IP[r]}:$((base + r))"; done
  for ((r = 0; r < nodes; r++)); do
    timeout 300 ip netns exec ${FL_NS[r]} env FLOTILLA_MODE=collective FLOTILLA_TRAINER_ID=$r \
      FLOTILLA_TRAINERS_NUM=$nodes FLOTILLA_TRAINER_ENDPOINTS=$eps FLOTILLA_COLLECTIVE_BACKEND=tcp \
      FLOTILLA_LOG_LEVEL=info "$BENCH" --sizes "$sizes" --iters $iters \
      --label "algo_${algo}_${nodes}x1" --algorithm "$algo" > "$tmp/$algo.$r" 2>&1 &
    p[r]=$!
    pids="$pids $!"
  done
  for ((r = 0; r < nodes; r++)); do wait ${p[r]} || echo "# $algo: rank $r exited $?: $(tail -2 "$tmp/$algo.$r")"; done
  grep -E '^(busbw|time)_|^#|network probe' "$tmp/$algo.0"
}
for a in ${algos//,/ }; do run $a "$sizes"; done
