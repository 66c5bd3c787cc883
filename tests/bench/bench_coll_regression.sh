#!/bin/bash
# bench_coll_regression.sh - the collective engine's figures now against
# the commit before the algorithms were split from the transports (or any
# REV): builds REV's bench_allreduce in a scratch worktree, then runs the
# two binaries in turn, ROUNDS times each (alternating, so that the noise of
# a shared machine falls on both alike), over tcp and shm, 2 and 4 ranks,
# 1 MiB and 16 MiB (or --backends, --ranks, --sizes), and prints per figure
# the median of each side with its quartiles, and
#   ratio_now_over_rev_<figure>: median now / median REV (the goal: >= 0.95)
#   paired_<figure>: the median of the rounds' own now/REV ratios (each
#     round runs both binaries back to back, so a busy spell of the machine
#     falls on both), its 95% interval (order statistics of the ratios: no
#     assumption on their spread; an interval holding 1 is no difference
#     the rounds can show) and how many rounds now was the faster
# --old BIN runs an already built bench_allreduce of REV instead of
# building one (a second run need not rebuild the old tree).
# Usage: bash tests/bench/bench_coll_regression.sh [BUILDDIR] [--rev REV] [--rounds N]
#        [--backends tcp,shm] [--ranks 2,4] [--sizes 1M,16M] [--old BIN]
# Never pass/fail.  Needs git and a configured BUILDDIR (its bench_allreduce).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=. rev=506ade7^ rounds=3 backends=tcp,shm ranks=2,4 sizes=1M,16M old=
while [ $# -gt 0 ]; do
  case $1 in
    --rev) rev=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --backends) backends=$2; shift ;;
    --ranks) ranks=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --old) old=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift ;;
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
[ -n "$old" ] || {
git -C "$src" worktree add --detach "$tmp/src" "$sha" > /dev/null 2>&1 ||
  { echo "# git worktree add failed"; exit 0; }
(cd "$tmp/src" && autoreconf -fi > /dev/null 2>&1 && mkdir -p b && cd b &&
  ../configure --without-cuda > /dev/null 2>&1 && make -j2 > /dev/null 2>&1 &&
  make -j2 tests/bench/bench_allreduce > /dev/null 2>&1) ||
  { echo "# cannot build $sha's bench_allreduce"; exit 0; }
old=$tmp/src/b/tests/bench/bench_allreduce
}
args=(--quick --backends "$backends" --ranks "$ranks" --sizes "$sizes")
for ((k = 0; k < rounds; k++)); do
  "$now" "${args[@]}" 2> /dev/null | sed 's/^/now /' >> "$tmp/all"
  "$old" "${args[@]}" 2> /dev/null | sed 's/^/rev /' >> "$tmp/all"
done
awk '$2 ~ /^busbw_/ { k = $2; sub(/:$/, "", k); v[$1, k, ++n[$1, k]] = $3; keys[k] = 1 }
  function srt(a, m,   i, j, t) {
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } }
  function q(side, k, f,   m, i, a) {
    m = n[side, k]; for (i = 1; i <= m; i++) a[i] = v[side, k, i]
    srt(a, m); return m ? a[int(f * (m - 1)) + 1] : 0 }
  END { for (k in keys) { a = q("now", k, 0.5); b = q("rev", k, 0.5)
          printf "%s_now: %.3f GB/s (quartiles %.3f %.3f)\n", k, a, q("now", k, 0.25), q("now", k, 0.75)
          printf "%s_rev: %.3f GB/s (quartiles %.3f %.3f)\n", k, b, q("rev", k, 0.25), q("rev", k, 0.75)
          if (b > 0) printf "ratio_now_over_rev_%s: %.3f\n", substr(k, 7), a / b
          m = 0; w = 0; delete r
          for (i = 1; i <= n["now", k] && i <= n["rev", k]; i++)
            if (v["rev", k, i] > 0) { r[++m] = v["now", k, i] / v["rev", k, i]; w += r[m] >= 1 }
          srt(r, m); lo = int(m / 2 - 0.98 * sqrt(m)); hi = int(m / 2 + 1 + 0.98 * sqrt(m) + 0.999)
          if (lo < 1) lo = 1; if (hi > m) hi = m
          if (m) printf "paired_%s: %.3f (95%% interval %.3f %.3f; now faster in %d of %d rounds)\n",
                   substr(k, 7), r[int((m + 1) / 2)], r[lo], r[hi], w, m } }' "$tmp/all" | sort
