/* main.c - flotilla-pserver: one parameter server of a PServer-mode job.
 *
 *   flotilla-pserver --config job.yaml [--pserver_id=N --pservers=h:p,...
 *                    --trainers_num=N ...] [--threads=N]
 *
 * Its place in the job comes from FLOTILLA_* variables or the flags of the
 * same names (fl_cluster.h); it binds exactly its own endpoint of the
 * pserver list.  The job file gives the optimizer, the schedule, the
 * strategy (a_sync, k_steps) and the pserver section (block size, sparse
 * tables, checkpoints); cluster.heartbeat_timeout_s and rpc limits too.
 *
 * The main thread runs a libuv loop: a tick timer (heartbeat checks,
 * eviction logs, checkpoints every N steps or seconds, the end of the job)
 * and SIGTERM/SIGINT (final checkpoint, then shutdown).  The gRPC service
 * runs on its own completion-queue threads (server.c).  Checkpoints go to
 * <checkpoint_dir>/pserver-<id>/ckpt-<step>.flc, each with the run's
 * identity (fl_identity.h); at start the newest valid one there is loaded
 * when it is this run's (a restart) or --resume is given; another run's
 * makes the pserver refuse to start (exit 2), unless --fresh moves them
 * aside.  A checkpoint that cannot be written (full disk)
 * leaves the previous one intact; the daemon says which step stays and goes
 * on serving, trying again at the next interval.  The process exits 0 after
 * a clean shutdown: every trainer completed (or died), or a signal; 1 when
 * the checkpoint at shutdown could not be written. */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "fl_args.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_identity.h"
#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_notify.h"
#include "fl_proc.h"
#include "fl_ps.h"
#include "health.pb-c.h"

typedef struct app {
  fl_job job;
  fl_cluster cl;
  fl_ps_core *core;
  fl_ps_server *srv;
  char dir[FL_JOB_PATH_MAX + 32];
  pthread_mutex_t ckpt_mu;
  int64_t last_step;  /* step of the last checkpoint attempt */
  int64_t saved_step; /* step of the newest checkpoint on disk, -1: none */
  fl_status final_st; /* of the checkpoint at shutdown */
  uint64_t last_pushes;
  double last_time;
  uv_loop_t loop;
  uv_timer_t tick;
  uv_signal_t sig_term, sig_int;
  uv_async_t gate_async; /* the core's gate hook wakes the loop (gate_check) */
  int gated;             /* sync + checkpoint_interval_steps: checkpoints at gated steps */
  int stopping;
  int incomplete;     /* ended without every trainer: exit 1 */
  int draining;       /* a signal: waiting for the step in flight (sync) */
  double drain_until, drain_limit, quiet_since;
  uint64_t drain_pushes;
  const char *drain_why;
  int files_short;    /* ran out of file descriptors (logged once) */
  double files_checked;
  fl_metrics_server *metrics;
  fl_series *m_init_rows, *m_padding; /* sparse rows counters of /metrics */
  uint64_t last_init_rows, last_padding;
} app;

static void usage(FILE *out) {
  fprintf(out,
          "usage: flotilla-pserver --config=JOB.yaml [flags]\n"
          "  --config=PATH      job file (optimizer, strategy, pserver section)\n"
          "  --threads=N        completion-queue threads (default 2; 1 for a job of one\n"
          "                     trainer, whose calls seldom overlap)\n"
          "  --max_request_bytes=N  larger requests get INVALID_ARGUMENT (default 256 MiB)\n"
          "  --max_dense_elements=N  most dense floats this server holds (default 2^32,\n"
          "                     16 GiB as fp32); a Register declaring a layout that puts\n"
          "                     more here, or more than this host's memory, is refused\n"
          "  --metrics_addr=A   serve Prometheus /metrics on host:port (default: the\n"
          "                     job's cluster.metrics_addr; none: no endpoint)\n"
          "  --health_check=HOST:PORT  do not serve: ask the pserver there for the\n"
          "                     standard health check (grpc.health.v1.Health/Check, no\n"
          "                     token needed; with --config, its cluster.tls settings);\n"
          "                     print the answer, exit 0 when SERVING, else 1\n"
          "  --resume           continue from the newest checkpoint in the checkpoint\n"
          "                     directory even when another run wrote it\n"
          "  --fresh            move the checkpoints of another run aside (into\n"
          "                     <dir>/old-<time>/) and start from scratch\n"
          "  FLOTILLA_RUN_ID    this run's id (flotilla-run sets it); without it one is\n"
          "                     derived from the job and the cluster\n"
          "  --version          the version and the features of this build\n"
          "  --help             this text\n"
          "cluster flags (or FLOTILLA_* variables):\n");
  fl_cluster_print_flag_help(out);
}

