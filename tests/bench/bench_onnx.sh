#!/bin/sh
# bench_onnx.sh - the ONNX examples (deploy/examples/onnx/) trained by
# Flotilla beside the same PyTorch modules in PyTorch 1.13.  A benchmark,
# never a pass/fail test.
#
# Usage: tests/bench/bench_onnx.sh [BUILDDIR]      (default: $FL_BUILDDIR or ./build)
# Environment:
#   BENCH_MODELS="resnet vit"   which examples
#   BENCH_EPOCHS=N              train N epochs instead of the job's (accuracy runs)
#   BENCH_STEPS=200             timed steps of the one-thread speed runs
#   BENCH_DDP_STEPS=200         timed steps per rank of the 2-rank runs
#   BENCH_REPS=3                alternating speed runs of each side (median)
#   BENCH_ACC=1                 0 skips the (long) accuracy runs
#
# Prints one `name: value unit` line per figure, for M in resnet, vit:
#   M_test_acc1, M_epochs         the example job as written (2 trainers,
#                                 collective, 64 per trainer), to the end
#   M_exported_torch_acc1         the model Flotilla exported, loaded back into
#                                 the PyTorch module (eval_onnx.py)
#   M_samples_per_s               one trainer, one thread (BLAS, kernels),
#                                 batch 128, no prefetch thread, no eval,
#                                 no augmentation (the PyTorch side has none):
#                                 median over the runs of the epoch line's rate
#   torch_M_samples_per_s         the same module in PyTorch, one thread,
#                                 OpenBLAS, batch 128, same optimizer (median)
#   M_vs_torch                    ratio of the two medians
#   M_2r_samples_per_s            two trainers (collective, tcp allreduce),
#                                 one thread each, 64 per trainer: both
#                                 ranks' samples per second together
#   torch_ddp_M_samples_per_s_2r  PyTorch DistributedDataParallel over gloo,
#                                 two processes of one thread, 64 per rank
#   M_2r_vs_torch_ddp             ratio
# The data are fmnist_to_npy.py's .npy files, written to a scratch directory.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-${FL_BUILDDIR:-$top/build}}
trainer=$bdir/flotilla-trainer
run=$bdir/flotilla-run
py=/usr/bin/python3
ex=$top/deploy/examples/onnx
steps=${BENCH_STEPS:-200}
ddp_steps=${BENCH_DDP_STEPS:-200}
reps=${BENCH_REPS:-3}
if [ ! -x "$trainer" ] || [ ! -x "$run" ]; then
  echo "bench_onnx.sh: no $trainer or $run (build first)" >&2
  exit 1
fi
"$py" -c 'import torch, onnx' 2>/dev/null || { echo "bench_onnx.sh: $py lacks torch or onnx" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
data=$tmp/fmnist

median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }
last_acc1() { grep '^\[Epoch [0-9]*\] test loss:' "$1" | tail -n 1 | sed 's/.*acc1: \([0-9.]*\).*/\1/'; }
n_evals() { grep -c '^\[Epoch [0-9]*\] test loss:' "$1" || true; }
train_rate() { grep '^\[Epoch [0-9]*\] train:' "$1" | sed 's/.*, \([0-9.]*\) samples\/s.*/\1/' | median; }
figure() { sed -n "s/^$1: \([0-9.]*\).*/\1/p" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "nan"}'; }
# A copy of job $1 at $2, pointing at the scratch data and model $3, with
# more sed expressions applied.
job_copy() {
  src=$1 dst=$2 onnx=$3
  shift 3
  sed -e "s|/tmp/flotilla-fmnist/\([a-z_]*\)\.npy|$data/\1.npy|" \
    -e "s|^  path: .*|  path: $onnx|" \
    -e "s|^  export_onnx: .*|  export_onnx: $tmp/$(basename "$onnx" .onnx)_trained.onnx|" \
    "$src" > "$dst"
  for e in "$@"; do sed -i "$e" "$dst"; done
}

alt=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}')
echo "blas_alternative: ${alt:-unknown}"
"$py" "$ex/fmnist_to_npy.py" "$data" > /dev/null

