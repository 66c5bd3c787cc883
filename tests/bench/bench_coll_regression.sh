#!/bin/bash
# bench_coll_regression.sh - the collective engine's figures now against
# the commit before the algorithms were split from the transports (or any
# REV): builds REV's bench_allreduce in a scratch worktree, then runs the
# two binaries in turn, ROUNDS times each (alternating, so that the noise of
# a shared machine falls on both alike), over tcp and shm, 2 and 4 ranks,
# 1 MiB and 16 MiB, and prints per figure the median of each side and
#   ratio_now_over_rev_<figure>: now / REV (the goal: >= 0.95)
# Usage: bash tests/bench/bench_coll_regression.sh [BUILDDIR] [--rev REV] [--rounds N]
# Never pass/fail.  Needs git and a configured BUILDDIR (its bench_allreduce).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=. rev=506ade7^ rounds=3
while [ $# -gt 0 ]; do
  case $1 in
    --rev) rev=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    *) build=$1 ;;
  esac
  shift
done
build=$(cd "$build" && pwd)
now=$build/tests/bench/bench_allreduce
tmp=$(mktemp -d /tmp/fl_coll_regress.XXXXXX)
cleanup() {
  git -C "$src" worktree remove --force "$tmp/src" > /dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
make -C "$build" tests/bench/bench_allreduce > "$tmp/make-now.log" 2>&1 ||
  { echo "# cannot build this tree's bench_allreduce (see make)"; exit 0; }
sha=$(git -C "$src" rev-parse --short "$rev") || { echo "# no such revision: $rev"; exit 0; }
echo "# now: $(git -C "$src" rev-parse --short HEAD) against $sha; $(nproc) CPUs; $rounds rounds"
git -C "$src" worktree add --detach "$tmp/src" "$sha" > /dev/null 2>&1 ||
  { echo "# git worktree add failed"; exit 0; }
(cd "$tmp/src" && autoreconf -fi > /dev/null 2>&1 && mkdir -p b && cd b &&
  ../configure --without-cuda > /dev/null 2>&1 && make -j2 > /dev/null 2>&1 &&
  make -j2 tests/bench/bench_allreduce > /dev/null 2>&1) ||
  { echo "# cannot build $sha's bench_allreduce"; exit 0; }
old=$tmp/src/b/tests/bench/bench_allreduce
args=(--quick --backends tcp,shm --ranks 2,4 --sizes 1M,16M)
for ((k = 0; k < rounds; k++)); do
  "$now" "${args[@]}" 2> /dev/null | sed 's/^/now /' >> "$tmp/all"
  "$old" "${args[@]}" 2> /dev/null | sed 's/^/rev /' >> "$tmp/all"
done
awk '$2 ~ /^busbw_/ { k = $2; sub(/:$/, "", k); v[$1, k, ++n[$1, k]] = $3; keys[k] = 1 }
  function med(side, k,   m, i, j, t, a) {
    m = n[side, k]; for (i = 1; i <= m; i++) a[i] = v[side, k, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return m ? a[int((m + 1) / 2)] : 0 }
  END { for (k in keys) { a = med("now", k); b = med("rev", k)
          printf "%s_now: %.3f GB/s\n%s_rev: %.3f GB/s\n", k, a, k, b
          if (b > 0) printf "ratio_now_over_rev_%s: %.3f\n", substr(k, 7), a / b } }' "$tmp/all" | sort
