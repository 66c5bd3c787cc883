#!/bin/sh
# The etcd v3 client (common/etcd.c) against a real etcd started here on
# 127.0.0.1 with a temporary data dir; SKIP (77) when etcd is not installed.
set -u
tmp=$(mktemp -d /tmp/fl_etcd.XXXXXX)
ETCD_PID=""
cleanup() {
  [ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2> /dev/null && wait "$ETCD_PID" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
. "$FL_SRCDIR/tests/integration/etcd_lib.sh"
etcd_start "$tmp" 127.0.0.1
rc=$?
[ $rc = 0 ] || exit $rc
FL_ETCD_ENDPOINT=$ETCD_EP FL_ETCD_DEAD="127.0.0.1:$(etcd_free_port 127.0.0.1)" \
  timeout 60 "$FL_BUILDDIR/tests/integration/test_etcd_client"
