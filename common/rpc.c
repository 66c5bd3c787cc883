/* rpc.c - gRPC C core helpers shared by the PS client and flotilla-pserver
 * (see fl_rpc.h for what and why). */
#include <config.h>

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_rpc.h"

/* gRPC's own log lines go through ours (same format, same stream, our
 * level), errors only: its warnings are about states we report ourselves. */
static void grpc_log_route(gpr_log_func_args *a) {
  const char *file = a->file ? strrchr(a->file, '/') : NULL;
  fl_log(a->severity == GPR_LOG_SEVERITY_ERROR ? FL_LOG_ERROR
         : a->severity == GPR_LOG_SEVERITY_INFO ? FL_LOG_INFO
                                                : FL_LOG_DEBUG,
         "grpc (%s:%d): %s", file ? file + 1 : a->file ? a->file : "?", a->line,
         a->message ? a->message : "");
}

void fl_rpc_init(void) {
  gpr_set_log_function(grpc_log_route);
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  grpc_init();
}
void fl_rpc_shutdown(void) { grpc_shutdown(); }

fl_status fl_rpc_status_from_grpc(grpc_status_code code) {
  switch (code) {
  case GRPC_STATUS_OK: return FL_OK;
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_OUT_OF_RANGE: return FL_EINVAL;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return FL_ETIMEDOUT;
  case GRPC_STATUS_UNAVAILABLE: return FL_EAGAIN;
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_PERMISSION_DENIED: return FL_EAUTH;
  case GRPC_STATUS_NOT_FOUND: return FL_ENOTFOUND;
  case GRPC_STATUS_FAILED_PRECONDITION: return FL_ESTATE;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return FL_ENOMEM;
  case GRPC_STATUS_UNIMPLEMENTED: return FL_ENOTSUP;
  case GRPC_STATUS_CANCELLED:
  case GRPC_STATUS_ABORTED: return FL_ECLOSED;
  case GRPC_STATUS_DATA_LOSS: return FL_ECORRUPT;
  default: return FL_EREMOTE;
  }
}

grpc_status_code fl_rpc_status_to_grpc(fl_status st) {
  switch (st) {
  case FL_OK: return GRPC_STATUS_OK;
  case FL_EINVAL:
  case FL_EPROTO: return GRPC_STATUS_INVALID_ARGUMENT;
  case FL_ENOTFOUND: return GRPC_STATUS_NOT_FOUND;
  case FL_ESTATE: return GRPC_STATUS_FAILED_PRECONDITION;
  case FL_EAUTH: return GRPC_STATUS_UNAUTHENTICATED;
  case FL_EAGAIN:
  case FL_ECLOSED: return GRPC_STATUS_UNAVAILABLE;
  case FL_ETIMEDOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
  case FL_ENOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case FL_ENOTSUP: return GRPC_STATUS_UNIMPLEMENTED;
  case FL_ECORRUPT: return GRPC_STATUS_DATA_LOSS;
  default: return GRPC_STATUS_INTERNAL;
  }
}

const char *fl_rpc_code_name(grpc_status_code code) {
  static const char *const names[] = {
      "OK",        "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",   "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",      "UNAVAILABLE",      "DATA_LOSS",
      "UNAUTHENTICATED"};
  if ((int)code >= 0 && (size_t)code < sizeof names / sizeof names[0]) return names[code];
  return "UNKNOWN";
}

gpr_timespec fl_rpc_deadline(double seconds) {
  if (seconds <= 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_micros((int64_t)(seconds * 1e6), GPR_TIMESPAN));
}

/* ------------------------------------------------------------- credentials */

static int has(const char *s) { return s && s[0]; }

/* Read a whole PEM file into a NUL-terminated malloc'd string. */
static fl_status read_pem(const char *path, char **out) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n;

  *out = NULL;
  if (!f) return FL_ERR(FL_EIO, "tls: cannot open %s: %m", path);
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return FL_ERR(FL_EIO, "tls: cannot size %s: %m", path);
  }
  buf = malloc((size_t)n + 1);
  if (!buf) {
    fclose(f);
    return FL_ERR(FL_ENOMEM, "tls: out of memory reading %s", path);
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return FL_ERR(FL_EIO, "tls: cannot read %s", path);
  }
  buf[n] = '\0';
  fclose(f);
  *out = buf;
  return FL_OK;
}

