#!/bin/sh
# run.sh - `make fuzz`: build every harness of tests/fuzz with clang,
# libFuzzer, ASan and UBSan in a tree of its own, then fuzz each for a
# bounded time.  Fails (exit 1) on any crash, leak, UB report, timeout or
# out-of-memory, printing the end of that harness's log and the path of
# the input that did it (reproduce with: <tree>/tests/fuzz/fuzz_<name> <file>,
# FLOTILLA_LOG_LEVEL=debug to see the library's messages).
#
# Usage: run.sh SRCDIR TREE.  Environment:
#   FUZZ_CC        the compiler (clang; needs libclang_rt.fuzzer, Debian:
#                  clang and libclang-rt-14-dev)
#   FUZZ_SECONDS   seconds per harness (60)
#   FUZZ_TARGETS   the harness names (make passes its list)
#   FUZZ_FLAGS     extra libFuzzer flags, e.g. -jobs=2 or -seed=1
#   MAKE           make program
#
# Why a separate tree: the harnesses must be linked with -fsanitize=fuzzer
# and the libraries compiled with coverage instrumentation, which only
# clang provides; the tree is configured once from the same sources
# (--disable-shared, so the harness binaries are self-contained) and then
# rebuilt incrementally like any other.  New inputs found while fuzzing go
# to TREE/fuzz-corpus/<name>/; the committed corpus is only read.
set -eu

src=${1:?usage: run.sh SRCDIR TREE}
tree=${2:?usage: run.sh SRCDIR TREE}
cc=${FUZZ_CC:-clang}
secs=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:?FUZZ_TARGETS not set (run through make fuzz)}
make=${MAKE:-make}
jobs=$(nproc 2>/dev/null || echo 2)

mkdir -p "$tree"
tree=$(cd "$tree" && pwd)

# The compiler must be able to link a libFuzzer binary.
probe="$tree/probe-$$"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' > "$probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" 2> "$probe.log"; then
  cat "$probe.log" >&2
  rm -f "$probe" "$probe.c" "$probe.log"
  echo "run.sh: $cc cannot build libFuzzer binaries: apt-get install clang libclang-rt-14-dev" >&2
  exit 1
fi
rm -f "$probe" "$probe.c" "$probe.log"

# Configure once (again when configure changed).
if [ ! -f "$tree/Makefile" ] || [ "$src/configure" -nt "$tree/config.status" ]; then
  echo "run.sh: configuring the fuzzing tree $tree ($cc)"
  (cd "$tree" && CC="$cc" CFLAGS="-g -O1 -fsanitize=fuzzer-no-link -Wno-error" \
    CPPFLAGS="-DFL_FUZZ_LIBFUZZER" "$src/configure" -q --without-cuda --enable-sanitizers \
    --disable-shared --enable-static)
fi

progs=
for t in $targets; do progs="$progs tests/fuzz/fuzz_$t"; done
echo "run.sh: building$progs"
"$make" -C "$tree" -s fuzz-built-sources
# shellcheck disable=SC2086
"$make" -C "$tree" -s -j"$jobs" LDFLAGS="-fsanitize=fuzzer" $progs

ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0:${ASAN_OPTIONS:-}"
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export ASAN_OPTIONS UBSAN_OPTIONS
mkdir -p "$tree/fuzz-artifacts" "$tree/fuzz-logs"
failed=
for t in $targets; do
  work="$tree/fuzz-corpus/$t"
  seeds="$src/tests/fuzz/corpus/$t"
  log="$tree/fuzz-logs/$t.log"
  mkdir -p "$work"
  dict=
  [ -f "$src/tests/fuzz/dict/$t.dict" ] && dict="-dict=$src/tests/fuzz/dict/$t.dict"
  echo "run.sh: fuzzing $t for $secs s (log: $log)"
  # shellcheck disable=SC2086
  if "$tree/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$tree/fuzz-artifacts/$t-" $dict \
      ${FUZZ_FLAGS:-} "$work" "$seeds" > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    echo "run.sh: $t: OK, ${runs:-?} inputs, $(ls "$work" | wc -l) in its corpus"
  else
    echo "run.sh: $t: FAILED; end of $log:" >&2
    tail -n 60 "$log" >&2
    failed="$failed $t"
  fi
done
if [ -n "$failed" ]; then
  echo "run.sh: failed:$failed (inputs under $tree/fuzz-artifacts/)" >&2
  exit 1
fi
echo "run.sh: all harnesses ran $secs s each without a finding"
