/* ps_client.c - the trainer's client of flotilla-pserver (see
 * fl_ps_client.h): channels, the completion-queue driver thread with
 * retries and backoff, registration and recovery, dense block pushes and
 * pulls, sparse row pulls and pushes, barriers, heartbeats. */
#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_optim.h"
#include "fl_ps_client.h"
#include "fl_rpc.h"
#include "fl_protocol.h"
#include "fl_timeline.h"
#include "flotilla.pb-c.h"

#define ZERO_COPY_MIN (64u << 10)
#define SPARSE_CHUNK 65536u
#define MAX_RECOVERIES 8
#define PULL_GROUP_BYTES (1u << 20) /* dense blocks of a server pulled in one call, at most */
#define SPARSE_BATCH_BYTES (8u << 20) /* rows of the sparse calls batched in one call, at most */
#define PUSH_GROUP_BYTES (1u << 20) /* dense blocks of a server pushed in one call, at most */

/* Methods are called by their row of the wire's table (fl_protocol.h). */
#define PATH(m) (fl_proto_methods[FL_PROTO_##m].rpc.path)
#define ANSWER(m) (fl_proto_methods[FL_PROTO_##m].rpc.resp)

/* An operation in flight is one of the wire table's methods. */
typedef struct op {
  fl_proto_id type;
  int server;
  uint32_t block;
  const uint32_t *blocks; /* dense pull: nblocks blocks of one server (the client's groups) */
  size_t nblocks;
  int kind;
  int64_t step;
  int64_t min_step;
  int64_t committed; /* dense pull: the commit it carries (one past the step; 0: none) */
  const float *src;
  /* sparse */
  const char *table;
  uint32_t dim;
  const uint64_t *keys;
  const size_t *pos;
  size_t nkeys;
  const float *grads;
  float *out;
  uint32_t seq, parts; /* sparse push: part seq of parts to this server */
  int read_only;       /* sparse pull: an evaluation read */
  int queued;          /* sparse call or dense push waiting for its lane's send (lane_send) */
  int batched;         /* sparse call sent as a part of a batch call */
  struct op **bparts; /* a batch call: its sparse calls, in order (kept) */
  size_t nbparts, bparts_cap;
  /* barrier */
  const char *name;
  const double *values;
  size_t nv;
  int64_t value_min;
  double *sums;
  int64_t *min;
  uint16_t *half;     /* gradient in fp16/bf16 for the wire (kept) */
  size_t half_cap;
  /* call state */
  fl_rpc_call call;
  fl_rpc_outbuf *ob;
  size_t req_bytes; /* of the request in flight */
  int attempt;
  int warned;
  double start, due, said; /* said: when the last "still retrying" went out */
  fl_status st;
  int inflight; /* submitted and not over (under the client's mu) */
  struct op *next_retry;
  struct lane *ln; /* the batch it belongs to */
} op;

typedef struct server_buf {
  uint64_t *keys;
  size_t *pos;
  float *grads;
  size_t n, cap, gcap;
} server_buf;

/* A batch of calls waited for together: the blocking calls' (LANE_MAIN,
 * fl_ps_client_wait) and one each for the asynchronous sparse pulls and
 * pushes, so that those stay in flight across the other calls.  pending
 * counts the lane's calls not over (under the client's mu); sb: the
 * asynchronous lanes' keys grouped by server, n_tables * n_servers (a
 * table's groups live until its calls are over). */
enum { LANE_MAIN = 0, LANE_SPULL, LANE_SPUSH, N_LANES };
typedef struct lane {
  op **pool;
  size_t n_ops, cap_ops;
  size_t pending;
  server_buf *sb;
  size_t nsb;    /* sb's length */
  size_t last_n; /* the calls of the last batch that went through (pool[0..)) */
  size_t dense_queued; /* bytes of dense pushes queued since the last lane_send */
} lane;

struct fl_ps_client {
  fl_ps_client_opts o;
  fl_endpoint *eps;
  char (*names)[FL_HOST_MAX + 16];
  char *token, *tls_ca, *tls_cert, *tls_key;
  char run_id[64];
  uint64_t incarnation;
  grpc_channel **ch;
  grpc_completion_queue *cq;
  pthread_t driver;
  int driver_started;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  lane lanes[N_LANES];
  size_t pending; /* every lane's */
  op *retry;
  int shutting;

  /* registration */
  fl_ps_layout *layout;
  uint32_t *grp_blocks; /* the layout's blocks in pull groups: group g is */
  size_t *grp_start;    /* grp_blocks[grp_start[g], grp_start[g + 1]) */
  size_t n_groups;
  fl_ps_dense_param *params;
  size_t np;
  fl_ps_sparse_spec *tables;
  size_t n_tables;
  int64_t *table_next; /* [n_tables] one past the highest sparse step pushed */
  size_t table_hint;   /* the table found last (table_index; trainer thread) */
  _Atomic int64_t step_seen;
  _Atomic int64_t step_pushed; /* highest step of a gradient/delta push */
  int64_t own_next; /* async/geo: min over servers of trainer_next_step, -1 unknown */
  int warned_spread; /* async/geo: the servers' spread of steps was reported */
  int recovered;     /* sync: registration found our step applied somewhere, staged elsewhere */
  _Atomic int64_t committed; /* sync: one past the last step committed (declared at Register) */
  int64_t exit_at;   /* FLOTILLA_TEST_EXIT_AT (tests): the step whose commit is cut short */

  /* driver-thread scratch */
  fl_rpc_arena arena;
  fl_rpc_inbuf in;
  /* trainer-thread scratch for blocking calls */
  fl_rpc_outbuf *ob;
  fl_rpc_inbuf uin;
  fl_rpc_arena uarena;
  server_buf *sb;

  /* heartbeats */
  pthread_t hb;
  int hb_started;
  pthread_mutex_t hb_mu;
  pthread_cond_t hb_cv;
  int hb_stop;

  /* when each server last answered anything (now_s clock, as bits) */
  _Atomic uint64_t *last_answer;
  _Atomic int *hung_said; /* the "hung" error was logged for this server */

