#!/bin/bash
# The allreduce algorithms on many nodes: 8 network namespaces of one rank
# each (netns_lib.sh), every rank running coll_check_rank over the tcp
# transport.  For ring, halving_doubling, tree and the automatic choice,
# at 1 element (a group larger than the buffer), 1,000, 65,536 and 1,000,001
# elements, in f32, f64, f16 and bf16:
#   - the sum is right on every rank (against a sum in double) and the
#     same bytes on every rank;
#   - a second run of a fixed algorithm gives the same bits (the hashes
#     rank 0 prints; auto probes the links anew in each fresh run and may
#     choose otherwise, so its runs are checked for right, equal sums only:
#     a resumed run keeps its choice through the checkpoint);
# then the fixed algorithms once more, at the sizes up to 65,536, with
# every node's link shaped to 1 Gbit/s and 0.1 ms delay (the benchmark's
# links): the same bits again, since a delay changes when bytes arrive,
# never the order of the sum.
# Needs root, iproute2, tc; SKIP (77) with the reason when the namespaces
# cannot be made.  Cleans up on any exit; every wait is bounded.
set -u
FL_BUILDDIR=${FL_BUILDDIR:-.}
FL_SRCDIR=${FL_SRCDIR:-..}
NODES=${FL_ALGO_NODES:-8}
CHECK=$FL_BUILDDIR/tests/integration/coll_check_rank
SIZES=1,1000,65536,1000001
SLOW_SIZES=1,1000,65536
. "$FL_SRCDIR/tests/integration/netns_lib.sh"
tmp=$(mktemp -d /tmp/fl_netns_algos.XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill -KILL "$p" 2> /dev/null; done
  for p in $pids; do wait "$p" 2> /dev/null; done
  fl_ns_cleanup
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
[ -x "$CHECK" ] || { echo "FAIL: $CHECK not built"; exit 1; }
fl_ns_setup "$NODES"
rc=$?
[ $rc -eq 0 ] || exit $rc
export FLOTILLA_TOKEN=netns-algos-token
fail=0

# run ALGO TAG [SIZES]: every rank in its namespace; rank 0's lines in $tmp/TAG.
run() {
  local algo=$1 tag=$2 sizes=${3:-$SIZES} r eps="" base=$(fl_ns_port $NODES) p=() bad=0
  for ((r = 0; r < NODES; r++)); do eps="$eps${eps:+,}${FL_IP[r]}:$((base + r))"; done
  for ((r = 0; r < NODES; r++)); do
    timeout 120 ip netns exec "${FL_NS[r]}" env FLOTILLA_MODE=collective FLOTILLA_TRAINER_ID=$r \
      FLOTILLA_TRAINERS_NUM=$NODES FLOTILLA_TRAINER_ENDPOINTS=$eps \
      FLOTILLA_COLLECTIVE_BACKEND=tcp FLOTILLA_LOG_LEVEL=warn \
      "$CHECK" --algorithm "$algo" --sizes $sizes > "$tmp/$tag.$r" 2>&1 &
    p[r]=$!
    pids="$pids $!"
  done
  for ((r = 0; r < NODES; r++)); do
    if ! wait ${p[r]}; then
      echo "FAIL: $tag: rank $r: $(tail -n 3 "$tmp/$tag.$r")"
      bad=1
    fi
  done
  grep '^hash ' "$tmp/$tag.0" > "$tmp/$tag" 2> /dev/null
  if [ $bad -eq 0 ] && ! grep -qx ok "$tmp/$tag.0"; then
    echo "FAIL: $tag: rank 0 did not finish: $(tail -n 3 "$tmp/$tag.0")"
    bad=1
  fi
  return $bad
}

if run auto auto.a; then
  echo "PASS: auto on $NODES nodes: right sums, the same bits on every rank ($(wc -l < "$tmp/auto.a") size x dtype)"
else
  fail=1
fi
for algo in ring halving_doubling tree; do
  run $algo $algo.a || { fail=1; continue; }
  run $algo $algo.b || { fail=1; continue; }
  if cmp -s "$tmp/$algo.a" "$tmp/$algo.b" && [ -s "$tmp/$algo.a" ]; then
    echo "PASS: [${SECONDS}s] $algo on $NODES nodes: right sums, the same bits on every rank and in two runs ($(wc -l < "$tmp/$algo.a") size x dtype)"
  else
    echo "FAIL: $algo: two runs gave different bits:"
    diff "$tmp/$algo.a" "$tmp/$algo.b" | head -5
    fail=1
  fi
done

# The same bits over slow links (auto re-probes there: its choice may move,
# so only the fixed algorithms are compared with their unshaped runs).
shaped=1
for ((k = 0; k < NODES; k++)); do
  fl_ns_shape $k 1gbit 100us - > /dev/null || { shaped=0; break; }
done
if [ $shaped -eq 1 ]; then
  for algo in ring halving_doubling tree; do
    if run $algo $algo.slow $SLOW_SIZES &&
      cmp -s <(grep -v '^hash 1000001 ' "$tmp/$algo.a") "$tmp/$algo.slow"; then
      echo "PASS: [${SECONDS}s] $algo with 1 Gbit/s, 0.1 ms links: the same bits"
    else
      echo "FAIL: $algo with 1 Gbit/s, 0.1 ms links: results differ or the run failed"
      fail=1
    fi
  done
else
  echo "NOTE: links could not be shaped here (no netem, no netns_wire): the delayed part did not run"
fi
exit $fail
