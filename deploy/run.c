/* run.c - flotilla-run, Flotilla's fleetrun: start a training job's
 * trainers and pservers, on one node or on this node's share of several,
 * and supervise them with libuv.
 *
 * Each child gets its FLOTILLA_* environment (run_plan.c), its stdout and
 * stderr through one pipe that is copied to log/workerlog.N or
 * log/serverlog.N; the lowest-ranked local trainer is also streamed to the
 * terminal and its "[Epoch e, batch b]" lines drive a progress line
 * (run_progress.c).  When a process fails, the others get SIGTERM and,
 * after --grace seconds, SIGKILL; flotilla-run then says which process
 * failed first, its error line and last lines, and what became of the
 * others (run_failure.c, from every end recorded as reaped), and exits
 * non-zero.  With --max_restart N a failed trainer is restarted with
 * --resume instead (collective mode restarts every trainer, since the ring
 * needs all ranks; PS mode restarts only the failed one, the pservers keep
 * the parameters).  At the end it writes
 * log/metrics.csv and log/curve.png.
 *
 * Every child gets FLOTILLA_RUN_ID (the user's, else a fresh one per
 * invocation, kept across restarts: checkpoints of this run are resumed,
 * another run's refused unless --resume or --fresh is passed on) and
 * FLOTILLA_LAUNCHER_PID, so that it dies with flotilla-run even when this
 * process is killed with SIGKILL (fl_proc.h). */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "fl_args.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_log.h"
#include "fl_proc.h"
#include "run_internal.h"

extern char **environ;

#define LINE_MAX_BYTES 8192
#define TAIL_LINES 30

typedef struct run run;

typedef struct child {
  run *run;
  fl_run_proc *spec;
  uv_process_t proc;
  uv_pipe_t out;
  int alive;       /* process not yet reaped */
  int pipe_open;   /* pipe handle not yet closed */
  int log_fd;
  int streamed;    /* copied to the terminal, drives the progress */
  int expected_exit; /* we asked it to stop */
  int64_t exit_status;
  int term_signal;
  int done_ok;     /* exited 0 on its own */
  int sent;        /* FL_RUN_SENT_* sent to this start of it */
  int64_t log_from; /* where this start's output begins in its log */
  char line[LINE_MAX_BYTES];
  size_t line_len;
  int box_state;   /* skip_envs_box: 0 normal, 1 holding a rule line, 2 in the box */
  int box_skipped;
  char held[256];
} child;

struct run {
  uv_loop_t *loop;
  fl_run_plan *plan;
  const fl_job *job;
  child *children;
  int n_children;
  uv_signal_t sig[3];
  uv_timer_t kill_timer, restart_timer, pserver_timer;
  int closed;          /* handles closed: the loop is ending */
  int ended;           /* the loop has ended: no more progress line */
  int stopping;        /* SIGTERM sent to everybody */
  int restarting;      /* trainers being stopped for a group restart */
  int restarts_done;
  int exit_code;
  child *failed;       /* the first process that failed */
  fl_run_report *report; /* every end, as reaped */
  int attempt;         /* restarts done when the running trainers started */
  double t0;           /* when the job started (now_s) */
  int signalled;       /* our own SIGINT/SIGTERM count */
  int tty;
  int status_shown;
  double last_progress_print;
  fl_run_progress *progress;
  /* options */
  const char *job_path;
  char trainer_bin[FL_RUN_PATH_MAX];
  char pserver_bin[FL_RUN_PATH_MAX];
  char **extra;
  int n_extra;
  int max_restart;
  int max_restart_given;
  double grace_s;
  int timeline;
  int metrics_port;
  int multi_node;
  const char *log_dir;
  char token_env[80]; /* "FLOTILLA_TOKEN=<hex>" made for a one-node job, or "" */
  char run_id_env[96]; /* "FLOTILLA_RUN_ID=..." made here, or "" (the user's is passed on) */
  char launcher_env[48]; /* "FLOTILLA_LAUNCHER_PID=<our pid>" */
  const char *start_flag; /* "--resume", "--fresh" or NULL: for the first start */
  char last_line[256];    /* the last progress line printed (not a terminal) */
  fl_run_elastic_opts el; /* --rdzv_backend etcd and friends */
  char gpus_arg[256];     /* --gpus as given (passed on to elastic rounds) */
};

/* ---- command line ---- */

enum {
  OPT_MODE = 1000, OPT_IPS, OPT_NODE_IP, OPT_NPROC, OPT_GPUS, OPT_SERVER_NUM, OPT_SERVERS,
  OPT_LOG_DIR, OPT_MAX_RESTART, OPT_PORT, OPT_GRACE, OPT_TIMELINE, OPT_METRICS_PORT,
  OPT_TRAINER_BIN, OPT_PSERVER_BIN, OPT_HELP, OPT_VERSION, OPT_NNODES, OPT_NODE_RANK,
  OPT_MASTER_ADDR, OPT_MASTER_PORT, OPT_RESUME, OPT_FRESH, OPT_RDZV_BACKEND, OPT_RDZV_ENDPOINT,
  OPT_RDZV_ID, OPT_RDZV_TIMEOUT, OPT_RDZV_CONF
};

/* torchrun's dashed spellings (--nproc-per-node, --node-rank, --master-addr,
 * --master-port) come with every option from fl_args.h. */
/* --mode's names, indexed by fl_run_mode, then NULL. */
static const char *const k_run_modes[] = {"collective", "ps", NULL};
_Static_assert(sizeof k_run_modes / sizeof k_run_modes[0] == FL_RUN_PS + 2,
               "one per fl_run_mode, then NULL");

static const fl_arg_opt k_opts[] = {
    {"mode", 1, OPT_MODE},
    {"ips", 1, OPT_IPS},
    {"node_ip", 1, OPT_NODE_IP},
    {"nproc_per_node", 1, OPT_NPROC},
    {"gpus", 1, OPT_GPUS},
    {"server_num", 1, OPT_SERVER_NUM},
    {"servers", 1, OPT_SERVERS},
    {"log_dir", 1, OPT_LOG_DIR},
    {"max_restart", 1, OPT_MAX_RESTART},
    {"port", 1, OPT_PORT},
    {"grace", 1, OPT_GRACE},
    {"timeline", 0, OPT_TIMELINE},
    {"metrics_port", 1, OPT_METRICS_PORT},
    {"trainer_bin", 1, OPT_TRAINER_BIN},
    {"pserver_bin", 1, OPT_PSERVER_BIN},
    {"nnodes", 1, OPT_NNODES},
    {"node_rank", 1, OPT_NODE_RANK},
    {"master_addr", 1, OPT_MASTER_ADDR},
    {"master_port", 1, OPT_MASTER_PORT},
    {"resume", 0, OPT_RESUME},
    {"fresh", 0, OPT_FRESH},
    {"rdzv_backend", 1, OPT_RDZV_BACKEND},
    {"rdzv_endpoint", 1, OPT_RDZV_ENDPOINT},
    {"rdzv_id", 1, OPT_RDZV_ID},
    {"rdzv_timeout", 1, OPT_RDZV_TIMEOUT},
    {"rdzv_conf", 1, OPT_RDZV_CONF},
    {"help", 0, OPT_HELP},
    {"version", 0, OPT_VERSION},
    {NULL, 0, 0}};

