/* tcp.c - the tcp backend: ring collectives over TCP on the libuv loop.
 *
 * A group of n ranks forms a ring (group order); every rank opens one
 * connection to its successor per parallel ring and accepts one from its
 * predecessor.  The buffer is split into nrings contiguous parts, one per
 * ring, and each ring runs independently on its own pair of connections.
 *
 * Allreduce on a ring (part of E elements, cut into n segments):
 *   reduce-scatter, step s = 0..n-2: send segment (p-s), receive segment
 *     (p-s-1) and add it into the buffer (received partial + local), so
 *     that after n-1 steps rank p owns the full sum of segment p+1;
 *   allgather, step s = 0..n-2: send segment (p+1-s), receive segment
 *     (p-s) straight into the buffer.
 * Segment j is therefore summed in the fixed order x_j + x_{j+1} + ... and
 * every rank ends with the bytes its owner produced: results are the same
 * on all ranks and in every run.  Each segment travels in chunks
 * (chunk_bytes), and a received chunk is forwarded as soon as it is added,
 * so the n-1 steps pipeline instead of waiting for whole segments.
 *
 * The byte stream a rank sends on a ring is: a 32-byte op header, its own
 * segment, then every received chunk it forwards.  The receiver knows where
 * each incoming byte belongs, so libuv reads straight into the destination
 * (chunks to be added go to a chunk-sized scratch buffer first), and writes
 * go straight from the caller's buffer: no staging copies.
 * Broadcast pipelines the root's chunks along the ring; allgather is the
 * allgather phase above with the ranks' blocks as segments; barrier is an
 * allgather of one byte. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"
#include "fl_metrics.h"

#define OPHDR 32
#define OP_MAGIC 0x4448504fu /* "OPHD" */

enum { OP_ALLREDUCE = 1, OP_BROADCAST = 2, OP_ALLGATHER = 3 };

typedef struct piece {
  uint8_t *ptr;
  size_t len;
  uint8_t reduce, forward;
} piece;

typedef struct tcp_state tcp_state;

typedef struct tcp_ring {
  tcp_state *st;
  int idx;
  coll_conn *out, *in;
  /* plan of the current op (built by the worker, run by the loop) */
  piece *init;
  size_t n_init, cap_init;
  piece *rp;
  size_t nrp, cap_rp;
  size_t nwrites;
  uv_write_t *wr;
  size_t cap_wr;
  uint8_t *scratch;
  size_t cap_scratch;
  int used; /* this ring carries part of the op */
  /* progress (loop thread) */
  int active;
  size_t cur, got, wr_used, w_pending;
  int recv_done;
  uint8_t hdr_out[OPHDR], hdr_in[OPHDR];
  size_t hdr_got;
} tcp_ring;

struct tcp_state {
  fl_coll *c;
  int n, me;
  int *ranks;
  uint32_t tag;
  int next, prev; /* global ranks */
  int nrings;
  tcp_ring *rings;
  int setup_left;
  int setup_done;
  int dead; /* connections closed after a failure (loop thread) */
  /* the op in flight */
  int kind;
  uint64_t seq;
  size_t count; /* elements (allreduce) or bytes */
  fl_coll_dtype dt;
  size_t es;
  int root;
  int rings_left;
  int op_finished; /* under c->mu */
  fl_status op_status;
  atomic_uint_fast64_t progress_ms;
};

static const char *op_name(int kind) {
  return kind == OP_ALLREDUCE ? "allreduce" : kind == OP_BROADCAST ? "broadcast" : "allgather";
}

/* ------------------------------------------------------------ set-up */

static void setup_one(tcp_state *st) {
  if (--st->setup_left == 0) coll_set_flag(st->c, &st->setup_done);
}

static void got_out(fl_coll *c, void *arg, coll_conn *cn) {
  (void)c;
  tcp_ring *r = arg;
  r->out = cn;
  cn->owner = r;
  setup_one(r->st);
}

static void got_in(fl_coll *c, void *arg, coll_conn *cn) {
  (void)c;
  tcp_ring *r = arg;
  r->in = cn;
  cn->owner = r;
  setup_one(r->st);
}

static void setup_on_loop(fl_coll *c, void *arg) {
  tcp_state *st = arg;
  for (int k = 0; k < st->nrings; k++) {
    coll_connect_data(c, st->next, st->tag, (uint32_t)k, got_out, &st->rings[k]);
    coll_claim_data(c, st->prev, st->tag, (uint32_t)k, got_in, &st->rings[k]);
  }
}

typedef struct probe {
  tcp_state *st;
  int missing_in, missing_out;
  int done;
} probe;