  /* totals (fl_ps_client_counters) */
  _Atomic uint64_t n_calls, n_pushes, n_pulls, n_sent, n_received, n_retries, n_failed;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *op_name(fl_proto_id type) { return fl_proto_methods[type].name; }

/* Calls that carry gradients (counted as pushes) and rows or blocks read. */
static int push_type(fl_proto_id t) {
  return t == FL_PROTO_PUSH_DENSE || t == FL_PROTO_PUSH_SPARSE || t == FL_PROTO_PUSH_SPARSE_BATCH;
}
static int pull_type(fl_proto_id t) {
  return t == FL_PROTO_PULL_DENSE || t == FL_PROTO_PULL_SPARSE || t == FL_PROTO_PULL_SPARSE_BATCH;
}
/* Calls whose answer carries nothing to read. */
static int sends_only(fl_proto_id t) { return push_type(t) || t == FL_PROTO_INIT_SPARSE; }

static char *dup_opt(const char *s) { return s && s[0] ? strdup(s) : NULL; }

/* Server s answered (any status but a transport failure): it is alive. */
static void heard_from(fl_ps_client *c, int s) {
  double now = now_s();
  uint64_t bits;
  memcpy(&bits, &now, sizeof bits);
  atomic_store(&c->last_answer[s], bits);
}

/* Seconds since server s last answered. */
static double silent_for(fl_ps_client *c, int s) {
  uint64_t bits = atomic_load(&c->last_answer[s]);
  double t;
  memcpy(&t, &bits, sizeof t);
  return now_s() - t;
}

static int retriable(grpc_status_code code) {
  return code == GRPC_STATUS_UNAVAILABLE || code == GRPC_STATUS_DEADLINE_EXCEEDED;
}

/* Count one finished attempt of a call of the wire table's row `method`:
 * answered by the server (OK or an error status that is not retried) or
 * not (retried, or failed when given up).  FAILED_PRECONDITION is the
 * server asking for a registration, not a failure. */
static void count_call(fl_ps_client *c, fl_proto_id method, grpc_status_code code, size_t sent,
                       size_t received, int retried) {
  if (retriable(code)) {
    atomic_fetch_add(retried ? &c->n_retries : &c->n_failed, 1);
    return;
  }
  atomic_fetch_add(&c->n_calls, 1);
  atomic_fetch_add(&c->n_sent, sent);
  if (code != GRPC_STATUS_OK) {
    if (code != GRPC_STATUS_FAILED_PRECONDITION) atomic_fetch_add(&c->n_failed, 1);
    return;
  }
  atomic_fetch_add(&c->n_received, received);
  if (push_type(method)) atomic_fetch_add(&c->n_pushes, 1);
  else if (pull_type(method)) atomic_fetch_add(&c->n_pulls, 1);
}

/* --------------------------------------------------------------- calls */

/* Pack and start op (any thread). */
/* The request of sparse pull o. */
static void pull_fill(fl_ps_client *c, const op *o, Flotilla__PullSparseRequest *r) {
  r->trainer_id = c->o.trainer_id;
  r->table = (char *)o->table;
  r->n_keys = o->nkeys;
  r->keys = (uint64_t *)o->keys;
  r->min_step = o->min_step;
  r->read_only = o->read_only;
}

/* The request of sparse push o, its gradient rows in t (shape: 2 dims). */
static void push_fill(fl_ps_client *c, const op *o, Flotilla__PushSparseRequest *r,
                      Flotilla__Tensor *t, int64_t *shape) {
  shape[0] = (int64_t)o->nkeys;
  shape[1] = o->dim;
  t->dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  t->n_shape = 2;
  t->shape = shape;
  t->data.data = (uint8_t *)o->grads;
  t->data.len = o->nkeys * o->dim * sizeof(float);
  r->trainer_id = c->o.trainer_id;
  r->step = o->step;
  r->table = (char *)o->table;
  r->n_keys = o->nkeys;
  r->keys = (uint64_t *)o->keys;
  r->grads = t;
  r->seq = o->seq;
  r->parts = o->parts;
}

/* One part of a batch call's request. */
typedef struct batch_part {
  Flotilla__PullSparseRequest pull;
  Flotilla__PushSparseRequest push;
  Flotilla__Tensor t;
  int64_t shape[2];
} batch_part;

/* Pack batch call o (its parts' requests in order) into *bb. */
static fl_status batch_pack(fl_ps_client *c, op *o, grpc_byte_buffer **bb) {
  Flotilla__PullSparseBatchRequest pr = FLOTILLA__PULL_SPARSE_BATCH_REQUEST__INIT;
  Flotilla__PushSparseBatchRequest ur = FLOTILLA__PUSH_SPARSE_BATCH_REQUEST__INIT;
  const int push = o->type == FL_PROTO_PUSH_SPARSE_BATCH;
  batch_part *bp = calloc(o->nbparts, sizeof *bp);
  void **ptrs = calloc(o->nbparts, sizeof *ptrs);
  fl_status st;
  if (!bp || !ptrs) {
    free(bp);
    free(ptrs);
    return FL_ERR(FL_ENOMEM, "ps client: out of memory for a batch of %zu calls", o->nbparts);
  }
  for (size_t i = 0; i < o->nbparts; i++) {
    flotilla__pull_sparse_request__init(&bp[i].pull);
    flotilla__push_sparse_request__init(&bp[i].push);
    flotilla__tensor__init(&bp[i].t);
    if (push) push_fill(c, o->bparts[i], &bp[i].push, &bp[i].t, bp[i].shape);
    else pull_fill(c, o->bparts[i], &bp[i].pull);
    ptrs[i] = push ? (void *)&bp[i].push : (void *)&bp[i].pull;
  }
  pr.n_pulls = ur.n_pushes = o->nbparts;
  pr.pulls = (Flotilla__PullSparseRequest **)ptrs;
  ur.pushes = (Flotilla__PushSparseRequest **)ptrs;
  st = fl_rpc_pack(o->ob, push ? &ur.base : &pr.base, bb);
  free(bp);
  free(ptrs);
  return st;
}

/* The bytes op o adds to a batch call's request. */
static size_t op_bytes(const fl_ps_client *c, const op *o) {
  if (o->type == FL_PROTO_PUSH_DENSE) return c->layout->blocks[o->block].n * sizeof(float);
  return o->nkeys * o->dim * sizeof(float);
}

/* Block i of dense push o as fp32 or, compressed (strategy.grad_compression,
 * half the bytes), cast into o->half + off; t takes it. */
static fl_status dense_block_fill(fl_ps_client *c, op *o, const op *part, size_t off,
                                  Flotilla__Tensor *t, int64_t *shape) {
  const fl_ps_block *blk = &c->layout->blocks[part->block];
  *shape = (int64_t)blk->n;
  t->dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  t->n_shape = 1;
  t->shape = shape;
  t->data.data = (uint8_t *)part->src;
  t->data.len = blk->n * sizeof(float);
  if (c->o.wire_dtype == FLOTILLA__DTYPE__DTYPE_FP32 || o->kind == FLOTILLA__PUSH_KIND__PUSH_INIT)
    return FL_OK;
  FL_TRY(c->o.wire_dtype == FLOTILLA__DTYPE__DTYPE_FP16
             ? fl_cast_f32_to_f16(part->src, o->half + off, blk->n)
             : fl_cast_f32_to_bf16(part->src, o->half + off, blk->n));
  t->dtype = c->o.wire_dtype;
  t->data.data = (uint8_t *)(o->half + off);
  t->data.len = blk->n * sizeof *o->half;
  return FL_OK;
}

/* Pack dense push o into *bb: its own block, or its parts' blocks (a
 * server's queued pushes of one step and kind, batch_one) in one call. */
static fl_status dense_pack(fl_ps_client *c, op *o, grpc_byte_buffer **bb) {
  Flotilla__PushDenseRequest r = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
  const size_t n = o->nbparts ? o->nbparts : 1;
  op *const *parts = o->nbparts ? o->bparts : &o;
  size_t total = 0, off = 0;
  fl_status st = FL_OK;
  for (size_t i = 0; i < n; i++) total += c->layout->blocks[parts[i]->block].n;
  if (c->o.wire_dtype != FLOTILLA__DTYPE__DTYPE_FP32 && total > o->half_cap) {
    uint16_t *h = realloc(o->half, total * sizeof *h);
    if (!h) return FL_ERR(FL_ENOMEM, "ps client: out of memory for %zu pushed floats", total);
    o->half = h;
    o->half_cap = total;
  }
  Flotilla__DenseBlock *b = calloc(n, sizeof *b);
  Flotilla__DenseBlock **bp = calloc(n, sizeof *bp);
  Flotilla__Tensor *t = calloc(n, sizeof *t);
  int64_t *shape = calloc(n, sizeof *shape);
  if (!b || !bp || !t || !shape)
    st = FL_ERR(FL_ENOMEM, "ps client: out of memory for a push of %zu blocks", n);
  for (size_t i = 0; st == FL_OK && i < n; i++) {
    flotilla__dense_block__init(&b[i]);
    flotilla__tensor__init(&t[i]);
    st = dense_block_fill(c, o, parts[i], off, &t[i], &shape[i]);
    off += c->layout->blocks[parts[i]->block].n;
    b[i].block = parts[i]->block;
    b[i].value = &t[i];
    bp[i] = &b[i];
  }
  r.trainer_id = c->o.trainer_id;
  r.step = o->step;
  r.kind = o->kind;
  r.n_blocks = n;
  r.blocks = bp;
  if (st == FL_OK) st = fl_rpc_pack(o->ob, &r.base, bb);
  free(b);
  free(bp);
  free(t);
  free(shape);
  return st;
}

static fl_status op_launch(fl_ps_client *c, op *o) {
  grpc_byte_buffer *bb = NULL;
  const char *method;
  fl_status st;
  Flotilla__Tensor t = FLOTILLA__TENSOR__INIT;
  int64_t shape[2];

  switch (o->type) {
  case FL_PROTO_PUSH_DENSE:
    st = dense_pack(c, o, &bb);
    method = PATH(PUSH_DENSE);
    break;
  case FL_PROTO_PULL_DENSE: {
    Flotilla__PullDenseRequest r = FLOTILLA__PULL_DENSE_REQUEST__INIT;
    r.trainer_id = c->o.trainer_id;
    r.min_step = o->min_step;
    r.committed = o->committed;
    r.n_blocks = o->nblocks;
    r.blocks = (uint32_t *)o->blocks;
    st = fl_rpc_pack(o->ob, &r.base, &bb);
    method = PATH(PULL_DENSE);
    break;
  }
  case FL_PROTO_BARRIER: {
    Flotilla__BarrierRequest r = FLOTILLA__BARRIER_REQUEST__INIT;
    r.trainer_id = c->o.trainer_id;
    r.name = (char *)o->name;
    r.n_values = o->nv;
    r.values = (double *)o->values;
    r.value_min = o->value_min;
    st = fl_rpc_pack(o->ob, &r.base, &bb);
    method = PATH(BARRIER);
    break;
  }
  case FL_PROTO_INIT_SPARSE: {
    Flotilla__InitSparseRequest r = FLOTILLA__INIT_SPARSE_REQUEST__INIT;
    shape[0] = (int64_t)o->nkeys;
    shape[1] = o->dim;
    t.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
    t.n_shape = 2;
    t.shape = shape;
    t.data.data = (uint8_t *)o->grads;
    t.data.len = o->nkeys * o->dim * sizeof(float);
    r.trainer_id = c->o.trainer_id;
    r.table = (char *)o->table;
    r.n_keys = o->nkeys;
    r.keys = (uint64_t *)o->keys;
    r.values = &t;
    st = fl_rpc_pack(o->ob, &r.base, &bb);
    method = PATH(INIT_SPARSE);
    break;
  }
  case FL_PROTO_PULL_SPARSE: {
    Flotilla__PullSparseRequest r = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
    pull_fill(c, o, &r);
    st = fl_rpc_pack(o->ob, &r.base, &bb);
    method = PATH(PULL_SPARSE);
    break;
  }
  case FL_PROTO_PUSH_SPARSE: {
    Flotilla__PushSparseRequest r = FLOTILLA__PUSH_SPARSE_REQUEST__INIT;
    push_fill(c, o, &r, &t, shape);
    st = fl_rpc_pack(o->ob, &r.base, &bb);
    method = PATH(PUSH_SPARSE);
    break;
  }
  default:
    st = batch_pack(c, o, &bb);
    method = fl_proto_methods[o->type].rpc.path;
    break;
  }
  if (st != FL_OK) return st;
  o->req_bytes = grpc_byte_buffer_length(bb);
  return fl_rpc_call_start(&o->call, c->ch[o->server], c->cq, method, bb, c->o.rpc_timeout_s,
                           c->token, o);
}

/* A fresh op of lane L's current batch (trainer thread). */
static op *lane_op_new(fl_ps_client *c, lane *L, fl_proto_id type, int server) {
  op *o;
  pthread_mutex_lock(&c->mu);
  if (L->n_ops == L->cap_ops) {
    size_t nc = L->cap_ops ? L->cap_ops * 2 : 64;
    op **np = realloc(L->pool, nc * sizeof *np);
    if (!np) {
      pthread_mutex_unlock(&c->mu);
      return NULL;
    }
    memset(np + L->cap_ops, 0, (nc - L->cap_ops) * sizeof *np);
    L->pool = np;
    L->cap_ops = nc;
  }
  o = L->pool[L->n_ops];
  if (!o) {
    o = calloc(1, sizeof *o);
    if (!o || fl_rpc_outbuf_create(ZERO_COPY_MIN, &o->ob) != FL_OK) {
      free(o);
      pthread_mutex_unlock(&c->mu);
      return NULL;
    }
    L->pool[L->n_ops] = o;
  }
  L->n_ops++;
  pthread_mutex_unlock(&c->mu);
  {
    fl_rpc_outbuf *ob = o->ob;
    uint16_t *half = o->half;
    size_t half_cap = o->half_cap;
    op **bparts = o->bparts;
    size_t bparts_cap = o->bparts_cap;
    memset(o, 0, sizeof *o);
    o->ob = ob;
    o->half = half;
    o->half_cap = half_cap;
    o->bparts = bparts;
    o->bparts_cap = bparts_cap;
  }
  o->type = type;
  o->server = server;
  o->ln = L;
  return o;
}

/* A fresh op of the blocking calls' batch (trainer thread). */
static op *op_new(fl_ps_client *c, fl_proto_id type, int server) {
  return lane_op_new(c, &c->lanes[LANE_MAIN], type, server);
}

/* o is over with st (any thread; takes mu). */
static void op_over(fl_ps_client *c, op *o, fl_status st) {
  pthread_mutex_lock(&c->mu);
  o->st = st;
  o->inflight = 0;
  c->pending--;
  o->ln->pending--;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Start op now; a failure to start completes it with that error. */
static fl_status op_submit(fl_ps_client *c, op *o) {
  fl_status st;
  o->start = now_s();
  o->st = FL_OK;
  pthread_mutex_lock(&c->mu);
  c->pending++;
  o->ln->pending++;
  o->inflight = 1;
  pthread_mutex_unlock(&c->mu);
  st = op_launch(c, o);
  if (st != FL_OK) op_over(c, o, st);
  return st;
}

/* The blocks of a dense pull's answer r (NULL: unreadable) into their
 * parameters' values; FL_EPROTO (logged) when r is not o's blocks in its
 * order, each of its size in fp32. */
static fl_status pulled_blocks(fl_ps_client *c, const op *o, const Flotilla__PullDenseResponse *r) {
  int ok = r && r->n_blocks == o->nblocks;
  for (size_t i = 0; ok && i < o->nblocks; i++) {
    const Flotilla__DenseBlock *b = r->blocks[i];
    ok = b->block == o->blocks[i] && b->value && b->value->dtype == FLOTILLA__DTYPE__DTYPE_FP32 &&
         b->value->data.len == c->layout->blocks[o->blocks[i]].n * sizeof(float);
  }
  if (!ok)
    return FL_ERR(FL_EPROTO, "pserver %d (%s): malformed answer to a pull of %zu blocks from "
                  "block %u", o->server, c->names[o->server], o->nblocks, o->blocks[0]);
  for (size_t i = 0; i < o->nblocks; i++) {
    const fl_ps_block *blk = &c->layout->blocks[o->blocks[i]];
    memcpy(c->params[blk->param].value + blk->offset, r->blocks[i]->value->data.data,
           blk->n * sizeof(float));
  }
  if (r->step > atomic_load(&c->step_seen)) atomic_store(&c->step_seen, r->step);
  return FL_OK;
}

/* The rows of sparse pull o's answer r (NULL: unreadable) into its output;
 * FL_EPROTO (logged) when r is not o's rows in fp32. */
static fl_status pulled_rows(fl_ps_client *c, const op *o, const Flotilla__PullSparseResponse *r) {
  if (!r || !r->values || r->values->dtype != FLOTILLA__DTYPE__DTYPE_FP32 ||
      r->values->data.len != o->nkeys * o->dim * sizeof(float))
    return FL_ERR(FL_EPROTO, "pserver %d (%s): malformed answer to a pull of %zu rows of %s",
                  o->server, c->names[o->server], o->nkeys, o->table);
  const float *v = (const float *)(const void *)r->values->data.data;
  for (size_t i = 0; i < o->nkeys; i++)
    memcpy(o->out + o->pos[i] * o->dim, v + i * o->dim, o->dim * sizeof(float));
  return FL_OK;
}

/* Handle a successful answer (driver thread). */
static fl_status op_parse(fl_ps_client *c, op *o) {
  ProtobufCMessage *m;
  fl_status st = FL_OK;
  if (sends_only(o->type)) return FL_OK;
  if (fl_rpc_inbuf_read(&c->in, o->call.recv) != FL_OK)
    return FL_ERR(FL_EPROTO, "pserver %d (%s): unreadable %s answer", o->server,
                  c->names[o->server], op_name(o->type));
  if (o->type == FL_PROTO_BARRIER) {
    Flotilla__BarrierResponse *r = (Flotilla__BarrierResponse *)fl_rpc_unpack(
        &c->arena, ANSWER(BARRIER), c->in.data, c->in.len);
    if (!r || r->n_sums != o->nv) {
      st = FL_ERR(FL_EPROTO, "pserver %d (%s): malformed answer to barrier %s", o->server,
                  c->names[o->server], o->name);
    } else if (o->sums || o->min) {
      if (o->nv) memcpy(o->sums, r->sums, o->nv * sizeof *o->sums);
      if (o->min) *o->min = r->min;
    }
  } else if (o->type == FL_PROTO_PULL_DENSE) {
    st = pulled_blocks(c, o, (Flotilla__PullDenseResponse *)fl_rpc_unpack(
                                 &c->arena, ANSWER(PULL_DENSE), c->in.data, c->in.len));
  } else if (o->type == FL_PROTO_PULL_SPARSE) {
    m = fl_rpc_unpack(&c->arena, ANSWER(PULL_SPARSE), c->in.data, c->in.len);
    st = pulled_rows(c, o, (Flotilla__PullSparseResponse *)m);
  } else {
    Flotilla__PullSparseBatchResponse *r = (Flotilla__PullSparseBatchResponse *)fl_rpc_unpack(
        &c->arena, ANSWER(PULL_SPARSE_BATCH), c->in.data, c->in.len);
    if (!r || r->n_pulls != o->nbparts)
      st = FL_ERR(FL_EPROTO, "pserver %d (%s): malformed answer to a batch of %zu pulls",
                  o->server, c->names[o->server], o->nbparts);
    for (size_t i = 0; st == FL_OK && i < o->nbparts; i++)
      st = pulled_rows(c, o->bparts[i], r->pulls[i]);
  }
  fl_rpc_arena_reset(&c->arena);
  return st;
}

static int held_call(const op *o) {
  return o->type == FL_PROTO_BARRIER || (o->type == FL_PROTO_PULL_DENSE && o->min_step > 0);
}

/* Observability of a call that went through: its latency histogram and a
 * span on the timeline (on the driver thread's row). */
static void obs_op(const op *o, double seconds) {
  const fl_std_metrics *m = fl_metrics_std();
  fl_series *h = sends_only(o->type) ? m->push_seconds
                 : pull_type(o->type)  ? m->pull_seconds
                                       : m->wait_seconds;
  fl_series_observe(h, seconds);
  int64_t t1 = fl_timeline_now_us();
  fl_timeline_span(fl_timeline_default(), "ps", op_name(o->type), t1 - (int64_t)(seconds * 1e6),
                   t1, "server", o->server);
}

static void on_complete(fl_ps_client *c, op *o) {
  grpc_status_code code = o->call.status;
  char details[256];
  double now = now_s();
  fl_status st;

  fl_rpc_call_details(&o->call, details, sizeof details);
  if (!retriable(code)) heard_from(c, o->server);
  if (code == GRPC_STATUS_DEADLINE_EXCEEDED && c->o.server_timeout_s > 0 && !c->shutting &&
      silent_for(c, o->server) > c->o.server_timeout_s) {
    /* Not slow trainers: the server itself answers nothing, heartbeats
     * included (stopped, hung, or cut off). */
    count_call(c, o->type, code, o->req_bytes, 0, 0);
    st = FL_ETIMEDOUT;
    if (!atomic_exchange(&c->hung_said[o->server], 1))
      FL_LOGE("pserver %d (%s) has answered nothing for %.0f s (heartbeat_timeout_s %.0f): it "
              "is hung or unreachable; giving up %s", o->server, c->names[o->server],
              silent_for(c, o->server), c->o.server_timeout_s, op_name(o->type));
  } else if (code == GRPC_STATUS_OK) {
    count_call(c, o->type, code, o->req_bytes,
               o->call.recv ? grpc_byte_buffer_length(o->call.recv) : 0, 0);
    /* a sparse batch's parts count as the server counts them: each one */
    if (o->nbparts > 1 && o->type != FL_PROTO_PUSH_DENSE)
      atomic_fetch_add(push_type(o->type) ? &c->n_pushes : &c->n_pulls, o->nbparts - 1);
    st = op_parse(c, o);
    obs_op(o, now - o->start);
  } else if (retriable(code) && !c->shutting &&
             (now - o->start < c->o.retry_budget_s ||
              /* a held call (barrier, sync pull) whose deadline passed while
               * the server waits for other trainers: keep waiting longer */
              (code == GRPC_STATUS_DEADLINE_EXCEEDED && held_call(o) &&
               now - o->start < 10 * c->o.retry_budget_s))) {
    double back = 0.05 * pow(2.0, o->attempt < 6 ? o->attempt : 6);
    if (back > 2.0) back = 2.0;
    back *= 0.75 + 0.5 * ((double)rand() / RAND_MAX);
    if (!o->warned) {
      if (code == GRPC_STATUS_DEADLINE_EXCEEDED && held_call(o))
        FL_LOGI("pserver %d (%s) %s: still waiting for the other trainers; waiting on while "
                "the server answers", o->server, c->names[o->server], op_name(o->type));
      else
        FL_LOGW("pserver %d (%s) %s: %s (%s); retrying for up to %.0f s", o->server,
                c->names[o->server], op_name(o->type), fl_rpc_code_name(code), details,
                c->o.retry_budget_s);
      o->warned = 1;
      o->said = now;
    } else if (now - o->said >= 5) {
      FL_LOGI("pserver %d (%s) %s: %s, still retrying after %.0f s", o->server,
              c->names[o->server], op_name(o->type), fl_rpc_code_name(code), now - o->start);
      o->said = now;
    }
    o->attempt++;
    count_call(c, o->type, code, 0, 0, 1);
    fl_rpc_call_end(&o->call);
    pthread_mutex_lock(&c->mu);
    o->due = now + back;
    o->next_retry = c->retry;
    c->retry = o;
    pthread_mutex_unlock(&c->mu);
    return;
  } else {
    count_call(c, o->type, code, o->req_bytes, 0, 0);
    st = fl_rpc_status_from_grpc(code);
    if (st != FL_ESTATE)
      FL_LOGE("pserver %d (%s) %s%s: %s (%s)", o->server, c->names[o->server], op_name(o->type),
              retriable(code) ? " gave up retrying" : "", fl_rpc_code_name(code), details);
  }
  if (o->warned && st == FL_OK)
    FL_LOGI("pserver %d (%s) %s went through after %d retries", o->server, c->names[o->server],
            op_name(o->type), o->attempt);
  fl_rpc_call_end(&o->call);
  op_over(c, o, st);
}

static void *driver_main(void *arg) {
  fl_ps_client *c = arg;
  for (;;) {
    double now = now_s(), next = now + 0.1;
    op *due = NULL, **pp;
    grpc_event ev;

    pthread_mutex_lock(&c->mu);
    for (pp = &c->retry; *pp;) {
      op *o = *pp;
      if (o->due <= now || c->shutting) {
        *pp = o->next_retry;
        o->next_retry = due;
        due = o;
      } else {
        if (o->due < next) next = o->due;
        pp = &o->next_retry;
      }
    }
    pthread_mutex_unlock(&c->mu);
    while (due) {
      op *o = due;
      fl_status st = c->shutting ? FL_ECLOSED : op_launch(c, o);
      due = o->next_retry;
      if (st != FL_OK) op_over(c, o, st);
    }
    ev = grpc_completion_queue_next(
        c->cq,
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_micros((int64_t)((next - now) * 1e6) + 1, GPR_TIMESPAN)),
        NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) on_complete(c, ev.tag);
  }
  return NULL;
}

/* ---------------------------------------------------------- blocking calls */

/* One unary call with retries of UNAVAILABLE / deadline within the budget.
 * Answer in c->uin; *code gets the final gRPC status.  Not logged. */
static fl_status unary(fl_ps_client *c, int server, fl_proto_id id,
                       const ProtobufCMessage *req, double timeout, fl_rpc_outbuf *ob,
                       fl_rpc_inbuf *in, grpc_status_code *code, char *details, size_t cap) {
  double start = now_s(), said = start;
  int attempt = 0, warned = 0;
  for (;;) {
    fl_status st = fl_rpc_unary(c->ch[server], fl_proto_methods[id].rpc.path, req, timeout,
                                c->token, ob, in, code, details, cap);
    int last = st == FL_OK || !retriable(*code) || now_s() - start > c->o.retry_budget_s;
    double back;
    if (!retriable(*code)) heard_from(c, server);
    /* a server that answers nothing at all is hung: bounded by its timeout */
    if (*code == GRPC_STATUS_DEADLINE_EXCEEDED && c->o.server_timeout_s > 0 &&
        silent_for(c, server) > c->o.server_timeout_s)
      last = 1;
    count_call(c, id, *code, fl_rpc_outbuf_len(ob),
               st == FL_OK ? in->len : 0, !last);
    if (last) return st;
    if (!warned) {
      FL_LOGW("pserver %d (%s) %s: %s (%s); retrying for up to %.0f s", server, c->names[server],
              op_name(id), fl_rpc_code_name(*code), details ? details : "",
              c->o.retry_budget_s);
      warned = 1;
      said = now_s();
    } else if (now_s() - said >= 5) {
      FL_LOGI("pserver %d (%s) %s: %s, still retrying after %.0f s of %.0f", server,
              c->names[server], op_name(id), fl_rpc_code_name(*code),
              now_s() - start, c->o.retry_budget_s);
      said = now_s();
    }
    back = 0.05 * pow(2.0, attempt < 6 ? attempt : 6);
    if (back > 2.0) back = 2.0;
    attempt++;
    usleep((useconds_t)(back * 1e6));
  }
}

/* Register with server s declaring `declare` as the step of the next push
 * (a server behind it lets the pushes move its blocks forward); give it
 * initial values when it has none.  *step receives the server's step and
 * *own this trainer's next step as the server knows it (either may be
 * NULL). */
static fl_status register_server(fl_ps_client *c, int s, int64_t declare, int64_t *step,
                                 int64_t *own, int *staged) {
  Flotilla__RegisterRequest r = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__RegisterResponse *resp;
  Flotilla__DenseParamSpec *specs = NULL, **sp = NULL;
  Flotilla__SparseTableSpec *ts = NULL, **tp = NULL;
  grpc_status_code code;
  char details[512];
  fl_status st = FL_ENOMEM;

  specs = calloc(c->np + 1, sizeof *specs);
  sp = calloc(c->np + 1, sizeof *sp);
  ts = calloc(c->n_tables + 1, sizeof *ts);
  tp = calloc(c->n_tables + 1, sizeof *tp);
  if (!specs || !sp || !ts || !tp) {
    st = FL_ERR(FL_ENOMEM, "ps client: out of memory registering");
    goto done;
  }
  for (size_t i = 0; i < c->np; i++) {
    flotilla__dense_param_spec__init(&specs[i]);
    specs[i].name = (char *)c->params[i].name;
    specs[i].numel = c->params[i].n;
    sp[i] = &specs[i];
  }
  for (size_t i = 0; i < c->n_tables; i++) {
    flotilla__sparse_table_spec__init(&ts[i]);
    ts[i].name = (char *)c->tables[i].name;
    ts[i].dim = c->tables[i].dim;
    tp[i] = &ts[i];
  }
  r.trainer_id = c->o.trainer_id;
  r.num_trainers = c->o.num_trainers;
  r.incarnation = c->incarnation;
  r.mode = c->o.mode;
  r.dense_block_size = c->o.dense_block_size;
  r.num_servers = c->o.n_servers;
  r.server_index = s;
  r.n_dense = c->np;
  r.dense = sp;
  r.n_sparse = c->n_tables;
  r.sparse = tp;
  r.total_steps = c->o.total_steps;
  r.step = declare;
  r.run_id = c->run_id;
  r.job_hash = c->o.job_hash;
  r.commits = c->o.mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC;
  r.committed = atomic_load(&c->committed);
  st = unary(c, s, FL_PROTO_REGISTER, &r.base, c->o.rpc_timeout_s, c->ob, &c->uin, &code, details,
             sizeof details);
  if (st != FL_OK) {
    if (code == GRPC_STATUS_UNAVAILABLE || code == GRPC_STATUS_DEADLINE_EXCEEDED)
      st = FL_ERR(st, "pserver %d (%s) is not reachable: trainer %d could not register within "
                  "%.0f s (%s: %s)", s, c->names[s], c->o.trainer_id, c->o.retry_budget_s,
                  fl_rpc_code_name(code), details);
    else if (code == GRPC_STATUS_UNAUTHENTICATED)
      st = FL_ERR(st, "pserver %d (%s) refused trainer %d's token (%s): another job's pserver "
                  "at this address, or a different FLOTILLA_TOKEN?", s, c->names[s],
                  c->o.trainer_id, details);
    else
      st = FL_ERR(st, "pserver %d (%s) refused to register trainer %d: %s (%s)", s, c->names[s],
                  c->o.trainer_id, fl_rpc_code_name(code), details);
    goto done;
  }
  resp = (Flotilla__RegisterResponse *)fl_rpc_unpack(
      &c->uarena, ANSWER(REGISTER), c->uin.data, c->uin.len);
  if (!resp) {
    st = FL_ERR(FL_EPROTO, "pserver %d (%s): malformed Register answer", s, c->names[s]);
    goto done;
  }
  if (step) *step = resp->step;
  if (own) *own = resp->trainer_next_step;
  if (staged) *staged = resp->trainer_staged;
  if (!resp->initialized && c->layout) {
    /* Our values become the server's (the first trainer's win). */
    for (size_t b = 0; b < c->layout->n_blocks && st == FL_OK; b++) {
      const fl_ps_block *blk = &c->layout->blocks[b];
      Flotilla__PushDenseRequest q = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
      Flotilla__DenseBlock db = FLOTILLA__DENSE_BLOCK__INIT, *dbp = &db;
      Flotilla__Tensor t = FLOTILLA__TENSOR__INIT;
      int64_t shape = (int64_t)blk->n;
      if (blk->server != s) continue;
      t.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
      t.n_shape = 1;
      t.shape = &shape;
      t.data.data = (uint8_t *)(c->params[blk->param].value + blk->offset);
      t.data.len = blk->n * sizeof(float);
      db.block = (uint32_t)b;
      db.value = &t;
      q.trainer_id = c->o.trainer_id;
      q.kind = FLOTILLA__PUSH_KIND__PUSH_INIT;
      q.n_blocks = 1;
      q.blocks = &dbp;
      st = unary(c, s, FL_PROTO_PUSH_DENSE, &q.base, c->o.rpc_timeout_s, c->ob, &c->uin, &code,
                 details, sizeof details);
      if (st != FL_OK)
        st = FL_ERR(st, "pserver %d (%s): initialising block %zu failed: %s (%s)", s, c->names[s],
                    b, fl_rpc_code_name(code), details);
    }
  }
done:
  fl_rpc_arena_reset(&c->uarena);
  free(specs);
  free(sp);
  free(ts);
  free(tp);
  return st;
}

/* Frees c and what create sets up before its channels (buffers, locks,
 * per-server arrays, credentials): the end of destroy, and create's way
 * out before fl_rpc_init. */
static void free_client(fl_ps_client *c) {
  fl_rpc_arena_free(&c->arena);
  fl_rpc_arena_free(&c->uarena);
  fl_rpc_inbuf_free(&c->in);
  fl_rpc_inbuf_free(&c->uin);
  fl_rpc_outbuf_free(c->ob);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->hb_mu);
  pthread_cond_destroy(&c->hb_cv);
  free(c->eps);
  free(c->names);
  free(c->ch);
  free(c->sb);
  free((void *)c->last_answer);
  free((void *)c->hung_said);
  free(c->token);
  free(c->tls_ca);
  free(c->tls_cert);
  free(c->tls_key);
  free(c);
}

