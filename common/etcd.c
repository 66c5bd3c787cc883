/* etcd.c - etcd v3 client over the gRPC C core (see fl_etcd.h).
 *
 * Each call packs one request of proto/etcd_min.proto, makes one blocking
 * call through fl_rpc_unary (LeaseKeepAlive too: etcd answers a streamed
 * request before reading the next, so one request and a half-close get one
 * answer) and unpacks the answer with protobuf-c's default allocator. */
#include "fl_etcd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd_min.pb-c.h"
#include "fl_log.h"
#include "fl_rpc.h"

#define ETCD_EP_MAX 512

struct fl_etcd {
  char endpoints[ETCD_EP_MAX];
  double timeout_s;
  grpc_channel *ch;
  fl_rpc_outbuf *ob;
  fl_rpc_inbuf ib;
};

/* "http://a:1,b:2" -> "a:1,b:2" as a gRPC target ("ipv4:a:1,b:2" for a list). */
static fl_status make_target(const char *eps, char *out, size_t cap) {
  size_t o = 0;
  int n = 0;
  const char *p = eps;
  out[0] = '\0';
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 7 && !strncmp(p, "http://", 7)) p += 7, len -= 7;
    if (len == 0 || o + len + 2 >= cap)
      return FL_ERR(FL_EINVAL, "etcd: bad endpoint list '%s' (want host:port[,host:port...])", eps);
    if (n++) out[o++] = ',';
    memcpy(out + o, p, len);
    o += len;
    out[o] = '\0';
    p = end ? end + 1 : p + len;
  }
  if (n == 0) return FL_ERR(FL_EINVAL, "etcd: empty endpoint");
  if (n > 1) {
    if (o + 6 >= cap) return FL_ERR(FL_EINVAL, "etcd: endpoint list '%s' too long", eps);
    memmove(out + 5, out, o + 1);
    memcpy(out, "ipv4:", 5);
  }
  return FL_OK;
}

/* Ownership: the caller owns *out (fl_etcd_close). */
fl_status fl_etcd_connect(const char *endpoints, double timeout_s, fl_etcd **out) {
  char target[ETCD_EP_MAX + 8];
  fl_rpc_opts ro;
  fl_etcd *e;
  *out = NULL;
  if (!endpoints || strlen(endpoints) >= ETCD_EP_MAX)
    return FL_ERR(FL_EINVAL, "etcd: endpoint missing or too long");
  FL_TRY(make_target(endpoints, target, sizeof target));
  if (!(e = calloc(1, sizeof *e))) return FL_ERR(FL_ENOMEM, "etcd: out of memory");
  snprintf(e->endpoints, sizeof e->endpoints, "%s", endpoints);
  e->timeout_s = timeout_s > 0 ? timeout_s : 5.0;
  fl_rpc_init();
  memset(&ro, 0, sizeof ro);
  /* etcd's handshake can take over a second on a loaded machine: a
   * connection attempt gets the call's whole time, not gRPC's 100 ms */
  ro.connect_timeout_ms = (int)(e->timeout_s * 1000);
  fl_status st = fl_rpc_outbuf_create(0, &e->ob);
  if (st == FL_OK) st = fl_rpc_channel_create(target, &ro, &e->ch);
  if (st != FL_OK) {
    fl_etcd_close(e);
    return st;
  }
  *out = e;
  return FL_OK;
}

/* Ownership: frees e and everything it holds. */
void fl_etcd_close(fl_etcd *e) {
  if (!e) return;
  if (e->ch) grpc_channel_destroy(e->ch);
  fl_rpc_outbuf_free(e->ob);
  fl_rpc_inbuf_free(&e->ib);
  free(e);
  fl_rpc_shutdown();
}

/* Ownership: the string is e's. */
const char *fl_etcd_endpoint(const fl_etcd *e) { return e->endpoints; }

/* One call of method on key; *out (caller frees with
 * protobuf_c_message_free_unpacked) gets the answer. */
static fl_status call(fl_etcd *e, const char *method, const char *key, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp, ProtobufCMessage **out) {
  grpc_status_code code;
  char details[256];
  fl_status st = fl_rpc_unary(e->ch, method, req, e->timeout_s, NULL, e->ob, &e->ib, &code,
                              details, sizeof details);
  *out = NULL;
  if (st != FL_OK)
    return FL_ERR(st, "etcd %s: %s %s failed: %s (%s); is etcd running there?", e->endpoints,
                  method, key, fl_rpc_code_name(code), details);
  *out = protobuf_c_message_unpack(resp, NULL, e->ib.len, e->ib.data);
  if (!*out)
    return FL_ERR(FL_EPROTO, "etcd %s: %s %s: the answer is not a %s", e->endpoints, method, key,
                  resp->name);
  return FL_OK;
}

