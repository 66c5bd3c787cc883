/* run_elastic.c - flotilla-run's elastic membership on etcd, as torchrun
 * spells it: --nnodes MIN:MAX --rdzv_backend etcd --rdzv_endpoint H:P
 * --rdzv_id JOB.
 *
 * Why an agent around flotilla-run: a world of N nodes is exactly what
 * flotilla-run's torchrun mode already runs (--nnodes N --node_rank R
 * --master_addr A).  The agent finds N, R and A on etcd and runs one such
 * flotilla-run (a "round") at a time; when the world changes it hands the
 * new round to the running trainers (see "In process" below), or stops the
 * round and starts the next one, whose trainers take the newest state from
 * the rank holding it (each node checkpoints into a train.checkpoint_dir of
 * its own, FLOTILLA_NODE_CHECKPOINTS; the trainer's share_state broadcasts
 * it) and re-shard the rest of the epoch over the new world (the trainer's
 * elastic resume in loop.c).  PServer jobs in async or geo mode run no
 * rounds: see "ps mode" below.
 *
 * Keys, under /flotilla/<JOB>/:
 *   nodes/<id>  one per live node, under the node's lease (value: its
 *               address); <id> is "<address>-<pid>".  Nodes are ordered by
 *               the key's create revision (who came first).
 *   round       "<r> <port> <id>@<addr> ..." the members of world r in rank
 *               order; written only by compare-and-swap on its revision.
 *   failed      "<r>": a trainer of round r failed on some node.
 *   done        set when a round's trainers finished the job.
 * The first node in order proposes round r+1 (its live nodes, at most MAX)
 * when the round is stale - no round yet, the live nodes are not its
 * members, or it failed - and at least MIN nodes are live, none joined for
 * settle_s (or MAX are live), and, after a failure with unchanged
 * membership, lease_s + settle_s passed (so that a dead node's lease has
 * expired).  settle_s batches joins only: a departure (a lease expired, a
 * node left) is the event the survivors were waiting for, and the next
 * round waits only one renewal period more (lease_s / KEEPALIVES_PER_LEASE)
 * without another departure: nodes that died together lose their leases
 * within about that of each other, and go in one round.  There is no
 * Watch: every node polls these keys every poll_s.
 *
 * In process (rdzv_conf in_process=1, the default): when this node is in
 * the next round and runs the trainers of a round of more than one node,
 * and the next round has more than one node too, the agent does not stop
 * them: it writes the round ("<r> <nodes> <node rank> <master addr>
 * <master port>") into <log_dir>/elastic.world (a new file renamed over
 * the old, so a reader sees one whole line; FLOTILLA_ELASTIC_WORLD names
 * it to the trainers), and the trainers stop at an agreed step, or where a
 * collective failed, rebuild their communicator for the new world and go
 * on from the state in their memory (trainer/main.c, loop.c).  A trainer
 * that cannot (it ends with an error) ends its flotilla-run, and the next
 * round starts new processes as before; a dead agent takes its round with
 * it (PR_SET_PDEATHSIG), so a file nobody updates is never waited on for
 * longer than FLOTILLA_ELASTIC_WAIT_S.
 *
 * A node is dead when its lease expires (its flotilla-run stopped renewing
 * for lease_s); a slow node (stopped by SIGSTOP for less than the lease,
 * or a trainer stopped for less than collective_timeout_s) is no change. */
#include <config.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fl_etcd.h"
#include "fl_log.h"
#include "run_internal.h"

#define KEY_MAX 512
#define ROUND_MAX 4096
#define ID_MAX (FL_RUN_EP_MAX + 24)

/* The lease is renewed KEEPALIVES_PER_LEASE times per lease_s.  With the
 * default lease of 6 s that is every second; a renewal that fails (its
 * deadline is a second too) is tried again a second later, and this
 * node's keeper gives the node up only after lease_s without a renewal:
 * a 3-member etcd electing a leader may hold renewals up for 4 s (the
 * worst alignment) without a change, and a node stopped (SIGSTOP) for
 * under 5 s keeps its lease.  A killed node is seen 5..6 s after its
 * death, plus etcd's expiry check (0.5 s) and a poll. */
#define KEEPALIVES_PER_LEASE 6

/* One --rdzv_conf key. */
typedef struct conf_row {
  const char *name;
  size_t off;
  double lo, hi;
} conf_row;

