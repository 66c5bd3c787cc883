#!/bin/sh
# The etcd v3 client (common/etcd.c) against a real etcd started here on
# 127.0.0.1 with a temporary data dir, then against a 3-member cluster on
# 127.0.0.1..3 whose leader is killed; the elastic ps chunk claims
# (trainer/elastic_chunks.c) on the single etcd; SKIP (77) when etcd is not
# installed.
set -u
tmp=$(mktemp -d /tmp/fl_etcd.XXXXXX)
. "$FL_SRCDIR/tests/integration/etcd_lib.sh"
trap 'etcd_stop; rm -rf "$tmp"' EXIT
etcd_start "$tmp" 127.0.0.1 || exit
etcd_cluster_start "$tmp" || exit 1
FL_ETCD_ENDPOINT=$ETCD_EP FL_ETCD_DEAD="127.0.0.1:$(etcd_free_port 127.0.0.1)" \
  FL_ETCD_CLUSTER=$ETCD_EPS FL_ETCD_LEADER_PID=$ETCD_LEADER_PID \
  timeout 90 "$FL_BUILDDIR/tests/integration/test_etcd_client" || exit 1
FL_ETCD_ENDPOINT=$ETCD_EP timeout 30 "$FL_BUILDDIR/tests/integration/test_chunks"