static ProtobufCBinaryData bin(const char *s) {
  return (ProtobufCBinaryData){.len = strlen(s), .data = (uint8_t *)s};
}

/* Ownership: nothing kept. */
fl_status fl_etcd_put(fl_etcd *e, const char *key, const char *value, int64_t lease) {
  Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
  ProtobufCMessage *resp;
  req.key = bin(key);
  req.value = bin(value);
  req.lease = lease;
  FL_TRY(call(e, "/etcdserverpb.KV/Put", key, &req.base, &etcdserverpb__put_response__descriptor,
              &resp));
  protobuf_c_message_free_unpacked(resp, NULL);
  return FL_OK;
}

/* The end of the range of keys starting with prefix (prefix + 1 on its last
 * byte that is not 0xff; "\0" = every key after it) into out[cap]. */
static void prefix_end(const char *prefix, char *out, size_t cap, size_t *len) {
  size_t n = strlen(prefix);
  if (n >= cap) n = cap - 1;
  memcpy(out, prefix, n);
  while (n > 0 && (unsigned char)out[n - 1] == 0xff) n--;
  if (n == 0) {
    out[0] = '\0';
    *len = 1;
    return;
  }
  out[n - 1] = (char)((unsigned char)out[n - 1] + 1);
  *len = n;
}

static char *dup_bin(ProtobufCBinaryData b) {
  char *s = malloc(b.len + 1);
  if (!s) return NULL;
  if (b.len) memcpy(s, b.data, b.len);
  s[b.len] = '\0';
  return s;
}

/* Copy the answer's keys into a fresh array. */
static fl_status copy_kvs(const Etcdserverpb__RangeResponse *r, fl_etcd_kv **kvs, size_t *n) {
  *kvs = NULL;
  *n = 0;
  if (r->n_kvs == 0) return FL_OK;
  fl_etcd_kv *a = calloc(r->n_kvs, sizeof *a);
  if (!a) return FL_ERR(FL_ENOMEM, "etcd: out of memory for %zu keys", r->n_kvs);
  for (size_t i = 0; i < r->n_kvs; i++) {
    const Etcdserverpb__KeyValue *kv = r->kvs[i];
    a[i].key = dup_bin(kv->key);
    a[i].value = dup_bin(kv->value);
    a[i].value_len = kv->value.len;
    a[i].create_revision = kv->create_revision;
    a[i].mod_revision = kv->mod_revision;
    a[i].version = kv->version;
    a[i].lease = kv->lease;
    if (!a[i].key || !a[i].value) {
      fl_etcd_kvs_free(a, i + 1);
      return FL_ERR(FL_ENOMEM, "etcd: out of memory for a key");
    }
  }
  *kvs = a;
  *n = r->n_kvs;
  return FL_OK;
}

/* Ownership: the caller owns *kvs (fl_etcd_kvs_free). */
fl_status fl_etcd_range(fl_etcd *e, const char *prefix, int exact, fl_etcd_kv **kvs, size_t *n,
                        int64_t *revision) {
  Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
  ProtobufCMessage *m;
  char end[ETCD_EP_MAX];
  size_t end_len;
  *kvs = NULL;
  *n = 0;
  req.key = bin(prefix);
  if (!exact) {
    prefix_end(prefix, end, sizeof end, &end_len);
    req.range_end = (ProtobufCBinaryData){.len = end_len, .data = (uint8_t *)end};
  }
  FL_TRY(call(e, "/etcdserverpb.KV/Range", prefix, &req.base,
              &etcdserverpb__range_response__descriptor, &m));
  Etcdserverpb__RangeResponse *r = (Etcdserverpb__RangeResponse *)m;
  if (revision) *revision = r->header ? r->header->revision : 0;
  fl_status st = copy_kvs(r, kvs, n);
  protobuf_c_message_free_unpacked(m, NULL);
  return st;
}

/* Ownership: frees kvs and its strings. */
void fl_etcd_kvs_free(fl_etcd_kv *kvs, size_t n) {
  if (!kvs) return;
  for (size_t i = 0; i < n; i++) {
    free(kvs[i].key);
    free(kvs[i].value);
  }
  free(kvs);
}

