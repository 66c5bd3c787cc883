#!/bin/sh
# Elastic chunks of a streamed source: the DLRM example's ONNX module
# (vocabulary 100, its 26 embedding tables as the pserver's sparse tables)
# on Criteo TSV (data.format criteo: two files read as one stream, three
# bad lines skipped, a shuffle buffer of 64), in an elastic async PServer
# job of 2 nodes (flotilla-run --nnodes 1:2, 127.0.0.2..3) and a pserver on
# 127.0.0.1.  Each epoch (4096 samples, 128 steps of 32) is 8 chunks, each
# a range of the stream sought at its first sample and shuffled within
# itself.  Node 3 is stopped while it holds a chunk and killed (-9, whole
# node); node 2 trains that chunk and the rest: every chunk of the 6 epochs
# is done exactly once, summing to the epoch's samples, node 3's lost one
# by node 2; node 2 and the pserver end (exit 0).  Which samples a range
# hands out is checked in tests/unit/test_data_stream.c.
# SKIP (77) without Debian's torch and onnx, or etcd.  Seconds; cleaned up.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
. "$FL_SRCDIR/tests/integration/elastic_ps_lib.sh"
eps_need_torch
ex=$FL_SRCDIR/deploy/examples/recsys
eps_begin elastic_criteo

# 4096 good lines in two files, three bad lines among them; a test file
"$py" "$ex/gen_criteo.py" --rows 4096 --seed 1 --out g.tsv > /dev/null 2>&1 &&
  "$py" "$ex/gen_criteo.py" --rows 200 --seed 2 --out t.tsv > /dev/null 2>&1 &&
  FLOTILLA_BINDIR=$FL_BUILDDIR "$py" "$ex/dlrm.py" export m.onnx --vocab 100 > /dev/null 2>&1 ||
  { echo "FAIL: data or export"; exit 1; }
awk 'NR == 7 || NR == 1500 || NR == 3001 { print "0\tnot a line" } NR <= 2000 { print }' g.tsv > a1.tsv
awk 'NR > 2000 { print }' g.tsv > a2.tsv
export FLOTILLA_TOKEN=elastic-criteo-token

tables=""
for c in $(seq 0 25); do tables="$tables    tables.bags.$c.weight: {init: from_model}
"; done
cat > job.yaml << EOF
model: {kind: onnx, path: $tmp/m.onnx, loss: bce_with_logits}
data:
  format: criteo
  train_files: [$tmp/a*.tsv]
  test_files: [$tmp/t.tsv]
  criteo: {dense_input: dense, sparse_input: sparse, shuffle_buffer: 64, bad_lines: skip}
optimizer: {name: adagrad, lr: 0.05}
pserver:
  sparse:
    optimizer: {name: adagrad, lr: 0.05}
  sparse_tables:
$tables
train: {epochs: 6, batch_size: 32, seed: 1, eval: true, eval_batch_size: 500, log_interval: 8, num_threads: 1}
cluster: {mode: ps, heartbeat_timeout_s: 5, rpc_timeout_s: 5}
strategy: {a_sync: true}
EOF

eps_pserver crit job.yaml 2
for n in 2 3; do eps_node crit $n 1:2 lease_s=3,settle_s=0,chunks=8 job.yaml; done
wait_line 40 0.1 "elastic chunks: epoch [0-9]* chunk [0-9]* done" "$(eps_logs crit 3)" ||
  fail "node 3 never finished a chunk"
eps_stop_holding crit 3
[ -n "$EPS_LOST" ] || fail "node 3 never held a chunk when stopped"
eps_killpg KILL crit 3
wait "$(cat crit.pid.2)" || fail "node 2 exited $?"
wait "$EPS_PS_PID" || fail "the pserver exited $?"
EPS_PS_PID=""
# shellcheck disable=SC2046
grep -q "done: " $(eps_logs crit 2) || fail "node 2's trainer did not finish"
grep -q "every trainer completed" crit.ps.log || fail "the pserver did not see the job complete"
# shellcheck disable=SC2046
grep -q "criteo: 2 files, rank 0 of 1: 4096 samples per epoch, 3 bad lines" $(eps_logs crit 2) ||
  fail "node 2 did not count the whole stream (4096 samples, 3 bad lines)"
eps_check_chunks crit 48 4096 4096 4096 4096 4096 4096
if [ -n "$EPS_LOST" ]; then
  # shellcheck disable=SC2046
  grep -q "elastic chunks: $EPS_LOST done" $(eps_logs crit 2) ||
    fail "node 3's $EPS_LOST was not trained by node 2"
fi
eps_end "elastic ps criteo: ok (node 3 lost $EPS_LOST, trained by node 2)"