/* ----------------------------------------------------------------- public */

fl_status fl_ps_client_create(const fl_ps_client_opts *o, fl_ps_client **out) {
  fl_ps_client *c;
  fl_rpc_opts ro;
  fl_status st;

  *out = NULL;
  if (!o->servers || o->n_servers < 1 || o->trainer_id < 0 || o->trainer_id >= o->num_trainers)
    return FL_ERR(FL_EINVAL, "ps client: bad options (%d servers, trainer %d of %d)", o->n_servers,
                  o->trainer_id, o->num_trainers);
  c = calloc(1, sizeof *c);
  if (!c) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  c->o = *o;
  if (c->o.rpc_timeout_s <= 0) c->o.rpc_timeout_s = 30;
  if (c->o.retry_budget_s <= 0) c->o.retry_budget_s = 60;
  c->eps = calloc((size_t)o->n_servers, sizeof *c->eps);
  c->names = calloc((size_t)o->n_servers, sizeof *c->names);
  c->ch = calloc((size_t)o->n_servers, sizeof *c->ch);
  c->sb = calloc((size_t)o->n_servers, sizeof *c->sb);
  c->last_answer = calloc((size_t)o->n_servers, sizeof *c->last_answer);
  c->hung_said = calloc((size_t)o->n_servers, sizeof *c->hung_said);
  c->token = dup_opt(o->token);
  snprintf(c->run_id, sizeof c->run_id, "%s", o->run_id ? o->run_id : "");
  c->o.run_id = c->run_id;
  c->tls_ca = dup_opt(o->tls_ca);
  c->tls_cert = dup_opt(o->tls_cert);
  c->tls_key = dup_opt(o->tls_key);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  pthread_mutex_init(&c->hb_mu, NULL);
  pthread_cond_init(&c->hb_cv, NULL);
  fl_rpc_arena_init(&c->arena);
  fl_rpc_arena_init(&c->uarena);
  if (!c->eps || !c->names || !c->ch || !c->sb || !c->last_answer || !c->hung_said) {
    st = FL_ERR(FL_ENOMEM, "ps client: out of memory");
    goto fail;
  }
  for (int s = 0; s < o->n_servers; s++) heard_from(c, s);
  {
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20) ^ (uint64_t)(now_s() * 1e9);
    c->incarnation = fl_ps_mix64(seed ^ ((uint64_t)o->trainer_id << 48)) | 1u;
    srand((unsigned)c->incarnation);
  }
  {
    const char *e = getenv("FLOTILLA_TEST_EXIT_AT");
    c->exit_at = e && *e ? strtoll(e, NULL, 10) : -1;
  }
  if ((st = fl_rpc_outbuf_create(ZERO_COPY_MIN, &c->ob)) != FL_OK) goto fail;
  fl_rpc_init();
  memset(&ro, 0, sizeof ro);
  ro.token = c->token;
  ro.tls_ca = c->tls_ca;
  ro.tls_cert = c->tls_cert;
  ro.tls_key = c->tls_key;
  ro.max_message_bytes = FL_RPC_DEFAULT_MAX_MESSAGE + (16u << 20);
  for (int s = 0; s < o->n_servers; s++) {
    c->eps[s] = o->servers[s];
    fl_endpoint_format(&c->eps[s], c->names[s], sizeof c->names[s]);
    if ((st = fl_rpc_channel_create(c->names[s], &ro, &c->ch[s])) != FL_OK) goto fail_rpc;
  }
  c->cq = grpc_completion_queue_create_for_next(NULL);
  if (!c->cq) {
    st = FL_ERR(FL_ENOMEM, "ps client: cannot create a completion queue");
    goto fail_rpc;
  }
  if (pthread_create(&c->driver, NULL, driver_main, c) != 0) {
    st = FL_ERR(FL_EIO, "ps client: cannot start the driver thread");
    goto fail_rpc;
  }
  c->driver_started = 1;
  *out = c;
  return FL_OK;
