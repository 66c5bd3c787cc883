#!/bin/sh
# bench_train.sh - training quality and speed of flotilla-trainer on
# Fashion-MNIST, beside PyTorch.  A benchmark, never a pass/fail test.
#
# Usage: tests/bench/bench_train.sh [BUILDDIR]      (default: $FL_BUILDDIR or ./build)
# Environment:
#   BENCH_REPS=3         alternating one-epoch speed runs of each side
#   BENCH_CNN=1          0 skips the (long) CNN accuracy run
#   BENCH_CNN_EPOCHS=N   train the CNN for N epochs instead of the job's
#   BENCH_MLP_EPOCHS=N   the same for the MLP accuracy run
#
# Prints one `name: value unit` line per figure:
#   mlp_test_acc1, mlp_epochs     deploy/examples/mlp_fmnist.yaml to the end
#   mlp_samples_per_s             MLP 784-256-128-100-10 training, batch 64,
#                                 one thread (BLAS 1 thread, no prefetch
#                                 thread: data gathered inline), median epoch
#   torch_mlp_samples_per_s       the same model, optimizer and batch in
#                                 PyTorch (tests/bench/torch_mlp.py), one
#                                 thread, OpenBLAS, batch gathered in the
#                                 timed loop as ours is; median epoch
#   torch_mlp_pregathered_samples_per_s   the same with each epoch's batches
#                                 gathered before the clock starts
#                                 (PyTorch's best case)
#   mlp_vs_torch, mlp_vs_torch_pregathered   ratios of the medians; the
#                                 three kinds of run alternate
#   *_cpu_samples_per_s, *_vs_torch*_cpu   the same per CPU-second of the
#                                 process instead of per wall-clock second
#                                 (steadier when the machine is shared)
#   cnn_test_acc1, cnn_epochs, cnn_samples_per_s   deploy/examples/cnn_fmnist.yaml
# PyTorch comes from Debian's python3-torch (installed with apt-get when
# missing and running as root); its BLAS must be OpenBLAS, not the reference
# BLAS (about 13x slower), so the libblas.so.3 alternative is checked and,
# as root, switched to OpenBLAS.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-${FL_BUILDDIR:-$top/build}}
trainer=$bdir/flotilla-trainer
reps=${BENCH_REPS:-3}
py=/usr/bin/python3
[ -x "$trainer" ] || { echo "bench_train.sh: no $trainer (build first)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }

# A copy of an example job with `key: value` lines replaced (sed exprs).
job_copy() { # src dst sed-expr...
  src=$1 dst=$2
  shift 2
  cp "$src" "$dst"
  for e in "$@"; do sed -i "$e" "$dst"; done
}

# Last eval line's acc1 / number of eval lines / median train samples/s.
last_acc1() { grep '^\[Epoch [0-9]*\] test loss:' "$1" | tail -n 1 | sed 's/.*acc1: \([0-9.]*\).*/\1/'; }
n_evals() { grep -c '^\[Epoch [0-9]*\] test loss:' "$1" || true; }
train_rate() { grep '^\[Epoch [0-9]*\] train:' "$1" | sed 's/.*, \([0-9.]*\) samples\/s.*/\1/' | median; }
# samples per CPU-second of the process (the line's "cpu N s")
train_cpu_rate() {
  grep '^\[Epoch [0-9]*\] train:' "$1" |
    sed 's/.* \([0-9]*\) samples, .*cpu \([0-9.]*\) s$/\1 \2/' | awk '{printf "%.1f\n", $1 / $2}' | median
}
# value of `name: value ...` in a file
figure() { sed -n "s/^$1: \([0-9.]*\).*/\1/p" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# ---------------------------------------------------------------- PyTorch
have_torch=1
if ! "$py" -c 'import torch' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "bench_train.sh: installing python3-torch" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >&2 || have_torch=0
  else
    have_torch=0
  fi
fi
alt=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}')
case "$alt" in
*openblas*) ;;
*)
  ob=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
  if [ "$(id -u)" -eq 0 ] && [ -e "$ob" ]; then
    echo "bench_train.sh: libblas.so.3 was '$alt'; switching it to OpenBLAS" >&2
    update-alternatives --set libblas.so.3-x86_64-linux-gnu "$ob" >&2
    alt=$ob
  else
    echo "bench_train.sh: warning: libblas.so.3 is '$alt', not OpenBLAS" >&2
  fi
  ;;
esac
echo "blas_alternative: ${alt:-unknown}"

# ------------------------------------------------------------ MLP quality
mlp_job=$tmp/mlp.yaml
if [ -n "${BENCH_MLP_EPOCHS:-}" ]; then
  job_copy "$top/deploy/examples/mlp_fmnist.yaml" "$mlp_job" "s/^  epochs: .*/  epochs: $BENCH_MLP_EPOCHS/"