/* Ownership: nothing kept. */
fl_status fl_etcd_delete_prefix(fl_etcd *e, const char *prefix, int64_t *deleted) {
  Etcdserverpb__DeleteRangeRequest req = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
  ProtobufCMessage *m;
  char end[ETCD_EP_MAX];
  size_t end_len;
  req.key = bin(prefix);
  prefix_end(prefix, end, sizeof end, &end_len);
  req.range_end = (ProtobufCBinaryData){.len = end_len, .data = (uint8_t *)end};
  FL_TRY(call(e, "/etcdserverpb.KV/DeleteRange", prefix, &req.base,
              &etcdserverpb__delete_range_response__descriptor, &m));
  if (deleted) *deleted = ((Etcdserverpb__DeleteRangeResponse *)m)->deleted;
  protobuf_c_message_free_unpacked(m, NULL);
  return FL_OK;
}

/* Put key = value under lease (0: none) if every keys[i]'s mod revision
 * is still revs[i] (0: the key is absent); *won says whether it was. */
static fl_status txn_put(fl_etcd *e, const char *key, const char *value, int64_t lease,
                         const char *const *keys, const int64_t *revs, size_t n, int *won) {
  Etcdserverpb__Compare cmp[2], *cmps[2];
  Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
  Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
  Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
  Etcdserverpb__RequestOp *ops[1] = {&op};
  ProtobufCMessage *m;
  *won = 0;
  for (size_t i = 0; i < n && i < 2; i++) {
    etcdserverpb__compare__init(&cmp[i]);
    cmp[i].result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp[i].target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
    cmp[i].key = bin(keys[i]);
    cmp[i].target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
    cmp[i].mod_revision = revs[i];
    cmps[i] = &cmp[i];
  }
  put.key = bin(key);
  put.value = bin(value);
  put.lease = lease;
  op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
  op.request_put = &put;
  req.n_compare = n < 2 ? n : 2;
  req.compare = cmps;
  req.n_success = 1;
  req.success = ops;
  FL_TRY(call(e, "/etcdserverpb.KV/Txn", key, &req.base, &etcdserverpb__txn_response__descriptor,
              &m));
  *won = ((Etcdserverpb__TxnResponse *)m)->succeeded;
  protobuf_c_message_free_unpacked(m, NULL);
  return FL_OK;
}

/* Ownership: nothing kept. */
fl_status fl_etcd_cas(fl_etcd *e, const char *key, int64_t mod_revision, const char *value,
                      int *won) {
  const char *keys[1] = {key};
  return txn_put(e, key, value, 0, keys, &mod_revision, 1, won);
}

/* Ownership: nothing kept. */
fl_status fl_etcd_create(fl_etcd *e, const char *key, const char *value, int64_t lease,
                         const char *unless, int *won) {
  const char *keys[2] = {key, unless};
  const int64_t revs[2] = {0, 0};
  return txn_put(e, key, value, lease, keys, revs, unless ? 2 : 1, won);
}

/* Ownership: nothing kept. */
fl_status fl_etcd_lease_grant(fl_etcd *e, int64_t ttl_s, int64_t *id) {
  Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
  ProtobufCMessage *m;
  req.ttl = ttl_s;
  FL_TRY(call(e, "/etcdserverpb.Lease/LeaseGrant", "(lease)", &req.base,
              &etcdserverpb__lease_grant_response__descriptor, &m));
  Etcdserverpb__LeaseGrantResponse *r = (Etcdserverpb__LeaseGrantResponse *)m;
  fl_status st = FL_OK;
  if (r->error && r->error[0])
    st = FL_ERR(FL_EREMOTE, "etcd %s: LeaseGrant of %lld s refused: %s", e->endpoints,
                (long long)ttl_s, r->error);
  *id = r->id;
  protobuf_c_message_free_unpacked(m, NULL);
  return st;
}

/* call for a Lease method about lease id, which its errors name. */
static fl_status lease_call(fl_etcd *e, const char *method, int64_t id, const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp, ProtobufCMessage **m) {
  char key[32];
  snprintf(key, sizeof key, "lease %llx", (unsigned long long)id);
  return call(e, method, key, req, resp, m);
}

