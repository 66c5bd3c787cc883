#!/bin/bash
# run_bench_algos_netns.sh - the allreduce algorithms on NODES network
# namespaces of one rank each (tests/integration/netns_lib.sh), every
# node's link shaped to 1 Gbit/s with 0.1 ms delay: 64 KiB latency of
# ring, halving_doubling and tree, and the automatic choice's bus
# bandwidth against each single algorithm at 64 KiB, 1 MiB and 16 MiB.
# Prints the bench's `time_...`/`busbw_...` lines per algorithm
# (label algo_<name>_<NODES>x1) and round, and for auto the algorithm its
# tuning ran at each size (`# pick_algo_auto_..._<size>: tree`).
# Method: with --rounds R there are R rounds; in each, every algorithm
# (auto included) runs one job of --iters iterations per size (its figure:
# the median iteration, each iteration's time the slowest rank's), and so
# does OpenMPI's MPI_Allreduce on the same namespaces (mpirun from node 0's
# namespace, one slot per node, reaching the others through a
# plm_rsh_agent that is `ip netns exec`; skipped with a line saying why
# without mpicc/mpirun, or with --no-mpi), the jobs taking turns and the
# order rotated by one from round to round (round 1: ring,
# halving_doubling, tree, auto, mpi; round 2: halving_doubling, tree, auto,
# mpi, ring; ...), so that a busy spell of a shared machine falls on all
# of them alike and none always runs first or last; auto probes anew in
# each of its jobs.  Per size:
#   median_time_algo_<algo>_..._<size>: its median over the R rounds
#   ratio_<algo>_over_ring_<size>: the ring's median time / the algorithm's
#   ratio_<algo>_over_mpi_<size>:  MPI_Allreduce's median time / the
#                                  algorithm's
#   ratio_auto_over_best_<size>:   the best named algorithm's median time /
#                                  auto's median time (auto's busbw over the
#                                  best single algorithm's; the best is the
#                                  named algorithm of least median, never
#                                  auto, and never a round's lucky figure)
#   paired_<algo>_over_ring_<size>, paired_<algo>_over_mpi_<size>: the
#                                  median over the rounds of (the ring's or
#                                  MPI's time in that round / the
#                                  algorithm's time in that round)
#   paired_auto_over_best_<size>:  the median over the rounds of (the least
#                                  named algorithm's time in that round /
#                                  auto's time in that round)
#   paired_auto_over_pick_<size>:  the median over the rounds of (the time of
#                                  the named algorithm auto picked in that
#                                  round / auto's): near 1, a gap to the
#                                  best is the pick's, not the bench's noise
#                                  (auto runs halving_doubling by doubling,
#                                  and the tree in the model's pieces: a
#                                  named run does neither)
#   (each paired_ line ends "(R rounds; min x, max y)": the spread of the
#   per-round ratios)
#   # best_<size>: the named algorithm of least median; # picks_<size>: how
#   often auto ran each algorithm there; # round_<k>_auto_<size>: that
#   round's auto over its best named algorithm, the one auto ran and the
#   best's name.
# Usage (root): bash tests/bench/run_bench_algos_netns.sh [BUILDDIR] [--nodes 8] [--iters N]
#               [--rounds R] [--sizes 64K,1M,16M] [--algos ring,halving_doubling,tree,auto]
#               [--no-mpi] [--counters] [--old OLDBUILD]
# --counters: after each job, per node, the link's losses and TCP's
# retransmissions so far (cumulative over the jobs): the wire's stats line
# (netns_wire: overflow = its delay queue was full), the drops of the tbf
# qdiscs on the node's eth0 and on its switch port, the TAP devices'
# tx_dropped (a TAP drops when its reader, the wire, falls behind), and
# nstat's TcpRetransSegs, TcpExtTCPTimeouts (of which TCPSynRetrans on
# connecting, TCPSpuriousRTOs undone) in the node's namespace.
# Never pass/fail; exits 0 with SKIP where namespaces are unavailable.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=. nodes=8 iters=5 rounds=1 sizes=64K,1M,16M algos=ring,halving_doubling,tree,auto use_mpi=1 counters=0 old=
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift ;;
    --iters) iters=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --algos) algos=$2; shift ;;
    --no-mpi) use_mpi=0 ;;
    --counters) counters=1 ;;
    --old) old=$(cd "$2" && pwd); shift ;;
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
echo "# $nodes nodes x 1 rank, 1 Gbit/s, 0.1 ms; $(nproc) CPUs; $rounds round(s) of $iters iterations"
run() {
  # listening ports below the ephemeral range (fl_ns_port): one job of 20
  # in a run of 16 nodes lost a rank to "address already in use" before
  local algo=$1 sizes=$2 r eps="" base=$(fl_ns_port $nodes) p=() bench=$BENCH
  [ "$algo" != auto_old ] || bench=$old/tests/bench/bench_allreduce_rank
  for ((r = 0; r < nodes; r++)); do eps="$eps${eps:+,}${FL_IP[r]}:$((base + r))"; done
  for ((r = 0; r < nodes; r++)); do
    timeout 300 ip netns exec ${FL_NS[r]} env FLOTILLA_MODE=collective FLOTILLA_TRAINER_ID=$r \
      FLOTILLA_TRAINERS_NUM=$nodes FLOTILLA_TRAINER_ENDPOINTS=$eps FLOTILLA_COLLECTIVE_BACKEND=tcp \
      FLOTILLA_LOG_LEVEL=info "$bench" --sizes "$sizes" --iters $iters \
      --label "algo_${algo}_${nodes}x1" --algorithm "${algo%_old}" > "$tmp/$algo.$r" 2>&1 &
    p[r]=$!
    pids="$pids $!"
  done
  for ((r = 0; r < nodes; r++)); do wait ${p[r]} || echo "# $algo: rank $r exited $?: $(tail -n 2 "$tmp/$algo.$r")"; done
  grep -E '^(busbw|time)_|^#|network probe' "$tmp/$algo.0" | tee -a "$tmp/all"
  [ $counters = 0 ] || drops "$algo"
}

