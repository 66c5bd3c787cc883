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
 * each incoming byte belongs, so it reads straight into the destination
 * (chunks to be added go to a chunk-sized scratch buffer first), and writes
 * go straight from the caller's buffer: no staging copies.
 *
 * The connections are made and authenticated on the libuv loop; an op's
 * bytes then move on the thread that runs the op (the worker, or the
 * caller of a blocking collective), with non-blocking send/recv on the
 * sockets' descriptors, while the loop leaves them alone (no read or write
 * of its own is active on a data connection after set-up).  That saves two
 * thread hand-offs per op and the loop's wake-ups per chunk, which is most
 * of the time of a small op.  When the descriptors have nothing to give,
 * the thread yields the core (sched_yield, so that a peer waiting for a
 * core runs first) for up to SPIN_NS, then sleeps in poll().  A failure
 * (tcp_abort, on the loop) shuts the sockets down, which wakes the poll;
 * the descriptors are closed with the other connections at teardown, so
 * they are never reused under a running op.
 * Broadcast pipelines the root's chunks along the ring; allgather is the
 * allgather phase above with the ranks' blocks as segments; barrier is an
 * allgather of one byte. */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "coll_internal.h"
#include "fl_metrics.h"

#define OPHDR 32
#define OP_MAGIC 0x4448504fu /* "OPHD" */
#define SPIN_NS 50000u /* a stalled op yields the core this long before it sleeps */

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
  int out_fd, in_fd; /* their descriptors, read once on the loop at set-up */
  /* plan of the current op (built and run by the thread that runs the op) */
  piece *init;
  size_t n_init, cap_init;
  piece *rp;
  size_t nrp, cap_rp;
  uint8_t *scratch;
  size_t cap_scratch;
  int used; /* this ring carries part of the op */
  /* progress */
  size_t s_idx;     /* next item to send: 0 header, 1..n_init own pieces, then forwards */
  size_t s_rp;      /* next received piece to consider for forwarding */
  size_t s_off;     /* bytes of the current send item already sent */
  size_t cur, got;  /* piece being received, bytes of it received */
  size_t hdr_got;
  int send_done, recv_done;
  uint8_t hdr_out[OPHDR], hdr_in[OPHDR];
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
  atomic_int dead; /* set by tcp_abort (loop thread): sockets shut down */
  /* the op in flight */
  int kind;
  uint64_t seq;
  size_t count; /* elements (allreduce) or bytes */
  fl_coll_dtype dt;
  size_t es;
  int root;
  size_t sent, received; /* payload bytes of the op, for the metrics */
  struct pollfd *pf;     /* 2 * nrings */
};

static const char *op_name(int kind) {
  return kind == OP_ALLREDUCE ? "allreduce" : kind == OP_BROADCAST ? "broadcast" : "allgather";
}

/* ------------------------------------------------------------ set-up */

static int conn_fd(coll_conn *cn) {
  uv_os_fd_t fd;
  return uv_fileno((uv_handle_t *)&cn->tcp, &fd) == 0 ? (int)fd : -1;
}

static void setup_one(tcp_state *st) {
  if (--st->setup_left == 0) coll_set_flag(st->c, &st->setup_done);
}

static void got_out(fl_coll *c, void *arg, coll_conn *cn) {
  (void)c;
  tcp_ring *r = arg;
  r->out = cn;
  cn->owner = r;
  r->out_fd = conn_fd(cn);
  setup_one(r->st);
}