fail_rpc:
  fl_ps_client_destroy(c);
  return st;
fail:
  free_client(c);
  return st;
}

static void *hb_main(void *arg) {
  fl_ps_client *c = arg;
  fl_rpc_outbuf *ob = NULL;
  fl_rpc_inbuf in = {0};
  if (fl_rpc_outbuf_create(0, &ob) != FL_OK) return NULL;
  pthread_mutex_lock(&c->hb_mu);
  while (!c->hb_stop) {
    struct timespec ts;
    double when = c->o.heartbeat_interval_s;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)when;
    ts.tv_nsec += (long)((when - floor(when)) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->hb_cv, &c->hb_mu, &ts);
    if (c->hb_stop) break;
    pthread_mutex_unlock(&c->hb_mu);
    for (int s = 0; s < c->o.n_servers; s++) {
      Flotilla__HeartbeatRequest r = FLOTILLA__HEARTBEAT_REQUEST__INIT;
      grpc_status_code code;
      r.trainer_id = c->o.trainer_id;
      r.incarnation = c->incarnation;
      r.step = atomic_load(&c->step_seen);
      fl_status st = fl_rpc_unary(c->ch[s], PATH(HEARTBEAT), &r.base, c->o.heartbeat_interval_s,
                                  c->token, ob, &in, &code, NULL, 0);
      count_call(c, FL_PROTO_HEARTBEAT, code, fl_rpc_outbuf_len(ob), st == FL_OK ? in.len : 0, 0);
      if (!retriable(code)) heard_from(c, s);
      if (st != FL_OK && code == GRPC_STATUS_FAILED_PRECONDITION)
        FL_LOGI("pserver %d (%s) does not know trainer %d (any more); its next call registers "
                "again", s, c->names[s], c->o.trainer_id);
    }
    pthread_mutex_lock(&c->hb_mu);
  }
  pthread_mutex_unlock(&c->hb_mu);
  fl_rpc_outbuf_free(ob);
  fl_rpc_inbuf_free(&in);
  return NULL;
}

