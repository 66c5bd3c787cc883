#!/bin/sh
# flotilla-run's elastic membership on a real etcd (started here on
# 127.0.0.1, temporary data dir), nodes being flotilla-run processes on
# 127.0.0.1..3 (trainers over TCP, as on separate hosts):
#   1. --nnodes 2:3, each node with a checkpoint_dir of its own: 2 nodes
#      train; a 3rd joins in mid-epoch with an empty directory (round 2 of
#      3 nodes: the 2 survivors keep their trainer processes - same pid,
#      their logs go on in round.1 - stop at an agreed step, rebuild their
#      communicator, and rank 0 sends the state it holds in memory over the
#      collective to the joiner; every rank logs the same parameter digest,
#      the survivors' digest at the stop); node 2 is stopped (SIGSTOP,
#      whole node) for less than its lease and continued: no new world;
#      node 3 is killed (-9, whole node) in mid-epoch: the 2 others' collective
#      fails, they wait at their last completed step, form round 3 in the
#      same processes, re-shard the rest of the epoch and finish, with a
#      final test accuracy no more than 0.5 point below an uninterrupted
#      2-node run's (run alongside; the changed worlds see the samples in
#      another order and at other learning rates, and ended up to 0.7
#      point above it in some runs, which is no fault);
#   2. 3 nodes, --nnodes 2:3, nodes 2 and 3 killed: node 1 waits
#      --rdzv_timeout, then stops with exit status 3, the checkpoint kept;
#   3. elastic.keep_global_batch: a checkpoint of 2 trainers resumed by one
#      raises gradient merge k to 2;
#   4. 3 nodes, --nnodes 2:3, one epoch and a test set whose evaluation
#      takes a while: node 3 is killed while the epoch's test is evaluated;
#      the 2 others' reduce of its metrics fails, they wait at the epoch's
#      end, form a world of 2 in the same processes and evaluate again,
#      then finish.
# SKIP (77) when etcd or fashion-mnist is not installed.  Bounded by
# timeout; cleaned up.
. "$FL_SRCDIR/tests/integration/elastic_lib.sh"
elastic_setup elastic

cat > job.yaml << YAML
model: {kind: mlp, input_shape: [1, 28, 28], num_classes: 10, hidden: [512, 256], activation: relu}
$(elastic_data 24000)
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
lr_schedule: {kind: cosine, warmup_steps: 0}
train: {epochs: 2, batch_size: 32, seed: 1, eval: true, eval_batch_size: 500, log_interval: 20,
        num_threads: 1, checkpoint_interval: 10, checkpoint_keep: 3}
cluster: {mode: collective, collective_timeout_s: 30}
YAML
export FLOTILLA_TOKEN=elastic-test-token FLOTILLA_COLLECTIVE_BACKEND=tcp

# ---- 1: a node joins, a slow node is kept, a dead node is dropped
p1=$(etcd_free_port 127.0.0.1)
p2=$(etcd_free_port 127.0.0.1)
for n in 1 2; do node base $n 2:2 "$p1"; done
for n in 1 2; do node kill $n 2:3 "$p2"; done
wait_line 60 0.1 "Epoch 0, batch 40\]" "log.kill.*/round.1/workerlog.*" || fail "round 1 never trained"
node kill 3 2:3 "$p2"
wait_line 60 0.1 "Epoch 0, batch 20\]" "log.kill.*/round.2/workerlog.*" || fail "no round 2 after a join"
killpg STOP "$(cat pid.kill.2)"
sleep 2
killpg CONT "$(cat pid.kill.2)"
wait_line 60 0.1 "Epoch 0, batch 100\]" "log.kill.*/round.2/workerlog.*" || fail "round 2 stalled"
grep -q "proposed round 3" out.kill.* && fail "a node stopped for 2 s (lease 4 s) made a new world"
killpg KILL "$(cat pid.kill.3)"
for f in base.1 base.2 kill.1 kill.2; do
  wait "$(cat pid.$f)" || fail "node $f exited $?"
