#!/bin/bash
# run_bench_netns.sh - allreduce bus bandwidth on a network whose links
# are capped: 3 network namespaces as nodes (tests/integration/
# netns_lib.sh), each node's link capped at 1 Gbit/s, then at 10 Gbit/s
# (tc: netem rate when the kernel has it, else tbf), in one run:
#   ring_3x1     flat ring (tcp backend), 1 rank a node: the link itself;
#   ring2_3x1    the same with nccl_comm_num 2 (two parallel rings);
#   ring_3x2     flat ring (tcp), 2 ranks a node;
#   hier_3x2     hierarchical (shm inside a node, tcp ring between nodes),
#                2 ranks a node;
#   shm_1x2      (once) 2 ranks of one node over shm: the intra-node part;
#   mpi_3x1, mpi_3x2   OpenMPI's MPI_Allreduce (tests/bench/mpi_allreduce.c)
#                on the same namespaces: mpirun runs in node 0's namespace
#                and reaches the others through a plm_rsh_agent that is
#                `ip netns exec` (btl tcp,self on the test subnet: its shared-
#                memory btl crashed between the namespaces here), and
#                mpi_yield_when_idle 1: each "node" has free slots in
#                MPI's eyes, so it would busy-poll on these few shared
#                cores (64 KiB took 76 ms that way, 0.8 ms yielding).
# Sizes 64 KiB, 1, 16 and 64 MiB of fp32.  Each figure line
#   busbw_ring_3x1_1gbit_64MiB: 0.1160 GB/s
# is followed by a ratio to the cap (busbw / link rate) for the 1 rank a
# node cases, and ratios hier/ring and ours/MPI at 64 MiB.  Intra-node
# traffic (shm, or loopback inside a namespace) is not capped: it runs at
# memory speed, far above 4x the inter-node cap.  All lines also go to
# FILE when given (for tests/bench/allreduce_model.py).
# Usage (root): bash tests/bench/run_bench_netns.sh [BUILDDIR] [--out FILE]
#   [--caps 1gbit,10gbit] [--iters N]
# or, for the ratios of figures already taken: --ratios FILE.
# Never pass/fail.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=.
out=""
caps=1gbit,10gbit
iters=3
ratios_of=""
while [ $# -gt 0 ]; do
  case $1 in
    --ratios) ratios_of=$2; shift ;;
    --out) out=$2; shift ;;
    --caps) caps=$2; shift ;;
    --iters) iters=$2; shift ;;
    *) build=$1 ;;
  esac
  shift
