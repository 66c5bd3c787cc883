#!/bin/sh
# flotilla-run's command line: --help documents every flag it accepts and
# the FLOTILLA_* variables; unknown flags, missing values, stray arguments
# and bad job files are errors (exit 2) with a message.
set -u
RUN=$FL_BUILDDIR/flotilla-run
JOB=$FL_SRCDIR/deploy/examples/mlp_fmnist.yaml
tmp=$(mktemp -d /tmp/fl_run_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$RUN" --help > "$tmp/help" 2>&1 || fail "--help exited non-zero"
for flag in --mode --ips --node_ip --nproc_per_node --gpus --server_num --servers --port \
  --log_dir --max_restart --grace --timeline --metrics_port --trainer_bin --pserver_bin \
  --help --version; do
  grep -q -- "$flag" "$tmp/help" || fail "--help does not document $flag"
done
for var in FLOTILLA_ROLE FLOTILLA_MODE FLOTILLA_TRAINER_ID FLOTILLA_TRAINERS_NUM \
  FLOTILLA_TRAINER_ENDPOINTS FLOTILLA_CURRENT_ENDPOINT FLOTILLA_PSERVERS_IP_PORT_LIST \
  FLOTILLA_PSERVER_ID FLOTILLA_LOCAL_RANK FLOTILLA_LOCAL_SIZE FLOTILLA_SELECTED_GPUS \
  FLOTILLA_LOG_DIR FLOTILLA_TRAINER_BIN FLOTILLA_PSERVER_BIN FLOTILLA_NODE_IP; do
  grep -q "$var" "$tmp/help" || fail "--help does not document $var"
done
# Every documented flag is accepted: none is reported as unknown.
for flag in $(grep -o -- "^  --[a-z_]*" "$tmp/help" | sort -u); do
  "$RUN" "$flag=1" /nonexistent.yaml > "$tmp/o" 2>&1
  grep -q "unknown option" "$tmp/o" && fail "documented $flag is refused"
done
"$RUN" --version | grep -q "^flotilla-run " || fail "--version"

# expect_error STATUS PATTERN ARGS...
expect_error() {
  want=$1 pat=$2
  shift 2
  "$RUN" "$@" > "$tmp/o" 2>&1
  rc=$?
  [ $rc = "$want" ] || fail "flotilla-run $*: exit $rc, want $want"
  grep -q -- "$pat" "$tmp/o" || { fail "flotilla-run $*: no '$pat' in:"; cat "$tmp/o"; }
}
expect_error 2 "unknown option --bogus" --bogus "$JOB"
expect_error 2 "unknown option -x" -x "$JOB"
expect_error 2 "needs a value" "$JOB" --nproc_per_node
expect_error 2 "no job file" --nproc_per_node 2
expect_error 2 "one job file expected" "$JOB" "$JOB"
expect_error 2 "want collective or ps" --mode ring "$JOB"
expect_error 2 "want an integer" --nproc_per_node two "$JOB"
expect_error 2 "want an integer" --nproc_per_node 0 "$JOB"
expect_error 2 "apply to --mode ps only" --server_num 2 "$JOB"
expect_error 2 "not one of --ips" --ips 10.1.1.1,10.1.1.2 --node_ip 10.9.9.9 "$JOB"
expect_error 2 "none of the 2 --ips" --ips 203.0.113.7,203.0.113.8 "$JOB"
expect_error 2 "cannot open job file" /nonexistent/job.yaml
printf 'model:\n  kind: mlp\n  bogus_key: 1\n' > "$tmp/bad.yaml"
expect_error 2 "bad.yaml:3" "$tmp/bad.yaml"
# A trainer program that does not exist: the job fails at once, cleanly.
expect_error 1 "cannot start trainer 0" --trainer_bin /nonexistent/flotilla-trainer \
  --log_dir "$tmp/log" "$JOB"

[ $fails -eq 0 ] || exit 1
echo "PASS: flotilla-run command line"
