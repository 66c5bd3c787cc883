# cgroup_lib.sh - sourced by the benchmarks that run a process in a memory
# cgroup (v1) of their own (bench_tier_cgroup.sh, bench_disk.sh):
# cg_usable says whether this shell may make one, cg_run runs a command
# in $cg, cg_cleanup (their exit trap) kills what is left in $cg, removes
# it and the scratch directory $tmp.
cg_root=/sys/fs/cgroup/memory

cg_usable() {
  [ "$(id -u)" = 0 ] && [ -w "$cg_root/cgroup.procs" ]
}

cg_run() {
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$@"
}

cg_cleanup() {
  if [ -d "$cg" ]; then
    for p in $(cat "$cg/cgroup.procs" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
    sleep 1
    rmdir "$cg" 2> /dev/null || echo "$0: could not remove $cg" >&2
  fi
  rm -rf "$tmp"
}