static const conf_row k_conf[] = {
    {"lease_s", offsetof(fl_run_elastic_opts, lease_s), 2, 3600},
    {"settle_s", offsetof(fl_run_elastic_opts, settle_s), 0, 3600},
    {"poll_s", offsetof(fl_run_elastic_opts, poll_s), 0.05, 60},
    {"stop_s", offsetof(fl_run_elastic_opts, stop_s), 1, 3600},
    {"in_process", offsetof(fl_run_elastic_opts, in_process), 0, 1},
    {"chunks", offsetof(fl_run_elastic_opts, chunks), 0, 4096},
};

/* Ownership: nothing kept. */
void fl_run_elastic_defaults(fl_run_elastic_opts *e) {
  memset(e, 0, sizeof *e);
  e->timeout_s = FL_RUN_RDZV_TIMEOUT_S;
  e->lease_s = 6;
  e->settle_s = 3;
  e->poll_s = 0.25;
  e->stop_s = 30;
  e->in_process = 1;
  e->chunks = -1;
}

/* Ownership: nothing kept. */
fl_status fl_run_elastic_nnodes(const char *val, fl_run_elastic_opts *e) {
  char *end;
  long lo = strtol(val, &end, 10), hi = lo;
  if (*end == ':') hi = strtol(end + 1, &end, 10);
  if (end == val || *end || lo < 1 || hi < lo || hi > FL_RUN_MAX_NODES)
    return FL_ERR(FL_EINVAL, "--nnodes %s: want MIN:MAX with 1 <= MIN <= MAX <= %d", val,
                  FL_RUN_MAX_NODES);
  e->min_nodes = (int)lo;
  e->max_nodes = (int)hi;
  return FL_OK;
}

/* Ownership: nothing kept. */
fl_status fl_run_elastic_conf(const char *conf, fl_run_elastic_opts *e) {
  char buf[512], *save = NULL;
  snprintf(buf, sizeof buf, "%s", conf);
  for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '='), *end;
    const conf_row *row = NULL;
    if (eq) *eq = '\0';
    for (size_t i = 0; i < sizeof k_conf / sizeof k_conf[0]; i++)
      if (!strcmp(kv, k_conf[i].name)) row = &k_conf[i];
    if (!eq || !row)
      return FL_ERR(FL_EINVAL, "--rdzv_conf %s: want key=seconds with key lease_s, settle_s, "
                    "poll_s or stop_s, in_process=0|1 or chunks=N", kv);
    double v = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !(v >= row->lo && v <= row->hi))
      return FL_ERR(FL_EINVAL, "--rdzv_conf %s=%s: want a value in [%g, %g]", kv, eq + 1, row->lo,
                    row->hi);
    *(double *)((char *)e + row->off) = v;
  }
  return FL_OK;
}

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

/* ------------------------------------------------------------ the state */

typedef struct member {
  char id[ID_MAX];
  char addr[FL_RUN_EP_MAX];
} member;

typedef struct world {
  int64_t r;        /* round number, 0 = none yet */
  int64_t mod_rev;  /* the round key's mod revision, 0 = absent */
  int port;
  member m[FL_RUN_MAX_NODES];
  int n;
} world;

typedef struct agent {
  const fl_run_elastic_opts *o;
  const fl_run_elastic_child *c;
  fl_etcd *etcd;
  fl_etcd_keeper *keeper;
  int64_t lease;
  char prefix[200];
  char id[ID_MAX];
  world live;         /* live nodes (r unused), in join order */
  world round;        /* the current round as read */
  int64_t failed_r;   /* the last round reported failed */
  int done;
  double last_join;   /* when a node last joined the live set */
  double last_leave;  /* when a node last left it */
  double failed_at;   /* when this node first saw round `failed_r` failed */
  double below_since; /* since when fewer than MIN nodes are live, 0 = not */
  long child;         /* pid of this round's flotilla-run, 0 = none */
  int64_t child_r;    /* its round (the newest handed to it) */
  int child_n;        /* the number of nodes of the round it was started for */
  char world_file[PATH_MAX]; /* in process: <log_dir>/elastic.world */
  int stopping;       /* we asked it to stop */
  int failures;       /* rounds of this node whose trainers failed */
  int slot;           /* ps mode: this node's trainer slot, -1 = none yet */
} agent;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void key(const agent *a, char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s%s", a->prefix, name);
}

static int same_members(const world *x, const world *y) {
  if (x->n != y->n) return 0;
  for (int i = 0; i < x->n; i++)
    if (strcmp(x->m[i].id, y->m[i].id)) return 0;
  return 1;
}

/* The position of id in w, -1 when absent. */
static int find_member(const world *w, const char *id) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->m[i].id, id)) return i;
  return -1;
}

static int by_create(const void *x, const void *y) {
  const fl_etcd_kv *a = x, *b = y;
  return (a->create_revision > b->create_revision) - (a->create_revision < b->create_revision);
}

