#!/bin/sh
# run_bench_collective.sh - the collective engine's benchmarks, side by side
# with the references, in one run on this machine:
#   1. bench_allreduce: bus bandwidth of tcp, shm and hierarchical allreduce
#      (2 and 4 ranks, 64 KiB .. 64 MiB) and memcpy bandwidth (the bound);
#      OpenMPI's MPI_Allreduce measured the same way (mpi_allreduce.c) with
#      its default transports and with `--mca btl tcp,self`; then ratios:
#      ours / MPI on the matching transport (tcp <-> mpi tcp; shm and
#      hierarchical <-> mpi default) and ours / memcpy.
#   2. bench_coll_train: 2-rank MLP training, step time with overlap on and
#      off, samples/s; PyTorch DistributedDataParallel (gloo) on the same
#      model and batch (torch_ddp_mlp.py); the ratio of the two.
# Usage: sh tests/bench/run_bench_collective.sh [BUILDDIR] [--quick]
# Missing openmpi-bin/libopenmpi-dev or python3-torch are installed with
# apt-get when running as root (set FL_BENCH_NO_APT=1 to skip them instead).
# Prints `name: value unit` lines; never pass/fail.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=.
quick=
for a in "$@"; do
  case "$a" in
    --quick) quick=--quick ;;
    *) build=$a ;;
  esac
done
build=$(cd "$build" && pwd)
tmp=$(mktemp -d /tmp/fl_bench_coll.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
out=$tmp/figures

need() { # need COMMAND PACKAGES...
  cmd=$1
  shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  if [ "${FL_BENCH_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
    echo "# installing $* for the reference figures" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2 || return 1
    command -v "$cmd" >/dev/null 2>&1
  else
    return 1
  fi
}

"$build/tests/bench/bench_allreduce" $quick | tee -a "$out"

if need mpicc openmpi-bin libopenmpi-dev; then
  mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c"
  for n in 2 4; do
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np $n \
      "$tmp/mpi_allreduce" default $quick 2>/dev/null | tee -a "$out"
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np $n --mca btl tcp,self \
      "$tmp/mpi_allreduce" tcp $quick 2>/dev/null | tee -a "$out"
  done
else
  echo "mpi: unavailable" | tee -a "$out"
fi

awk -F': ' '
  { split($2, v, " "); val[$1] = v[1] }
  END {
    mc = val["memcpy_gbps"]
    for (k in val) {
      if (k !~ /^busbw_/) continue
      split(k, p, "_")            # busbw BACKEND NRr SIZE
      ref = (p[2] == "tcp") ? "mpi_tcp_busbw_" : "mpi_default_busbw_"
      ref = ref p[3] "_" p[4]
      if ((ref in val) && val[ref] > 0)
        printf "ratio_%s_%s_%s_vs_%s: %.2f x\n", p[2], p[3], p[4], substr(ref, 1, length(ref) - length(p[3] "_" p[4]) - 7), val[k] / val[ref]
      if (mc > 0)
        printf "ratio_%s_%s_%s_vs_memcpy: %.2f x\n", p[2], p[3], p[4], val[k] / mc
    }
  }' "$out" | sort | tee -a "$tmp/ratios"

steps=300
[ -n "$quick" ] && steps=100
FL_SRCDIR=$src "$build/tests/bench/bench_coll_train" --steps $steps | tee -a "$out"
# Debian's python3-torch lives under /usr/bin/python3 (a PATH python3 may
# be another interpreter).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if { "$py" -c 'import torch' 2>/dev/null || { need "$py" python3-torch && "$py" -c 'import torch'; }; } 2>/dev/null; then
  # bounded: a gloo rendezvous that never completes must not hang the run
  OPENBLAS_NUM_THREADS=1 timeout 300 "$py" "$here/torch_ddp_mlp.py" --steps $steps 2>/dev/null |
    tee -a "$out"
  awk -F': ' '{ split($2, v, " "); val[$1] = v[1] }
    END {
      t = val["torch_ddp_gloo_samples_per_s_2r"]
      if (t > 0)
        for (k in val)
          if (k ~ /^coll_train_samples_per_s_2r_/)
            printf "ratio_%s_vs_torch_ddp: %.2f x\n", substr(k, 26), val[k] / t
    }' "$out" | sort
else
  echo "torch_ddp: unavailable"
fi
