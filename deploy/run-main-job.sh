#!/bin/sh
# run-main-job.sh - the README's main-job command: install what is missing,
# build, and run the main job.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/deploy/deps.sh"
sh "$top/deploy/build.sh" "$top/build"
"$top/build/tests/bench/bench_optim"