static void probe_on_loop(fl_coll *c, void *arg) {
  probe *pb = arg;
  for (int k = 0; k < pb->st->nrings; k++) {
    if (!pb->st->rings[k].in) pb->missing_in = 1;
    if (!pb->st->rings[k].out) pb->missing_out = 1;
  }
  coll_set_flag(c, &pb->done);
}

static fl_status tcp_init(fl_coll *c, const coll_group *g, void **state) {
  *state = NULL;
  tcp_state *st = calloc(1, sizeof(*st));
  if (!st) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  *state = st;
  st->c = c;
  st->n = g->n;
  st->me = g->me;
  st->tag = g->tag;
  st->nrings = c->nrings;
  st->ranks = malloc((size_t)g->n * sizeof(int));
  st->rings = calloc((size_t)st->nrings, sizeof(tcp_ring));
  if (!st->ranks || !st->rings) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  memcpy(st->ranks, g->ranks, (size_t)g->n * sizeof(int));
  atomic_init(&st->progress_ms, 0);
  for (int k = 0; k < st->nrings; k++) {
    st->rings[k].st = st;
    st->rings[k].idx = k;
  }
  if (st->n == 1) return FL_OK;
  st->next = st->ranks[(st->me + 1) % st->n];
  st->prev = st->ranks[(st->me + st->n - 1) % st->n];
  st->setup_left = 2 * st->nrings;
  FL_TRY(coll_loop_post(c, setup_on_loop, st));
  uint64_t deadline = coll_mono_ms() + (uint64_t)(c->timeout_s * 1000.0);
  fl_status s = coll_wait_flag(c, &st->setup_done, deadline);
  if (s != FL_ETIMEDOUT) return s;
  probe pb = {st, 0, 0, 0};
  if (coll_loop_post(c, probe_on_loop, &pb) == FL_OK)
    coll_wait_flag_only(c, &pb.done, coll_mono_ms() + 5000);
  char nm[FL_HOST_MAX + 32];
  if (pb.missing_in)
    coll_fail(c, st->prev, FL_ETIMEDOUT, 0, "tcp ring: no connection from %s within %.1f s",
              coll_peer_name(c, st->prev, nm, sizeof(nm)), c->timeout_s);
  else
    coll_fail(c, st->next, FL_ETIMEDOUT, 0, "tcp ring: %s did not accept a connection within %.1f s",
              coll_peer_name(c, st->next, nm, sizeof(nm)), c->timeout_s);
  return FL_ETIMEDOUT;
}

/* ---------------------------------------------------------- the plan */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * elem);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

static int add_pieces(tcp_ring *r, int initial, uint8_t *ptr, size_t len, size_t chunk,
                      int reduce, int forward) {
  for (size_t o = 0; o < len; o += chunk) {
    size_t m = len - o < chunk ? len - o : chunk;
    piece pc = {ptr + o, m, (uint8_t)reduce, (uint8_t)forward};
    if (initial) {
      if (grow((void **)&r->init, &r->cap_init, r->n_init + 1, sizeof(piece))) return -1;
      r->init[r->n_init++] = pc;
    } else {
      if (grow((void **)&r->rp, &r->cap_rp, r->nrp + 1, sizeof(piece))) return -1;
      r->rp[r->nrp++] = pc;
    }
  }
  return 0;
}

static int mod(int a, int n) {
  return ((a % n) + n) % n;
}