/* c's layout's blocks grouped for pulls: each server's blocks in order,
 * a group holding up to PULL_GROUP_BYTES (a larger block alone). */
static fl_status pull_groups(fl_ps_client *c) {
  const fl_ps_layout *l = c->layout;
  free(c->grp_blocks);
  free(c->grp_start);
  c->grp_blocks = malloc(l->n_blocks * sizeof *c->grp_blocks);
  c->grp_start = malloc((l->n_blocks + 1) * sizeof *c->grp_start);
  if (!c->grp_blocks || !c->grp_start) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  size_t k = 0, g = 0;
  for (int s = 0; s < l->n_servers; s++) {
    size_t bytes = 0;
    for (size_t b = 0; b < l->n_blocks; b++) {
      if (l->blocks[b].server != s) continue;
      const size_t nb = l->blocks[b].n * sizeof(float);
      if (k == 0 || l->blocks[c->grp_blocks[k - 1]].server != s || bytes + nb > PULL_GROUP_BYTES) {
        c->grp_start[g++] = k;
        bytes = 0;
      }
      bytes += nb;
      c->grp_blocks[k++] = (uint32_t)b;
    }
  }
  c->grp_start[g] = k;
  c->n_groups = g;
  return FL_OK;
}

/* Sync, the servers at steps lo and lo + 1 (at[s]): a server applied step
 * lo, which it does only once every trainer committed it, and this
 * trainer commits a step only after every server acknowledged all its
 * pushes of it; so (a restarted trainer, killed among its commits) the
 * others hold its pushes of lo (staged[s]) and it commits lo to them
 * rather than computing it again: lo + 1 is returned and c->recovered
 * set.  When a server at lo lacks them (it restarted meanwhile), lo:
 * the step is done again, as before the commit. */
static int64_t recovered_step(fl_ps_client *c, const int64_t *at, const int *staged, int64_t lo) {
  for (int s = 0; s < c->o.n_servers; s++)
    if (at[s] == lo && !staged[s]) {
      FL_LOGW("trainer %d: step %" PRId64 " is applied on some pservers but pserver %d (%s) "
              "does not hold all of this trainer's pushes of it (it restarted?): computing the "
              "step again, whose update then differs across servers", c->o.trainer_id, lo, s,
              c->names[s]);
      return lo;
    }
  FL_LOGI("trainer %d: step %" PRId64 " is applied on some pservers and staged on the others: "
          "committing it there instead of computing it again", c->o.trainer_id, lo);
  c->recovered = 1;
  return lo + 1;
}

fl_status fl_ps_client_register(fl_ps_client *c, const fl_ps_dense_param *params, size_t n,
                                const fl_ps_sparse_spec *tables, size_t n_tables,
                                int64_t *step) {
  int64_t best = 0;
  fl_status st;

  /* Keep copies of the lists (names too). */
  for (size_t i = 0; i < c->np; i++) free((char *)c->params[i].name);
  free(c->params);
  for (size_t i = 0; i < c->n_tables; i++) free((char *)c->tables[i].name);
  free(c->tables);
  free(c->table_next);
  fl_ps_layout_free(c->layout);
  c->params = NULL;
  c->tables = NULL;
  c->layout = NULL;
  c->np = c->n_tables = 0;
  c->params = calloc(n + 1, sizeof *c->params);
  c->tables = calloc(n_tables + 1, sizeof *c->tables);
  c->table_next = calloc(n_tables + 1, sizeof *c->table_next);
  if (!c->params || !c->tables || !c->table_next)
    return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  for (size_t i = 0; i < n; i++) {
    c->params[i] = params[i];
    if (!(c->params[i].name = strdup(params[i].name)))
      return FL_ERR(FL_ENOMEM, "ps client: out of memory");
    c->np++;
  }
  for (size_t i = 0; i < n_tables; i++) {
    c->tables[i] = tables[i];
    if (!(c->tables[i].name = strdup(tables[i].name)))
      return FL_ERR(FL_ENOMEM, "ps client: out of memory");
    c->n_tables++;
  }
  if (n) {
    uint64_t *numel = malloc(n * sizeof *numel);
    if (!numel) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
    for (size_t i = 0; i < n; i++) numel[i] = params[i].n;
    st = fl_ps_layout_build(numel, n, c->o.dense_block_size, c->o.n_servers, &c->layout);
    free(numel);
    FL_TRY(st);
    FL_TRY(pull_groups(c));
  }
  int64_t *at = calloc((size_t)c->o.n_servers, sizeof *at);
  int *staged = calloc((size_t)c->o.n_servers, sizeof *staged);
  if (!at || !staged) {
    free(at);
    free(staged);
    return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  }
  st = FL_OK;
  int64_t lo = INT64_MAX, hi = -1;
  int s_lo = 0, s_hi = 0;
  for (int s = 0; s < c->o.n_servers; s++) {
    int64_t st_s = 0, own = -1;
    st = register_server(c, s, atomic_load(&c->step_pushed), &st_s, &own, &staged[s]);
    if (st != FL_OK) break;
    at[s] = st_s;
    if (st_s < lo) lo = st_s, s_lo = s;
    if (st_s > hi) hi = st_s, s_hi = s;
    if (s == 0) c->own_next = -1;
    if (own >= 0 && (c->own_next < 0 || own < c->own_next)) c->own_next = own;
    /* sync: the step every server still takes pushes for (a server may
     * have applied it already); async/geo: the newest */
    if (s == 0 || (c->o.mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC ? st_s < best : st_s > best))
      best = st_s;
  }
  if (st == FL_OK && hi == lo + 1 && c->o.mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC)
    best = recovered_step(c, at, staged, lo);
  free(staged);
  if (st != FL_OK) {
    free(at);
    return st;
  }
  /* The shards of one job move together: in sync mode no server can be
   * more than the step in flight ahead of another; more means they loaded
   * checkpoints of different steps. */
  if (hi - lo > 1 && c->o.mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC) {
    free(at);
    return FL_ERR(FL_ESTATE, "the pservers stand at different steps: pserver %d (%s) at step %" PRId64
                  ", pserver %d (%s) at step %" PRId64 "; in sync mode they must agree (were "
                  "their checkpoints taken at different steps?); refusing to train on a mix",
                  s_lo, c->names[s_lo], lo, s_hi, c->names[s_hi], hi);
  }
  if (hi - lo > 1 && !c->warned_spread) {
    FL_LOGW("the pservers stand %" PRId64 " steps apart: pserver %d (%s) at step %" PRId64
            ", pserver %d (%s) at step %" PRId64, hi - lo, s_lo, c->names[s_lo], lo, s_hi,
            c->names[s_hi], hi);
    c->warned_spread = 1;
  }
  /* A server behind the others (it lost its state) is told where the job
   * is, so that it takes the pushes of step `best`. */
  for (int s = 0; s < c->o.n_servers && st == FL_OK; s++)
    if (at[s] < best) st = register_server(c, s, best, NULL, NULL, NULL);
  free(at);
  FL_TRY(st);
  /* sync: the rows pulled next are those of step `best` or later */
  for (size_t i = 0; c->o.mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC && i < c->n_tables; i++)
    if (c->table_next[i] < best) c->table_next[i] = best;
  if (step) *step = best;
  if (c->o.heartbeat_interval_s > 0 && !c->hb_started) {
    if (pthread_create(&c->hb, NULL, hb_main, c) != 0)
      return FL_ERR(FL_EIO, "ps client: cannot start the heartbeat thread");
    c->hb_started = 1;
  }
  return FL_OK;
}

const fl_ps_layout *fl_ps_client_layout(const fl_ps_client *c) { return c->layout; }

int64_t fl_ps_client_own_next_step(const fl_ps_client *c) { return c->own_next; }

void fl_ps_client_set_total_steps(fl_ps_client *c, int64_t total_steps) {
  c->o.total_steps = total_steps;
}

static fl_status lane_send(fl_ps_client *c, lane *L);

fl_status fl_ps_client_push_block(fl_ps_client *c, uint32_t block, int kind, int64_t step,
                                  const float *src) {
  op *o;
  lane *L = &c->lanes[LANE_MAIN];
  if (!c->layout || block >= c->layout->n_blocks)
    return FL_ERR(FL_EINVAL, "ps client: push of unknown block %u", block);
  o = op_new(c, FL_PROTO_PUSH_DENSE, c->layout->blocks[block].server);
  if (!o) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  o->block = block;
  o->kind = kind;
  o->step = step;
  o->src = src;
  if (kind != FLOTILLA__PUSH_KIND__PUSH_INIT && step > atomic_load(&c->step_pushed))
    atomic_store(&c->step_pushed, step);
  /* Sent with the server's other queued blocks in one call (lane_send),
   * at the latest once PUSH_GROUP_BYTES are queued, so that a large
   * model's pushes still overlap its backward. */
  o->queued = 1;
  L->dense_queued += op_bytes(c, o);
  if (L->dense_queued >= PUSH_GROUP_BYTES) return lane_send(c, L);
  return FL_OK; /* a launch failure is reported by fl_ps_client_wait */
}

/* Queue the pull of group g (blocks of one server) asking for min_step,
 * carrying the commit `committed` (0: none). */
static fl_status pull_group(fl_ps_client *c, size_t g, int64_t min_step, int64_t committed) {
  const uint32_t *b = c->grp_blocks + c->grp_start[g];
  op *o = op_new(c, FL_PROTO_PULL_DENSE, c->layout->blocks[b[0]].server);
  if (!o) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  o->blocks = b;
  o->nblocks = c->grp_start[g + 1] - c->grp_start[g];
  o->min_step = min_step;
  o->committed = committed;
  op_submit(c, o);
  return FL_OK;
}

fl_status fl_ps_client_pull_dense(fl_ps_client *c, int64_t min_step) {
  if (!c->layout) return FL_ERR(FL_EINVAL, "ps client: dense pull before a dense layout");
  FL_TRY(lane_send(c, &c->lanes[LANE_MAIN])); /* the queued pushes go first */
  for (size_t g = 0; g < c->n_groups; g++) FL_TRY(pull_group(c, g, min_step, 0));
  return FL_OK;
}

/* Queue server s's pulls of step + 1 carrying the commit of step: its pull
 * groups, or one pull of no block where it holds none (its rows wait for
 * the commit too). */