static void usage(FILE *out) {
  fputs(
      "Usage: flotilla-run [options] job.yaml [-- args for every trainer]\n"
      "\n"
      "Start a Flotilla training job and supervise it, as Paddle's fleetrun does.\n"
      "On one node it starts every process; on several nodes (--ips) run it on each\n"
      "node with the same options: each starts its own share and the trainers meet\n"
      "at rank 0's endpoint.  Each process runs as\n"
      "  flotilla-trainer [--timeline=F] [--metrics_addr=A] --config job.yaml\n"
      "                   [--resume] [args after --]\n"
      "  flotilla-pserver [--metrics_addr=A] --config job.yaml\n"
      "with --resume only when restarted by --max_restart.\n"
      "\n"
      "Options (--name=value or --name value):\n"
      "  --mode collective|ps     how trainers cooperate (default: the job's\n"
      "                           cluster.mode; a local job runs as collective)\n"
      "  --ips a,b,...            the nodes' IP addresses, in rank order\n"
      "                           (default 127.0.0.1)\n"
      "  --node_ip IP             which of --ips this node is (default: the entry\n"
      "                           that is an address of this machine)\n"
      "  --nproc_per_node N       trainers per node (default: number of --gpus, or 1)\n"
      "  --gpus 0,1,...           one trainer per GPU id on each node\n"
      "  --server_num K           ps mode: pservers per node (default 1)\n"
      "  --servers h:p,...        ps mode: the pservers' endpoints instead; those on\n"
      "                           this node are started here, the rest must run\n"
      "  --port BASE              collective: trainer i of a node listens on BASE+i;\n"
      "                           ps: pserver j of a node on BASE+j (default: free\n"
      "                           ports on one node, 6170 on several)\n"
      "  --log_dir DIR            logs, metrics.csv, curve.png (default log)\n"
      "  --max_restart N          restart failed trainers up to N times in all, with\n"
      "                           --resume from the last checkpoint (default 0)\n"
      "  --resume                 every process continues from the newest checkpoint\n"
      "                           in its checkpoint directory, even another run's\n"
      "  --fresh                  every process moves another run's checkpoints aside\n"
      "                           (into <dir>/old-<time>/) and starts from scratch;\n"
      "                           without either, another run's checkpoints make the\n"
      "                           job refuse to start\n"
      "  --grace S                seconds between SIGTERM and SIGKILL when stopping,\n"
      "                           and for pservers to exit after the trainers\n"
      "                           (default 10)\n"
      "  --timeline               each trainer writes DIR/timeline.N.json (Chrome\n"
      "                           tracing); merged into DIR/timeline.json at the end\n"
      "  --metrics_port BASE      each process serves /metrics on its node address,\n"
      "                           port BASE + its index on the node (trainers first)\n"
      "  --trainer_bin PATH       the trainer program (default: flotilla-trainer next\n"
      "                           to flotilla-run, else from PATH)\n"
      "  --pserver_bin PATH       the pserver program (likewise flotilla-pserver)\n"
      "torchrun's options (every option is also accepted with dashes, as torchrun\n"
      "spells them: --nproc-per-node, --node-rank, --master-addr, --master-port):\n"
      "  --nnodes N               number of nodes; with --ips it must be their number\n"
      "  --node_rank R            this node's number, 0 .. N-1 (with --ips: as\n"
      "                           --node_ip of the R-th address; default 0)\n"
      "  --master_addr A          node 0's address, where trainer 0 listens and the\n"
      "                           trainers meet (with --ips: must be the first;\n"
      "                           collective mode only needs it)\n"
      "  --master_port P          trainer 0's port (collective; default 29500 with\n"
      "                           --nnodes and no --ips, else as --port)\n"
      "  Without --ips, --nnodes N > 1 runs this node's N-th share, the nodes known by\n"
      "  number only: run flotilla-run on each node with the same --nnodes,\n"
      "  --master_addr, --master_port and its own --node_rank.  Its trainers get\n"
      "  torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "  MASTER_ADDR, MASTER_PORT (FLOTILLA_CLUSTER_ENV=torchrun) instead of the\n"
      "  endpoint list, and tell trainer 0 their address at the rendezvous; ps mode\n"
      "  then needs --servers and no --master_addr (its trainers meet nobody).\n"
      "Elastic membership (torchrun's spelling):\n"
      "  --nnodes MIN:MAX         between MIN and MAX nodes, joining and leaving\n"
      "  --rdzv_backend etcd      the nodes meet on etcd (its v3 API)\n"
      "  --rdzv_endpoint H:P[,H:P...]  etcd's client URLs\n"
      "  --rdzv_id JOB            the job's name on etcd (keys /flotilla/JOB/)\n"
      "  --rdzv_timeout S         fewer than MIN nodes for S seconds (at the start\n"
      "                           or later): stop with exit status 3 (default 600)\n"
      "  --rdzv_conf K=S,...      lease_s (6: a node silent this long is dead),\n"
      "                           settle_s (3: no join this long before a new world;\n"
      "                           a departure waits lease_s/6), poll_s (0.25), stop_s\n"
      "                           (30: SIGKILL a round that did not stop),\n"
      "                           in_process (1: survivors'\n"
      "                           trainers keep their process across a world\n"
      "                           change, and leave a world a dead node never\n"
      "                           reaches once the next is named; 0: every\n"
      "                           round starts new ones),\n"
      "                           chunks (ps: each epoch's chunks, 4 x MAX; 0: a\n"
      "                           slot's fixed share)\n"
      "  Each world (a round) runs this node's share as --nnodes N --node_rank R\n"
      "  --master_addr A --master_port P+r%64 (P: --master_port, default 29500),\n"
      "  logs in DIR/round.<r>/; when a node dies or joins, or a trainer fails, the\n"
      "  round is stopped and the next one takes the newest state from the rank\n"
      "  holding it: each node checkpoints into its own train.checkpoint_dir, and\n"
      "  the new world's ranks broadcast the newest (FLOTILLA_RUN_ID is\n"
      "  elastic-JOB).  --max_restart counts this node's failed rounds (default 3).\n"
      "  --mode ps (async or geo; sync only with MIN = MAX): no rounds; each node\n"
      "  takes a trainer slot of MAX and trains until done, with --servers naming\n"
      "  pservers that run apart (FLOTILLA_PS_ELASTIC=1, FLOTILLA_TRAINERS_NUM=MAX\n"
      "  x nproc_per_node, FLOTILLA_RUN_ID=elastic-JOB); nodes join and leave.\n"
      "  The live trainers claim each epoch's chunks on etcd one at a time (a dead\n"
      "  trainer's chunk is trained again from its start by another); the job is\n"
      "  done when the last epoch's chunks are.\n"
      "  --node_ip names this node (default: its host name).  Exit status: 0 done,\n"
      "  3 below MIN for --rdzv_timeout, 4 this node's lease was lost, 1 failure.\n"
      "  --help, --version\n"
      "\n"
      "Files in DIR: workerlog.N (trainer N's output), serverlog.N (pserver N's),\n"
      "metrics.csv (every progress record of the streamed trainer), curve.png (loss\n"
      "and accuracy, drawn by gnuplot when it is installed), curve.gp (its script).\n"
      "\n"
      "Environment given to each process (see also flotilla-trainer --help):\n"
      "  FLOTILLA_ROLE                    TRAINER or PSERVER\n"
      "  FLOTILLA_MODE                    collective or ps (local for a lone trainer)\n"
      "  FLOTILLA_TRAINER_ID              trainer rank\n"
      "  FLOTILLA_TRAINERS_NUM            number of trainers\n"
      "  FLOTILLA_TRAINER_ENDPOINTS       collective: every trainer's host:port\n"
      "  FLOTILLA_CURRENT_ENDPOINT        this process's host:port\n"
      "  FLOTILLA_PSERVERS_IP_PORT_LIST   ps: every pserver's host:port\n"
      "  FLOTILLA_PSERVER_ID              pserver index\n"
      "  FLOTILLA_LOCAL_RANK, FLOTILLA_LOCAL_SIZE   trainer's place on its node\n"
      "  FLOTILLA_SELECTED_GPUS           with --gpus: this trainer's GPU\n"
      "  FLOTILLA_LOG_DIR                 --log_dir\n"
      "  FLOTILLA_RUN_ID                  this run's id (the one flotilla-run was given,\n"
      "                                   else a fresh one; the same after a restart)\n"
      "  FLOTILLA_LAUNCHER_PID            flotilla-run's pid: the child dies with it\n"
      "  OPENBLAS_NUM_THREADS             unless flotilla-run's environment sets it:\n"
      "                                   1 for a pserver, train.num_threads for a\n"
      "                                   trainer (none when 0: all cores)\n"
      "These (and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
      "GROUP_RANK, MASTER_ADDR, MASTER_PORT, FLOTILLA_CLUSTER_ENV) are never\n"
      "inherited from flotilla-run's own environment; the rest of\n"
      "it is passed on (FLOTILLA_TOKEN, FLOTILLA_TOKEN_FILE, FLOTILLA_LOG_LEVEL,\n"
      "FLOTILLA_CHECKPOINT_DIR included).  A one-node job with no shared secret\n"
      "(FLOTILLA_TOKEN, FLOTILLA_TOKEN_FILE or the job's cluster.token_file) gets\n"
      "a random FLOTILLA_TOKEN of its own; a multi-node job without one is refused.\n"
      "\n"
      "Environment read by flotilla-run:\n"
      "  FLOTILLA_TRAINER_BIN, FLOTILLA_PSERVER_BIN   like --trainer_bin, --pserver_bin\n"
      "  FLOTILLA_NODE_IP                 like --node_ip\n"
      "  FLOTILLA_LOG_LEVEL               debug|info|warn|error for its own messages\n"
      "\n"
      "When a process fails, flotilla-run names the first one that failed on its own\n"
      "(a non-zero exit, or a signal it did not send, such as the OOM killer's\n"
      "SIGKILL): its role, rank, pid and exit status or signal, its first error line\n"
      "near the end of its log and its last lines; then every other process of this\n"
      "node in the order they ended: stopped by flotilla-run, failed because of it\n"
      "(its error names the first failure), also failed, or finished.  A rank whose\n"
      "error blames a peer that failed too (\"rank 1 (host:port) aborted\") is not\n"
      "the cause even when it ended first: the peer is named.  With --max_restart,\n"
      "each restart's first failure is listed too.\n"
      "\n"
      "Exit status: 0 when every trainer finished; the exit status of the process\n"
      "named as the first failure (128+signal when killed: 137 for SIGKILL) when one\n"
      "failed; 128+signal when flotilla-run was stopped by SIGINT, SIGTERM or SIGHUP;\n"
      "2 for a bad command line or job file; 1 when a process could not be started.\n",
      out);
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    FL_LOGE("%s %s: want an integer in [%d, %d]", flag, s, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* Sibling program of this executable (libtool puts the real binary in
 * .libs/ of the build tree; the sibling wrapper is one level up). */
static void find_sibling(const char *env, const char *name, char *out, size_t cap) {
  const char *e = getenv(env);
  if (e && *e) {
    snprintf(out, cap, "%s", e);
    return;
  }
  char self[FL_RUN_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      size_t len = strlen(self);
      if (len >= 6 && strcmp(self + len - 6, "/.libs") == 0) self[len - 6] = '\0';
      char cand[FL_RUN_PATH_MAX + 64];
      snprintf(cand, sizeof cand, "%s/%s", self, name);
      size_t len2 = strlen(cand);
      if (len2 < cap && access(cand, X_OK) == 0) {
        memcpy(out, cand, len2 + 1);
        return;
      }
    }
  }
  snprintf(out, cap, "%s", name); /* PATH */
}

/* ---- terminal ---- */

static double now_s(void) { return (double)uv_hrtime() / 1e9; }

static void status_clear(run *r) {
  if (r->tty && r->status_shown) {
    fputs("\r\033[K", stdout);
    r->status_shown = 0;
  }
}

static void status_draw(run *r) {
  char line[256];
  if (!r->progress) return;
  fl_run_progress_line(r->progress, line, sizeof line);
  if (!line[0]) return;
  if (r->tty) {
    printf("\r\033[K\033[1m[flotilla-run] %s\033[0m", line);
    r->status_shown = 1;
  } else if (strcmp(line, r->last_line) != 0) { /* a log: no line twice */
    printf("[flotilla-run] %s\n", line);
    snprintf(r->last_line, sizeof r->last_line, "%s", line);
  }
  fflush(stdout);
}

/* A message of flotilla-run's own on the terminal (stderr), keeping the
 * progress line at the bottom. */
static void say(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run *r, const char *fmt, ...) {
  status_clear(r);
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  fputs("flotilla-run: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (r->tty && !r->ended) status_draw(r);
}

static const char *role_name(const child *c) {
  return c->spec->role == FL_RUN_TRAINER ? "trainer" : "pserver";
}

/* ---- children ---- */

static int spawn_child(run *r, child *c, int resume);

static void on_close_noop(uv_handle_t *h) { (void)h; }

static void print_line(run *r, const char *line) {
  status_clear(r);
  fputs(line, stdout);
  fputc('\n', stdout);
}

/* flotilla-run has printed the streamed trainer's "Distributed Envs" box
 * already: the trainer's own copy is kept out of the terminal (it stays in
 * the log).  Returns 1 when line is part of that copy. */
static int skip_envs_box(child *c, const char *line) {
  int rule = line[0] == '+' && line[1] == '=';
  if (c->box_state == 2) {
    if (rule) {
      c->box_state = 0;
      c->box_skipped = 1;
    }
    return 1;
  }
  if (c->box_state == 1) {
    c->box_state = 0;
    if (strstr(line, "Distributed Envs")) {
      c->box_state = 2;
      return 1;
    }
    print_line(c->run, c->held);
  }
  if (rule && !c->box_skipped && strlen(line) < sizeof c->held) {
    snprintf(c->held, sizeof c->held, "%s", line);
    c->box_state = 1;
    return 1;
  }
  return 0;
}

static void handle_line(child *c, char *line) {
  run *r = c->run;
  if (!c->streamed || skip_envs_box(c, line)) return;
  fl_run_record rec;
  int is_rec = fl_run_parse_line(line, &rec);
  print_line(r, line);
  if (is_rec && r->progress) {
    double t = now_s();
    fl_run_progress_feed(r->progress, &rec, t);
    if (!r->tty && rec.kind != FL_RUN_REC_PLAN &&
        (rec.kind == FL_RUN_REC_TEST || t - r->last_progress_print >= 10)) {
      r->last_progress_print = t;
      status_draw(r);
    }
  }
  if (r->tty) status_draw(r);
  fflush(stdout);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char chunk[65536];
  (void)h;
  (void)suggested;
  /* One loop thread: the chunk is consumed before the next read. */
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* a full disk must not stop the job: the pipe keeps draining */
    p += w;
    n -= (size_t)w;
  }
}

static void flush_partial(child *c) {
  if (c->line_len) {
    c->line[c->line_len] = '\0';
    handle_line(c, c->line);
    c->line_len = 0;
  }
}

static void maybe_finished(run *r);

static void on_pipe_closed(uv_handle_t *h) {
  child *c = h->data;
  c->pipe_open = 0;
  maybe_finished(c->run);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  child *c = s->data;
  if (n < 0) {
    flush_partial(c);
    uv_close((uv_handle_t *)s, on_pipe_closed);
    return;
  }
  if (c->log_fd >= 0) write_all(c->log_fd, buf->base, (size_t)n);
  for (ssize_t i = 0; i < n; i++) {
    char ch = buf->base[i];
    if (ch == '\n' || c->line_len == LINE_MAX_BYTES - 1) {
      c->line[c->line_len] = '\0';
      handle_line(c, c->line);
      c->line_len = 0;
      if (ch == '\n') continue;
    }
    c->line[c->line_len++] = ch;
  }
}

/* c has ended but is not reaped yet (peeked, left for libuv to reap): it
 * died on its own, so a signal now would make it look stopped by us. */
static int has_ended(const child *c) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  return waitid(P_PID, (id_t)c->proc.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid;
}

static void send_signal(child *c, int sig) {
  if (!c->alive || has_ended(c)) return;
  c->sent |= sig == SIGKILL ? FL_RUN_SENT_KILL : FL_RUN_SENT_TERM;
  uv_process_kill(&c->proc, sig);
}

static void on_kill_timer(uv_timer_t *t) {
  run *r = t->data;
  for (int i = 0; i < r->n_children; i++) {
    child *c = &r->children[i];
    if (c->alive) {
      say(r, "%s %d did not stop within %.0f s: SIGKILL", role_name(c), c->spec->id, r->grace_s);
      send_signal(c, SIGKILL);
    }
  }
}

/* Ask every running child (or only the trainers) to stop. */
static void stop_children(run *r, int trainers_only) {
  int any = 0;
  for (int i = 0; i < r->n_children; i++) {
    child *c = &r->children[i];
    if (!c->alive || (trainers_only && c->spec->role != FL_RUN_TRAINER)) continue;
    c->expected_exit = 1;
    send_signal(c, SIGTERM);
    any = 1;
  }
  if (any) uv_timer_start(&r->kill_timer, on_kill_timer, (uint64_t)(r->grace_s * 1000), 0);
}

static void stop_job(run *r, int exit_code) {
  if (!r->stopping) {
    r->stopping = 1;
    r->exit_code = exit_code;
  }
  r->restarting = 0;
  uv_timer_stop(&r->restart_timer);
  uv_timer_stop(&r->pserver_timer);
  stop_children(r, 0);
}

static int trainers_alive(run *r) {
  int n = 0;
  for (int i = 0; i < r->n_children; i++)
    if (r->children[i].alive && r->children[i].spec->role == FL_RUN_TRAINER) n++;
  return n;
}

static int all_trainers_done(run *r) {
  for (int i = 0; i < r->n_children; i++)
    if (r->children[i].spec->role == FL_RUN_TRAINER && !r->children[i].done_ok) return 0;
  return 1;
}

static void on_restart_timer(uv_timer_t *t) {
  run *r = t->data;
  r->restarting = 0;
  r->attempt = r->restarts_done;
  for (int i = 0; i < r->n_children; i++) {
    child *c = &r->children[i];
    if (c->spec->role != FL_RUN_TRAINER || c->alive || c->done_ok) continue;
    if (spawn_child(r, c, 1) != FL_OK) {
      stop_job(r, 1);
      return;
    }
  }
}

static void on_pserver_timer(uv_timer_t *t) {
  run *r = t->data;
  say(r, "the trainers are done; pservers still running after %.0f s: SIGTERM", r->grace_s);
  r->stopping = 1;
  stop_children(r, 0);
}

static int status_code(int64_t exit_status, int term_signal) {
  if (term_signal) return 128 + term_signal;
  return exit_status > 0 && exit_status < 256 ? (int)exit_status : 1;
}

static void describe_exit(char *out, size_t cap, const child *c) {
  if (c->term_signal)
    snprintf(out, cap, "was killed by signal %d (%s)", c->term_signal, strsignal(c->term_signal));
  else
    snprintf(out, cap, "exited with status %lld", (long long)c->exit_status);
}

/* Add c's end to the record the failure report is made from. */
static void record_exit(run *r, const child *c) {
  fl_run_exit e = {.role = c->spec->role, .id = c->spec->id, .pid = (long)c->proc.pid,
                   .attempt = r->attempt, .status = c->exit_status, .signal = c->term_signal,
                   .sent = c->sent, .t = now_s() - r->t0, .log_path = c->spec->log_path,
                   .log_from = c->log_from};
  fl_run_report_add(r->report, &e); /* out of memory: logged; the report lacks it */
}

static void on_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal) {
  child *c = p->data;
  run *r = c->run;
  c->alive = 0;
  c->exit_status = exit_status;
  c->term_signal = term_signal;
  record_exit(r, c);
  uv_close((uv_handle_t *)p, on_close_noop);
  int ok = exit_status == 0 && term_signal == 0;
  char how[96];
  describe_exit(how, sizeof how, c);

  if (c->expected_exit) {
    /* Stopped by us: a group restart or the end of the job. */
    if (r->restarting && trainers_alive(r) == 0) {
      uv_timer_stop(&r->kill_timer);
      uv_timer_start(&r->restart_timer, on_restart_timer, 1000, 0);
    }
    maybe_finished(r);
    return;
  }
  if (ok && c->spec->role == FL_RUN_TRAINER) {
    c->done_ok = 1;
    if (all_trainers_done(r)) {
      int pservers = 0;
      for (int i = 0; i < r->n_children; i++)
        if (r->children[i].alive) pservers++;
      /* One node: the pservers should follow the trainers out; on several
       * they serve other nodes' trainers until all are complete. */
      if (pservers && !r->multi_node)
        uv_timer_start(&r->pserver_timer, on_pserver_timer, (uint64_t)(r->grace_s * 1000), 0);
    }
    maybe_finished(r);
    return;
  }
  /* A pserver exits 0 only once every trainer has sent Complete (or on
   * SIGTERM); trainers may still be on their way out then.  A trainer that
   * still needed it fails on its own, and that failure stops the job. */
  if (ok && c->spec->role == FL_RUN_PSERVER) {
    maybe_finished(r);
    return;
  }
  if (r->stopping) {
    maybe_finished(r);
    return;
  }
  /* A failure. */
  if (c->spec->role == FL_RUN_TRAINER && r->restarts_done < r->max_restart) {
    r->restarts_done++;
    say(r, "trainer %d %s; restart %d of %d (--resume)%s", c->spec->id, how, r->restarts_done,
        r->max_restart,
        r->plan->mode == FL_RUN_COLLECTIVE ? ", all trainers restart together" : "");
    if (r->plan->mode == FL_RUN_COLLECTIVE && trainers_alive(r) > 0) {
      r->restarting = 1;
      stop_children(r, 1);
    } else {
      uv_timer_start(&r->restart_timer, on_restart_timer, 1000, 0);
    }
    return;
  }
  say(r, "%s %d (%s) %s: stopping the job", role_name(c), c->spec->id, c->spec->log_path, how);
  r->failed = c;
  stop_job(r, status_code(exit_status, term_signal));
  maybe_finished(r);
}

