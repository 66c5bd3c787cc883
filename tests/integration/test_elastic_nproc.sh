#!/bin/sh
# flotilla-run's elastic membership with 2 trainers per node: the job sets
# use_hierarchical_allreduce, so each world's communicator is the
# hierarchical composition (shared memory among a node's 2 ranks, tcp
# among the node leaders), not tcp alone as in test_elastic.sh.  Nodes are
# flotilla-run processes on 127.0.0.1..3 (--nproc_per_node 2, --nnodes
# 2:3, lease 4 s, settle 1 s) on a real etcd (127.0.0.1):
#   nodes 1 and 2 train (round 1: 4 ranks); node 3 joins (round 2: 6
#   ranks, in the survivors' processes, the joiner's 2 trainers taking
#   rank 0's state over the collective); node 3 is killed (-9, whole node:
#   agent and both trainers) in mid-epoch: the 4 others' collective fails,
#   they form round 3 (4 ranks) in the same processes and finish.  The
#   change from the stop to training in round 3 must take well under the
#   collective timeout (60 s here: under 20 s on every survivor, printed as
#   elastic_nproc_recovery_s), every rank of rounds 2 and 3 logs the same
#   parameter digest after the transfer, no shared-memory segment is left
#   in /dev/shm, and the final test accuracy is no more than 0.5 point
#   below an uninterrupted run of 2 nodes of 2 trainers (run after it).
# SKIP (77) when etcd or fashion-mnist is not installed.  Bounded by
# timeout; cleaned up (process groups, etcd, the temporary directory).
. "$FL_SRCDIR/tests/integration/elastic_lib.sh"
elastic_setup elastic_nproc
ls /dev/shm 2> /dev/null | grep '^flotilla-' | sort > shm.before

cat > job.yaml << YAML
model: {kind: mlp, input_shape: [1, 28, 28], num_classes: 10, hidden: [256, 128], activation: relu}
$(elastic_data 40000)
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
lr_schedule: {kind: cosine, warmup_steps: 0}
train: {epochs: 2, batch_size: 32, seed: 1, eval: true, eval_batch_size: 500, log_interval: 10,
        num_threads: 1, checkpoint_interval: 20, checkpoint_keep: 2}
strategy: {use_hierarchical_allreduce: true}
cluster: {mode: collective, collective_timeout_s: 60}
YAML
export FLOTILLA_TOKEN=elastic-test-token

# node JOB N MINMAX PORT: flotilla-run of node 127.0.0.N (2 trainers) in its
# own process group; its pid in pid.JOB.N
node() {
  j=$1 n=$2 mm=$3 p=$4
  FLOTILLA_CHECKPOINT_DIR="$tmp/ck.$j.$n" setsid timeout 150 "$RUN" --nnodes "$mm" \
    --nproc_per_node 2 --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id "$j" \
    --rdzv_conf lease_s=4,settle_s=1 --node_ip "127.0.0.$n" --master_port "$p" \
    --log_dir "$tmp/log.$j.$n" job.yaml > "$tmp/out.$j.$n" 2>&1 &
  echo $! > "$tmp/pid.$j.$n"
  groups="$groups $!"
}
acc() { sed -n 's/.*final test accuracy \([0-9.]*\).*/\1/p' "$1"; }

p1=$(etcd_free_port 127.0.0.1)
for n in 1 2; do node el $n 2:3 "$p1"; done
wait_line 60 0.1 "Epoch 0, batch 100\]" "log.el.*/round.1/workerlog.*" || fail "round 1 never trained"
node el 3 2:3 "$p1"
wait_line 60 0.1 "elastic state: took rank 0" "log.el.3/round.2/workerlog.*" || fail "no round 2 after the join"
sleep 1
killpg KILL "$(cat pid.el.3)"
for n in 1 2; do
  wait "$(cat pid.el.$n)" || fail "node $n exited $?"
done
grep -q "round 2: node rank [012] of 3" out.el.1 || fail "no round of 3 nodes after the join"
grep -q "round 3: node rank [01] of 2" out.el.1 || fail "no round of 2 nodes after the kill"
[ "$(ls -d log.el.1/round.* log.el.2/round.* | wc -l)" = 2 ] ||
  fail "a survivor started new trainers for a new world"
grep -q "hierarchical" log.el.1/round.1/workerlog.* ||
  fail "the trainers did not say they reduce hierarchically"
# the 4 survivors: the stop at the kill -> training again in round 3
s=""
for w in log.el.1/round.1/workerlog.* log.el.2/round.1/workerlog.*; do
  s="$s $(sed -n 's/.*elastic: round 3: rank .* the world change took \([0-9.]*\) s.*/\1/p' "$w")"
done
echo "elastic_nproc_recovery_s:$s s (each survivor: the stop at the kill -> training in round 3)"
/usr/bin/python3 -c "import sys; v=[float(x) for x in '$s'.split()]; sys.exit(not (len(v) == 4 and max(v) < 20))" ||
  fail "round 3 trained${s:- never} s after the stop (want < 20 s on all 4: no collective timeout)"
grep -q "elastic state: took rank 0's state: step [1-9][0-9]* (this rank held none)" \
  log.el.3/round.2/workerlog.* || fail "the joining node's trainers did not take rank 0's state"
d=$(sed -n 's/.*elastic state: step \([0-9]*\), .* digest \([0-9a-f]*\).*/\1 \2/p' \
  log.el.*/round.*/workerlog.* | sort -n | uniq -c | awk '{printf "%s ", $1}')
[ "$d" = "6 4 " ] ||
  fail "rounds 2 and 3: the ranks' parameter digests after the transfer differ or are missing ($d)"
left=$(ls /dev/shm 2> /dev/null | grep '^flotilla-' | sort | comm -13 shm.before -)
[ -z "$left" ] || fail "shared-memory segments left in /dev/shm: $left"

# the uninterrupted run, after (the machine has 2 cores)
p2=$(etcd_free_port 127.0.0.1)
for n in 1 2; do node base $n 2:2 "$p2"; done
for n in 1 2; do
  wait "$(cat pid.base.$n)" || fail "base node $n exited $?"
done
a=$(acc out.el.1)
b=$(acc out.base.1)
echo "accuracy: interrupted ${a:-none}, uninterrupted ${b:-none}"
/usr/bin/python3 -c "import sys; sys.exit(${a:-0} < ${b:-1} - 0.005)" ||
  fail "final accuracy ${a:-none} is more than 0.5 point below the uninterrupted run's ${b:-none}"
[ $fails = 0 ] || { for f in out.*; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
echo "elastic nproc: ok"
