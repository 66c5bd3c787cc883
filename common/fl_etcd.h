/* fl_etcd.h - a small client of etcd's v3 gRPC API (etcd 3.4), for the
 * elastic rendezvous of flotilla-run.
 *
 * Debian packages no C client of etcd, so this one speaks etcd's own wire
 * (proto/etcd_min.proto keeps etcd's package, methods and field numbers)
 * through the gRPC C core wrappers of fl_rpc.h: KV.Range, KV.Put,
 * KV.DeleteRange, KV.Txn (compare-and-swap on a key's mod revision, create
 * if absent),
 * Lease.LeaseGrant, Lease.LeaseRevoke and Lease.LeaseKeepAlive (etcd's
 * bidirectional stream, used one request per call).  There is no Watch:
 * callers poll with Range and compare revisions.
 *
 * Every call is blocking with a deadline; failures return an fl_status and
 * are logged once here, naming the endpoint, the method and the key.
 * Threading: one fl_etcd by one thread at a time; the lease keeper runs its
 * own connection on its own thread. */
#ifndef FL_ETCD_H
#define FL_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

typedef struct fl_etcd fl_etcd;

/* One key as Range returned it (strings NUL-terminated, owned by the array
 * that holds them: fl_etcd_kvs_free). */
typedef struct fl_etcd_kv {
  char *key;
  char *value;
  size_t value_len;
  int64_t create_revision;
  int64_t mod_revision;
  int64_t version;
  int64_t lease;
} fl_etcd_kv;

/* Connect to endpoints: "host:port", "http://host:port" or a comma list of
 * numeric IPv4 "a.b.c.d:port" (gRPC's ipv4: target: it picks the first that
 * answers and moves on when it fails).
 * timeout_s bounds every later call.  Nothing travels until the first call.
 * The caller owns *out (fl_etcd_close). */
fl_status fl_etcd_connect(const char *endpoints, double timeout_s, fl_etcd **out);
void fl_etcd_close(fl_etcd *e);

/* The endpoints as given (for messages). */
const char *fl_etcd_endpoint(const fl_etcd *e);

/* Put key = value, attached to lease (0 = none). */
fl_status fl_etcd_put(fl_etcd *e, const char *key, const char *value, int64_t lease);

/* Every key starting with prefix, in key order, into *kvs (caller owns:
 * fl_etcd_kvs_free), *n of them; *revision (may be NULL) gets the store's
 * revision at the read.  A key alone is the prefix of itself and of longer
 * keys: pass exact = 1 to read only that key. */
fl_status fl_etcd_range(fl_etcd *e, const char *prefix, int exact, fl_etcd_kv **kvs, size_t *n,
                        int64_t *revision);
void fl_etcd_kvs_free(fl_etcd_kv *kvs, size_t n);

/* Delete every key starting with prefix; *deleted (may be NULL) gets the count. */
fl_status fl_etcd_delete_prefix(fl_etcd *e, const char *prefix, int64_t *deleted);

/* Compare-and-swap: put key = value only if the key's mod revision is still
 * mod_revision (0: only if the key does not exist).  *won gets 1 when this
 * put happened, 0 when another writer came first (not an error). */
fl_status fl_etcd_cas(fl_etcd *e, const char *key, int64_t mod_revision, const char *value,
                      int *won);

/* Create key = value under lease (0 = none) in one transaction, only if
 * the key is absent and so is `unless` (NULL: no second key): a claim
 * that vanishes with its holder's lease and is never taken again once
 * `unless` (its "done" mark) exists.  *won gets 1 when this put happened,
 * 0 when either key exists (not an error). */
fl_status fl_etcd_create(fl_etcd *e, const char *key, const char *value, int64_t lease,
                         const char *unless, int *won);

/* Grant a lease of ttl_s seconds; *id gets its id. */
fl_status fl_etcd_lease_grant(fl_etcd *e, int64_t ttl_s, int64_t *id);

/* Renew lease id once; *ttl gets the seconds granted again, 0 when the lease
 * has expired (etcd forgot it: the keys under it are gone). */
fl_status fl_etcd_lease_keepalive(fl_etcd *e, int64_t id, int64_t *ttl);

/* Revoke lease id now (its keys are deleted). */
fl_status fl_etcd_lease_revoke(fl_etcd *e, int64_t id);

/* A thread renewing one lease every period_s seconds on its own
 * connection to endpoints, until stopped or the lease is lost (etcd
 * answered TTL 0, or no renewal went through for a whole ttl_s).
 * The caller owns *out (fl_etcd_keeper_stop). */
typedef struct fl_etcd_keeper fl_etcd_keeper;
fl_status fl_etcd_keeper_start(const char *endpoints, int64_t lease, int64_t ttl_s,
                               double period_s, fl_etcd_keeper **out);
/* 1 while the lease is held, 0 once it was lost. */
int fl_etcd_keeper_alive(fl_etcd_keeper *k);
/* Stop the thread (it does not revoke the lease) and free k. */
void fl_etcd_keeper_stop(fl_etcd_keeper *k);

#endif