static void maybe_finished(run *r) {
  for (int i = 0; i < r->n_children; i++)
    if (r->children[i].alive || r->children[i].pipe_open) return;
  if (r->closed || r->restarting || uv_is_active((uv_handle_t *)&r->restart_timer)) return;
  r->closed = 1;
  uv_timer_stop(&r->kill_timer);
  uv_timer_stop(&r->pserver_timer);
  for (int i = 0; i < 3; i++) uv_close((uv_handle_t *)&r->sig[i], NULL);
  uv_close((uv_handle_t *)&r->kill_timer, NULL);
  uv_close((uv_handle_t *)&r->restart_timer, NULL);
  uv_close((uv_handle_t *)&r->pserver_timer, NULL);
}

static int is_cluster_var(const char *kv) {
  static const char *const vars[] = {
      "FLOTILLA_ROLE=", "FLOTILLA_MODE=", "FLOTILLA_TRAINER_ID=", "FLOTILLA_TRAINERS_NUM=",
      "FLOTILLA_TRAINER_ENDPOINTS=", "FLOTILLA_CURRENT_ENDPOINT=",
      "FLOTILLA_PSERVERS_IP_PORT_LIST=", "FLOTILLA_PSERVER_ID=", "FLOTILLA_LOCAL_RANK=",
      "FLOTILLA_LOCAL_SIZE=", "FLOTILLA_SELECTED_GPUS=", "FLOTILLA_LOG_DIR=",
      /* torchrun's, given instead in --nnodes mode (fl_run_torchrun_opts) */
      "FLOTILLA_CLUSTER_ENV=", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
      "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT=", "FLOTILLA_NODE_IP=", "FLOTILLA_LAUNCHER_PID="};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (strncmp(kv, vars[i], strlen(vars[i])) == 0) return 1;
  return 0;
}