/* Build ring r's plan for the op in st over buf (recv for allgather). */
static fl_status plan_ring(tcp_state *st, tcp_ring *r, uint8_t *buf) {
  int n = st->n, p = st->me;
  size_t unit = st->kind == OP_ALLREDUCE ? st->es : 1;
  size_t chunk = st->c->chunk / unit;
  if (chunk == 0) chunk = 1;
  chunk *= unit;
  size_t pb, pl;
  coll_segment(st->count, st->nrings, r->idx, &pb, &pl);
  r->n_init = r->nrp = 0;
  r->used = pl > 0;
  if (!r->used) return FL_OK;
  int e = 0;
  if (st->kind == OP_ALLREDUCE) {
    size_t off, len;
    uint8_t *base = buf + pb * unit;
    coll_segment(pl, n, p, &off, &len);
    e |= add_pieces(r, 1, base + off * unit, len * unit, chunk, 0, 0);
    for (int s = 0; s <= n - 2; s++) {
      coll_segment(pl, n, mod(p - s - 1, n), &off, &len);
      e |= add_pieces(r, 0, base + off * unit, len * unit, chunk, 1, 1);
    }
    for (int s = 0; s <= n - 2; s++) {
      coll_segment(pl, n, mod(p - s, n), &off, &len);
      e |= add_pieces(r, 0, base + off * unit, len * unit, chunk, 0, s < n - 2);
    }
  } else if (st->kind == OP_ALLGATHER) {
    size_t bsz = st->count;
    e |= add_pieces(r, 1, buf + (size_t)p * bsz + pb, pl, chunk, 0, 0);
    for (int s = 0; s <= n - 2; s++)
      e |= add_pieces(r, 0, buf + (size_t)mod(p - s - 1, n) * bsz + pb, pl, chunk, 0, s < n - 2);
  } else {
    if (p == st->root)
      e |= add_pieces(r, 1, buf + pb, pl, chunk, 0, 0);
    else
      e |= add_pieces(r, 0, buf + pb, pl, chunk, 0, mod(p + 1, n) != st->root);
  }
  size_t nw = 1 + r->n_init;
  size_t maxred = 0;
  for (size_t i = 0; i < r->nrp; i++) {
    if (r->rp[i].forward) nw++;
    if (r->rp[i].reduce && r->rp[i].len > maxred) maxred = r->rp[i].len;
  }
  r->nwrites = nw;
  e |= grow((void **)&r->wr, &r->cap_wr, nw, sizeof(uv_write_t));
  e |= grow((void **)&r->scratch, &r->cap_scratch, maxred, 1);
  if (e) return FL_ERR(FL_ENOMEM, "collective: out of memory for a %s plan", op_name(st->kind));
  uint8_t *h = r->hdr_out;
  coll_put_u32(h, OP_MAGIC);
  coll_put_u32(h + 4, (uint32_t)st->kind);
  coll_put_u64(h + 8, st->seq);
  coll_put_u64(h + 16, st->count);
  coll_put_u32(h + 24, st->kind == OP_ALLREDUCE ? (uint32_t)st->dt : 0);
  coll_put_u32(h + 28, st->kind == OP_BROADCAST ? (uint32_t)st->root : 0);
  return FL_OK;
}

/* ------------------------------------------------------------ the run */

static void op_finish(tcp_state *st, fl_status s) {
  fl_coll *c = st->c;
  pthread_mutex_lock(&c->mu);
  st->op_status = s;
  st->op_finished = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void ring_check_done(tcp_ring *r) {
  if (!r->active || !r->recv_done || r->w_pending || r->wr_used < r->nwrites) return;
  r->active = 0;
  if (--r->st->rings_left == 0) op_finish(r->st, FL_OK);
}

static void conn_failed(tcp_ring *r, int peer, int uverr, const char *what) {
  tcp_state *st = r->st;
  char nm[FL_HOST_MAX + 32], msg[256];
  coll_peer_name(st->c, peer, nm, sizeof(nm));
  if (uverr == UV_EOF || uverr == UV_ECONNRESET || uverr == UV_EPIPE)
    snprintf(msg, sizeof(msg), "%s closed the connection (process exited?)", nm);
  else
    snprintf(msg, sizeof(msg), "%s %s on ring %d: %s", what, nm, r->idx, uv_strerror(uverr));
  coll_suspect(st->c, peer, FL_ECLOSED, msg);
}

static void ring_written(uv_write_t *req, int status) {
  tcp_ring *r = req->data;
  r->w_pending--;
  if (status < 0) {
    if (status != UV_ECANCELED) conn_failed(r, r->st->next, status, "sending to");
    return;
  }
  atomic_store(&r->st->progress_ms, uv_now(&r->st->c->loop));
  ring_check_done(r);
}

static void ring_send(tcp_ring *r, uint8_t *ptr, size_t len) {
  uv_write_t *w = &r->wr[r->wr_used++];
  w->data = r;
  uv_buf_t b = uv_buf_init((char *)ptr, (unsigned)len);
  int rc = uv_write(w, (uv_stream_t *)&r->out->tcp, &b, 1, ring_written);
  if (rc != 0) {
    conn_failed(r, r->st->next, rc, "sending to");
    return;
  }
  r->w_pending++;
  fl_series_add(fl_metrics_std()->bytes_sent, (double)len);
}

static void ring_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  tcp_ring *r = ((coll_conn *)h)->owner;
  if (r->hdr_got < OPHDR) {
    *b = uv_buf_init((char *)r->hdr_in + r->hdr_got, (unsigned)(OPHDR - r->hdr_got));
    return;
  }
  piece *p = &r->rp[r->cur];
  uint8_t *dst = p->reduce ? r->scratch : p->ptr;
  size_t left = p->len - r->got;
  if (left > (1u << 30)) left = 1u << 30;
  *b = uv_buf_init((char *)dst + r->got, (unsigned)left);
}

