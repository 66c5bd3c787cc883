/* server.c - the ParameterServer gRPC service of flotilla-pserver, on the
 * gRPC C core's completion-queue API.
 *
 * Threads: `threads` workers, each with its own completion queue registered
 * with the server and `calls_per_thread` grpc_server_request_call armed on
 * it (a new one is armed as soon as one is taken).  A call goes through
 *   REQ    the call arrived with its metadata: arm another, start
 *          RECV_CLOSE_ON_SERVER (tells us when the client cancels or goes
 *          away), check the token and the method - a call failing them is
 *          answered at once and its body is never read - then start
 *          RECV_MESSAGE;
 *   RECV   the request is in (a call without a message gets
 *          INVALID_ARGUMENT): check the size and the bytes, run
 *          it on fl_ps_core, answer (SEND_* batch) - or, for a sync pull
 *          whose step is not applied yet or an incomplete barrier, put the
 *          call on the held list and return to the queue at once;
 *   SEND   the answer went out;  CLOSE  the call is over (maybe cancelled).
 * A call's memory goes back to its worker's free list when both the CLOSE
 * and (if any) the SEND completion have come and it is no longer held, so
 * response buffers stay warm from call to call.
 *
 * Held calls are looked at again whenever the core reports progress (a
 * step applied, a barrier complete, a trainer joined, died or completed):
 * the ready ones are answered from that thread, which only starts a send
 * batch - no completion-queue thread ever waits for another event.
 *
 * Errors: a request that fails a check is answered with the fl_status
 * converted to a gRPC code (INVALID_ARGUMENT for bad input, with the
 * reason in the details; FAILED_PRECONDITION means "register again";
 * UNAUTHENTICATED for a wrong or missing token) and changes nothing. */
#include <config.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/time.h>

#include "fl_log.h"
#include "fl_ps.h"
#include "health.pb-c.h"

enum { K_REQ = 0, K_RECV, K_SEND, K_CLOSE };
enum { H_NONE = 0, H_PULL, H_BARRIER, H_SPULL, H_SBATCH };

/* The i-th method this server has a handler for (its table below is
 * indexed by the wire's fl_proto_id; tests/unit/test_wire_service.c checks
 * that every method of the service blocks of proto/ has one). */
static int served(int m);

int fl_ps_server_method(size_t i, fl_rpc_method *out) {
  for (int m = 0; m < FL_PROTO_COUNT; m++) {
    if (!served(m)) continue;
    if (i-- == 0) {
      *out = fl_proto_methods[m].rpc;
      return 1;
    }
  }
  return 0;
}

typedef struct call call;
typedef struct worker worker;

typedef struct tag {
  call *c;
  int kind;
} tag;

struct call {
  worker *w;
  tag t_req, t_recv, t_send, t_close;
  grpc_call *gc;
  grpc_call_details details;
  grpc_metadata_array md;
  grpc_byte_buffer *recv;
  grpc_byte_buffer *resp;
  int method; /* fl_proto_id, set before RECV_MESSAGE starts */
  int cancelled;
  atomic_int refs;
  /* held */
  int held;
  int32_t tid;
  int64_t min_step;
  uint32_t *blocks;
  size_t n_blocks, cap_blocks;
  char bname[128]; /* a barrier's name, or a sparse pull's table */
  uint64_t *keys;  /* a held sparse pull's keys */
  size_t n_keys, cap_keys;
  int read_only;
  Flotilla__PullSparseBatchRequest *bq; /* a held batch pull's copy (owned) */
  Flotilla__BarrierResponse bres; /* a barrier's result, taken for this call */
  double bbuf[FL_PS_BARRIER_MAX_VALUES];
  call *prev, *next;
  int ready_kind;
  fl_status ready_st;
  call *ready_next;
  /* kept across uses */
  fl_rpc_outbuf *ob;
  float *scratch;
  size_t scratch_cap;
  float **pscr; /* a batch pull's rows: part i's in pscr[i] (pcap[i] floats) */
  size_t *pcap;
  size_t n_pscr;
  call *free_next;
};

struct worker {
  fl_ps_server *s;
  int idx;
  grpc_completion_queue *cq;
  pthread_t th;
  int started;
  fl_rpc_arena arena;
  fl_rpc_inbuf in;
  pthread_mutex_t free_mu;
  call *free_list;
};

struct fl_ps_server {
  fl_ps_core *core;
  fl_ps_server_opts o;
  grpc_server *srv;
  worker *w;
  int nw;
  pthread_mutex_t held_mu;
  call held; /* sentinel of the held list */
  atomic_int stopping;
  atomic_int not_serving; /* health: set when the daemon begins to shut down */
  tag t_shutdown;
  /* Shutdown: the server's notification can come while a worker still
   * handles a call and is about to start a batch on its queue, and gRPC
   * aborts on a batch started on a queue already shut down.  The queues
   * are shut down once both the notification has come and no call is in
   * use (live: calls taken from the free lists and not yet back), by
   * whichever thread sees the second of the two. */
  atomic_int live;
  atomic_int shut_notified;
  atomic_int cqs_down;
};

