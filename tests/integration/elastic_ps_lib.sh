# elastic_ps_lib.sh - sourced by the elastic PServer tests
# (test_elastic_ps.sh, test_elastic_ps_sparse.sh, test_elastic_ps_criteo.sh)
# and test_sparse_restart.sh: the CTR job with sparse tables, and the parts
# of an elastic PS job - a pserver started apart with FLOTILLA_PS_ELASTIC=1,
# nodes of flotilla-run --nnodes on 127.0.0.N in their own process groups,
# a node stopped while it holds a chunk, and the checks of the chunk marks
# the trainers log.  The elastic parts need etcd_lib.sh's ETCD_EP and run
# in the test's temporary directory (the current one).

# sparse_job FILE: the CTR preset (model.kind ctr, 8 sparse slots) on its
# synthetic data, rows pulled pipelined.  Variables change it: samples
# (32768), test_samples (256), epochs (2), log_every (8), heartbeat (5),
# pipeline (true), strategy ("a_sync: true"), train_extra (more train keys,
# "k: v, ..."), pserver_extra (lines indented 2 into pserver).
sparse_job() {
  cat > "$1" << EOF
model:
  kind: ctr
  num_classes: 2
  hidden: [16]
  ctr: {embedding_dim: 4, sparse_slots: 8, hash_buckets: 10007}
data:
  format: synthetic
  synthetic: {kind: ctr, train_samples: ${samples:-32768}, test_samples: ${test_samples:-256}, seed: 5}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: ${epochs:-2}, batch_size: 64, seed: 1, log_interval: ${log_every:-8}, num_threads: 1${train_extra:+, $train_extra}}
cluster: {mode: ps, heartbeat_timeout_s: ${heartbeat:-5}, rpc_timeout_s: 5}
pserver:
  sparse: {optimizer: {name: adagrad, lr: 0.05}, pipeline: ${pipeline:-true}}
${pserver_extra:-}
strategy: {${strategy:-a_sync: true}}
EOF
}

EPS_GROUPS=""
EPS_PS_PID=""

# eps_begin NAME: an elastic test's start: its temporary directory
# /tmp/fl_NAME.XXXXXX as tmp and the current directory (removed at exit,
# after eps_cleanup, unless FL_KEEP_TMP is set), fails=0 and fail MESSAGE,
# etcd_lib.sh sourced and a member started on 127.0.0.1 (exit 77 without
# etcd, 1 when it does not start).
eps_begin() {
  tmp=$(mktemp -d "/tmp/fl_$1.XXXXXX")
  ETCD_PID=""
  trap 'eps_cleanup; [ -n "${FL_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
  cd "$tmp" || exit 1
  fails=0
  fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
  . "$FL_SRCDIR/tests/integration/etcd_lib.sh"
  etcd_start "$tmp" 127.0.0.1 || exit
}

# eps_end MESSAGE: after failures, the tails of every output and log and
# exit 1; else MESSAGE.
eps_end() {
  if [ "$fails" != 0 ]; then
    for _f in *out.* *.ps.log *.log.*/round.1/workerlog.*; do
      [ -f "$_f" ] && echo "== $_f" && tail -n 8 "$_f"
    done
    exit 1
  fi
  echo "$1"
}

# eps_need_torch: exit 77 (skip) unless Debian's python3 has torch and
# onnx; py names it, PYTHONDONTWRITEBYTECODE is exported.
eps_need_torch() {
  py=/usr/bin/python3
  PYTHONDONTWRITEBYTECODE=1
  export PYTHONDONTWRITEBYTECODE
  "$py" -c 'import torch, onnx' 2> /dev/null || { echo "SKIP: $py lacks torch or onnx"; exit 77; }
}

# eps_pserver NAME CONFIG SLOTS [TIMEOUT]: the pserver of job NAME (run id
# elastic-NAME) on a free port of 127.0.0.1 for SLOTS trainer slots, log
# NAME.ps.log (timeout: 60 s); sets EPS_PSEP and EPS_PS_PID.
eps_pserver() {
  EPS_PSEP=127.0.0.1:$(etcd_free_port 127.0.0.1)
  FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST=$EPS_PSEP \
    FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=$3 FLOTILLA_PS_ELASTIC=1 \
    FLOTILLA_RUN_ID="elastic-$1" timeout "${4:-60}" "$FL_BUILDDIR/flotilla-pserver" \
    --config "$2" > "$1.ps.log" 2>&1 &
  EPS_PS_PID=$!
}

# eps_node NAME N NNODES RDZV_CONF CONFIG [TIMEOUT]: node 127.0.0.N of job
# NAME (--rdzv_id NAME, one trainer, the pserver at EPS_PSEP) in its own
# process group: logs in NAME.log.N, output NAME.out.N, its pid (the
# group's) in NAME.pid.N (timeout: 50 s).
eps_node() {
  setsid timeout "${6:-50}" "$FL_BUILDDIR/flotilla-run" --nnodes "$3" --rdzv_backend etcd \
    --rdzv_endpoint "$ETCD_EP" --rdzv_id "$1" --rdzv_conf "$4" --node_ip "127.0.0.$2" \
    --mode ps --servers "$EPS_PSEP" --log_dir "$PWD/$1.log.$2" "$5" > "$1.out.$2" 2>&1 &
  echo $! > "$1.pid.$2"
  EPS_GROUPS="$EPS_GROUPS $!"
}