# One line per node: where frames were lost so far, and TCP's answer.
drops() {
  local k w tb sw tap swtap tcp
  for ((k = 0; k < nodes; k++)); do
    w=$(cat "${fl_ns_wire_stats[$k]:-/dev/null}" 2> /dev/null)
    tb=$(tc -s -n ${FL_NS[k]} qdisc show dev eth0 | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1)
    sw=$(tc -s -n $FL_NS_SW qdisc show dev p$k | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1)
    tap=$(ip netns exec ${FL_NS[k]} cat /sys/class/net/eth0/statistics/tx_dropped 2> /dev/null)
    swtap=$(ip netns exec $FL_NS_SW cat /sys/class/net/p$k/statistics/tx_dropped 2> /dev/null)
    tcp=$(ip netns exec ${FL_NS[k]} nstat -az TcpRetransSegs TcpExtTCPTimeouts \
      TcpExtTCPSynRetrans TcpExtTCPSpuriousRTOs 2> /dev/null |
      awk '/^Tcp/ { printf "%s %s ", $1, $2 }')
    echo "# counters after $1, node $k: wire [${w:-none}] tbf_eth0_dropped ${tb:-?}" \
      "tbf_port_dropped ${sw:-?} tap_eth0_tx_dropped ${tap:-?} tap_port_tx_dropped ${swtap:-?} $tcp"
  done
}