static void recv_done(tcp_ring *r) {
  if (r->st->dead) return;
  uv_read_stop((uv_stream_t *)&r->in->tcp);
  r->recv_done = 1;
  ring_check_done(r);
}

static int header_ok(tcp_ring *r) {
  tcp_state *st = r->st;
  const uint8_t *h = r->hdr_in;
  uint32_t kind = coll_get_u32(h + 4);
  uint64_t seq = coll_get_u64(h + 8), count = coll_get_u64(h + 16);
  uint32_t dt = coll_get_u32(h + 24), root = coll_get_u32(h + 28);
  if (coll_get_u32(h) == OP_MAGIC && kind == (uint32_t)st->kind && seq == st->seq &&
      count == st->count && dt == coll_get_u32(r->hdr_out + 24) &&
      root == coll_get_u32(r->hdr_out + 28))
    return 1;
  char nm[FL_HOST_MAX + 32];
  const char *k = kind == OP_ALLREDUCE ? "allreduce"
                  : kind == OP_BROADCAST ? "broadcast"
                  : kind == OP_ALLGATHER ? "allgather"
                                         : "garbage";
  coll_fail(st->c, st->prev, FL_EPROTO, 0,
            "collective mismatch: %s sent %s #%llu of %llu (dtype %u, root %u); this rank runs "
            "%s #%llu of %zu",
            coll_peer_name(st->c, st->prev, nm, sizeof(nm)), k, (unsigned long long)seq,
            (unsigned long long)count, dt, root, op_name(st->kind), (unsigned long long)st->seq,
            st->count);
  return 0;
}

static void ring_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  tcp_ring *r = ((coll_conn *)s)->owner;
  tcp_state *st = r->st;
  if (nread == 0) return;
  if (nread < 0) {
    uv_read_stop(s);
    conn_failed(r, st->prev, (int)nread, "receiving from");
    return;
  }
  atomic_store(&st->progress_ms, uv_now(&st->c->loop));
  fl_series_add(fl_metrics_std()->bytes_received, (double)nread);
  if (r->hdr_got < OPHDR) {
    r->hdr_got += (size_t)nread;
    if (r->hdr_got < OPHDR) return;
    if (!header_ok(r)) {
      uv_read_stop(s);
      return;
    }
    if (r->nrp == 0) recv_done(r);
    return;
  }
  r->got += (size_t)nread;
  piece *p = &r->rp[r->cur];
  if (r->got < p->len) return;
  if (p->reduce) coll_reduce_into(st->dt, p->ptr, r->scratch, p->len / st->es);
  r->cur++;
  r->got = 0;
  if (p->forward) ring_send(r, p->ptr, p->len);
  if (st->dead) return;
  if (r->cur == r->nrp) recv_done(r);
}

static void op_start_on_loop(fl_coll *c, void *arg) {
  (void)c;
  tcp_state *st = arg;
  if (st->dead) {
    op_finish(st, FL_ECLOSED);
    return;
  }
  atomic_store(&st->progress_ms, uv_now(&st->c->loop));
  st->rings_left = 0;
  for (int k = 0; k < st->nrings; k++) {
    tcp_ring *r = &st->rings[k];
    if (!r->used) continue;
    r->active = 1;
    st->rings_left++;
  }
  if (st->rings_left == 0) {
    op_finish(st, FL_OK);
    return;
  }
  for (int k = 0; k < st->nrings; k++) {
    tcp_ring *r = &st->rings[k];
    if (!r->used) continue;
    r->cur = r->got = r->wr_used = r->w_pending = 0;
    r->hdr_got = 0;
    r->recv_done = 0;
    ring_send(r, r->hdr_out, OPHDR);
    for (size_t i = 0; i < r->n_init && !st->dead; i++) ring_send(r, r->init[i].ptr, r->init[i].len);
    if (st->dead) return;
    int rc = uv_read_start((uv_stream_t *)&r->in->tcp, ring_alloc, ring_read);
    if (rc != 0) {
      conn_failed(r, st->prev, rc, "receiving from");
      return;
    }
  }
}

typedef struct stall {
  tcp_state *st;
  int done;
} stall;

/* The data stopped for longer than the rank-0 verdict needs to arrive:
 * name the peer this rank is waiting on. */
