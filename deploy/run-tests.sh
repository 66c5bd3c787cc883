#!/bin/sh
# run-tests.sh - the README's test command: install what is missing, then
# build and run `make check` in two trees:
#   build/      the default configuration (CUDA when nvcc is found;
#               CUDA tests SKIP without a GPU);
#   build-san/  CPU-only, with ASan + UBSan.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/deploy/deps.sh"
cd "$top"
autoreconf -fi
sh deploy/build.sh "$top/build"
make -C "$top/build" check
sh deploy/build.sh "$top/build-san" --without-cuda --enable-sanitizers
make -C "$top/build-san" check
echo "run-tests.sh: all trees passed"