/* Has w a node that `was` lacks? */
static int gained(const world *w, const world *was) {
  for (int i = 0; i < w->n; i++)
    if (find_member(was, w->m[i].id) < 0) return 1;
  return 0;
}

/* Read the live nodes into a->live (join order). */
static fl_status read_live(agent *a) {
  char k[KEY_MAX];
  fl_etcd_kv *kvs;
  size_t n;
  world w = {0};
  key(a, k, sizeof k, "nodes/");
  FL_TRY(fl_etcd_range(a->etcd, k, 0, &kvs, &n, NULL));
  qsort(kvs, n, sizeof *kvs, by_create);
  for (size_t i = 0; i < n && w.n < FL_RUN_MAX_NODES; i++) {
    snprintf(w.m[w.n].id, ID_MAX, "%s", kvs[i].key + strlen(k));
    snprintf(w.m[w.n].addr, FL_RUN_EP_MAX, "%s", kvs[i].value);
    w.n++;
  }
  fl_etcd_kvs_free(kvs, n);
  if (gained(&w, &a->live)) a->last_join = now_s();
  if (gained(&a->live, &w)) a->last_leave = now_s();
  a->live = w;
  return FL_OK;
}

/* Parse "<r> <port> <id>@<addr> ..." into w. */
static fl_status parse_round(const char *v, world *w) {
  char buf[ROUND_MAX], *save = NULL;
  snprintf(buf, sizeof buf, "%s", v);
  char *t = strtok_r(buf, " ", &save), *p = t ? strtok_r(NULL, " ", &save) : NULL;
  if (!t || !p) return FL_ERR(FL_EPROTO, "etcd round key '%s': want '<r> <port> id@addr ...'", v);
  w->r = strtoll(t, NULL, 10);
  w->port = atoi(p);
  w->n = 0;
  for (char *m = strtok_r(NULL, " ", &save); m && w->n < FL_RUN_MAX_NODES;
       m = strtok_r(NULL, " ", &save)) {
    char *at = strrchr(m, '@');
    if (!at) return FL_ERR(FL_EPROTO, "etcd round key '%s': member '%s' has no @addr", v, m);
    *at = '\0';
    snprintf(w->m[w->n].id, ID_MAX, "%s", m);
    snprintf(w->m[w->n].addr, FL_RUN_EP_MAX, "%s", at + 1);
    w->n++;
  }
  return FL_OK;
}

/* One key's value into out ("" and *rev 0 when absent). */
static fl_status read_key(agent *a, const char *name, char *out, size_t cap, int64_t *rev) {
  char k[KEY_MAX];
  fl_etcd_kv *kvs;
  size_t n;
  key(a, k, sizeof k, name);
  FL_TRY(fl_etcd_range(a->etcd, k, 1, &kvs, &n, NULL));
  out[0] = '\0';
  if (rev) *rev = n ? kvs[0].mod_revision : 0;
  if (n) snprintf(out, cap, "%s", kvs[0].value);
  fl_etcd_kvs_free(kvs, n);
  return FL_OK;
}

/* Read the round, the failure mark and the end mark. */
static fl_status read_state(agent *a) {
  char v[ROUND_MAX];
  int64_t rev;
  FL_TRY(read_live(a));
  FL_TRY(read_key(a, "round", v, sizeof v, &rev));
  if (rev && rev != a->round.mod_rev) FL_TRY(parse_round(v, &a->round));
  a->round.mod_rev = rev;
  FL_TRY(read_key(a, "failed", v, sizeof v, NULL));
  int64_t f = v[0] ? strtoll(v, NULL, 10) : 0;
  if (f != a->failed_r) a->failed_at = now_s();
  a->failed_r = f;
  FL_TRY(read_key(a, "done", v, sizeof v, NULL));
  a->done = v[0] != '\0';
  return FL_OK;
}

/* ------------------------------------------------------------ proposing */

static int round_stale(const agent *a) {
  return a->round.r == 0 || !same_members(&a->round, &a->live) || a->failed_r == a->round.r;
}

/* Should this node propose the next round now? */
static int should_propose(const agent *a) {
  const fl_run_elastic_opts *o = a->o;
  double t = now_s();
  if (a->done || a->live.n < o->min_nodes || strcmp(a->live.m[0].id, a->id)) return 0;
  if (!round_stale(a)) return 0;
  int settled = (t - a->last_join >= o->settle_s &&
                 t - a->last_leave >= o->lease_s / KEEPALIVES_PER_LEASE) ||
                a->live.n >= o->max_nodes;
  /* a failure with the same members: give a dead node's lease time to go */
  if (a->round.r && a->failed_r == a->round.r && same_members(&a->round, &a->live) &&
      t - a->failed_at < o->lease_s + o->settle_s)
    return 0;
  return settled;
}