static fl_status channel_creds(const fl_rpc_opts *o, grpc_channel_credentials **out) {
  char *ca = NULL, *cert = NULL, *key = NULL;
  grpc_ssl_pem_key_cert_pair pair;
  fl_status st = FL_OK;

  if (!o || (!has(o->tls_ca) && !has(o->tls_cert))) {
    *out = grpc_insecure_credentials_create();
    return FL_OK;
  }
  if (has(o->tls_ca) && (st = read_pem(o->tls_ca, &ca)) != FL_OK) goto done;
  if (has(o->tls_cert)) {
    if ((st = read_pem(o->tls_cert, &cert)) != FL_OK) goto done;
    if (!has(o->tls_key)) {
      st = FL_ERR(FL_EINVAL, "tls: certificate %s given without its key", o->tls_cert);
      goto done;
    }
    if ((st = read_pem(o->tls_key, &key)) != FL_OK) goto done;
  }
  pair.private_key = key;
  pair.cert_chain = cert;
  *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
  if (!*out) st = FL_ERR(FL_EINVAL, "tls: gRPC refused the client credentials");
done:
  free(ca);
  free(cert);
  free(key);
  return st;
}

static fl_status server_creds(const fl_rpc_opts *o, grpc_server_credentials **out) {
  char *ca = NULL, *cert = NULL, *key = NULL;
  grpc_ssl_pem_key_cert_pair pair;
  fl_status st = FL_OK;

  if (!o || (!has(o->tls_cert) && !has(o->tls_key))) {
    *out = grpc_insecure_server_credentials_create();
    return FL_OK;
  }
  if (!has(o->tls_cert) || !has(o->tls_key))
    return FL_ERR(FL_EINVAL, "tls: the server needs both a certificate and a key");
  if ((st = read_pem(o->tls_cert, &cert)) != FL_OK) goto done;
  if ((st = read_pem(o->tls_key, &key)) != FL_OK) goto done;
  if (o->tls_mutual) {
    if (!has(o->tls_ca)) {
      st = FL_ERR(FL_EINVAL, "tls: mutual TLS needs a CA to verify clients");
      goto done;
    }
    if ((st = read_pem(o->tls_ca, &ca)) != FL_OK) goto done;
  }
  pair.private_key = key;
  pair.cert_chain = cert;
  *out = grpc_ssl_server_credentials_create_ex(
      ca, &pair, 1,
      o->tls_mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
      NULL);
  if (!*out) st = FL_ERR(FL_EINVAL, "tls: gRPC refused the server credentials");
done:
  free(ca);
  free(cert);
  free(key);
  return st;
}

/* ------------------------------------------------------- channel and server */

static int max_message(const fl_rpc_opts *o) {
  size_t m = o && o->max_message_bytes ? o->max_message_bytes : FL_RPC_DEFAULT_MAX_MESSAGE;
  return m > INT_MAX ? INT_MAX : (int)m;
}

static grpc_arg int_arg(const char *key, int value) {
  grpc_arg a;
  memset(&a, 0, sizeof a);
  a.type = GRPC_ARG_INTEGER;
  a.key = (char *)key;
  a.value.integer = value;
  return a;
}

