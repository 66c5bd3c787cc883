# etcd_lib.sh - throw-away etcd members for tests and benchmarks (sourced).
# One member or a three-member cluster on given addresses, with free ports
# and data dirs under the caller's temporary directory; started in the
# background, waited for until they serve clients, stopped by etcd_stop
# (call it from the EXIT trap).  The start functions return 77 when etcd is
# not installed (Debian etcd-server) and 1 when it does not come up, so
# `etcd_start "$tmp" 127.0.0.1 || exit` skips or fails as the test should.
# Also wait_line, the wait for a line in the logs that every elastic test
# and bench_elastic.sh share.
ETCD_BIN=${ETCD_BIN:-/usr/bin/etcd}
ETCD_PID=${ETCD_PID:-}
ETCD_PIDS=${ETCD_PIDS:-}

# etcd_free_port HOST: a TCP port free on HOST now (free_port.py).
etcd_free_port() { /usr/bin/python3 "$FL_SRCDIR/tests/integration/free_port.py" "$1"; }

# etcd_member DIR NAME HOST CLIENT_PORT PEER_PORT INITIAL_CLUSTER: one member
# in the background (data DIR/NAME.data, log DIR/NAME.log); sets _etcd_pid.
etcd_member() {
  : > "$1/$2.log"
  "$ETCD_BIN" --name "$2" --data-dir "$1/$2.data" \
    --listen-client-urls "http://$3:$4" --advertise-client-urls "http://$3:$4" \
    --listen-peer-urls "http://$3:$5" --initial-advertise-peer-urls "http://$3:$5" \
    --initial-cluster "$6" --initial-cluster-state new > "$1/$2.log" 2>&1 &
  _etcd_pid=$!
}

# etcd_wait TENTHS PATTERN LOG...: 0 once every LOG has a line with PATTERN
# (within TENTHS tenths of a second, while every member lives), 1 otherwise,
# with the logs' tails.
etcd_wait() {
  _n=$1 _pat=$2
  shift 2
  _i=0
  while [ $_i -lt "$_n" ]; do
    [ "$(grep -l "$_pat" "$@" 2> /dev/null | wc -l)" = $# ] && return 0
    for _p in $ETCD_PID $ETCD_PIDS; do kill -0 "$_p" 2> /dev/null || _i=$_n; done
    sleep 0.1
    _i=$((_i + 1))
  done
  echo "etcd did not start (no '$_pat'):"
  tail -n 5 "$@"
  return 1
}

# etcd_start DIR HOST: one member on HOST (data under DIR, log DIR/etcd.log);
# sets ETCD_EP (host:port) and ETCD_PID.
etcd_start() {
  [ -x "$ETCD_BIN" ] || { echo "SKIP: $ETCD_BIN missing (apt-get install etcd-server)"; return 77; }
  _cp=$(etcd_free_port "$2")
  _pp=$(etcd_free_port "$2")
  ETCD_EP="$2:$_cp"
  etcd_member "$1" etcd "$2" "$_cp" "$_pp" "etcd=http://$2:$_pp"
  ETCD_PID=$_etcd_pid
  etcd_wait 100 "ready to serve client" "$1/etcd.log"
}

# etcd_cluster_start DIR [HOST...]: a cluster of one member per HOST (at
# most 9; default three on 127.0.0.1..3), logs DIR/m1.log, m2.log...; sets ETCD_EPS (the client
# endpoints, comma separated), ETCD_PIDS and ETCD_LEADER_PID (the member that
# says it became leader); 1 when the cluster does not form within 15 s.
etcd_cluster_start() {
  [ -x "$ETCD_BIN" ] || { echo "SKIP: $ETCD_BIN missing (apt-get install etcd-server)"; return 77; }
  _dir=$1
  shift
  [ $# -gt 0 ] || set -- 127.0.0.1 127.0.0.2 127.0.0.3
  _init="" _m=0
  for _h in "$@"; do
    _m=$((_m + 1))
    eval "_cp$_m=\$(etcd_free_port $_h) _pp$_m=\$(etcd_free_port $_h)"
    eval "_init=\"\$_init\${_init:+,}m$_m=http://$_h:\$_pp$_m\""
  done
  ETCD_EPS="" _m=0
  for _h in "$@"; do
    _m=$((_m + 1))
    eval "etcd_member \"\$_dir\" m$_m $_h \$_cp$_m \$_pp$_m \"\$_init\""
    eval "_pid$_m=$_etcd_pid"
    ETCD_PIDS="$ETCD_PIDS $_etcd_pid"
    eval "ETCD_EPS=\"\$ETCD_EPS\${ETCD_EPS:+,}$_h:\$_cp$_m\""
  done
  etcd_wait 150 "ready to serve client" "$_dir"/m?.log || return 1
  _i=0
  while [ $_i -lt 50 ]; do
    for _k in $(seq "$_m"); do
      grep -q "became leader" "$_dir/m$_k.log" && eval "ETCD_LEADER_PID=\$_pid$_k" && return 0
    done
    sleep 0.1
    _i=$((_i + 1))
  done
  echo "etcd cluster has no leader:"
  tail -n 3 "$_dir"/m?.log
  return 1
}

# wait_line LIMIT_S STEP_S PATTERN GLOB: 0 once a line of the files GLOB
# names (expanded at each look: the files come later) matches PATTERN,
# looking every STEP_S seconds, LIMIT_S / STEP_S times at most; else 1.
wait_line() {
  _wn=$(awk -v l="$1" -v s="$2" 'BEGIN { print int(l / s + 0.5) }')
  _wi=0
  while [ $_wi -lt "$_wn" ]; do
    # shellcheck disable=SC2086 # GLOB expanded here
    cat $4 2> /dev/null | grep -q "$3" && return 0
    sleep "$2"
    _wi=$((_wi + 1))
  done
  return 1
}

# etcd_stop: stop (and reap) every member started here.
etcd_stop() {
  for _p in $ETCD_PID $ETCD_PIDS; do kill "$_p" 2> /dev/null && wait "$_p" 2> /dev/null; done
  ETCD_PID="" ETCD_PIDS=""
}
