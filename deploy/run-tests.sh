#!/bin/sh
# run-tests.sh - the README's test command: install what is missing, then
# build and run `make check` in two trees:
#   build/      the default configuration (CUDA when nvcc is found;
#               CUDA tests SKIP without a GPU);
#   build-san/  CPU-only, with ASan + UBSan;
# and a short bounded libFuzzer pass over every harness (tests/fuzz).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/deploy/deps.sh"
cd "$top"
autoreconf -fi
sh deploy/build.sh "$top/build"
make -C "$top/build" check
# A short fuzzing pass: clang + libFuzzer in build/fuzz-clang, 20 s a harness.
make -C "$top/build" fuzz FUZZ_SECONDS=20
sh deploy/build.sh "$top/build-san" --without-cuda --enable-sanitizers
make -C "$top/build-san" check
echo "run-tests.sh: all trees passed"