fl_status fl_rpc_channel_create(const char *target, const fl_rpc_opts *o, grpc_channel **out) {
  grpc_channel_credentials *creds = NULL;
  grpc_arg args[7];
  grpc_channel_args ca;
  int n = 0;

  *out = NULL;
  FL_TRY(channel_creds(o, &creds));
  args[n++] = int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, max_message(o));
  args[n++] = int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, max_message(o));
  /* A restarted pserver must be found again quickly.  gRPC takes the
   * "min reconnect backoff" as the least time a connection attempt gets. */
  args[n++] = int_arg(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args[n++] = int_arg(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                      o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 100);
  args[n++] = int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  /* Our own retry loop decides what is retried (pushes are deduplicated). */
  args[n++] = int_arg(GRPC_ARG_ENABLE_RETRIES, 0);
  /* Each fl channel gets its own connection (no sharing between channels
   * to the same server, so parallel channels really run in parallel). */
  args[n++] = int_arg(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ca.num_args = (size_t)n;
  ca.args = args;
  *out = grpc_channel_create(target, creds, &ca);
  grpc_channel_credentials_release(creds);
  if (!*out) return FL_ERR(FL_EINVAL, "rpc: cannot create a channel to %s", target);
  return FL_OK;
}

fl_status fl_rpc_server_create(const fl_rpc_opts *o, grpc_server **out) {
  grpc_arg args[3];
  grpc_channel_args ca;

  args[0] = int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, max_message(o));
  args[1] = int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, max_message(o));
  args[2] = int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ca.num_args = 3;
  ca.args = args;
  *out = grpc_server_create(&ca, NULL);
  if (!*out) return FL_ERR(FL_ENOMEM, "rpc: cannot create a server");
  return FL_OK;
}

fl_status fl_rpc_server_bind(grpc_server *srv, const char *addr, const fl_rpc_opts *o, int *port) {
  grpc_server_credentials *creds = NULL;
  int p;

  FL_TRY(server_creds(o, &creds));
  p = grpc_server_add_http2_port(srv, addr, creds);
  grpc_server_credentials_release(creds);
  if (p <= 0) return FL_ERR(FL_EIO, "rpc: cannot bind %s (in use, or not an address of this host)", addr);
  if (port) *port = p;
  return FL_OK;
}

int fl_rpc_token_ok(const grpc_metadata_array *md, const char *token) {
  size_t tl;
  int found = 0;
  if (!has(token)) return 1;
  tl = strlen(token);
  for (size_t i = 0; i < md->count; i++) {
    const grpc_metadata *m = &md->metadata[i];
    const uint8_t *v;
    size_t vl;
    unsigned diff;
    if (grpc_slice_str_cmp(m->key, FL_RPC_TOKEN_KEY) != 0) continue;
    v = GRPC_SLICE_START_PTR(m->value);
    vl = GRPC_SLICE_LENGTH(m->value);
    /* Constant time in the token's length: every byte is looked at. */
    diff = (unsigned)(vl != tl);
    for (size_t k = 0; k < tl; k++) diff |= (unsigned)(token[k] ^ (k < vl ? v[k] : 0));
    if (diff == 0) found = 1;
  }
  return found;
}

/* ------------------------------------------------------------------ outbuf */

/* Reference-counted storage for the copied part of a message: one ref held
 * by the outbuf while it writes into it, one per slice handed to gRPC. */
typedef struct store {
  atomic_int refs;
  size_t cap;
  uint8_t data[];
} store;

typedef struct seg {
  const uint8_t *ref; /* NULL: bytes [off, off+len) of the store */
  size_t off;
  size_t len;
} seg;

/* Smallest append kept by reference (see fl_rpc_outbuf_create). */
#define FL_RPC_ZERO_COPY_FLOOR 64

struct fl_rpc_outbuf {
  ProtobufCBuffer base; /* first: protobuf-c calls base.append */
  store *st;
  size_t used;
  seg *segs;
  size_t nseg, capseg;
  size_t zero_copy_min;
  size_t total;
  int failed;
};

static void store_unref(void *p) {
  store *s = p;
  if (atomic_fetch_sub(&s->refs, 1) == 1) free(s);
}

static int ob_add_seg(fl_rpc_outbuf *ob, const uint8_t *ref, size_t off, size_t len) {
  if (ob->nseg && !ref && !ob->segs[ob->nseg - 1].ref &&
      ob->segs[ob->nseg - 1].off + ob->segs[ob->nseg - 1].len == off) {
    ob->segs[ob->nseg - 1].len += len; /* extend the last copied segment */
    return 0;
  }
  if (ob->nseg == ob->capseg) {
    size_t nc = ob->capseg ? ob->capseg * 2 : 16;
    seg *ns = realloc(ob->segs, nc * sizeof *ns);
    if (!ns) return -1;
    ob->segs = ns;
    ob->capseg = nc;
  }
  ob->segs[ob->nseg].ref = ref;
  ob->segs[ob->nseg].off = off;
  ob->segs[ob->nseg].len = len;
  ob->nseg++;
  return 0;
}

