/* tcp.c - the tcp transport: byte streams between the members of a group
 * over TCP, and the tcp backend that runs algo.c's algorithms on them.
 *
 * Every pair of members that some algorithm makes exchange data
 * (coll_algo_peers: ring neighbours, halving-doubling partners, tree
 * parents and children) gets one full-duplex connection per channel
 * (nccl_comm_num), opened by the lower group index and claimed by the
 * higher, authenticated on the libuv loop like every data connection.
 *
 * An op's bytes then move on the thread that runs the op (the worker, or
 * the caller of a blocking collective), with non-blocking send/recv on the
 * sockets' descriptors, while the loop leaves them alone (no read or write
 * of its own is active on a data connection after set-up).  That saves two
 * thread hand-offs per op and the loop's wake-ups per chunk, which is most
 * of the time of a small op.  When the descriptors have nothing to give,
 * the thread yields the core for a moment (while recent stalls mostly
 * ended in that moment: may_spin), then sleeps in poll(), each receiving
 * descriptor set to wake it only when the bytes the op waits for are there
 * (SO_RCVLOWAT) rather than at every segment.  A failure
 * (tcp_abort, on the loop) shuts the sockets down, which wakes the poll;
 * the descriptors are closed with the other connections at teardown, so
 * they are never reused under a running op.
 *
 * Allreduce runs the algorithm the group chose (coll_tune: fixed by the
 * job, or rank 0's per-size table from the network probe); broadcast and
 * allgather run the ring; barrier is an allgather of one byte. */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "coll_internal.h"
#include "fl_metrics.h"

#define LOWAT_MAX ((size_t)256 << 10) /* bytes: well below the 4 MiB buffers */
#define SPIN_SCORE_MAX 8
#define SPIN_RETRY 16 /* with a score of 0, every 16th stall yields again */

typedef struct tcp_state tcp_state;

typedef struct tcp_slot {
  tcp_state *st;
  int peer, ch; /* group index, channel */
} tcp_slot;

struct tcp_state {
  fl_coll *c;
  int n, me, nch;
  int *ranks;
  uint32_t tag;
  int *fd;        /* n * nch descriptors, -1 where no connection */
  int *lowat;     /* n * nch: the SO_RCVLOWAT each descriptor has now */
  int spin_score; /* 0..SPIN_SCORE_MAX: recent stalls that ended while yielding */
  int slept;      /* the current stall went to sleep in poll */
  unsigned stalls;
  tcp_slot *slot; /* n * nch */
  int setup_left;
  int setup_done;
  atomic_int dead; /* set by tcp_abort (loop thread): sockets shut down */
  struct pollfd *pf;
  size_t sent, received; /* payload bytes of the op, for the metrics */
  coll_xport x;
  coll_sched *sched;
  uint64_t seq;
  int algo; /* fixed algorithm, or COLL_ALGO_AUTO: the tuning's table */
  coll_tuning tun;
};

/* ------------------------------------------------------------ set-up */

static int conn_fd(coll_conn *cn) {
  uv_os_fd_t fd;
  return uv_fileno((uv_handle_t *)&cn->tcp, &fd) == 0 ? (int)fd : -1;
}

static void got_conn(fl_coll *c, void *arg, coll_conn *cn) {
  tcp_slot *sl = arg;
  tcp_state *st = sl->st;
  cn->owner = sl;
  st->fd[sl->peer * st->nch + sl->ch] = conn_fd(cn);
  if (--st->setup_left == 0) coll_set_flag(c, &st->setup_done);
}

static void setup_on_loop(fl_coll *c, void *arg) {
  tcp_state *st = arg;
  for (int i = 0; i < st->n * st->nch; i++) {
    tcp_slot *sl = &st->slot[i];
    if (!sl->st) continue;
    if (st->me < sl->peer)
      coll_connect_data(c, st->ranks[sl->peer], st->tag, (uint32_t)sl->ch, got_conn, sl);
    else
      coll_claim_data(c, st->ranks[sl->peer], st->tag, (uint32_t)sl->ch, got_conn, sl);
  }
}

typedef struct probe {
  tcp_state *st;
  int missing; /* group index of a peer without a connection, or -1 */
  int done;
} probe;

