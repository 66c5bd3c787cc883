#!/bin/sh
# flotilla-run's failure report: which process failed first, its error
# line and last lines, and what became of the others.
#   With stand-in daemons (fake_daemon.sh), deterministic: a rank whose
#   peer exits first blaming it is still named (cascade); two ranks
#   SIGKILLed at once by someone else: one is named, the other "also
#   failed" (twokill); a pserver SIGKILLed in PS mode (pskill); the history
#   of --max_restart attempts; no descriptor to spare (ulimit -n 6).
#   With the real daemons: a collective job of 3 trainers where trainer 1
#   has a missing data file (a --trainer_bin wrapper gives rank 1 its own
#   job file): trainer 1 and its error are named, ranks 0 and 2 are listed
#   as consequences; a PS job whose pserver is killed -9 while training.
set -u
RUN=$FL_BUILDDIR/flotilla-run
FAKE=$FL_SRCDIR/tests/integration/fake_daemon.sh
JOB=$FL_SRCDIR/deploy/examples/mlp_fmnist.yaml
tmp=$(mktemp -d /tmp/fl_run_fail.XXXXXX)
bg=""
trap 'for p in $bg; do kill -KILL "$p" 2> /dev/null; done; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export FAKE_DIR FAKE_MODE
unset FLOTILLA_TOKEN FLOTILLA_TOKEN_FILE FLOTILLA_CHECKPOINT_DIR
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -Eq -- "$2" "$1" || fail "$1 lacks '$2'"; }
hasnt() { ! grep -Eq -- "$2" "$1" || fail "$1 has '$2'"; }
# others FILE ROLE ID WHAT: the report lists ROLE ID among the others as WHAT
others() { has "$1" "^flotilla-run:   $2 $3 \(pid [0-9]+\): $4"; }

# fake NAME MODE ARGS...: flotilla-run with fake daemons, output in NAME.out
fake() {
  name=$1 FAKE_MODE=$2
  shift 2
  FAKE_DIR=$tmp/$name
  mkdir -p "$FAKE_DIR"
  timeout 30 "$RUN" --log_dir "$FAKE_DIR/log" --trainer_bin "$FAKE" --pserver_bin "$FAKE" \
    "$@" "$JOB" > "$tmp/$name.out" 2>&1
  rc=$?
  echo "== $name: exit $rc"
}

# 1. Trainer 0 exits first, its error naming rank 1, which fails 0.15 s
#    later: trainer 1 is the first failure and gives the exit status.
fake cascade cascade --nproc_per_node 3
o=$tmp/cascade.out
[ $rc = 3 ] || fail "cascade: exit $rc, want 3 (trainer 1's)"
has $o "^flotilla-run: first failure: trainer 1 \(pid [0-9]+\) exited with status 3"
has $o "^flotilla-run: its error: E \[trainer 1\] data: cannot open /nonexistent/part-1"
has $o "last lines of .*workerlog.1"
others $o trainer 0 "failed because of it; .*exited with status 1: .*rank 1 \(127"
others $o trainer 2 "stopped by flotilla-run \(SIGTERM\)"

# 2. Trainers 1 and 2 SIGKILLed within microseconds: the one reaped first
#    is named, the other also failed; trainer 0 was stopped.
fake twokill twokill --nproc_per_node 3
o=$tmp/twokill.out
[ $rc = 137 ] || fail "twokill: exit $rc, want 137"
first=$(sed -n 's/^flotilla-run: first failure: trainer \([12]\) .*killed by signal 9.*not sent by flotilla-run.*/\1/p' $o)
if [ "$first" = 1 ] || [ "$first" = 2 ]; then
  others $o trainer $((3 - first)) "also failed; .*killed by signal 9"
else
  fail "twokill: trainer 1 or 2 is not named as the first failure"
fi
others $o trainer 0 "stopped by flotilla-run"

# 3. PS mode: pserver 0 SIGKILLed by someone else.
fake pskill pskill --mode ps --server_num 2 --nproc_per_node 2
o=$tmp/pskill.out
[ $rc = 137 ] || fail "pskill: exit $rc, want 137"
has $o "^flotilla-run: first failure: pserver 0 \(pid [0-9]+\) was killed by signal 9 .*not sent by flotilla-run"
has $o "last lines of .*serverlog.0"
for t in 0 1; do others $o trainer $t "stopped by flotilla-run"; done
others $o pserver 1 "stopped by flotilla-run"

# 4. --max_restart: every attempt's first failure.  Restarted once and then
#    done: the first start's failure is listed.  Failing again: listed, and
#    the report is about the last attempt's output only.
fake restart restart --nproc_per_node 2 --max_restart 1
[ $rc = 0 ] || fail "restart: exit $rc"
has $tmp/restart.out "^flotilla-run: first start: trainer 1 \(pid [0-9]+\) exited with status 5 .*crashed on purpose; restarted"
fake refail fail --nproc_per_node 2 --max_restart 1
o=$tmp/refail.out
[ $rc = 3 ] || fail "refail: exit $rc, want 3"
has $o "^flotilla-run: first start: trainer 1 .*exited with status 3 .*cannot open .*; restarted"
has $o "^flotilla-run: first failure: trainer 1 \(pid [0-9]+\) exited with status 3 .*\(after restart 1\)"
[ "$(sed -n '/last lines of/,/end of/p' $o | grep -c 'fake TRAINER 1 starting')" = 1 ] ||
  fail "refail: the tail is not the last attempt's alone"