static void ob_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  fl_rpc_outbuf *ob = (fl_rpc_outbuf *)b;
  if (ob->failed || len == 0) return;
  ob->total += len;
  if (ob->zero_copy_min && len >= ob->zero_copy_min) {
    if (ob_add_seg(ob, data, 0, len) != 0) ob->failed = 1;
    return;
  }
  if (ob->used + len > ob->st->cap) {
    /* Only the outbuf holds this store while packing, so it may move. */
    size_t nc = ob->st->cap * 2 > ob->used + len ? ob->st->cap * 2 : ob->used + len;
    store *ns = realloc(ob->st, sizeof *ns + nc);
    if (!ns) {
      ob->failed = 1;
      return;
    }
    ns->cap = nc;
    ob->st = ns;
  }
  memcpy(ob->st->data + ob->used, data, len);
  if (ob_add_seg(ob, NULL, ob->used, len) != 0) ob->failed = 1;
  ob->used += len;
}

fl_status fl_rpc_outbuf_create(size_t zero_copy_min, fl_rpc_outbuf **out) {
  fl_rpc_outbuf *ob = calloc(1, sizeof *ob);
  *out = NULL;
  if (!ob) return FL_ERR(FL_ENOMEM, "rpc: out of memory for a message buffer");
  ob->base.append = ob_append;
  /* protobuf-c appends tags and length prefixes from its own stack scratch
   * (at most a few bytes each); only larger appends point into the caller's
   * message fields, which stay alive until the send ends.  Never keep a
   * reference to anything as small as the scratch. */
  if (zero_copy_min > 0 && zero_copy_min < FL_RPC_ZERO_COPY_FLOOR)
    zero_copy_min = FL_RPC_ZERO_COPY_FLOOR;
  ob->zero_copy_min = zero_copy_min;
  *out = ob;
  return FL_OK;
}

void fl_rpc_outbuf_free(fl_rpc_outbuf *ob) {
  if (!ob) return;
  if (ob->st) store_unref(ob->st);
  free(ob->segs);
  free(ob);
}

size_t fl_rpc_outbuf_len(const fl_rpc_outbuf *ob) { return ob->total; }

fl_status fl_rpc_pack(fl_rpc_outbuf *ob, const ProtobufCMessage *msg, grpc_byte_buffer **out) {
  size_t size = protobuf_c_message_get_packed_size(msg);
  grpc_slice stack[8], *slices = stack;
  fl_status st = FL_OK;

  *out = NULL;
  /* Take fresh storage when gRPC still holds the old one. */
  if (!ob->st || atomic_load(&ob->st->refs) > 1) {
    size_t cap = ob->st ? ob->st->cap : 256;
    store *s = malloc(sizeof *s + cap);
    if (!s) return FL_ERR(FL_ENOMEM, "rpc: out of memory packing %zu bytes", size);
    atomic_init(&s->refs, 1);
    s->cap = cap;
    if (ob->st) store_unref(ob->st);
    ob->st = s;
  }
  ob->used = 0;
  ob->nseg = 0;
  ob->total = 0;
  ob->failed = 0;
  protobuf_c_message_pack_to_buffer(msg, &ob->base);
  if (ob->failed || ob->total != size)
    return FL_ERR(FL_ENOMEM, "rpc: cannot pack a %zu-byte %s", size, msg->descriptor->name);
  if (ob->nseg > sizeof stack / sizeof stack[0]) {
    slices = malloc(ob->nseg * sizeof *slices);
    if (!slices) return FL_ERR(FL_ENOMEM, "rpc: out of memory packing %zu bytes", size);
  }
  for (size_t i = 0; i < ob->nseg; i++) {
    const seg *g = &ob->segs[i];
    if (g->ref) {
      slices[i] = grpc_slice_from_static_buffer(g->ref, g->len);
    } else {
      atomic_fetch_add(&ob->st->refs, 1);
      slices[i] = grpc_slice_new_with_user_data(ob->st->data + g->off, g->len, store_unref, ob->st);
    }
  }
  if (ob->nseg == 0) {
    grpc_slice empty = grpc_empty_slice();
    *out = grpc_raw_byte_buffer_create(&empty, 1);
  } else {
    *out = grpc_raw_byte_buffer_create(slices, ob->nseg);
  }
  /* The byte buffer took its own references. */
  for (size_t i = 0; i < ob->nseg; i++) grpc_slice_unref(slices[i]);
  if (slices != stack) free(slices);
  if (!*out) st = FL_ERR(FL_ENOMEM, "rpc: cannot make a byte buffer of %zu bytes", size);
  else fl_series_add(fl_metrics_std()->bytes_sent, (double)size); /* /metrics */
  return st;
}

