#!/bin/sh
# bench_dlrm.sh - the DLRM example (deploy/examples/recsys/dlrm_sync.yaml)
# trained by Flotilla, one trainer and one pserver, beside the same module
# in PyTorch 1.13 (torch_train.py: one thread, sparse gradients, Adagrad),
# on the same generated Criteo-format data, same epochs, file order
# (shuffle_buffer 0), batch 256.  A benchmark, never a pass/fail test.
#
# Usage: tests/bench/bench_dlrm.sh [BUILDDIR]   (default: $FL_BUILDDIR or ./build)
# Environment: BENCH_ROWS=100000 training rows (+10% test rows), BENCH_EPOCHS=1
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
#   dlrm_auc, torch_auc     test AUC of Flotilla's export (eval_export.py)
#                           and of the PyTorch-trained module
#   dlrm_auc_vs_torch       their difference (Flotilla - PyTorch)
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
  -e "s/epochs: .*/epochs: $epochs/" -e 's/batch_size: .*/batch_size: 256/' \
  -e 's/log_interval: .*/log_interval: 1000/' "$ex/dlrm_sync.yaml" > job.yaml

# children's user + system clock ticks of this shell (fields 16, 17 of stat)
child_ticks() { awk '{ print $16 + $17 }' "/proc/$$/stat"; }
hz=$(getconf CLK_TCK)
t0=$(child_ticks)
"$B/flotilla-run" --log_dir log --mode ps --server_num 1 --nproc_per_node 1 job.yaml > run.out 2>&1 ||
  { tail -20 run.out log/workerlog.* >&2; echo "bench_dlrm: flotilla-run failed" >&2; exit 1; }
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
echo "dlrm_auc: $auc"
echo "torch_auc: $tauc"
echo "dlrm_auc_vs_torch: $(awk -v a="$auc" -v b="$tauc" 'BEGIN { printf "%+.5f", a - b }')"