/* Propose the next round (the live nodes, at most MAX) by compare-and-swap
 * on the round key; when this node's proposal wins, a->round is it. */
static fl_status propose(agent *a) {
  char v[ROUND_MAX], k[KEY_MAX];
  int n = a->live.n < a->o->max_nodes ? a->live.n : a->o->max_nodes, won = 0;
  int64_t r = a->round.r + 1;
  int port = a->c->master_port + (int)(r % 64); /* a fresh port per round */
  size_t o = (size_t)snprintf(v, sizeof v, "%lld %d", (long long)r, port);
  for (int i = 0; i < n && o < sizeof v; i++)
    o += (size_t)snprintf(v + o, sizeof v - o, " %s@%s", a->live.m[i].id, a->live.m[i].addr);
  if (o >= sizeof v) return FL_ERR(FL_EINVAL, "etcd round %lld: too many members", (long long)r);
  key(a, k, sizeof k, "round");
  FL_TRY(fl_etcd_cas(a->etcd, k, a->round.mod_rev, v, &won));
  if (!won) return FL_OK;
  FL_LOGI("elastic: proposed round %lld of %d node(s)", (long long)r, n);
  /* This node takes its round in this poll, not a poll later: it is the
   * new round's rank 0, whose trainers the others' rendezvous waits for.
   * The next read_state sees the new revision and reads the same round. */
  return parse_round(v, &a->round);
}

/* ------------------------------------------------------------ the round */

/* Build the argv of this node's flotilla-run for round w (rank = its
 * position), into args (strings in buf). */
static int round_argv(const agent *a, const world *w, int rank, char **argv, char *buf,
                      size_t cap) {
  const fl_run_elastic_child *c = a->c;
  int n = 0;
  size_t o = 0;
#define ARG(...)                                                   \
  do {                                                             \
    argv[n++] = buf + o;                                           \
    o += (size_t)snprintf(buf + o, cap - o, __VA_ARGS__) + 1;      \
  } while (0)
  ARG("%s", c->self);
  if (w->n > 1) {
    ARG("--nnodes=%d", w->n);
    ARG("--node_rank=%d", rank);
    if (!c->ps) { /* ps trainers meet no trainer 0: they contact the pservers */
      ARG("--master_addr=%s", w->m[0].addr);
      ARG("--master_port=%d", w->port);
    }
    ARG("--node_ip=%s", w->m[rank].addr);
  }
  ARG("--log_dir=%s/round.%lld", c->log_dir, (long long)w->r);
  ARG("--grace=%g", c->grace_s);
  ARG("--trainer_bin=%s", c->trainer_bin);
  if (c->nproc_per_node) ARG("--nproc_per_node=%d", c->nproc_per_node);
  if (c->gpus[0]) ARG("--gpus=%s", c->gpus);
  if (c->start_flag && a->round.r == 1) ARG("%s", c->start_flag);
#undef ARG
  argv[n++] = (char *)c->job_path;
  argv[n++] = "--";
  for (int i = 0; i < c->n_extra && n < 62; i++) argv[n++] = c->extra[i];
  argv[n] = NULL;
  return n;
}

/* Start argv as this node's flotilla-run of a->round. */
static fl_status spawn(agent *a, char **argv) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return FL_ERR(FL_EIO, "elastic: cannot fork round %lld: %s",
                             (long long)a->round.r, strerror(errno));
  if (pid == 0) {
    /* the round dies with this agent */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    execv(argv[0], argv);
    _exit(127);
  }
  a->child = pid;
  a->child_r = a->round.r;
  a->stopping = 0;
  return FL_OK;
}

static fl_status start_round(agent *a, int rank) {
  char *argv[64], buf[8192];
  round_argv(a, &a->round, rank, argv, buf, sizeof buf);
  char r[24];
  snprintf(r, sizeof r, "%lld", (long long)a->round.r);
  setenv("FLOTILLA_ELASTIC_ROUND", r, 1); /* the round its trainers start in */
  FL_TRY(spawn(a, argv));
  a->child_n = a->round.n;
  FL_LOGI("elastic: round %lld: node rank %d of %d, master %s:%d; logs in %s/round.%lld",
          (long long)a->round.r, rank, a->round.n, a->round.m[0].addr, a->round.port,
          a->c->log_dir, (long long)a->round.r);
  return FL_OK;
}

/* Can the running trainers take a->round in their process?  Both worlds
 * have more than one node: their trainers run with torchrun's variables,
 * which the new world only changes. */
