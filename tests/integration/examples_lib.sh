# examples_lib.sh - sourced by test_examples_*.sh: run example job files
# of deploy/examples the way their header comment says, shortened.
#
# Each example documents its command in a comment line starting with
# "#   flotilla-run" (several lines: one per node, run together); a job
# without one runs as `flotilla-run JOB` (one trainer, local mode).  The
# test copies the job with data.limit_train / limit_test set, runs the
# command with --log_dir in a scratch directory and `-- --max-steps 5`
# for the trainers, and checks that every command exits 0 and that rank 0
# logged a training line and an evaluation ("] test ...").  An example
# whose mode this build of flotilla-trainer lacks, or that asks for a GPU
# this build or machine does not have, is reported as SKIP.
RUN=$FL_BUILDDIR/flotilla-run
ex_tmp=$(mktemp -d /tmp/fl_examples.XXXXXX)
trap 'rm -rf "$ex_tmp"' EXIT
cd "$ex_tmp" || exit 1
ex_fails=0 ex_ran=0 ex_skipped=0

run_example() {
  name=$(basename "$1" .yaml)
  job=$ex_tmp/$name.yaml
  sed 's/^data:$/data:\n  limit_train: 4096\n  limit_test: 1000/' "$1" > "$job"
  grep '^#   flotilla-run ' "$1" | sed 's/^#   flotilla-run //' > "$ex_tmp/$name.cmds"
  [ -s "$ex_tmp/$name.cmds" ] || echo "deploy/examples/$name.yaml" > "$ex_tmp/$name.cmds"
  k=0
  pids=
  # several nodes need one shared token (the header says to export one)
  token=
  [ "$(wc -l < "$ex_tmp/$name.cmds")" -gt 1 ] && token=examples-shared-secret-$$
  while IFS= read -r args; do
    k=$((k + 1))
    # shellcheck disable=SC2086 # the documented arguments, word-split
    set -- $(echo "$args" | sed "s|deploy/examples/$name.yaml|$job|")
    FLOTILLA_TOKEN=${token:-${FLOTILLA_TOKEN:-}} FLOTILLA_CHECKPOINT_DIR="$ex_tmp/$name.ckpt" \
      timeout 120 "$RUN" --log_dir "$ex_tmp/$name.log$k" "$@" -- --max-steps 5 \
      > "$ex_tmp/$name.out$k" 2>&1 &
    pids="$pids $!"
  done < "$ex_tmp/$name.cmds"
  status=0
  for pid in $pids; do wait "$pid" || status=$?; done
  if grep -q "is not available in this build" "$ex_tmp/$name".log*/workerlog.* 2> /dev/null; then
    echo "SKIP: $name (mode not in this flotilla-trainer yet)"
    ex_skipped=$((ex_skipped + 1))
    return
  fi
  if grep -q "train.device: gpu, but" "$ex_tmp/$name".log*/workerlog.* 2> /dev/null; then
    echo "SKIP: $name (needs a CUDA build and a GPU)"
    ex_skipped=$((ex_skipped + 1))
    return
  fi
  ex_ran=$((ex_ran + 1))
  if [ "$status" != 0 ] || ! grep -q "^\[Epoch 0, batch 0\] loss: " "$ex_tmp/$name.out1" ||
     ! grep -q "\] test " "$ex_tmp/$name.out1"; then
    echo "FAIL: $name (exit $status)"
    for f in "$ex_tmp/$name".out*; do echo "----- $f"; tail -n 40 "$f"; done
    ex_fails=$((ex_fails + 1))
  else
    echo "ok: $name"
  fi
}

finish_examples() {
  [ $ex_fails -eq 0 ] || exit 1
  [ $ex_ran -gt 0 ] || exit 77
  echo "PASS: $ex_ran examples ran, $ex_skipped skipped"
}
