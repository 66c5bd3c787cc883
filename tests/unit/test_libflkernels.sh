#!/bin/sh
# The library split: libflkernels (base/ + kernels/) must not
# depend on gRPC, protobuf-c, libuv, libyaml, libmicrohttpd, libsystemd or
# libflotilla, and a program using only fl_optim.h links and runs against
# it alone (tests/unit/kernels_only.c).  Reads the NEEDED entries of the
# built ELF files with objdump (SKIP when binutils is missing).
set -u
B=${FL_BUILDDIR:?FL_BUILDDIR not set}
command -v objdump > /dev/null 2>&1 || { echo "SKIP: objdump not found"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
forbidden='libgrpc|libgpr|libprotobuf|libuv|libyaml|libmicrohttpd|libsystemd|libflotilla'

needed() { objdump -p "$1" 2> /dev/null | awk '$1 == "NEEDED" { print $2 }'; }

lib=$B/.libs/libflkernels.so
if [ -f "$lib" ]; then
  n=$(needed "$lib")
  [ -n "$n" ] || fail "objdump shows no NEEDED entries in $lib"
  bad=$(echo "$n" | grep -E "$forbidden")
  [ -z "$bad" ] || fail "libflkernels.so needs $(echo $bad)"
  echo "libflkernels.so NEEDED: $(echo $n)"
else
  fail "$lib not built"
fi

# The program itself (libtool keeps the real binary under .libs/).
prog=
for p in "$B/tests/unit/.libs/kernels_only" "$B/tests/unit/.libs/lt-kernels_only"; do
  [ -f "$p" ] && { prog=$p; break; }
done
if [ -n "$prog" ]; then
  n=$(needed "$prog")
  echo "$n" | grep -q '^libflkernels\.so' || fail "kernels_only does not link libflkernels: $(echo $n)"
  bad=$(echo "$n" | grep -E "$forbidden")
  [ -z "$bad" ] || fail "kernels_only needs $(echo $bad)"
else
  fail "kernels_only not built as a shared-library program under $B/tests/unit/.libs"
fi

"$B/tests/unit/kernels_only" || fail "kernels_only exited $?"

[ "$fails" -eq 0 ] || exit 1
echo "PASS: libflkernels stands alone"
