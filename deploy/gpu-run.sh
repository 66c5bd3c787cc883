#!/bin/sh
# run.sh - the GPU bundle's checks (built by make gpu-bundle from
# deploy/gpu-run.sh): every CUDA test, the CUDA optimizer benchmark, the
# graph ops' CUDA twins against the CPU ops, the one-rank NCCL communicator
# test and one epoch of the GPU AMP example, each under a timeout and all
# within a total budget (4 minutes on one H100 by design).
#
# Usage: sh run.sh [ITEM...]      (no ITEM: all, in the order below)
# Environment:
#   FL_REPORT_DIR   where report.txt and logs/ go (default: this folder)
#   FL_BUDGET_S     the whole run's seconds (default 230)
#   FL_CUDA_LIBDIR  where cuBLAS 13, cuDNN 9 and NCCL 2 are, if not found
#   FMNIST_DIR      Fashion-MNIST .gz files for the AMP epoch (default: the
#                   bundled slice, else /usr/share/datasets/fashion-mnist)
#
# report.txt: `# ...` header lines, then one line per item, written as soon
# as the item ends: NAME STATUS SECONDS FIGURES (STATUS PASS, FAIL or SKIP;
# FIGURES: the test summary, the measured rates, or why it was skipped).
# Exit status: 1 if an item failed, 77 if none passed (nothing verified),
# else 0.
set -u

here=$(cd "$(dirname "$0")" && pwd)
rdir=${FL_REPORT_DIR:-$here}
report=$rdir/report.txt
logs=$rdir/logs
budget=${FL_BUDGET_S:-230}
start=$(date +%s)
npass=0 nfail=0
gpu_seen=0 gpu_note=

mkdir -p "$logs" || exit 1
: > "$report" || exit 1
export LC_ALL=C

# name timeout(s) kind: the order is the priority when time runs short.
items='test_cuda_optim 40 check
bench_optim_cuda 40 bench
test_cuda_layers 40 check
test_cuda_syncbn 40 check
test_coll_nccl 40 check
test_graph_ops_cuda 60 check
test_model_cuda 60 check
amp_cnn_fmnist_epoch 90 amp
test_trainer_device 90 check'

now() { date +%s.%N | cut -c1-14; }
elapsed() { echo "$(now) $1" | awk '{printf "%.1f", $1 - $2}'; }

line() { # name status seconds figures...
  n=$1 s=$2 t=$3; shift 3
  printf '%s %s %s %s\n' "$n" "$s" "$t" "$*" >> "$report"
  printf '%-22s %-4s %6ss  %s\n' "$n" "$s" "$t" "$*"
  case $s in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; esac
}

# The GPU as the driver sees it: sets gpu_seen and gpu_note.
probe_gpu() {
  if ! command -v nvidia-smi >/dev/null; then
    gpu_note="no nvidia-smi: no NVIDIA driver here"
    return
  fi
  gpus=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>/dev/null | tr '\n' ';')
  dcuda=$(timeout 20 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p')
  [ -n "$gpus" ] && gpu_seen=1
  gpu_note="gpus=[${gpus:-none}] driver_cuda=${dcuda:-?}"
}

# Make cuBLAS, cuDNN and NCCL findable: FL_CUDA_LIBDIR, then the usual
# places, then a bounded search; prints the sonames still missing.
find_cuda_libs() {
  need=$(sed -n 's/^flbundle-[0-9]*: .*needs: //p' "$here/MANIFEST" | tr ' ' '\n' |
    grep -E '^lib(cublas|cudnn|nccl)' | sort -u)
  dirs="${FL_CUDA_LIBDIR:-} ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64"
  missing=
  for so in $need; do
    found=
    for d in $dirs $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
      [ -e "$d/$so" ] && found=$d && break
    done
    [ -z "$found" ] && /sbin/ldconfig -p 2>/dev/null | grep -q "$so " && found=system
    [ -z "$found" ] && found=$(timeout 30 find /usr/local /opt /usr/lib /usr/lib64 \
      /usr/local/lib/python3* -maxdepth 7 -name "$so" 2>/dev/null | head -1 | xargs -r dirname)
    case $found in
      '') missing="$missing $so" ;;
      system) ;;
      *) LD_LIBRARY_PATH=$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
    esac
  done
  export LD_LIBRARY_PATH
  echo "$missing"
}