static void probe_on_loop(fl_coll *c, void *arg) {
  probe *pb = arg;
  tcp_state *st = pb->st;
  for (int i = 0; i < st->n * st->nch && pb->missing < 0; i++)
    if (st->slot[i].st && st->fd[i] < 0) pb->missing = st->slot[i].peer;
  coll_set_flag(c, &pb->done);
}

static fl_status connect_peers(tcp_state *st) {
  fl_coll *c = st->c;
  int *peers = malloc((size_t)st->n * sizeof(int));
  if (!peers) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  int np = coll_algo_peers(st->n, st->me, peers);
  for (int i = 0; i < np; i++)
    for (int ch = 0; ch < st->nch; ch++)
      st->slot[peers[i] * st->nch + ch] = (tcp_slot){st, peers[i], ch};
  free(peers);
  if (np < 0) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  st->setup_left = np * st->nch;
  FL_TRY(coll_loop_post(c, setup_on_loop, st));
  uint64_t deadline = coll_mono_ms() + (uint64_t)(c->timeout_s * 1000.0);
  fl_status s = coll_wait_flag(c, &st->setup_done, deadline);
  if (s != FL_ETIMEDOUT) return s;
  probe pb = {st, -1, 0};
  if (coll_loop_post(c, probe_on_loop, &pb) == FL_OK)
    coll_wait_flag_only(c, &pb.done, coll_mono_ms() + 5000);
  int peer = st->ranks[pb.missing >= 0 ? pb.missing : (st->me + 1) % st->n];
  char nm[FL_HOST_MAX + 32];
  coll_fail(c, peer, FL_ETIMEDOUT, 0, "tcp: no connection with %s within %.1f s",
            coll_peer_name(c, peer, nm, sizeof(nm)), c->timeout_s);
  return FL_ETIMEDOUT;
}

/* ------------------------------------------------------------ the transport */

typedef struct io_fail {
  int peer;
  char msg[256];
} io_fail;

static void suspect_on_loop(fl_coll *c, void *arg) {
  io_fail *f = arg;
  coll_suspect(c, f->peer, FL_ECLOSED, f->msg);
  free(f);
}

/* A socket error or EOF on the connection to `peer` (a global rank; err:
 * an errno value, 0 for EOF).  After tcp_abort shut the sockets down this
 * is the echo of that failure; otherwise the peer is suspected
 * (coll_suspect, on the loop) and this thread waits for the verdict. */