static void stall_on_loop(fl_coll *c, void *arg) {
  stall *sl = arg;
  tcp_state *st = sl->st;
  char nm[FL_HOST_MAX + 32];
  int peer = st->prev;
  for (int k = 0; k < st->nrings; k++)
    if (st->rings[k].active && st->rings[k].recv_done) peer = st->next;
  coll_fail(c, peer, FL_ETIMEDOUT, 0, "%s did not respond within %.1f s (%s stalled)",
            coll_peer_name(c, peer, nm, sizeof(nm)), c->timeout_s, op_name(st->kind));
  coll_set_flag(c, &sl->done);
}

static fl_status run_op(tcp_state *st, uint8_t *buf) {
  fl_coll *c = st->c;
  st->seq++;
  for (int k = 0; k < st->nrings; k++) FL_TRY(plan_ring(st, &st->rings[k], buf));
  pthread_mutex_lock(&c->mu);
  st->op_finished = 0;
  pthread_mutex_unlock(&c->mu);
  FL_TRY(coll_loop_post(c, op_start_on_loop, st));
  uint64_t grace = (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 1000;
  for (;;) {
    uint64_t last = atomic_load(&st->progress_ms);
    uint64_t now = coll_mono_ms();
    uint64_t deadline = (last && last + grace > now) ? last + grace : now + grace;
    if (coll_wait_flag_only(c, &st->op_finished, deadline) == FL_OK) break;
    if (atomic_load(&st->progress_ms) != last) continue;
    stall sl = {st, 0};
    if (coll_loop_post(c, stall_on_loop, &sl) == FL_OK)
      coll_wait_flag_only(c, &sl.done, coll_mono_ms() + 5000);
    /* The failure makes the loop release the op (tcp_abort). */
    if (coll_wait_flag_only(c, &st->op_finished, coll_mono_ms() + 10000) != FL_OK)
      return FL_ETIMEDOUT;
    break;
  }
  if (st->op_status != FL_OK) {
    fl_status f = coll_failed(c);
    return f != FL_OK ? f : st->op_status;
  }
  return FL_OK;
}

static fl_status tcp_allreduce(void *vs, void *buf, size_t count, fl_coll_dtype dt) {
  tcp_state *st = vs;
  if (st->n == 1 || count == 0) return FL_OK;
  st->kind = OP_ALLREDUCE;
  st->count = count;
  st->dt = dt;
  st->es = fl_coll_dtype_size(dt);
  st->root = 0;
  return run_op(st, buf);
}

static fl_status tcp_broadcast(void *vs, void *buf, size_t bytes, int root) {
  tcp_state *st = vs;
  if (st->n == 1 || bytes == 0) return FL_OK;
  st->kind = OP_BROADCAST;
  st->count = bytes;
  st->dt = FL_COLL_F32;
  st->es = 1;
  st->root = root;
  return run_op(st, buf);
}

static fl_status tcp_allgather(void *vs, const void *send, size_t bytes, void *recv) {
  tcp_state *st = vs;
  uint8_t *mine = (uint8_t *)recv + (size_t)st->me * bytes;
  if (bytes && mine != send) memmove(mine, send, bytes);
  if (st->n == 1 || bytes == 0) return FL_OK;
  st->kind = OP_ALLGATHER;
  st->count = bytes;
  st->dt = FL_COLL_F32;
  st->es = 1;
  st->root = 0;
  return run_op(st, recv);
}

static fl_status tcp_barrier(void *vs) {
  tcp_state *st = vs;
  uint8_t one = 1, all[FL_CLUSTER_MAX_TRAINERS];
  return tcp_allgather(st, &one, 1, all);
}

static void tcp_abort(void *vs) {
  tcp_state *st = vs;
  if (st->dead) return;
  st->dead = 1;
  for (int k = 0; k < st->nrings; k++) {
    tcp_ring *r = &st->rings[k];
    r->active = 0;
    if (r->in) coll_conn_close(r->in);
    if (r->out) coll_conn_close(r->out);
    r->in = r->out = NULL;
  }
  /* Closing cancels the queued writes; nothing touches the caller's buffer
   * after this, so the waiting worker may return. */
  op_finish(st, FL_ECLOSED);
}

static void tcp_destroy(void *vs) {
  tcp_state *st = vs;
  if (!st) return;
  if (st->rings)
    for (int k = 0; k < st->nrings; k++) {
      free(st->rings[k].init);
      free(st->rings[k].rp);
      free(st->rings[k].wr);
      free(st->rings[k].scratch);
    }
  free(st->rings);
  free(st->ranks);
  free(st);
}

const coll_backend fl_coll_tcp_backend = {
    "tcp", tcp_init, tcp_allreduce, tcp_broadcast, tcp_allgather, tcp_barrier, tcp_abort,
    tcp_destroy};