# OpenMPI on the same namespaces, one rank per node: mpi_prepare builds
# the program and the agent once (fails, saying why, where it cannot), mpi
# runs one job of it.
mpi_prepare() {
  if [ $use_mpi = 0 ] || ! command -v mpicc > /dev/null || ! command -v mpirun > /dev/null; then
    echo "# mpi: skipped (--no-mpi, or no mpicc/mpirun)"
    return 1
  fi
  if ! mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" 2> "$tmp/mpicc.err"; then
    echo "# mpi: mpicc failed: $(head -1 "$tmp/mpicc.err")"
    return 1
  fi
  {
    echo '#!/bin/sh'
    echo '# plm_rsh_agent: run the remote command in the namespace of node HOST.'
    echo 'host=$1; shift'
    echo 'case $host in'
    for ((k = 0; k < nodes; k++)); do echo "  ${FL_IP[k]}) ns=${FL_NS[k]} ;;"; done
    echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    echo "mkdir -p \"$tmp/mpitmp/\$host\""
    echo "exec ip netns exec \$ns sh -c \"\$(printf '%s' \"\$*\" | sed \"s|$tmp/mpitmp|$tmp/mpitmp/\$host|g\")\""
  } > "$tmp/agent.sh"
  chmod +x "$tmp/agent.sh"
  for ((k = 0; k < nodes; k++)); do echo "${FL_IP[k]} slots=1"; done > "$tmp/hosts"
  mkdir -p "$tmp/mpitmp"
}

mpi() {
  timeout 300 ip netns exec ${FL_NS[0]} mpirun --allow-run-as-root --oversubscribe \
    -np $nodes --hostfile "$tmp/hosts" --map-by slot \
    --mca plm_rsh_agent "$tmp/agent.sh" --mca orte_tmpdir_base "$tmp/mpitmp" --mca btl tcp,self \
    --mca mpi_yield_when_idle 1 \
    --mca btl_tcp_if_include $FL_NET.0/24 --mca oob_tcp_if_include $FL_NET.0/24 \
    "$tmp/mpi_allreduce" "${nodes}x1" --quick --sizes "$sizes" > "$tmp/mpi.out" 2>&1 ||
    echo "# mpi: exit $?: $(grep -v '^mpi_' "$tmp/mpi.out" | head -3 | tr '\n' ' ')"
  grep '^mpi_' "$tmp/mpi.out" | tee -a "$tmp/all"
}