/* ------------------------------------------------------------------- inbuf */

fl_status fl_rpc_inbuf_read(fl_rpc_inbuf *ib, grpc_byte_buffer *bb) {
  grpc_byte_buffer_reader r;
  grpc_slice s;
  size_t need;

  ib->len = 0;
  if (!bb) return FL_EPROTO;
  if (!grpc_byte_buffer_reader_init(&r, bb)) return FL_EPROTO;
  need = grpc_byte_buffer_length(r.buffer_out);
  if (need + 1 > ib->cap) {
    size_t nc = need + 1 < 4096 ? 4096 : need + 1;
    uint8_t *nd = malloc(nc);
    if (!nd) {
      grpc_byte_buffer_reader_destroy(&r);
      return FL_ERR(FL_ENOMEM, "rpc: out of memory for a %zu-byte message", need);
    }
    free(ib->data);
    ib->data = nd;
    ib->cap = nc;
  }
  while (grpc_byte_buffer_reader_next(&r, &s)) {
    size_t l = GRPC_SLICE_LENGTH(s);
    if (ib->len + l <= need) memcpy(ib->data + ib->len, GRPC_SLICE_START_PTR(s), l);
    ib->len += l;
    grpc_slice_unref(s);
  }
  grpc_byte_buffer_reader_destroy(&r);
  if (ib->len != need) return FL_EPROTO;
  fl_series_add(fl_metrics_std()->bytes_received, (double)need); /* /metrics */
  return FL_OK;
}

void fl_rpc_inbuf_free(fl_rpc_inbuf *ib) {
  if (!ib) return;
  free(ib->data);
  memset(ib, 0, sizeof *ib);
}

/* ------------------------------------------------------------------- arena */

#define ARENA_ALIGN 16u

static void *arena_alloc(void *data, size_t size) {
  fl_rpc_arena *a = data;
  size_t sz = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  void *p;
  a->want += sz;
  if (a->used + sz <= a->cap) {
    p = a->base + a->used;
    a->used += sz;
    return p;
  }
  if (a->n_overflow == a->cap_overflow) {
    size_t nc = a->cap_overflow ? a->cap_overflow * 2 : 8;
    void **no = realloc(a->overflow, nc * sizeof *no);
    if (!no) return NULL;
    a->overflow = no;
    a->cap_overflow = nc;
  }
  p = aligned_alloc(ARENA_ALIGN, sz ? sz : ARENA_ALIGN);
  if (p) a->overflow[a->n_overflow++] = p;
  return p;
}

static void arena_free(void *data, void *p) {
  (void)data;
  (void)p; /* everything goes at the next reset */
}

void fl_rpc_arena_init(fl_rpc_arena *a) {
  memset(a, 0, sizeof *a);
  a->allocator.alloc = arena_alloc;
  a->allocator.free = arena_free;
  a->allocator.allocator_data = a;
}

void fl_rpc_arena_reset(fl_rpc_arena *a) {
  for (size_t i = 0; i < a->n_overflow; i++) free(a->overflow[i]);
  if (a->n_overflow && a->want > a->cap) {
    /* Grow the chunk so the next cycle of this size fits in it. */
    size_t nc = a->want + a->want / 4;
    uint8_t *nb = aligned_alloc(ARENA_ALIGN, (nc + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1));
    if (nb) {
      free(a->base);
      a->base = nb;
      a->cap = nc;
    }
  }
  a->n_overflow = 0;
  a->used = 0;
  a->want = 0;
}