static fl_status io_failed(tcp_state *st, int peer, int ch, int err, const char *what) {
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
        snprintf(f->msg, sizeof(f->msg), "%s %s on channel %d: %s", what, nm, ch, strerror(err));
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

static fl_status dead_status(tcp_state *st) {
  fl_status f = coll_failed(st->c);
  return f != FL_OK ? f : FL_ECLOSED;
}

static fl_status x_send2(void *vs, int peer, int ch, const void *a, size_t alen, const void *b,
                         size_t blen, size_t *moved) {
  tcp_state *st = vs;
  struct iovec iov[2] = {{(void *)a, alen}, {(void *)b, blen}};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
  *moved = 0;
  for (;;) {
    ssize_t k = sendmsg(st->fd[peer * st->nch + ch], &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k >= 0) {
      *moved = (size_t)k;
      st->sent += (size_t)k;
      return FL_OK;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return FL_OK;
    return io_failed(st, st->ranks[peer], ch, errno, "sending to");
  }
}

static fl_status x_send(void *vs, int peer, int ch, const void *p, size_t len, size_t *moved) {
  return x_send2(vs, peer, ch, p, len, NULL, 0, moved);
}

static fl_status x_recv(void *vs, int peer, int ch, void *p, size_t len, size_t *moved) {
  tcp_state *st = vs;
  *moved = 0;
  for (;;) {
    ssize_t k = recv(st->fd[peer * st->nch + ch], p, len, MSG_DONTWAIT);
    if (k > 0) {
      *moved = (size_t)k;
      st->received += (size_t)k;
      return FL_OK;
    }
    if (k == 0) return io_failed(st, st->ranks[peer], ch, 0, "receiving from");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return FL_OK;
    return io_failed(st, st->ranks[peer], ch, errno, "receiving from");
  }
}

/* Let a poll on descriptor k wake only once `need` bytes are there (at
 * most LOWAT_MAX): a piece comes in many segments, and each one that
 * woke this thread, on a machine with more processes than cores, cost a
 * trip through the scheduler per segment instead of one per piece.  Only
 * poll is concerned (the receives do not block).  A failed setsockopt
 * leaves the descriptor waking on any byte, as it did. */
static void set_lowat(tcp_state *st, int k, size_t need) {
  int v = need == 0 ? 1 : need > LOWAT_MAX ? (int)LOWAT_MAX : (int)need;
  if (st->lowat[k] == v) return;
  if (setsockopt(st->fd[k], SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) st->lowat[k] = v;
}

/* Whether this stall may yield the core a moment before it sleeps (an
 * adaptive spin): yes while recent stalls mostly ended during their yield
 * (two ranks on a machine with cores to spare: the bytes come within
 * microseconds, and a sleep in poll costs a wake-up each, a fifth of a
 * 64 KiB op's bus bandwidth on loopback); no once they mostly went on to
 * sleep (more processes than cores: each yield gives a time slice to
 * another process, and with 16 ranks and their link shapers on 2 cores a
 * 64 KiB halving-doubling took longer than the ring), trying again every
 * SPIN_RETRY stalls. */
static int may_spin(tcp_state *st, coll_idle *idle) {
  if (idle->since_ns == 0) { /* a new stall: score how the last one ended */
    st->spin_score += st->slept ? -1 : 1;
    if (st->spin_score < 0) st->spin_score = 0;
    if (st->spin_score > SPIN_SCORE_MAX) st->spin_score = SPIN_SCORE_MAX;
    st->slept = 0;
    st->stalls++;
  }
  coll_idle_mark(idle); /* the stall's start, which the timeout counts from */
  return st->spin_score > 0 || st->stalls % SPIN_RETRY == 0;
}

/* Nothing moved: sleep in poll until a link can move what the op needs
 * (at most 100 ms, to look at the clock).  With no progress for the
 * rank-0 verdict's grace, name the peer this rank waits on: the first it still receives
 * from, else the first that does not take what is sent. */
static fl_status x_wait(void *vs, const coll_want *w, int nw, coll_idle *idle, const char *op) {
  tcp_state *st = vs;
  if (atomic_load(&st->dead)) return dead_status(st);
  if (may_spin(st, idle) && coll_idle_spin(idle)) return FL_OK;
  st->slept = 1;
  for (int i = 0; i < nw; i++) {
    int k = w[i].peer * st->nch + w[i].ch;
    if (w[i].recv) set_lowat(st, k, w[i].need);
    st->pf[i] = (struct pollfd){st->fd[k],
                                (short)((w[i].recv ? POLLIN : 0) | (w[i].send ? POLLOUT : 0)), 0};
  }
  if (poll(st->pf, (nfds_t)nw, 100) > 0) {
    idle->last_ms = coll_mono_ms();
    return FL_OK;
  }
  return coll_idle_expired(&st->x, w, nw, idle, op, "");
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
  st->nch = c->nrings;
  st->spin_score = SPIN_SCORE_MAX;
  size_t links = (size_t)g->n * (size_t)st->nch;
  st->ranks = malloc((size_t)g->n * sizeof(int));
  st->fd = malloc(links * sizeof(int));
  st->lowat = malloc(links * sizeof(int));
  st->slot = calloc(links, sizeof(tcp_slot));
  st->pf = calloc(links, sizeof(struct pollfd));
  if (!st->ranks || !st->fd || !st->lowat || !st->slot || !st->pf)
    return FL_ERR(FL_ENOMEM, "collective: out of memory");
  memcpy(st->ranks, g->ranks, (size_t)g->n * sizeof(int));
  for (size_t i = 0; i < links; i++) {
    st->fd[i] = -1;
    st->lowat[i] = 1;
  }
  atomic_init(&st->dead, 0);
  st->x = (coll_xport){st, c, st->ranks, st->n, st->me, st->nch, c->chunk, x_send, x_recv, x_wait,
                      x_send2};
  if (st->n == 1) return FL_OK;
  FL_TRY(coll_sched_new(st->n, st->nch, &st->sched));
  FL_TRY(connect_peers(st));
  return coll_tune(&st->x, st->sched, &st->seq, &st->algo, &st->tun);
}

/* ------------------------------------------------------------ the ops */

static fl_status run_op(tcp_state *st, coll_op *a) {
  if (atomic_load(&st->dead)) return dead_status(st);
  a->seq = ++st->seq;
  st->sent = st->received = 0;
  fl_status s = coll_sched_run(st->sched, &st->x, a);
  fl_series_add(fl_metrics_std()->bytes_sent, (double)st->sent);
  fl_series_add(fl_metrics_std()->bytes_received, (double)st->received);
  return s;
}

static fl_status tcp_allreduce(void *vs, void *buf, size_t count, fl_coll_dtype dt) {
  tcp_state *st = vs;
  if (st->n == 1 || count == 0) return FL_OK;
  int algo = st->algo;
  size_t bytes = count * fl_coll_dtype_size(dt);
  if (algo == COLL_ALGO_AUTO) algo = st->tun.table[coll_table_bin(bytes)];
  coll_op a = {COLL_OP_ALLREDUCE, algo, buf, count, dt, 0, 0,
               coll_algo_seg(&st->tun.m, algo, st->n, bytes),
               coll_algo_doubling(&st->tun.m, algo, st->n, bytes)};
  return run_op(st, &a);
}

static fl_status tcp_broadcast(void *vs, void *buf, size_t bytes, int root) {
  tcp_state *st = vs;
  if (st->n == 1 || bytes == 0) return FL_OK;
  coll_op a = {COLL_OP_BROADCAST, COLL_ALGO_RING, buf, bytes, FL_COLL_F32, root, 0, 0, 0};
  return run_op(st, &a);
}

static fl_status tcp_allgather(void *vs, const void *send, size_t bytes, void *recv) {
  tcp_state *st = vs;
  uint8_t *mine = (uint8_t *)recv + (size_t)st->me * bytes;
  if (bytes && mine != send) memmove(mine, send, bytes);
  if (st->n == 1 || bytes == 0) return FL_OK;
  coll_op a = {COLL_OP_ALLGATHER, COLL_ALGO_RING, recv, bytes, FL_COLL_F32, 0, 0, 0, 0};
  return run_op(st, &a);
}

static fl_status tcp_barrier(void *vs) {
  tcp_state *st = vs;
  uint8_t one = 1, all[FL_CLUSTER_MAX_TRAINERS];
  return tcp_allgather(st, &one, 1, all);
}

static fl_status tcp_set_algorithm(void *vs, int algo) {
  tcp_state *st = vs;
  st->algo = algo;
  return FL_OK;
}

static const coll_tuning *tcp_tuning(void *vs) {
  tcp_state *st = vs;
  return st->n > 1 ? &st->tun : NULL;
}

/* Shut the sockets down (not closed: the thread running an op may still
 * hold the descriptors; they close with the other connections at
 * teardown).  A poll() on them wakes up and every send/recv fails, so the
 * op returns without touching the caller's buffer again. */
static void tcp_abort(void *vs) {
  tcp_state *st = vs;
  if (atomic_exchange(&st->dead, 1)) return;
  for (int i = 0; i < st->n * st->nch; i++)
    if (st->fd[i] >= 0) shutdown(st->fd[i], SHUT_RDWR);
}

static void tcp_destroy(void *vs) {
  tcp_state *st = vs;
  if (!st) return;
  coll_sched_free(st->sched);
  free(st->fd);
  free(st->lowat);
  free(st->slot);
  free(st->pf);
  free(st->ranks);
  free(st);
}

const coll_backend fl_coll_tcp_backend = {
    "tcp",     tcp_init,    tcp_allreduce, tcp_broadcast,     tcp_allgather, tcp_barrier,
    tcp_abort, tcp_destroy, NULL,          tcp_set_algorithm, tcp_tuning};
