#!/bin/sh
# flotilla-run's supervision, with stand-in daemons (fake_daemon.sh) so
# that it does not depend on training: the FLOTILLA_* environment and
# arguments of each process, logs and the terminal stream, progress,
# metrics.csv and the curve; a failing trainer stops the job and its log
# tail is shown; --max_restart; SIGKILL after --grace; SIGTERM forwarding;
# two "nodes" (127.0.0.1 and 127.0.0.2) each starting their share.
set -u
RUN=$FL_BUILDDIR/flotilla-run
FAKE=$FL_SRCDIR/tests/integration/fake_daemon.sh
JOB=$FL_SRCDIR/deploy/examples/mlp_fmnist.yaml
tmp=$(mktemp -d /tmp/fl_run_sup.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export FAKE_DIR FAKE_MODE
unset FLOTILLA_TOKEN FLOTILLA_TOKEN_FILE
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
hasnt() { ! grep -q -- "$2" "$1" || fail "$1 has '$2'"; }

# run NAME MODE ARGS...: flotilla-run with fake daemons, output in $tmp/NAME.out
run() {
  name=$1 FAKE_MODE=$2
  shift 2
  FAKE_DIR=$tmp/$name
  mkdir -p "$FAKE_DIR"
  timeout 60 "$RUN" --log_dir "$FAKE_DIR/log" --trainer_bin "$FAKE" --pserver_bin "$FAKE" \
    "$@" "$JOB" > "$tmp/$name.out" 2>&1
  rc=$?
  echo "== $name: exit $rc"
}

# 1. A collective job of 3 trainers that finishes.
run ok ok --nproc_per_node 3
[ $rc = 0 ] || fail "ok: exit $rc"
d=$tmp/ok
for r in 0 1 2; do
  has "$d/TRAINER.$r.env" "FLOTILLA_TRAINER_ID=$r"
  has "$d/TRAINER.$r.env" "FLOTILLA_TRAINERS_NUM=3"
  has "$d/TRAINER.$r.env" "FLOTILLA_MODE=collective"
  has "$d/TRAINER.$r.env" "FLOTILLA_LOCAL_RANK=$r"
  has "$d/TRAINER.$r.env" "args: --config $JOB"
  has "$d/log/workerlog.$r" "fake TRAINER $r starting"
done
eps=$(sed -n 's/^FLOTILLA_TRAINER_ENDPOINTS=//p' "$d/TRAINER.1.env")
cur=$(sed -n 's/^FLOTILLA_CURRENT_ENDPOINT=//p' "$d/TRAINER.1.env")
[ "$(echo "$eps" | tr ',' '\n' | sort -u | wc -l)" = 3 ] || fail "endpoints not 3 distinct: $eps"
[ "$(echo "$eps" | cut -d, -f2)" = "$cur" ] || fail "rank 1's endpoint $cur is not entry 1 of $eps"
# One node, no secret given: one random token for the whole job.
tok=$(sed -n 's/^FLOTILLA_TOKEN=//p' "$d/TRAINER.0.env")
echo "$tok" | grep -Eqx '[0-9a-f]{48}' || fail "no random job token: '$tok'"
has "$d/TRAINER.2.env" "FLOTILLA_TOKEN=$tok"
has "$tmp/ok.out" "fake TRAINER 0 starting"       # rank 0 is streamed
hasnt "$tmp/ok.out" "fake TRAINER 1 starting"     # the others only logged
has "$tmp/ok.out" "Distributed Envs"
has "$tmp/ok.out" "\[flotilla-run\] epoch 2/2"
has "$tmp/ok.out" "final test accuracy 0.7000"
[ "$(grep -c '^train,' "$d/log/metrics.csv")" = 8 ] || fail "metrics.csv: not 8 train rows"
[ "$(grep -c '^test,' "$d/log/metrics.csv")" = 2 ] || fail "metrics.csv: not 2 test rows"
if command -v gnuplot > /dev/null; then
  [ -s "$d/log/curve.png" ] || fail "no curve.png although gnuplot is installed"
fi

# 2. PS mode: 2 pservers + 2 trainers; the pservers are stopped (SIGTERM)
#    --grace seconds after the trainers are done.  A secret of the user's
#    own is passed on untouched.
export FLOTILLA_TOKEN=users-secret
run ps ok --mode ps --server_num 2 --nproc_per_node 2 --grace 1
unset FLOTILLA_TOKEN
[ $rc = 0 ] || fail "ps: exit $rc"
d=$tmp/ps
has "$d/PSERVER.1.env" "FLOTILLA_ROLE=PSERVER"
has "$d/PSERVER.1.env" "FLOTILLA_PSERVER_ID=1"
has "$d/PSERVER.1.env" "FLOTILLA_TRAINERS_NUM=2"
list=$(sed -n 's/^FLOTILLA_PSERVERS_IP_PORT_LIST=//p' "$d/PSERVER.1.env")
[ "$(echo "$list" | cut -d, -f2)" = "$(sed -n 's/^FLOTILLA_CURRENT_ENDPOINT=//p' "$d/PSERVER.1.env")" ] ||
  fail "pserver 1 is not entry 1 of $list"
has "$d/TRAINER.0.env" "FLOTILLA_PSERVERS_IP_PORT_LIST=$list"
hasnt "$d/TRAINER.0.env" "FLOTILLA_TRAINER_ENDPOINTS"
has "$d/log/serverlog.1" "SIGTERM"
has "$d/PSERVER.0.env" "FLOTILLA_TOKEN=users-secret"
has "$d/TRAINER.1.env" "FLOTILLA_TOKEN=users-secret"

# 3. A trainer fails: the others are stopped, its log tail is shown, the
#    exit status is its own.
start=$(date +%s)
run fail fail --mode ps --nproc_per_node 3
[ $rc = 3 ] || fail "fail: exit $rc, want 3"
[ $(($(date +%s) - start)) -lt 20 ] || fail "fail: took too long"
has "$tmp/fail.out" "trainer 1 .*exited with status 3"
has "$tmp/fail.out" "last lines of .*workerlog.1"
has "$tmp/fail.out" "cannot open /nonexistent/train-images"
has "$tmp/fail/log/workerlog.0" "fake TRAINER 0: SIGTERM"
has "$tmp/fail/log/serverlog.0" "fake PSERVER 0: SIGTERM"
hasnt "$tmp/fail/log/workerlog.2" "nobody stopped me"

# 4. --max_restart: collective restarts every trainer with --resume.
run restart restart --nproc_per_node 2 --max_restart 1
[ $rc = 0 ] || fail "restart: exit $rc"
has "$tmp/restart/TRAINER.0.env" "args: --config $JOB --resume"
has "$tmp/restart/TRAINER.1.env" "args: --config $JOB --resume"
has "$tmp/restart/log/workerlog.1" "restart 1 of 1"
has "$tmp/restart/log/workerlog.1" "fake trainer 1 resumed"
has "$tmp/restart.out" "trainer 1 exited with status 5; restart 1 of 1"
run norestart restart --nproc_per_node 2
[ $rc = 5 ] || fail "norestart: exit $rc, want 5"

# 5. A process that ignores SIGTERM is killed after --grace.
start=$(date +%s)
run hang hang --nproc_per_node 2 --grace 1
[ $rc = 4 ] || fail "hang: exit $rc, want 4"
[ $(($(date +%s) - start)) -lt 15 ] || fail "hang: took too long"
has "$tmp/hang.out" "SIGKILL"

# 6. SIGTERM to flotilla-run is forwarded; it exits 128+15.
FAKE_DIR=$tmp/sig FAKE_MODE=wait
mkdir -p "$FAKE_DIR"
"$RUN" --log_dir "$FAKE_DIR/log" --trainer_bin "$FAKE" --nproc_per_node 2 "$JOB" \
  > "$tmp/sig.out" 2>&1 &
pid=$!
sleep 1.5
kill -TERM $pid
i=0
while kill -0 $pid 2> /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
wait $pid
rc=$?
[ $rc = 143 ] || fail "sig: exit $rc, want 143"
has "$tmp/sig/log/workerlog.0" "fake TRAINER 0: SIGTERM"
has "$tmp/sig/log/workerlog.1" "fake TRAINER 1: SIGTERM"

# 7. Two nodes on one machine: each flotilla-run starts its own share of
#    the same layout.  Without a shared token it refuses to start.
FAKE_DIR=$tmp/nodes FAKE_MODE=ok
base=$((20000 + $$ % 20000))
mkdir -p "$FAKE_DIR"
timeout 60 "$RUN" --ips 127.0.0.1,127.0.0.2 --node_ip 127.0.0.1 --port $base \
  --nproc_per_node 2 --log_dir "$FAKE_DIR/log0" --trainer_bin "$FAKE" "$JOB" > "$tmp/notoken.out" 2>&1
rc=$?
[ $rc = 2 ] || fail "notoken: exit $rc, want 2"
has "$tmp/notoken.out" "a job on 2 nodes needs a shared token"
[ -f "$FAKE_DIR/TRAINER.0.env" ] && fail "notoken: a trainer was started"
printf 'shared-secret-7\n' > "$tmp/token"
chmod 600 "$tmp/token"
for n in 1 2; do
  FLOTILLA_TOKEN_FILE=$tmp/token timeout 60 "$RUN" --ips 127.0.0.1,127.0.0.2 --node_ip 127.0.0.$n \
    --port $base --nproc_per_node 2 --log_dir "$FAKE_DIR/log$n" --trainer_bin "$FAKE" "$JOB" \
    > "$tmp/nodes$n.out" 2>&1 &
done
wait
for r in 0 1 2 3; do
  has "$FAKE_DIR/TRAINER.$r.env" \
    "FLOTILLA_TRAINER_ENDPOINTS=127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.2:$base,127.0.0.2:$((base + 1))"
  has "$FAKE_DIR/TRAINER.$r.env" "FLOTILLA_TRAINERS_NUM=4"
done
has "$FAKE_DIR/TRAINER.3.env" "FLOTILLA_CURRENT_ENDPOINT=127.0.0.2:$((base + 1))"
has "$FAKE_DIR/TRAINER.3.env" "FLOTILLA_LOCAL_RANK=1"
grep -q '^FLOTILLA_TOKEN=' "$FAKE_DIR/TRAINER.3.env" && fail "a multi-node job made up a token"
has "$FAKE_DIR/TRAINER.3.env" "FLOTILLA_TOKEN_FILE=$tmp/token"
[ -f "$FAKE_DIR/log2/workerlog.2" ] || fail "node 2 did not start rank 2"
[ -f "$FAKE_DIR/log2/workerlog.0" ] && fail "node 2 started rank 0"

if [ $fails -ne 0 ]; then
  for f in "$tmp"/*.out; do echo "----- $f"; cat "$f"; done
  exit 1
fi
echo "PASS: flotilla-run supervision"