/* Ownership: nothing kept. */
fl_status fl_etcd_lease_keepalive(fl_etcd *e, int64_t id, int64_t *ttl) {
  Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
  ProtobufCMessage *m;
  req.id = id;
  FL_TRY(lease_call(e, "/etcdserverpb.Lease/LeaseKeepAlive", id, &req.base,
                    &etcdserverpb__lease_keep_alive_response__descriptor, &m));
  *ttl = ((Etcdserverpb__LeaseKeepAliveResponse *)m)->ttl;
  protobuf_c_message_free_unpacked(m, NULL);
  return FL_OK;
}

/* Ownership: nothing kept. */
fl_status fl_etcd_lease_revoke(fl_etcd *e, int64_t id) {
  Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
  ProtobufCMessage *m;
  req.id = id;
  FL_TRY(lease_call(e, "/etcdserverpb.Lease/LeaseRevoke", id, &req.base,
                    &etcdserverpb__lease_revoke_response__descriptor, &m));
  protobuf_c_message_free_unpacked(m, NULL);
  return FL_OK;
}

/* ------------------------------------------------------------ lease keeper */

struct fl_etcd_keeper {
  fl_etcd *e;
  int64_t lease, ttl_s;
  double period_s;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop, alive;
};

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait period_s or until stopped; 1 when stopped. */
static int keeper_wait(fl_etcd_keeper *k) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  double t = (double)until.tv_sec + until.tv_nsec * 1e-9 + k->period_s;
  until.tv_sec = (time_t)t;
  until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
  pthread_mutex_lock(&k->mu);
  while (!k->stop && pthread_cond_timedwait(&k->cv, &k->mu, &until) == 0) {
  }
  int stop = k->stop;
  pthread_mutex_unlock(&k->mu);
  return stop;
}

static void *keeper_main(void *arg) {
  fl_etcd_keeper *k = arg;
  double last_ok = mono_s();
  while (!keeper_wait(k)) {
    int64_t ttl = -1;
    if (fl_etcd_lease_keepalive(k->e, k->lease, &ttl) == FL_OK) {
      if (ttl > 0) {
        last_ok = mono_s();
        continue;
      }
      FL_LOGE("etcd %s: lease %llx expired (etcd forgot it); this node left the job",
              k->e->endpoints, (unsigned long long)k->lease);
    } else if (mono_s() - last_ok < (double)k->ttl_s) {
      continue;
    } else {
      FL_LOGE("etcd %s: no renewal of lease %llx for %lld s: the lease is lost", k->e->endpoints,
              (unsigned long long)k->lease, (long long)k->ttl_s);
    }
    pthread_mutex_lock(&k->mu);
    k->alive = 0;
    pthread_mutex_unlock(&k->mu);
    break;
  }
  return NULL;
}

/* Ownership: the caller owns *out (fl_etcd_keeper_stop). */
fl_status fl_etcd_keeper_start(const char *endpoints, int64_t lease, int64_t ttl_s,
                               double period_s, fl_etcd_keeper **out) {
  fl_etcd_keeper *k = calloc(1, sizeof *k);
  *out = NULL;
  if (!k) return FL_ERR(FL_ENOMEM, "etcd: out of memory for a lease keeper");
  fl_status st = fl_etcd_connect(endpoints, period_s, &k->e);
  if (st != FL_OK) {
    free(k);
    return st;
  }
  k->lease = lease;
  k->ttl_s = ttl_s;
  k->period_s = period_s;
  k->alive = 1;
  pthread_mutex_init(&k->mu, NULL);
  pthread_cond_init(&k->cv, NULL);
  if (pthread_create(&k->th, NULL, keeper_main, k) != 0) {
    fl_etcd_close(k->e);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k);
    return FL_ERR(FL_ENOMEM, "etcd %s: cannot start the keeper thread of lease %llx", endpoints,
                  (unsigned long long)lease);
  }
  *out = k;
  return FL_OK;
}

/* Ownership: nothing kept. */
int fl_etcd_keeper_alive(fl_etcd_keeper *k) {
  pthread_mutex_lock(&k->mu);
  int a = k->alive;
  pthread_mutex_unlock(&k->mu);
  return a;
}

/* Ownership: frees k and its connection. */
void fl_etcd_keeper_stop(fl_etcd_keeper *k) {
  if (!k) return;
  pthread_mutex_lock(&k->mu);
  k->stop = 1;
  pthread_cond_signal(&k->cv);
  pthread_mutex_unlock(&k->mu);
  pthread_join(k->th, NULL);
  fl_etcd_close(k->e);
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
  free(k);
}
