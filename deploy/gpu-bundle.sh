#!/bin/sh
# gpu-bundle.sh - build the GPU bundle (make gpu-bundle runs it in a CUDA
# build tree): the CUDA tests, the CUDA benchmark and flotilla-trainer
# relinked so that they run on a GPU machine that has none of our Debian
# libraries, with run.sh, a slice of Fashion-MNIST and a MANIFEST.
#
# Usage (from the build tree, after the programs are built):
#   deploy/gpu-bundle.sh SPEC SRCDIR OUTDIR
# SPEC has one line per program, `prog NAME OBJECTS...`, and one line
# `lib LIBTOOL-OBJECTS...` (every object of our libraries).
# Environment: CC, CUDA_HOME, PKG_CONFIG, SAN_FLAGS (from configure); FMNIST_DIR (the
# Fashion-MNIST .gz files, default /usr/share/datasets/fashion-mnist);
# FL_BUNDLE_TRAIN / FL_BUNDLE_TEST (examples bundled, default 12000 / 10000).
#
# How: our libraries' objects go into one static archive; every Debian
# library is linked from its static archive (-Wl,-Bstatic), libcudart from
# libcudart_static.a; cuBLAS, cuDNN and NCCL (far over the 64 MiB budget)
# stay shared, taken from the GPU machine, and only the programs that call
# them need them (--as-needed).  Programs needing the same shared libraries
# become one multi-call executable (gpu_bundle_main.c), so the static
# libraries are there once per executable; bin/NAME is a two-line wrapper.
set -eu

spec=$1 srcdir=$2 out=$3
CC=${CC:-gcc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
FMNIST_DIR=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
FL_BUNDLE_TRAIN=${FL_BUNDLE_TRAIN:-12000}
FL_BUNDLE_TEST=${FL_BUNDLE_TEST:-10000}
budget=$((64 * 1024 * 1024))
work=$PWD/gpu-bundle.work

die() { echo "gpu-bundle: $*" >&2; exit 1; }

[ -z "${SAN_FLAGS:-}" ] ||
  die "this tree is built with sanitizers (their runtime cannot go in the bundle): use a" \
    "CUDA tree configured without --enable-sanitizers"
[ -n "${CUDA_HOME:-}" ] && [ -f "$CUDA_HOME/lib64/libcudart_static.a" ] ||
  die "no libcudart_static.a under CUDA_HOME='${CUDA_HOME:-}' (configure --with-cuda=DIR)"
for tool in ar ld objcopy objdump strip readelf gzip; do
  command -v $tool >/dev/null || die "$tool not found (apt-get install binutils gzip)"
done

# The Debian libraries, static.  libsystemd and libmicrohttpd have no usable
# static archive: gpu_bundle_stubs.c stands in for them.
deps=$($PKG_CONFIG --static --libs grpc libprotobuf-c yaml-0.1 zlib openblas check)
static_libs=
for f in $deps; do
  case $f in
    -pthread | -lpthread | -ldl | -lrt | -lm) ;;
    -l*) static_libs="$static_libs $f" ;;
    -L* | -Wl,*) static_libs="$static_libs $f" ;;
  esac
done
static_libs="$static_libs -luv_a -lgomp -lstdc++"
cuda_libs="-L$CUDA_HOME/lib64 -lcudart_static -lcudnn -lcublas -lnccl"

rm -rf "$work"
mkdir -p "$work"

# Our libraries: the PIC object of each libtool object (or its only one).
lib_archive() {
  objs=
  for lo in "$@"; do
    o=$(sed -n "s/^pic_object='\(.*\)'/\1/p" "$lo")
    [ "$o" = none ] && o=$(sed -n "s/^non_pic_object='\(.*\)'/\1/p" "$lo")
    objs="$objs $(dirname "$lo")/$o"
  done
  # shellcheck disable=SC2086
  ar rcs "$work/libfl.a" $objs
}

# One program's objects as one relocatable object whose main is
# fl_bundle_main_<i> and whose other symbols are local (two tests may
# define the same helper names).
prog_object() { # i name objs...
  i=$1; shift 2
  ld -r -o "$work/p$i.o" "$@"
  objcopy --redefine-sym main=fl_bundle_main_$i --keep-global-symbol=fl_bundle_main_$i \
    "$work/p$i.o"
}

# Link the executable $1 from the program indexes that follow.
link_group() { # exe i...
  exe=$1; shift
  decls='' rows='' objs=''
  for i in "$@"; do
    decls="$decls int fl_bundle_main_$i(int, char **);"
    rows="$rows {\"$(sed -n "${i}p" "$work/names")\", fl_bundle_main_$i},"
    objs="$objs $work/p$i.o"
  done
  $CC -std=c11 -O2 -Wall -Wextra -Werror "-DFL_BUNDLE_DECLS=$decls" "-DFL_BUNDLE_ROWS=$rows" \
    -c -o "$work/main.o" "$srcdir/deploy/gpu_bundle_main.c"
  # shellcheck disable=SC2086
  $CC -o "$exe" "$work/main.o" $objs "$work/libfl.a" "$work/stubs.a" \
    -Wl,-Bstatic -Wl,--start-group $static_libs -Wl,--end-group -Wl,-Bdynamic \
    -Wl,--as-needed $cuda_libs -ldl -lrt -lpthread -lm -static-libgcc
  strip "$exe"
}

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' '; }

# Only the C library and CUDA may stay dynamic.
check_needed() { # exe
  for so in $(needed "$1"); do
    case $so in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*) ;;
      libcuda.so.* | libcudart.so.* | libcublas*.so.* | libcudnn*.so.* | libnccl.so.*) ;;
      *) die "$1 still needs $so dynamically (only libc and CUDA may)" ;;
    esac
  done
}

