#!/bin/bash
# soak_ps.sh - PServer mode under sustained load: 8 async trainers x 2
# pservers on 127.0.0.1 for about 2 minutes (SOAK_SECONDS), a small MLP
# whose dense parameters are cut into blocks spread over both servers.
#
# A trainer stops after a number of steps, not a time: a short calibration
# run (the same job, 12 epochs of 64 steps a trainer) measures the step
# rate between the moments every trainer has finished epoch 2 and epoch
# 10, and the soak run gets 1.25 times the steps that fill SOAK_SECONDS
# at that rate (a cold start runs slower than the soak); SOAK_STEPS skips
# the calibration.  Other load on the machine moves the actual duration,
# which is printed (soak_seconds).  During the soak, while every trainer
# still runs (not during teardown), every daemon's resident set size
# (VmRSS) is sampled every SAMPLE_SECONDS and each pserver's Stats is
# called every 10 s (ps_probe).
# Printed, as `name: value unit` lines (never pass/fail):
#   - per daemon, after the warm-up (the first 30 s or the first quarter
#     of the run, whichever is longer; RSS climbs for ~30 s first): RSS
#     first / last / max and the least-squares slope, and the largest slope
#     of the pservers and of the trainers;
#   - failed calls (the trainers' "ps client totals" log lines: calls that
#     failed, and attempts retried), invalid requests (the servers'),
#     processes that did not exit 0;
#   - totals on both sides: pushes, pulls, bytes sent by the trainers vs
#     bytes in at the servers, bytes received vs bytes out (less the
#     Stats answers ps_probe itself received), and their differences;
#     duplicate pushes are the initial values every trainer but the first
#     offers each block (the servers keep the first).
# The servers' totals are their final Stats, logged at shutdown
# ("totals: ..."), since they exit once every trainer completed.
# Usage: FL_BUILDDIR=build tests/bench/soak_ps.sh   (root not needed)
FL_SRCDIR=${FL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
SOAK_SECONDS=${SOAK_SECONDS:-120}
SAMPLE_SECONDS=${SAMPLE_SECONDS:-2}
NT=8
NPS=2

cat > "$tmp/soak.yaml" << EOF
model: {kind: mlp, input_shape: [1, 16, 16], num_classes: 10, hidden: [128, 64]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 16384, test_samples: 128, seed: 3}
optimizer: {name: adam, lr: 0.001}
train: {epochs: 100000, batch_size: 32, seed: 7, log_interval: 1000, num_threads: 1, eval: false}
cluster: {mode: ps, heartbeat_timeout_s: 20, rpc_timeout_s: 30}
pserver: {dense_block_size: 8192}
strategy: {a_sync: true}
EOF

now() { date +%s.%N; }

# all_logged NAME REGEX: 0 when every trainer's log has a line matching it.
all_logged() {
  [ "$(grep -l -- "$2" "$tmp/$1".tr*.log 2> /dev/null | wc -l)" = $NT ]
}

# run NAME STEPS: the whole job; waits for it (bounded) and samples while
# it runs when NAME is "soak".  $elapsed: seconds from the moment every
# trainer trains to the moment every trainer is done; $t_a, $t_b: the
# moments every trainer had finished epoch 2, epoch 10.
run() {
  _n=$1
  TRAINER_ARGS="--max-steps $2" ps_job "$_n" "$tmp/$_n.yaml" $NPS $NT
  _t0=$SECONDS
  _ts= t_a= t_b=
  _next_stats=$SECONDS
  : > "$tmp/$_n.rss"
  while :; do
    _alive=0
    for ((t = 0; t < NT; t++)); do running "$(eval echo \$TR$t)" && _alive=$((_alive + 1)); done
    [ $_alive = 0 ] && break
    [ -z "$_ts" ] && all_logged "$_n" '^\[Epoch 0, batch 0\]' && _ts=$(now)
    [ -z "$t_a" ] && all_logged "$_n" '^\[Epoch 2\] train:' && t_a=$(now)
    [ -z "$t_b" ] && all_logged "$_n" '^\[Epoch 10\] train:' && t_b=$(now)
    if [ $((SECONDS - _t0)) -gt $((SOAK_SECONDS * 4 + 300)) ]; then
      echo "soak: the job overran; stopping it" >&2
      break
    fi
    if [ "$_n" = soak ] && [ $_alive = $NT ]; then
      _now=$(date +%s.%N)
      for ((s = 0; s < NPS; s++)); do
        p=$(eval echo \$PS$s)
        echo "$_now pserver$s $(awk '/^VmRSS/ {print $2}' /proc/$p/status 2> /dev/null)" >> "$tmp/$_n.rss"
      done
      for ((t = 0; t < NT; t++)); do
        p=$(eval echo \$TR$t)
        echo "$_now trainer$t $(awk '/^VmRSS/ {print $2}' /proc/$p/status 2> /dev/null)" >> "$tmp/$_n.rss"
      done
      if [ $SECONDS -ge $_next_stats ]; then
        for ((s = 0; s < NPS; s++)); do
          "$PROBE" stats "$(echo "$PSLIST" | cut -d, -f$((s + 1)))" >> "$tmp/$_n.stats$s" 2>&1
        done
        _next_stats=$((SECONDS + 10))
      fi
    fi
    if [ "$_n" = soak ]; then sleep "$SAMPLE_SECONDS"; else sleep 0.2; fi
  done
  elapsed=$(echo "$(now) ${_ts:-$(now)}" | awk '{printf "%.1f", $1 - $2}')
  bad_exit=0
  for ((t = 0; t < NT; t++)); do
    wait_exit "$(eval echo \$TR$t)" 60
    [ "$rc" = 0 ] || bad_exit=$((bad_exit + 1))
  done
  for ((s = 0; s < NPS; s++)); do
    wait_exit "$(eval echo \$PS$s)" 60
    [ "$rc" = 0 ] || bad_exit=$((bad_exit + 1))
  done
}

# ------------------------------------------------------------ calibration
steps=${SOAK_STEPS:-}
if [ -z "$steps" ]; then
  cp "$tmp/soak.yaml" "$tmp/calib.yaml"
  run calib 768
  [ -n "$t_a" ] && [ -n "$t_b" ] || { echo "soak: the calibration run did not train" >&2; exit 1; }
  steps=$(echo "$t_a $t_b $SOAK_SECONDS" | awk '{d = $2 - $1; if (d < 0.1) d = 0.1
    s = int(1.25 * 8 * 64 / d * $3); print s < 768 ? 768 : s}')
  echo "calibration: 512 steps a trainer in $(echo "$t_a $t_b" | awk '{printf "%.2f", $2 - $1}') s;" \
    "soak: $steps steps a trainer" >&2
fi

# ------------------------------------------------------------------- soak
run soak "$steps"
echo "soak_seconds: $elapsed s"
echo "soak_trainers: $NT"
echo "soak_pservers: $NPS"
echo "soak_steps_per_trainer: $steps steps"
echo "exit_failures: $bad_exit processes"

# RSS after the warm-up: first, last, max, least-squares slope per daemon.
# (times in the samples are seconds; slopes in KiB per minute)
awk -v warm=0.25 -v nt=$NT -v nps=$NPS '
  { t[NR] = $1; who[NR] = $2; kb[NR] = $3; if (NR == 1) t0 = $1; t1 = $1 }
  END {
    cut = t0 + (warm * (t1 - t0) > 30 ? warm * (t1 - t0) : 30)
    for (i = 1; i <= NR; i++) {
      if (t[i] < cut || kb[i] == "") continue
      w = who[i]; x = (t[i] - t0) / 60
      if (!(w in n)) first[w] = kb[i]
      n[w]++; last[w] = kb[i]; if (kb[i] > mx[w]) mx[w] = kb[i]
      sx[w] += x; sy[w] += kb[i]; sxx[w] += x * x; sxy[w] += x * kb[i]
    }
    for (k = 0; k < nps + nt; k++) {
      w = k < nps ? "pserver" k : "trainer" (k - nps)
      d = n[w] * sxx[w] - sx[w] * sx[w]
      slope = d > 0 ? (n[w] * sxy[w] - sx[w] * sy[w]) / d : 0
      printf "%s_rss_first: %d KiB\n%s_rss_last: %d KiB\n%s_rss_max: %d KiB\n", w, first[w], w, last[w], w, mx[w]
      printf "%s_rss_slope: %.1f KiB/min\n", w, slope
      role = k < nps ? "pserver" : "trainer"
      if (!(role in best) || slope > best[role]) best[role] = slope
    }
    printf "pserver_rss_slope_max: %.1f KiB/min\ntrainer_rss_slope_max: %.1f KiB/min\n", best["pserver"], best["trainer"]
    printf "rss_samples_after_warmup: %d per daemon\n", n["pserver0"]
  }' "$tmp/soak.rss"

# Totals: the trainers' "ps client totals" lines, the servers' "totals".
tr_tot() { # FIELD-REGEX: the sum over the trainers of the number before it
  sed -n "s/.*ps client totals: .*[^0-9]\([0-9][0-9]*\) $1.*/\1/p" "$tmp"/soak.tr*.log |
    awk '{s += $1} END {printf "%.0f\n", s}'
}
ps_tot() {
  sed -n "s/.*\] totals: .*[^0-9]\([0-9][0-9]*\) $1.*/\1/p" "$tmp"/soak.ps*.log |
    awk '{s += $1} END {printf "%.0f\n", s}'
}
probe_bytes=$(cat "$tmp"/soak.stats* 2> /dev/null | awk '/^response_bytes/ {s += $2} END {printf "%.0f\n", s}')
invalid_stats=$(cat "$tmp"/soak.stats* 2> /dev/null | awk '/^invalid/ {if ($2 > m) m = $2} END {print m + 0}')
tr_push=$(tr_tot "pushes") ps_push=$(ps_tot "pushes")
tr_pull=$(tr_tot "pulls") ps_pull=$(ps_tot "pulls")
tr_sent=$(tr_tot "bytes sent") ps_in=$(ps_tot "bytes in")
tr_recv=$(tr_tot "bytes received") ps_out=$(ps_tot "bytes out")
echo "failed_calls: $(tr_tot failed) calls"
echo "retried_calls: $(tr_tot retried) calls"
echo "invalid_requests: $(ps_tot invalid) requests"
echo "invalid_requests_during_run: $invalid_stats requests"
echo "trainer_pushes: $tr_push pushes"
echo "pserver_pushes: $ps_push pushes"
echo "pushes_difference: $((ps_push - tr_push)) pushes"
echo "trainer_pulls: $tr_pull pulls"
echo "pserver_pulls: $ps_pull pulls"
echo "pulls_difference: $((ps_pull - tr_pull)) pulls"
echo "trainer_bytes_sent: $tr_sent bytes"
echo "pserver_bytes_in: $ps_in bytes"
echo "bytes_in_difference: $((ps_in - tr_sent)) bytes"
echo "trainer_bytes_received: $tr_recv bytes"
echo "pserver_bytes_out: $ps_out bytes"
echo "probe_stats_bytes: $probe_bytes bytes"
echo "bytes_out_difference: $((ps_out - probe_bytes - tr_recv)) bytes"
echo "duplicate_pushes: $(ps_tot duplicates) pushes"
echo "pushes_per_second: $(echo "$ps_push $elapsed" | awk '{printf "%.0f", $1 / $2}') pushes/s"
echo "traffic: $(echo "$ps_in $ps_out $elapsed" | awk '{printf "%.1f", ($1 + $2) / $3 / 1048576}') MiB/s"