static int spawn_child(run *r, child *c, int resume) {
  fl_run_proc *p = c->spec;
  char *argv[64];
  char timeline_arg[FL_RUN_PATH_MAX + 16], metrics_arg[FL_RUN_EP_MAX + 24];
  int argc = 0;
  argv[argc++] = p->role == FL_RUN_TRAINER ? r->trainer_bin : r->pserver_bin;
  if (p->role == FL_RUN_TRAINER && r->timeline) {
    snprintf(timeline_arg, sizeof timeline_arg, "--timeline=%s/timeline.%d.json", r->log_dir,
             p->id);
    argv[argc++] = timeline_arg;
  }
  if (r->metrics_port) {
    /* place among this node's processes, trainers first */
    int index = 0;
    for (int i = 0; i < r->n_children; i++) {
      const fl_run_proc *q = r->children[i].spec;
      if (q->role == FL_RUN_TRAINER ? (p->role == FL_RUN_PSERVER || q->id < p->id)
                                    : (p->role == FL_RUN_PSERVER && q->id < p->id))
        index++;
    }
    const char *ep = p->endpoint;
    char host[FL_RUN_EP_MAX];
    snprintf(host, sizeof host, "%s", ep[0] ? ep : "127.0.0.1");
    char *colon = strrchr(host, ':');
    if (ep[0] && colon) *colon = '\0';
    snprintf(metrics_arg, sizeof metrics_arg, "--metrics_addr=%s:%d", host,
             r->metrics_port + index);
    argv[argc++] = metrics_arg;
  }
  argv[argc++] = "--config";
  argv[argc++] = (char *)r->job_path;
  if (resume) argv[argc++] = "--resume";
  else if (r->start_flag) argv[argc++] = (char *)r->start_flag;
  if (p->role == FL_RUN_TRAINER)
    for (int i = 0; i < r->n_extra && argc < 62; i++) argv[argc++] = r->extra[i];
  argv[argc] = NULL;

  size_t nenv = 0;
  while (environ[nenv]) nenv++;
  char **env = calloc(nenv + (size_t)p->n_env + 4, sizeof *env);
  if (!env) return FL_ERR(FL_ENOMEM, "out of memory starting %s %d", role_name(c), p->id);
  size_t k = 0;
  for (size_t i = 0; i < nenv; i++)
    if (!is_cluster_var(environ[i])) env[k++] = environ[i];
  for (int i = 0; i < p->n_env; i++) env[k++] = p->env[i];
  if (r->token_env[0]) env[k++] = r->token_env;
  if (r->run_id_env[0]) env[k++] = r->run_id_env;
  env[k++] = r->launcher_env;
  env[k] = NULL;

  int fds[2];
  int rc = uv_pipe(fds, 0, 0);
  if (rc != 0) {
    free(env);
    return FL_ERR(FL_EIO, "cannot create a pipe for %s %d: %s", role_name(c), p->id,
                  uv_strerror(rc));
  }
  if (c->log_fd < 0) {
    c->log_fd = open(p->log_path, O_WRONLY | O_CREAT | (resume ? O_APPEND : O_TRUNC) | O_CLOEXEC,
                     0644);
    if (c->log_fd < 0) {
      int e = errno;
      close(fds[0]);
      close(fds[1]);
      free(env);
      return FL_ERR(FL_EIO, "cannot create %s: %s", p->log_path, strerror(e));
    }
  }
  c->sent = 0;
  c->log_from = (int64_t)lseek(c->log_fd, 0, SEEK_END);
  if (resume) {
    char mark[160];
    int n = snprintf(mark, sizeof mark, "----- flotilla-run: restart %d of %d, with --resume -----\n",
                     r->restarts_done, r->max_restart);
    write_all(c->log_fd, mark, (size_t)n);
  }
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = fds[1];
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = fds[1];
  uv_process_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.exit_cb = on_exit_cb;
  opt.file = argv[0];
  opt.args = argv;
  opt.env = env;
  opt.stdio = stdio;
  opt.stdio_count = 3;
  c->proc.data = c;
  rc = uv_spawn(r->loop, &c->proc, &opt);
  close(fds[1]);
  free(env);
  if (rc != 0) {
    close(fds[0]);
    uv_close((uv_handle_t *)&c->proc, on_close_noop);
    return FL_ERR(FL_EIO, "cannot start %s %d (%s): %s", role_name(c), p->id, argv[0],
                  uv_strerror(rc));
  }
  c->alive = 1;
  c->expected_exit = 0;
  c->done_ok = 0;
  c->line_len = 0;
  uv_pipe_init(r->loop, &c->out, 0);
  c->out.data = c;
  uv_pipe_open(&c->out, fds[0]);
  c->pipe_open = 1;
  uv_read_start((uv_stream_t *)&c->out, on_alloc, on_read);
  return FL_OK;
}

