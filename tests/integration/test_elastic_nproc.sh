#!/bin/sh
# flotilla-run's elastic membership with 2 trainers per node: the job sets
# use_hierarchical_allreduce, so each world's communicator is the
# hierarchical composition (shared memory among a node's 2 ranks, tcp
# among the node leaders), not tcp alone as in test_elastic.sh.  Nodes are
# flotilla-run processes on 127.0.0.N (--nproc_per_node 2, lease 4 s,
# settle 1 s) on a real etcd (127.0.0.1).  First 3 nodes (--nnodes 2:3):
#   nodes 1 and 2 train (round 1: 4 ranks); node 3 joins (round 2: 6
#   ranks, in the survivors' processes, the joiner's 2 trainers taking
#   rank 0's state over the collective); node 3 is killed (-9, whole node:
#   agent and both trainers) in mid-epoch: the 4 others' collective fails,
#   they form round 3 (4 ranks) in the same processes and finish.  The
#   change from the stop to training in round 3 must take well under the
#   collective timeout (60 s here: under 20 s on every survivor, printed as
#   elastic_nproc_recovery_s), and every rank of rounds 2 and 3 logs the
#   same parameter digest after the transfer;
# then a node dies during the new round's rendezvous: 4 nodes (--nnodes
#   2:4, 8 ranks) train; round 1's rank 3 is killed, and one trainer of
#   rank 2 is stopped (SIGSTOP) so that round 2 (3 nodes) names its node
#   but cannot form; once the survivors' 4 trainers and rank 2's other
#   trainer joined round 2's rendezvous, rank 2's node is killed (-9).
#   Every survivor leaves round 2's rendezvous, they form round 3 (2
#   nodes, 4 ranks) in the same processes in under 25 s (printed as
#   elastic_rdzv_death_recovery_s) with one parameter digest, finish, and
#   no process of the 4 nodes' groups is left.
# Neither leaves a shared-memory segment in /dev/shm, and each job's final
# test accuracy is no more than 0.5 point below an uninterrupted run of 2
# nodes of 2 trainers (run after them).
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

p1=$(etcd_free_port 127.0.0.1)
for n in 1 2; do node el $n 2:3 "$p1" --nproc_per_node 2; done
wait_line 60 0.1 "Epoch 0, batch 100\]" "log.el.*/round.1/workerlog.*" || fail "round 1 never trained"
node el 3 2:3 "$p1" --nproc_per_node 2
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
world_change elastic_nproc_recovery_s 3 20 log.el.1/round.1/workerlog.* log.el.2/round.1/workerlog.*
grep -q "elastic state: took rank 0's state: step [1-9][0-9]* (this rank held none)" \
  log.el.3/round.2/workerlog.* || fail "the joining node's trainers did not take rank 0's state"
d=$(sed -n 's/.*elastic state: step \([0-9]*\), .* digest \([0-9a-f]*\).*/\1 \2/p' \
  log.el.*/round.*/workerlog.* | sort -n | uniq -c | awk '{printf "%s ", $1}')
[ "$d" = "6 4 " ] ||
  fail "rounds 2 and 3: the ranks' parameter digests after the transfer differ or are missing ($d)"

