/* test_etcd_client.c - the etcd v3 client (common/etcd.c) against a real
 * etcd whose endpoint test_etcd.sh passes in FL_ETCD_ENDPOINT: put and
 * range (exact and by prefix), delete, compare-and-swap won and lost, a
 * create-if-absent under a lease (a chunk claim), a
 * lease kept alive by its keeper, a lease left to expire taking its key
 * with it, a dead endpoint failing within the deadline, and a 3-member
 * cluster losing its leader. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "etcd_testutil.h"
#include "fl_etcd.h"

START_TEST(put_range_delete) {
  fl_etcd *e;
  fl_etcd_kv *kvs;
  size_t n;
  int64_t rev = 0, del = 0;
  ck_assert_int_eq(fl_etcd_connect(etcd_test_endpoint(), 5, &e), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/t/a/2", "two", 0), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/t/a/1", "one", 0), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/t/ab", "other", 0), FL_OK);
  ck_assert_int_eq(fl_etcd_range(e, "/t/a/", 0, &kvs, &n, &rev), FL_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_str_eq(kvs[0].key, "/t/a/1");
  ck_assert_str_eq(kvs[0].value, "one");
  ck_assert_str_eq(kvs[1].key, "/t/a/2");
  ck_assert_int_ge(rev, kvs[1].mod_revision);
  fl_etcd_kvs_free(kvs, n);
  ck_assert_int_eq(fl_etcd_range(e, "/t/a", 1, &kvs, &n, NULL), FL_OK);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(fl_etcd_delete_prefix(e, "/t/a/", &del), FL_OK);
  ck_assert_int_eq(del, 2);
  ck_assert_int_eq(fl_etcd_range(e, "/t/ab", 1, &kvs, &n, NULL), FL_OK);
  ck_assert_uint_eq(n, 1);
  fl_etcd_kvs_free(kvs, n);
  fl_etcd_close(e);
}
END_TEST

START_TEST(compare_and_swap) {
  fl_etcd *e;
  fl_etcd_kv *kvs;
  size_t n;
  int won = -1;
  ck_assert_int_eq(fl_etcd_connect(etcd_test_endpoint(), 5, &e), FL_OK);
  ck_assert_int_eq(fl_etcd_cas(e, "/t/round", 0, "r1", &won), FL_OK);
  ck_assert_int_eq(won, 1);
  ck_assert_int_eq(fl_etcd_cas(e, "/t/round", 0, "r1-again", &won), FL_OK);
  ck_assert_int_eq(won, 0); /* exists now */
  ck_assert_int_eq(fl_etcd_range(e, "/t/round", 1, &kvs, &n, NULL), FL_OK);
  ck_assert_uint_eq(n, 1);
  int64_t mod = kvs[0].mod_revision;
  fl_etcd_kvs_free(kvs, n);
  ck_assert_int_eq(fl_etcd_cas(e, "/t/round", mod, "r2", &won), FL_OK);
  ck_assert_int_eq(won, 1);
  ck_assert_int_eq(fl_etcd_cas(e, "/t/round", mod, "r2-late", &won), FL_OK);
  ck_assert_int_eq(won, 0); /* a writer with a stale revision loses */
  ck_assert_int_eq(fl_etcd_range(e, "/t/round", 1, &kvs, &n, NULL), FL_OK);
  ck_assert_str_eq(kvs[0].value, "r2");
  fl_etcd_kvs_free(kvs, n);
  fl_etcd_close(e);
}
END_TEST

static size_t count(fl_etcd *e, const char *key) {
  fl_etcd_kv *kvs;
  size_t n;
  ck_assert_int_eq(fl_etcd_range(e, key, 1, &kvs, &n, NULL), FL_OK);
  fl_etcd_kvs_free(kvs, n);
  return n;
}