static fl_status mkdir_p(const char *path) {
  char tmp[FL_JOB_PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
      return FL_ERR(FL_EIO, "cannot create directory %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return FL_ERR(FL_EIO, "cannot create directory %s: %s", tmp, strerror(errno));
  return FL_OK;
}

/* Write a checkpoint now (any thread; serialized). */
static fl_status save(app *a, const char *why, int64_t *step_out, char *path_out, size_t cap) {
  char path[FL_JOB_PATH_MAX + 64];
  Flotilla__StatsResponse stats = FLOTILLA__STATS_RESPONSE__INIT;
  int64_t step, saved;
  fl_status st;

  if (!a->dir[0]) return FL_ENOTSUP;
  pthread_mutex_lock(&a->ckpt_mu);
  fl_ps_core_stats(a->core, &stats);
  step = fl_ps_core_step(a->core);
  /* Named after the step it holds, which training may have moved past
   * `step` while the blocks were copied. */
  st = fl_ps_core_save_dir(a->core, a->dir, &saved, path, sizeof path);
  if (st == FL_OK) step = saved;
  /* A failed save (full disk, I/O error: the cause is logged where it
   * happened) leaves the previous checkpoint as it was; the next interval
   * tries again rather than every tick. */
  a->last_step = step;
  a->last_pushes = stats.pushes;
  a->last_time = fl_ps_now();
  if (st == FL_OK) {
    int keep = a->job.train.checkpoint_keep > 0 ? a->job.train.checkpoint_keep : 3;
    fl_ckpt_dir_prune(a->dir, keep);
    a->saved_step = step;
    FL_LOGI("checkpoint of step %" PRId64 " written to %s (%s)", step, path, why);
    fl_series_add(fl_metrics_std()->checkpoints, 1);
    if (step_out) *step_out = step;
    if (path_out) snprintf(path_out, cap, "%s", path);
  } else if (a->saved_step >= 0) {
    FL_LOGW("checkpoint of step %" PRId64 " (%s) not written; the newest checkpoint stays that "
            "of step %" PRId64 " in %s", step, why, a->saved_step, a->dir);
  } else {
    FL_LOGW("checkpoint of step %" PRId64 " (%s) not written; %s holds no checkpoint of this run",
            step, why, a->dir);
  }
  pthread_mutex_unlock(&a->ckpt_mu);
  return st;
}

static fl_status rpc_save(void *ctx, int64_t *step, char *path, size_t cap) {
  return save(ctx, "on request", step, path, cap);
}

static fl_status rpc_load(void *ctx, int64_t step, int64_t *loaded) {
  app *a = ctx;
  fl_ckpt *ck = NULL;
  char path[FL_JOB_PATH_MAX + 64];
  fl_status st;

  pthread_mutex_lock(&a->ckpt_mu);
  if (step < 0) {
    int64_t deltas;
    st = fl_ckpt_dir_load_latest(a->dir, &ck, &step);
    if (st == FL_ENOTFOUND) FL_LOGE("load on request: no checkpoint in %s", a->dir);
    snprintf(path, sizeof path, "%s/ckpt-%" PRId64 ".flc", a->dir, step);
    if (st == FL_OK) st = fl_ps_core_load_chain(a->core, ck, path, a->dir, &deltas);
  } else {
    struct stat sb;
    st = fl_ckpt_dir_path(a->dir, step, path, sizeof path);
    if (st == FL_OK && stat(path, &sb) != 0 && errno == ENOENT) {
      FL_LOGW("load on request: no checkpoint of step %" PRId64 " (%s)", step, path);
      st = FL_ENOTFOUND;
    }
    if (st == FL_OK) st = fl_ckpt_load(path, &ck);
    if (st == FL_OK) st = fl_ps_core_load(a->core, ck, path);
  }
  if (st == FL_OK) *loaded = fl_ps_core_step(a->core);
  fl_ckpt_free(ck);
  pthread_mutex_unlock(&a->ckpt_mu);
  return st;
}

/* --health-check: one Check call to addr (TLS settings from job, which may
 * be NULL); prints the answer.  Returns the exit status: 0 SERVING, else 1. */
static int health_check(const char *addr, const fl_job *job) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  Grpc__Health__V1__HealthCheckResponse *resp;
  fl_rpc_opts o;
  grpc_channel *ch = NULL;
  fl_rpc_outbuf *ob = NULL;
  fl_rpc_inbuf in = {0};
  fl_rpc_arena arena;
  grpc_status_code code;
  char details[256];
  int rc = 1;

  memset(&o, 0, sizeof o);
  if (job) {
    o.tls_ca = job->cluster.tls.ca;
    if (job->cluster.tls.mutual) {
      o.tls_cert = job->cluster.tls.cert;
      o.tls_key = job->cluster.tls.key;
    }
  }
  fl_rpc_arena_init(&arena);
  fl_rpc_init();
  if (fl_rpc_channel_create(addr, &o, &ch) != FL_OK || fl_rpc_outbuf_create(0, &ob) != FL_OK)
    goto out;
  if (fl_rpc_unary(ch, fl_proto_methods[FL_PROTO_HEALTH_CHECK].rpc.path, &req.base, 3.0, NULL,
                   ob, &in, &code, details, sizeof details) != FL_OK) {
    printf("%s: %s (%s)\n", addr, fl_rpc_code_name(code), details);
    goto out;
  }
  resp = (Grpc__Health__V1__HealthCheckResponse *)fl_rpc_unpack(
      &arena, fl_proto_methods[FL_PROTO_HEALTH_CHECK].rpc.resp, in.data, in.len);
  if (!resp) {
    printf("%s: malformed health answer\n", addr);
    goto out;
  }
  rc = resp->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING ? 0 : 1;
  printf("%s: %s\n", addr, rc == 0 ? "SERVING" : "NOT_SERVING");
out:
  fl_rpc_arena_free(&arena);
  fl_rpc_inbuf_free(&in);
  fl_rpc_outbuf_free(ob);
  if (ch) grpc_channel_destroy(ch);
  fl_rpc_shutdown();
  return rc;
}

static void shutdown_loop(app *a, const char *why) {
  if (a->stopping) return;
  a->stopping = 1;
  fl_ps_server_not_serving(a->srv); /* health checks see it at once */
  if (a->dir[0]) a->final_st = save(a, why, NULL, NULL, 0);
  uv_stop(&a->loop);
}

/* Every second: descriptors in use against RLIMIT_NOFILE.  gRPC refuses
 * connections it cannot accept (EMFILE) with a line of its own; say what
 * it means, once. */
static void check_files(app *a, double now) {
  if (a->files_short || now - a->files_checked < 1.0) return;
  a->files_checked = now;
  size_t limit = fl_proc_max_files(), open = 0;
  if (limit == 0 || limit == (size_t)-1) return;
  DIR *d = opendir("/proc/self/fd");
  if (!d && errno != EMFILE) return;
  if (d) {
    while (readdir(d)) open++;
    closedir(d);
    open = open > 3 ? open - 3 : 0; /* ".", ".." and the directory's own */
    if (open + 2 < limit) return;
  } else {
    open = limit; /* not even one more */
  }
  a->files_short = 1;
  FL_LOGE("out of file descriptors: %zu open of the limit %zu (RLIMIT_NOFILE, ulimit -n): new "
          "trainer connections fail with EMFILE (Too many open files); raise the limit", open,
          limit);
}

static void drain_tick(app *a, double now);

/* Sync mode with checkpoint_interval_steps N: the checkpoints hold the
 * steps that are multiples of N, on every shard alike (a
 * checkpoint begun at whatever step the tick saw left the shards at
 * different steps, and a job killed with kill -9 could not start again).
 * The core holds every block at the gate's step (fl_ps_core_set_gate);
 * once all stand there, the checkpoint is written and the gate moves on. */
static int64_t next_gate(int64_t step, int64_t every) { return (step / every + 1) * every; }

static void gate_check(app *a) {
  if (!a->gated || a->stopping) return;
  int64_t every = a->job.pserver.checkpoint_interval_steps;
  int64_t g = fl_ps_core_gate(a->core);
  int at = fl_ps_core_at_gate(a->core);
  if (at > 0) {
    save(a, "interval_steps", NULL, NULL, 0);
    fl_ps_core_set_gate(a->core, g + every);
  } else if (at < 0) { /* a block was moved past it: no checkpoint of step g */
    int64_t step = fl_ps_core_step(a->core);
    fl_ps_core_set_gate(a->core, next_gate(step > g ? step : g, every));
  }
}

static void on_gate_async(uv_async_t *h) { gate_check(h->data); }

static void on_gate_hook(void *ctx) { uv_async_send(&((app *)ctx)->gate_async); }

/* The sparse rows counters of /metrics (the core counts, Stats says). */
static void sparse_metrics_init(app *a) {
  fl_metric *m;
  if (fl_metrics_counter(fl_metrics_default(), "flotilla_sparse_init_rows_total",
                         "Sparse rows created by InitSparse (pserver).", NULL, &m) == FL_OK)
    a->m_init_rows = fl_metric_plain(m);
  if (fl_metrics_counter(fl_metrics_default(), "flotilla_sparse_padding_dropped_total",
                         "Gradient rows of a table's padding id dropped (pserver).", NULL,
                         &m) == FL_OK)
    a->m_padding = fl_metric_plain(m);
}

static void sparse_metrics_tick(app *a, const Flotilla__StatsResponse *st) {
  fl_series_add(a->m_init_rows, (double)(st->sparse_init_rows - a->last_init_rows));
  fl_series_add(a->m_padding, (double)(st->padding_dropped - a->last_padding));
  a->last_init_rows = st->sparse_init_rows;
  a->last_padding = st->padding_dropped;
}

static void on_tick(uv_timer_t *t) {
  app *a = t->data;
  double now = fl_ps_now();
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  fl_ps_core_tick(a->core, now);
  fl_ps_core_stats(a->core, &st);
  fl_series_set(fl_metrics_std()->live_trainers, st.live_trainers);
  sparse_metrics_tick(a, &st);
  fl_ps_core_publish_tiers(a->core);
  if (a->dir[0]) {
    int64_t step = fl_ps_core_step(a->core);
    int64_t every = a->job.pserver.checkpoint_interval_steps;
    double every_s = a->job.pserver.checkpoint_interval_s;
    if (a->gated) gate_check(a);
    if (!a->gated && every > 0 && step >= a->last_step + every) {
      save(a, "interval_steps", NULL, NULL, 0);
    } else if (every_s > 0 && now - a->last_time >= every_s) {
      Flotilla__StatsResponse stats = FLOTILLA__STATS_RESPONSE__INIT;
      fl_ps_core_stats(a->core, &stats);
      if (stats.pushes != a->last_pushes) save(a, "interval_s", NULL, NULL, 0);
      else a->last_time = now;
    }
  }
  check_files(a, now);
  if (a->draining && !a->stopping) drain_tick(a, now);
  int fin = fl_ps_core_finished(a->core);
  if (fin > 0) {
    FL_LOGI("every trainer completed; shutting down");
    shutdown_loop(a, "job complete");
  } else if (fin < 0) {
    char ids[512];
    size_t n = fl_ps_core_unregistered(a->core, ids, sizeof ids);
    FL_LOGE("the job is NOT complete: %zu of %d trainers never registered (trainer %s) within "
            "heartbeat_timeout_s %.0f%s; the others completed; shutting down with exit 1", n,
            a->cl.trainers_num, ids, a->job.cluster.heartbeat_timeout_s,
            a->files_short ? " - this server ran out of file descriptors" : "");
    a->incomplete = 1;
    shutdown_loop(a, "job incomplete");
  }
}

/* Sync mode, after SIGTERM/SIGINT: the trainers (stopped by the same
 * launcher) finish the step they are in, which every shard must take
 * before its final checkpoint, or the shards' checkpoints hold different
 * steps.  So: serve on until no step is in flight here and no push or pull
 * came for DRAIN_QUIET_S, at most 2 x rpc_timeout_s or heartbeat_timeout_s + 2
 * (a trainer waiting for one that stopped first is let go once that one is
 * declared dead), and never more than DRAIN_MAX_S (below flotilla-run's
 * default --grace of 10 s, after which it would SIGKILL us before the
 * checkpoint); then checkpoint and stop.
 * A second signal stops at once. */
#define DRAIN_QUIET_S 0.5
#define DRAIN_MAX_S 8.0
static void drain_tick(app *a, double now) {
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  fl_ps_core_stats(a->core, &st);
  if (st.pushes + st.pulls != a->drain_pushes) { /* a held pull answered counts too */
    a->drain_pushes = st.pushes + st.pulls;
    a->quiet_since = now;
  }
  int settled = fl_ps_core_settled(a->core);
  /* quiet counts from the moment it settled: the held pulls a step just
   * applied lets go are answered on the service's threads */
  if (!settled) a->quiet_since = now;
  if (settled && now - a->quiet_since >= DRAIN_QUIET_S) {
    shutdown_loop(a, a->drain_why);
  } else if (now >= a->drain_until) {
    FL_LOGW("the trainers did not settle within %.0f s of the signal; checkpointing as it "
            "stands%s", a->drain_limit,
            settled ? "" : " (a step partly applied)");
    shutdown_loop(a, a->drain_why);
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  app *a = h->data;
  const char *why = signum == SIGTERM ? "SIGTERM" : "SIGINT";
  fl_notify_stopping();
  if (a->draining || fl_ps_mode_of(&a->job) != FL_PS_SYNC || !a->dir[0]) {
    FL_LOGI("%s: final checkpoint, then shutdown", why);
    shutdown_loop(a, why);
    return;
  }
  double now = fl_ps_now();
  double limit = 2 * a->job.cluster.rpc_timeout_s;
  if (a->job.cluster.heartbeat_timeout_s + 2 > limit) limit = a->job.cluster.heartbeat_timeout_s + 2;
  if (limit > DRAIN_MAX_S) limit = DRAIN_MAX_S;
  FL_LOGI("%s: finishing the step in flight (at most %.0f s), then the final checkpoint and "
          "shutdown (again to stop at once)", why, limit);
  a->draining = 1;
  a->drain_why = why;
  a->drain_limit = limit;
  a->drain_until = now + limit;
  a->quiet_since = now;
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  fl_ps_core_stats(a->core, &st);
  a->drain_pushes = st.pushes + st.pulls;
}

/* The shutdown after the loop (gRPC's included) has SHUTDOWN_DEADLINE_S:
 * past it the process exits with the status it was going to have, saying
 * why (gRPC's shutdown was seen to hang after a refused registration). */
#define SHUTDOWN_DEADLINE_S 15
static volatile sig_atomic_t g_exit_rc = 1;

static void on_shutdown_deadline(int sig) {
  static const char msg[] = "flotilla-pserver: shutdown did not finish within 15 s (gRPC "
                            "shutdown stuck); exiting without waiting for it\n";
  (void)sig;
  ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)n;
  _exit(g_exit_rc);
}

/* 1 (logged) when another process listens at addr ("host:port"): gRPC's
 * own bind failure does not say why. */
static int address_in_use(const char *addr) {
  char host[FL_HOST_MAX + 16];
  snprintf(host, sizeof host, "%s", addr);
  char *colon = strrchr(host, ':');
  if (!colon) return 0;
  *colon = '\0';
  const char *h = host;
  size_t hl = strlen(host);
  if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
    host[hl - 1] = '\0';
    h = host + 1;
  }
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (getaddrinfo(h, colon + 1, &hints, &ai) != 0 || !ai) return 0;
  int in_use = 0, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE) in_use = 1;
    close(fd);
  }
  freeaddrinfo(ai);
  if (in_use)
    FL_LOGE("cannot serve %s: address in use (another pserver, of this job or another one, "
            "listens there)", addr);
  return in_use;
}