preflight() {
  t0=$(now)
  probe_gpu
  missing=$(find_cuda_libs)
  glibc=$(ldd --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')
  figures="$gpu_note glibc=${glibc:-?} missing_libs=[${missing# }]"
  if [ "$gpu_seen" = 1 ]; then line preflight PASS "$(elapsed "$t0")" "$figures"
  else line preflight SKIP "$(elapsed "$t0")" "no GPU: $figures"; fi
}

# What a finished item's log says, in one line.
figures_of() { # kind log
  case $1 in
    check) grep -E '^[0-9]+%: Checks' "$2" | tail -n 1 ;;
    bench) grep -E '_gbps|params:|unavailable' "$2" | tr '\n' ';' ;;
    amp) grep -E '^\[Epoch 0\] (train|test)' "$2" | sed 's/^\[Epoch 0\] //' | tr '\n' ';' ;;
  esac
}

# The Fashion-MNIST folder for the AMP epoch, on stdout (none: nothing).
amp_data() {
  for d in "${FMNIST_DIR:-}" "$here/data/fashion-mnist" /usr/share/datasets/fashion-mnist; do
    [ -n "$d" ] && [ -r "$d/train-images-idx3-ubyte.gz" ] && echo "$d" && return
  done
}

run_item() { # name timeout kind
  name=$1 lim=$2 kind=$3 log=$logs/$1.log
  left=$((budget - ($(date +%s) - start) - 5))
  [ "$left" -lt 10 ] && { line "$name" SKIP 0 "out of time (FL_BUDGET_S=$budget)"; return; }
  [ "$lim" -gt "$left" ] && lim=$left
  set -- "$here/bin/$name"
  if [ "$kind" = amp ]; then
    data=$(amp_data)
    [ -z "$data" ] && { line "$name" SKIP 0 "no Fashion-MNIST (bundled, FMNIST_DIR or" \
      "/usr/share/datasets/fashion-mnist)"; return; }
    sed "s|@DATA@|$data|" "$here/job/gpu_amp_cnn_fmnist.yaml" > "$logs/$name.yaml"
    set -- "$here/bin/flotilla-trainer" --config "$logs/$name.yaml"
  fi
  t0=$(now)
  (cd "$logs" && FL_BUILDDIR=$here/bin CK_DEFAULT_TIMEOUT=$lim \
    timeout -k 5 "$lim" "$@") > "$log" 2>&1
  rc=$?
  secs=$(elapsed "$t0")
  fig=$(figures_of "$kind" "$log")
  skip=$(grep -E '^SKIP|^cuda: unavailable' "$log" | head -1)
  nodev=$(grep -c 'no CUDA device' "$log")
  case $rc in
    0 | 77)
      if [ -n "$skip" ] || [ "$rc" = 77 ]; then
        if [ "$gpu_seen" = 1 ]; then
          line "$name" FAIL "$secs" "the driver shows a GPU but: ${skip:-exit 77};" \
            "a driver older than the bundle's CUDA (see MANIFEST, preflight)?"
        else line "$name" SKIP "$secs" "${skip:-exit 77}"; fi
      elif [ "$nodev" -gt 0 ] && [ "$gpu_seen" = 1 ]; then
        line "$name" FAIL "$secs" "the driver shows a GPU but the run says no CUDA device"
      elif [ "$nodev" -gt 0 ]; then
        line "$name" SKIP "$secs" "no CUDA device; only the parts that need none ran: $fig"
      else line "$name" PASS "$secs" "$fig"; fi ;;
    124 | 137) line "$name" FAIL "$secs" "timed out after ${lim}s; $fig" ;;
    127) line "$name" SKIP "$secs" "cannot start: $(grep -m1 -E 'not found|error' "$log")" ;;
    *)
      if grep -q 'error while loading shared libraries' "$log"; then
        line "$name" SKIP "$secs" "cannot start: $(grep -m1 'error while loading' "$log")"
      elif [ "$gpu_seen" = 0 ] && [ "$nodev" -gt 0 ]; then
        line "$name" SKIP "$secs" "no CUDA device (see logs/$name.log)"
      else line "$name" FAIL "$secs" "exit $rc; $fig; see logs/$name.log"; fi ;;
  esac
}

{
  echo "# flotilla GPU bundle checks, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  sed 's/^/# /' "$here/MANIFEST"
} >> "$report"
preflight
wanted=" $* "
echo "$items" | while read -r name lim kind; do
  [ "$wanted" = "  " ] || case $wanted in *" $name "*) ;; *) continue ;; esac
  run_item "$name" "$lim" "$kind"
  echo "$npass $nfail" > "$logs/.counts"
done
read -r npass nfail < "$logs/.counts" 2>/dev/null || true
rm -f "$logs/.counts"
echo "report: $report"
[ "$nfail" -gt 0 ] && exit 1
[ "$npass" -eq 0 ] && exit 77
exit 0
