#!/bin/sh
# bench_lstm.sh - the recurrent ops' speed: a BiLSTM text classifier
# (embedding output [64, 32, 64], one bidirectional LSTM of hidden 64, its
# final states into a Linear head, softmax cross-entropy) exported from
# PyTorch 1.13 by lstm_torch.py, one forward+backward step at batch 64 on
# one thread, Flotilla (bench_lstm, the imported file on the graph engine)
# beside PyTorch (torch.set_num_threads(1)).  A benchmark, never a
# pass/fail test.
#
# Usage: tests/bench/bench_lstm.sh [BUILDDIR]      (default: $FL_BUILDDIR or ./build)
# Environment: BENCH_STEPS=30 timed steps per run, BENCH_REPS=3 runs per
# side (alternating; medians).
# Prints `lstm_samples_per_s`, `torch_lstm_samples_per_s` (medians of
# wall-time rates) and `lstm_vs_torch` (their ratio); then the same per
# second of CPU time (`*_per_cpu_s`, `lstm_vs_torch_cpu`), steadier when
# the machine is shared.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-${FL_BUILDDIR:-$top/build}}
bench=$bdir/tests/bench/bench_lstm
py=/usr/bin/python3
steps=${BENCH_STEPS:-30}
reps=${BENCH_REPS:-3}
if [ ! -x "$bench" ]; then
  echo "bench_lstm.sh: no $bench (make -C $bdir tests/bench/bench_lstm)" >&2
  exit 1
fi
"$py" -c 'import torch, onnx' 2>/dev/null || { echo "bench_lstm.sh: $py lacks torch or onnx" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
"$py" "$top/tests/bench/lstm_torch.py" export "$tmp/lstm.onnx" 2>/dev/null

median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }
value() { sed -n "s/^$1: \([0-9.]*\).*/\1/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "nan"}'; }
i=0
while [ "$i" -lt "$reps" ]; do
  "$bench" "$tmp/lstm.onnx" 64 "$steps" 1 > "$tmp/o"
  "$py" "$top/tests/bench/lstm_torch.py" time "$steps" 1 > "$tmp/t"
  value lstm_samples_per_s < "$tmp/o" >> "$tmp/ours"
  value lstm_samples_per_cpu_s < "$tmp/o" >> "$tmp/ours_cpu"
  value torch_lstm_samples_per_s < "$tmp/t" >> "$tmp/torch"
  value torch_lstm_samples_per_cpu_s < "$tmp/t" >> "$tmp/torch_cpu"
  i=$((i + 1))
done
ours=$(median < "$tmp/ours")
theirs=$(median < "$tmp/torch")
ours_cpu=$(median < "$tmp/ours_cpu")
theirs_cpu=$(median < "$tmp/torch_cpu")
echo "lstm_samples_per_s: $ours samples/s"
echo "torch_lstm_samples_per_s: $theirs samples/s"
echo "lstm_vs_torch: $(ratio "$ours" "$theirs") x"
echo "lstm_samples_per_cpu_s: $ours_cpu samples/s"
echo "torch_lstm_samples_per_cpu_s: $theirs_cpu samples/s"
echo "lstm_vs_torch_cpu: $(ratio "$ours_cpu" "$theirs_cpu") x"
