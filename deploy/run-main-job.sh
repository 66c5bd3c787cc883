#!/bin/sh
# run-main-job.sh - the README's main-job command: install what is missing,
# build, and train the Fashion-MNIST MLP to its final test accuracy on a
# local cluster.  flotilla-run starts 2 trainers in collective mode (ring
# allreduce over TCP on 127.0.0.1) with deploy/examples/collective_mlp_fmnist.yaml,
# streams trainer 0 with a progress line, and ends with the final test
# accuracy.  Logs, metrics.csv and curve.png go to build/main-job/log/.
# Extra arguments go to flotilla-run (e.g. --max_restart 2, --timeline).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/deploy/deps.sh"
sh "$top/deploy/build.sh" "$top/build"
mkdir -p "$top/build/main-job"
cd "$top/build/main-job"
exec "$top/build/flotilla-run" --nproc_per_node 2 "$@" \
  "$top/deploy/examples/collective_mlp_fmnist.yaml"
