#!/bin/sh
# Elastic chunks with a model with sparse tables (the CTR preset, its
# in-memory synthetic data, rows pulled pipelined): elastic PServer jobs of
# 2 nodes (flotilla-run --nnodes 1:2 --rdzv_backend etcd, one trainer
# each, 127.0.0.2..3), each with its own pserver on 127.0.0.1; epochs of
# 512 steps of the whole data in 16 chunks (2 epochs; 3 in kill):
#   async: both trainers claim chunks; every chunk of every epoch is done
#     exactly once, summing to the epoch's 32768 samples, as do the samples
#     of the trainers' epoch lines;
#   geo (k_steps 2) with train.max_steps 700: the bound is the job's, in
#     the epochs' order: epoch 0 whole, epoch 1's steps 0..187 (chunks 0..4
#     and 28 steps of chunk 5; no later chunk), 700 steps between the two
#     trainers;
#   kill (async): node 3 is stopped while it holds a chunk and killed (-9,
#     whole node); node 2 trains that chunk (claimed once, after node 3's
#     lease expired) and the rest; every chunk is done exactly once (node
#     3's lost one by node 2 only) and the job ends, the pserver complete;
#   leave (async): node 3's flotilla-run gets SIGTERM mid-epoch: its
#     trainer ends after its step, leaving its chunk's progress on etcd,
#     and node 2 goes on in that chunk where it was left (unless the step
#     was the chunk's last: then node 3 marked it done);
#     every chunk is done once and the two trainers' steps sum to the 2
#     epochs' 1024: no step trained twice, none lost.
# Every job ends (exit 0 of the live nodes and the pserver).
# SKIP (77) when etcd is not installed.  Bounded by timeout; cleaned up.
set -u
. "$FL_SRCDIR/tests/integration/elastic_ps_lib.sh"
eps_begin elastic_sparse
export FLOTILLA_TOKEN=elastic-sparse-token

# start NAME: the pserver and nodes 2 and 3 of job NAME (NAME.yaml)
start() {
  eps_pserver "$1" "$1.yaml" 2
  for n in 2 3; do eps_node "$1" $n 1:2 lease_s=3,settle_s=0,chunks=16 "$1.yaml"; done
}

# ends NAME NODES...: the nodes and the pserver of job NAME exit 0, each
# node's trainer finished, the pserver saw the job complete
ends() {
  _j=$1
  shift
  for n in "$@"; do
    wait "$(cat "$_j.pid.$n")" || fail "$_j: node $n exited $?"
    # shellcheck disable=SC2046
    grep -q "done: " $(eps_logs "$_j" "$n") || fail "$_j: node $n's trainer did not finish"
  done
  wait "$EPS_PS_PID" || fail "$_j: the pserver exited $?"
  EPS_PS_PID=""
  grep -q "every trainer completed" "$_j.ps.log" || fail "$_j: the pserver did not see the job complete"
}

# claimed NAME NODES...: each node's trainer claimed a chunk
claimed() {
  _j=$1
  shift
  for n in "$@"; do
    # shellcheck disable=SC2046
    grep -q "elastic chunks: epoch [0-9]* chunk [0-9]* claimed" $(eps_logs "$_j" "$n") ||
      fail "$_j: node $n claimed no chunk"
  done
}

# ---- async
sparse_job async.yaml
start async
ends async 2 3
claimed async 2 3
eps_check_chunks async 32 32768 32768
eps_check_trained async 32768 32768

# ---- geo, max_steps 700 of the job
strategy="a_sync: true, a_sync_configs: {k_steps: 2}" train_extra="max_steps: 700"
sparse_job geo.yaml
strategy="" train_extra=""
start geo
ends geo 2 3
claimed geo 2 3
eps_check_chunks geo 22 32768 12032
eps_check_trained geo 32768 12032
steps=$(cat geo.log.*/round.1/workerlog.* | sed -n 's/.*done: \([0-9]*\) steps.*/\1/p' |
  awk '{ s += $1 } END { print s + 0 }')
[ "$steps" = 700 ] || fail "geo: the trainers did $steps steps in all, want max_steps 700"
grep -q "chunk 5 done (1792 samples)" geo.log.*/round.1/workerlog.* ||
  fail "geo: epoch 1's chunk 5 was not cut at step 188 (28 steps)"

# ---- kill -9 of a node holding a chunk (async)
epochs=3
sparse_job kill.yaml
start kill
wait_line 40 0.1 "elastic chunks: epoch [0-9]* chunk [0-9]* done" "$(eps_logs kill 3)" ||
  fail "kill: node 3 never finished a chunk"
eps_stop_holding kill 3
[ -n "$EPS_LOST" ] || fail "kill: node 3 never held a chunk when stopped"
eps_killpg KILL kill 3
ends kill 2
grep -q "declared dead" kill.ps.log || fail "kill: the pserver did not declare node 3's trainer dead"
eps_check_chunks kill 48 32768 32768 32768
if [ -n "$EPS_LOST" ]; then
  # shellcheck disable=SC2046
  [ "$(cat $(eps_logs kill 2) | grep -c "elastic chunks: $EPS_LOST claimed")" = 1 ] ||
    fail "kill: node 2 did not claim node 3's $EPS_LOST once"
  # shellcheck disable=SC2046
  grep -q "elastic chunks: $EPS_LOST done" $(eps_logs kill 2) ||
    fail "kill: node 3's $EPS_LOST was not trained by node 2"
fi
# ---- SIGTERM to a node's flotilla-run mid-epoch (async)
epochs=2
sparse_job leave.yaml
start leave
wait_line 40 0.1 "elastic chunks: epoch [0-9]* chunk [0-9]* done" "$(eps_logs leave 3)" ||
  fail "leave: node 3 never finished a chunk"
eps_term_agent leave 3
ends leave 2
eps_check_chunks leave 32 32768 32768
# shellcheck disable=SC2046
steps=$(cat $(eps_logs leave 2) $(eps_logs leave 3) |
  sed -n 's/.*\(done: \|stopped by [A-Za-z]* after \)\([0-9]*\) steps.*/\2/p' |
  awk '{ s += $1; n++ } END { print n " " s + 0 }')
[ "$steps" = "2 1024" ] || fail "leave: the trainers' (count, steps): $steps, want 2 1024"
# shellcheck disable=SC2046
left=$(cat $(eps_logs leave 3) | sed -n 's/.*elastic chunks: \(epoch [0-9]* chunk [0-9]*\) left after.*/\1/p')
if [ -n "$left" ]; then
  # shellcheck disable=SC2046
  grep -q "elastic chunks: $left claimed (samples [0-9]*\.\.[0-9]* of the epoch's order), going on where" $(eps_logs leave 2) ||
    fail "leave: node 2 did not go on in node 3's $left where it was left"
else
  echo "leave: node 3's last step was its chunk's last (marked done): no progress to go on from"
fi
eps_end "elastic ps sparse: ok (node 3 lost $EPS_LOST, trained by node 2; left ${left:-no chunk} to node 2)"