/* ------------------------------------------------------------ call memory */

/* Shut every worker's queue down once the server's shutdown notification
 * has come and no call is in use; at most once. */
static void maybe_shut_queues(fl_ps_server *s) {
  if (!atomic_load(&s->shut_notified) || atomic_load(&s->live) != 0) return;
  if (atomic_exchange(&s->cqs_down, 1)) return;
  for (int i = 0; i < s->nw; i++) grpc_completion_queue_shutdown(s->w[i].cq);
}

static void call_release(call *c) {
  worker *w = c->w;
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  if (c->gc) grpc_call_unref(c->gc);
  c->gc = NULL;
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->md);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  if (c->resp) grpc_byte_buffer_destroy(c->resp);
  c->recv = c->resp = NULL;
  if (c->bq) protobuf_c_message_free_unpacked(&c->bq->base, NULL);
  c->bq = NULL;
  pthread_mutex_lock(&w->free_mu);
  c->free_next = w->free_list;
  w->free_list = c;
  pthread_mutex_unlock(&w->free_mu);
  if (atomic_fetch_sub(&w->s->live, 1) == 1) maybe_shut_queues(w->s);
}

static void call_free(call *c) {
  fl_rpc_outbuf_free(c->ob);
  free(c->scratch);
  for (size_t i = 0; i < c->n_pscr; i++) free(c->pscr[i]);
  free(c->pscr);
  free(c->pcap);
  free(c->blocks);
  free(c->keys);
  free(c);
}

/* Arm one more grpc_server_request_call on w. */
static void arm(worker *w) {
  call *c;
  grpc_call_error e;
  pthread_mutex_lock(&w->free_mu);
  c = w->free_list;
  if (c) w->free_list = c->free_next;
  pthread_mutex_unlock(&w->free_mu);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c || fl_rpc_outbuf_create(0, &c->ob) != FL_OK) {
      free(c);
      FL_LOGE("pserver: out of memory for a call; worker %d serves one call less", w->idx);
      return;
    }
    c->w = w;
    c->t_req = (tag){c, K_REQ};
    c->t_recv = (tag){c, K_RECV};
    c->t_send = (tag){c, K_SEND};
    c->t_close = (tag){c, K_CLOSE};
  }
  c->gc = NULL;
  c->cancelled = 0;
  c->held = H_NONE;
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->md);
  atomic_store(&c->refs, 1); /* the request itself */
  atomic_fetch_add(&w->s->live, 1);
  e = grpc_server_request_call(w->s->srv, &c->gc, &c->details, &c->md, w->cq, w->cq, &c->t_req);
  if (e != GRPC_CALL_OK) {
    FL_LOGE("pserver: grpc_server_request_call failed (%d) on worker %d", (int)e, w->idx);
    call_release(c);
  }
}

/* --------------------------------------------------------------- answers */

