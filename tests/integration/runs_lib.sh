# runs_lib.sh - what the shell tests that train short jobs with
# flotilla-trainer and flotilla-run share (sourced): the programs (T, RUN,
# DIFF), failures counted in $fails, a job NAME ($tmp/NAME.yaml) run
# locally or distributed within 120 s, and two jobs' final checkpoints
# compared.  The caller sets tmp.
# shellcheck disable=SC2154 # tmp: set by the sourcing script
T=$FL_BUILDDIR/flotilla-trainer
RUN=$FL_BUILDDIR/flotilla-run
DIFF=$FL_BUILDDIR/tests/integration/ckpt_maxdiff
fails=0
# fail MESSAGE: one failure, said.
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# local_run NAME: one flotilla-trainer, its output in $tmp/NAME.out.
local_run() {
  timeout 120 "$T" --config "$tmp/$1.yaml" > "$tmp/$1.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { tail -n 20 "$tmp/$1.out"; fail "$1: exit $rc"; return 1; }
}

# dist_run NAME FLAGS...: flotilla-run FLAGS, its processes' logs in
# $tmp/NAME.log.
dist_run() {
  name=$1
  shift
  timeout 120 "$RUN" --log_dir "$tmp/$name.log" "$@" "$tmp/$name.yaml" > "$tmp/$name.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { tail -n 20 "$tmp/$name.out" "$tmp/$name.log"/*log.* 2> /dev/null
    fail "$name: exit $rc"; return 1; }
}

# same A B BOUND: the final checkpoints of jobs A and B within BOUND
same() {
  if "$DIFF" "$tmp/$1.ck" "$tmp/$2.ck" "$3" > "$tmp/$1-$2.diff" 2>&1; then
    echo "ok: $1 = $2 ($(cat "$tmp/$1-$2.diff"))"
  else
    cat "$tmp/$1-$2.diff"
    fail "$1 and $2 differ by more than $3"
  fi
}
