#!/bin/sh
# flotilla-run's elastic membership in PServer mode (async), on a real etcd
# (127.0.0.1, temporary data dir): one pserver on 127.0.0.1, started apart
# for 3 trainer slots with FLOTILLA_PS_ELASTIC=1; nodes are flotilla-run
# --nnodes 1:3 --mode ps --servers on 127.0.0.2..4, one trainer each:
#   1. nodes 3 and 2 train; node 3 is killed (-9, whole node) mid-epoch:
#      the pserver declares its trainer dead and goes on with node 2's;
#      node 4 joins mid-run, takes a free slot, registers and trains; the
#      job ends with nodes 2 and 4 done (exit 0) and the pserver complete
#      (exit 0);
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

# ---- 1: a trainer leaves, another joins; the job completes
# (one after the other: the pserver ends the job when every trainer that
# registered completed, so node 2 must not finish before node 3 came)
node 3
wait_line "Epoch 0, batch 40\]" "log.3/round.1/workerlog.*" || fail "node 3 never trained"
node 2
wait_line "Epoch 0, batch 10\]" "log.2/round.1/workerlog.*" || fail "node 2 never trained"
killpg KILL "$(cat pid.3)"
node 4
wait_line "declared dead" ps.log || fail "the pserver did not declare node 3's trainer dead"
wait_line "Epoch 0, batch 20\]" "log.4/round.1/workerlog.*" || fail "the joining node 4 never trained"
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

# ---- 2: sync PS at a changing world is refused
timeout 20 "$RUN" --nnodes 1:3 --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id sync \
  --node_ip 127.0.0.2 --mode ps --servers "$PSEP" sync.yaml > out.sync 2>&1
rc=$?
[ $rc = 2 ] || fail "sync PS with --nnodes 1:3: exit $rc, want 2"
grep -q "sync PS trains with a fixed set of trainers" out.sync || fail "no sync PS refusal message"
[ $fails = 0 ] || {
  for f in out.* ps.log log.*/round.1/workerlog.*; do echo "== $f"; tail -8 "$f"; done
  exit 1
}
echo "elastic ps: ok"