/* ---- signals ---- */

static void on_signal(uv_signal_t *h, int signum) {
  run *r = h->data;
  r->signalled++;
  if (r->signalled == 1) {
    say(r, "got %s: stopping the job (again to kill at once)", strsignal(signum));
    stop_job(r, 128 + signum);
  } else {
    for (int i = 0; i < r->n_children; i++) send_signal(&r->children[i], SIGKILL);
  }
}

/* ---- start and end of the job ---- */

/* mkdir -p */
static fl_status make_dirs(const char *path) {
  char tmp[FL_RUN_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char saved = *p;
      *p = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return FL_ERR(FL_EIO, "cannot create directory %s: %s", tmp, strerror(errno));
      *p = saved;
      if (!saved) break;
    }
  }
  return FL_OK;
}

/* The "Distributed Envs" box of one process, through the cluster module's
 * printer, from the variables flotilla-run gives it. */
static void print_envs(const fl_run_proc *p) {
  fl_cluster *c = malloc(sizeof *c);
  if (!c) return;
  fl_cluster_defaults(c);
  for (int i = 0; i < p->n_env; i++) {
    char key[64];
    /* torchrun's variables (--nnodes without --ips) under their fields */
    static const char *const tr[][2] = {{"RANK=", "trainer_id"}, {"WORLD_SIZE=", "trainers_num"},
                                        {"LOCAL_RANK=", "local_rank"},
                                        {"LOCAL_WORLD_SIZE=", "local_size"}};
    for (size_t t = 0; t < sizeof tr / sizeof tr[0]; t++)
      if (!strncmp(p->env[i], tr[t][0], strlen(tr[t][0])))
        fl_cluster_set(c, tr[t][1], p->env[i] + strlen(tr[t][0]));
    if (strncmp(p->env[i], "FLOTILLA_", 9) || !strncmp(p->env[i], "FLOTILLA_CLUSTER_ENV=", 21))
      continue;
    const char *kv = p->env[i] + strlen("FLOTILLA_");
    const char *eq = strchr(kv, '=');
    size_t len = (size_t)(eq - kv);
    if (len >= sizeof key) continue;
    for (size_t j = 0; j < len; j++) key[j] = (char)(kv[j] >= 'A' && kv[j] <= 'Z' ? kv[j] + 32 : kv[j]);
    key[len] = '\0';
    if (strcmp(key, "pservers_ip_port_list") == 0) snprintf(key, sizeof key, "pservers");
    fl_cluster_set(c, key, eq + 1);
  }
  fl_cluster_print_envs(c, stdout);
  free(c);
}

static void print_layout(run *r, const fl_run_opts *o) {
  const fl_run_plan *pl = r->plan;
  printf("+------------------------- flotilla-run -------------------------+\n");
  printf("  job            %s\n", r->job_path);
  printf("  mode           %s\n", k_run_modes[pl->mode]);
  printf("  nodes          %d (this is node %d, %s)\n", o->n_ips, pl->this_node,
         o->ips[pl->this_node]);
  printf("  trainers       %d (%d per node)\n", pl->n_trainers, pl->trainers_per_node);
  if (pl->mode == FL_RUN_PS) printf("  pservers       %d\n", pl->n_pservers);
  printf("  log_dir        %s\n", o->log_dir);
  printf("  max_restart    %d\n", r->max_restart);
  const char *rid = getenv("FLOTILLA_RUN_ID");
  printf("  run id         %s\n", r->run_id_env[0] ? r->run_id_env + strlen("FLOTILLA_RUN_ID=")
                                 : rid && *rid   ? rid
                                                 : "(derived from the job and cluster: several "
                                                   "nodes and no FLOTILLA_RUN_ID)");
  printf("  trainer        %s\n", r->trainer_bin);
  if (pl->mode == FL_RUN_PS) printf("  pserver        %s\n", r->pserver_bin);
  printf("+----------------------------------------------------------------+\n");
  for (int i = 0; i < pl->n_procs; i++) {
    const fl_run_proc *p = &pl->procs[i];
    char gpu[32] = "";
    if (p->gpu >= 0) snprintf(gpu, sizeof gpu, "  gpu %d", p->gpu);
    printf("  %-8s %-4d %-28s %s%s\n", p->role == FL_RUN_TRAINER ? "trainer" : "pserver", p->id,
           p->endpoint[0] ? p->endpoint : "-", p->local ? p->log_path : "(another node)", gpu);
  }
  for (int i = 0; i < r->n_children; i++)
    if (r->children[i].streamed) {
      print_envs(r->children[i].spec);
      break;
    }
  fflush(stdout);
}

