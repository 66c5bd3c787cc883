/* coll.c - the communicator: loop and worker threads, the public calls,
 * failure handling and the control channel (heartbeats, verdicts, the
 * shutdown handshake).
 *
 * Failure detection runs on rank 0, which hears from every rank on its
 * control connection:
 *   - a control connection that closes names its rank at once ("closed the
 *     connection"), since a killed process resets its sockets;
 *   - no heartbeat for collective_timeout_s names a hung rank (SIGSTOP);
 *   - a rank that has not entered collective #s while another rank has,
 *     for collective_timeout_s, is named as not arriving (e.g. it is still
 *     computing, or has fewer steps);
 *   - a rank that says BYE while another is in a later collective.
 * Rank 0 sends its verdict (ABORT) to every rank.  Other ranks watch rank
 * 0's heartbeat, and report failures they see on data connections to rank
 * 0 (REPORT).  Data waits also time out locally, a little after the
 * verdict would have come, naming the peer they wait on. */
#include <config.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll_internal.h"
#include "fl_names.h"

enum { REQ_ALLREDUCE = 0, REQ_BROADCAST, REQ_ALLGATHER, REQ_BARRIER, REQ_SET_ALGO };

struct fl_coll_req {
  int kind;
  void *buf;
  const void *send;
  size_t count;
  fl_coll_dtype dt;
  int root;
  uint64_t seq;
  int done;
  fl_status st;
  fl_coll_req *next;
};

static const char *req_name(int kind) {
  switch (kind) {
  case REQ_ALLREDUCE: return "allreduce";
  case REQ_BROADCAST: return "broadcast";
  case REQ_ALLGATHER: return "allgather";
  case REQ_SET_ALGO: return "set_algorithm";
  default: return "barrier";
  }
}

/* -------------------------------------------------------------- time */

uint64_t coll_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t coll_now_ms(const fl_coll *c) {
  return uv_now(&((fl_coll *)c)->loop);
}

int coll_on_loop(const fl_coll *c) {
  return c->loop_running && pthread_equal(pthread_self(), c->loop_thread);
}

static void abs_deadline(uint64_t deadline_ms, struct timespec *ts) {
  /* cv uses CLOCK_MONOTONIC (see fl_coll_create). */
  ts->tv_sec = (time_t)(deadline_ms / 1000u);
  ts->tv_nsec = (long)(deadline_ms % 1000u) * 1000000L;
}