START_TEST(lease_kept_then_expires) {
  fl_etcd *e;
  fl_etcd_keeper *k;
  int64_t id = 0, ttl = -1;
  ck_assert_int_eq(fl_etcd_connect(etcd_test_endpoint(), 5, &e), FL_OK);
  ck_assert_int_eq(fl_etcd_lease_grant(e, 2, &id), FL_OK);
  ck_assert_int_ne(id, 0);
  ck_assert_int_eq(fl_etcd_put(e, "/t/node", "alive", id), FL_OK);
  ck_assert_int_eq(fl_etcd_keeper_start(etcd_test_endpoint(), id, 2, 0.5, &k), FL_OK);
  sleep(3); /* longer than the TTL: the keeper holds it */
  ck_assert_int_eq(fl_etcd_keeper_alive(k), 1);
  ck_assert_uint_eq(count(e, "/t/node"), 1);
  fl_etcd_keeper_stop(k);
  ck_assert_int_eq(fl_etcd_lease_keepalive(e, id, &ttl), FL_OK);
  ck_assert_int_gt(ttl, 0);
  sleep(3); /* nobody renews: etcd expires it with the key */
  ck_assert_uint_eq(count(e, "/t/node"), 0);
  ck_assert_int_eq(fl_etcd_lease_keepalive(e, id, &ttl), FL_OK);
  ck_assert_int_eq(ttl, 0);
  /* revoke deletes at once */
  ck_assert_int_eq(fl_etcd_lease_grant(e, 30, &id), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/t/node2", "x", id), FL_OK);
  ck_assert_int_eq(fl_etcd_lease_revoke(e, id), FL_OK);
  ck_assert_uint_eq(count(e, "/t/node2"), 0);
  fl_etcd_close(e);
}
END_TEST

/* A chunk claim: created under a lease only while neither it nor its done
 * mark exists; it vanishes with the lease, then another takes it; the
 * done mark (no lease) keeps it from ever being taken again. */
START_TEST(claim_create_if_absent) {
  fl_etcd *e;
  int64_t a = 0, b = 0;
  int won = -1;
  ck_assert_int_eq(fl_etcd_connect(etcd_test_endpoint(), 5, &e), FL_OK);
  ck_assert_int_eq(fl_etcd_lease_grant(e, 30, &a), FL_OK);
  ck_assert_int_eq(fl_etcd_lease_grant(e, 30, &b), FL_OK);
  ck_assert_int_eq(fl_etcd_create(e, "/t/e0/c1", "a", a, "/t/e0/c1/done", &won), FL_OK);
  ck_assert_int_eq(won, 1);
  ck_assert_int_eq(fl_etcd_create(e, "/t/e0/c1", "b", b, "/t/e0/c1/done", &won), FL_OK);
  ck_assert_int_eq(won, 0); /* held by a */
  ck_assert_int_eq(fl_etcd_lease_revoke(e, a), FL_OK); /* a dies: its claim goes */
  ck_assert_int_eq(fl_etcd_create(e, "/t/e0/c1", "b", b, "/t/e0/c1/done", &won), FL_OK);
  ck_assert_int_eq(won, 1);
  ck_assert_int_eq(fl_etcd_put(e, "/t/e0/c1/done", "b", 0), FL_OK);
  ck_assert_int_eq(fl_etcd_lease_revoke(e, b), FL_OK);
  ck_assert_uint_eq(count(e, "/t/e0/c1"), 0);
  ck_assert_int_eq(fl_etcd_create(e, "/t/e0/c1", "c", 0, "/t/e0/c1/done", &won), FL_OK);
  ck_assert_int_eq(won, 0); /* done: never taken again */
  ck_assert_int_eq(fl_etcd_create(e, "/t/e0/c2", "c", 0, NULL, &won), FL_OK);
  ck_assert_int_eq(won, 1);
  fl_etcd_close(e);
}
END_TEST

START_TEST(dead_endpoint_fails) {
  fl_etcd *e;
  fl_etcd_kv *kvs;
  size_t n;
  const char *dead = getenv("FL_ETCD_DEAD");
  ck_assert_ptr_nonnull(dead);
  ck_assert_int_eq(fl_etcd_connect(dead, 1, &e), FL_OK);
  time_t t0 = time(NULL);
  ck_assert_int_ne(fl_etcd_range(e, "/t", 0, &kvs, &n, NULL), FL_OK);
  ck_assert_int_le(time(NULL) - t0, 3);
  fl_etcd_close(e);
  /* a list whose first member is dead still reaches the live one */
  char list[256];
  snprintf(list, sizeof list, "%s,%s", dead, etcd_test_endpoint());
  ck_assert_int_eq(fl_etcd_connect(list, 5, &e), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/t/list", "ok", 0), FL_OK);
  fl_etcd_close(e);
  ck_assert_int_ne(fl_etcd_connect("", 1, &e), FL_OK);
}
END_TEST

/* A 3-member cluster (FL_ETCD_CLUSTER) loses its leader (killed here):
 * calls through the endpoint list go on once a new leader is elected, and
 * a lease kept alive meanwhile survives. */
START_TEST(cluster_leader_lost) {
  const char *eps = getenv("FL_ETCD_CLUSTER"), *lp = getenv("FL_ETCD_LEADER_PID");
  fl_etcd *e;
  fl_etcd_keeper *k;
  int64_t id = 0;
  ck_assert_msg(eps && lp, "FL_ETCD_CLUSTER / FL_ETCD_LEADER_PID not set");
  ck_assert_int_eq(fl_etcd_connect(eps, 3, &e), FL_OK);
  /* 5 s: an election among the two members left took over 3 s at a load of
   * 20 on 2 cores, and the keeper gives a lease up after a TTL without a renewal */
  ck_assert_int_eq(fl_etcd_lease_grant(e, 5, &id), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/c/node", "alive", id), FL_OK);
  ck_assert_int_eq(fl_etcd_put(e, "/c/before", "1", 0), FL_OK);
  ck_assert_int_eq(fl_etcd_keeper_start(eps, id, 5, 0.5, &k), FL_OK);
  ck_assert_int_eq(kill((pid_t)atol(lp), SIGKILL), 0);
  time_t t0 = time(NULL);
  while (fl_etcd_put(e, "/c/after", "1", 0) != FL_OK) ck_assert_int_le(time(NULL) - t0, 15);
  sleep(6); /* longer than the TTL */
  ck_assert_int_eq(fl_etcd_keeper_alive(k), 1);
  ck_assert_uint_eq(count(e, "/c/node"), 1);
  ck_assert_uint_eq(count(e, "/c/before"), 1);
  fl_etcd_keeper_stop(k);
  fl_etcd_close(e);
}
END_TEST

int main(void) {
  const TTest *tests[] = {put_range_delete,       compare_and_swap,    lease_kept_then_expires,
                          claim_create_if_absent, dead_endpoint_fails, cluster_leader_lost};
  return etcd_test_main("etcd_client", CK_NOFORK, tests, sizeof tests / sizeof *tests);
}