static int can_hand_over(const agent *a) {
  return a->world_file[0] && a->child && !a->stopping && a->child_n > 1 && a->round.n > 1 &&
         a->round.r > a->child_r && !a->done;
}

/* Tell this node's running trainers the new round (rank = this node's
 * position in it) through the world file. */
static fl_status hand_over(agent *a, int rank) {
  char tmp[PATH_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s.new", a->world_file);
  FILE *f = fopen(tmp, "w");
  if (!f) return FL_ERR(FL_EIO, "elastic: cannot write %s: %s", tmp, strerror(errno));
  fprintf(f, "%lld %d %d %s %d\n", (long long)a->round.r, a->round.n, rank, a->round.m[0].addr,
          a->round.port);
  if (fclose(f) != 0 || rename(tmp, a->world_file) != 0)
    return FL_ERR(FL_EIO, "elastic: cannot write %s: %s", a->world_file, strerror(errno));
  FL_LOGI("elastic: round %lld: node rank %d of %d, master %s:%d; handed to the running "
          "trainers of round %lld (their logs go on there)", (long long)a->round.r, rank,
          a->round.n, a->round.m[0].addr, a->round.port, (long long)a->child_r);
  a->child_r = a->round.r;
  return FL_OK;
}

/* Reap the round's flotilla-run if it ended: 1 and its status, else 0. */
static int reap(agent *a, int *status) {
  if (!a->child) return 0;
  pid_t p = waitpid((pid_t)a->child, status, WNOHANG);
  if (p <= 0) return 0;
  a->child = 0;
  return 1;
}

/* Ask the round to stop at a step boundary (flotilla-run passes SIGTERM on:
 * the trainers agree on a step, checkpoint and exit), SIGKILL after stop_s. */
static void stop_round(agent *a) {
  int status;
  if (!a->child) return;
  a->stopping = 1;
  kill((pid_t)a->child, SIGTERM);
  double t0 = now_s();
  while (!reap(a, &status)) {
    if (now_s() - t0 > a->o->stop_s) {
      FL_LOGW("elastic: round %lld did not stop within %.0f s: SIGKILL", (long long)a->child_r,
              a->o->stop_s);
      kill((pid_t)a->child, SIGKILL);
      waitpid((pid_t)a->child, &status, 0);
      a->child = 0;
      break;
    }
    usleep(50 * 1000);
  }
}

/* The round's flotilla-run ended with status: the job is done when it
 * ended cleanly and no newer round exists.  Its trainers also end cleanly
 * when a newer round stopped them at a step boundary because another
 * node's agent signalled its trainers first: the round is read afresh
 * before the exit counts as the end of the job. */
static fl_status round_ended(agent *a, int status) {
  char k[KEY_MAX], v[32];
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && read_state(a) == FL_OK &&
      a->round.r > a->child_r) {
    FL_LOGI("elastic: round %lld ended for round %lld", (long long)a->child_r,
            (long long)a->round.r);
    return FL_OK;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    key(a, k, sizeof k, "done");
    FL_TRY(fl_etcd_put(a->etcd, k, "1", 0));
    a->done = 1;
    return FL_OK;
  }
  if (a->stopping) return FL_OK;
  a->failures++;
  FL_LOGW("elastic: round %lld of this node ended with %s %d (failure %d, --max_restart %d)",
          (long long)a->child_r, WIFEXITED(status) ? "status" : "signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), a->failures,
          a->c->max_restart);
  key(a, k, sizeof k, "failed");
  snprintf(v, sizeof v, "%lld", (long long)a->child_r);
  return fl_etcd_put(a->etcd, k, v, 0);
}

/* ------------------------------------------------------------ the loop */

#define JOIN_TRIES 10

/* Keys a node alone in the job removes; ended: only when the job's "done"
 * key says its last run finished (ps slots and chunks of a run that did
 * not finish stay, so a node rejoining it goes on from its epochs). */
static const struct {
  const char *name;
  int ended;
} k_stale[] = {{"round", 0}, {"failed", 0}, {"slots/", 1}, {"chunks/", 1}, {"done", 0}};

/* Alone: whatever rounds the job had are over (an earlier run of it that
 * ended or died); start counting afresh, the checkpoints stay. */
static fl_status forget_ended(agent *a) {
  char k[KEY_MAX], done[32];
  FL_TRY(read_key(a, "done", done, sizeof done, NULL));
  for (size_t i = 0; i < sizeof k_stale / sizeof k_stale[0]; i++) {
    if (k_stale[i].ended && !done[0]) continue;
    key(a, k, sizeof k, k_stale[i].name);
    FL_TRY(fl_etcd_delete_prefix(a->etcd, k, NULL));
  }
  return FL_OK;
}