/* Send code + details and (when code is OK) the message bb (taken). */
static void respond_bb(call *c, grpc_status_code code, const char *details,
                       grpc_byte_buffer *bb) {
  grpc_op ops[3];
  grpc_slice ds = grpc_slice_from_copied_string(details ? details : "");
  size_t n = 0;
  grpc_call_error e;

  memset(ops, 0, sizeof ops);
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (bb && code == GRPC_STATUS_OK) {
    c->resp = bb;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
  } else if (bb) {
    grpc_byte_buffer_destroy(bb);
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  ops[n++].data.send_status_from_server.status_details = &ds;
  /* Count before sending: the completion may free the buffer at once. */
  if (c->resp) fl_ps_core_count_bytes(c->w->s->core, 0, grpc_byte_buffer_length(c->resp));
  atomic_fetch_add(&c->refs, 1);
  e = grpc_call_start_batch(c->gc, ops, n, &c->t_send, NULL);
  grpc_slice_unref(ds);
  if (e != GRPC_CALL_OK) {
    FL_LOGE("pserver: cannot answer a call (call error %d)", (int)e);
    call_release(c);
  }
}

static void respond_status(call *c, fl_status st, const char *why) {
  char msg[600];
  const char *d = why;
  if (st == FL_EINVAL && !why) d = fl_ps_core_last_error();
  else if (st == FL_ESTATE && !why) d = "trainer not registered here (again): register";
  else if (!why) d = fl_strerror(st);
  snprintf(msg, sizeof msg, "%s", d);
  respond_bb(c, fl_rpc_status_to_grpc(st), msg, NULL);
}

static void respond_msg(call *c, fl_status st, const ProtobufCMessage *m) {
  grpc_byte_buffer *bb = NULL;
  if (st == FL_OK) st = fl_rpc_pack(c->ob, m, &bb);
  if (st != FL_OK) respond_status(c, st, NULL);
  else respond_bb(c, GRPC_STATUS_OK, "", bb);
}

/* ------------------------------------------------------------- held calls */

static void hold(call *c, int kind) {
  fl_ps_server *s = c->w->s;
  int stopping;
  pthread_mutex_lock(&s->held_mu);
  stopping = atomic_load(&s->stopping);
  if (!stopping) {
    c->held = kind;
    atomic_fetch_add(&c->refs, 1);
    c->prev = s->held.prev;
    c->next = &s->held;
    s->held.prev->next = c;
    s->held.prev = c;
  }
  pthread_mutex_unlock(&s->held_mu);
  if (stopping) {
    respond_status(c, FL_EAGAIN, "pserver shutting down");
    return;
  }
  /* The step may have been applied between the check and the hold. */
  fl_ps_server_progress(s);
}

static void unlink_held(call *c) {
  c->prev->next = c->next;
  c->next->prev = c->prev;
  c->prev = c->next = NULL;
  c->held = H_NONE;
}

static void answer_pull(call *c) {
  fl_ps_server *s = c->w->s;
  grpc_byte_buffer *bb = NULL;
  fl_status st = fl_ps_core_pull_pack(s->core, c->min_step, c->blocks, c->n_blocks, c->ob, &bb);
  if (st != FL_OK) respond_status(c, st, NULL);
  else respond_bb(c, GRPC_STATUS_OK, "", bb);
}

static void answer_sparse_pull(call *c);
static fl_status batch_ready(fl_ps_core *core, const Flotilla__PullSparseBatchRequest *q);
static void batch_pull(call *c, const Flotilla__PullSparseBatchRequest *q);

/* Answer a barrier call with the result taken into c->bres (st FL_OK). */
static void answer_barrier(call *c, fl_status st) {
  if (st == FL_ENOTFOUND) respond_status(c, FL_ESTATE, "barrier forgotten (too many since)");
  else respond_msg(c, st, &c->bres.base);
}

void fl_ps_server_progress(void *server) {
  fl_ps_server *s = server;
  call *ready = NULL, *c, *next;
  pthread_mutex_lock(&s->held_mu);
  if (atomic_load(&s->stopping)) {
    pthread_mutex_unlock(&s->held_mu);
    return;
  }
  for (c = s->held.next; c != &s->held; c = next) {
    fl_status st;
    next = c->next;
    if (c->held == H_PULL) {
      st = fl_ps_core_pull_check(s->core, c->tid, c->min_step, c->blocks, c->n_blocks);
    } else if (c->held == H_SPULL) {
      st = fl_ps_core_sparse_ready(s->core, c->tid, c->bname, c->min_step);
    } else if (c->held == H_SBATCH) {
      st = batch_ready(s->core, c->bq);
    } else {
      flotilla__barrier_response__init(&c->bres);
      st = fl_ps_core_barrier_take(s->core, c->bname, c->tid, &c->bres, c->bbuf);
    }
    if (st == FL_EAGAIN) continue;
    c->ready_kind = c->held;
    c->ready_st = st;
    unlink_held(c);
    c->ready_next = ready;
    ready = c;
  }
  pthread_mutex_unlock(&s->held_mu);
  for (c = ready; c; c = next) {
    next = c->ready_next;
    if (c->ready_kind != H_BARRIER) {
      if (c->ready_st != FL_OK) respond_status(c, c->ready_st, NULL);
      else if (c->ready_kind == H_PULL) answer_pull(c);
      else if (c->ready_kind == H_SPULL) answer_sparse_pull(c);
      else batch_pull(c, c->bq);
    } else {
      answer_barrier(c, c->ready_st);
    }
    call_release(c); /* the hold's reference */
  }
}

/* ----------------------------------------------------------------- dispatch */

/* One handler per method of the wire: it answers the call (or holds it). */
static void h_register(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__RegisterResponse r = FLOTILLA__REGISTER_RESPONSE__INIT;
  st = fl_ps_core_register(c->w->s->core, (Flotilla__RegisterRequest *)msg, &r);
  respond_msg(c, st, &r.base);
}

static void h_push_dense(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__PushDenseResponse r = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
  st = fl_ps_core_push_dense(c->w->s->core, (Flotilla__PushDenseRequest *)msg, &r);
  respond_msg(c, st, &r.base);
}

static void h_pull_dense(call *c, ProtobufCMessage *msg) {
  fl_ps_server *s = c->w->s;
  fl_ps_core *core = s->core;
  fl_status st;
  Flotilla__PullDenseRequest *q = (Flotilla__PullDenseRequest *)msg;
  if (q->committed > 0) { /* the trainer's commit rides on its pull (docs/PROTOCOL.md) */
    st = fl_ps_core_commit(core, q->trainer_id, q->committed);
    if (st != FL_OK || q->n_blocks == 0) {
      Flotilla__PullDenseResponse r = FLOTILLA__PULL_DENSE_RESPONSE__INIT;
      r.step = st == FL_OK ? fl_ps_core_step(core) : 0;
      respond_msg(c, st, &r.base);
      return;
    }
  }
  st = fl_ps_core_pull_check(core, q->trainer_id, q->min_step, q->blocks, q->n_blocks);
  if (st != FL_OK && st != FL_EAGAIN) {
    respond_status(c, st, NULL);
    return;
  }
  if (q->n_blocks > c->cap_blocks) {
    uint32_t *nb = realloc(c->blocks, q->n_blocks * sizeof *nb);
    if (!nb) {
      respond_status(c, FL_ENOMEM, "pserver out of memory");
      return;
    }
    c->blocks = nb;
    c->cap_blocks = q->n_blocks;
  }
  memcpy(c->blocks, q->blocks, q->n_blocks * sizeof *c->blocks);
  c->n_blocks = q->n_blocks;
  c->tid = q->trainer_id;
  c->min_step = q->min_step;
  if (st == FL_OK) answer_pull(c);
  else hold(c, H_PULL);
}

/* A sparse pull answered, or held (its request copied into c) until the
 * table applied the step it asks for. */
static void sparse_pull(call *c, const Flotilla__PullSparseRequest *q) {
  fl_status st;
  Flotilla__PullSparseResponse r = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
  int64_t shape[2];
  st = fl_ps_core_pull_sparse(c->w->s->core, q, &c->scratch, &c->scratch_cap, &r, &v, shape);
  if (st != FL_EAGAIN) {
    respond_msg(c, st, &r.base);
    return;
  }
  if (c->keys != q->keys) { /* not already the held copy */
    if (q->n_keys > c->cap_keys) {
      uint64_t *nk = realloc(c->keys, q->n_keys * sizeof *nk);
      if (!nk) {
        respond_status(c, FL_ENOMEM, "pserver out of memory");
        return;
      }
      c->keys = nk;
      c->cap_keys = q->n_keys;
    }
    if (q->n_keys) memcpy(c->keys, q->keys, q->n_keys * sizeof *c->keys);
    c->n_keys = q->n_keys;
    snprintf(c->bname, sizeof c->bname, "%s", q->table); /* checked: a known table */
    c->tid = q->trainer_id;
    c->min_step = q->min_step;
    c->read_only = q->read_only;
  }
  hold(c, H_SPULL);
}

/* A held sparse pull that may be answered now. */
static void answer_sparse_pull(call *c) {
  Flotilla__PullSparseRequest q = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
  q.trainer_id = c->tid;
  q.table = c->bname;
  q.n_keys = c->n_keys;
  q.keys = c->keys;
  q.min_step = c->min_step;
  q.read_only = c->read_only;
  sparse_pull(c, &q);
}

static void h_pull_sparse(call *c, ProtobufCMessage *msg) {
  sparse_pull(c, (const Flotilla__PullSparseRequest *)msg);
}

static void h_push_sparse(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__PushSparseResponse r = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
  st = fl_ps_core_push_sparse(c->w->s->core, (Flotilla__PushSparseRequest *)msg, &r);
  respond_msg(c, st, &r.base);
}

/* Whether every part of a batch pull may be answered: FL_OK, FL_EAGAIN
 * (some table has not applied the step its part asks for), or the first
 * part's error. */
static fl_status batch_ready(fl_ps_core *core, const Flotilla__PullSparseBatchRequest *q) {
  for (size_t i = 0; i < q->n_pulls; i++) {
    const Flotilla__PullSparseRequest *p = q->pulls[i];
    fl_status st = fl_ps_core_sparse_ready(core, p->trainer_id, p->table, p->min_step);
    if (st != FL_OK) return st;
  }
  return FL_OK;
}

/* Room in c for the rows of n parts of a batch pull. */
static fl_status part_scratch(call *c, size_t n) {
  float **ns;
  size_t *nc;
  if (n <= c->n_pscr) return FL_OK;
  ns = realloc(c->pscr, n * sizeof *ns);
  if (ns) c->pscr = ns;
  nc = ns ? realloc(c->pcap, n * sizeof *nc) : NULL;
  if (nc) c->pcap = nc;
  if (!ns || !nc) return FL_ERR(FL_ENOMEM, "pserver: out of memory for a batch of %zu pulls", n);
  for (size_t i = c->n_pscr; i < n; i++) {
    ns[i] = NULL;
    nc[i] = 0;
  }
  c->n_pscr = n;
  return FL_OK;
}

/* Hold a batch pull (a copy of the request read by worker w goes into c)
 * until every part may be answered. */
static void batch_hold(call *c, const Flotilla__PullSparseBatchRequest *q) {
  worker *w = c->w;
  if (q != c->bq) {
    c->bq = (Flotilla__PullSparseBatchRequest *)protobuf_c_message_unpack(
        &flotilla__pull_sparse_batch_request__descriptor, NULL, w->in.len, w->in.data);
    if (!c->bq) {
      respond_status(c, FL_ENOMEM, "pserver out of memory");
      return;
    }
  }
  hold(c, H_SBATCH);
}

/* One part's answer of a batch pull. */
typedef struct pull_part {
  Flotilla__PullSparseResponse r;
  Flotilla__Tensor v;
  int64_t shape[2];
} pull_part;

/* A batch pull answered once all of its parts are ready (held until then:
 * the condition is rechecked on progress), each part as PullSparse. */
static void batch_pull(call *c, const Flotilla__PullSparseBatchRequest *q) {
  fl_ps_core *core = c->w->s->core;
  Flotilla__PullSparseBatchResponse r = FLOTILLA__PULL_SPARSE_BATCH_RESPONSE__INIT;
  size_t n = q->n_pulls;
  pull_part *pp = NULL;
  Flotilla__PullSparseResponse **rp = NULL;
  fl_status st = batch_ready(core, q);
  if (st == FL_OK) st = part_scratch(c, n);
  if (st == FL_OK) {
    pp = calloc(n ? n : 1, sizeof *pp);
    rp = calloc(n ? n : 1, sizeof *rp);
    if (!pp || !rp) st = FL_ERR(FL_ENOMEM, "pserver: out of memory for a batch of %zu pulls", n);
  }
  for (size_t i = 0; st == FL_OK && i < n; i++) {
    flotilla__pull_sparse_response__init(&pp[i].r);
    flotilla__tensor__init(&pp[i].v);
    rp[i] = &pp[i].r;
    st = fl_ps_core_pull_sparse(core, q->pulls[i], &c->pscr[i], &c->pcap[i], &pp[i].r, &pp[i].v,
                                pp[i].shape);
  }
  r.n_pulls = n;
  r.pulls = rp;
  if (st == FL_EAGAIN) batch_hold(c, q);
  else respond_msg(c, st, &r.base);
  free(pp);
  free(rp);
}

static void h_pull_sparse_batch(call *c, ProtobufCMessage *msg) {
  batch_pull(c, (const Flotilla__PullSparseBatchRequest *)msg);
}

/* A batch push: its parts applied in order, each as PushSparse; the first
 * error stops it (the parts before stay applied: repeating the batch drops
 * them as duplicates). */
static void h_push_sparse_batch(call *c, ProtobufCMessage *msg) {
  const Flotilla__PushSparseBatchRequest *q = (const Flotilla__PushSparseBatchRequest *)msg;
  Flotilla__PushSparseBatchResponse r = FLOTILLA__PUSH_SPARSE_BATCH_RESPONSE__INIT;
  size_t n = q->n_pushes;
  Flotilla__PushSparseResponse *rs = calloc(n ? n : 1, sizeof *rs);
  Flotilla__PushSparseResponse **rp = calloc(n ? n : 1, sizeof *rp);
  fl_status st = FL_OK;
  if (!rs || !rp) st = FL_ERR(FL_ENOMEM, "pserver: out of memory for a batch of %zu pushes", n);
  for (size_t i = 0; st == FL_OK && i < n; i++) {
    flotilla__push_sparse_response__init(&rs[i]);
    rp[i] = &rs[i];
    st = fl_ps_core_push_sparse(c->w->s->core, q->pushes[i], &rs[i]);
  }
  r.n_pushes = n;
  r.pushes = rp;
  respond_msg(c, st, &r.base);
  free(rs);
  free(rp);
}

static void h_init_sparse(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__InitSparseResponse r = FLOTILLA__INIT_SPARSE_RESPONSE__INIT;
  st = fl_ps_core_init_sparse(c->w->s->core, (Flotilla__InitSparseRequest *)msg, &r);
  respond_msg(c, st, &r.base);
}

/* The page is packed (copied: the call's outbuf has no zero-copy) before
 * its memory goes. */
static void h_dump_sparse(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__DumpSparseResponse r = FLOTILLA__DUMP_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
  fl_ps_dump_buf buf = {NULL, NULL, 0, 0};
  int64_t shape[2];
  st = fl_ps_core_dump_sparse(c->w->s->core, (Flotilla__DumpSparseRequest *)msg, &buf, &r, &v,
                              shape);
  respond_msg(c, st, &r.base);
  free(buf.keys);
  free(buf.vals);
}

static void h_barrier(call *c, ProtobufCMessage *msg) {
  fl_ps_server *s = c->w->s;
  fl_ps_core *core = s->core;
  fl_status st;
  Flotilla__BarrierRequest *q = (Flotilla__BarrierRequest *)msg;
  flotilla__barrier_response__init(&c->bres);
  st = fl_ps_core_barrier_answer(core, q, &c->bres, c->bbuf);
  if (st != FL_OK && st != FL_EAGAIN) {
    respond_status(c, st, NULL);
    return;
  }
  snprintf(c->bname, sizeof c->bname, "%s", q->name);
  c->tid = q->trainer_id;
  if (st == FL_OK) answer_barrier(c, FL_OK);
  else hold(c, H_BARRIER);
}

static void h_heartbeat(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__HeartbeatResponse r = FLOTILLA__HEARTBEAT_RESPONSE__INIT;
  st = fl_ps_core_heartbeat(c->w->s->core, (Flotilla__HeartbeatRequest *)msg, &r);
  respond_msg(c, st, &r.base);
}

static void h_save_checkpoint(call *c, ProtobufCMessage *msg) {
  (void)msg; /* SaveCheckpointRequest has no field */
  fl_ps_server *s = c->w->s;
  fl_status st;
  Flotilla__SaveCheckpointResponse r = FLOTILLA__SAVE_CHECKPOINT_RESPONSE__INIT;
  char path[1024] = "";
  if (!s->o.save) {
    respond_status(c, FL_ENOTSUP, "this pserver has no checkpoint_dir");
    return;
  }
  st = s->o.save(s->o.ckpt_ctx, &r.step, path, sizeof path);
  r.path = path;
  respond_msg(c, st, &r.base);
}

static void h_load_checkpoint(call *c, ProtobufCMessage *msg) {
  fl_ps_server *s = c->w->s;
  fl_status st;
  Flotilla__LoadCheckpointResponse r = FLOTILLA__LOAD_CHECKPOINT_RESPONSE__INIT;
  if (!s->o.load) {
    respond_status(c, FL_ENOTSUP, "this pserver has no checkpoint_dir");
    return;
  }
  int64_t step = ((Flotilla__LoadCheckpointRequest *)msg)->step;
  st = s->o.load(s->o.ckpt_ctx, step, &r.step);
  if (st == FL_ENOTFOUND) {
    char why[160];
    if (step < 0) snprintf(why, sizeof why, "no checkpoint in this pserver's checkpoint_dir");
    else snprintf(why, sizeof why, "no checkpoint of step %lld in this pserver's "
                  "checkpoint_dir", (long long)step);
    respond_status(c, st, why);
    return;
  }
  respond_msg(c, st, &r.base);
}

static void h_complete(call *c, ProtobufCMessage *msg) {
  fl_status st;
  Flotilla__CompleteResponse r = FLOTILLA__COMPLETE_RESPONSE__INIT;
  st = fl_ps_core_complete(c->w->s->core, (Flotilla__CompleteRequest *)msg, &r);
  respond_msg(c, st, &r.base);
}

static void h_stats(call *c, ProtobufCMessage *msg) {
  (void)msg; /* StatsRequest has no field */
  fl_ps_server *s = c->w->s;
  fl_ps_core *core = s->core;
  fl_status st;
  Flotilla__StatsResponse r = FLOTILLA__STATS_RESPONSE__INIT;
  Flotilla__DenseParamSpec *specs, **ptrs;
  fl_ps_core_stats(core, &r);
  st = fl_ps_core_stats_layout(core, &r, &specs, &ptrs);
  respond_msg(c, st, &r.base);
  free(specs);
  free(ptrs);
}

static void h_health_check(call *c, ProtobufCMessage *msg) {
  fl_ps_server *s = c->w->s;
  Grpc__Health__V1__HealthCheckRequest *q = (Grpc__Health__V1__HealthCheckRequest *)msg;
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  if (q->service && q->service[0] && strcmp(q->service, FL_PROTO_SERVICE) != 0) {
    respond_status(c, FL_ENOTFOUND, "unknown service (\"\" or " FL_PROTO_SERVICE ")");
    return;
  }
  r.status = atomic_load(&s->not_serving) || atomic_load(&s->stopping)
                 ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  respond_msg(c, FL_OK, &r.base);
}

typedef void handler_fn(call *c, ProtobufCMessage *msg);
static handler_fn *const handlers[FL_PROTO_COUNT] = {
    [FL_PROTO_REGISTER] = h_register,
    [FL_PROTO_PUSH_DENSE] = h_push_dense,
    [FL_PROTO_PULL_DENSE] = h_pull_dense,
    [FL_PROTO_PULL_SPARSE] = h_pull_sparse,
    [FL_PROTO_PUSH_SPARSE] = h_push_sparse,
    [FL_PROTO_BARRIER] = h_barrier,
    [FL_PROTO_HEARTBEAT] = h_heartbeat,
    [FL_PROTO_SAVE_CHECKPOINT] = h_save_checkpoint,
    [FL_PROTO_LOAD_CHECKPOINT] = h_load_checkpoint,
    [FL_PROTO_COMPLETE] = h_complete,
    [FL_PROTO_STATS] = h_stats,
    [FL_PROTO_INIT_SPARSE] = h_init_sparse,
    [FL_PROTO_DUMP_SPARSE] = h_dump_sparse,
    [FL_PROTO_PULL_SPARSE_BATCH] = h_pull_sparse_batch,
    [FL_PROTO_PUSH_SPARSE_BATCH] = h_push_sparse_batch,
    [FL_PROTO_HEALTH_CHECK] = h_health_check,
};

static int served(int m) { return m >= 0 && m < FL_PROTO_COUNT && handlers[m] != NULL; }

static void on_recv(call *c, int ok) {
  worker *w = c->w;
  fl_ps_server *s = w->s;
  ProtobufCMessage *msg;
  size_t len;
  int m = c->method;

  if (!ok) return; /* cancelled before the message came */
  if (!c->recv) {
    /* The client half-closed without sending the request. */
    FL_LOGW("rejected request: %s without a request message", fl_proto_methods[m].rpc.path);
    respond_status(c, FL_EINVAL, "no request message (a unary call carries exactly one)");
    return;
  }
  len = grpc_byte_buffer_length(c->recv);
  fl_ps_core_count_bytes(s->core, len, 0);
  if (len > s->o.max_request_bytes) {
    char why[160];
    snprintf(why, sizeof why, "request of %zu bytes exceeds the limit of %zu", len,
             s->o.max_request_bytes);
    FL_LOGW("rejected request: %s", why);
    respond_status(c, FL_EINVAL, why);
    return;
  }
  if (fl_rpc_inbuf_read(&w->in, c->recv) != FL_OK) {
    respond_status(c, FL_EINVAL, "unreadable message");
    return;
  }
  msg = fl_rpc_unpack(&w->arena, fl_proto_methods[m].rpc.req, w->in.data, w->in.len);
  if (!msg) {
    FL_LOGW("rejected request: malformed %s message (%zu bytes)", fl_proto_methods[m].rpc.path,
            w->in.len);
    respond_status(c, FL_EINVAL, "malformed message");
  } else {
    handlers[m](c, msg);
  }
  fl_rpc_arena_reset(&w->arena);
}

static void on_close(call *c) {
  fl_ps_server *s = c->w->s;
  int was_held = 0;
  if (!c->cancelled) return;
  pthread_mutex_lock(&s->held_mu);
  if (c->held != H_NONE) {
    unlink_held(c);
    was_held = 1;
  }
  pthread_mutex_unlock(&s->held_mu);
  if (was_held) call_release(c); /* nobody will answer it now */
}

static void start_recv(call *c) {
  fl_ps_server *s = c->w->s;
  grpc_op op;
  int m;
  /* refs: the request's one becomes the close's; one more for recv. */
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  if (grpc_call_start_batch(c->gc, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK) {
    FL_LOGE("pserver: cannot watch a call for cancellation");
    call_release(c);
    return;
  }
  /* The metadata came with the call: a caller without the right token is
   * refused before a byte of its message is read. */
  m = fl_proto_find((const char *)GRPC_SLICE_START_PTR(c->details.method),
                    GRPC_SLICE_LENGTH(c->details.method));
  if (!served(m)) m = -1;
  if (!(m >= 0 && (fl_proto_methods[m].flags & FL_PROTO_NO_TOKEN)) &&
      !fl_rpc_token_ok(&c->md, s->o.rpc.token)) {
    FL_LOGW("rejected a call without the right token");
    respond_status(c, FL_EAUTH, "missing or wrong token");
    return;
  }
  if (m < 0) {
    respond_bb(c, GRPC_STATUS_UNIMPLEMENTED, "no such method", NULL);
    return;
  }
  c->method = m;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv;
  atomic_fetch_add(&c->refs, 1);
  if (grpc_call_start_batch(c->gc, &op, 1, &c->t_recv, NULL) != GRPC_CALL_OK) {
    FL_LOGE("pserver: cannot receive a request");
    grpc_call_cancel(c->gc, NULL);
    call_release(c);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  fl_ps_server *s = w->s;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    tag *t;
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    if (ev.tag == &s->t_shutdown) {
      atomic_store(&s->shut_notified, 1);
      maybe_shut_queues(s);
      continue;
    }
    t = ev.tag;
    switch (t->kind) {
    case K_REQ:
      if (!ev.success || atomic_load(&s->stopping)) {
        if (ev.success && t->c->gc) grpc_call_cancel(t->c->gc, NULL);
        call_release(t->c);
        break;
      }
      arm(w);
      start_recv(t->c);
      break;
    case K_RECV:
      on_recv(t->c, ev.success);
      call_release(t->c);
      break;
    case K_SEND:
      call_release(t->c);
      break;
    case K_CLOSE:
      on_close(t->c);
      call_release(t->c);
      break;
    }
  }
  return NULL;
}

/* ------------------------------------------------------------ start, stop */

static void free_workers(fl_ps_server *s) {
  for (int i = 0; i < s->nw; i++) {
    worker *w = &s->w[i];
    call *c, *n;
    if (w->cq) grpc_completion_queue_destroy(w->cq);
    for (c = w->free_list; c; c = n) {
      n = c->free_next;
      call_free(c);
    }
    fl_rpc_arena_free(&w->arena);
    fl_rpc_inbuf_free(&w->in);
    pthread_mutex_destroy(&w->free_mu);
  }
  free(s->w);
}

fl_status fl_ps_server_start(fl_ps_core *core, const fl_ps_server_opts *o, fl_ps_server **out,
                             int *port) {
  fl_ps_server *s;
  fl_status st;

  *out = NULL;
  if (o->threads < 1 || o->calls_per_thread < 1 || !o->bind_addr)
    return FL_ERR(FL_EINVAL, "pserver: bad service options");
  s = calloc(1, sizeof *s);
  if (!s) return FL_ERR(FL_ENOMEM, "pserver: out of memory");
  s->core = core;
  s->o = *o;
  if (!s->o.max_request_bytes) s->o.max_request_bytes = FL_RPC_DEFAULT_MAX_MESSAGE;
  s->held.next = s->held.prev = &s->held;
  pthread_mutex_init(&s->held_mu, NULL);
  s->t_shutdown = (tag){NULL, -1};
  s->nw = o->threads;
  s->w = calloc((size_t)s->nw, sizeof *s->w);
  if (!s->w) {
    free(s);
    return FL_ERR(FL_ENOMEM, "pserver: out of memory");
  }
  if ((st = fl_rpc_server_create(&s->o.rpc, &s->srv)) != FL_OK) goto fail;
  for (int i = 0; i < s->nw; i++) {
    worker *w = &s->w[i];
    w->s = s;
    w->idx = i;
    fl_rpc_arena_init(&w->arena);
    pthread_mutex_init(&w->free_mu, NULL);
    w->cq = grpc_completion_queue_create_for_next(NULL);
    if (!w->cq) {
      st = FL_ERR(FL_ENOMEM, "pserver: cannot create a completion queue");
      goto fail;
    }
    grpc_server_register_completion_queue(s->srv, w->cq, NULL);
  }
  if ((st = fl_rpc_server_bind(s->srv, o->bind_addr, &s->o.rpc, port)) != FL_OK) goto fail;
  grpc_server_start(s->srv);
  for (int i = 0; i < s->nw; i++)
    for (int k = 0; k < o->calls_per_thread; k++) arm(&s->w[i]);
  for (int i = 0; i < s->nw; i++) {
    if (pthread_create(&s->w[i].th, NULL, worker_main, &s->w[i]) != 0) {
      st = FL_ERR(FL_EIO, "pserver: cannot start worker thread %d", i);
      fl_ps_server_stop(s);
      return st;
    }
    s->w[i].started = 1;
  }
  *out = s;
  return FL_OK;
fail:
  if (s->srv) {
    grpc_server_shutdown_and_notify(s->srv, s->w[0].cq, &s->t_shutdown);
    grpc_server_cancel_all_calls(s->srv);
    for (int i = 0; i < s->nw; i++) {
      if (!s->w[i].cq) continue;
      grpc_completion_queue_shutdown(s->w[i].cq);
      for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->w[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE && ev.tag != &s->t_shutdown) call_release(((tag *)ev.tag)->c);
      }
    }
    grpc_server_destroy(s->srv);
  }
  free_workers(s);
  pthread_mutex_destroy(&s->held_mu);
  free(s);
  return st;
}

void fl_ps_server_not_serving(fl_ps_server *s) {
  if (s) atomic_store(&s->not_serving, 1);
}

void fl_ps_server_stop(fl_ps_server *s) {
  call *c, *next;
  if (!s) return;
  pthread_mutex_lock(&s->held_mu);
  atomic_store(&s->stopping, 1);
  for (c = s->held.next; c != &s->held; c = next) {
    next = c->next;
    unlink_held(c);
    grpc_call_cancel_with_status(c->gc, GRPC_STATUS_UNAVAILABLE, "pserver shutting down", NULL);
    call_release(c);
  }
  pthread_mutex_unlock(&s->held_mu);
  grpc_server_shutdown_and_notify(s->srv, s->w[0].cq, &s->t_shutdown);
  grpc_server_cancel_all_calls(s->srv);
  for (int i = 0; i < s->nw; i++)
    if (s->w[i].started) pthread_join(s->w[i].th, NULL);
  grpc_server_destroy(s->srv);
  free_workers(s);
  pthread_mutex_destroy(&s->held_mu);
  free(s);
}