void fl_rpc_arena_free(fl_rpc_arena *a) {
  if (!a) return;
  fl_rpc_arena_reset(a);
  free(a->base);
  free(a->overflow);
  fl_rpc_arena_init(a);
}

ProtobufCMessage *fl_rpc_unpack(fl_rpc_arena *a, const ProtobufCMessageDescriptor *desc,
                                const uint8_t *data, size_t len) {
  return protobuf_c_message_unpack(desc, &a->allocator, len, data);
}

/* ------------------------------------------------------------- client call */

fl_status fl_rpc_call_start(fl_rpc_call *c, grpc_channel *ch, grpc_completion_queue *cq,
                            const char *method, grpc_byte_buffer *req, double timeout_s,
                            const char *token, void *tag) {
  grpc_op ops[6];
  grpc_call_error e;

  memset(c, 0, sizeof *c);
  c->send = req;
  grpc_metadata_array_init(&c->initial_md);
  grpc_metadata_array_init(&c->trailing_md);
  c->details = grpc_empty_slice();
  c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                     grpc_slice_from_static_string(method), NULL,
                                     fl_rpc_deadline(timeout_s), NULL);
  c->active = 1;
  if (!c->call) {
    fl_rpc_call_end(c);
    return FL_ERR(FL_ENOMEM, "rpc: cannot create a call to %s", method);
  }
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (has(token)) {
    c->md.key = grpc_slice_from_static_string(FL_RPC_TOKEN_KEY);
    c->md.value = grpc_slice_from_static_string(token);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &c->md;
  }
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &c->recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing_md;
  ops[5].data.recv_status_on_client.status = &c->status;
  ops[5].data.recv_status_on_client.status_details = &c->details;
  e = grpc_call_start_batch(c->call, ops, 6, tag, NULL);
  if (e != GRPC_CALL_OK) {
    fl_rpc_call_end(c);
    return FL_ERR(FL_EIO, "rpc: cannot start %s (call error %d)", method, (int)e);
  }
  return FL_OK;
}

void fl_rpc_call_details(const fl_rpc_call *c, char *buf, size_t cap) {
  size_t l = GRPC_SLICE_LENGTH(c->details);
  if (cap == 0) return;
  if (l >= cap) l = cap - 1;
  memcpy(buf, GRPC_SLICE_START_PTR(c->details), l);
  buf[l] = '\0';
}

void fl_rpc_call_end(fl_rpc_call *c) {
  if (!c->active) return;
  if (c->call) grpc_call_unref(c->call);
  if (c->send) grpc_byte_buffer_destroy(c->send);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  grpc_metadata_array_destroy(&c->initial_md);
  grpc_metadata_array_destroy(&c->trailing_md);
  grpc_slice_unref(c->details);
  memset(c, 0, sizeof *c);
}

fl_status fl_rpc_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                       double timeout_s, const char *token, fl_rpc_outbuf *ob, fl_rpc_inbuf *ib,
                       grpc_status_code *code, char *details, size_t cap) {
  grpc_completion_queue *cq;
  grpc_byte_buffer *bb = NULL;
  fl_rpc_call c;
  grpc_event ev;
  fl_status st;

  *code = GRPC_STATUS_INTERNAL;
  if (details && cap) details[0] = '\0';
  FL_TRY(fl_rpc_pack(ob, req, &bb));
  cq = grpc_completion_queue_create_for_pluck(NULL);
  if (!cq) {
    grpc_byte_buffer_destroy(bb);
    return FL_ERR(FL_ENOMEM, "rpc: cannot create a completion queue");
  }
  st = fl_rpc_call_start(&c, ch, cq, method, bb, timeout_s, token, &c);
  if (st == FL_OK) {
    ev = grpc_completion_queue_pluck(cq, &c, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    (void)ev; /* RECV_STATUS_ON_CLIENT always succeeds; the status says it all */
    *code = c.status;
    if (details) fl_rpc_call_details(&c, details, cap);
    st = fl_rpc_status_from_grpc(c.status);
    if (st == FL_OK && fl_rpc_inbuf_read(ib, c.recv) != FL_OK) {
      *code = GRPC_STATUS_INTERNAL;
      st = FL_EPROTO;
    }
    fl_rpc_call_end(&c);
  }
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  return st;
}
