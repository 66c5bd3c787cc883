# faults_lib.sh - sourced (by bash) by test_faults_*.sh, test_security.sh
# and tests/bench/soak_ps.sh: start the real flotilla-pserver and
# flotilla-trainer processes (FL_BUILDDIR) on loopback with their FLOTILLA_*
# settings, wait for log lines and exits with a time limit, and clean up
# every process, mount and network namespace the script made, whatever
# happens.  Nothing here waits without a bound.
#
# A daemon is started as `env SETTINGS... PROGRAM ARGS &` by a subshell
# that waits for it; the pid the scripts get is the daemon's own, so kill -9
# and SIGSTOP reach it, not a wrapper.
set -u
FL_BUILDDIR=${FL_BUILDDIR:-.}
FL_SRCDIR=${FL_SRCDIR:-..}
PSERVER=$FL_BUILDDIR/flotilla-pserver
TRAINER=$FL_BUILDDIR/flotilla-trainer
PROBE=$FL_BUILDDIR/tests/integration/ps_probe
unset FLOTILLA_TOKEN FLOTILLA_TOKEN_FILE FLOTILLA_CHECKPOINT_DIR

fl_pids=""
fl_mounts=""
fl_netns=""
fails=0
ran=0
tmp=$(mktemp -d "/tmp/fl_${0##*/}.XXXXXX")

