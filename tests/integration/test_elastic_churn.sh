#!/bin/sh
# flotilla-run's elastic membership under churn, two jobs side by side
# (collective, trainers over TCP, nodes on 127.0.0.N in their own process
# groups, each with a checkpoint_dir of its own):
#   1. deaths apart: 4 nodes (--nnodes 2:4, lease 4 s, settle 1 s) train;
#      node 4 is killed (-9, whole node) in mid-epoch and node 3 3 s later.
#      The first lease runs out before the second, so round 2 still names
#      node 3 (a round of 3); the survivors' rendezvous of it waits for a
#      peer that never comes and gives it up as soon as the agents name
#      round 3 (2 nodes), which they join in the same processes and finish.
#      collective_timeout_s is 120: the change from the stop to training in
#      round 3 must take under 25 s (printed as elastic_two_deaths_
#      recovery_s), so no collective timeout was waited for;
#   2. etcd leader loss on flotilla-run's defaults (lease 6 s renewed every
#      second, settle 3 s): 2 nodes (--nnodes 2:2) on a 3-member etcd
#      cluster (127.0.0.1..3, both nodes given all three endpoints); the
#      leader is killed (-9) in mid-run.  The lease renewals wait out the
#      election (the new leader extends every lease), so the job goes on
#      in round 1: no new world is proposed, no trainer restarts, and every
#      trainer ends with the steps of its uninterrupted run
#      (epochs x steps per epoch); the etcd members elected a new leader;
#   3. a join with a death: 3 nodes (--nnodes 2:4, lease 4 s, settle 1 s)
#      train, rank 2's node is killed and a 4th node joins 1 s later, so
#      round 2 (4 nodes) still names the dead one; the joiner's new trainer
#      gives its first rendezvous up when round 3 (3 nodes) is named and
#      joins it in its process, taking the state from the survivors.
# SKIP (77) when etcd or fashion-mnist is not installed.  Bounded by
# timeout; cleaned up.
. "$FL_SRCDIR/tests/integration/elastic_lib.sh"
elastic_setup elastic_churn
single_ep=$ETCD_EP
etcd_cluster_start "$tmp" || exit 1

# job FILE EPOCHS: the Fashion-MNIST MLP job, collective_timeout_s 120
job() {
  cat > "$1" << YAML
model: {kind: mlp, input_shape: [1, 28, 28], num_classes: 10, hidden: [512, 256], activation: relu}
$(elastic_data 24000)
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
train: {epochs: $2, batch_size: 32, seed: 1, eval: true, eval_batch_size: 500, log_interval: 20,
        num_threads: 1, checkpoint_interval: 50}
cluster: {mode: collective, collective_timeout_s: 120}
YAML
}
job dd.yaml 1
job ldr.yaml 4
export FLOTILLA_TOKEN=elastic-test-token FLOTILLA_COLLECTIVE_BACKEND=tcp

# node JOB N MINMAX PORT ENDPOINTS [args]: flotilla-run of node 127.0.0.N in
# its own process group; its pid in pid.JOB.N
node() {
  j=$1 n=$2 mm=$3 p=$4 ep=$5
  shift 5
  FLOTILLA_CHECKPOINT_DIR="$tmp/ck.$j.$n" setsid timeout 150 "$RUN" --nnodes "$mm" \
    --rdzv_backend etcd --rdzv_endpoint "$ep" --rdzv_id "$j" --node_ip "127.0.0.$n" \
    --master_port "$p" --log_dir "$tmp/log.$j.$n" "$@" $j.yaml > "$tmp/out.$j.$n" 2>&1 &
  echo $! > "$tmp/pid.$j.$n"
  groups="$groups $!"
}

pd=$(etcd_free_port 127.0.0.1)
pl=$(etcd_free_port 127.0.0.1)
for n in 1 2 3 4; do node dd $n 2:4 "$pd" "$single_ep" --rdzv_conf lease_s=4,settle_s=1; done
for n in 5 6; do node ldr $n 2:2 "$pl" "$ETCD_EPS"; done

# ---- 1: two deaths 3 s apart: ranks 3 then 2 (the nodes join in any
# order; the first in it, rank 0, proposes the rounds: it stays)
wait_line 60 0.1 "Epoch 0, batch 40\]" "log.dd.*/round.1/workerlog.*" || fail "dd: round 1 never trained"
# by_rank R: the node of rank R in round 1
by_rank() { grep -l "round 1: node rank $1 of 4" out.dd.* | sed 's/out.dd.//'; }
v1=$(by_rank 3) v2=$(by_rank 2) s1=$(by_rank 0) s2=$(by_rank 1)
[ -n "$v1" ] && [ -n "$v2" ] && [ -n "$s1" ] && [ -n "$s2" ] || fail "dd: round 1 is not a world of 4"
killpg KILL "$(cat pid.dd.${v1:-4})"
# ---- 2: the etcd leader dies while the job trains
wait_line 60 0.1 "Epoch 0, batch 40\]" "log.ldr.*/round.1/workerlog.*" || fail "ldr: round 1 never trained"
kill -9 "$ETCD_LEADER_PID"
sleep 3
killpg KILL "$(cat pid.dd.${v2:-3})"
for f in dd.${s1:-1} dd.${s2:-2} ldr.5 ldr.6; do
  wait "$(cat pid.$f)" || fail "node $f exited $?"
