#!/bin/sh
# flotilla-run with the real daemons on 127.0.0.1, in each mode: a
# collective job of 2 trainers and a PS job of 2 pservers + 2 trainers run
# a few steps and end cleanly; a job whose training data is missing fails,
# the other processes are stopped and the failed trainer's log tail is
# shown; a trainer killed with --max_restart 1 resumes with the others
# from the last checkpoint; --timeline gives one valid Chrome-tracing
# JSON; --metrics_port gives each process a /metrics endpoint that answers
# while it runs.
# A part whose mode or flag this build of the daemons lacks is SKIPped.
set -u
RUN=$FL_BUILDDIR/flotilla-run
EX=$FL_SRCDIR/deploy/examples
tmp=$(mktemp -d /tmp/fl_run_modes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0 ran=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }

# short JOB: the example with small data limits, in $tmp
short() {
  sed 's/^data:$/data:\n  limit_train: 4096\n  limit_test: 1000/' "$EX/$1.yaml" > "$tmp/$1.yaml"
  echo "$tmp/$1.yaml"
}

# run NAME ARGS...: flotilla-run, output in $tmp/NAME.out, logs in $tmp/NAME;
# returns 1 (and says SKIP) when the daemons lack what NAME needs.
run() {
  name=$1
  shift
  FLOTILLA_CHECKPOINT_DIR="$tmp/$name.ckpt" timeout 120 "$RUN" --log_dir "$tmp/$name" "$@" \
    > "$tmp/$name.out" 2>&1
  rc=$?
  if grep -q -e "is not available in this build" -e "unknown argument '--timeline" \
    -e "unknown argument '--metrics_addr" -e "unknown argument --metrics_addr" \
    "$tmp/$name"/*log.* 2> /dev/null; then
    echo "SKIP: $name (not in this build of the daemons yet)"
    return 1
  fi
  ran=$((ran + 1))
  echo "== $name: exit $rc"
  return 0
}

# Collective: 2 trainers, ring allreduce over TCP on loopback.
job=$(short collective_mlp_fmnist)
if run collective --nproc_per_node 2 "$job" -- --max-steps 20; then
  [ $rc = 0 ] || fail "collective: exit $rc"
  for r in 0 1; do has "$tmp/collective/workerlog.$r" "\[Epoch 0, batch 0\] loss: "; done
  has "$tmp/collective.out" "final test accuracy"
  grep -q '^test,' "$tmp/collective/metrics.csv" || fail "collective: no test row in metrics.csv"
fi

# PS sync: 2 pservers + 2 trainers; the pservers end with the job.
job=$(short ps_sync_mlp_fmnist)
if run ps --mode ps --server_num 2 --nproc_per_node 2 --grace 20 "$job" -- --max-steps 20; then
  [ $rc = 0 ] || fail "ps: exit $rc"
  for r in 0 1; do has "$tmp/ps/workerlog.$r" "\[Epoch 0, batch 0\] loss: "; done
  for s in 0 1; do [ -s "$tmp/ps/serverlog.$s" ] || fail "ps: empty serverlog.$s"; done
fi

# A trainer without its data: the job stops, the tail of its log is shown.
sed 's|^  train_images: .*|  train_images: /nonexistent/train-images-idx3-ubyte.gz|' \
  "$EX/ps_sync_mlp_fmnist.yaml" > "$tmp/nodata.yaml"
if run nodata --mode ps --server_num 1 --nproc_per_node 2 "$tmp/nodata.yaml"; then
  [ $rc != 0 ] || fail "nodata: exit 0"
  has "$tmp/nodata.out" "last lines of .*workerlog"
  has "$tmp/nodata.out" "/nonexistent/train-images"
  has "$tmp/nodata.out" "job failed"
fi

# --max_restart: trainer 1 is killed (SIGKILL) after the first
# checkpoint; both trainers restart with --resume from it and finish.
sed 's/^data:$/data:\n  limit_train: 8192\n  limit_test: 1000/' "$EX/collective_mlp_fmnist.yaml" \
  > "$tmp/restart.yaml"
FLOTILLA_CHECKPOINT_DIR="$tmp/restart.ckpt" timeout 110 "$RUN" --log_dir "$tmp/restart" \
  --nproc_per_node 2 --max_restart 1 "$tmp/restart.yaml" -- --max-steps 1000 \
  > "$tmp/restart.out" 2>&1 &
pid=$!
i=0
until grep -q "checkpoint: step" "$tmp/restart/workerlog.0" 2> /dev/null || [ $i -ge 600 ]; do
  sleep 0.1
  i=$((i + 1))
done
# timeout -> flotilla-run -> its children: trainer 0, trainer 1
victim=$(pgrep -P "$(pgrep -P $pid)" | sed -n 2p)
[ -n "$victim" ] && kill -KILL "$victim"
wait $pid
rc=$?
if grep -q "is not available in this build" "$tmp/restart"/workerlog.* 2> /dev/null; then
  echo "SKIP: restart (not in this build of the daemons yet)"
else
  ran=$((ran + 1))
  echo "== restart: exit $rc"
  [ $rc = 0 ] || fail "restart: exit $rc"
  has "$tmp/restart.out" "trainer 1 was killed by signal 9 (Killed); restart 1 of 1"
  has "$tmp/restart/workerlog.1" "restart 1 of 1, with --resume"
  has "$tmp/restart/workerlog.1" "resumed from"
  has "$tmp/restart/workerlog.0" "resumed from"
fi

# --timeline: every trainer's spans, merged into one valid JSON file.
job=$(short collective_mlp_fmnist)
if run timeline --nproc_per_node 2 --timeline "$job" -- --max-steps 10; then
  [ $rc = 0 ] || fail "timeline: exit $rc"
  python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
pids = {e["pid"] for e in ev}
names = {e.get("name") for e in ev}
assert pids == {0, 1}, pids
for n in ("forward", "backward"):
    assert n in names, n
' "$tmp/timeline/timeline.json" || fail "timeline.json is not what it should be"
fi

# --metrics_port: /metrics of trainer 0 (port BASE) and of the pserver
# (BASE + 2, after the 2 trainers) answer while a PS job runs, parse as
# Prometheus text, and show the work being done.
sed 's/^data:$/data:\n  limit_test: 1000/' "$EX/ps_sync_mlp_fmnist.yaml" > "$tmp/metrics.yaml"
mport=$((30000 + $$ % 20000))
FLOTILLA_CHECKPOINT_DIR="$tmp/metrics.ckpt" timeout 120 "$RUN" --log_dir "$tmp/metrics" \
  --mode ps --server_num 1 --nproc_per_node 2 --metrics_port $mport "$tmp/metrics.yaml" \
  -- --max-steps 3000 > "$tmp/metrics.out" 2>&1 &
pid=$!
got=no
i=0
while [ $i -lt 300 ] && kill -0 $pid 2> /dev/null; do
  if python3 - "$mport" > "$tmp/scrape" 2>&1 << 'PY'
import sys, urllib.request
def scrape(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values
base = int(sys.argv[1])
t, p = scrape(base), scrape(base + 2)
assert t['flotilla_info{role="trainer",rank="0",mode="ps"}'] == 1
assert t["flotilla_steps_total"] >= 5, t["flotilla_steps_total"]
assert t["flotilla_push_seconds_count"] > 0 and t["flotilla_pull_seconds_count"] > 0
assert t["flotilla_bytes_sent_total"] > 0
assert p['flotilla_info{role="pserver",rank="0",mode="ps-sync"}'] == 1
assert p["flotilla_live_trainers"] == 2, p["flotilla_live_trainers"]
PY
  then got=yes; break; fi
  sleep 0.2
  i=$((i + 1))
done
kill -TERM $pid 2> /dev/null
wait $pid
if grep -q -e "unknown argument '--metrics_addr" -e "unknown argument --metrics_addr" \
  "$tmp/metrics"/*log.* 2> /dev/null; then
  echo "SKIP: metrics (not in this build of the daemons yet)"
else
  ran=$((ran + 1))
  [ $got = yes ] || { fail "metrics: /metrics on 127.0.0.1:$mport/+2 never showed the job:"; cat "$tmp/scrape"; }
fi

if [ $fails -ne 0 ]; then
  for f in "$tmp"/*.out; do echo "----- $f"; tail -n 40 "$f"; done
  exit 1
fi
[ $ran -gt 0 ] || exit 77
echo "PASS: flotilla-run with the daemons ($ran parts)"