# 4b. No descriptor to spare (ulimit -n 6): flotilla-run says so and exits
#     1 (it used to crash in the event loop's start, which found none).
(ulimit -n 6 && exec timeout 30 "$RUN" --log_dir "$tmp/nofd" --trainer_bin "$FAKE" \
  --pserver_bin "$FAKE" --nproc_per_node 2 "$JOB") > "$tmp/nofd.out" 2>&1
rc=$?
echo "== nofd: exit $rc"
[ $rc = 1 ] || fail "nofd: exit $rc under ulimit -n 6, want 1"
has "$tmp/nofd.out" "[Tt]oo many open files"

# 5. Real daemons, collective, 3 trainers: trainer 1's job names a data file
#    that does not exist.  Trainer 0 (told at once that rank 1 aborted) may
#    end before it; trainer 1 is named all the same.
cat > "$tmp/good.yaml" << 'EOF'
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 512, test_samples: 64, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 1000, batch_size: 16, seed: 7, log_interval: 10, num_threads: 1, eval: false}
cluster: {mode: collective, collective_timeout_s: 10}
EOF
sed -e 's|^  format: synthetic|  format: idx\n  train_images: /nonexistent/train-images-idx3-ubyte.gz\n  train_labels: /nonexistent/train-labels-idx1-ubyte.gz|' \
  -e '/synthetic:/d' "$tmp/good.yaml" > "$tmp/bad.yaml"
cat > "$tmp/trainer.sh" << EOF
#!/bin/sh
[ "\$FLOTILLA_TRAINER_ID" = 1 ] && exec "$FL_BUILDDIR/flotilla-trainer" --config "$tmp/bad.yaml"
exec "$FL_BUILDDIR/flotilla-trainer" "\$@"
EOF
cat > "$tmp/pserver.sh" << EOF
#!/bin/sh
echo \$\$ > "\$FLOTILLA_LOG_DIR/pserver.\$FLOTILLA_PSERVER_ID.pid"
exec "$FL_BUILDDIR/flotilla-pserver" "\$@"
EOF
sed 's/mode: collective, collective_timeout_s: 10/mode: ps/' "$tmp/good.yaml" > "$tmp/ps.yaml"
chmod +x "$tmp/trainer.sh" "$tmp/pserver.sh"
timeout 30 "$RUN" --log_dir "$tmp/coll" --trainer_bin "$tmp/trainer.sh" --nproc_per_node 3 \
  --grace 5 "$tmp/good.yaml" > "$tmp/coll.out" 2>&1
rc=$?
echo "== coll: exit $rc"
o=$tmp/coll.out
[ $rc = 1 ] || fail "coll: exit $rc, want 1"
has $o "^flotilla-run: first failure: trainer 1 \(pid [0-9]+\) exited with status 1"
has $o "^flotilla-run: its error: .* E \[trainer 1\] /nonexistent/train-images-idx3-ubyte.gz"
has $o "last lines of .*workerlog.1"
for t in 0 2; do others $o trainer $t "(failed because of it|stopped by flotilla-run)"; done
hasnt $o "first failure: trainer [02]"

# 6. Real daemons, PS: the pserver is killed -9 while the trainers train.
timeout 30 "$RUN" --log_dir "$tmp/ps" --pserver_bin "$tmp/pserver.sh" --mode ps --server_num 1 \
  --nproc_per_node 2 --grace 2 "$tmp/ps.yaml" > "$tmp/ps.out" 2>&1 &
pid=$!
bg="$bg $pid"
i=0
until grep -q "Epoch 0, batch" "$tmp/ps/workerlog.0" 2> /dev/null || [ $i -ge 150 ]; do
  sleep 0.1
  i=$((i + 1))
done
[ -s "$tmp/ps/pserver.0.pid" ] && kill -KILL "$(cat "$tmp/ps/pserver.0.pid")"
wait $pid
rc=$?
echo "== ps: exit $rc"
o=$tmp/ps.out
[ $rc = 137 ] || fail "ps: exit $rc, want 137"
has $o "^flotilla-run: first failure: pserver 0 \(pid [0-9]+\) was killed by signal 9 .*not sent by flotilla-run"
for t in 0 1; do others $o trainer $t "(failed because of it|stopped by flotilla-run|also failed)"; done

if [ $fails -ne 0 ]; then
  for f in "$tmp"/*.out; do echo "----- $f"; grep -v '^[|+]' "$f"; done
  exit 1
fi
echo "PASS: flotilla-run failure report"