done
grep -q "round 2: node rank [012] of 3" out.kill.1 || fail "no round of 3 nodes after the join"
grep -q "round 3: node rank [01] of 2" out.kill.1 || fail "no round of 2 nodes after the kill"
# the survivors kept their processes: no new trainers on nodes 1 and 2, and
# node 1's trainer logs both world changes with one pid
for n in 1 2; do
  [ -d log.kill.$n/round.2 ] || [ -d log.kill.$n/round.3 ] &&
    fail "node $n started new trainers for a new world"
done
w=$(ls log.kill.1/round.1/workerlog.* | head -1) # its rank: its place in the join order
pids=$(sed -n 's/.*elastic: round [23]: rank .* took [0-9.]* s in pid \([0-9]*\).*/\1/p' $w | sort -u)
[ "$(echo "$pids" | wc -w)" = 1 ] && grep -q "elastic: round 3: rank" $w ||
  fail "node 1's trainer did not go through rounds 2 and 3 in one process (pids: $pids)"
grep -q "elastic: round 2: rank .* pid $pids" $w && grep -q "pid $pids keeps the state" $w ||
  fail "node 1's trainer logged no stop for the next world in pid $pids"
grep -q "elastic: a collective after step [0-9]* failed: waiting" log.kill.1/round.1/workerlog.* ||
  fail "node 1's trainer did not wait for the next world after node 3 died"
grep -q "elastic resume: a world of 2 ranks took" $w ||
  fail "round 2 did not re-shard after round 1's world of 2"
grep -q "elastic resume: a world of 3 ranks took" $w ||
  fail "round 3 did not re-shard after round 2's world of 3"
# no shared directory: the joiner (empty ck.kill.3) took the state over the
# collective, and every rank of rounds 2 and 3 holds the same bits after it
[ -z "$(ls ck.kill.3/ckpt-*.flc 2> /dev/null | head -1)" ] && fail "node 3 wrote no checkpoint"
grep -q "elastic state: took rank 0's state: step [1-9][0-9]* (this rank held none)" \
  log.kill.3/round.2/workerlog.* || fail "the joining node 3 did not take the state from rank 0"
# the transfers of rounds 2 and 3, by step: 3 then 2 ranks, one digest each
d=$(sed -n 's/.*elastic state: step \([0-9]*\), .* digest \([0-9a-f]*\).*/\1 \2/p' \
  log.kill.*/round.*/workerlog.* | sort -n | uniq -c | awk '{printf "%s ", $1}')
[ "$d" = "3 2 " ] ||
  fail "rounds 2 and 3: the ranks' parameter digests after the transfer differ or are missing ($d)"
# a survivor's state is the one it held at the stop (the planned change to 3)
k=$(sed -n 's/.*keeps the state, digest \([0-9a-f]*\).*/\1/p' $w | head -1)
grep -q "elastic state: step [0-9]*, .* digest ${k:-none}" $w ||
  fail "node 1's state after round 2's transfer is not the one it kept (${k:-none})"
grep "the world change took" $w | sed 's/.*\] *//'
grep -q "the learning rate scales by 3/2" $w ||
  fail "round 2 (3 nodes after 2) did not scale the learning rate by 3/2"
a=$(acc out.kill.1)
b=$(acc out.base.1)
echo "accuracy: interrupted ${a:-none}, uninterrupted ${b:-none}"
/usr/bin/python3 -c "import sys; sys.exit(${a:-0} < ${b:-1} - 0.005)" ||
  fail "final accuracy ${a:-none} is more than 0.5 point below the uninterrupted run's ${b:-none}"

