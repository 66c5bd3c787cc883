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
    grep -q "ready to serve client requests" "$1/etcd.log" && return 0
    kill -0 $ETCD_PID 2> /dev/null || break
    sleep 0.1
    _i=$((_i + 1))
  done
  echo "etcd did not start:"; tail -5 "$1/etcd.log"
  return 1
}