done
build=$(cd "$build" && pwd)
BENCH=$build/tests/bench/bench_allreduce_rank
. "$src/tests/integration/netns_lib.sh"
tmp=$(mktemp -d /tmp/fl_bench_netns.XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill -KILL "$p" 2> /dev/null; done
  for p in $pids; do wait "$p" 2> /dev/null; done
  fl_ns_cleanup
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
[ -n "$out" ] && : > "$out"
say() { echo "$*"; [ -n "$out" ] && echo "$*" >> "$out"; return 0; }

# ratios FILE: the ratios of the figures in FILE.
ratios() {
awk -F': ' '
  /^busbw_/ { split($2, v, " "); bw[$1] = v[1] }
  /^mpi_/   { split($2, v, " "); bw[$1] = v[1] }
  END {
    for (k in bw) {
      if (k ~ /^busbw_ring2?_3x1_/) {
        n = split(k, p, "_"); cap = p[4]; g = cap; sub(/gbit/, "", g)
        printf "ratio_%s_to_link: %.3f\n", substr(k, 7), bw[k] * 8 / g
      }
    }
    for (k in bw) if (k ~ /^busbw_hier_3x2_.*_64MiB$/) {
      r = k; sub(/hier/, "ring", r)
      if (bw[r] > 0) printf "ratio_hier_over_ring_%s: %.3f\n", substr(k, 16), bw[k] / bw[r]
    }
    for (k in bw) if (k ~ /^busbw_(ring|hier)_3x[12]_.*_64MiB$/) {
      n = split(k, p, "_"); m = "mpi_" p[3] "_" p[4] "_busbw_" (p[3] == "3x1" ? 3 : 6) "r_64MiB"
      if (bw[m] > 0) printf "ratio_%s_over_mpi: %.3f\n", substr(k, 7), bw[k] / bw[m]
    }
  }' "$1" | sort
}

if [ -n "$ratios_of" ]; then
  ratios "$ratios_of"
  exit 0
fi
fl_ns_setup 3 || exit 0
export FLOTILLA_TOKEN=bench-netns-token
SIZES=64K,1M,16M,64M
say "# nodes ${FL_IP[*]}; shaping: $([ $FL_NS_NETEM = 1 ] && echo netem || echo tbf); $(nproc) CPUs"

# ours LABEL NODES PER_NODE [--hier] [--rings N]: one bench_allreduce_rank
# per rank, each in its node's namespace, FLOTILLA_* places (tcp unless
# --hier or FLOTILLA_COLLECTIVE_BACKEND says otherwise).
ours() {
  local label=$1 per=$3 k r n=$(($2 * $3)) eps="" base=$(fl_ns_port $n)
  shift 3
  for ((r = 0; r < n; r++)); do
    eps="$eps${eps:+,}${FL_IP[r / per]}:$((base + r))"
  done
  local p=()
  for ((r = 0; r < n; r++)); do
    k=$((r / per))
    timeout 300 ip netns exec ${FL_NS[k]} env FLOTILLA_MODE=collective FLOTILLA_TRAINER_ID=$r \
      FLOTILLA_TRAINERS_NUM=$n FLOTILLA_TRAINER_ENDPOINTS=$eps \
      FLOTILLA_COLLECTIVE_BACKEND=$([ "${1:-}" = --hier ] && echo auto || echo ${BACKEND:-tcp}) \
      FLOTILLA_LOG_LEVEL=warn "$BENCH" --sizes $SIZES --iters $iters --label "$label" "$@" \
      > "$tmp/$label.$r" 2>&1 &
    p[r]=$!
    pids="$pids $!"
  done
  for ((r = 0; r < n; r++)); do wait ${p[r]} || say "# $label: rank $r exited $?: $(tail -n 2 "$tmp/$label.$r")"; done
  grep -E '^(busbw|time)_|^#' "$tmp/$label.0" | while read -r l; do say "$l"; done
}

# MPI on the same namespaces.
mpi_ok=0
if command -v mpicc > /dev/null && command -v mpirun > /dev/null &&
  mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" 2> "$tmp/mpicc.err"; then
  mpi_ok=1
  cat > "$tmp/agent.sh" << AGENT
#!/bin/sh
# plm_rsh_agent: run the remote command in the namespace of node HOST.
host=\$1
shift
case \$host in
$(for k in 0 1 2; do echo "  ${FL_IP[k]}) ns=${FL_NS[k]} ;;"; done)
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
# Every node is this same host: each daemon gets a session directory of
# its own, or they collide ("File exists").
mkdir -p "$tmp/mpitmp/\$host"
exec ip netns exec \$ns sh -c "\$(printf '%s' "\$*" | sed "s|$tmp/mpitmp|$tmp/mpitmp/\$host|g")"
AGENT
  chmod +x "$tmp/agent.sh"
else
  say "# mpi: unavailable ($(head -1 "$tmp/mpicc.err" 2> /dev/null || echo no mpicc/mpirun))"
fi
mpi() { # mpi LABEL PER_NODE
  local label=$1 per=$2
  [ $mpi_ok = 1 ] || return 0
  printf '%s slots=%d\n' ${FL_IP[0]} $per ${FL_IP[1]} $per ${FL_IP[2]} $per > "$tmp/hosts"
  mkdir -p "$tmp/mpitmp" # a session directory of this run's own
  timeout 300 ip netns exec ${FL_NS[0]} mpirun --allow-run-as-root --oversubscribe \
    -np $((3 * per)) --hostfile "$tmp/hosts" --map-by slot \
    --mca plm_rsh_agent "$tmp/agent.sh" --mca orte_tmpdir_base "$tmp/mpitmp" --mca btl tcp,self \
    --mca mpi_yield_when_idle 1 \
    --mca btl_tcp_if_include $FL_NET.0/24 --mca oob_tcp_if_include $FL_NET.0/24 \
    "$tmp/mpi_allreduce" "$label" --sizes $SIZES > "$tmp/mpi.$label" 2>&1 ||
    say "# mpi $label: exit $?: $(grep -v '^mpi_' "$tmp/mpi.$label" | head -3 | tr '\n' ' ')"
  grep '^mpi_' "$tmp/mpi.$label" | while read -r l; do say "$l"; done
}

# The intra-node part alone: 2 ranks of one node over shm (no link).
BACKEND=shm ours shm_1x2_0gbit 1 2
for cap in ${caps//,/ }; do
  for k in 0 1 2; do fl_ns_shape $k $cap - - || { say "# cannot cap the links at $cap"; exit 0; }; done
  say "# cap $cap"
  ours ring_3x1_$cap 3 1
  ours ring2_3x1_$cap 3 1 --rings 2
  ours ring_3x2_$cap 3 2
  ours hier_3x2_$cap 3 2 --hier
  mpi 3x1_$cap 1
  mpi 3x2_$cap 2
done

if [ -n "$out" ]; then
  ratios "$out" | while read -r l; do say "$l"; done
else
  grep -h -E '^(busbw|mpi)_' "$tmp"/*.[0-9] "$tmp"/mpi.* 2> /dev/null > "$tmp/all"
  ratios "$tmp/all"
fi