# ---- 2: a node dies during the new round's rendezvous: 4 nodes (--nnodes
# 2:4); round 1's rank 3 is killed, and one trainer of rank 2 is stopped so
# that round 2 (3 nodes) names its node while the rendezvous cannot finish;
# once the survivors and rank 2's other trainer joined it, rank 2's node is
# killed.  The survivors give round 2 up for round 3 (2 nodes, 4 ranks) in
# their processes, well before the collective timeout.
p3=$(etcd_free_port 127.0.0.1)
for n in 4 5 6 7; do node rd $n 2:4 "$p3" --nproc_per_node 2; done
wait_line 60 0.1 "Epoch 0, batch 40\]" "log.rd.*/round.1/workerlog.*" || fail "rd: round 1 never trained"
# by_rank R: the node of rank R in round 1
by_rank() { grep -l "round 1: node rank $1 of 4" out.rd.* | sed 's/out.rd.//'; }
v1=$(by_rank 3) v2=$(by_rank 2) s1=$(by_rank 0) s2=$(by_rank 1)
[ -n "$v1" ] && [ -n "$v2" ] && [ -n "$s1" ] && [ -n "$s2" ] || fail "rd: round 1 is not a world of 4"
killpg KILL "$(cat pid.rd.${v1:-7})"
# the trainers of node v2: the processes of its group with no child
held=$(ps -eo pid=,ppid=,pgid= | awk -v g="$(cat pid.rd.${v2:-6})" '$3 == g { p[$1]; c[$2] }
  END { for (i in p) if (!(i in c)) print i }' | head -n 1)
kill -s STOP "$held" || fail "rd: no trainer of node $v2 to stop"
wait_line 30 0.05 "elastic: joining round 2 " "log.rd.${v2:-6}/round.1/workerlog.*" ||
  fail "rd: node $v2's running trainer never joined round 2"
for n in ${s1:-4} ${s2:-5}; do
  wait_line 30 0.05 "elastic: joining round 2 " "log.rd.$n/round.1/workerlog.*" ||
    fail "rd: node $n's trainers never joined round 2"
done
sleep 0.5
killpg KILL "$(cat pid.rd.${v2:-6})"
for n in ${s1:-4} ${s2:-5}; do
  wait "$(cat pid.rd.$n)" || fail "rd: node $n exited $?"
done
for n in ${v1:-7} ${v2:-6}; do wait "$(cat pid.rd.$n)"; done
grep -q "round 2: node rank [0-2] of 3" out.rd.$s1 || fail "rd: no round of 3 after the first death"
grep -q "round 3: node rank [01] of 2" out.rd.$s1 || fail "rd: no round of 2 after the second death"
[ "$(cat log.rd.$s1/round.1/workerlog.* log.rd.$s2/round.1/workerlog.* | grep -c "round 2 did not form")" = 4 ] ||
  fail "rd: not every survivor left round 2's rendezvous"
[ "$(ls -d log.rd.$s1/round.* log.rd.$s2/round.* | wc -l)" = 2 ] || fail "rd: a survivor started new trainers"
world_change elastic_rdzv_death_recovery_s 3 25 log.rd.$s1/round.1/workerlog.* log.rd.$s2/round.1/workerlog.*
d=$(cat log.rd.*/round.*/workerlog.* | sed -n 's/.*elastic state: step [0-9]*, .* digest \([0-9a-f]*\).*/\1/p' |
  sort | uniq -c | awk '{printf "%s ", $1}')
[ "$d" = "4 " ] || fail "rd: round 3's ranks' parameter digests after the transfer differ or are missing ($d)"
for g in $(cat pid.rd.*); do
  [ -z "$(ps -eo pgid=,stat= | awk -v g="$g" '$1 == g && $2 !~ /^Z/')" ] || fail "rd: processes left in group $g"
done
left=$(ls /dev/shm 2> /dev/null | grep '^flotilla-' | sort | comm -13 shm.before -)
[ -z "$left" ] || fail "shared-memory segments left in /dev/shm: $left"

# the uninterrupted run, after (the machine has 2 cores)
p2=$(etcd_free_port 127.0.0.1)
for n in 1 2; do node base $n 2:2 "$p2" --nproc_per_node 2; done
for n in 1 2; do
  wait "$(cat pid.base.$n)" || fail "base node $n exited $?"
done
b=$(acc out.base.1)
for o in el.1 rd.${s1:-4}; do
  a=$(acc out.$o)
  echo "accuracy: interrupted (${o%.*}) ${a:-none}, uninterrupted ${b:-none}"
  /usr/bin/python3 -c "import sys; sys.exit(${a:-0} < ${b:-1} - 0.005)" ||
    fail "${o%.*}: final accuracy ${a:-none} is more than 0.5 point below the uninterrupted run's ${b:-none}"
done
[ $fails = 0 ] || { for f in out.*; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
echo "elastic nproc: ok"