else
  cp "$top/deploy/examples/mlp_fmnist.yaml" "$mlp_job"
fi
"$trainer" --config "$mlp_job" >"$tmp/mlp.log" 2>"$tmp/mlp.err" ||
  { cat "$tmp/mlp.err" >&2; exit 1; }
echo "mlp_test_acc1: $(last_acc1 "$tmp/mlp.log")"
echo "mlp_epochs: $(n_evals "$tmp/mlp.log")"

# -------------------------------------------------------------- MLP speed
# One epoch (937 steps of 64) per run; everything on one thread.
speed_job=$tmp/mlp_speed.yaml
job_copy "$top/deploy/examples/mlp_fmnist.yaml" "$speed_job" \
  "s/^  prefetch: .*/  prefetch: 0/" "s/^  num_threads: .*/  num_threads: 1/" \
  "s/^  eval: .*/  eval: false/"
for f in ours ours_cpu theirs theirs_cpu theirs_pre theirs_pre_cpu; do : >"$tmp/$f"; done
i=0
while [ "$i" -lt "$reps" ]; do
  "$trainer" --config "$speed_job" --max-steps 937 >"$tmp/s.log" 2>"$tmp/s.err" ||
    { cat "$tmp/s.err" >&2; exit 1; }
  train_rate "$tmp/s.log" >>"$tmp/ours"
  train_cpu_rate "$tmp/s.log" >>"$tmp/ours_cpu"
  if [ "$have_torch" -eq 1 ]; then
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
      "$py" "$top/tests/bench/torch_mlp.py" --epochs 1 --threads 1 >"$tmp/t.log"
    figure torch_mlp_samples_per_s "$tmp/t.log" >>"$tmp/theirs"
    figure torch_mlp_cpu_samples_per_s "$tmp/t.log" >>"$tmp/theirs_cpu"
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
      "$py" "$top/tests/bench/torch_mlp.py" --epochs 1 --threads 1 --pregather >"$tmp/tp.log"
    figure torch_mlp_pregathered_samples_per_s "$tmp/tp.log" >>"$tmp/theirs_pre"
    figure torch_mlp_pregathered_cpu_samples_per_s "$tmp/tp.log" >>"$tmp/theirs_pre_cpu"
  fi
  i=$((i + 1))
done
ours=$(median <"$tmp/ours")
ours_cpu=$(median <"$tmp/ours_cpu")
echo "mlp_samples_per_s: $ours samples/s"
echo "mlp_cpu_samples_per_s: $ours_cpu samples/s"
if [ "$have_torch" -eq 1 ]; then
  theirs=$(median <"$tmp/theirs")
  theirs_cpu=$(median <"$tmp/theirs_cpu")
  theirs_pre=$(median <"$tmp/theirs_pre")
  theirs_pre_cpu=$(median <"$tmp/theirs_pre_cpu")
  grep -E '^torch_(version|blas|threads|openblas_threads):' "$tmp/t.log"
  echo "torch_mlp_samples_per_s: $theirs samples/s"
  echo "torch_mlp_cpu_samples_per_s: $theirs_cpu samples/s"
  echo "torch_mlp_pregathered_samples_per_s: $theirs_pre samples/s"
  echo "torch_mlp_pregathered_cpu_samples_per_s: $theirs_pre_cpu samples/s"
  echo "mlp_vs_torch: $(ratio "$ours" "$theirs") x"
  echo "mlp_vs_torch_cpu: $(ratio "$ours_cpu" "$theirs_cpu") x"
  echo "mlp_vs_torch_pregathered: $(ratio "$ours" "$theirs_pre") x"
  echo "mlp_vs_torch_pregathered_cpu: $(ratio "$ours_cpu" "$theirs_pre_cpu") x"
else
  echo "bench_train.sh: python3-torch unavailable, no PyTorch figures" >&2
fi

# ------------------------------------------------------------ CNN quality
if [ "${BENCH_CNN:-1}" != 0 ]; then
  cnn_job=$tmp/cnn.yaml
  if [ -n "${BENCH_CNN_EPOCHS:-}" ]; then
    job_copy "$top/deploy/examples/cnn_fmnist.yaml" "$cnn_job" "s/^  epochs: .*/  epochs: $BENCH_CNN_EPOCHS/"
  else
    cp "$top/deploy/examples/cnn_fmnist.yaml" "$cnn_job"
  fi
  "$trainer" --config "$cnn_job" >"$tmp/cnn.log" 2>"$tmp/cnn.err" ||
    { cat "$tmp/cnn.err" >&2; exit 1; }
  echo "cnn_test_acc1: $(last_acc1 "$tmp/cnn.log")"
  echo "cnn_epochs: $(n_evals "$tmp/cnn.log")"
  echo "cnn_samples_per_s: $(train_rate "$tmp/cnn.log") samples/s"
fi