# ---- 2: below MIN: wait --rdzv_timeout, then exit 3 with the checkpoint kept
p3=$(etcd_free_port 127.0.0.1)
for n in 1 2 3; do node low $n 2:3 "$p3" --rdzv_timeout 4; done
wait_line 60 0.1 "Epoch 0, batch 40\]" "log.low.*/round.1/workerlog.*" || fail "round 1 never trained"
killpg KILL "$(cat pid.low.2)"; killpg KILL "$(cat pid.low.3)"
wait "$(cat pid.low.1)"
rc=$?
[ $rc = 3 ] || fail "below MIN: exit $rc, want 3"
grep -q "fewer than 2 nodes in job low for 4 s" out.low.1 || fail "no below-MIN message"
ls ck.low.1/ckpt-*.flc > /dev/null 2>&1 || fail "no checkpoint kept"
# ---- 3: elastic.keep_global_batch: a 2-trainer checkpoint resumed by 1
# trainer raises gradient merge k to 2 (no etcd needed)
sed 's/^cluster: .*/cluster: {mode: collective}\nelastic: {keep_global_batch: true}/' job.yaml > kgb.yaml
FLOTILLA_CHECKPOINT_DIR="$tmp/ck.kgb" timeout 60 "$RUN" --nproc_per_node 2 --log_dir "$tmp/log.kgb" \
  kgb.yaml -- --max-steps 10 > out.kgb.1 2>&1 || fail "keep_global_batch: the 2 trainers failed"
FLOTILLA_CHECKPOINT_DIR="$tmp/ck.kgb" timeout 60 "$FL_BUILDDIR/flotilla-trainer" --config kgb.yaml \
  --resume --max-steps 14 > out.kgb.2 2>&1 || fail "keep_global_batch: the lone trainer failed"
grep -q "keep_global_batch: a world of 1 after 2: gradient merge k 2" out.kgb.2 ||
  fail "keep_global_batch: k not raised to 2"
grep -q "done: 14 steps" out.kgb.2 || fail "keep_global_batch: the resumed trainer did not finish"
# ---- 4: a peer dies during the epoch's evaluation: the survivors join the
# next world in process and evaluate again there
sed -e 's/limit_train: 24000/limit_train: 6000/' \
  -e 's/epochs: 2,/epochs: 1,/' job.yaml > ev.yaml
p4=$(etcd_free_port 127.0.0.1)
for n in 1 2 3; do
  hold=""
  [ $n = 3 ] && hold=1 # node 3 stops itself before the epoch's evaluation
  FLOTILLA_TEST_STOP_AT_EVAL=$hold FLOTILLA_CHECKPOINT_DIR="$tmp/ck.ev.$n" setsid timeout 120 "$RUN" --nnodes 2:3 \
    --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id ev \
    --rdzv_conf lease_s=4,settle_s=1 --node_ip "127.0.0.$n" --master_port "$p4" \
    --log_dir "$tmp/log.ev.$n" ev.yaml > "$tmp/out.ev.$n" 2>&1 &
  echo $! > "$tmp/pid.ev.$n"
  groups="$groups $!"
done
wait_line 60 0.1 "\[Epoch 0\] train: " "log.ev.1/round.*/workerlog.*" || fail "ev: epoch 0 never ended"
wait_line 60 0.1 "FLOTILLA_TEST_STOP_AT_EVAL: stopped" "log.ev.3/round.*/workerlog.*" ||
  fail "ev: node 3 did not stop before its evaluation"
killpg KILL "$(cat pid.ev.3)"
for n in 1 2; do
  wait "$(cat pid.ev.$n)" || fail "ev: node $n exited $?"
done
w=$(ls log.ev.1/round.*/workerlog.* | head -1)
# in that log: the epoch's end, the failed collective, the new world of 2,
# the test evaluated there
order=$(awk '/\[Epoch 0\] train: / { print "train" } /elastic: a collective after step/ { print "failed" }
  /elastic: round [0-9]*: rank [01] of 2/ { print "world" } /\[Epoch 0\] test loss/ { print "test" }' "$w" |
  tr '\n' ' ')
[ "$order" = "train failed world test " ] ||
  fail "ev: node 1 did not evaluate again in the next world after a failed evaluation ($order)"
[ "$(ls -d log.ev.1/round.* | wc -l)" = 1 ] || fail "ev: node 1 started new trainers"
grep -q "final test accuracy" out.ev.1 || fail "ev: node 1's job did not finish"
[ $fails = 0 ] || { for f in out.*; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
echo "elastic: ok"
