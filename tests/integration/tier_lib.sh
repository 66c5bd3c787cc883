# tier_lib.sh - sourced by the disk tier's tests (test_tier*.sh): the CTR
# job they run and what they do with it.
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

# tier_last DIR: the newest base checkpoint of pserver 0 in DIR.
tier_last() { ls "$1"/pserver-0/ckpt-*.flc | sort -t- -k2 -n | tail -n 1; }

# tier_run_to_end NAME: the trainers and then the pserver of the job NAME
# started by faults_lib.sh's ps_job (1 pserver, 2 trainers) ended, 0.
tier_run_to_end() {
  wait_exit "$TR0" 60
  [ "$rc" = 0 ] || fail "$1: trainer 0 ended with exit status $rc"
  wait_exit "$TR1" 20
  [ "$rc" = 0 ] || fail "$1: trainer 1 ended with exit status $rc"
  wait_exit "$PS0" 20
  [ "$rc" = 0 ] || fail "$1: the pserver ended with exit status $rc"
}

# tier_chain_restart NAME SECONDS: the budgeted job NAME (1 pserver, 2
# trainers, started by ps_job with FLOTILLA_RUN_ID=NAME in JOB_ENV and
# delta checkpoints on) run to its end with a base and a delta written;
# then its pserver restarted from that chain (serving within SECONDS, the
# deltas replayed), saved whole (SaveCheckpoint) and killed.
# $tmp/NAME.digest gets ps_rows_digest ($DIGEST) of that save, and
# $tmp/NAME.cmp its lines but the tier's (to compare with a digest of the
# job all in memory); the first run's log becomes $tmp/NAME.ps0.first.log.
tier_chain_restart() {
  _log=$tmp/$1.ps0.log
  tier_run_to_end "$1"
  has "$_log" "checkpoint of step [0-9]+ written to .*/ckpt-[0-9]+\.flc" "$1: a base"
  has "$_log" "checkpoint of step [0-9]+ written to .*/delta-[0-9]+\+[0-9]+\.flc" "$1: a delta"
  mv "$_log" "$tmp/$1.ps0.first.log"
  JOB_ENV=FLOTILLA_RUN_ID=$1 start_pserver "$1" "$tmp/$1.yaml" 0 2
  wait_log "$_log" '\] serving ' "$2" || fail "$1: the restarted pserver does not serve"
  has "$_log" "replayed [1-9][0-9]* delta checkpoint" "$1: the restart replays the deltas"
  "$PROBE" save "$PSLIST" > "$tmp/$1.save" 2>&1 ||
    fail "$1: SaveCheckpoint after the restart: $(cat "$tmp/$1.save")"
  kill -KILL "$PS0"
  "$DIGEST" "$(sed -n 's/^path //p' "$tmp/$1.save")" > "$tmp/$1.digest" 2>&1 ||
    fail "digest $1: $(cat "$tmp/$1.digest")"
  grep -v '^tier ' "$tmp/$1.digest" > "$tmp/$1.cmp"
}