static fl_status wait_flag(fl_coll *c, const int *flag, uint64_t deadline_ms, int stop_on_fail) {
  fl_status st = FL_OK;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    if (*flag) break;
    if (stop_on_fail && c->failed) {
      st = c->fail_status;
      break;
    }
    if (coll_mono_ms() >= deadline_ms) {
      st = FL_ETIMEDOUT;
      break;
    }
    struct timespec ts;
    abs_deadline(deadline_ms, &ts);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

fl_status coll_wait_flag(fl_coll *c, const int *flag, uint64_t deadline_ms) {
  return wait_flag(c, flag, deadline_ms, 1);
}

fl_status coll_wait_flag_only(fl_coll *c, const int *flag, uint64_t deadline_ms) {
  return wait_flag(c, flag, deadline_ms, 0);
}

void coll_set_flag(fl_coll *c, int *flag) {
  pthread_mutex_lock(&c->mu);
  *flag = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

fl_status coll_failed(fl_coll *c) {
  pthread_mutex_lock(&c->mu);
  fl_status st = c->failed ? c->fail_status : FL_OK;
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* -------------------------------------------------------- loop calls */

fl_status coll_loop_post(fl_coll *c, void (*fn)(fl_coll *c, void *arg), void *arg) {
  coll_call *call = malloc(sizeof(*call));
  if (!call) return FL_ENOMEM;
  call->fn = fn;
  call->arg = arg;
  call->next = NULL;
  pthread_mutex_lock(&c->mu);
  if (c->loop_stop) {
    pthread_mutex_unlock(&c->mu);
    free(call);
    return FL_ECLOSED;
  }
  if (c->inbox_tail)
    c->inbox_tail->next = call;
  else
    c->inbox = call;
  c->inbox_tail = call;
  uv_async_send(&c->async);
  pthread_mutex_unlock(&c->mu);
  return FL_OK;
}

static void async_cb(uv_async_t *a) {
  fl_coll *c = a->data;
  pthread_mutex_lock(&c->mu);
  coll_call *list = c->inbox;
  c->inbox = c->inbox_tail = NULL;
  pthread_mutex_unlock(&c->mu);
  while (list) {
    coll_call *next = list->next;
    list->fn(c, list->arg);
    free(list);
    list = next;
  }
}

/* The engine's threads leave process signals to the application's main
 * thread, and a write to a peer that died must give EPIPE, not kill the
 * process with SIGPIPE. */
static void block_signals(void) {
  sigset_t set;
  sigemptyset(&set);
  int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaddset(&set, sigs[i]);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *loop_main(void *arg) {
  fl_coll *c = arg;
  block_signals();
  uv_run(&c->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* ---------------------------------------------------------- failures */

static void fail_on_loop(fl_coll *c, void *arg) {
  (void)arg;
  uint8_t b[8 + sizeof(c->fail_msg)];
  pthread_mutex_lock(&c->mu);
  int culprit = c->fail_culprit;
  fl_status st = c->fail_status;
  size_t ml = strlen(c->fail_msg);
  memcpy(b + 8, c->fail_msg, ml);
  void *bs = c->be_state;
  pthread_mutex_unlock(&c->mu);
  coll_put_u32(b, (uint32_t)culprit);
  coll_put_u32(b + 4, (uint32_t)st);
  if (c->rank == 0) {
    for (int r = 1; r < c->world; r++)
      if (c->ctrl && c->ctrl[r].conn)
        coll_conn_send(c->ctrl[r].conn, MSG_ABORT, b, (uint32_t)(8 + ml));
  }
  if (c->be && bs) c->be->abort(bs);
}

static void report_on_loop(fl_coll *c, void *arg) {
  (void)arg;
  uint8_t b[8 + sizeof(c->fail_msg)];
  pthread_mutex_lock(&c->mu);
  size_t ml = strlen(c->fail_msg);
  coll_put_u32(b, (uint32_t)c->fail_culprit);
  coll_put_u32(b + 4, (uint32_t)c->fail_status);
  memcpy(b + 8, c->fail_msg, ml);
  pthread_mutex_unlock(&c->mu);
  if (c->rank != 0 && c->ctrl && c->ctrl[0].conn && c->rdv_done)
    coll_conn_send(c->ctrl[0].conn, MSG_REPORT, b, (uint32_t)(8 + ml));
}

void coll_fail(fl_coll *c, int culprit, fl_status st, int from_verdict, const char *fmt, ...) {
  char msg[sizeof(c->fail_msg)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&c->mu);
  if (c->failed) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->failed = 1;
  c->fail_status = st;
  c->fail_culprit = culprit;
  memcpy(c->fail_msg, msg, sizeof(msg));
  const char *op = c->cur_op;
  uint64_t seq = c->cur_seq;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (op)
    FL_LOGE("collective rank %d: %s #%llu: %s", c->rank, op, (unsigned long long)seq, msg);
  else
    FL_LOGE("collective rank %d: %s", c->rank, msg);
  if (!from_verdict && c->rank != 0) {
    if (coll_on_loop(c))
      report_on_loop(c, NULL);
    else
      coll_loop_post(c, report_on_loop, NULL);
  }
  if (coll_on_loop(c))
    fail_on_loop(c, NULL);
  else
    coll_loop_post(c, fail_on_loop, NULL);
}

static void suspect_cb(uv_timer_t *t) {
  fl_coll *c = t->data;
  coll_fail(c, c->suspect_peer, c->suspect_st, 0, "%s", c->suspect_msg);
}

void coll_suspect(fl_coll *c, int peer, fl_status st, const char *msg) {
  if (coll_failed(c) != FL_OK || uv_is_active((uv_handle_t *)&c->suspect)) return;
  c->suspect_peer = peer;
  c->suspect_st = st;
  snprintf(c->suspect_msg, sizeof(c->suspect_msg), "%s", msg);
  double grace = c->timeout_s / 2.0 < 1.0 ? c->timeout_s / 2.0 : 1.0;
  uv_timer_start(&c->suspect, suspect_cb, (uint64_t)(grace * 1000.0), 0);
}

/* ------------------------------------------------------ control plane */

static void check_bye(fl_coll *c);

void coll_ctrl_error(coll_conn *cn, int uverr) {
  fl_coll *c = cn->c;
  int r = cn->peer_rank;
  int quiet;
  pthread_mutex_lock(&c->mu);
  quiet = c->closing || c->failed;
  pthread_mutex_unlock(&c->mu);
  if (c->rank == 0 && r > 0 && c->ctrl[r].bye) quiet = 1;
  if (r >= 0 && c->ctrl) {
    if (c->rank == 0 && r < c->world) c->ctrl[r].conn = NULL;
    if (c->rank != 0) c->ctrl[0].conn = NULL;
  }
  coll_conn_close(cn);
  if (quiet) return;
  char nm[FL_HOST_MAX + 32];
  coll_peer_name(c, r, nm, sizeof(nm));
  if (uverr == UV_EOF || uverr == UV_ECONNRESET)
    coll_fail(c, r, FL_ECLOSED, 0, "%s closed the connection (process exited?)", nm);
  else
    coll_fail(c, r, FL_ECLOSED, 0, "control connection to %s failed: %s", nm, uv_strerror(uverr));
}

void coll_ctrl_frame(coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len) {
  fl_coll *c = cn->c;
  int r = cn->peer_rank;
  char nm[FL_HOST_MAX + 32];
  coll_ctrl_peer *cp = c->rank == 0 ? &c->ctrl[r] : &c->ctrl[0];
  cp->last_seen_ms = coll_now_ms(c);
  switch (type) {
  case MSG_HB:
    if (len >= 8 && c->rank == 0) {
      uint64_t e = coll_get_u64(p);
      if (e > cp->entered) cp->lag_since_ms = 0;
      cp->entered = e;
    }
    return;
  case MSG_REPORT:
  case MSG_ABORT:
    if (len >= 8) {
      int culprit = (int)coll_get_u32(p);
      fl_status st = (fl_status)(int32_t)coll_get_u32(p + 4);
      if (st >= 0 || st < FL_ESTATE) st = FL_EREMOTE;
      coll_fail(c, culprit, st, type == MSG_ABORT, "%.*s", (int)(len - 8), (const char *)p + 8);
    }
    return;
  case MSG_BYE:
    if (c->rank == 0 && len >= 8) {
      cp->entered = coll_get_u64(p);
      cp->bye = 1;
      check_bye(c);
    }
    return;
  case MSG_BYE_ACK:
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    pthread_mutex_unlock(&c->mu);
    coll_set_flag(c, &c->bye_done);
    return;
  default:
    coll_fail(c, r, FL_EPROTO, 0, "unexpected control frame %u from %s", type,
              coll_peer_name(c, r, nm, sizeof(nm)));
  }
}

static void check_bye(fl_coll *c) {
  for (int r = 0; r < c->world; r++)
    if (!c->ctrl[r].bye) return;
  for (int r = 1; r < c->world; r++)
    if (c->ctrl[r].entered != c->ctrl[0].entered) {
      char nm[FL_HOST_MAX + 32];
      coll_fail(c, r, FL_EPROTO, 0,
                "%s ran %llu collectives but rank 0 ran %llu (ranks must run the same "
                "collectives)",
                coll_peer_name(c, r, nm, sizeof(nm)), (unsigned long long)c->ctrl[r].entered,
                (unsigned long long)c->ctrl[0].entered);
      return;
    }
  pthread_mutex_lock(&c->mu);
  c->closing = 1;
  pthread_mutex_unlock(&c->mu);
  for (int r = 1; r < c->world; r++)
    if (c->ctrl[r].conn) coll_conn_send(c->ctrl[r].conn, MSG_BYE_ACK, NULL, 0);
  coll_set_flag(c, &c->bye_done);
}

static void bye_on_loop(fl_coll *c, void *arg) {
  (void)arg;
  uint64_t e = atomic_load(&c->entered);
  if (c->rank == 0) {
    c->ctrl[0].entered = e;
    c->ctrl[0].bye = 1;
    check_bye(c);
    return;
  }
  uint8_t b[8];
  coll_put_u64(b, e);
  if (c->ctrl[0].conn) coll_conn_send(c->ctrl[0].conn, MSG_BYE, b, 8);
}

/* Rank 0's verdicts from the control channel.  A silent rank is judged
 * before a lagging one: a rank whose link is cut stops its heartbeats
 * while its ring neighbour, waiting on its data, lags; so while any rank
 * has missed two heartbeats, no rank is named for lagging, and the silent
 * one is named when its own timeout runs out. */
static void watch_root(fl_coll *c, uint64_t now, uint64_t tmo) {
  char nm[FL_HOST_MAX + 32];
  uint64_t e = atomic_load(&c->entered), maxe = e;
  uint64_t overdue = 2 * (uint64_t)(c->hb_s * 1000.0);
  int quiet = 0;
  c->ctrl[0].entered = e;
  c->ctrl[0].last_seen_ms = now;
  for (int r = 1; r < c->world; r++) {
    coll_ctrl_peer *cp = &c->ctrl[r];
    if (cp->entered > maxe) maxe = cp->entered;
    if (cp->bye) continue;
    if (now - cp->last_seen_ms > tmo) {
      coll_fail(c, r, FL_ETIMEDOUT, 0, "%s did not respond within %.1f s",
                coll_peer_name(c, r, nm, sizeof(nm)), c->timeout_s);
      return;
    }
    quiet |= now - cp->last_seen_ms > overdue;
  }
  for (int r = 0; r < c->world; r++) {
    coll_ctrl_peer *cp = &c->ctrl[r];
    if (cp->entered >= maxe) {
      cp->lag_since_ms = 0;
      continue;
    }
    if (cp->bye) {
      coll_fail(c, r, FL_EPROTO, 0,
                "%s finished after %llu collectives while other ranks are in collective #%llu",
                coll_peer_name(c, r, nm, sizeof(nm)), (unsigned long long)cp->entered,
                (unsigned long long)cp->entered + 1);
      return;
    }
    if (cp->lag_since_ms == 0) {
      cp->lag_since_ms = now;
    } else if (!quiet && now - cp->lag_since_ms > tmo) {
      coll_fail(c, r, FL_ETIMEDOUT, 0,
                "%s did not arrive at collective #%llu within %.1f s (other ranks are in it)",
                coll_peer_name(c, r, nm, sizeof(nm)), (unsigned long long)cp->entered + 1,
                c->timeout_s);
      return;
    }
  }
}

static void tick_cb(uv_timer_t *t) {
  fl_coll *c = t->data;
  uint64_t now = coll_now_ms(c);
  uint64_t tmo = (uint64_t)(c->timeout_s * 1000.0);
  char nm[FL_HOST_MAX + 32];
  pthread_mutex_lock(&c->mu);
  int stop = c->failed || c->closing;
  pthread_mutex_unlock(&c->mu);
  if (stop) return;
  coll_reap_silent(c);
  if (!c->rdv_done) {
    if (now < c->rdv_deadline_ms) return;
    if (c->rank != 0) {
      coll_fail(c, 0, FL_ETIMEDOUT, 1, "rendezvous: no rank table from %s within %.1f s",
                coll_peer_name(c, 0, nm, sizeof(nm)), c->timeout_s);
      return;
    }
    int missing = 0, first = -1;
    for (int r = 1; r < c->world; r++)
      if (!c->ctrl[r].conn) {
        if (first < 0) first = r;
        missing++;
      }
    coll_fail(c, first, FL_ETIMEDOUT, 0,
              "rendezvous: %s did not register within %.1f s (%d of %d ranks missing)",
              coll_peer_name(c, first, nm, sizeof(nm)), c->timeout_s, missing, c->world);
    return;
  }
  uint8_t b[8];
  coll_put_u64(b, atomic_load(&c->entered));
  if (c->rank == 0) {
    for (int r = 1; r < c->world; r++)
      if (c->ctrl[r].conn) coll_conn_send(c->ctrl[r].conn, MSG_HB, b, 8);
    watch_root(c, now, tmo);
    return;
  }
  if (c->ctrl[0].conn) coll_conn_send(c->ctrl[0].conn, MSG_HB, b, 8);
  if (now - c->ctrl[0].last_seen_ms > tmo)
    coll_fail(c, 0, FL_ETIMEDOUT, 0, "%s did not respond within %.1f s",
              coll_peer_name(c, 0, nm, sizeof(nm)), c->timeout_s);
}

static void shutdown_on_loop(fl_coll *c, void *arg) {
  (void)arg;
  pthread_mutex_lock(&c->mu);
  c->loop_stop = 1;
  coll_call *list = c->inbox;
  c->inbox = c->inbox_tail = NULL;
  pthread_mutex_unlock(&c->mu);
  while (list) {
    coll_call *next = list->next;
    free(list);
    list = next;
  }
  coll_close_all(c);
  uv_close((uv_handle_t *)&c->tick, NULL);
  uv_close((uv_handle_t *)&c->retry, NULL);
  uv_close((uv_handle_t *)&c->suspect, NULL);
  uv_close((uv_handle_t *)&c->async, NULL);
}

/* ------------------------------------------------------------- worker */

static fl_status run_req(fl_coll *c, fl_coll_req *q) {
  switch (q->kind) {
  case REQ_ALLREDUCE: return c->be->allreduce(c->be_state, q->buf, q->count, q->dt);
  case REQ_BROADCAST: return c->be->broadcast(c->be_state, q->buf, q->count, q->root);
  case REQ_ALLGATHER: return c->be->allgather(c->be_state, q->send, q->count, q->buf);
  case REQ_SET_ALGO:
    return c->be->set_algorithm ? c->be->set_algorithm(c->be_state, q->root) : FL_OK;
  default: return c->be->barrier(c->be_state);
  }
}

/* Run q on this thread; the caller holds the executor (c->exec_busy).
 * `queued`: q came from the queue, so its submitter waits on c->cv; a
 * blocking call run inline wakes the other threads only when a request
 * queued meanwhile waits for the executor (a wake-up per collective costs
 * the worker two context switches for nothing). */
static void execute(fl_coll *c, fl_coll_req *q, int queued) {
  pthread_mutex_lock(&c->mu);
  c->cur_op = req_name(q->kind);
  c->cur_seq = q->seq;
  fl_status st = c->failed ? c->fail_status : FL_OK;
  pthread_mutex_unlock(&c->mu);
  if (st == FL_OK) st = run_req(c, q);
  if (st != FL_OK && coll_failed(c) == FL_OK)
    coll_fail(c, c->rank, st, 0, "%s failed on rank %d: %s", req_name(q->kind), c->rank,
              fl_strerror(st));
  pthread_mutex_lock(&c->mu);
  c->cur_op = NULL;
  c->exec_busy = 0;
  q->st = st;
  q->done = 1;
  if (queued || c->q_head) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* The worker runs queued requests one at a time, in queue order. */
static void *worker_main(void *arg) {
  fl_coll *c = arg;
  block_signals();
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while ((!c->q_head || c->exec_busy) && !(c->worker_stop && !c->q_head))
      pthread_cond_wait(&c->cv, &c->mu);
    fl_coll_req *q = c->q_head;
    if (!q) {
      pthread_mutex_unlock(&c->mu);
      return NULL;
    }
    c->q_head = q->next;
    if (!c->q_head) c->q_tail = NULL;
    c->exec_busy = 1;
    pthread_mutex_unlock(&c->mu);
    execute(c, q, 1);
  }
}

/* Queue q, or, for a blocking call that finds nothing queued or running,
 * run it right here: the same order, two thread hand-offs fewer. */
static fl_status submit(fl_coll *c, fl_coll_req *q, fl_coll_req **out) {
  q->next = NULL;
  q->seq = atomic_fetch_add(&c->entered, 1) + 1;
  pthread_mutex_lock(&c->mu);
  if (!out && !c->q_head && !c->exec_busy) {
    c->exec_busy = 1;
    pthread_mutex_unlock(&c->mu);
    execute(c, q, 0);
  } else {
    if (c->q_tail)
      c->q_tail->next = q;
    else
      c->q_head = q;
    c->q_tail = q;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (out) {
      *out = q;
      return FL_OK;
    }
  }
  pthread_mutex_lock(&c->mu);
  while (!q->done) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  fl_status st = q->st;
  free(q);
  return st;
}

static fl_status wait_req(fl_coll *c, fl_coll_req *q) {
  pthread_mutex_lock(&c->mu);
  while (!q->done) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  fl_status st = q->st;
  free(q);
  return st;
}

/* ------------------------------------------------------------ create */

fl_coll_options fl_coll_options_default(void) {
  fl_coll_options o;
  memset(&o, 0, sizeof(o));
  o.rank = 0;
  o.world_size = 1;
  o.listen_fd = -1;
  o.backend = "auto";
  o.nrings = 1;
  o.timeout_s = 120.0;
  o.gpu = -1;
  return o;
}

/* The transports, in the order "auto" walks them (coll_internal.h). */
static const coll_transport transports[] = {
#ifdef FL_HAVE_NCCL
    {"nccl", &fl_coll_nccl_backend, NULL, COLL_T_OWN_HIERARCHY | COLL_T_EVEN_ALONE,
     fl_coll_nccl_make_id},
#else
    {"nccl", NULL, "this build has no NCCL (configure --with-cuda with NCCL installed)",
     COLL_T_OWN_HIERARCHY | COLL_T_EVEN_ALONE, NULL},
#endif
    {"shm", &fl_coll_shm_backend, NULL, COLL_T_AUTO | COLL_T_ONE_HOST | COLL_T_NOT_HIER_ALONE,
     NULL},
    {"tcp", &fl_coll_tcp_backend, NULL, COLL_T_AUTO, NULL},
};
#define N_TRANSPORTS (sizeof transports / sizeof transports[0])

const coll_transport *coll_transport_find(const char *name) {
  const int i = FL_ROWS_FIND(transports, name);
  return i < 0 ? NULL : &transports[i];
}

/* "tcp, shm, nccl or auto": the names a job may give, for messages (the
 * table backwards, as the message always listed them). */
static void transport_names(char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (size_t i = N_TRANSPORTS; i-- > 0 && o < cap;)
    o += (size_t)snprintf(out + o, cap - o, "%s, ", transports[i].name);
  if (o < cap) snprintf(out + o - 2, cap - o + 2, " or auto");
}

static fl_status pick_backend(fl_coll *c) {
  const coll_transport *t = NULL;
  int named = strcmp(c->backend_req, "auto") != 0;
  if (named) {
    t = coll_transport_find(c->backend_req); /* checked at create */
  } else {
    for (size_t i = 0; i < N_TRANSPORTS && !t; i++) {
      const coll_transport *r = &transports[i];
      if ((r->flags & COLL_T_AUTO) && r->be && !((r->flags & COLL_T_ONE_HOST) && c->n_nodes != 1))
        t = r;
    }
  }
  if (!t->be) return FL_ERR(FL_ENOTSUP, "collective: backend %s: %s", t->name, t->missing);
  if (c->hierarchical) {
    if (t->flags & COLL_T_OWN_HIERARCHY) {
      FL_LOGI("collective: %s builds its own hierarchy; use_hierarchical_allreduce ignored",
              t->name);
    } else {
      if (named && (t->flags & COLL_T_NOT_HIER_ALONE))
        return FL_ERR(FL_EINVAL, "collective: use_hierarchical_allreduce needs the tcp backend "
                                 "between nodes, not %s alone", t->name);
      c->be = &fl_coll_hier_backend;
      return FL_OK;
    }
  }
  if ((t->flags & COLL_T_ONE_HOST) && c->n_nodes != 1)
    return FL_ERR(FL_EINVAL, "collective: backend %s needs every rank on one host; the ranks "
                             "span %d hosts",
                  t->name, c->n_nodes);
  c->be = t->be;
  return FL_OK;
}

/* Free what create allocated.  Before the loop thread exists, the loop's
 * handles are closed by running the loop here (stage >= 2: loop and
 * handles initialised; stage 3: the listener too). */
static void free_unstarted(fl_coll *c, int stage) {
  if (stage >= 2) {
    uv_close((uv_handle_t *)&c->async, NULL);
    uv_close((uv_handle_t *)&c->tick, NULL);
    uv_close((uv_handle_t *)&c->retry, NULL);
    uv_close((uv_handle_t *)&c->suspect, NULL);
    if (stage >= 3 && !uv_is_closing((uv_handle_t *)&c->listener))
      uv_close((uv_handle_t *)&c->listener, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
  }
  if (stage >= 1) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
  }
  if (c->listen_fd >= 0) close(c->listen_fd);
  free(c->world_group.ranks);
  free(c->ctrl);
  free(c->peers);
  free(c->endpoints);
  free(c);
}

/* Stop the threads (the loop thread closes every handle), free the
 * backend, then everything else. */
static void teardown(fl_coll *c) {
  if (c->worker_running) {
    pthread_mutex_lock(&c->mu);
    c->worker_stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->worker, NULL);
    c->worker_running = 0;
  }
  if (coll_loop_post(c, shutdown_on_loop, NULL) == FL_OK) pthread_join(c->loop_thread, NULL);
  c->loop_running = 0;
  if (c->be && c->be_state) c->be->destroy(c->be_state);
  c->be_state = NULL;
  uv_loop_close(&c->loop);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->world_group.ranks);
  free(c->ctrl);
  free(c->peers);
  free(c->endpoints);
  free(c);
}

/* Allocation, locks, loop and handles, listener, rendezvous address: all
 * before any thread runs.  On failure c is freed. */
static fl_status setup_unstarted(fl_coll *c, const fl_coll_options *opt) {
  c->hb_s = c->timeout_s / 8.0;
  if (c->hb_s > 1.0) c->hb_s = 1.0;
  if (c->hb_s < 0.02) c->hb_s = 0.02;
  c->endpoints = calloc((size_t)c->world, sizeof(fl_endpoint));
  c->peers = calloc((size_t)c->world, sizeof(coll_peer));
  c->ctrl = calloc(c->rank == 0 ? (size_t)c->world : 1, sizeof(coll_ctrl_peer));
  c->world_group.ranks = calloc((size_t)c->world, sizeof(int));
  if (!c->endpoints || !c->peers || !c->ctrl || !c->world_group.ranks) {
    free_unstarted(c, 0);
    return FL_ERR(FL_ENOMEM, "collective: out of memory");
  }
  memcpy(c->endpoints, opt->endpoints, (size_t)c->world * sizeof(fl_endpoint));
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&c->mu, NULL);
  int rc = uv_loop_init(&c->loop);
  if (rc != 0) {
    free_unstarted(c, 1);
    return FL_ERR(FL_EIO, "collective: uv_loop_init: %s", uv_strerror(rc));
  }
  uv_async_init(&c->loop, &c->async, async_cb);
  c->async.data = c;
  uv_timer_init(&c->loop, &c->tick);
  c->tick.data = c;
  uv_timer_init(&c->loop, &c->retry);
  c->retry.data = c;
  uv_timer_init(&c->loop, &c->suspect);
  c->suspect.data = c;
  fl_status st = coll_listen(c); /* takes listen_fd over, even on failure */
  int stage = c->listener.loop ? 3 : 2; /* uv_tcp_init ran */
  if (st == FL_OK && c->rank != 0) st = coll_resolve_root(c);
  const coll_transport *t = coll_transport_find(c->backend_req);
  if (st == FL_OK && c->rank == 0 && t && t->be && t->make_id)
    st = t->make_id(c->blob, sizeof(c->blob), &c->blob_len);
  if (st != FL_OK) {
    free_unstarted(c, stage);
    return st;
  }
  uint64_t hb_ms = (uint64_t)(c->hb_s * 1000.0);
  uv_timer_start(&c->tick, tick_cb, hb_ms, hb_ms);
  coll_rdv_prepare(c);
  if (pthread_create(&c->loop_thread, NULL, loop_main, c) != 0) {
    free_unstarted(c, 3);
    return FL_ERR(FL_EIO, "collective: cannot start the loop thread");
  }
  c->loop_running = 1;
  return FL_OK;
}

/* Wait for the rendezvous until deadline, asking opt->give_up every
 * 100 ms when set. */
static fl_status rdv_wait(fl_coll *c, const fl_coll_options *opt, uint64_t deadline) {
  for (;;) {
    uint64_t t = coll_mono_ms() + 100;
    fl_status st = coll_wait_flag(c, &c->rdv_done, opt->give_up && t < deadline ? t : deadline);
    if (st != FL_ETIMEDOUT || coll_failed(c) != FL_OK || coll_mono_ms() >= deadline ||
        !opt->give_up)
      return st;
    if (opt->give_up(opt->give_up_arg)) {
      coll_fail(c, -1, FL_EAGAIN, 1,
                "rendezvous given up by the caller (an elastic trainer whose next world is named)");
      return FL_EAGAIN;
    }
  }
}

fl_status fl_coll_create(const fl_coll_options *opt, fl_coll **out) {
  *out = NULL;
  int fd = opt->listen_fd;
  fl_status st = FL_OK;
  const char *be = opt->backend && opt->backend[0] ? opt->backend : "auto";
  if (opt->world_size < 1 || opt->world_size > FL_CLUSTER_MAX_TRAINERS || opt->rank < 0 ||
      opt->rank >= opt->world_size) {
    st = FL_ERR(FL_EINVAL, "collective: rank %d of %d is out of range", opt->rank,
                opt->world_size);
    goto fail_fd;
  }
  const coll_transport *named = strcmp(be, "auto") ? coll_transport_find(be) : NULL;
  int algo = coll_algo_find(opt->algorithm && opt->algorithm[0] ? opt->algorithm : "auto");
  if (algo < 0) {
    st = FL_ERR(FL_EINVAL, "collective: unknown allreduce_algorithm '%s' (auto, ring, "
                           "halving_doubling, tree or hierarchical)", opt->algorithm);
    goto fail_fd;
  }
  if (opt->tuning_len > COLL_TUNING_BYTES) {
    st = FL_ERR(FL_EINVAL, "collective: the restored allreduce tuning has %zu bytes, at most %d "
                           "expected (a checkpoint of another version?)",
                opt->tuning_len, COLL_TUNING_BYTES);
    goto fail_fd;
  }
  if (strcmp(be, "auto") && !named) {
    char names[96];
    transport_names(names, sizeof names);
    st = FL_ERR(FL_EINVAL, "collective: unknown backend '%s' (%s)", be, names);
    goto fail_fd;
  }
  if (!(opt->timeout_s > 0) || opt->nrings < 1 || opt->nrings > 16 ||
      (opt->world_size > 1 && !opt->endpoints)) {
    st = FL_ERR(FL_EINVAL, "collective: bad options (timeout %.3g s, %d rings, endpoints %s)",
                opt->timeout_s, opt->nrings, opt->endpoints ? "given" : "missing");
    goto fail_fd;
  }
  size_t tl = opt->token ? strlen(opt->token) : 0;
  if (tl >= FL_TOKEN_MAX) {
    st = FL_ERR(FL_EINVAL, "collective: token longer than %d bytes", FL_TOKEN_MAX - 1);
    goto fail_fd;
  }
  fl_coll *c = calloc(1, sizeof(*c));
  if (!c) {
    st = FL_ERR(FL_ENOMEM, "collective: out of memory");
    goto fail_fd;
  }
  c->rank = opt->rank;
  c->world = opt->world_size;
  c->timeout_s = opt->timeout_s;
  c->nrings = opt->nrings;
  c->chunk = opt->chunk_bytes ? opt->chunk_bytes : FL_COLL_CHUNK;
  if (c->chunk > ((size_t)64 << 20)) c->chunk = (size_t)64 << 20;
  if (c->chunk < 64) c->chunk = 64;
  c->hierarchical = opt->hierarchical || algo == COLL_ALGO_HIER;
  c->algo_req = algo;
  if (opt->tuning_len) memcpy(c->tuning_in, opt->tuning, opt->tuning_len);
  c->tuning_in_len = opt->tuning_len;
  c->ranks_per_node = opt->ranks_per_node;
  c->gpu = opt->gpu;
  c->listen_fd = -1;
  c->give_up = opt->give_up;
  c->give_up_arg = opt->give_up_arg;
  snprintf(c->backend_req, sizeof(c->backend_req), "%s", be);
  memcpy(c->token, opt->token ? opt->token : "", tl);
  c->token_len = tl;
  atomic_init(&c->entered, 0);
  /* One rank needs no network, except to exercise NCCL on one GPU. */
  if (c->world == 1 && !(named && (named->flags & COLL_T_EVEN_ALONE))) {
    c->local = 1;
    if (fd >= 0) close(fd);
    snprintf(c->be_name, sizeof(c->be_name), "local");
    *out = c;
    return FL_OK;
  }
  c->listen_fd = fd;
  FL_TRY(setup_unstarted(c, opt));
  st = coll_loop_post(c, coll_rdv_start, NULL);
  if (st == FL_OK) {
    uint64_t deadline =
        coll_mono_ms() + (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 3000;
    st = rdv_wait(c, opt, deadline);
    if (st == FL_ETIMEDOUT) {
      coll_fail(c, -1, FL_ETIMEDOUT, 1, "rendezvous did not finish within %.1f s", c->timeout_s);
      st = FL_ETIMEDOUT;
    }
  }
  if (st == FL_OK) {
    c->world_group.n = c->world;
    c->world_group.me = c->rank;
    c->world_group.tag = 1;
    for (int r = 0; r < c->world; r++) c->world_group.ranks[r] = r;
    st = pick_backend(c);
    if (st == FL_OK) snprintf(c->be_name, sizeof(c->be_name), "%s", c->be->name);
  }
  if (st == FL_OK) {
    void *bs = NULL;
    st = c->be->init(c, &c->world_group, &bs);
    pthread_mutex_lock(&c->mu);
    c->be_state = bs;
    pthread_mutex_unlock(&c->mu);
    if (st == FL_OK) st = coll_failed(c);
  }
  if (st == FL_OK) {
    if (pthread_create(&c->worker, NULL, worker_main, c) != 0)
      st = FL_ERR(FL_EIO, "collective: cannot start the worker thread");
    else
      c->worker_running = 1;
  }
  if (st != FL_OK) {
    if (coll_failed(c) == FL_OK)
      coll_fail(c, c->rank, st, 0, "rank %d could not set up the collective engine: %s", c->rank,
                fl_strerror(st));
    teardown(c);
    return st;
  }
  FL_LOGD("collective rank %d: backend %s ready", c->rank, c->be_name);
  *out = c;
  return FL_OK;
fail_fd:
  if (fd >= 0) close(fd);
  return st;
}

void fl_coll_destroy(fl_coll *c) {
  if (!c) return;
  if (c->local) {
    free(c);
    return;
  }
  if (c->worker_running) {
    pthread_mutex_lock(&c->mu);
    c->worker_stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->worker, NULL);
    c->worker_running = 0;
  }
  if (coll_failed(c) == FL_OK && coll_loop_post(c, bye_on_loop, NULL) == FL_OK) {
    uint64_t deadline =
        coll_mono_ms() + (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 1000;
    if (coll_wait_flag(c, &c->bye_done, deadline) == FL_ETIMEDOUT)
      FL_LOGW("collective rank %d: not every rank finished within %.1f s; closing anyway",
              c->rank, c->timeout_s);
  }
  pthread_mutex_lock(&c->mu);
  c->closing = 1;
  pthread_mutex_unlock(&c->mu);
  teardown(c);
}

void fl_coll_abort(fl_coll *c, const char *reason) {
  if (!c || c->local) return;
  char nm[FL_HOST_MAX + 32];
  coll_fail(c, c->rank, FL_ECLOSED, 0, "%s aborted: %s", coll_peer_name(c, c->rank, nm, sizeof(nm)),
            reason ? reason : "(no reason given)");
}

int fl_coll_rank(const fl_coll *c) {
  return c->rank;
}

int fl_coll_world_size(const fl_coll *c) {
  return c->world;
}

const char *fl_coll_backend_name(const fl_coll *c) {
  return c->local ? "local" : c->be_name;
}

/* ------------------------------------------------------- public calls */

static fl_coll_req *req_new(int kind) {
  fl_coll_req *q = calloc(1, sizeof(*q));
  if (q) q->kind = kind;
  return q;
}

/* Check and submit an allreduce: queued with its request in *req, or,
 * when req is NULL, as a blocking call (run on this thread when nothing
 * else is queued or running). */
static fl_status allreduce_submit(fl_coll *c, void *buf, size_t count, fl_coll_dtype dt,
                                  fl_coll_req **req) {
  size_t es = fl_coll_dtype_size(dt);
  if (!c || es == 0 || (count > 0 && !buf) || count > SIZE_MAX / 8)
    return FL_ERR(FL_EINVAL, "collective: allreduce: bad arguments (count %zu, dtype %d)", count,
                  (int)dt);
  if (c->local && !req) return FL_OK;
  fl_coll_req *q = req_new(REQ_ALLREDUCE);
  if (!q) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  q->buf = buf;
  q->count = count;
  q->dt = dt;
  if (c->local) {
    q->done = 1;
    *req = q;
    return FL_OK;
  }
  return submit(c, q, req);
}

fl_status fl_coll_iallreduce(fl_coll *c, void *buf, size_t count, fl_coll_dtype dt,
                             fl_coll_req **req) {
  if (!req) return FL_ERR(FL_EINVAL, "collective: allreduce: no request to return");
  return allreduce_submit(c, buf, count, dt, req);
}

fl_status fl_coll_wait(fl_coll *c, fl_coll_req *req) {
  if (!c || !req) return FL_ERR(FL_EINVAL, "collective: wait on a NULL request");
  if (c->local) {
    fl_status st = req->st;
    free(req);
    return st;
  }
  return wait_req(c, req);
}

fl_status fl_coll_allreduce(fl_coll *c, void *buf, size_t count, fl_coll_dtype dt) {
  return allreduce_submit(c, buf, count, dt, NULL);
}

fl_status fl_coll_broadcast(fl_coll *c, void *buf, size_t bytes, int root) {
  if (!c || (bytes > 0 && !buf) || root < 0 || root >= c->world)
    return FL_ERR(FL_EINVAL, "collective: broadcast: bad arguments (root %d of %d)", root,
                  c ? c->world : 0);
  if (c->local) return FL_OK;
  fl_coll_req *q = req_new(REQ_BROADCAST);
  if (!q) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  q->buf = buf;
  q->count = bytes;
  q->root = root;
  return submit(c, q, NULL);
}

fl_status fl_coll_allgather(fl_coll *c, const void *send, size_t bytes, void *recv) {
  if (!c || (bytes > 0 && (!send || !recv)) || (c->world > 0 && bytes > SIZE_MAX / (size_t)c->world))
    return FL_ERR(FL_EINVAL, "collective: allgather: bad arguments");
  if (c->local) {
    if (bytes && send != recv) memmove(recv, send, bytes);
    return FL_OK;
  }
  fl_coll_req *q = req_new(REQ_ALLGATHER);
  if (!q) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  q->send = send;
  q->buf = recv;
  q->count = bytes;
  return submit(c, q, NULL);
}

fl_status fl_coll_barrier(fl_coll *c) {
  if (!c) return FL_ERR(FL_EINVAL, "collective: barrier on NULL");
  if (c->local) return FL_OK;
  fl_coll_req *q = req_new(REQ_BARRIER);
  if (!q) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  return submit(c, q, NULL);
}

fl_status fl_coll_set_algorithm(fl_coll *c, const char *name) {
  int algo = name ? coll_algo_find(name) : -1;
  if (!c || algo < 0 || algo == COLL_ALGO_HIER)
    return FL_ERR(FL_EINVAL, "collective: set_algorithm: '%s' is not auto, ring, "
                             "halving_doubling or tree",
                  name ? name : "(null)");
  if (c->local) return FL_OK;
  fl_coll_req *q = req_new(REQ_SET_ALGO);
  if (!q) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  q->root = algo;
  return submit(c, q, NULL);
}

fl_status fl_coll_get_tuning(const fl_coll *c, void *out, size_t cap, size_t *len) {
  const coll_tuning *t =
      c && !c->local && c->be && c->be->tuning && c->be_state ? c->be->tuning(c->be_state) : NULL;
  *len = 0;
  if (!t) return FL_OK;
  if (cap < COLL_TUNING_BYTES)
    return FL_ERR(FL_EINVAL, "collective: %zu bytes cannot hold the allreduce tuning (%d needed)",
                  cap, COLL_TUNING_BYTES);
  coll_tuning_encode(t, out);
  *len = COLL_TUNING_BYTES;
  return FL_OK;
}