fl_cleanup() {
  for p in $fl_pids; do kill -CONT "$p" 2> /dev/null; kill -KILL "$p" 2> /dev/null; done
  wait 2> /dev/null
  for m in $fl_mounts; do umount -l "$m" 2> /dev/null; done
  for n in $fl_netns; do ip netns del "$n" 2> /dev/null; done
  if [ -n "${FL_KEEP_TEST_DIR:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap fl_cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
ok() { echo "ok: $*"; }
# has FILE REGEX [WHAT]: FILE must contain a line matching REGEX.
has() { grep -Eq -- "$2" "$1" || fail "${3:-$1} lacks '$2'"; }
hasnt() { ! grep -Eq -- "$2" "$1" || fail "${3:-$1} has '$2'"; }

# A free TCP port on HOST (default 127.0.0.1), below the ephemeral range.
free_port() { /usr/bin/python3 "$FL_SRCDIR/tests/integration/free_port.py" "${1:-127.0.0.1}"; }

# spawn VAR LOG [NAME=VALUE...] -- PROGRAM ARGS...: start a daemon in the
# background, output to LOG; its pid goes into the variable VAR.  A
# subshell waits for it and writes its exit status to a file, so that the
# daemon's pid is the daemon's own and no "Killed" job notice is printed.
fl_nspawn=0
spawn() {
  _var=$1 _log=$2
  shift 2
  _envs=()
  while [ "$1" != "--" ]; do
    _envs+=("$1")
    shift
  done
  shift
  fl_nspawn=$((fl_nspawn + 1))
  _f=$tmp/.spawn.$fl_nspawn
  (
    env "${_envs[@]}" "$@" >> "$_log" 2>&1 &
    echo $! > "$_f.pid.tmp" && mv "$_f.pid.tmp" "$_f.pid"
    { wait $!; } 2> /dev/null
    echo $? > "$_f.rc.tmp" && mv "$_f.rc.tmp" "$_f.rc"
  ) &
  for ((_i = 0; _i < 100; _i++)); do
    [ -s "$_f.pid" ] && break
    sleep 0.05
  done
  _pid=$(cat "$_f.pid")
  fl_pids="$fl_pids $_pid"
  eval "fl_rcfile_$_pid=$_f.rc"
  eval "$_var=$_pid"
}

# wait_log FILE REGEX SECONDS: 0 once FILE has a line matching REGEX.
wait_log() {
  _end=$((SECONDS + $3))
  while [ $SECONDS -lt $_end ]; do
    grep -Eq -- "$2" "$1" 2> /dev/null && return 0
    sleep 0.1
  done
  grep -Eq -- "$2" "$1" 2> /dev/null
}

# wait_exit PID SECONDS: the exit status of a spawned daemon in $rc
# (128+N for signal N); after SECONDS it is killed and rc is 124.  Returns
# 0 when it exited by itself.
wait_exit() {
  _rcf=$(eval echo "\${fl_rcfile_$1:-}")
  _end=$((SECONDS + $2))
  while [ ! -s "$_rcf" ] && [ $SECONDS -lt $_end ]; do sleep 0.1; done
  if [ -s "$_rcf" ]; then
    rc=$(cat "$_rcf")
    return 0
  fi
  kill -CONT "$1" 2> /dev/null
  kill -KILL "$1" 2> /dev/null
  for ((_i = 0; _i < 50; _i++)); do
    [ -s "$_rcf" ] && break
    sleep 0.1
  done
  rc=124
  return 1
}

# running PID: 0 while the spawned daemon has not exited.
running() { [ ! -s "$(eval echo "\${fl_rcfile_$1:-}")" ]; }

# show FILE...: the last lines of each (after a failure).
show() {
  for f in "$@"; do
    echo "----- $f"
    tail -n 25 "$f" 2> /dev/null
  done
}

# ---------------------------------------------------------------- PS jobs

# ps_job NAME CONFIG N_PS N_TR [HOST]: start N_PS pservers and N_TR trainers
# of CONFIG on HOST (127.0.0.1).  Logs: $tmp/NAME.ps<i>.log,
# $tmp/NAME.tr<i>.log; pids: PS<i>, TR<i>; the list: $PSLIST.  Extra
# settings for every process: $JOB_ENV (words NAME=VALUE); extra trainer
# arguments: $TRAINER_ARGS (words).
ps_job() {
  _name=$1 _cfg=$2 _nps=$3 _ntr=$4 _host=${5:-127.0.0.1}
  PSLIST=""
  for ((s = 0; s < _nps; s++)); do
    PSLIST="$PSLIST${PSLIST:+,}$_host:$(free_port "$_host")"
  done
  for ((s = 0; s < _nps; s++)); do start_pserver "$_name" "$_cfg" "$s" "$_ntr"; done
  for ((t = 0; t < _ntr; t++)); do start_trainer "$_name" "$_cfg" "$t" "$_ntr"; done
}

# start_pserver NAME CONFIG ID N_TR: (re)start pserver ID of $PSLIST.
start_pserver() {
  # shellcheck disable=SC2086 # JOB_ENV: words NAME=VALUE
  spawn "PS$3" "$tmp/$1.ps$3.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER \
    FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" FLOTILLA_PSERVER_ID="$3" \
    FLOTILLA_TRAINERS_NUM="$4" ${JOB_ENV:-} -- "$PSERVER" --config "$2"
}

# start_trainer NAME CONFIG ID N_TR [ARGS...]: (re)start trainer ID.
start_trainer() {
  _n=$1 _c=$2 _i=$3 _k=$4
  shift 4
  # shellcheck disable=SC2086
  spawn "TR$_i" "$tmp/$_n.tr$_i.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=TRAINER \
    FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" FLOTILLA_TRAINER_ID="$_i" \
    FLOTILLA_TRAINERS_NUM="$_k" ${JOB_ENV:-} -- "$TRAINER" --config "$_c" ${TRAINER_ARGS:-} "$@"
}

# ------------------------------------------------------- collective jobs

# coll_job NAME CONFIG N HOSTS...: N collective trainers, rank r on
# HOSTS[r % #HOSTS]; pids TR<r>, logs $tmp/NAME.tr<r>.log, list $EPLIST.
# $NETNS_OF_HOST_<i> (optional) runs rank r inside that network namespace
# (the i-th host's); $TRAINER_ARGS (words) go to every trainer.
coll_job() {
  _name=$1 _cfg=$2 _n=$3
  shift 3
  _hosts=("$@")
  EPLIST=""
  for ((r = 0; r < _n; r++)); do
    _h=${_hosts[$((r % ${#_hosts[@]}))]}
    _ns_var=NETNS_OF_HOST_$((r % ${#_hosts[@]}))
    # inside a fresh namespace nothing listens, but its own outgoing
    # connections take ports from 32768 up: one below; here, ask the kernel
    if [ -n "${!_ns_var:-}" ]; then _p=$((16384 + RANDOM % 16000)); else _p=$(free_port "$_h"); fi
    EPLIST="$EPLIST${EPLIST:+,}$_h:$_p"
  done
  for ((r = 0; r < _n; r++)); do
    _ns_var=NETNS_OF_HOST_$((r % ${#_hosts[@]}))
    _pre=()
    [ -n "${!_ns_var:-}" ] && _pre=(ip netns exec "${!_ns_var}")
    # shellcheck disable=SC2086
    spawn "TR$r" "$tmp/$_name.tr$r.log" FLOTILLA_MODE=collective FLOTILLA_TRAINER_ID="$r" \
      FLOTILLA_TRAINERS_NUM="$_n" FLOTILLA_TRAINER_ENDPOINTS="$EPLIST" ${JOB_ENV:-} -- \
      "${_pre[@]}" "$TRAINER" --config "$_cfg" ${TRAINER_ARGS:-}
  done
}

# finish: the summary line and the exit status (77 when nothing ran).  A
# sanitizer report in any log (--enable-sanitizers) is a failure too, also
# from a process whose exit status the test expected to be 1.
finish() {
  for f in $(grep -rlE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$tmp" 2> /dev/null); do
    fail "sanitizer report in $f"
    grep -E -A12 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$f" | head -40
  done
  if [ $fails -ne 0 ]; then
    echo "FAIL: $fails check(s) failed"
    exit 1
  fi
  [ $ran -gt 0 ] || exit 77
  echo "PASS: $ran parts"
  exit 0
}