# An idx file's first n items (header count rewritten), gzipped.
idx_slice() { # src dst n header_bytes item_bytes
  c=$3
  be=$(printf '\\%03o\\%03o\\%03o\\%03o' $((c >> 24 & 255)) $((c >> 16 & 255)) \
    $((c >> 8 & 255)) $((c & 255)))
  { gzip -dc "$1" | head -c 4; printf "$be"; gzip -dc "$1" | tail -c +9 | head -c $(($4 - 8));
    gzip -dc "$1" | tail -c +$(($4 + 1)) | head -c $(($3 * $5)); } | gzip -9 > "$2"
}

bundle_data() {
  mkdir -p "$out/data/fashion-mnist"
  d=$out/data/fashion-mnist
  if [ ! -r "$FMNIST_DIR/train-images-idx3-ubyte.gz" ]; then
    echo "gpu-bundle: no Fashion-MNIST in $FMNIST_DIR (set FMNIST_DIR): bundled without" \
      "data; run.sh looks for it on the GPU machine" >&2
    rmdir "$d"
    return 0
  fi
  idx_slice "$FMNIST_DIR/train-images-idx3-ubyte.gz" "$d/train-images-idx3-ubyte.gz" \
    "$FL_BUNDLE_TRAIN" 16 784
  idx_slice "$FMNIST_DIR/train-labels-idx1-ubyte.gz" "$d/train-labels-idx1-ubyte.gz" \
    "$FL_BUNDLE_TRAIN" 8 1
  idx_slice "$FMNIST_DIR/t10k-images-idx3-ubyte.gz" "$d/t10k-images-idx3-ubyte.gz" \
    "$FL_BUNDLE_TEST" 16 784
  idx_slice "$FMNIST_DIR/t10k-labels-idx1-ubyte.gz" "$d/t10k-labels-idx1-ubyte.gz" \
    "$FL_BUNDLE_TEST" 8 1
}

# The AMP example for one epoch on the data run.sh finds (@DATA@).
bundle_job() {
  mkdir -p "$out/job"
  sed -e 's|/usr/share/datasets/fashion-mnist|@DATA@|' -e 's|^\(  epochs:\).*|\1 1|' \
    "$srcdir/deploy/examples/gpu_amp_cnn_fmnist.yaml" > "$out/job/gpu_amp_cnn_fmnist.yaml"
  grep -q '@DATA@' "$out/job/gpu_amp_cnn_fmnist.yaml" &&
    grep -q '^  epochs: 1$' "$out/job/gpu_amp_cnn_fmnist.yaml" ||
    die "deploy/examples/gpu_amp_cnn_fmnist.yaml changed shape: update bundle_job"
}

# shellcheck disable=SC2046
lib_archive $(sed -n 's/^lib //p' "$spec")
$CC -std=c11 -O2 -Wall -Wextra -Werror -c -o "$work/stubs.o" "$srcdir/deploy/gpu_bundle_stubs.c"
ar rcs "$work/stubs.a" "$work/stubs.o"

# Pass 1: each program alone, to learn which shared libraries it needs.
sed -n 's/^prog \([^ ]*\).*/\1/p' "$spec" > "$work/names"
i=0
: > "$work/groups"
while read -r kind name objs; do
  [ "$kind" = prog ] || continue
  i=$((i + 1))
  # shellcheck disable=SC2086
  prog_object $i "$name" $objs
  link_group "$work/alone" $i
  set=$(needed "$work/alone" | tr ' ' ',')
  case $set in *libcublas* | *libcudnn*) set=cublas-cudnn ;; esac
  echo "$set $i" >> "$work/groups"
done < "$spec"

# Pass 2: one executable per set of shared libraries, except that all the
# programs calling cuBLAS or cuDNN share one (each alone is ~40 MB, mostly
# OpenBLAS and gRPC): it needs the union of their libraries.
rm -rf "$out"
mkdir -p "$out/bin"
g=0
: > "$work/programs"
for set in $(cut -d' ' -f1 "$work/groups" | sort -u); do
  g=$((g + 1))
  ids=$(awk -v s="$set" '$1 == s { print $2 }' "$work/groups")
  # shellcheck disable=SC2086
  link_group "$out/bin/flbundle-$g" $ids
  check_needed "$out/bin/flbundle-$g"
  for i in $ids; do
    name=$(sed -n "${i}p" "$work/names")
    printf '#!/bin/sh\nexec "$(dirname "$0")/flbundle-%s" %s "$@"\n' $g "$name" > "$out/bin/$name"
    chmod +x "$out/bin/$name"
    echo "$name flbundle-$g" >> "$work/programs"
  done
done

bundle_data
bundle_job
cp "$srcdir/deploy/gpu-run.sh" "$out/run.sh"
chmod +x "$out/run.sh"
sort "$work/programs" > "$out/programs.txt"
{
  echo "flotilla GPU bundle, built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
  echo "source: $(git -C "$srcdir" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "cuda: $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')" \
    "($CUDA_HOME; kernels as sm_90 code and compute_90 PTX)"
  echo "glibc: needs $(for f in "$out"/bin/flbundle-*; do objdump -T "$f"; done |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1) or newer"
  for f in "$out"/bin/flbundle-*; do
    echo "$(basename "$f"): $(grep -c " $(basename "$f")\$" "$out/programs.txt") programs," \
      "needs: $(needed "$f")"
  done
} > "$out/MANIFEST"
rm -rf "$work"

size=$(du -sb "$out" | cut -f1)
[ "$size" -le "$budget" ] || die "$out is $size bytes, over the $budget-byte budget"
cat "$out/MANIFEST"
echo "gpu-bundle: $out: $size bytes; run it on the GPU machine: sh $out/run.sh"