/* Join: a lease, the node key under it, the keeper.  The first call is
 * tried JOIN_TRIES times, a second apart (etcd busy or electing a leader:
 * each failure is logged). */
static fl_status join(agent *a) {
  char k[KEY_MAX];
  fl_status st = FL_EIO;
  FL_TRY(fl_etcd_connect(a->o->endpoint, 5, &a->etcd));
  for (int i = 0; i < JOIN_TRIES && st != FL_OK && !g_signal; i++) {
    if (i) sleep(1);
    st = fl_etcd_lease_grant(a->etcd, (int64_t)a->o->lease_s, &a->lease);
  }
  FL_TRY(st);
  snprintf(k, sizeof k, "%snodes/%s", a->prefix, a->id);
  FL_TRY(fl_etcd_put(a->etcd, k, a->c->node_addr, a->lease));
  FL_TRY(fl_etcd_keeper_start(a->o->endpoint, a->lease, (int64_t)a->o->lease_s,
                              a->o->lease_s / KEEPALIVES_PER_LEASE, &a->keeper));
  FL_LOGI("elastic: node %s joined job %s at etcd %s (%d..%d nodes, lease %.0f s)", a->id,
          a->o->id, a->o->endpoint, a->o->min_nodes, a->o->max_nodes, a->o->lease_s);
  FL_TRY(read_live(a));
  if (a->live.n == 1 && !strcmp(a->live.m[0].id, a->id)) FL_TRY(forget_ended(a));
  return FL_OK;
}

/* Fewer than MIN nodes live for --rdzv_timeout: 1 and *exit_code set. */
static int below_min(agent *a, int *exit_code) {
  double t = now_s();
  if (a->live.n >= a->o->min_nodes) a->below_since = 0;
  else if (!a->below_since) a->below_since = t;
  if (!a->below_since || t - a->below_since < a->o->timeout_s) return 0;
  FL_LOGE("elastic: fewer than %d nodes in job %s for %.0f s (--rdzv_timeout): stopping; the "
          "newest checkpoint stays for a later run", a->o->min_nodes, a->o->id, a->o->timeout_s);
  *exit_code = FL_RUN_EXIT_BELOW_MIN;
  return 1;
}

/* One poll; *exit_code >= 0 when the agent is to end with it. */
static fl_status step(agent *a, int *exit_code) {
  int status;
  /* etcd errors here are logged and outlived: a leader election, a member
   * restarting; the lease keeper decides when this node is cut off */
  if (reap(a, &status) && round_ended(a, status) != FL_OK)
    FL_LOGW("elastic: the end of round %lld is not on etcd; going on", (long long)a->child_r);
  if (!fl_etcd_keeper_alive(a->keeper)) {
    *exit_code = FL_RUN_EXIT_LEASE_LOST;
    return FL_OK;
  }
  if (read_state(a) != FL_OK) return FL_OK;
  if (a->done && !a->child) {
    *exit_code = 0;
    return FL_OK;
  }
  if (a->failures > a->c->max_restart) {
    FL_LOGE("elastic: this node's trainers failed %d times (--max_restart %d): leaving the job",
            a->failures, a->c->max_restart);
    *exit_code = 1;
    return FL_OK;
  }
  if (below_min(a, exit_code)) return FL_OK;
  if (should_propose(a) && propose(a) != FL_OK) return FL_OK; /* logged; next poll */
  if (a->round.r > a->child_r || (a->child && a->round.r == a->child_r && round_stale(a) &&
                                  a->failed_r == a->round.r)) {
    int rank = find_member(&a->round, a->id);
    if (rank >= 0 && can_hand_over(a) && hand_over(a, rank) == FL_OK) return FL_OK;
    if (a->child) stop_round(a);
    if (rank >= 0 && a->round.r > a->child_r && !a->done) FL_TRY(start_round(a, rank));
    else if (rank < 0) a->child_r = a->round.r; /* a spare: wait for the next round */
  }
  return FL_OK;
}

/* ------------------------------------------------------------ ps mode */