done

# 1: round 2 named the second victim; its rendezvous was given up for
# round 3, joined in process well before a collective timeout
grep -q "round 2: node rank [0-2] of 3" out.dd.$s1 ||
  fail "dd: no round of 3 after the first death (the deaths were seen together: not this case)"
grep -q "round 3: node rank [01] of 2" out.dd.$s1 || fail "dd: no round of 2 after the second death"
cat log.dd.$s1/round.1/workerlog.* log.dd.$s2/round.1/workerlog.* | grep -q "round 2 did not form" ||
  fail "dd: no trainer left round 2's rendezvous"
[ "$(ls -d log.dd.$s1/round.* log.dd.$s2/round.* | wc -l)" = 2 ] ||
  fail "dd: a survivor started new trainers"
world_change elastic_two_deaths_recovery_s 3 25 log.dd.$s1/round.1/workerlog.* log.dd.$s2/round.1/workerlog.*
grep -q "final test accuracy" out.dd.$s1 || fail "dd: the job did not finish"

# 2: one world all along, every trainer with the whole run's steps
[ "$(cat m?.log | grep -c "became leader")" -ge 2 ] || fail "ldr: etcd elected no new leader"
grep -q "proposed round 2" out.ldr.* && fail "ldr: the leader's loss made a new world"
[ "$(ls -d log.ldr.*/round.* | wc -l)" = 2 ] || fail "ldr: trainers restarted"
for wl in log.ldr.*/round.1/workerlog.*; do
  spe=$(sed -n 's/.*training mlp: 4 epochs of \([0-9]*\) steps.*/\1/p' "$wl" | head -1)
  grep -q "done: $((4 * ${spe:-0})) steps, 4 epochs" "$wl" ||
    fail "ldr: $wl did not end with 4 x ${spe:-?} steps"
done
grep -h "elastic" out.ldr.* | grep -i "warn\|error" | sed 's/^/ldr agent: /' | head -n 6

# ---- 3: a join with a death (after 1 and 2: the machine has 2 cores)
pj=$(etcd_free_port 127.0.0.1)
job jd.yaml 1
for n in 7 8 9; do node jd $n 2:4 "$pj" "$single_ep" --rdzv_conf lease_s=4,settle_s=1; done
wait_line 60 0.1 "Epoch 0, batch 40\]" "log.jd.*/round.1/workerlog.*" || fail "jd: round 1 never trained"
dead=$(grep -l "round 1: node rank 2 of 3" out.jd.* | sed 's/out.jd.//')
killpg KILL "$(cat pid.jd.${dead:-9})"
sleep 1
node jd 10 2:4 "$pj" "$single_ep" --rdzv_conf lease_s=4,settle_s=1
for n in 7 8 9 10; do
  [ "$n" = "${dead:-9}" ] || wait "$(cat pid.jd.$n)" || fail "jd: node $n exited $?"
done
grep -q "round 2: node rank 3 of 4" out.jd.10 || fail "jd: the joiner's round 2 did not name the dead node"
grep -q "round 3: node rank 2 of 3" out.jd.10 || fail "jd: no round of 3 after the dead node's lease"
w=$(ls log.jd.10/round.2/workerlog.* | head -1)
grep -q "round 2 did not form" "$w" && grep -q "joining round 3 as rank 2 of 3" "$w" ||
  fail "jd: the joiner did not leave its first rendezvous for round 3 in its process"
# round 3's transfer: its 3 ranks log one digest (the joiner's and the survivors')
d=$(cat log.jd.*/round.*/workerlog.* | sed -n 's/.*elastic state: step [0-9]*, .* digest \([0-9a-f]*\).*/\1/p' |
  sort | uniq -c | awk '{printf "%s ", $1}')
grep -q "elastic state: took rank [01]'s state: step [1-9][0-9]* (this rank held none)" "$w" &&
  [ "$d" = "3 " ] || fail "jd: the joiner did not take the survivors' state (digest counts: $d)"
grep -q "final test accuracy" out.jd.10 || fail "jd: the joiner's job did not finish"
[ $fails = 0 ] || {
  for f in out.*; do echo "== $f" && tail -n 5 "$f"; done
  exit 1
}
echo "elastic churn: ok"
