# tier_lib.sh - sourced by test_tier.sh and test_tier_kill.sh: the CTR job
# of the disk tier's tests.
#
# tier_job FILE CKDIR BUDGET [SPARSE-EXTRA [PSERVER-EXTRA]]: FILE gets the
# CTR job (embedding dim 8, row-wise Adagrad rows) with its pservers'
# checkpoints in CKDIR and pserver.memory_budget BUDGET; SPARSE-EXTRA
# lines (indented 4) go into pserver.sparse, PSERVER-EXTRA lines (indented
# 2) into pserver.  The variables below, when set, change it: buckets
# (hash buckets, 5003), samples (training samples, 2048), batch (128),
# evaluate (true), log_every (100), a_sync (false), heartbeat (20) and
# rpc_timeout (the default).
tier_job() {
  cat > "$1" << EOF2
model:
  kind: ctr
  num_classes: 2
  hidden: [16]
  ctr: {embedding_dim: 8, sparse_slots: 26, dense_features: 13, hash_buckets: ${buckets:-5003}}
data:
  format: synthetic
  synthetic: {kind: ctr, train_samples: ${samples:-2048}, test_samples: 256, seed: 7}
optimizer: {name: adam, lr: 0.001}
pserver:
  sparse:
    optimizer: {name: rowwise_adagrad, lr: 0.05}
${4:-}
  checkpoint_dir: $2
  memory_budget: $3
${5:-}
train: {epochs: 1, batch_size: ${batch:-128}, seed: 1, eval: ${evaluate:-true}, log_interval: ${log_every:-100}, num_threads: 1}
cluster: {mode: ps, heartbeat_timeout_s: ${heartbeat:-20}${rpc_timeout:+, rpc_timeout_s: $rpc_timeout}}
strategy: {a_sync: ${a_sync:-false}}
EOF2
}