static fl_status commit_server(fl_ps_client *c, int s, int64_t step) {
  int any = 0;
  for (size_t g = 0; g < c->n_groups; g++) {
    if (c->layout->blocks[c->grp_blocks[c->grp_start[g]]].server != s) continue;
    FL_TRY(pull_group(c, g, step + 1, step + 1));
    any = 1;
  }
  if (any) return FL_OK;
  op *o = op_new(c, FL_PROTO_PULL_DENSE, s);
  if (!o) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  o->min_step = step + 1;
  o->committed = step + 1;
  op_submit(c, o);
  return FL_OK;
}

/* The registered table called name's index (n_tables: none), looked for
 * from where the last one was found on, round to it: a step's calls name
 * the tables in the same order each time. */
static size_t table_index(fl_ps_client *c, const char *name) {
  for (size_t k = 0; k < c->n_tables; k++) {
    const size_t i = (c->table_hint + k) % c->n_tables;
    if (!strcmp(c->tables[i].name, name)) return c->table_hint = i;
  }
  return c->n_tables;
}

/* The registered table called name's slot in c->table_next, or NULL. */
static int64_t *table_next_of(fl_ps_client *c, const char *table) {
  const size_t i = table_index(c, table);
  return i < c->n_tables ? &c->table_next[i] : NULL;
}

/* The step a registration again declares: the highest pushed, or the one
 * after the last sparse push when that is higher (a sparse model's rows are
 * pushed before the dense gradients of the same step, and a pull of the
 * next step's rows may meet the restarted server first: its dense pushes
 * come next, and must lie in the server's step window). */
static int64_t declared_step(fl_ps_client *c) {
  int64_t d = atomic_load(&c->step_pushed);
  for (size_t i = 0; i < c->n_tables; i++)
    if (c->table_next[i] > d) d = c->table_next[i];
  return d;
}

/* Whether o is a push: repeated, and over, before any pull is repeated. */
static int is_push(const op *o) { return push_type(o->type); }

static int op_inflight(fl_ps_client *c, const op *o) {
  pthread_mutex_lock(&c->mu);
  int busy = o->inflight;
  pthread_mutex_unlock(&c->mu);
  return busy;
}

/* Submit again the calls over (not in flight) to a server of again[] in
 * every lane's batch (the push lane, idle, its last batch's), pushes or
 * the others; the pushes are then waited for, and the first error that is
 * not a refusal (FL_ESTATE, which the lanes' own waits repeat) returned.
 * Only the trainer thread submits, so a call seen over stays so. */
static fl_status repeat_calls(fl_ps_client *c, const int *again, int pushes) {
  fl_status first = FL_OK;
  for (int pass = 0; pass < (pushes ? 2 : 1); pass++)
    for (int l = 0; l < N_LANES; l++) {
      lane *L = &c->lanes[l];
      size_t n = L->n_ops ? L->n_ops : l == LANE_SPUSH ? L->last_n : 0;
      for (size_t i = 0; i < n; i++) {
        op *o = L->pool[i];
        if (!again[o->server] || o->batched || o->queued || is_push(o) != pushes ||
            (pass == 0 && op_inflight(c, o)))
          continue;
        if (pass == 0) {
          o->attempt = 0;
          o->warned = 0;
          op_submit(c, o);
          continue;
        }
        pthread_mutex_lock(&c->mu);
        while (o->inflight) pthread_cond_wait(&c->cv, &c->mu);
        if (o->st != FL_OK && o->st != FL_ESTATE && first == FL_OK) first = o->st;
        pthread_mutex_unlock(&c->mu);
      }
    }
  return first;
}

/* Register again with the servers that refused a call of L's batch with
 * FL_ESTATE (they forgot this trainer: restarted, and lost what they took
 * since their last checkpoint) and repeat to them every call of every
 * batch, not only the refused ones nor only L's: a push one took before
 * the restart is lost (and a sync step would wait for it for ever), and
 * so is the last sparse push (it may not be applied yet).  The pushes go
 * first, and are over before any pull is repeated (a restarted server
 * answers a sparse pull at once when it has no push of this trainer to
 * wait for); the server drops a push it holds or applied already as a
 * duplicate, and pulls are idempotent. */
static fl_status lane_recover(fl_ps_client *c, lane *L) {
  fl_status st = FL_OK;
  int *again = calloc((size_t)c->o.n_servers, sizeof *again);
  if (!again) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  for (size_t i = 0; i < L->n_ops; i++)
    if (L->pool[i]->st == FL_ESTATE) again[L->pool[i]->server] = 1;
  for (int s = 0; s < c->o.n_servers && st == FL_OK; s++) {
    if (!again[s]) continue;
    FL_LOGI("pserver %d (%s) does not know trainer %d: registering again and repeating what "
            "it may have lost", s, c->names[s], c->o.trainer_id);
    st = register_server(c, s, declared_step(c), NULL, NULL, NULL);
  }
  if (st == FL_OK) st = repeat_calls(c, again, 1);
  if (st == FL_OK) st = repeat_calls(c, again, 0);
  free(again);
  return st;
}

/* After L's batch went through: each table pushed to moves its next pull's
 * step past the pushed one. */
static void lane_pushed(fl_ps_client *c, const lane *L) {
  for (size_t i = 0; i < L->n_ops; i++) {
    const op *o = L->pool[i];
    int64_t *next = o->type == FL_PROTO_PUSH_SPARSE ? table_next_of(c, o->table) : NULL;
    if (next && o->step + 1 > *next) *next = o->step + 1;
  }
}

/* Whether queued o goes in one call with `first`: same server and method,
 * and for dense pushes the same step and kind. */
static int same_call(const op *o, const op *first) {
  return o->queued && o->server == first->server && o->type == first->type &&
         (o->type != FL_PROTO_PUSH_DENSE || (o->step == first->step && o->kind == first->kind));
}

/* The call of lane L to server s taking its queued calls from pool[from]
 * (queued, to s) on, those that go with it (same_call), before pool[to],
 * as many as fit in SPARSE_BATCH_BYTES (dense pushes: PUSH_GROUP_BYTES; at
 * least one): a batch call when several sparse calls, one PushDense of
 * several blocks when dense pushes. */
static fl_status batch_one(fl_ps_client *c, lane *L, int s, size_t from, size_t to) {
  size_t bytes = 0, n = 0, i, last;
  op *b, *first = L->pool[from];
  fl_proto_id type = first->type;
  const size_t cap = type == FL_PROTO_PUSH_DENSE ? PUSH_GROUP_BYTES : SPARSE_BATCH_BYTES;
  for (i = from; i < to; i++) {
    op *o = L->pool[i];
    if (!same_call(o, first)) continue;
    if (n && bytes + op_bytes(c, o) > cap) break;
    bytes += op_bytes(c, o);
    n++;
  }
  last = i;
  if (n == 1) {
    first->queued = 0;
    op_submit(c, first);
    return FL_OK;
  }
  b = lane_op_new(c, L, type == FL_PROTO_PULL_SPARSE   ? FL_PROTO_PULL_SPARSE_BATCH
                        : type == FL_PROTO_PUSH_SPARSE ? FL_PROTO_PUSH_SPARSE_BATCH
                                                       : type, s);
  if (!b) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
  if (n > b->bparts_cap) {
    op **np = realloc(b->bparts, n * sizeof *np);
    if (!np) return FL_ERR(FL_ENOMEM, "ps client: out of memory for a batch of %zu calls", n);
    b->bparts = np;
    b->bparts_cap = n;
  }
  b->step = first->step;
  b->kind = first->kind;
  for (i = from; i < last; i++) {
    op *o = L->pool[i];
    if (!same_call(o, first)) continue; /* compares first's call, not its flag */
    o->queued = 0;
    o->batched = 1;
    b->bparts[b->nbparts++] = o;
  }
  op_submit(c, b);
  return FL_OK;
}

/* Send lane L's queued sparse calls: one call per server (a batch call
 * when it has several; more when their rows exceed SPARSE_BATCH_BYTES),
 * the parts in their queued order.  A lane's sparse calls are all pulls or
 * all pushes. */
static fl_status lane_send(fl_ps_client *c, lane *L) {
  const size_t end = L->n_ops; /* batch calls go after it */
  L->dense_queued = 0;
  for (int s = 0; s < c->o.n_servers; s++) {
    size_t i = 0;
    while (i < end) {
      if (L->pool[i]->queued && L->pool[i]->server == s) FL_TRY(batch_one(c, L, s, i, end));
      else i++;
    }
  }
  return FL_OK;
}

/* After lane L's send failed with st: its calls in flight are waited for
 * and the batch emptied.  st. */
static fl_status lane_drop(fl_ps_client *c, lane *L, fl_status st) {
  pthread_mutex_lock(&c->mu);
  while (L->pending > 0) pthread_cond_wait(&c->cv, &c->mu);
  L->last_n = 0;
  L->n_ops = 0;
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* Wait for every call of L's batch sent so far (the time blocked is a span
 * `what` on the timeline), recovering from restarted servers; the batch
 * stays as it is.  The first error. */
static fl_status lane_settle(fl_ps_client *c, lane *L, const char *what) {
  fl_status st = FL_OK;
  for (int round = 0;; round++) {
    fl_status first = FL_OK;
    int any = 0;
    int64_t t_wait = fl_timeline_now_us(); /* the time this trainer is blocked */
    pthread_mutex_lock(&c->mu);
    while (L->pending > 0) pthread_cond_wait(&c->cv, &c->mu);
    for (size_t i = 0; i < L->n_ops; i++) {
      op *o = L->pool[i];
      if (o->st == FL_ESTATE) any = 1;
      else if (o->st != FL_OK && first == FL_OK) first = o->st;
    }
    pthread_mutex_unlock(&c->mu);
    int64_t t_done = fl_timeline_now_us();
    fl_timeline_span(fl_timeline_default(), "ps", what, t_wait, t_done, NULL, 0);
    fl_series_observe(fl_metrics_std()->wait_seconds, (double)(t_done - t_wait) * 1e-6);
    if (first != FL_OK || !any) {
      st = first;
      break;
    }
    if (round >= MAX_RECOVERIES) {
      st = FL_ERR(FL_ESTATE, "ps client: servers keep refusing trainer %d after %d "
                  "registrations", c->o.trainer_id, round);
      break;
    }
    if ((st = lane_recover(c, L)) != FL_OK) break;
  }
  return st;
}

/* lane_settle, then the batch is over: empty.  The first error. */
static fl_status lane_wait(fl_ps_client *c, lane *L, const char *what) {
  fl_status st = lane_send(c, L);
  if (st != FL_OK) return lane_drop(c, L, st);
  st = lane_settle(c, L, what);
  if (st == FL_OK) lane_pushed(c, L);
  pthread_mutex_lock(&c->mu);
  L->last_n = st == FL_OK ? L->n_ops : 0;
  L->n_ops = 0;
  pthread_mutex_unlock(&c->mu);
  return st;
}

fl_status fl_ps_client_wait(fl_ps_client *c) {
  return lane_wait(c, &c->lanes[LANE_MAIN], "wait");
}

/* FLOTILLA_TEST_EXIT_AT (integration tests): the commit of step went to
 * pserver 0 alone; once it applied the step there, the process ends as a
 * kill -9 would, its other commits never sent. */