static void got_in(fl_coll *c, void *arg, coll_conn *cn) {
  (void)c;
  tcp_ring *r = arg;
  r->in = cn;
  cn->owner = r;
  r->in_fd = conn_fd(cn);
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
  st->pf = calloc(2 * (size_t)st->nrings, sizeof(struct pollfd));
  if (!st->ranks || !st->rings || !st->pf) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  memcpy(st->ranks, g->ranks, (size_t)g->n * sizeof(int));
  atomic_init(&st->dead, 0);
  for (int k = 0; k < st->nrings; k++) {
    st->rings[k].st = st;
    st->rings[k].idx = k;
    st->rings[k].in_fd = st->rings[k].out_fd = -1;
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
  size_t maxred = 0;
  for (size_t i = 0; i < r->nrp; i++)
    if (r->rp[i].reduce && r->rp[i].len > maxred) maxred = r->rp[i].len;
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

typedef struct io_fail {
  int peer;
  char msg[256];
} io_fail;

static void suspect_on_loop(fl_coll *c, void *arg) {
  io_fail *f = arg;
  coll_suspect(c, f->peer, FL_ECLOSED, f->msg);
  free(f);
}

/* A socket error or EOF on the connection to `peer` (err: an errno value,
 * 0 for EOF).  After tcp_abort shut the sockets down this is the echo of
 * that failure; otherwise the peer is suspected (coll_suspect, on the
 * loop) and this thread waits for the verdict. */
static fl_status io_failed(tcp_state *st, tcp_ring *r, int peer, int err, const char *what) {
  fl_coll *c = st->c;
  if (!atomic_load(&st->dead)) {
    io_fail *f = malloc(sizeof(*f));
    if (f) {
      char nm[FL_HOST_MAX + 32];
      coll_peer_name(c, peer, nm, sizeof(nm));
      f->peer = peer;
      if (err == 0 || err == ECONNRESET || err == EPIPE)
        snprintf(f->msg, sizeof(f->msg), "%s closed the connection (process exited?)", nm);
      else
        snprintf(f->msg, sizeof(f->msg), "%s %s on ring %d: %s", what, nm, r->idx, strerror(err));
      if (coll_loop_post(c, suspect_on_loop, f) != FL_OK) {
        coll_fail(c, peer, FL_ECLOSED, 0, "%s", f->msg);
        free(f);
      }
    }
    int never = 0;
    double grace = c->timeout_s / 2.0 < 1.0 ? c->timeout_s / 2.0 : 1.0;
    coll_wait_flag(c, &never, coll_mono_ms() + (uint64_t)(grace * 1000.0) + 5000);
  }
  fl_status f = coll_failed(c);
  return f != FL_OK ? f : FL_ECLOSED;
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

/* The next bytes ring r may send: 1 with *p, *len set, 0 if none now. */
static int send_item(tcp_ring *r, uint8_t **p, size_t *len) {
  if (r->s_idx == 0) {
    *p = r->hdr_out;
    *len = OPHDR;
  } else if (r->s_idx <= r->n_init) {
    *p = r->init[r->s_idx - 1].ptr;
    *len = r->init[r->s_idx - 1].len;
  } else {
    while (r->s_rp < r->cur && !r->rp[r->s_rp].forward) r->s_rp++;
    if (r->s_rp == r->nrp) r->send_done = 1;
    if (r->s_rp >= r->cur) return 0;
    *p = r->rp[r->s_rp].ptr;
    *len = r->rp[r->s_rp].len;
  }
  *p += r->s_off;
  *len -= r->s_off;
  return 1;
}

/* Send what ring r can send without blocking; *moved set when a byte went.
 * FL_OK, or a failure status. */
static fl_status pump_send(tcp_state *st, tcp_ring *r, int *moved) {
  uint8_t *p;
  size_t len;
  while (!r->send_done && send_item(r, &p, &len)) {
    ssize_t k = send(r->out_fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return FL_OK;
      return io_failed(st, r, st->next, errno, "sending to");
    }
    *moved = 1;
    r->s_off += (size_t)k;
    st->sent += (size_t)k;
    if ((size_t)k < len) continue;
    r->s_off = 0;
    if (r->s_idx <= r->n_init)
      r->s_idx++;
    else
      r->s_rp++;
  }
  return FL_OK;
}

/* Receive what ring r can receive without blocking, adding and releasing
 * pieces for forwarding as they complete. */
static fl_status pump_recv(tcp_state *st, tcp_ring *r, int *moved) {
  while (!r->recv_done) {
    uint8_t *dst;
    size_t left;
    piece *pc = NULL;
    if (r->hdr_got < OPHDR) {
      dst = r->hdr_in + r->hdr_got;
      left = OPHDR - r->hdr_got;
    } else {
      pc = &r->rp[r->cur];
      dst = (pc->reduce ? r->scratch : pc->ptr) + r->got;
      left = pc->len - r->got;
    }
    ssize_t k = recv(r->in_fd, dst, left, MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return FL_OK;
      return io_failed(st, r, st->prev, errno, "receiving from");
    }
    if (k == 0) return io_failed(st, r, st->prev, 0, "receiving from");
    *moved = 1;
    st->received += (size_t)k;
    if (!pc) {
      r->hdr_got += (size_t)k;
      if (r->hdr_got < OPHDR) continue;
      if (!header_ok(r)) return coll_failed(st->c) != FL_OK ? coll_failed(st->c) : FL_EPROTO;
      if (r->nrp == 0) r->recv_done = 1;
      continue;
    }
    r->got += (size_t)k;
    if (r->got < pc->len) continue;
    if (pc->reduce) coll_reduce_into(st->dt, pc->ptr, r->scratch, pc->len / st->es);
    r->got = 0;
    if (++r->cur == r->nrp) r->recv_done = 1;
  }
  return FL_OK;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Move the op's bytes on this thread until every ring is done.  With no
 * progress for the rank-0 verdict's grace, name the peer this rank waits
 * on: its predecessor while something is still to be received, else its
 * successor (which does not take what is sent). */
static fl_status drive(tcp_state *st) {
  fl_coll *c = st->c;
  struct pollfd *pf = st->pf;
  uint64_t grace_ms = (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 1000;
  uint64_t last = coll_mono_ms(), idle_since = 0;
  for (;;) {
    if (atomic_load(&st->dead)) {
      fl_status f = coll_failed(c);
      return f != FL_OK ? f : FL_ECLOSED;
    }
    int moved = 0, busy = 0, np = 0, waiting_recv = 0;
    for (int k = 0; k < st->nrings; k++) {
      tcp_ring *r = &st->rings[k];
      if (!r->used) continue;
      FL_TRY(pump_recv(st, r, &moved));
      FL_TRY(pump_send(st, r, &moved));
      if (!r->recv_done) {
        pf[np++] = (struct pollfd){r->in_fd, POLLIN, 0};
        waiting_recv = 1;
      }
      uint8_t *p;
      size_t len;
      if (!r->send_done && send_item(r, &p, &len))
        pf[np++] = (struct pollfd){r->out_fd, POLLOUT, 0};
      busy |= !r->recv_done || !r->send_done;
    }
    if (!busy) return FL_OK;
    if (moved) {
      idle_since = 0;
      last = coll_mono_ms();
      continue;
    }
    /* Nothing moved: yield for a moment (the peer is likely just about to
     * send), then sleep in poll. */
    uint64_t t = now_ns();
    if (!idle_since) idle_since = t;
    if (t - idle_since < SPIN_NS) {
      sched_yield();
      continue;
    }
    if (poll(pf, (nfds_t)np, 100) > 0) {
      last = coll_mono_ms();
      continue;
    }
    fl_status f = coll_failed(c);
    if (f != FL_OK) return f;
    if (coll_mono_ms() - last < grace_ms) continue;
    char nm[FL_HOST_MAX + 32];
    int peer = waiting_recv ? st->prev : st->next;
    coll_fail(c, peer, FL_ETIMEDOUT, 0, "%s did not respond within %.1f s (%s stalled)",
              coll_peer_name(c, peer, nm, sizeof(nm)), c->timeout_s, op_name(st->kind));
    return FL_ETIMEDOUT;
  }
}

static fl_status run_op(tcp_state *st, uint8_t *buf) {
  fl_coll *c = st->c;
  st->seq++;
  if (atomic_load(&st->dead)) {
    fl_status f = coll_failed(c);
    return f != FL_OK ? f : FL_ECLOSED;
  }
  for (int k = 0; k < st->nrings; k++) {
    tcp_ring *r = &st->rings[k];
    FL_TRY(plan_ring(st, r, buf));
    r->s_idx = r->s_rp = r->s_off = r->cur = r->got = r->hdr_got = 0;
    r->send_done = r->recv_done = 0;
  }
  st->sent = st->received = 0;
  fl_status s = drive(st);
  fl_series_add(fl_metrics_std()->bytes_sent, (double)st->sent);
  fl_series_add(fl_metrics_std()->bytes_received, (double)st->received);
  return s;
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

/* Shut the sockets down (not closed: the thread running an op may still
 * hold the descriptors; they close with the other connections at
 * teardown).  A poll() on them wakes up and every send/recv fails, so the
 * op returns without touching the caller's buffer again. */
static void tcp_abort(void *vs) {
  tcp_state *st = vs;
  if (atomic_exchange(&st->dead, 1)) return;
  for (int k = 0; k < st->nrings; k++) {
    tcp_ring *r = &st->rings[k];
    if (r->in_fd >= 0) shutdown(r->in_fd, SHUT_RDWR);
    if (r->out_fd >= 0) shutdown(r->out_fd, SHUT_RDWR);
  }
}

static void tcp_destroy(void *vs) {
  tcp_state *st = vs;
  if (!st) return;
  if (st->rings)
    for (int k = 0; k < st->nrings; k++) {
      free(st->rings[k].init);
      free(st->rings[k].rp);
      free(st->rings[k].scratch);
    }
  free(st->rings);
  free(st->pf);
  free(st->ranks);
  free(st);
}

const coll_backend fl_coll_tcp_backend = {
    "tcp", tcp_init, tcp_allreduce, tcp_broadcast, tcp_allgather, tcp_barrier, tcp_abort,
    tcp_destroy, NULL};