# eps_killpg SIGNAL NAME N: the signal to node N's process group.
eps_killpg() { /bin/kill -s "$1" -- "-$(cat "$2.pid.$3")"; }

# eps_term_agent NAME N: SIGTERM to node N's flotilla-run alone (the child
# of its timeout; a signal to the group would reach its trainer twice,
# which then exits at once): it stops its trainers at a step boundary.
eps_term_agent() { kill -s TERM "$(ps -o pid= --ppid "$(cat "$1.pid.$2")")"; }

# eps_cleanup: every node's group and the pserver killed, etcd stopped (the
# EXIT trap's part; the caller removes its directory).
eps_cleanup() {
  for _g in $EPS_GROUPS; do /bin/kill -s KILL -- "-$_g" 2> /dev/null; done
  [ -n "$EPS_PS_PID" ] && kill -9 "$EPS_PS_PID" 2> /dev/null
  [ -n "${ETCD_PID:-}" ] && etcd_stop
}

# eps_logs NAME N: the pattern of node N's trainer logs (its first round).
eps_logs() { echo "$1".log."$2"/round.1/workerlog.*; }

# eps_held NAME N: "epoch E chunk C" that node N's trainer claimed last and
# has not logged done, or nothing.
eps_held() {
  # shellcheck disable=SC2046 # the log files' names
  cat $(eps_logs "$1" "$2") | grep "elastic chunks: epoch [0-9]* chunk [0-9]* " |
    sed 's/.*elastic chunks: \(epoch [0-9]* chunk [0-9]*\) \([a-z]*\).*/\1 \2/' |
    tail -n 1 | sed -n 's/ claimed$//p'
}

# eps_stop_holding NAME N: node N's group stopped (SIGSTOP) at a moment its
# trainer holds a chunk (let go on between chunks, 50 tries); sets
# EPS_LOST to that "epoch E chunk C", empty when it never held one.
eps_stop_holding() {
  EPS_LOST=""
  _t=0
  while [ -z "$EPS_LOST" ] && [ $_t -lt 50 ]; do
    eps_killpg STOP "$1" "$2"
    EPS_LOST=$(eps_held "$1" "$2")
    [ -n "$EPS_LOST" ] || { eps_killpg CONT "$1" "$2"; sleep 0.05; }
    _t=$((_t + 1))
  done
}

# eps_sums NAME FILE COLUMN WHAT SAMPLES...: the numbers in COLUMN of
# FILE's lines ("epoch ...") sum to the e-th of SAMPLES for epoch e
# (failures name WHAT).
eps_sums() {
  _n=$1 _file=$2 _col=$3 _what=$4
  shift 4
  _e=0
  for _want in "$@"; do
    _sum=$(awk -v e=$_e -v c="$_col" '$1 == e { s += $c } END { print s + 0 }' "$_file")
    [ "$_sum" = "$_want" ] || fail "$_n: epoch $_e: $_what $_sum samples, want $_want"
    _e=$((_e + 1))
  done
}

# eps_check_chunks NAME COUNT SAMPLES...: the chunk marks of job NAME's
# trainer logs (into NAME.done: "epoch chunk samples"): no chunk done
# twice, COUNT in all, and epoch e's summing to the e-th of SAMPLES.
# Failures through fail.
eps_check_chunks() {
  _j=$1 _count=$2
  shift 2
  cat "$_j".log.*/round.1/workerlog.* |
    sed -n 's/.*elastic chunks: epoch \([0-9]*\) chunk \([0-9]*\) done (\([0-9]*\) samples).*/\1 \2 \3/p' \
      > "$_j.done"
  _twice=$(cut -d' ' -f1,2 "$_j.done" | sort | uniq -d | tr '\n' ' ')
  [ -z "$_twice" ] || fail "$_j: chunks done twice: $_twice"
  [ "$(wc -l < "$_j.done")" = "$_count" ] || fail "$_j: $(wc -l < "$_j.done") chunks done, want $_count"
  eps_sums "$_j" "$_j.done" 3 "chunks done of" "$@"
}

# eps_check_trained NAME SAMPLES...: the samples of the trainers' own epoch
# lines ("[Epoch E] train: ...") sum to the e-th of SAMPLES for epoch e.
eps_check_trained() {
  _j=$1
  shift
  cat "$_j".log.*/round.1/workerlog.* |
    sed -n 's/^\[Epoch \([0-9]*\)\] train: [0-9]* steps, \([0-9]*\) samples.*/\1 \2/p' > "$_j.trained"
  eps_sums "$_j" "$_j.trained" 2 "the trainers trained" "$@"
}