static void exit_after_commit(fl_ps_client *c, int64_t step) {
  fl_status st = fl_ps_client_wait(c);
  FL_LOGW("FLOTILLA_TEST_EXIT_AT=%" PRId64 ": step committed to pserver 0 only (%s); exiting",
          step, fl_strerror(st));
  fflush(NULL);
  _exit(9);
}

fl_status fl_ps_client_commit_pull(fl_ps_client *c, int64_t step) {
  lane *L = &c->lanes[LANE_MAIN];
  if (!c->layout) return FL_ERR(FL_EINVAL, "ps client: dense pull before a dense layout");
  if (c->lanes[LANE_SPUSH].n_ops) FL_TRY(fl_ps_client_push_sparse_finish(c));
  fl_status st = lane_send(c, L);
  if (st == FL_OK) st = lane_settle(c, L, "push_ack"); /* every push of the step acknowledged */
  if (st != FL_OK) return lane_drop(c, L, st);
  const int n = c->exit_at == step ? 1 : c->o.n_servers;
  if (step + 1 > atomic_load(&c->committed)) /* a restarted server learns it */
    atomic_store(&c->committed, step + 1);
  for (int s = 0; s < n; s++) FL_TRY(commit_server(c, s, step));
  if (n < c->o.n_servers) exit_after_commit(c, step);
  return FL_OK;
}

int fl_ps_client_recovered(const fl_ps_client *c) { return c->recovered; }

/* Group keys (and their gradient rows) by server into sb[0..n_servers). */
static fl_status group_keys(fl_ps_client *c, server_buf *sb, const uint64_t *keys, size_t n,
                            uint32_t dim, const float *grads) {
  for (int s = 0; s < c->o.n_servers; s++) sb[s].n = 0;
  for (size_t i = 0; i < n; i++) sb[fl_ps_key_server(keys[i], c->o.n_servers)].n++;
  for (int s = 0; s < c->o.n_servers; s++) {
    server_buf *b = &sb[s];
    size_t need = b->n;
    b->n = 0;
    if (need > b->cap) {
      uint64_t *nk = realloc(b->keys, need * sizeof *nk);
      size_t *np = nk ? realloc(b->pos, need * sizeof *np) : NULL;
      if (nk) b->keys = nk;
      if (np) b->pos = np;
      if (!nk || !np) return FL_ERR(FL_ENOMEM, "ps client: out of memory for %zu keys", n);
      b->cap = need;
    }
    if (grads && need * dim > b->gcap) {
      float *ng = realloc(b->grads, need * dim * sizeof *ng);
      if (!ng) return FL_ERR(FL_ENOMEM, "ps client: out of memory for %zu rows", n);
      b->grads = ng;
      b->gcap = need * dim;
    }
  }
  for (size_t i = 0; i < n; i++) {
    server_buf *b = &sb[fl_ps_key_server(keys[i], c->o.n_servers)];
    b->keys[b->n] = keys[i];
    b->pos[b->n] = i;
    if (grads) memcpy(b->grads + b->n * dim, grads + i * dim, dim * sizeof(float));
    b->n++;
  }
  return FL_OK;
}

/* One sparse call: type, table and its row width, the push's step, n keys
 * with their gradient rows (push) or where their rows go (pull). */
typedef struct sparse_req {
  fl_proto_id type;
  const char *table;
  uint32_t dim;
  int64_t step;
  const uint64_t *keys;
  size_t n;
  const float *grads;
  float *out;
  int read_only;
} sparse_req;

/* Queue q in lane L to every server that owns some of its keys, grouped
 * in sb; a push goes to every server, empty where it owns none, and
 * numbers its parts (sync applies a step once every trainer sent all of
 * its parts); a pull asks for the step after the last one this client
 * pushed to the table. */
static fl_status sparse_submit(fl_ps_client *c, lane *L, server_buf *sb, const sparse_req *q) {
  int64_t *next = table_next_of(c, q->table);
  if (q->type == FL_PROTO_PUSH_SPARSE && q->n > SPARSE_CHUNK * 64)
    return FL_ERR(FL_EINVAL, "ps client: %zu rows in one sparse push (at most %u)", q->n,
                  SPARSE_CHUNK * 64);
  const int rows_out = sends_only(q->type); /* grads or initial rows: rows sent */
  FL_TRY(group_keys(c, sb, q->keys, q->n, q->dim, rows_out ? q->grads : NULL));
  for (int s = 0; s < c->o.n_servers; s++) {
    server_buf *b = &sb[s];
    uint32_t seq = 0, parts = (uint32_t)((b->n + SPARSE_CHUNK - 1) / SPARSE_CHUNK);
    if (q->type == FL_PROTO_PUSH_SPARSE && parts == 0) parts = 1;
    for (size_t off = 0; seq < parts; off += SPARSE_CHUNK, seq++) {
      op *o = lane_op_new(c, L, q->type, s);
      if (!o) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
      o->table = q->table;
      o->dim = q->dim;
      o->step = q->step;
      o->min_step = next ? *next : 0;
      o->nkeys = b->n - off < SPARSE_CHUNK ? b->n - off : SPARSE_CHUNK;
      o->keys = o->nkeys ? b->keys + off : NULL;
      o->pos = o->nkeys ? b->pos + off : NULL;
      o->grads = rows_out && o->nkeys ? b->grads + off * q->dim : NULL;
      o->out = q->out;
      o->seq = seq;
      o->parts = parts;
      o->read_only = q->read_only;
      o->queued = 1; /* sent by lane_send, batched by server */
    }
  }
  return FL_OK;
}

/* A blocking sparse call (the main lane). */
static fl_status sparse_call(fl_ps_client *c, const sparse_req *q) {
  lane *L = &c->lanes[LANE_MAIN];
  fl_status st = sparse_submit(c, L, c->sb, q);
  fl_status w = fl_ps_client_wait(c);
  return st != FL_OK ? st : w;
}

fl_status fl_ps_client_pull_sparse(fl_ps_client *c, const char *table, uint32_t dim,
                                   const uint64_t *keys, size_t n, float *out) {
  return sparse_call(c, &(sparse_req){FL_PROTO_PULL_SPARSE, table, dim, 0, keys, n, NULL, out, 0});
}

fl_status fl_ps_client_push_sparse(fl_ps_client *c, const char *table, uint32_t dim,
                                   int64_t step, const uint64_t *keys, size_t n,
                                   const float *grads) {
  /* the push lane's: a restarted server gets it again (repeat_calls) */
  FL_TRY(fl_ps_client_push_sparse_start(c, table, dim, step, keys, n, grads));
  return fl_ps_client_push_sparse_finish(c);
}

/* Queue q in the asynchronous lane `which`, the table's keys grouped in
 * the lane's own buffers. */
static fl_status sparse_start(fl_ps_client *c, int which, const sparse_req *q) {
  lane *L = &c->lanes[which];
  const size_t ti = table_index(c, q->table);
  if (ti == c->n_tables)
    return FL_ERR(FL_EINVAL, "ps client: asynchronous call on table %s, which was not "
                  "registered", q->table);
  if (L->nsb < c->n_tables * (size_t)c->o.n_servers) {
    server_buf *nb = realloc(L->sb, c->n_tables * (size_t)c->o.n_servers * sizeof *nb);
    if (!nb) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
    memset(nb + L->nsb, 0, (c->n_tables * (size_t)c->o.n_servers - L->nsb) * sizeof *nb);
    L->sb = nb;
    L->nsb = c->n_tables * (size_t)c->o.n_servers;
  }
  return sparse_submit(c, L, L->sb + ti * (size_t)c->o.n_servers, q);
}

fl_status fl_ps_client_pull_sparse_start(fl_ps_client *c, const char *table, uint32_t dim,
                                         const uint64_t *keys, size_t n, float *out) {
  return sparse_start(c, LANE_SPULL,
                      &(sparse_req){FL_PROTO_PULL_SPARSE, table, dim, 0, keys, n, NULL, out, 0});
}

fl_status fl_ps_client_read_sparse_start(fl_ps_client *c, const char *table, uint32_t dim,
                                         const uint64_t *keys, size_t n, float *out) {
  return sparse_start(c, LANE_SPULL,
                      &(sparse_req){FL_PROTO_PULL_SPARSE, table, dim, 0, keys, n, NULL, out, 1});
}

fl_status fl_ps_client_sparse_send(fl_ps_client *c) {
  FL_TRY(lane_send(c, &c->lanes[LANE_SPULL]));
  return lane_send(c, &c->lanes[LANE_SPUSH]);
}

fl_status fl_ps_client_pull_sparse_finish(fl_ps_client *c) {
  return lane_wait(c, &c->lanes[LANE_SPULL], "pull_wait");
}

fl_status fl_ps_client_push_sparse_start(fl_ps_client *c, const char *table, uint32_t dim,
                                         int64_t step, const uint64_t *keys, size_t n,
                                         const float *grads) {
  /* A step's dense pushes queued so far leave before its rows, as they
   * did when each went at grad_ready: a sync server applies the rows'
   * step without waiting for the dense blocks, so a trainer killed
   * between the two must not have delivered the rows only. */
  FL_TRY(lane_send(c, &c->lanes[LANE_MAIN]));
  return sparse_start(
      c, LANE_SPUSH,
      &(sparse_req){FL_PROTO_PUSH_SPARSE, table, dim, step, keys, n, grads, NULL, 0});
}

fl_status fl_ps_client_push_sparse_finish(fl_ps_client *c) {
  return lane_wait(c, &c->lanes[LANE_SPUSH], "push_wait");
}

/* FL_EINVAL (logged) when table is registered by this client with another
 * width than the caller's. */
static fl_status check_width(fl_ps_client *c, const char *what, const char *table,
                             uint32_t width) {
  for (size_t i = 0; i < c->n_tables; i++)
    if (!strcmp(c->tables[i].name, table) && c->tables[i].dim != width)
      return FL_ERR(FL_EINVAL, "ps client: %s of table %s with rows of %u floats, but it was "
                    "registered with %u: pass the table's registered width", what, table, width,
                    c->tables[i].dim);
  return FL_OK;
}

/* Rows per round of fl_ps_client_init_sparse: bounds the copy grouped by
 * server. */
#define INIT_ROUND (SPARSE_CHUNK * 16)

fl_status fl_ps_client_init_sparse(fl_ps_client *c, const char *table, uint32_t width,
                                   const uint64_t *ids, size_t n, const float *rows) {
  FL_TRY(check_width(c, "InitSparse", table, width));
  for (size_t off = 0; off < n; off += INIT_ROUND) {
    size_t k = n - off < INIT_ROUND ? n - off : INIT_ROUND;
    FL_TRY(sparse_call(c, &(sparse_req){FL_PROTO_INIT_SPARSE, table, width, 0, ids + off, k,
                                        rows + off * width, NULL, 0}));
  }
  return FL_OK;
}

/* What fl_ps_client_dump_sparse gathers: rows of every server, appended. */
typedef struct dump_acc {
  uint64_t *ids;
  float *rows;
  size_t n, cap;
  uint32_t width;
} dump_acc;

/* Append one DumpSparse page of server s (asked for keys above *after when
 * *has_after) to a: checked (shape, keys ascending above *after, of server
 * s); *after / *more move on. */
