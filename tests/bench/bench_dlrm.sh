#!/bin/sh
# bench_dlrm.sh - the DLRM example (deploy/examples/recsys/dlrm_sync.yaml)
# trained by Flotilla, one trainer and one pserver, beside the same module
# in PyTorch 1.13 (torch_train.py: one thread, sparse gradients, Adagrad),
# on the same generated Criteo-format data, same epochs, file order
# (shuffle_buffer 0), batch 256 (the test pass keeps the example's
# eval_batch_size).  A benchmark, never a pass/fail test.
#
# Usage: tests/bench/bench_dlrm.sh [BUILDDIR]   (default: $FL_BUILDDIR or ./build)
# Environment: BENCH_ROWS=100000 training rows (+10% test rows), BENCH_EPOCHS=1,
# BENCH_PULL_WAIT=1 adds the same job in PS async mode with pipelined pulls
# (pserver.sparse.pipeline true) and without (false), after the rest
#
# Prints `name: value unit` lines:
#   dlrm_samples_per_cpu_s  samples trained / CPU seconds of every Flotilla
#                           process of the job (flotilla-run, pserver,
#                           trainer: user + system, start to end, export
#                           included), read from /proc (the shell's
#                           children's times, which include the waited-for
#                           grandchildren)
#   torch_samples_per_cpu_s PyTorch's samples / CPU seconds of its training
#                           loop (the TSV parsing in Python left out)
#   dlrm_vs_torch           the ratio of the two
#   dlrm_train_cpu_s        the training epochs only, as PyTorch's figure is:
#                           the trainer's own CPU of its epochs (its "[Epoch
#                           N] train: ... cpu" lines: all its threads, the
#                           TSV parsing and the row pulls included) plus the
#                           pserver's CPU from the trainer's "training" line
#                           to its last epoch's line (sampled from /proc
#                           every 20 ms by a poller outside the measured
#                           processes; the test evaluation after the last
#                           epoch left out, but between epochs kept)
#   dlrm_fixed_cpu_s        the rest: start-up, registration, ONNX load, the
#                           counting pass over the data, test evaluation,
#                           export, shutdown
#   dlrm_train_samples_per_cpu_s, dlrm_train_vs_torch  the same two figures
#                           from dlrm_train_cpu_s
#   dlrm_auc, torch_auc     test AUC of Flotilla's export (eval_export.py)
#                           and of the PyTorch-trained module
#   dlrm_auc_vs_torch       their difference (Flotilla - PyTorch)
#   dlrm_pull_wait_share_async_pipelined, _sequential (BENCH_PULL_WAIT=1)
#                           the trainer's share of step time blocked on
#                           sparse rows (its "[Epoch N] pull_wait:" lines,
#                           the epochs' mean) in async mode, pipelined or not
# shellcheck disable=SC2015 # `A && echo ok || fail`: the echo never fails
set -u
B=${1:-${FL_BUILDDIR:-$PWD/build}}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
ex=$S/deploy/examples/recsys
py=/usr/bin/python3
rows=${BENCH_ROWS:-100000}
epochs=${BENCH_EPOCHS:-1}
tmp=$(mktemp -d /tmp/fl_bench_dlrm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

test_rows=$((rows / 10))
"$py" "$ex/gen_criteo.py" --rows $((rows + test_rows)) --seed 1 --out all.tsv > /dev/null 2>&1 &&
  head -n "$rows" all.tsv > train.tsv && tail -n "$test_rows" all.tsv > test.tsv &&
  FLOTILLA_BINDIR=$B "$py" "$ex/dlrm.py" export dlrm.onnx > /dev/null 2>&1 ||
  { echo "bench_dlrm: data or export failed" >&2; exit 1; }
sed -e "s|/tmp/flotilla-recsys/|$tmp/|g" -e 's/shuffle_buffer: .*/shuffle_buffer: 0/' \
  -e "s/epochs: .*/epochs: $epochs/" -e 's/^  batch_size: .*/  batch_size: 256/' \
  -e 's/log_interval: .*/log_interval: 1000/' "$ex/dlrm_sync.yaml" > job.yaml

# children's user + system clock ticks of this shell (fields 16, 17 of stat)
child_ticks() { awk '{ print $16 + $17 }' "/proc/$$/stat"; }
# user + system ticks of process $1 (its comm may hold no blank)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2> /dev/null; }
# The pserver's ticks at the trainer's "training" line and at its last
# epoch's line, into pserver_ticks (two lines), while flotilla-run ($1) runs.
poll_pserver() {
  ps='' a='' b=''
  while kill -0 "$1" 2> /dev/null && [ -z "$b" ]; do
    for p in $(pgrep -P "$1"); do
      [ "$(cat "/proc/$p/comm" 2> /dev/null)" = flotilla-pserve ] && ps=$p # 15 bytes of the name
    done
    if [ -n "$ps" ] && [ -z "$a" ] && grep -q '\] training ' log/workerlog.0 2> /dev/null; then
      a=$(ticks "$ps")
    elif [ -n "$a" ] && [ "$(grep -c '^\[Epoch [0-9]*\] train: ' log/workerlog.0)" -ge "$epochs" ]; then
      b=$(ticks "$ps")
    fi
    sleep 0.02
  done
  printf '%s\n%s\n' "$a" "$b" > pserver_ticks
}
hz=$(getconf CLK_TCK)
# A build tree's flotilla-* are libtool wrapper scripts (a shell, sed and ls
# each, before the program): the job runs the programs themselves, as an
# installed one does.
run_bin=$B/flotilla-run
if [ -x "$B/.libs/flotilla-run" ]; then
  run_bin=$B/.libs/flotilla-run
  export LD_LIBRARY_PATH="$B/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FLOTILLA_TRAINER_BIN="$B/.libs/flotilla-trainer" FLOTILLA_PSERVER_BIN="$B/.libs/flotilla-pserver"
fi
t0=$(child_ticks)
"$run_bin" --log_dir log --mode ps --server_num 1 --nproc_per_node 1 job.yaml > run.out 2>&1 &
run=$!
( poll_pserver "$run" & ) # orphaned at once: its time is never this shell's children's
wait "$run" ||
  { tail -n 20 run.out log/workerlog.* >&2; echo "bench_dlrm: flotilla-run failed" >&2; exit 1; }
t1=$(child_ticks)
samples=$(sed -n 's/^\[Epoch [0-9]*\] train: [0-9]* steps, \([0-9]*\) samples.*/\1/p' log/workerlog.0 |
  awk '{ s += $1 } END { print s }')
flo=$(awk -v s="$samples" -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.1f", s / (t / hz) }')
auc=$("$py" "$ex/eval_export.py" --model dlrm --export dlrm_sync_trained.onnx --test test.tsv |
  sed -n 's/^auc: //p')

"$py" "$ex/torch_train.py" --model dlrm --train train.tsv --test test.tsv --batch 256 \
  --epochs "$epochs" --optimizer adagrad --lr 0.05 > torch.out 2>&1 ||
  { cat torch.out >&2; echo "bench_dlrm: torch_train.py failed" >&2; exit 1; }
tps=$(sed -n 's/^torch_samples_per_cpu_s: \([0-9.]*\).*/\1/p' torch.out)
tauc=$(sed -n 's/^torch_auc: //p' torch.out)

echo "dlrm_samples: $samples samples"
echo "dlrm_cpu_s: $(awk -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }') s"
echo "dlrm_samples_per_cpu_s: $flo samples/s"
echo "torch_samples_per_cpu_s: $tps samples/s"
echo "dlrm_vs_torch: $(awk -v a="$flo" -v b="$tps" 'BEGIN { printf "%.3f", a / b }') x"
sleep 0.1 # the poller writes its figures once it sees the job's end
pst=$(awk 'NR == 1 { a = $1 } NR == 2 { b = $1 } END { if (a != "" && b != "") print b - a }' pserver_ticks 2> /dev/null)
tcpu=$(sed -n 's/^\[Epoch [0-9]*\] train: .*, cpu \([0-9.]*\) s$/\1/p' log/workerlog.0 |
  awk '{ s += $1 } END { print s }')
if [ -n "$pst" ] && [ -n "$tcpu" ]; then
  train=$(awk -v t="$tcpu" -v p="$pst" -v hz="$hz" 'BEGIN { printf "%.2f", t + p / hz }')
  tflo=$(awk -v s="$samples" -v c="$train" 'BEGIN { printf "%.1f", s / c }')
  echo "dlrm_train_cpu_s: $train s (trainer $tcpu s + pserver $(awk -v p="$pst" -v hz="$hz" 'BEGIN { printf "%.2f", p / hz }') s)"
  echo "dlrm_fixed_cpu_s: $(awk -v t=$((t1 - t0)) -v c="$train" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz - c }') s"
  echo "dlrm_train_samples_per_cpu_s: $tflo samples/s"
  echo "dlrm_train_vs_torch: $(awk -v a="$tflo" -v b="$tps" 'BEGIN { printf "%.3f", a / b }') x"
else
  echo "bench_dlrm: no training-only figure (the pserver was not seen training)" >&2
fi
echo "dlrm_auc: $auc"
echo "torch_auc: $tauc"
echo "dlrm_auc_vs_torch: $(awk -v a="$auc" -v b="$tauc" 'BEGIN { printf "%+.5f", a - b }')"

# The pull wait share of the same job in async mode, pipelined (the
# default) and not: pull_wait PIPELINE prints the trainer's mean share.
pull_wait() {
  sed -e 's/a_sync: .*/a_sync: true/' -e "s/^  sparse:$/  sparse:\n    pipeline: $1/" job.yaml > "pw_$1.yaml"
  "$run_bin" --log_dir "pw_$1" --mode ps --server_num 1 --nproc_per_node 1 "pw_$1.yaml" \
    > "pw_$1.out" 2>&1 || { tail -20 "pw_$1.out" >&2; echo "bench_dlrm: async run failed" >&2; return 1; }
  sed -n 's/.*\] pull_wait: \([0-9.]*\) of the step time.*/\1/p' "pw_$1/workerlog.0" |
    awk '{ s += $1; n++ } END { printf "%.4f", n ? s / n : 0 }'
}
if [ "${BENCH_PULL_WAIT:-0}" = 1 ]; then
  grep -q '^  sparse:$' job.yaml || { echo "bench_dlrm: no pserver.sparse section" >&2; exit 1; }
  echo "dlrm_pull_wait_share_async_pipelined: $(pull_wait true) share"
  echo "dlrm_pull_wait_share_async_sequential: $(pull_wait false) share"
fi
