#!/bin/sh
# test_plugin_install.sh - the C model plugin can be built from an installed
# Flotilla alone: `make install DESTDIR=...` puts fl_model.h and every header
# it needs next to libflotilla and flotilla.pc; the example plugin
# (trainer/plugin_example.c) is compiled with nothing but
# `pkg-config --cflags --libs flotilla` pointing into that tree, and the
# installed flotilla-trainer trains it for a few steps on synthetic data.
# The flotilla Python package is installed beside it, for Debian's python3.
# Skips (77) without pkg-config or a C compiler.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
CC=${CC:-cc}
command -v pkg-config > /dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
command -v "$CC" > /dev/null 2>&1 || { echo "SKIP: no C compiler $CC"; exit 77; }
tmp=$(mktemp -d /tmp/fl_plugin_install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
fail() { echo "FAIL: $*"; exit 1; }

# 1. install into the staging root (the build is already up to date, so this
#    only copies and relinks; unset MAKEFLAGS so an outer `make -j check`
#    does not hand its jobserver to it)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL timeout 300 make -C "$FL_BUILDDIR" install \
  DESTDIR="$root" > "$tmp/install.log" 2>&1 || { tail -n 30 "$tmp/install.log"; fail "make install"; }
pc=$(find "$root" -name flotilla.pc | head -1)
[ -n "$pc" ] || fail "no flotilla.pc under $root"
for h in fl_model.h fl_layers.h fl_status.h; do
  [ -n "$(find "$root" -path "*/include/flotilla/$h")" ] || fail "$h is not installed"
done
trainer=$(find "$root" -type f -name flotilla-trainer | head -1)
[ -n "$trainer" ] || fail "flotilla-trainer is not installed"
libdir=$(dirname "$(find "$root" -name 'libflotilla.so*' | head -1)")

# 2. compile the example plugin against the installed tree only
PKG_CONFIG_PATH=$(dirname "$pc")
PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
unset PKG_CONFIG_LIBDIR
cflags=$(pkg-config --cflags flotilla) || fail "pkg-config --cflags flotilla"
libs=$(pkg-config --libs flotilla) || fail "pkg-config --libs flotilla"
case "$cflags" in *"$root"*) ;; *) fail "cflags '$cflags' do not point into $root" ;; esac
# shellcheck disable=SC2086 # word splitting of the pkg-config output is intended
"$CC" -std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared $cflags \
  "$FL_SRCDIR/trainer/plugin_example.c" -o "$tmp/plugin_example.so" $libs -lm \
  > "$tmp/cc.log" 2>&1 || { cat "$tmp/cc.log"; fail "compiling the plugin against $root"; }

# 3. train it with the installed trainer
cat > "$tmp/job.yaml" <<EOF
model:
  kind: plugin
  plugin_path: $tmp/plugin_example.so
  plugin_args: "hidden=16"
  input_shape: [1, 8, 8]
  num_classes: 4
data:
  format: synthetic
  synthetic: {train_samples: 512, test_samples: 128, seed: 3}
optimizer: {name: momentum, lr: 0.1}
train:
  epochs: 2
  batch_size: 32
  eval_batch_size: 64
  log_interval: 4
  num_threads: 1
EOF
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 "$trainer" \
  --config "$tmp/job.yaml" > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; fail "training"; }
acc=$(sed -n 's/^\[Epoch 1\] test loss: [0-9.]*, acc1: \([0-9.]*\).*/\1/p' "$tmp/train.log")
[ -n "$acc" ] || { cat "$tmp/train.log"; fail "no test accuracy after epoch 1"; }
# 4 classes: chance is 0.25; the synthetic prototypes are easy to separate
awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || { cat "$tmp/train.log"; fail "test acc1 $acc <= 0.5"; }

# 4. the flotilla Python package: installed where Debian's python3 looks,
#    its _paths.py naming the configured bindir, importable without torch,
#    and finding the installed flotilla-trainer
init=$(find "$root" -path '*/flotilla/__init__.py' | head -1)
[ -n "$init" ] || fail "the flotilla Python package is not installed"
pkg=$(dirname "$init")
bindir=$(dirname "${trainer#"$root"}")
grep -qx "BINDIR = \"$bindir\"" "$pkg/_paths.py" ||
  fail "$pkg/_paths.py does not name the bindir $bindir: $(cat "$pkg/_paths.py")"
pydir=$(dirname "${pkg#"$root"}")
py=/usr/bin/python3
if [ -x "$py" ]; then
  "$py" -c "import sys; sys.exit('$pydir' not in sys.path)" ||
    fail "$pydir is not on the path of $py"
  found=$(cd "$tmp" && PYTHONPATH="$root$pydir" FLOTILLA_BINDIR="$root$bindir" "$py" -B -c \
    'import flotilla._bin as b; print(b.BINDIR, b.find("flotilla-trainer"))') ||
    fail "import flotilla from $root$pydir"
  [ "$found" = "$bindir $trainer" ] || fail "flotilla found '$found', want '$bindir $trainer'"
fi
echo "ok: plugin built against $root, test acc1 $acc; Python package in $pydir"
