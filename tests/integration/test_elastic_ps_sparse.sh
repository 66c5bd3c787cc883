#!/bin/sh
# Elastic chunks with a model with sparse tables (the CTR preset, its
# in-memory synthetic data, rows pulled pipelined): an elastic PServer job
# of 2 nodes (flotilla-run --nnodes 1:2 --rdzv_backend etcd, one trainer
# each, 127.0.0.2..3) in async and in geo (k_steps 2) mode, each with its
# own pserver on 127.0.0.1.  Both jobs end (exit 0), the two trainers both
# claim chunks, and every chunk of every epoch is done exactly once,
# summing to the epoch's 32768 samples, as do the samples of the trainers'
# epoch lines.
# SKIP (77) when etcd is not installed.  Bounded by timeout; cleaned up.
set -u
RUN=$FL_BUILDDIR/flotilla-run
tmp=$(mktemp -d /tmp/fl_elastic_sparse.XXXXXX)
ETCD_PID=""
pids=""
cleanup() {
  for p in $pids; do /bin/kill -s KILL -- "-$p" 2> /dev/null || kill -9 "$p" 2> /dev/null; done
  [ -n "$ETCD_PID" ] && etcd_stop
  [ -n "${FL_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$FL_SRCDIR/tests/integration/etcd_lib.sh"
etcd_start "$tmp" 127.0.0.1 || exit
export FLOTILLA_TOKEN=elastic-sparse-token

# job FILE STRATEGY: 2 epochs of 512 steps of the whole data, in 16 chunks
job() {
  cat > "$1" << YAML
model:
  kind: ctr
  num_classes: 2
  hidden: [16]
  ctr: {embedding_dim: 4, sparse_slots: 8, hash_buckets: 10007}
data:
  format: synthetic
  synthetic: {kind: ctr, train_samples: 32768, test_samples: 256, seed: 5}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 2, batch_size: 64, seed: 1, log_interval: 8, num_threads: 1}
cluster: {mode: ps, heartbeat_timeout_s: 5, rpc_timeout_s: 5}
pserver:
  sparse: {optimizer: {name: adagrad, lr: 0.05}, pipeline: true}
strategy: {$2}
YAML
}

# run NAME STRATEGY: the pserver and nodes 2 and 3 of job NAME; checks
run() {
  job "$1.yaml" "$2"
  psep=127.0.0.1:$(etcd_free_port 127.0.0.1)
  FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST=$psep \
    FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=2 FLOTILLA_PS_ELASTIC=1 \
    FLOTILLA_RUN_ID="elastic-$1" timeout 60 "$FL_BUILDDIR/flotilla-pserver" \
    --config "$1.yaml" > "$1.ps.log" 2>&1 &
  ps_pid=$!
  pids="$pids $ps_pid"
  for n in 2 3; do
    setsid timeout 50 "$RUN" --nnodes 1:2 --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" \
      --rdzv_id "$1" --rdzv_conf lease_s=3,settle_s=0,chunks=16 --node_ip "127.0.0.$n" --mode ps \
      --servers "$psep" --log_dir "$tmp/$1.log.$n" "$1.yaml" > "$1.out.$n" 2>&1 &
    echo $! > "$1.pid.$n"
    pids="$pids $!"
  done
  for n in 2 3; do
    wait "$(cat "$1.pid.$n")" || fail "$1: node $n exited $?"
  done
  wait "$ps_pid" || fail "$1: the pserver exited $?"
  cat "$1".log.*/round.1/workerlog.* |
    sed -n 's/.*elastic chunks: epoch \([0-9]*\) chunk \([0-9]*\) done (\([0-9]*\) samples).*/\1 \2 \3/p' \
      > "$1.done"
  twice=$(cut -d' ' -f1,2 "$1.done" | sort | uniq -d)
  [ -z "$twice" ] || fail "$1: chunks done twice: $twice"
  [ "$(wc -l < "$1.done")" = 32 ] || fail "$1: $(wc -l < "$1.done") chunks done, want 2 epochs x 16"
  # the trainers' own epoch lines: the samples they trained sum to the epoch
  cat "$1".log.*/round.1/workerlog.* |
    sed -n 's/^\[Epoch \([0-9]*\)\] train: [0-9]* steps, \([0-9]*\) samples.*/\1 \2/p' > "$1.trained"
  for e in 0 1; do
    sum=$(awk -v e=$e '$1 == e { s += $3 } END { print s + 0 }' "$1.done")
    [ "$sum" = 32768 ] || fail "$1: epoch $e: chunks of $sum samples done, want 32768"
    sum=$(awk -v e=$e '$1 == e { s += $2 } END { print s + 0 }' "$1.trained")
    [ "$sum" = 32768 ] || fail "$1: epoch $e: the trainers trained $sum samples, want 32768"
  done
  for n in 2 3; do
    grep -q "elastic chunks: epoch [0-9]* chunk [0-9]* claimed" "$1".log.$n/round.1/workerlog.* ||
      fail "$1: node $n claimed no chunk"
    grep -q "done: " "$1".log.$n/round.1/workerlog.* || fail "$1: node $n's trainer did not finish"
  done
  grep -q "every trainer completed" "$1.ps.log" || fail "$1: the pserver did not see the job complete"
}

run async "a_sync: true"
run geo "a_sync: true, a_sync_configs: {k_steps: 2}"
[ $fails = 0 ] || {
  for f in *.out.* *.ps.log *.log.*/round.1/workerlog.*; do echo "== $f"; tail -n 8 "$f"; done
  exit 1
}
echo "elastic ps sparse: ok"