order=(${algos//,/ } ${old:+auto_old})
mpi_prepare && order+=(mpi)
for ((k = 1; k <= rounds; k++)); do
  echo "# round $k of $rounds" | tee -a "$tmp/all"
  for ((i = 0; i < ${#order[@]}; i++)); do
    job=${order[(i + k - 1) % ${#order[@]}]}
    if [ "$job" = mpi ]; then mpi; else run "$job" "$sizes"; fi
  done
done
# The figures of this run: medians over the rounds, per-round pairs.
awk -v n="${nodes}x1" '
  function med(key,   m, i, j, x, a) {
    m = cnt[key]
    for (i = 1; i <= m; i++) a[i] = val[key, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
  function put(key, v) { val[key, ++cnt[key]] = v
                         if (cnt[key] == 1 || v < lo[key]) lo[key] = v
                         if (cnt[key] == 1 || v > hi[key]) hi[key] = v }
  # The line of the per-round ratios under key: median, rounds, spread.
  function paired(name, key) {
    if (cnt[key]) printf "%s: %.3f (%d rounds; min %.3f, max %.3f)\n", name, med(key), cnt[key], lo[key], hi[key] }
  function size_of(f,   p, sz) { split(f, p, "_"); sz = p[length(p)]; sub(/:$/, "", sz); return sz }
  /^# round [0-9]+ of/ { rnd = $3 }
  /^time_algo_/ { sz = size_of($1); a = $1; sub(/^time_algo_/, "", a); sub("_" n "_.*", "", a)
                  put("t" SUBSEP a SUBSEP sz, $2); have[a, sz] = 1; sizes[sz] = 1; rounds[rnd] = 1
                  tr[a, sz, rnd] = $2 }
  /^# pick_algo_auto_/ { sz = size_of($2); p = $3; sub(/_by_doubling$/, "", p); a = $2
                         sub(/^pick_algo_/, "", a); sub("_" n "_.*", "", a)
                         pick[a, sz, rnd] = p; npick[a, sz, $3]++; autos[a] = 1 }
  /^mpi_.*_time_/ { sz = $1; sub(/.*_/, "", sz); sub(/:$/, "", sz)
                    put("m" SUBSEP sz, $2); mr[sz, rnd] = $2 }
  # Auto variant x at size sz: its ratio to the best named median, and the
  # medians of its per-round pairs.
  function auto_figures(x, sz, best,   r, rb, rn, k, q, p, line) {
    if (best > 0 && t[x, sz] > 0) printf "ratio_%s_over_best_%s: %.3f\n", x, sz, best / t[x, sz]
    for (r in rounds) {
      if (!(tr[x, sz, r] > 0)) continue
      rb = 0; rn = ""
      for (k in have) { split(k, q, SUBSEP)
        if (q[2] == sz && !(q[1] in autos) && tr[q[1], sz, r] > 0 && (rb == 0 || tr[q[1], sz, r] < rb)) { rb = tr[q[1], sz, r]; rn = q[1] } }
      p = pick[x, sz, r]
      if (rb > 0) { put("pb" SUBSEP x SUBSEP sz, rb / tr[x, sz, r])
                    printf "# round_%s_%s_%s: over best %.3f, ran %s, best %s\n", r, x, sz, rb / tr[x, sz, r], p == "" ? "?" : p, rn }
      if (p != "" && tr[p, sz, r] > 0) put("pp" SUBSEP x SUBSEP sz, tr[p, sz, r] / tr[x, sz, r])
    }
    paired("paired_" x "_over_best_" sz, "pb" SUBSEP x SUBSEP sz)
    paired("paired_" x "_over_pick_" sz, "pp" SUBSEP x SUBSEP sz)
    line = ""
    for (k in npick) { split(k, q, SUBSEP); if (q[1] == x && q[2] == sz) line = line " " q[3] " x" npick[k] }
    if (line != "") printf "# picks_%s_%s_%s:%s\n", x, n, sz, line
  }
  # Every algorithm a at size sz against the ring and MPI, round by round.
  function pairs(a, sz,   r) {
    for (r in rounds) {
      if (!(tr[a, sz, r] > 0)) continue
      if (a != "ring" && tr["ring", sz, r] > 0) put("pr" SUBSEP a SUBSEP sz, tr["ring", sz, r] / tr[a, sz, r])
      if (mr[sz, r] > 0) put("pm" SUBSEP a SUBSEP sz, mr[sz, r] / tr[a, sz, r])
    }
    paired("paired_" a "_over_ring_" sz, "pr" SUBSEP a SUBSEP sz)
    paired("paired_" a "_over_mpi_" sz, "pm" SUBSEP a SUBSEP sz)
  }
  END {
    for (sz in sizes) if (cnt["m" SUBSEP sz]) m[sz] = med("m" SUBSEP sz)
    for (k in have) { split(k, q, SUBSEP); t[k] = med("t" SUBSEP k); if (q[1] ~ /^auto/) autos[q[1]] = 1
                      printf "median_time_algo_%s_%s_%s: %.6f s (%d rounds)\n", q[1], n, q[2], t[k], cnt["t" SUBSEP k] }
    for (sz in sizes) {
      best = 0; bname = ""
      for (k in t) { split(k, q, SUBSEP); if (q[2] != sz) continue; a = q[1]
        if (t["ring", sz] > 0 && a != "ring") printf "ratio_%s_over_ring_%s: %.3f\n", a, sz, t["ring", sz] / t[a, sz]
        if (m[sz] > 0) printf "ratio_%s_over_mpi_%s: %.3f\n", a, sz, m[sz] / t[a, sz]
        pairs(a, sz)
        if (!(a in autos) && t[a, sz] > 0 && (best == 0 || t[a, sz] < best)) { best = t[a, sz]; bname = a } }
      if (m[sz] > 0) printf "median_time_mpi_%s_%s: %.6f s (%d rounds)\n", n, sz, m[sz], cnt["m" SUBSEP sz]
      if (bname != "") printf "# best_%s_%s: %s\n", n, sz, bname
      for (x in autos) auto_figures(x, sz, best)
    }
  }' "$tmp/all" | sort
