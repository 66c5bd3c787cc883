#!/bin/sh
# flotilla-run's elastic membership in PServer mode (async), on a real etcd
# (127.0.0.1, temporary data dir): one pserver on 127.0.0.1, started apart
# for 3 trainer slots with FLOTILLA_PS_ELASTIC=1; nodes are flotilla-run
# --nnodes 1:3 --mode ps --servers on 127.0.0.2..4, one trainer each:
#   1. nodes 3 and 2 train, claiming each epoch's 12 chunks on etcd; node 3
#      is stopped while it holds a chunk and killed (-9, whole node): the
#      pserver declares its trainer dead and goes on with node 2's, and
#      that chunk, freed with node 3's lease, is trained by another node;
#      node 4 joins mid-run, takes a free slot and free chunks; the job
#      ends with nodes 2 and 4 done (exit 0) and the pserver complete
#      (exit 0); the trainers' logs hold every chunk of every epoch done
#      exactly once, summing to the epoch's 24000 samples;
#   2. sync PS with --nnodes 1:3 is refused (exit 2, naming a_sync).
# SKIP (77) when etcd is not installed.  Bounded by timeout; cleaned up.
set -u
RUN=$FL_BUILDDIR/flotilla-run
tmp=$(mktemp -d /tmp/fl_elastic_ps.XXXXXX)
ETCD_PID=""
PS_PID=""
groups=""
killpg() { /bin/kill -s "$1" -- "-$2"; }
cleanup() {
  for g in $groups; do killpg KILL "$g" 2> /dev/null; done
  [ -n "$PS_PID" ] && kill -9 "$PS_PID" 2> /dev/null
  [ -n "$ETCD_PID" ] && etcd_stop
  [ -n "${FL_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$FL_SRCDIR/tests/integration/etcd_lib.sh"
etcd_start "$tmp" 127.0.0.1 || exit

# job FILE A_SYNC
job() {
  cat > "$1" << YAML
model: {kind: mlp, input_shape: [1, 16, 16], num_classes: 10, hidden: [256]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 24000, test_samples: 128, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 6, batch_size: 16, seed: 7, log_interval: 10, num_threads: 1}
cluster: {mode: ps, heartbeat_timeout_s: 2, rpc_timeout_s: 5}
strategy: {a_sync: $2}
YAML
}
job job.yaml true
job sync.yaml false
export FLOTILLA_TOKEN=elastic-ps-token
PSEP=127.0.0.1:$(etcd_free_port 127.0.0.1)

# the pserver: 3 trainer slots, elastic, of run elastic-<rdzv_id>
FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST=$PSEP FLOTILLA_PSERVER_ID=0 \
  FLOTILLA_TRAINERS_NUM=3 FLOTILLA_PS_ELASTIC=1 FLOTILLA_RUN_ID=elastic-ps \
  timeout 120 "$FL_BUILDDIR/flotilla-pserver" --config job.yaml > ps.log 2>&1 &
PS_PID=$!

# node N: flotilla-run of node 127.0.0.N in its own process group
node() {
  setsid timeout 100 "$RUN" --nnodes 1:3 --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" \
    --rdzv_id ps --rdzv_conf lease_s=3,settle_s=0 --node_ip "127.0.0.$1" --mode ps \
    --servers "$PSEP" --log_dir "$tmp/log.$1" job.yaml > "$tmp/out.$1" 2>&1 &
  echo $! > "$tmp/pid.$1"
  groups="$groups $!"
}
# wait_line PATTERN GLOB: until a line of the files matches (40 s at most)
wait_line() {
  i=0
  while [ $i -lt 400 ]; do
    # shellcheck disable=SC2086
    cat $2 2> /dev/null | grep -q "$1" && return 0
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}

# held N: the "epoch E chunk C" node N's trainer claimed last and has not
# finished, or nothing
held() {
  cat log.$1/round.1/workerlog.* | grep "elastic chunks: epoch [0-9]* chunk [0-9]* " |
    sed 's/.*elastic chunks: \(epoch [0-9]* chunk [0-9]*\) \([a-z]*\).*/\1 \2/' |
    tail -n 1 | sed -n 's/ claimed$//p'
}

# ---- 1: a trainer leaves, another joins; the job completes
node 3
wait_line "Epoch 0, batch 40\]" "log.3/round.1/workerlog.*" || fail "node 3 never trained"
node 2
wait_line "elastic chunks: epoch 0 chunk [0-9]* done" "log.2/round.1/workerlog.*" ||
  fail "node 2 never finished a chunk"
# stop node 3 where it holds a chunk (between two chunks: let it go on)
lost=""
tries=0
while [ -z "$lost" ] && [ $tries -lt 50 ]; do
  killpg STOP "$(cat pid.3)"
  lost=$(held 3)
  [ -n "$lost" ] || { killpg CONT "$(cat pid.3)"; sleep 0.05; }
  tries=$((tries + 1))
done
[ -n "$lost" ] || fail "node 3 never held a chunk when stopped"
killpg KILL "$(cat pid.3)"
node 4
wait_line "declared dead" ps.log || fail "the pserver did not declare node 3's trainer dead"
wait_line "elastic chunks: epoch [0-9]* chunk [0-9]* claimed" "log.4/round.1/workerlog.*" ||
  fail "the joining node 4 claimed no chunk"
for n in 2 4; do
  wait "$(cat pid.$n)" || fail "node $n exited $?"
done
wait "$PS_PID" || fail "the pserver exited $?"
PS_PID=""
grep -q "registered (elastic: it joins the running job)" ps.log || fail "no elastic registration"
grep -q "every trainer completed" ps.log || fail "the pserver did not see the job complete"
grep -q "elastic ps: slot [0-2] of 3" out.4 || fail "node 4 took no slot"
for n in 2 4; do
  grep -q "done: " log.$n/round.1/workerlog.* || fail "node $n's trainer did not finish"
done
# every chunk of the 6 epochs done once; the samples sum to each epoch
cat log.*/round.1/workerlog.* | sed -n 's/.*elastic chunks: epoch \([0-9]*\) chunk \([0-9]*\) done (\([0-9]*\) samples).*/\1 \2 \3/p' > done.txt
twice=$(cut -d' ' -f1,2 done.txt | sort | uniq -d)
[ -z "$twice" ] || fail "chunks done twice: $twice"
[ "$(wc -l < done.txt)" = 72 ] || fail "$(wc -l < done.txt) chunks done, want 6 epochs x 12"
for e in 0 1 2 3 4 5; do
  sum=$(awk -v e=$e '$1 == e { s += $3 } END { print s + 0 }' done.txt)
  [ "$sum" = 24000 ] || fail "epoch $e: chunks of $sum samples done, want 24000"
done
# node 3's chunk was trained again, from its start, by another node
[ -z "$lost" ] || grep -q "elastic chunks: $lost done" log.2/round.1/workerlog.* log.4/round.1/workerlog.* ||
  fail "node 3's $lost was not trained by another node"

# ---- 2: sync PS at a changing world is refused
timeout 20 "$RUN" --nnodes 1:3 --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id sync \
  --node_ip 127.0.0.2 --mode ps --servers "$PSEP" sync.yaml > out.sync 2>&1
rc=$?
[ $rc = 2 ] || fail "sync PS with --nnodes 1:3: exit $rc, want 2"
grep -q "sync PS trains with a fixed set of trainers" out.sync || fail "no sync PS refusal message"
[ $fails = 0 ] || {
  for f in out.* ps.log log.*/round.1/workerlog.*; do echo "== $f"; tail -n 8 "$f"; done
  exit 1
}
echo "elastic ps: ok"
