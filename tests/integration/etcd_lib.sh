# etcd_lib.sh - start a throw-away etcd for a test (sourced).
# etcd_start DIR HOST: etcd on HOST with a data dir under DIR and free
# ports; sets ETCD_EP (host:port) and ETCD_PID; returns 77 when etcd is not
# installed (Debian etcd-server), 1 when it does not answer within 10 s.
ETCD_BIN=${ETCD_BIN:-/usr/bin/etcd}
etcd_free_port() {
  /usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('$1', 0)); print(s.getsockname()[1])"
}
etcd_start() {
  [ -x "$ETCD_BIN" ] || { echo "SKIP: $ETCD_BIN missing (apt-get install etcd-server)"; return 77; }
  _cp=$(etcd_free_port "$2")
  _pp=$(etcd_free_port "$2")
  ETCD_EP="$2:$_cp"
  "$ETCD_BIN" --name t --data-dir "$1/etcd.data" --listen-client-urls "http://$ETCD_EP" \
    --advertise-client-urls "http://$ETCD_EP" --listen-peer-urls "http://$2:$_pp" \
    --initial-advertise-peer-urls "http://$2:$_pp" --initial-cluster "t=http://$2:$_pp" \
    > "$1/etcd.log" 2>&1 &
  ETCD_PID=$!
  _i=0
  while [ $_i -lt 100 ]; do
    grep -q "ready to serve client requests" "$1/etcd.log" 2> /dev/null && return 0
    kill -0 $ETCD_PID 2> /dev/null || break
    sleep 0.1
    _i=$((_i + 1))
  done
  echo "etcd did not start:"; tail -5 "$1/etcd.log"
  return 1
}
# etcd_cluster_start DIR: a 3-member cluster on 127.0.0.1..3 (free ports);
# sets ETCD_EPS (the client endpoints, comma separated), ETCD_PIDS and
# ETCD_LEADER_PID (the member that says it became leader); 1 when it does not
# form within 15 s.
etcd_cluster_start() {
  _init=""
  for _m in 1 2 3; do
    eval "_cp$_m=\$(etcd_free_port 127.0.0.$_m) _pp$_m=\$(etcd_free_port 127.0.0.$_m)"
    eval "_init=\"\$_init\${_init:+,}m$_m=http://127.0.0.$_m:\$_pp$_m\""
  done
  ETCD_EPS=""
  ETCD_PIDS=""
  for _m in 1 2 3; do
    eval "_c=\$_cp$_m _p=\$_pp$_m"
    "$ETCD_BIN" --name "m$_m" --data-dir "$1/m$_m.data" \
      --listen-client-urls "http://127.0.0.$_m:$_c" --advertise-client-urls "http://127.0.0.$_m:$_c" \
      --listen-peer-urls "http://127.0.0.$_m:$_p" --initial-advertise-peer-urls "http://127.0.0.$_m:$_p" \
      --initial-cluster "$_init" --initial-cluster-state new > "$1/m$_m.log" 2>&1 &
    eval "_pid$_m=$!"
    ETCD_PIDS="$ETCD_PIDS $!"
    ETCD_EPS="$ETCD_EPS${ETCD_EPS:+,}127.0.0.$_m:$_c"
  done
  _i=0
  while [ $_i -lt 150 ]; do
    for _m in 1 2 3; do
      if grep -q "became leader" "$1/m$_m.log" 2> /dev/null &&
        [ "$(grep -l "ready to serve client" "$1"/m?.log 2> /dev/null | wc -l)" = 3 ]; then
        eval "ETCD_LEADER_PID=\$_pid$_m"
        return 0
      fi
    done
    sleep 0.1
    _i=$((_i + 1))
  done
  echo "etcd cluster did not form:"; tail -3 "$1"/m?.log
  return 1
}