for m in ${BENCH_MODELS:-resnet vit}; do
  "$py" "$ex/${m}_fmnist.py" export "$tmp/$m.onnx" > /dev/null 2>&1
  job=$ex/${m}_fmnist.yaml

  # ------------------------------------------------------------ accuracy
  if [ "${BENCH_ACC:-1}" != 0 ]; then
    acc_job=$tmp/${m}_acc.yaml
    job_copy "$job" "$acc_job" "$tmp/$m.onnx"
    [ -n "${BENCH_EPOCHS:-}" ] && sed -i "s/^  epochs: .*/  epochs: $BENCH_EPOCHS/" "$acc_job"
    "$run" --nproc_per_node 2 --log_dir "$tmp/${m}_acc.log" "$acc_job" > "$tmp/${m}_acc.out" 2>&1 ||
      { tail -n 40 "$tmp/${m}_acc.out" "$tmp/${m}_acc.log"/workerlog.* >&2; exit 1; }
    echo "${m}_test_acc1: $(last_acc1 "$tmp/${m}_acc.log/workerlog.0")"
    echo "${m}_epochs: $(n_evals "$tmp/${m}_acc.log/workerlog.0")"
    "$py" "$ex/eval_onnx.py" "$m" "$tmp/${m}_trained.onnx" "$data" > "$tmp/${m}_eval.out" 2>&1 ||
      { cat "$tmp/${m}_eval.out" >&2; exit 1; }
    echo "${m}_exported_torch_acc1: $(sed -n 's/^test acc1: \([0-9.]*\).*/\1/p' "$tmp/${m}_eval.out")"
  fi

  # ------------------------------------------------- one thread, batch 128
  speed_job=$tmp/${m}_speed.yaml
  job_copy "$job" "$speed_job" "$tmp/$m.onnx" "s/^  mode: collective/  mode: local/" \
    "s/^  batch_size: .*/  batch_size: 128/" "s/^  prefetch: .*/  prefetch: 0/" \
    "s/^  num_threads: .*/  num_threads: 1/" "s/^  eval: .*/  eval: false/" \
    "s/^  epochs: .*/  epochs: 1/" "/^  export_onnx: /d" "/^  augment: /d"
  : > "$tmp/ours"
  : > "$tmp/theirs"
  i=0
  while [ "$i" -lt "$reps" ]; do
    "$trainer" --config "$speed_job" --max-steps "$steps" > "$tmp/s.log" 2> "$tmp/s.err" ||
      { cat "$tmp/s.err" >&2; exit 1; }
    train_rate "$tmp/s.log" >> "$tmp/ours"
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" "$top/tests/bench/torch_onnx_train.py" \
      --model "$m" --data "$data" --mode speed --steps "$steps" --batch 128 --threads 1 > "$tmp/t.log"
    figure "torch_${m}_samples_per_s" "$tmp/t.log" >> "$tmp/theirs"
    i=$((i + 1))
  done
  ours=$(median < "$tmp/ours")
  theirs=$(median < "$tmp/theirs")
  grep -E '^torch_(version|threads):' "$tmp/t.log"
  echo "${m}_samples_per_s: $ours samples/s"
  echo "torch_${m}_samples_per_s: $theirs samples/s"
  echo "${m}_vs_torch: $(ratio "$ours" "$theirs") x"

  # ------------------------------------------- two ranks, one thread each
  coll_job=$tmp/${m}_2r.yaml
  job_copy "$job" "$coll_job" "$tmp/$m.onnx" "s/^  eval: .*/  eval: false/" \
    "s/^  epochs: .*/  epochs: 1/" "/^  export_onnx: /d" "/^  augment: /d"
  "$run" --nproc_per_node 2 --log_dir "$tmp/${m}_2r.log" "$coll_job" -- --max-steps "$ddp_steps" \
    > "$tmp/${m}_2r.out" 2>&1 || { tail -n 40 "$tmp/${m}_2r.out" "$tmp/${m}_2r.log"/workerlog.* >&2; exit 1; }
  r0=$(train_rate "$tmp/${m}_2r.log/workerlog.0")
  r1=$(train_rate "$tmp/${m}_2r.log/workerlog.1")
  ours2=$(awk -v a="$r0" -v b="$r1" 'BEGIN {printf "%.1f", a + b}')
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" "$top/tests/bench/torch_onnx_train.py" \
    --model "$m" --data "$data" --mode ddp --world 2 --steps "$ddp_steps" --batch 64 > "$tmp/d.log" 2>&1 ||
    { cat "$tmp/d.log" >&2; exit 1; }
  theirs2=$(figure "torch_ddp_${m}_samples_per_s_2r" "$tmp/d.log")
  echo "${m}_2r_samples_per_s: $ours2 samples/s"
  echo "torch_ddp_${m}_samples_per_s_2r: $theirs2 samples/s"
  echo "${m}_2r_vs_torch_ddp: $(ratio "$ours2" "$theirs2") x"
done
