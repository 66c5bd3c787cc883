#!/bin/sh
# bench_seq.sh - the BiLSTM text classifier example
# (deploy/examples/onnx/text_classifier.py / .yaml) trained by Flotilla
# beside the same module in PyTorch 1.13.  A benchmark, never a test.
#
# Usage: tests/bench/bench_seq.sh [BUILDDIR]      (default: $FL_BUILDDIR or ./build)
# Environment: BENCH_STEPS (200, timed steps), BENCH_REPS (3, alternating
# runs of each side; medians).
# Prints `name: value unit` lines:
#   lstm_samples_per_s, torch_lstm_samples_per_s, lstm_vs_torch
#       one trainer, one thread (BLAS and kernels), batch 64, no prefetch
#       thread, no eval; PyTorch one thread, the same module, Adam
#   lstm_2r_samples_per_s, torch_ddp_lstm_samples_per_s_2r, lstm_2r_vs_torch_ddp
#       two trainers (collective, ring over tcp), one thread each, 32 per
#       trainer, as the example job; PyTorch DDP over gloo, 32 per rank
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-${FL_BUILDDIR:-$top/build}}
trainer=$bdir/flotilla-trainer
run=$bdir/flotilla-run
py=/usr/bin/python3
ex=$top/deploy/examples/onnx
steps=${BENCH_STEPS:-200}
reps=${BENCH_REPS:-3}
[ -x "$trainer" ] && [ -x "$run" ] || { echo "bench_seq.sh: build first ($trainer)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }
train_rate() { grep '^\[Epoch [0-9]*\] train:' "$1" | sed 's/.*, \([0-9.]*\) samples\/s.*/\1/' | median; }
figure() { sed -n "s/^$1: \([0-9.]*\).*/\1/p" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "nan"}'; }

"$py" "$ex/text_classifier.py" data "$tmp" > /dev/null
"$py" "$ex/text_classifier.py" export "$tmp/model.onnx" > /dev/null 2>&1
# The example job at $1, on the scratch data, one epoch, no eval, no export.
job() {
  sed -e "s|/tmp/flotilla-text/|$tmp/|g" -e "/^  export_onnx: /d" -e "s/^  eval: .*/  eval: false/" \
    -e "s/^  epochs: .*/  epochs: 1/" "$ex/text_classifier.yaml" > "$1"
}
job "$tmp/speed.yaml"
sed -i -e "s/^  mode: collective/  mode: local/" -e "s/^  batch_size: .*/  batch_size: 64/" \
  -e "s/^  num_threads: .*/  num_threads: 1/" "$tmp/speed.yaml"
grep -q '^  prefetch:' "$tmp/speed.yaml" || sed -i 's/^  shuffle: true/  shuffle: true\n  prefetch: 0/' "$tmp/speed.yaml"
: > "$tmp/ours"
: > "$tmp/theirs"
i=0
while [ "$i" -lt "$reps" ]; do
  "$trainer" --config "$tmp/speed.yaml" --max-steps "$steps" > "$tmp/s.log" 2> "$tmp/s.err" ||
    { cat "$tmp/s.err" >&2; exit 1; }
  train_rate "$tmp/s.log" >> "$tmp/ours"
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" "$top/tests/bench/torch_seq_train.py" \
    --data "$tmp" --mode speed --steps "$steps" --batch 64 > "$tmp/t.log"
  figure torch_lstm_samples_per_s "$tmp/t.log" >> "$tmp/theirs"
  i=$((i + 1))
done
ours=$(median < "$tmp/ours")
theirs=$(median < "$tmp/theirs")
grep '^torch_version:' "$tmp/t.log"
echo "lstm_samples_per_s: $ours samples/s"
echo "torch_lstm_samples_per_s: $theirs samples/s"
echo "lstm_vs_torch: $(ratio "$ours" "$theirs") x"

job "$tmp/2r.yaml"
: > "$tmp/ours2"
: > "$tmp/theirs2"
i=0
while [ "$i" -lt "$reps" ]; do
  rm -rf "$tmp/2r.log"
  "$run" --nproc_per_node 2 --log_dir "$tmp/2r.log" "$tmp/2r.yaml" -- --max-steps "$steps" \
    > "$tmp/2r.out" 2>&1 || { tail -n 40 "$tmp/2r.out" "$tmp/2r.log"/workerlog.* >&2; exit 1; }
  r0=$(train_rate "$tmp/2r.log/workerlog.0")
  r1=$(train_rate "$tmp/2r.log/workerlog.1")
  awk -v a="$r0" -v b="$r1" 'BEGIN {printf "%.1f\n", a + b}' >> "$tmp/ours2"
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" "$top/tests/bench/torch_seq_train.py" \
    --data "$tmp" --mode ddp --world 2 --steps "$steps" --batch 32 > "$tmp/d.log" 2>&1 ||
    { cat "$tmp/d.log" >&2; exit 1; }
  figure torch_ddp_lstm_samples_per_s_2r "$tmp/d.log" >> "$tmp/theirs2"
  i=$((i + 1))
done
ours2=$(median < "$tmp/ours2")
theirs2=$(median < "$tmp/theirs2")
echo "lstm_2r_samples_per_s: $ours2 samples/s"
echo "torch_ddp_lstm_samples_per_s_2r: $theirs2 samples/s"
echo "lstm_2r_vs_torch_ddp: $(ratio "$ours2" "$theirs2") x"