/* PServer jobs in async or geo mode need no rounds: the pservers run apart
 * (--servers, started with FLOTILLA_PS_ELASTIC=1 for MAX x nproc_per_node
 * trainers) and keep the model; each node takes a trainer slot s in
 * [0, MAX) - key slots/<s> = its id, by compare-and-swap - and runs the
 * trainers s x nproc .. of MAX x nproc (flotilla-run --mode ps --nnodes MAX
 * --node_rank s, no --master_addr) until they complete.  A slot whose node
 * is no longer live is free: a joining node takes it, and its trainers
 * register with the same ids and go on from the steps the pservers hold
 * for them.  The data: with chunks (the default) the trainers claim each
 * epoch's chunks on etcd under chunks/ (trainer/fl_chunks.h; this agent
 * only names the keys in FLOTILLA_ELASTIC_CHUNKS) and end when the last
 * epoch's are done, so the first node whose trainers end sets "done" and
 * the job is over; with chunks=0 the slot is its share of the data, a node
 * that finished marks its slot "done ..." (never taken again), and with
 * every slot done the job is (a->done).  Nodes come and go without
 * stopping the others. */
static fl_status claim_slot(agent *a) {
  char k[KEY_MAX], name[32], v[ROUND_MAX];
  int64_t rev;
  int done = 0;
  for (int s = 0; s < a->o->max_nodes && a->slot < 0; s++) {
    int won = 0;
    snprintf(name, sizeof name, "slots/%d", s);
    FL_TRY(read_key(a, name, v, sizeof v, &rev));
    done += rev && !strncmp(v, "done ", 5);
    if (rev && (!strncmp(v, "done ", 5) || find_member(&a->live, v) >= 0) && strcmp(v, a->id))
      continue;
    key(a, k, sizeof k, name);
    if (!strcmp(v, a->id)) won = 1;
    else FL_TRY(fl_etcd_cas(a->etcd, k, rev, a->id, &won));
    if (won) a->slot = s;
  }
  a->done = done == a->o->max_nodes;
  return FL_OK;
}

/* The number of chunks per epoch, 0 when the slots keep their shares. */
static int chunk_count(const agent *a) {
  return a->o->chunks < 0 ? 4 * a->o->max_nodes : (int)a->o->chunks;
}

/* FLOTILLA_ELASTIC_CHUNKS for this node's trainers (trainer/fl_chunks.h):
 * the chunks per epoch, the lease of their claims, etcd, the keys. */
static fl_status chunks_env(agent *a) {
  char v[1024];
  if (!chunk_count(a)) return FL_OK;
  int n = snprintf(v, sizeof v, "%d %.0f %s %schunks/", chunk_count(a), a->o->lease_s,
                   a->o->endpoint, a->prefix);
  if (n < 0 || (size_t)n >= sizeof v)
    return FL_ERR(FL_EINVAL, "elastic ps: --rdzv_endpoint and --rdzv_id are too long for "
                  "FLOTILLA_ELASTIC_CHUNKS (%zu bytes at most)", sizeof v - 1);
  setenv("FLOTILLA_ELASTIC_CHUNKS", v, 1);
  return FL_OK;
}

/* This node's flotilla-run for its slot (a->round.r counts its starts). */
static fl_status start_slot(agent *a) {
  const fl_run_elastic_child *c = a->c;
  char *argv[64], buf[8192], arg[sizeof c->servers + 16];
  a->round.r++;
  a->round.port = c->master_port;
  a->round.n = a->o->max_nodes;
  for (int i = 0; i < a->round.n; i++)
    snprintf(a->round.m[i].addr, FL_RUN_EP_MAX, "%s", c->node_addr);
  FL_TRY(chunks_env(a));
  int n = round_argv(a, &a->round, a->slot, argv, buf, sizeof buf);
  memmove(argv + 3, argv + 1, (size_t)n * sizeof *argv); /* the NULL too */
  argv[1] = "--mode=ps";
  snprintf(arg, sizeof arg, "--servers=%s", c->servers);
  argv[2] = arg;
  FL_TRY(spawn(a, argv));
  FL_LOGI("elastic ps: slot %d of %d (trainer ids from %d); logs in %s/round.%lld", a->slot,
          a->round.n, a->slot * (c->nproc_per_node ? c->nproc_per_node : 1), c->log_dir,
          (long long)a->round.r);
  return FL_OK;
}

/* The slot's flotilla-run ended: done (the slot is marked so), a stop we
 * asked for, or a failure (started again, up to --max_restart). */
static fl_status slot_ended(agent *a, int status, int *exit_code) {
  char k[KEY_MAX], v[ID_MAX + 8];
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    snprintf(k, sizeof k, "%sslots/%d", a->prefix, a->slot);
    snprintf(v, sizeof v, "done %s", a->id);
    *exit_code = 0;
    FL_TRY(fl_etcd_put(a->etcd, k, v, 0));
    /* chunks: trainers end only when the last epoch's chunks are all done */
    key(a, k, sizeof k, "done");
    return chunk_count(a) ? fl_etcd_put(a->etcd, k, "1", 0) : FL_OK;
  }
  if (a->stopping) return FL_OK;
  a->failures++;
  FL_LOGW("elastic ps: the trainers of slot %d ended with %s %d (failure %d, --max_restart %d)",
          a->slot, WIFEXITED(status) ? "status" : "signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), a->failures,
          a->c->max_restart);
  return FL_OK;
}

