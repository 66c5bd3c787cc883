#!/bin/sh
# build.sh - configure and build Flotilla out of tree.
# Usage: deploy/build.sh BUILDDIR [configure flags...]
# Re-running reuses BUILDDIR (configure runs only the first time).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
bdir=$1; shift
[ -x "$top/configure" ] || (cd "$top" && autoreconf -fi)
mkdir -p "$bdir"
cd "$bdir"
[ -f Makefile ] || "$top/configure" "$@"
make -j"$(nproc)"