/* Merge this node's per-rank timelines (one event per line) into one file. */
static void merge_timelines(run *r) {
  char out_path[FL_RUN_PATH_MAX + 32];
  snprintf(out_path, sizeof out_path, "%s/timeline.json", r->log_dir);
  FILE *out = fopen(out_path, "w");
  if (!out) {
    say(r, "cannot create %s: %s", out_path, strerror(errno));
    return;
  }
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", out);
  int first = 1, files = 0;
  for (int i = 0; i < r->n_children; i++) {
    if (r->children[i].spec->role != FL_RUN_TRAINER) continue;
    char in_path[FL_RUN_PATH_MAX + 32];
    snprintf(in_path, sizeof in_path, "%s/timeline.%d.json", r->log_dir,
             r->children[i].spec->id);
    FILE *in = fopen(in_path, "r");
    if (!in) continue;
    files++;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
      /* Event lines start with " {" or ",{" and end with "}\n". */
      if (len < 4 || (line[0] != ' ' && line[0] != ',') || line[1] != '{' ||
          line[len - 2] != '}' || line[len - 1] != '\n')
        continue;
      fputs(first ? " " : ",", out);
      fputs(line + 1, out);
      first = 0;
    }
    free(line);
    fclose(in);
  }
  fputs("]}\n", out);
  if (fclose(out) == 0 && files) say(r, "timeline of %d trainers: %s", files, out_path);
}

static void write_outputs(run *r) {
  char csv[FL_RUN_PATH_MAX + 32], png[FL_RUN_PATH_MAX + 32], gp[FL_RUN_PATH_MAX + 32];
  if (!r->progress || fl_run_progress_count(r->progress) == 0) return;
  snprintf(csv, sizeof csv, "%s/metrics.csv", r->log_dir);
  snprintf(png, sizeof png, "%s/curve.png", r->log_dir);
  snprintf(gp, sizeof gp, "%s/curve.gp", r->log_dir);
  if (fl_run_progress_write_csv(r->progress, csv) != FL_OK) return;
  if (fl_run_plot(csv, png, gp) == FL_OK)
    say(r, "metrics in %s, curve in %s", csv, png);
}

/* A job on one node with no shared secret anywhere (FLOTILLA_TOKEN,
 * FLOTILLA_TOKEN_FILE, cluster.token_file) gets a fresh random one, so that
 * no other local process can join its rendezvous or call its pservers.
 * Several nodes must share one: there the user provides it. */
static fl_status make_token(run *r, const fl_run_opts *o, const fl_job *job) {
  const char *t = getenv("FLOTILLA_TOKEN"), *tf = getenv("FLOTILLA_TOKEN_FILE");
  if ((t && *t) || (tf && *tf) || job->cluster.token_file[0]) return FL_OK;
  if (o->n_ips > 1)
    return FL_ERR(FL_EINVAL, "a job on %d nodes needs a shared token, the same on every node: "
                  "FLOTILLA_TOKEN, FLOTILLA_TOKEN_FILE or the job's cluster.token_file (see "
                  "README, Security)", o->n_ips);
  unsigned char raw[24];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
    return FL_ERR(FL_EIO, "cannot make a job token: getrandom: %s", strerror(errno));
  size_t n = (size_t)snprintf(r->token_env, sizeof r->token_env, "FLOTILLA_TOKEN=");
  for (size_t i = 0; i < sizeof raw; i++)
    n += (size_t)snprintf(r->token_env + n, sizeof r->token_env - n, "%02x", raw[i]);
  return FL_OK;
}

/* This run's id: the user's FLOTILLA_RUN_ID, else a fresh one that every
 * child (and every restart of it) gets; FLOTILLA_LAUNCHER_PID too. */
static fl_status make_run_id(run *r, int multi_node) {
  snprintf(r->launcher_env, sizeof r->launcher_env, "FLOTILLA_LAUNCHER_PID=%ld", (long)getpid());
  const char *e = getenv("FLOTILLA_RUN_ID");
  if (e && *e) return FL_OK;
  /* Several nodes: each node's flotilla-run would draw another id; the
   * processes derive one from the job and cluster instead. */
  if (multi_node) return FL_OK;
  unsigned char raw[4];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
    return FL_ERR(FL_EIO, "cannot make a run id: getrandom: %s", strerror(errno));
  time_t now = time(NULL);
  struct tm tm;
  char stamp[32];
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(r->run_id_env, sizeof r->run_id_env, "FLOTILLA_RUN_ID=%s-%02x%02x%02x%02x", stamp,
           raw[0], raw[1], raw[2], raw[3]);
  return FL_OK;
}

/* One --rdzv_* option into e; 0 when fine, else 2 (logged). */
static int parse_rdzv(int ch, const char *val, fl_run_elastic_opts *e) {
  char *end;
  switch (ch) {
  case OPT_RDZV_BACKEND:
    if (strcmp(val, "etcd")) {
      FL_LOGE("--rdzv_backend %s: only etcd (its v3 API) is supported", val);
      return 2;
    }
    e->on = 1;
    return 0;
  case OPT_RDZV_ENDPOINT:
    if (!*val || strlen(val) >= sizeof e->endpoint) {
      FL_LOGE("--rdzv_endpoint: want host:port[,host:port...]");
      return 2;
    }
    snprintf(e->endpoint, sizeof e->endpoint, "%s", val);
    return 0;
  case OPT_RDZV_ID:
    if (!*val || strlen(val) >= sizeof e->id || strpbrk(val, "/ @")) {
      FL_LOGE("--rdzv_id %s: want a job name without '/', ' ' or '@'", val);
      return 2;
    }
    snprintf(e->id, sizeof e->id, "%s", val);
    return 0;
  case OPT_RDZV_TIMEOUT:
    e->timeout_s = strtod(val, &end);
    if (end == val || *end || !(e->timeout_s > 0)) {
      FL_LOGE("--rdzv_timeout %s: want seconds > 0", val);
      return 2;
    }
    return 0;
  default: return fl_run_elastic_conf(val, e) == FL_OK ? 0 : 2;
  }
}

/* The elastic options agree with each other and with the rest; 0 or 2. */
static int check_elastic(const fl_run_opts *o, const fl_run_elastic_opts *e) {
  if (!e->on) {
    if (e->min_nodes) FL_LOGE("--nnodes MIN:MAX needs --rdzv_backend etcd (elastic membership)");
    return e->min_nodes ? 2 : 0;
  }
  if (!e->min_nodes || !e->endpoint[0] || !e->id[0]) {
    FL_LOGE("--rdzv_backend etcd needs --nnodes MIN:MAX, --rdzv_endpoint and --rdzv_id");
    return 2;
  }
  if (o->ips_given || o->node_rank >= 0 || o->master_addr[0]) {
    FL_LOGE("--rdzv_backend etcd chooses the node ranks and the master itself: drop --ips, "
            "--node_rank, --master_addr");
    return 2;
  }
  return 0;
}