/* Chunks: the job is done once a node's trainers ended after the last
 * epoch (the "done" key). */
static fl_status read_state_ps(agent *a) {
  char v[32];
  FL_TRY(read_key(a, "done", v, sizeof v, NULL));
  a->done = v[0] != '\0';
  return FL_OK;
}

/* One poll of ps mode; *exit_code >= 0 when the agent is to end with it. */
static fl_status step_ps(agent *a, int *exit_code) {
  int status;
  if (reap(a, &status) && slot_ended(a, status, exit_code) != FL_OK)
    FL_LOGW("elastic ps: slot %d's end is not on etcd; going on", a->slot);
  if (*exit_code >= 0) return FL_OK;
  if (!fl_etcd_keeper_alive(a->keeper)) {
    *exit_code = FL_RUN_EXIT_LEASE_LOST;
    return FL_OK;
  }
  if (a->failures > a->c->max_restart) {
    FL_LOGE("elastic ps: this node's trainers failed %d times (--max_restart %d): leaving the job",
            a->failures, a->c->max_restart);
    *exit_code = 1;
    return FL_OK;
  }
  if (read_live(a) != FL_OK || below_min(a, exit_code) || a->child) return FL_OK;
  if (a->live.n < a->o->min_nodes) return FL_OK; /* waiting for MIN nodes */
  if (chunk_count(a) && read_state_ps(a) != FL_OK) return FL_OK; /* logged; next poll */
  if (a->slot < 0 && !a->done && claim_slot(a) != FL_OK) return FL_OK; /* logged; next poll */
  if (a->done) {
    FL_LOGI("elastic ps: %s; nothing left to join", chunk_count(a)
                                                         ? "every chunk of the last epoch is done"
                                                         : "every slot's trainers completed");
    *exit_code = 0;
    return FL_OK;
  }
  if (a->slot < 0) return FL_OK; /* MAX slots taken: a spare until one frees */
  return start_slot(a);
}

/* In process: the world file the trainers watch (none left from an
 * earlier run), and how long a trainer whose collective failed waits in it
 * for the next round: a dead node's lease, the settle time, polls. */
static void world_file_setup(agent *a) {
  char dir[PATH_MAX], v[32];
  if (a->c->ps || a->o->in_process < 0.5) return;
  if (mkdir(a->c->log_dir, 0755) != 0 && errno != EEXIST) return; /* flotilla-run says why */
  if (!realpath(a->c->log_dir, dir)) return;
  snprintf(a->world_file, sizeof a->world_file, "%.*s/elastic.world", PATH_MAX - 16, dir);
  unlink(a->world_file);
  setenv("FLOTILLA_ELASTIC_WORLD", a->world_file, 1);
  snprintf(v, sizeof v, "%.0f", 2 * a->o->lease_s + a->o->settle_s + 10 * a->o->poll_s + 5);
  setenv("FLOTILLA_ELASTIC_WAIT_S", v, 1);
}

static void leave(agent *a) {
  if (a->child) stop_round(a);
  if (a->keeper) fl_etcd_keeper_stop(a->keeper);
  if (a->etcd && a->lease) fl_etcd_lease_revoke(a->etcd, a->lease); /* logged; it expires anyway */
  fl_etcd_close(a->etcd);
}

/* Ownership: nothing kept; returns flotilla-run's exit status. */
int fl_run_elastic(const fl_run_elastic_opts *o, const fl_run_elastic_child *c) {
  static agent a;
  int exit_code = -1;
  memset(&a, 0, sizeof a);
  a.o = o;
  a.c = c;
  snprintf(a.prefix, sizeof a.prefix, "/flotilla/%s/", o->id);
  snprintf(a.id, sizeof a.id, "%s-%ld", c->node_addr, (long)getpid());
  a.last_join = a.below_since = now_s();
  a.slot = -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  world_file_setup(&a);
  fl_status st = join(&a);
  while (st == FL_OK && exit_code < 0 && !g_signal) {
    st = c->ps ? step_ps(&a, &exit_code) : step(&a, &exit_code);
    usleep((useconds_t)(o->poll_s * 1e6));
  }
  if (exit_code < 0) exit_code = st != FL_OK ? 1 : 128 + g_signal;
  leave(&a);
  if (exit_code == 0) FL_LOGI("elastic: job %s done", o->id);
  return exit_code;
}