static fl_status dump_take(fl_ps_client *c, int s, const char *table,
                           const Flotilla__DumpSparseResponse *r, dump_acc *a, uint64_t *after,
                           int *has_after, int *more) {
  size_t k = r->n_keys, w = a->width;
  if (!r->values || r->values->dtype != FLOTILLA__DTYPE__DTYPE_FP32 ||
      r->values->data.len != k * w * sizeof(float) || (r->more && k == 0))
    return FL_ERR(FL_EPROTO, "pserver %d (%s): malformed DumpSparse answer for table %s (%zu "
                  "keys, rows of %u floats expected)", s, c->names[s], table, k, a->width);
  for (size_t i = 0; i < k; i++) {
    uint64_t prev = i ? r->keys[i - 1] : *after;
    if (((i || *has_after) && r->keys[i] <= prev) ||
        fl_ps_key_server(r->keys[i], c->o.n_servers) != s)
      return FL_ERR(FL_EPROTO, "pserver %d (%s): DumpSparse of table %s answered key %" PRIu64
                    " out of order or of another server", s, c->names[s], table, r->keys[i]);
  }
  if (a->n + k > a->cap) {
    size_t nc = a->cap ? a->cap : 1024;
    while (nc < a->n + k) nc *= 2;
    uint64_t *ni = realloc(a->ids, nc * sizeof *ni);
    if (ni) a->ids = ni;
    float *nr = ni ? realloc(a->rows, nc * w * sizeof *nr) : NULL;
    if (nr) a->rows = nr;
    if (!ni || !nr) return FL_ERR(FL_ENOMEM, "ps client: out of memory dumping table %s", table);
    a->cap = nc;
  }
  if (k) {
    memcpy(a->ids + a->n, r->keys, k * sizeof *a->ids);
    memcpy(a->rows + a->n * w, r->values->data.data, k * w * sizeof(float));
    *after = r->keys[k - 1];
    *has_after = 1;
  }
  a->n += k;
  *more = r->more;
  return FL_OK;
}

/* Every page of table on server s into a.  The call goes as an observer
 * (trainer id -1): a read-only listing needs no registration, so it works
 * before Register, after Complete and across a server's restart. */
static fl_status dump_server(fl_ps_client *c, int s, const char *table, dump_acc *a) {
  uint64_t after = 0;
  int has_after = 0, more = 1;
  fl_status st = FL_OK;
  while (more && st == FL_OK) {
    Flotilla__DumpSparseRequest q = FLOTILLA__DUMP_SPARSE_REQUEST__INIT;
    Flotilla__DumpSparseResponse *r;
    grpc_status_code code;
    char details[512];
    q.trainer_id = -1;
    q.table = (char *)table;
    q.after_key = after;
    q.has_after = has_after;
    st = unary(c, s, FL_PROTO_DUMP_SPARSE, &q.base, c->o.rpc_timeout_s, c->ob, &c->uin, &code,
               details, sizeof details);
    if (st != FL_OK)
      return FL_ERR(st, "pserver %d (%s) DumpSparse of table %s: %s (%s)", s, c->names[s], table,
                    fl_rpc_code_name(code), details);
    r = (Flotilla__DumpSparseResponse *)fl_rpc_unpack(&c->uarena, ANSWER(DUMP_SPARSE),
                                                     c->uin.data, c->uin.len);
    st = r ? dump_take(c, s, table, r, a, &after, &has_after, &more)
           : FL_ERR(FL_EPROTO, "pserver %d (%s): unreadable DumpSparse answer", s, c->names[s]);
    fl_rpc_arena_reset(&c->uarena);
  }
  return st;
}

typedef struct key_pos {
  uint64_t key;
  size_t pos;
} key_pos;

static int cmp_key_pos(const void *x, const void *y) {
  uint64_t a = ((const key_pos *)x)->key, b = ((const key_pos *)y)->key;
  return a < b ? -1 : a > b;
}

/* a's rows in ascending key order, into *ids / *rows (new arrays). */
static fl_status dump_sorted(const dump_acc *a, const char *table, uint64_t **ids,
                             float **rows) {
  size_t n = a->n, w = a->width, m = n ? n : 1;
  key_pos *kp = malloc(m * sizeof *kp);
  *ids = malloc(m * sizeof **ids);
  *rows = malloc(m * w * sizeof **rows);
  if (!kp || !*ids || !*rows) {
    free(kp);
    free(*ids);
    free(*rows);
    *ids = NULL;
    *rows = NULL;
    return FL_ERR(FL_ENOMEM, "ps client: out of memory sorting %zu rows of table %s", n, table);
  }
  for (size_t i = 0; i < n; i++) kp[i] = (key_pos){a->ids[i], i};
  qsort(kp, n, sizeof *kp, cmp_key_pos);
  for (size_t i = 0; i < n; i++) {
    (*ids)[i] = kp[i].key;
    memcpy(*rows + i * w, a->rows + kp[i].pos * w, w * sizeof(float));
  }
  free(kp);
  return FL_OK;
}

/* Whether ids[0..n) ascend. */
static int ascending(const uint64_t *ids, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (ids[i - 1] >= ids[i]) return 0;
  return 1;
}

fl_status fl_ps_client_dump_sparse(fl_ps_client *c, const char *table, uint32_t width,
                                   uint64_t **ids, float **rows, size_t *n) {
  dump_acc a = {NULL, NULL, 0, 0, width};
  fl_status st = FL_OK;
  *ids = NULL;
  *rows = NULL;
  *n = 0;
  if (width == 0) return FL_ERR(FL_EINVAL, "ps client: DumpSparse of table %s with width 0", table);
  FL_TRY(check_width(c, "DumpSparse", table, width));
  for (int s = 0; s < c->o.n_servers && st == FL_OK; s++) st = dump_server(c, s, table, &a);
  if (st == FL_OK && a.n && ascending(a.ids, a.n)) { /* one server's pages: sorted already */
    *ids = a.ids;
    *rows = a.rows;
    *n = a.n;
    return FL_OK;
  }
  if (st == FL_OK && (st = dump_sorted(&a, table, ids, rows)) == FL_OK) *n = a.n;
  free(a.ids);
  free(a.rows);
  return st;
}

fl_status fl_ps_client_barrier(fl_ps_client *c, const char *name, const double *values,
                               size_t nv, int64_t value_min, double *sums, int64_t *min) {
  /* Every server hears of it: while this trainer waits, no server's sync
   * step waits for it.  The answer comes from server 0 (all agree). */
  for (int s = 0; s < c->o.n_servers; s++) {
    op *o = op_new(c, FL_PROTO_BARRIER, s);
    if (!o) return FL_ERR(FL_ENOMEM, "ps client: out of memory");
    o->name = name;
    o->values = values;
    o->nv = nv;
    o->value_min = value_min;
    o->sums = s == 0 ? sums : NULL;
    o->min = s == 0 ? min : NULL;
    op_submit(c, o);
  }
  return fl_ps_client_wait(c);
}

/* End the heartbeat thread (if any); idempotent. */
static void stop_heartbeats(fl_ps_client *c) {
  if (!c->hb_started) return;
  pthread_mutex_lock(&c->hb_mu);
  c->hb_stop = 1;
  pthread_cond_broadcast(&c->hb_cv);
  pthread_mutex_unlock(&c->hb_mu);
  pthread_join(c->hb, NULL);
  c->hb_started = 0;
}

fl_status fl_ps_client_complete(fl_ps_client *c) {
  /* A trainer that is done has nothing to keep alive; and no heartbeat
   * races the servers' shutdown once the last trainer completed. */
  stop_heartbeats(c);
  for (int s = 0; s < c->o.n_servers; s++) {
    Flotilla__CompleteRequest r = FLOTILLA__COMPLETE_REQUEST__INIT;
    grpc_status_code code;
    char details[256];
    fl_status st;
    r.trainer_id = c->o.trainer_id;
    for (int round = 0;; round++) {
      st = unary(c, s, FL_PROTO_COMPLETE, &r.base, c->o.rpc_timeout_s, c->ob, &c->uin, &code,
                 details, sizeof details);
      if (st != FL_ESTATE || round >= 2) break;
      FL_TRY(register_server(c, s, declared_step(c), NULL, NULL, NULL));
    }
    if (st != FL_OK)
      return FL_ERR(st, "pserver %d (%s) Complete: %s (%s)", s, c->names[s],
                    fl_rpc_code_name(code), details);
  }
  return FL_OK;
}

void fl_ps_client_counters(const fl_ps_client *c, fl_ps_client_totals *out) {
  fl_ps_client *m = (fl_ps_client *)c; /* atomics are read, not changed */
  out->calls = atomic_load(&m->n_calls);
  out->pushes = atomic_load(&m->n_pushes);
  out->pulls = atomic_load(&m->n_pulls);
  out->bytes_sent = atomic_load(&m->n_sent);
  out->bytes_received = atomic_load(&m->n_received);
  out->retries = atomic_load(&m->n_retries);
  out->failed = atomic_load(&m->n_failed);
}

/* L's calls and key groups (every call is over). */
static void lane_free(lane *L) {
  for (size_t i = 0; i < L->cap_ops; i++)
    if (L->pool[i]) {
      fl_rpc_outbuf_free(L->pool[i]->ob);
      free(L->pool[i]->half);
      free(L->pool[i]->bparts);
      free(L->pool[i]);
    }
  free(L->pool);
  for (size_t i = 0; i < L->nsb; i++) {
    free(L->sb[i].keys);
    free(L->sb[i].pos);
    free(L->sb[i].grads);
  }
  free(L->sb);
}

void fl_ps_client_destroy(fl_ps_client *c) {
  if (!c) return;
  stop_heartbeats(c);
  if (c->driver_started) {
    pthread_mutex_lock(&c->mu);
    c->shutting = 1;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&c->mu);
    while (c->pending > 0) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    grpc_completion_queue_shutdown(c->cq);
    pthread_join(c->driver, NULL);
    /* Every call is over: the final counters (tests/bench/soak_ps.sh
     * reconciles them with the servers' totals). */
    fl_ps_client_totals t;
    fl_ps_client_counters(c, &t);
    FL_LOGI("ps client totals: %" PRIu64 " calls answered (%" PRIu64 " pushes, %" PRIu64
            " pulls), %" PRIu64 " bytes sent, %" PRIu64 " bytes received, %" PRIu64
            " retried, %" PRIu64 " failed",
            t.calls, t.pushes, t.pulls, t.bytes_sent, t.bytes_received, t.retries, t.failed);
  }
  if (c->cq) grpc_completion_queue_destroy(c->cq);
  for (int s = 0; c->ch && s < c->o.n_servers; s++)
    if (c->ch[s]) grpc_channel_destroy(c->ch[s]);
  fl_rpc_shutdown();
  for (int l = 0; l < N_LANES; l++) lane_free(&c->lanes[l]);
  for (int s = 0; c->sb && s < c->o.n_servers; s++) {
    free(c->sb[s].keys);
    free(c->sb[s].pos);
    free(c->sb[s].grads);
  }
  for (size_t i = 0; i < c->np; i++) free((char *)c->params[i].name);
  free(c->params);
  for (size_t i = 0; i < c->n_tables; i++) free((char *)c->tables[i].name);
  free(c->tables);
  free(c->table_next);
  fl_ps_layout_free(c->layout);
  free(c->grp_blocks);
  free(c->grp_start);
  free_client(c);
}