static void close_cb(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* What the command line says. */
typedef struct cli {
  const char *config, *metrics_addr, *health_addr;
  int threads; /* --threads; 0 until setup when not given */
  size_t max_request;
  uint64_t max_dense;
  fl_ckpt_start start;
} cli_opts;

enum { O_HELP = 1, O_VERSION, O_CONFIG, O_HEALTH, O_RESUME, O_FRESH, O_METRICS, O_THREADS,
       O_MAX_REQUEST, O_MAX_DENSE };

static const fl_arg_opt k_opts[] = {
    {"help", 0, O_HELP},           {"version", 0, O_VERSION},
    {"config", 1, O_CONFIG},       {"health_check", 1, O_HEALTH},
    {"resume", 0, O_RESUME},       {"fresh", 0, O_FRESH},
    {"metrics_addr", 1, O_METRICS}, {"threads", 1, O_THREADS},
    {"max_request_bytes", 1, O_MAX_REQUEST}, {"max_dense_elements", 1, O_MAX_DENSE},
    {NULL, 0, 0}};

/* The command line (fl_args.h) into o, cluster flags into cl: -1 to go
 * on, else the exit status (0 after --help / --version, 2 on an error). */
static int parse_args(int argc, char **argv, fl_cluster *cl, cli_opts *o) {
  fl_args p = {.prog = "flotilla-pserver", .unknown_fmt = "unknown argument %s",
               .opts = k_opts, .cluster = 1, .short_help = O_HELP};
  int id;
  memset(o, 0, sizeof *o);
  o->max_request = FL_RPC_DEFAULT_MAX_MESSAGE;
  o->max_dense = FL_PS_DEFAULT_MAX_DENSE;
  o->start = FL_CKPT_START_AUTO;
  fl_args_init(&p, argc, argv);
  while ((id = fl_args_next(&p)) != FL_ARGS_END) {
    char *end;
    unsigned long long v;
    switch (id) {
    case FL_ARGS_ERROR: return 2;
    case FL_ARGS_CLUSTER:
      if (fl_cluster_set(cl, p.name, p.val) != FL_OK) return 2;
      break;
    case O_HELP: usage(stdout); return 0;
    case O_VERSION: fl_print_version(stdout, "flotilla-pserver"); return 0;
    case O_CONFIG: o->config = p.val; break;
    case O_HEALTH: o->health_addr = p.val; break;
    case O_RESUME:
    case O_FRESH: {
      fl_ckpt_start want = id == O_RESUME ? FL_CKPT_START_RESUME : FL_CKPT_START_FRESH;
      if (o->start != FL_CKPT_START_AUTO && o->start != want) {
        FL_LOGE("--resume and --fresh exclude each other");
        return 2;
      }
      o->start = want;
      break;
    }
    case O_METRICS: o->metrics_addr = p.val; break;
    case O_THREADS:
      o->threads = atoi(p.val);
      if (o->threads < 1 || o->threads > 64) {
        FL_LOGE("%s=%s: must be in [1, 64]", p.given, p.val);
        return 2;
      }
      break;
    case O_MAX_REQUEST:
      v = strtoull(p.val, &end, 10);
      if (*end || v < 1024 || v > FL_RPC_DEFAULT_MAX_MESSAGE) {
        FL_LOGE("%s=%s: must be in [1024, %u]", p.given, p.val, FL_RPC_DEFAULT_MAX_MESSAGE);
        return 2;
      }
      o->max_request = (size_t)v;
      break;
    case O_MAX_DENSE:
      v = strtoull(p.val, &end, 10);
      if (!p.val[0] || *end || v < 1 || v > (1ULL << 40)) {
        FL_LOGE("%s=%s: must be in [1, 2^40]", p.given, p.val);
        return 2;
      }
      o->max_dense = (uint64_t)v;
      break;
    }
  }
  if (fl_args_rest(&p) < argc) {
    FL_LOGE("unknown argument %s (see flotilla-pserver --help)", argv[fl_args_rest(&p)]);
    return 2;
  }
  return -1;
}

/* The process, the cluster, the command line and the job, and this
 * pserver's checkpoint directory: -1 to go on, else the exit status. */
static int setup(int argc, char **argv, app *a, cli_opts *cli, fl_run_identity *id) {
  char ctx[64];

  signal(SIGPIPE, SIG_IGN);
  if (fl_proc_init() != FL_OK) return 1; /* open-file limit, dying with flotilla-run */
  if (fl_cluster_from_env(&a->cl) != FL_OK) return 2;
  a->cl.role = FL_ROLE_PSERVER;
  {
    int rc_args = parse_args(argc, argv, &a->cl, cli);
    if (rc_args >= 0) return rc_args;
  }
  if (cli->config) {
    if (fl_job_load_file(cli->config, &a->job) != FL_OK) return 2;
  } else {
    fl_job_defaults(&a->job);
  }
  if (cli->health_addr) return health_check(cli->health_addr, cli->config ? &a->job : NULL);
  a->cl.mode = FL_MODE_PS;
  a->cl.mode_set = 1;
  if (fl_cluster_from_engines(&a->cl, FL_MODE_PS) != FL_OK) return 2;
  if (fl_cluster_validate(&a->cl, FL_MODE_PS) != FL_OK) return 2;
  if (fl_cluster_load_token(&a->cl, a->job.cluster.token_file) != FL_OK) return 2;
  if (fl_run_identity_resolve(&a->job, &a->cl, id) != FL_OK) return 2;
  /* one trainer: its calls seldom overlap (a pipelined pull beside a push
   * at most), so a second thread mostly waits, and with one thread a
   * sparse table is one lock stripe */
  if (!cli->threads) cli->threads = a->cl.trainers_num == 1 ? 1 : 2;
  snprintf(ctx, sizeof ctx, "pserver %d", a->cl.pserver_id);
  fl_log_set_context(ctx);
  {
    char ids[160];
    FL_LOGI("%s%s", fl_run_identity_str(id, ids, sizeof ids),
            id->derived ? " (no FLOTILLA_RUN_ID: the run id is derived from the job and cluster)"
                       : "");
  }
  fl_cluster_print_envs(&a->cl, stderr);
  fl_strategy_print_overview(&a->job, stderr);

  {
    const char *base =
        a->cl.checkpoint_dir[0] ? a->cl.checkpoint_dir : a->job.pserver.checkpoint_dir;
    if (base[0]) {
      snprintf(a->dir, sizeof a->dir, "%s/pserver-%d", base, a->cl.pserver_id);
      if (mkdir_p(a->dir) != FL_OK) return 1;
    }
  }
  return -1;
}

_Static_assert(FL_JOB_MAX_SPARSE_TABLES <= FL_PS_MAX_TABLE_OPTIMS,
               "every pserver.sparse_tables entry fits the core's per-table optimizers");

/* The core of this job (its options from the job, the cluster and the
 * command line). */
static fl_status make_core(app *a, const cli_opts *cli, const fl_run_identity *id) {
  fl_ps_core_opts co;

  memset(&co, 0, sizeof co);
  co.job = a->job;
  co.server_index = a->cl.pserver_id;
  co.n_servers = a->cl.n_pservers;
  co.num_trainers = a->cl.trainers_num;
  co.heartbeat_timeout_s = a->job.cluster.heartbeat_timeout_s;
  co.elastic = getenv("FLOTILLA_PS_ELASTIC") && !strcmp(getenv("FLOTILLA_PS_ELASTIC"), "1");
  co.max_dense_elements = cli->max_dense;
  co.threads = cli->threads;
  snprintf(co.run_id, sizeof co.run_id, "%s", id->run_id);
  co.job_hash = id->job_hash;
  for (int i = 0; i < a->job.pserver.n_sparse_tables; i++) { /* a model's own tables */
    const fl_job_sparse_table *t = &a->job.pserver.sparse_tables[i];
    fl_ps_table_optim *o = &co.table_optims[co.n_table_optims++];
    snprintf(o->name, sizeof o->name, "%s", t->name);
    fl_job_optimizer_to_hparams(&t->optimizer, 1, &o->hp);
    o->lr = t->optimizer.lr;
  }
  return fl_ps_core_create(&co, &a->core);
}

/* The state of the latest checkpoint of this run, if any (*rc 2 when the
 * directory is another run's). */
static fl_status resume(app *a, const cli_opts *cli, const fl_run_identity *id, int *rc) {
  fl_status st = FL_OK;

  if (a->dir[0]) {
    fl_ckpt *ck = NULL;
    int64_t step = 0;
    st = fl_ckpt_dir_claim(a->dir, id, cli->start, 1, &ck, &step);
    if (st == FL_ESTATE) *rc = 2; /* another run's: the operator decides */
    if (st == FL_OK) st = fl_ps_core_open_tier(a->core, a->dir); /* the dir is this run's */
    if (st != FL_OK) {
      fl_ckpt_free(ck);
      return st;
    }
    if (ck) {
      char path[FL_JOB_PATH_MAX + 64];
      int64_t deltas;
      fl_ckpt_dir_path(a->dir, step, path, sizeof path);
      st = fl_ps_core_load_chain(a->core, ck, path, a->dir, &deltas);
      fl_ckpt_free(ck);
      if (st != FL_OK) return st;
      a->last_step = a->saved_step = fl_ps_core_step(a->core);
      if (id->derived && cli->start == FL_CKPT_START_AUTO)
        FL_LOGW("no FLOTILLA_RUN_ID: taken as a restart of the same run (same job and "
                "endpoints), continuing from step %lld; to start a new run instead set "
                "FLOTILLA_RUN_ID or pass --fresh (moves %s's checkpoints aside)",
                (long long)a->last_step, a->dir);
    } else {
      FL_LOGI("no checkpoint in %s: starting fresh", a->dir);
    }
  } else {
    st = fl_ps_core_open_tier(a->core, a->dir); /* refused with a budget */
  }
  return st;
}

/* The service's options: address, threads, credentials, limits, the
 * checkpoint RPCs. */
static void server_opts(app *a, const cli_opts *cli, const char *bind, fl_ps_server_opts *so) {
  memset(so, 0, sizeof *so);
  so->bind_addr = bind;
  so->threads = cli->threads;
  so->calls_per_thread = 16;
  so->rpc.token = a->cl.token;
  so->rpc.tls_cert = a->job.cluster.tls.cert;
  so->rpc.tls_key = a->job.cluster.tls.key;
  so->rpc.tls_ca = a->job.cluster.tls.ca;
  so->rpc.tls_mutual = a->job.cluster.tls.mutual;
  /* gRPC's own limit sits above ours so an oversized request still gets our
   * INVALID_ARGUMENT with a reason instead of a bare RESOURCE_EXHAUSTED. */
  so->max_request_bytes = cli->max_request;
  so->rpc.max_message_bytes = FL_RPC_DEFAULT_MAX_MESSAGE + (16u << 20);
  if (a->dir[0]) {
    so->save = rpc_save;
    so->load = rpc_load;
    so->ckpt_ctx = a;
  }
}

/* Say what is served, and how safely. */
static void log_serving(app *a, const cli_opts *cli, const char *bind) {
  FL_LOGI("serving %s with %d threads: %s mode, %d trainers, %d servers, step %" PRId64
          "; %s, %s", bind, cli->threads, fl_ps_mode_name(fl_ps_mode_of(&a->job)),
          a->cl.trainers_num, a->cl.n_pservers, fl_ps_core_step(a->core),
          !a->job.cluster.tls.cert[0] ? "no TLS" : a->job.cluster.tls.mutual ? "mutual TLS" : "TLS",
          a->cl.token[0] ? "token checked on every call" : "no token");
  if (!a->cl.token[0])
    FL_LOGW("no shared token (FLOTILLA_TOKEN, FLOTILLA_TOKEN_FILE or cluster.token_file): any "
            "process that reaches %s can call this pserver", bind);
}

/* The event loop: ticks, signals, the sync gate; it runs until the drain
 * ends it, then its handles are closed. */
static void run_loop(app *a) {
  fl_notify_ready(NULL); /* serving: systemd's Type=notify start is done */
  uv_loop_init(&a->loop);
  uv_timer_init(&a->loop, &a->tick);
  a->tick.data = a;
  uv_timer_start(&a->tick, on_tick, 100, 100);
  uv_signal_init(&a->loop, &a->sig_term);
  uv_signal_init(&a->loop, &a->sig_int);
  a->sig_term.data = a->sig_int.data = a;
  uv_signal_start(&a->sig_term, on_signal, SIGTERM);
  uv_signal_start(&a->sig_int, on_signal, SIGINT);
  if (a->dir[0] && a->job.pserver.checkpoint_interval_s > 0 && a->cl.n_pservers > 1 &&
      fl_ps_mode_of(&a->job) == FL_PS_SYNC)
    FL_LOGW("pserver.checkpoint_interval_s in sync mode: the shards take those checkpoints at "
            "different steps, and a job whose shards stand at different steps does not start "
            "again from them; checkpoint_interval_steps takes them at one step on every shard");
  uv_async_init(&a->loop, &a->gate_async, on_gate_async);
  a->gate_async.data = a;
  if (a->dir[0] && a->job.pserver.checkpoint_interval_steps > 0 &&
      fl_ps_mode_of(&a->job) == FL_PS_SYNC) {
    a->gated = 1;
    FL_LOGI("sync mode: checkpoints at the steps that are multiples of "
            "checkpoint_interval_steps %" PRId64 ", the same on every shard",
            a->job.pserver.checkpoint_interval_steps);
    fl_ps_core_set_gate_hook(a->core, on_gate_hook, a);
    fl_ps_core_set_gate(a->core, next_gate(fl_ps_core_step(a->core),
                                          a->job.pserver.checkpoint_interval_steps));
  }
  uv_run(&a->loop, UV_RUN_DEFAULT);
  /* no hook may touch the loop's handles any more; nothing waits at the gate */
  fl_ps_core_set_gate_hook(a->core, NULL, NULL);
  fl_ps_core_set_gate(a->core, -1);
  uv_walk(&a->loop, close_cb, NULL);
  uv_run(&a->loop, UV_RUN_DEFAULT);
  uv_loop_close(&a->loop);
}

/* The final Stats (tests/bench/soak_ps.sh reconciles them with the
 * trainers' totals). */
static void log_totals(app *a) {
  Flotilla__StatsResponse t = FLOTILLA__STATS_RESPONSE__INIT;
  fl_ps_core_stats(a->core, &t);
  FL_LOGI("totals: step %" PRId64 ", %" PRIu64 " pushes, %" PRIu64 " pulls, %" PRIu64
          " bytes in, %" PRIu64 " bytes out, %" PRIu64 " duplicates, %" PRIu64
          " invalid, %" PRIu64 " dense updates, %" PRIu64 " sparse rows",
          t.step, t.pushes, t.pulls, t.bytes_in, t.bytes_out, t.duplicates, t.invalid,
          t.dense_updates, t.sparse_rows);
}

int main(int argc, char **argv) {
  cli_opts cli;
  app a;
  int port = 0, rc = 1;
  char bind[FL_HOST_MAX + 16];
  fl_ps_server_opts so;
  fl_run_identity id;

  memset(&a, 0, sizeof a);
  a.saved_step = -1;
  {
    int rc_setup = setup(argc, argv, &a, &cli, &id);
    if (rc_setup >= 0) return rc_setup;
  }
  pthread_mutex_init(&a.ckpt_mu, NULL);

  if (make_core(&a, &cli, &id) != FL_OK) return 1;
  if (resume(&a, &cli, &id, &rc) != FL_OK) goto out_core;
  a.last_time = fl_ps_now();

  fl_endpoint_format(&a.cl.pserver_endpoints[a.cl.pserver_id], bind, sizeof bind);
  server_opts(&a, &cli, bind, &so);
  if (address_in_use(bind)) goto out_core;
  fl_rpc_init();
  if (fl_ps_server_start(a.core, &so, &a.srv, &port) != FL_OK) goto out_rpc;
  fl_ps_core_set_progress(a.core, fl_ps_server_progress, a.srv);
  log_serving(&a, &cli, bind);

  if (!cli.metrics_addr) cli.metrics_addr = a.job.cluster.metrics_addr;
  if (!strcmp(cli.metrics_addr, "none")) cli.metrics_addr = ""; /* as --help offers */
  if (cli.metrics_addr[0]) {
    char mode[16];
    snprintf(mode, sizeof mode, "ps-%s", fl_ps_mode_name(fl_ps_mode_of(&a.job)));
    fl_metrics_std_info("pserver", a.cl.pserver_id, mode);
    sparse_metrics_init(&a);
    if (fl_metrics_serve(fl_metrics_default(), cli.metrics_addr, &a.metrics) != FL_OK)
      goto out_srv;
  }
  run_loop(&a);
  /* The job's last state could not be kept: say so in the exit status. */
  rc = a.final_st == FL_OK && !a.incomplete ? 0 : 1;
  g_exit_rc = rc;
  signal(SIGALRM, on_shutdown_deadline);
  alarm(SHUTDOWN_DEADLINE_S);

  fl_metrics_server_stop(a.metrics);
out_srv:
  fl_ps_core_set_progress(a.core, NULL, NULL);
  fl_ps_server_stop(a.srv);
  log_totals(&a); /* every call is answered */
out_rpc:
  fl_rpc_shutdown();
out_core:
  fl_ps_core_free(a.core);
  pthread_mutex_destroy(&a.ckpt_mu);
  FL_LOGI("exit %d", rc);
  return rc;
}
