#!/bin/sh
# test_python.sh - the flotilla Python package (python/flotilla) from the
# source tree against this build's programs (FLOTILLA_BINDIR): export,
# Job(...).run() with one trainer and with flotilla-run, load_trained, and
# the refusals; test_python.py says what is checked.  Skips (77) without
# Debian's /usr/bin/python3 with torch and onnx.
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
py=/usr/bin/python3
[ -x "$py" ] || { echo "SKIP: no $py"; exit 77; }
"$py" -c 'import torch, onnx, numpy' 2> /dev/null || { echo "SKIP: $py lacks torch, onnx or numpy"; exit 77; }
tmp=$(mktemp -d /tmp/fl_python.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
FLOTILLA_BINDIR=$FL_BUILDDIR PYTHONPATH=$FL_SRCDIR/python PYTHONDONTWRITEBYTECODE=1 \
  TMPDIR=$tmp OMP_NUM_THREADS=1 timeout 60 "$py" "$FL_SRCDIR/tests/integration/test_python.py"