/* Parse the command line into o and r; 0 to go on, else the exit status. */
static int parse_args(int argc, char **argv, fl_run_opts *o, run *r) {
  int dd = argc;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) {
      dd = i;
      break;
    }
  r->extra = argv + (dd < argc ? dd + 1 : argc);
  r->n_extra = dd < argc ? argc - dd - 1 : 0;
  r->grace_s = 10;
  fl_run_elastic_defaults(&r->el);
  const char *e = getenv("FLOTILLA_NODE_IP");
  if (e && *e) snprintf(o->node_ip, sizeof o->node_ip, "%s", e);
  find_sibling("FLOTILLA_TRAINER_BIN", "flotilla-trainer", r->trainer_bin, sizeof r->trainer_bin);
  find_sibling("FLOTILLA_PSERVER_BIN", "flotilla-pserver", r->pserver_bin, sizeof r->pserver_bin);
  fl_args args = {.prog = "flotilla-run", .unknown_fmt = "unknown option %s", .opts = k_opts};
  int ch;
  char gpus[64][FL_RUN_EP_MAX];
  fl_args_init(&args, dd, argv);
  while ((ch = fl_args_next(&args)) != FL_ARGS_END) {
    const char *val = args.val;
    switch (ch) {
    case OPT_MODE: {
      const int m = fl_names_find(k_run_modes, val);
      if (m < 0) {
        FL_LOGE("--mode %s: want %s or %s", val, k_run_modes[0], k_run_modes[1]);
        return 2;
      }
      o->mode = (fl_run_mode)m;
      o->mode_given = 1;
      break;
    }
    case OPT_IPS:
      if (fl_run_split_list("--ips", val, o->ips, FL_RUN_MAX_NODES, &o->n_ips) != FL_OK)
        return 2;
      o->ips_given = 1;
      break;
    case OPT_NNODES:
      if (strchr(val, ':')) {
        if (fl_run_elastic_nnodes(val, &r->el) != FL_OK) return 2;
        break;
      }
      if (parse_int("--nnodes", val, 1, FL_RUN_MAX_NODES, &o->nnodes)) return 2;
      break;
    case OPT_RDZV_BACKEND:
    case OPT_RDZV_ENDPOINT:
    case OPT_RDZV_ID:
    case OPT_RDZV_TIMEOUT:
    case OPT_RDZV_CONF:
      if (parse_rdzv(ch, val, &r->el)) return 2;
      break;
    case OPT_NODE_RANK:
      if (parse_int("--node_rank", val, 0, FL_RUN_MAX_NODES - 1, &o->node_rank)) return 2;
      break;
    case OPT_MASTER_ADDR:
      if (!*val || strlen(val) >= sizeof o->master_addr || strchr(val, ',')) {
        FL_LOGE("--master_addr %s: want one host name or address", val);
        return 2;
      }
      snprintf(o->master_addr, sizeof o->master_addr, "%s", val);
      break;
    case OPT_MASTER_PORT:
      if (parse_int("--master_port", val, 1, 65535, &o->master_port)) return 2;
      break;
    case OPT_NODE_IP: snprintf(o->node_ip, sizeof o->node_ip, "%s", val); break;
    case OPT_NPROC:
      if (parse_int("--nproc_per_node", val, 1, FL_RUN_MAX_PROCS, &o->nproc_per_node)) return 2;
      break;
    case OPT_GPUS:
      if (fl_run_split_list("--gpus", val, gpus, 64, &o->n_gpus) != FL_OK) return 2;
      snprintf(r->gpus_arg, sizeof r->gpus_arg, "%s", val);
      for (int i = 0; i < o->n_gpus; i++)
        if (parse_int("--gpus", gpus[i], 0, 1023, &o->gpus[i])) return 2;
      break;
    case OPT_SERVER_NUM:
      if (parse_int("--server_num", val, 1, FL_RUN_MAX_PROCS, &o->server_num)) return 2;
      break;
    case OPT_SERVERS:
      if (fl_run_split_list("--servers", val, o->servers, FL_RUN_MAX_PROCS, &o->n_servers) !=
          FL_OK)
        return 2;
      break;
    case OPT_LOG_DIR:
      if (!*val || strlen(val) >= sizeof o->log_dir - 32) {
        FL_LOGE("--log_dir: want a directory name of at most %zu bytes",
                sizeof o->log_dir - 33);
        return 2;
      }
      snprintf(o->log_dir, sizeof o->log_dir, "%s", val);
      break;
    case OPT_MAX_RESTART:
      if (parse_int("--max_restart", val, 0, 1000, &r->max_restart)) return 2;
      r->max_restart_given = 1;
      break;
    case OPT_PORT:
      if (parse_int("--port", val, 1, 65535, &o->port)) return 2;
      break;
    case OPT_GRACE: {
      char *end;
      r->grace_s = strtod(val, &end);
      if (end == val || *end || !(r->grace_s >= 0 && r->grace_s <= 3600)) {
        FL_LOGE("--grace %s: want seconds in [0, 3600]", val);
        return 2;
      }
      break;
    }
    case OPT_TIMELINE: r->timeline = 1; break;
    case OPT_METRICS_PORT:
      if (parse_int("--metrics_port", val, 1, 65535, &r->metrics_port)) return 2;
      break;
    case OPT_TRAINER_BIN: snprintf(r->trainer_bin, sizeof r->trainer_bin, "%s", val); break;
    case OPT_PSERVER_BIN: snprintf(r->pserver_bin, sizeof r->pserver_bin, "%s", val); break;
    case OPT_RESUME:
    case OPT_FRESH:
      if (r->start_flag && strcmp(r->start_flag, ch == OPT_RESUME ? "--resume" : "--fresh")) {
        FL_LOGE("--resume and --fresh exclude each other");
        return 2;
      }
      r->start_flag = ch == OPT_RESUME ? "--resume" : "--fresh";
      break;
    case OPT_HELP: usage(stdout); return -1;
    case OPT_VERSION: fl_print_version(stdout, "flotilla-run"); return -1;
    default: return 2; /* FL_ARGS_ERROR: logged */
    }
  }
  int first = fl_args_rest(&args);
  if (dd - first != 1) {
    FL_LOGE(dd == first ? "no job file given (see flotilla-run --help)"
                         : "one job file expected, got %d arguments; arguments for the "
                           "trainers go after --", dd - first);
    return 2;
  }
  r->job_path = argv[first];
  return check_elastic(o, &r->el);
}

/* The restarts that failed, then, when the job failed, its first failure
 * (which also gives the exit status) and the others' ends. */
static void report_failure(run *r) {
  fflush(stdout);
  fl_run_report_print_attempts(r->report, r->attempt, stderr);
  if (!r->failed) return;
  const fl_run_exit *c = fl_run_report_cause(r->report, r->attempt);
  if (!c) return;
  /* Named by blame but killed by our own signal: the status of the first
   * failure reaped stands. */
  if (!c->signal || fl_run_exit_kind(c) == FL_RUN_END_FAILED)
    r->exit_code = status_code(c->status, c->signal);
  fl_run_report_print(r->report, r->attempt, TAIL_LINES, stderr);
}

/* The event loop, its signal watchers and timers; FL_EIO (logged) when
 * the loop cannot start (no descriptor left for its epoll or signal
 * pipe), before any child is spawned. */
static fl_status start_loop(run *r) {
  static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
  int rc = 0;
  r->loop = uv_default_loop();
  if (!r->loop)
    return FL_ERR(FL_EIO, "cannot start the event loop: %s (raise ulimit -n)", strerror(errno));
  for (int i = 0; i < 3 && rc == 0; i++) {
    rc = uv_signal_init(r->loop, &r->sig[i]);
    r->sig[i].data = r;
    if (rc == 0) rc = uv_signal_start(&r->sig[i], on_signal, sigs[i]);
  }
  if (rc != 0)
    return FL_ERR(FL_EIO, "cannot watch signals: %s (raise ulimit -n)", uv_strerror(rc));
  uv_timer_t *timers[] = {&r->kill_timer, &r->restart_timer, &r->pserver_timer};
  for (int i = 0; i < 3; i++) {
    uv_timer_init(r->loop, timers[i]);
    timers[i]->data = r;
  }
  return FL_OK;
}

/* Start the children, run the loop until every one has ended and its log
 * is drained, then write the outputs and say how it went.  FL_EIO
 * (logged, nothing spawned) when the loop cannot start. */
