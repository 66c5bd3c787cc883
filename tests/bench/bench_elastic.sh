#!/bin/sh
# Elastic recovery time on etcd: 3 nodes (flotilla-run --nnodes 2:3 on
# 127.0.0.1..3, a throw-away etcd on 127.0.0.1, trainers over TCP) train a
# Fashion-MNIST MLP; node 3 is killed (-9, its whole process group) in
# mid-epoch.  Each node checkpoints into a directory of its own; the new
# world's rank 0 broadcasts the newest state.  Prints
#   elastic_detect_s:    kill -> the survivors' round failed (their trainers'
#                        collective broke)
#   elastic_recovery_s:  kill -> the new world's first training line
#   elastic_lost_steps:  steps trained again (since the last checkpoint)
# with the lease and settle times it ran with (LEASE_S, SETTLE_S, default 4
# and 1; recovery is about LEASE_S + SETTLE_S + the trainers' start).
# Usage: FL_BUILDDIR=build tests/bench/bench_elastic.sh
set -u
B=${FL_BUILDDIR:-build}
S=${FL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
LEASE_S=${LEASE_S:-4}
SETTLE_S=${SETTLE_S:-1}
FM=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d /tmp/fl_bench_elastic.XXXXXX)
ETCD_PID=""
groups=""
killpg() { /bin/kill -s "$1" -- "-$2"; }
cleanup() {
  for g in $groups; do killpg KILL "$g" 2> /dev/null; done
  [ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2> /dev/null && wait "$ETCD_PID" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
. "$S/tests/integration/etcd_lib.sh"
etcd_start "$tmp" 127.0.0.1 || { echo "elastic: etcd unavailable"; exit 0; }
cat > job.yaml << YAML
model: {kind: mlp, input_shape: [1, 28, 28], num_classes: 10, hidden: [512, 256], activation: relu}
data: {format: idx, train_images: $FM/train-images-idx3-ubyte.gz,
       train_labels: $FM/train-labels-idx1-ubyte.gz, shuffle: true, limit_train: 24000}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
train: {epochs: 1, batch_size: 32, seed: 1, log_interval: 10, num_threads: 1,
        checkpoint_interval: 10, checkpoint_keep: 2}
cluster: {mode: collective, collective_timeout_s: 30}
YAML
export FLOTILLA_TOKEN=bench FLOTILLA_COLLECTIVE_BACKEND=tcp
port=$(etcd_free_port 127.0.0.1)
for n in 1 2 3; do
  FLOTILLA_CHECKPOINT_DIR=$tmp/ck.$n setsid timeout 200 "$B/flotilla-run" --nnodes 2:3 --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" \
    --rdzv_id bench --rdzv_conf "lease_s=$LEASE_S,settle_s=$SETTLE_S" --node_ip "127.0.0.$n" \
    --master_port "$port" --log_dir "$tmp/log.$n" job.yaml > "$tmp/out.$n" 2>&1 &
  echo $! > "pid.$n"
  groups="$groups $!"
done
now() { date +%s.%N; }
until_line() { # PATTERN GLOB
  i=0
  while [ $i -lt 3000 ]; do
    # shellcheck disable=SC2086
    cat $2 2> /dev/null | grep -q "$1" && return 0
    sleep 0.02
    i=$((i + 1))
  done
  return 1
}
until_line "Epoch 0, batch 100\]" "log.*/round.1/workerlog.*" || { echo "elastic: round 1 never trained"; exit 0; }
t0=$(now)
killpg KILL "$(cat pid.3)"
until_line "ended with" "out.1 out.2" && t1=$(now)
until_line "Epoch 0, batch 0\]" "log.*/round.2/workerlog.*" && t2=$(now)
wait "$(cat pid.1)" "$(cat pid.2)"
step_killed=$(sed -n 's/.*\[Epoch 0, batch \([0-9]*\)\].*/\1/p' log.*/round.1/workerlog.* | sort -n | tail -1)
step_resumed=$(sed -n 's/.*resumed from .*: step \([0-9]*\),.*/\1/p' log.1/round.2/workerlog.* | head -1)
awk -v t0="$t0" -v t1="${t1:-0}" -v t2="${t2:-0}" -v l="$LEASE_S" -v s="$SETTLE_S" 'BEGIN {
  printf "elastic_lease_s: %s s\nelastic_settle_s: %s s\n", l, s
  if (t1 > 0) printf "elastic_detect_s: %.2f s\n", t1 - t0
  if (t2 > 0) printf "elastic_recovery_s: %.2f s\n", t2 - t0
}'
echo "elastic_lost_steps: $(( ${step_killed:-0} - ${step_resumed:-0} )) steps (last logged step seen, log_interval 10)"
