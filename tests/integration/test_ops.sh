#!/bin/bash
# What an operator meets first (issue 14, "operator experience"), with the
# real programs on 127.0.0.1 (faults_lib.sh), bounded in time:
#   --version of all three programs names the build's features;
#   flotilla-trainer --dump-config - writes the resolved job and nothing
#     else to stdout, and exits without training; the dump loads again and
#     dumps to the same text (a fixed point);
#   a pserver's /metrics holds its own families only (no
#     flotilla_steps_total), /healthz answers 200 and /readyz 200 once it
#     serves; no libmicrohttpd warning about the order of its options;
#   a second pserver on a used address says "address in use", and a
#     trainer with another job's token is told so;
#   flotilla-run's progress line reaches 100% (its records come every
#     log_interval batches) above the final summary.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
RUN=$FL_BUILDDIR/flotilla-run

# ------------------------------------------------------------ --version
n=version
f0=$fails
for p in "$TRAINER" "$PSERVER" "$RUN"; do
  name=${p##*/}
  "$p" --version > "$tmp/$n.$name" 2>&1 || fail "$n: $name --version exit $?"
  has "$tmp/$n.$name" "^$name [0-9]" "$n: $name"
  for feat in CUDA NCCL TLS; do has "$tmp/$n.$name" "^  $feat: (yes|no)" "$n: $name"; done
done
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# ------------------------------------------------------- --dump-config
n=dump
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32, 16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 256, test_samples: 64, seed: 3}
optimizer: {name: lamb, lr: 0.002}
train: {epochs: 1, batch_size: 16, log_interval: 1}
strategy: {gradient_merge: true, gradient_merge_configs: {k_steps: 2}}
EOF
FLOTILLA_MODE=local timeout 30 "$TRAINER" --config "$tmp/$n.yaml" --dump-config - \
  > "$tmp/$n.1.yaml" 2> "$tmp/$n.err"
rc=$?
[ $rc = 0 ] || fail "$n: exit $rc"
head -1 "$tmp/$n.1.yaml" | grep -q '^# Flotilla job' || fail "$n: the dump does not start the output"
hasnt "$tmp/$n.1.yaml" '^\+|^\||\[Epoch' "$n: stdout"
hasnt "$tmp/$n.err" '\[Epoch|training ' "$n: trained"
FLOTILLA_MODE=local timeout 30 "$TRAINER" --config "$tmp/$n.1.yaml" --dump-config "$tmp/$n.2.yaml" \
  > /dev/null 2> "$tmp/$n.err2" || fail "$n: the dump does not load: $(cat "$tmp/$n.err2")"
# the first line names the file it was resolved from
if ! diff <(tail -n +2 "$tmp/$n.1.yaml") <(tail -n +2 "$tmp/$n.2.yaml") > "$tmp/$n.diff"; then
  fail "$n: dump -> load -> dump is not a fixed point"
  cat "$tmp/$n.diff"
fi
has "$tmp/$n.1.yaml" '^  lamb: true' "$n: the resolved strategy"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# --------------------------------------- /metrics, /healthz, /readyz
n=http
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
optimizer: {name: sgd, lr: 0.05}
cluster: {mode: ps}
EOF
mport=$(free_port)
PSLIST="127.0.0.1:$(free_port)"
spawn PS0 "$tmp/$n.ps0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=1 -- "$PSERVER" --config "$tmp/$n.yaml" \
  --metrics_addr=127.0.0.1:$mport
wait_log "$tmp/$n.ps0.log" '\] serving ' 20 || fail "$n: pserver does not serve"
python3 - "$mport" > "$tmp/$n.scrape" 2>&1 << 'PY' || fail "$n: $(cat "$tmp/$n.scrape")"
import sys, urllib.request, urllib.error
port = int(sys.argv[1])
def get(path):
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
st, text = get("/metrics")
assert st == 200, st
assert 'flotilla_info{role="pserver",rank="0",mode="ps-sync"} 1' in text, text
assert "flotilla_live_trainers" in text, text
for other in ("flotilla_steps_total", "flotilla_loss ", "flotilla_push_seconds"):
    assert other not in text, other
assert get("/healthz")[0] == 200
assert get("/readyz")[0] == 200
PY
hasnt "$tmp/$n.ps0.log" 'MHD_OPTION_EXTERNAL_LOGGER' "$n: pserver"
kill -TERM "$PS0"
wait_exit "$PS0" 20
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# ------------------- a second job on the same address (issue 14, fault 10)
n=inuse
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 256, test_samples: 64, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 1, batch_size: 16, log_interval: 100}
cluster: {mode: ps, rpc_timeout_s: 5, heartbeat_timeout_s: 5}
EOF
PSLIST="127.0.0.1:$(free_port)"
spawn PS0 "$tmp/$n.ps0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=1 FLOTILLA_TOKEN=first-job -- "$PSERVER" --config "$tmp/$n.yaml"
wait_log "$tmp/$n.ps0.log" '\] serving ' 20 || fail "$n: first pserver does not serve"
spawn PS1 "$tmp/$n.second.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=1 FLOTILLA_TOKEN=second-job -- "$PSERVER" --config "$tmp/$n.yaml"
wait_exit "$PS1" 20
[ "$rc" = 1 ] || fail "$n: second pserver exit $rc (want 1)"
has "$tmp/$n.second.log" "cannot serve $PSLIST: address in use" "$n: second pserver"
spawn TR0 "$tmp/$n.tr0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=TRAINER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_TRAINER_ID=0 FLOTILLA_TRAINERS_NUM=1 FLOTILLA_TOKEN=second-job -- "$TRAINER" --config "$tmp/$n.yaml"
wait_exit "$TR0" 30
[ "$rc" = 1 ] || fail "$n: second job's trainer exit $rc (want 1)"
has "$tmp/$n.tr0.log" "pserver 0 \($PSLIST\) refused trainer 0's token .*another job's pserver at this address" "$n: trainer"
kill -TERM "$PS0"
wait_exit "$PS0" 20
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# ------------------------------------------- the progress line ends whole
n=progress
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 512, test_samples: 64, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 2, batch_size: 16, log_interval: 7}
EOF
# 32 batches an epoch, logged every 7: the last line logged is batch 28
timeout 120 "$RUN" --log_dir "$tmp/$n" "$tmp/$n.yaml" > "$tmp/$n.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "$n: flotilla-run exit $rc"
has "$tmp/$n.out" '^\[flotilla-run\] epoch 2/2  step 32/32 \(100%\)' "$n"
tail -1 "$tmp/$n.out" | grep -q 'job done in' || fail "$n: the summary is not the last line"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

finish
