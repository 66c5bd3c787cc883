#!/bin/sh
# Elastic recovery time on etcd: 3 nodes (flotilla-run --nnodes 2:3 on
# 127.0.0.1..3, a throw-away etcd on 127.0.0.1, trainers over TCP) train a
# Fashion-MNIST MLP; node 3 is killed (-9, its whole process group) in
# mid-epoch.  Each node checkpoints into a directory of its own.  Run twice,
# side by side:
#   restart     (--rdzv_conf in_process=0) the survivors' trainers exit, the
#               next round's new processes load their node's newest
#               checkpoint and rank 0 broadcasts it;
#   in_process  (the default) the survivors' trainers wait at their last
#               completed step, rebuild their communicator for the next
#               round and go on from the state in memory.
# Prints, for each (suffix _restart, _in_process):
#   elastic_detect_s:    kill -> the survivors saw it (restart: their round
#                        ended with an error; in process: a trainer's
#                        collective failed)
#   elastic_recovery_s:  kill -> the new world trains (restart: its first
#                        training line; in process: the trainer's line
#                        "round 2: rank ..." logged right before its first
#                        step)
#   elastic_round_s:     kill -> a survivor's agent proposed the next
#                        round (the dead node's lease ran out, then a
#                        renewal period without another departure: most
#                        of the recovery)
#   elastic_rebuild_s:   that proposal -> the new world trains (its
#                        communicator, the network probe, the state)
#   elastic_lost_steps:  steps trained again (restart: since the last
#                        checkpoint; in process: since the last completed
#                        step)
# Then (TWO_GAP_S, default 3; 0 skips it) deaths apart: 4 nodes, in
# process, rank 3 killed and rank 2 TWO_GAP_S later, so the world after
# the first lease expiry still names the second victim:
#   elastic_two_deaths_recovery_s:  first kill -> a world of 2 trains (in
#                        process: its "round R: rank r of 2" line; new
#                        processes: a training line of a later round)
#   elastic_two_deaths_second_s:    the same from the second kill
# and elastic_recovery_ratio (restart / in process), with the lease and
# settle times it ran with (LEASE_S, SETTLE_S; unset: flotilla-run's
# defaults, printed as "default").  Recovery is about the lease (a dead
# node's lease expires up to one renewal period before a lease after its
# death), the wait after a departure, plus the trainers' rebuild or start.
# Usage: FL_BUILDDIR=build tests/bench/bench_elastic.sh
set -u
B=$(cd "${FL_BUILDDIR:-build}" && pwd) # the runs cd to a temporary directory
S=${FL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FL_SRCDIR=$S # etcd_lib.sh finds its helpers there
LEASE_S=${LEASE_S:-}
SETTLE_S=${SETTLE_S:-}
conf=${LEASE_S:+lease_s=$LEASE_S,}${SETTLE_S:+settle_s=$SETTLE_S,}
FM=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d /tmp/fl_bench_elastic.XXXXXX)
. "$S/tests/integration/etcd_lib.sh"
groups=""
killpg() { /bin/kill -s "$1" -- "-$2"; }
cleanup() {
  for g in $groups; do killpg KILL "$g" 2> /dev/null; done
  etcd_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
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
now() { date +%s.%N; }
# one MODE IN_PROCESS: a run of 3 nodes, node 3 killed; prints the figures
one() {
  m=$1
  port=$(etcd_free_port 127.0.0.1)
  for n in 1 2 3; do
    FLOTILLA_CHECKPOINT_DIR=$tmp/ck.$m.$n setsid timeout 200 "$B/flotilla-run" --nnodes 2:3 \
      --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id "bench$m" \
      --rdzv_conf "${conf}in_process=$2" --node_ip "127.0.0.$n" \
      --master_port "$port" --log_dir "$tmp/log.$m.$n" job.yaml > "$tmp/out.$m.$n" 2>&1 &
    echo $! > "pid.$m.$n"
    groups="$groups $!"
  done
  wait_line 60 0.02 "Epoch 0, batch 100\]" "log.$m.*/round.1/workerlog.*" ||
    { echo "elastic ($m): round 1 never trained"; return; }
  t0=$(now) t1=0 t2=0 tp=0
  killpg KILL "$(cat pid.$m.3)"
  if [ "$2" = 1 ]; then
    wait_line 60 0.02 "a collective after step" "log.$m.[12]/round.1/workerlog.*" && t1=$(now)
    wait_line 60 0.02 "proposed round 2" "out.$m.1 out.$m.2" && tp=$(now)
    wait_line 60 0.02 "elastic: round 2: rank" "log.$m.[12]/round.1/workerlog.*" && t2=$(now)
  else
    wait_line 60 0.02 "ended with" "out.$m.1 out.$m.2" && t1=$(now)
    wait_line 60 0.02 "proposed round 2" "out.$m.1 out.$m.2" && tp=$(now)
    wait_line 60 0.02 "Epoch 0, batch 0\]" "log.$m.*/round.2/workerlog.*" && t2=$(now)
  fi
  wait "$(cat pid.$m.1)" "$(cat pid.$m.2)"
  if [ "$2" = 1 ]; then
    # the newest step a survivor completed (one may have finished the step
    # the others lost)
    last=$(sed -n 's/.*stopped at step \([0-9]*\) .*/\1/p' log.$m.[12]/round.1/workerlog.* |
      sort -n | tail -n 1)
    from=$(sed -n 's/.*elastic: round 2: rank .* from step \([0-9]*\);.*/\1/p' \
      log.$m.1/round.1/workerlog.* | head -1)
  else
    last=$(sed -n 's/.*\[Epoch 0, batch \([0-9]*\)\].*/\1/p' log.$m.*/round.1/workerlog.* |
      sort -n | tail -n 1)
    from=$(sed -n 's/.*resumed from .*: step \([0-9]*\),.*/\1/p' log.$m.1/round.2/workerlog.* |
      head -1)
  fi
  awk -v m="$m" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v tp="$tp" 'BEGIN {
    if (t1 > 0) printf "elastic_detect_s_%s: %.2f s\n", m, t1 - t0
    if (tp > 0) printf "elastic_round_s_%s: %.2f s\n", m, tp - t0
    if (tp > 0 && t2 > 0) printf "elastic_rebuild_s_%s: %.2f s\n", m, t2 - tp
    if (t2 > 0) printf "elastic_recovery_s_%s: %.2f s\n", m, t2 - t0
  }'
  echo "elastic_lost_steps_$m: $((${last:-0} - ${from:-0})) steps"
  [ "$t2" = 0 ] || eval "rec_$m=$(awk -v a="$t2" -v b="$t0" 'BEGIN { print a - b }')"
}
# two GAP: 4 nodes, ranks 3 and 2 killed GAP s apart; prints the figures
two() {
  port=$(etcd_free_port 127.0.0.1)
  for n in 1 2 3 4; do
    FLOTILLA_CHECKPOINT_DIR=$tmp/ck.two.$n setsid timeout 300 "$B/flotilla-run" --nnodes 2:4 \
      --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id benchtwo \
      ${conf:+--rdzv_conf "${conf%,}"} --node_ip "127.0.0.$n" \
      --master_port "$port" --log_dir "$tmp/log.two.$n" job.yaml > "$tmp/out.two.$n" 2>&1 &
    echo $! > "pid.two.$n"
    groups="$groups $!"
  done
  wait_line 60 0.02 "Epoch 0, batch 60\]" "log.two.*/round.1/workerlog.*" ||
    { echo "elastic (two): round 1 never trained"; return; }
  v1=$(grep -l "round 1: node rank 3 of 4" out.two.* | sed 's/out.two.//')
  v2=$(grep -l "round 1: node rank 2 of 4" out.two.* | sed 's/out.two.//')
  t0=$(now) t2=0 i=0
  killpg KILL "$(cat pid.two.$v1)"
  sleep "$1"
  killpg KILL "$(cat pid.two.$v2)"
  while [ $i -lt 15000 ]; do
    if cat log.two.*/round.1/workerlog.* | grep -q "elastic: round [0-9]*: rank [01] of 2" ||
      cat log.two.*/round.[2-9]*/workerlog.* 2> /dev/null | grep -q "Epoch 0, batch [0-9]*\]"; then
      t2=$(now)
      break
    fi
    sleep 0.02
    i=$((i + 1))
  done
  for n in 1 2 3 4; do [ "$n" = "$v1" ] || [ "$n" = "$v2" ] || wait "$(cat pid.two.$n)"; done
  grep -q "round 2: node rank 0 of 3" out.two.* ||
    echo "elastic (two): no world of 3 after the first death (seen together: not this case)"
  awk -v t0="$t0" -v t2="$t2" -v g="$1" 'BEGIN { if (t2 > 0) {
    printf "elastic_two_deaths_recovery_s: %.2f s\n", t2 - t0
    printf "elastic_two_deaths_second_s: %.2f s\n", t2 - t0 - g } }'
}
rec_restart=0 rec_in_process=0
echo "elastic_lease_s: ${LEASE_S:-default} s"
echo "elastic_settle_s: ${SETTLE_S:-default} s"
one restart 0
one in_process 1
[ "${TWO_GAP_S:-3}" = 0 ] || two "${TWO_GAP_S:-3}"
awk -v a="$rec_restart" -v b="$rec_in_process" 'BEGIN {
  if (a > 0 && b > 0) printf "elastic_recovery_ratio: %.2f (restart / in process)\n", a / b
}'
