#!/bin/sh
# run-tests.sh - the README's test command: install what is missing, then
# build and run `make check` in two trees:
#   build/      the default configuration (CUDA when nvcc is found;
#               CUDA tests SKIP without a GPU);
#   build-san/  CPU-only, with ASan + UBSan;
# make check-cluster in build/ (Slurm, network namespaces);
# and a short bounded libFuzzer pass over every harness (tests/fuzz).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
# phase NAME: the seconds since the last phase, so that a slow CI run says
# where its time went
t_phase=$(date +%s)
phase() {
  t_now=$(date +%s)
  echo "run-tests.sh: $1 took $((t_now - t_phase)) s"
  t_phase=$t_now
}
sh "$top/deploy/deps.sh"
cd "$top"
autoreconf -fi
sh deploy/build.sh "$top/build"
phase "installing and building build/"
# -j: the test programs compile on every core; the serial-tests harness
# still runs the tests one at a time
make -C "$top/build" -j"$(nproc)" check
phase "make check in build/"
# Cluster engines on this host (root): a real Slurm and multi-node jobs on
# network namespaces; each test SKIPs with its reason where it cannot run.
make -C "$top/build" check-cluster
phase "make check-cluster"
# A short fuzzing pass: clang + libFuzzer in build/fuzz-clang, at most 20 s
# and FL_FUZZ_RUNS inputs a harness, from a fixed seed, so that what CI
# tries is a reproducible prefix of one sequence (run the same command with
# FUZZ_SECONDS large to replay all of it); `make fuzz` alone explores anew.
make -C "$top/build" fuzz FUZZ_SECONDS="${FL_FUZZ_SECONDS:-20}" \
  FUZZ_FLAGS="-seed=1 -runs=${FL_FUZZ_RUNS:-50000}"
phase "make fuzz"
sh deploy/build.sh "$top/build-san" --without-cuda --enable-sanitizers
phase "building build-san/"
make -C "$top/build-san" -j"$(nproc)" check
phase "make check in build-san/"
echo "run-tests.sh: all trees passed"