static fl_status supervise(run *r) {
  FL_TRY(start_loop(r));
  r->t0 = now_s();
  for (int i = 0; i < r->n_children && !r->stopping; i++)
    if (spawn_child(r, &r->children[i], 0) != FL_OK) stop_job(r, 1);
  maybe_finished(r);
  uv_run(r->loop, UV_RUN_DEFAULT);
  uv_loop_close(r->loop);
  r->ended = 1;
  for (int i = 0; i < r->n_children; i++)
    if (r->children[i].log_fd >= 0) close(r->children[i].log_fd);

  /* A job that went through keeps its last progress line, whole (100%),
   * above the summary. */
  if (r->exit_code == 0 && r->progress && fl_run_progress_count(r->progress) > 0) {
    status_draw(r);
    if (r->tty) fputc('\n', stdout);
    r->status_shown = 0;
  } else {
    status_clear(r);
  }
  write_outputs(r);
  if (r->timeline) merge_timelines(r);
  report_failure(r);
  int epoch;
  double loss, acc;
  double took = now_s() - r->t0;
  if (r->exit_code == 0) {
    if (fl_run_progress_last_test(r->progress, &epoch, &loss, &acc) && !isnan(acc))
      say(r, "job done in %.0f s; final test accuracy %.4f, loss %.4f (epoch %d)", took, acc,
          loss, epoch + 1);
    else if (fl_run_progress_last_test(r->progress, &epoch, &loss, &acc) &&
             !isnan(fl_run_progress_last_auc(r->progress))) /* binary targets */
      say(r, "job done in %.0f s; final test auc %.4f, loss %.4f (epoch %d)", took,
          fl_run_progress_last_auc(r->progress), loss, epoch + 1);
    else if (fl_run_progress_last_test(r->progress, &epoch, &loss, &acc)) /* e.g. mse */
      say(r, "job done in %.0f s; final test loss %.4f (epoch %d)", took, loss, epoch + 1);
    else
      say(r, "job done in %.0f s", took);
  } else {
    say(r, "job failed after %.0f s (exit status %d); logs in %s/", took, r->exit_code,
        r->log_dir);
  }
  return FL_OK;
}

/* An elastic ps job: async or geo (a sync step waits for a fixed set of
 * trainers), pservers given by --servers and none of them on this node
 * (they outlive the nodes); c gets the list.  0, or 2 (logged). */
static int elastic_ps(const run *r, const fl_run_opts *o, const fl_job *job,
                      fl_run_elastic_child *c) {
  size_t off = 0;
  if (!job->strategy.a_sync && r->el.min_nodes != r->el.max_nodes) {
    FL_LOGE("%s: sync PS trains with a fixed set of trainers: --nnodes %d:%d is refused; give "
            "--nnodes N:N, or strategy.a_sync: true (async, or geo with a_sync_configs.k_steps) "
            "for trainers that join and leave", r->job_path, r->el.min_nodes, r->el.max_nodes);
    return 2;
  }
  if (!o->n_servers || o->server_num) {
    FL_LOGE("%s: elastic ps mode needs --servers (the pservers run apart from the elastic nodes, "
            "started with FLOTILLA_PS_ELASTIC=1 and FLOTILLA_TRAINERS_NUM=%d), not --server_num",
            r->job_path, r->el.max_nodes * (o->nproc_per_node ? o->nproc_per_node : 1));
    return 2;
  }
  for (int i = 0; i < o->n_servers && off < sizeof c->servers; i++)
    off += (size_t)snprintf(c->servers + off, sizeof c->servers - off, "%s%s", i ? "," : "",
                            o->servers[i]);
  return 0;
}

/* Hand the job to the elastic agent (run_elastic.c); its exit status. */
static int run_elastic(run *r, const fl_run_opts *o, const fl_job *job) {
  static fl_run_elastic_child c;
  char self[FL_RUN_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    FL_LOGE("elastic: cannot find this program (/proc/self/exe): %s", strerror(errno));
    return 1;
  }
  self[n] = '\0';
  c.ps = o->mode == FL_RUN_PS || job->cluster.mode == FL_MODE_PS;
  if (c.ps && elastic_ps(r, o, job, &c) != 0) return 2;
  const char *dir = getenv("FLOTILLA_CHECKPOINT_DIR");
  if (!c.ps && !job->train.checkpoint_dir[0] && !(dir && *dir))
    FL_LOGW("%s: no train.checkpoint_dir (nor FLOTILLA_CHECKPOINT_DIR): a node whose "
            "trainers restart has nothing to resume from; give each node a directory of its own",
            r->job_path);
  /* one run for every round and node: checkpoints of earlier rounds are this run's */
  char run_id[160];
  snprintf(run_id, sizeof run_id, "elastic-%s", r->el.id);
  if (!getenv("FLOTILLA_RUN_ID")) setenv("FLOTILLA_RUN_ID", run_id, 1);
  /* each node writes its own checkpoints; a new world takes the newest state
   * from the rank holding it (the trainer's share_state) */
  if (!c.ps) setenv("FLOTILLA_NODE_CHECKPOINTS", "1", 1);
  c.self = self;
  c.job_path = r->job_path;
  c.extra = r->extra;
  c.n_extra = r->n_extra;
  if (o->node_ip[0]) snprintf(c.node_addr, sizeof c.node_addr, "%s", o->node_ip);
  else gethostname(c.node_addr, sizeof c.node_addr - 1);
  c.master_port = o->master_port ? o->master_port : o->port ? o->port : 29500;
  c.log_dir = o->log_dir;
  c.grace_s = r->grace_s;
  c.trainer_bin = r->trainer_bin;
  c.nproc_per_node = o->nproc_per_node;
  snprintf(c.gpus, sizeof c.gpus, "%s", r->gpus_arg);
  c.start_flag = r->start_flag;
  c.max_restart = r->max_restart_given ? r->max_restart : 3;
  return fl_run_elastic(&r->el, &c);
}

int main(int argc, char **argv) {
  static fl_run_opts o;
  static run r;
  static fl_job job;
  char(*local)[FL_RUN_EP_MAX] = NULL;
  int n_local = 0, node = 0;
  fl_log_set_context("flotilla-run");
  /* A closed terminal pipe must not kill the supervisor (the children get
   * default dispositions back from uv_spawn). */
  signal(SIGPIPE, SIG_IGN);
  fl_run_opts_defaults(&o);
  int rc = parse_args(argc, argv, &o, &r);
  if (rc) return rc < 0 ? 0 : rc;

  if (fl_job_load_file(r.job_path, &job) != FL_OK) return 2;
  if (!o.mode_given) o.mode = job.cluster.mode == FL_MODE_PS ? FL_RUN_PS : FL_RUN_COLLECTIVE;
  o.train_threads = job.train.num_threads;
  r.job = &job;
  r.log_dir = o.log_dir;
  if (r.el.on) return run_elastic(&r, &o, &job);

  rc = 1;
  local = calloc(FL_RUN_MAX_NODES * 4, FL_RUN_EP_MAX);
  r.plan = calloc(1, sizeof *r.plan);
  if (!local || !r.plan) {
    FL_LOGE("out of memory");
    goto done;
  }
  rc = 2;
  if (fl_run_torchrun_opts(&o) != FL_OK ||
      fl_run_local_addrs(local, FL_RUN_MAX_NODES * 4, &n_local) != FL_OK ||
      fl_run_find_node(&o, local, n_local, &node) != FL_OK ||
      fl_run_make_plan(&o, node, r.plan) != FL_OK || make_dirs(o.log_dir) != FL_OK ||
      make_token(&r, &o, &job) != FL_OK || make_run_id(&r, o.n_ips > 1) != FL_OK)
    goto done;
  r.multi_node = o.n_ips > 1;

  rc = 1;
  r.children = calloc((size_t)r.plan->n_procs, sizeof *r.children);
  if (!r.children) goto done;
  /* pservers first: they must listen before the trainers connect. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < r.plan->n_procs; i++) {
      fl_run_proc *p = &r.plan->procs[i];
      if (!p->local || (pass == 0) != (p->role == FL_RUN_PSERVER)) continue;
      child *c = &r.children[r.n_children++];
      c->run = &r;
      c->spec = p;
      c->log_fd = -1;
    }
  for (int i = 0; i < r.n_children; i++)
    if (r.children[i].spec->role == FL_RUN_TRAINER) {
      r.children[i].streamed = 1;
      break;
    }
  if (r.n_children == 0) {
    FL_LOGE("this node (%s) has no process to start", o.ips[node]);
    rc = 2;
    goto done;
  }
  r.tty = isatty(STDOUT_FILENO);
  if (fl_run_progress_new(job.train.epochs,
                          (double)job.train.batch_size * r.plan->n_trainers, &r.progress) != FL_OK)
    goto done;
  if (fl_run_report_new(&r.report) != FL_OK) goto done;
  print_layout(&r, &o);
  if (supervise(&r) == FL_OK) rc = r.exit_code;
done:
  fl_run_progress_free(r.progress);
  fl_run_report_free(r.report);
  if (r.plan) fl_run_plan_clear(r.plan);
  free(r.plan);
  free(r.children);
  free(local);
  return rc;
}
