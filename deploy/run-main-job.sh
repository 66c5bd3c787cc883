#!/bin/sh
# run-main-job.sh - the README's main-job command: install what is missing,
# build, and run the main job: flotilla-trainer trains the Fashion-MNIST MLP
# of deploy/examples/mlp_fmnist.yaml (one trainer, local mode) and prints
# its log, ending with the final test accuracy.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/deploy/deps.sh"
sh "$top/deploy/build.sh" "$top/build"
exec "$top/build/flotilla-trainer" --config "$top/deploy/examples/mlp_fmnist.yaml" "$@"
