/* core.c - a pserver's parameter state and update rules: registration and
 * heartbeats of trainers, dense blocks with the sync / async / geo rules,
 * sparse tables, barriers, statistics and checkpoints.  No gRPC here (see
 * fl_ps.h for the rules).
 *
 * Locking: c->mu guards the trainer registry, the layout's creation, the
 * table list and the barriers; each dense block and each sparse table has
 * its own mutex, so pushes to different blocks run in parallel.  Order:
 * c->mu before a block or table lock, block locks in ascending id.  The set
 * of trainers a sync step waits for is kept in atomic bit words as well,
 * written before blocks are looked at again after a membership change, so
 * that a push and a death racing each other cannot both miss the step. */
#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fl_cluster.h"
#include "fl_log.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"

#define MAX_TABLES 64
#define MAX_BARRIERS 64
#define BARRIER_NAME_MAX 128
#define PARAM_NAME_MAX 256
#define MAX_NUMEL (1ULL << 40)
#define MAX_SEQ 64

enum { T_UNKNOWN = 0, T_LIVE, T_DEAD, T_DONE };

typedef struct ps_trainer {
  int state;
  uint64_t incarnation;
  double last_seen;
  int64_t step;
} ps_trainer;

typedef struct ps_block {
  pthread_mutex_t mu;
  uint32_t id;
  uint64_t n;
  const char *name; /* of its parameter */
  float *value, *s1, *s2;
  int initialized;
  int64_t step;     /* sync: the step it waits for; others: pushes applied */
  int64_t updates;  /* optimizer steps applied (Adam's bias correction) */
  int64_t pend_step;
  int n_pend;
  uint8_t *have;    /* [num_trainers] */
  float **pend;     /* [num_trainers] gradient buffers, made on first use */
  float *acc;
  int64_t *last;    /* [num_trainers] async/geo: last step taken */
  float *prev;      /* sync: the value before the last step applied ... */
  int64_t prev_step; /* ... i.e. as of this step (-1: none) */
} ps_block;

typedef struct ps_table {
  fl_ps_table *t;
  pthread_mutex_t mu;
  int64_t *cur_step; /* [num_trainers] push dedup: step and the parts seen */
  uint64_t *seqmask;
  uint64_t evicted_logged;
} ps_table;

typedef struct ps_barrier {
  char name[BARRIER_NAME_MAX];
  int used, done;
  uint64_t seq;
  int nv;
  uint8_t *arrived;  /* [num_trainers] */
  uint64_t *taken;   /* [num_trainers] incarnation that was answered this
                        round's result, 0: not answered */
  double *vals;      /* [num_trainers * FL_PS_BARRIER_MAX_VALUES] */
  int64_t *mins;     /* [num_trainers] */
  double sums[FL_PS_BARRIER_MAX_VALUES];
  int64_t min;
  int count;
} ps_barrier;

struct fl_ps_core {
  fl_ps_core_opts o;
  fl_ps_mode mode;
  fl_optim_hparams dense_hp, sparse_hp;
  const char *exclude[FL_JOB_MAX_LIST];
  fl_lr_schedule lr;
  int nt;
  uint64_t incarnation;
  double start;

  pthread_mutex_t cb_mu; /* guards the progress and gate hooks (see notify) */
  void (*on_progress)(void *);
  void *progress_ctx;
  void (*on_gate)(void *);
  void *gate_ctx;
  /* sync: a block whose pending step is this one holds it (does not apply
   * it) until the gate moves: every block of the server then stands at this
   * step, and a checkpoint taken there holds exactly it, the same step on
   * every shard (fl_ps_core_set_gate).  -1: no gate. */
  _Atomic int64_t gate;

  pthread_mutex_t mu;
  ps_trainer tr[FL_CLUSTER_MAX_TRAINERS];
  _Atomic uint64_t counted[FL_CLUSTER_MAX_TRAINERS / 64];
  _Atomic uint64_t parked[FL_CLUSTER_MAX_TRAINERS / 64]; /* waiting in a barrier */

  _Atomic(fl_ps_layout *) layout; /* set once */
  char layout_from[FL_JOB_PATH_MAX + 64]; /* who declared it, for messages */
  char **names;
  ps_block *blocks;   /* the blocks placed here */
  size_t n_my;
  uint32_t *local;    /* global block id -> index in blocks, or UINT32_MAX */

  ps_table tables[MAX_TABLES];
  _Atomic size_t n_tables;

  ps_barrier barriers[MAX_BARRIERS];
  uint64_t barrier_seq;

  _Atomic int64_t next_step; /* async/geo: one past the highest step pushed */
  _Atomic int64_t horizon;   /* highest step a trainer declared in Register */
  _Atomic uint64_t pushes, pulls, bytes_in, bytes_out, duplicates, invalid, dense_updates,
      checkpoints;
};

double fl_ps_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

fl_ps_mode fl_ps_mode_of(const fl_job *job) {
  return (fl_ps_mode)fl_proto_mode(job->strategy.a_sync, job->strategy.a_sync_configs.k_steps);
}

const char *fl_ps_mode_name(fl_ps_mode m) { return fl_proto_mode_name((int)m); }

static void set_counted(fl_ps_core *c, int t, int on) {
  uint64_t bit = 1ULL << (t % 64);
  if (on) atomic_fetch_or(&c->counted[t / 64], bit);
  else atomic_fetch_and(&c->counted[t / 64], ~bit);
}

static int is_counted(fl_ps_core *c, int t) {
  return (int)((atomic_load(&c->counted[t / 64]) >> (t % 64)) & 1u);
}

static void set_parked(fl_ps_core *c, int t, int on) {
  uint64_t bit = 1ULL << (t % 64);
  if (on) atomic_fetch_or(&c->parked[t / 64], bit);
  else atomic_fetch_and(&c->parked[t / 64], ~bit);
}

static int is_parked(fl_ps_core *c, int t) {
  return (int)((atomic_load(&c->parked[t / 64]) >> (t % 64)) & 1u);
}

static _Thread_local char t_last_error[512];

const char *fl_ps_core_last_error(void) { return t_last_error; }

static fl_status bad(fl_ps_core *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A rejected request: counted, logged at warn level, and kept for the
 * service to send back as the status details (the client gets
 * INVALID_ARGUMENT; the server itself is fine). */
static fl_status bad(fl_ps_core *c, const char *fmt, ...) {
  va_list ap;
  atomic_fetch_add(&c->invalid, 1);
  va_start(ap, fmt);
  vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
  va_end(ap);
  FL_LOGW("rejected request: %s", t_last_error);
  return FL_EINVAL;
}

fl_status fl_ps_core_create(const fl_ps_core_opts *o, fl_ps_core **out) {
  fl_ps_core *c;
  fl_status st;

  *out = NULL;
  if (o->num_trainers < 1 || o->num_trainers > FL_CLUSTER_MAX_TRAINERS || o->n_servers < 1 ||
      o->server_index < 0 || o->server_index >= o->n_servers)
    return FL_ERR(FL_EINVAL, "pserver: %d trainers, server %d of %d: out of range",
                  o->num_trainers, o->server_index, o->n_servers);
  c = calloc(1, sizeof *c);
  if (!c) return FL_ERR(FL_ENOMEM, "pserver: out of memory");
  c->o = *o;
  if (!c->o.max_sparse_keys) c->o.max_sparse_keys = 1u << 20;
  if (!c->o.max_dense_elements) c->o.max_dense_elements = FL_PS_DEFAULT_MAX_DENSE;
  c->mode = fl_ps_mode_of(&c->o.job);
  c->nt = o->num_trainers;
  if ((st = fl_job_pserver_hparams(&c->o.job, &c->dense_hp, &c->sparse_hp, c->exclude)) != FL_OK) {
    free(c);
    return st;
  }
  c->dense_hp.num_threads = 1; /* blocks are applied by several CQ threads at once */
  if (!fl_proto_sparse_optim_ok(c->sparse_hp.kind)) {
    fl_optim_kind k = c->sparse_hp.kind;
    free(c);
    return FL_ERR(FL_EINVAL, "pserver.sparse.optimizer: %s (" FL_PROTO_SPARSE_OPTIMS " only)",
                  fl_optim_kind_name(k));
  }
  /* Until the trainers say how long the run is, a schedule over a very long
   * run (constant schedules do not care). */
  if ((st = fl_job_lr_schedule_for(&c->o.job, &c->o.job.pserver.optimizer, INT64_C(1) << 40,
                                   &c->lr)) != FL_OK) {
    free(c);
    return st;
  }
  c->incarnation = fl_ps_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^
                               (uint64_t)(uintptr_t)c) | 1u;
  c->start = fl_ps_now();
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->cb_mu, NULL);
  c->on_progress = o->on_progress;
  c->progress_ctx = o->progress_ctx;
  for (int t = 0; t < c->nt; t++) set_counted(c, t, 1);
  atomic_init(&c->gate, -1);
  *out = c;
  return FL_OK;
}

static void free_blocks(ps_block *b, size_t n, int nt) {
  for (size_t i = 0; b && i < n; i++) {
    pthread_mutex_destroy(&b[i].mu);
    free(b[i].value);
    free(b[i].s1);
    free(b[i].s2);
    free(b[i].have);
    if (b[i].pend)
      for (int t = 0; t < nt; t++) free(b[i].pend[t]);
    free(b[i].pend);
    free(b[i].acc);
    free(b[i].last);
    free(b[i].prev);
  }
  free(b);
}

static void free_names(char **names, size_t n) {
  for (size_t i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

void fl_ps_core_free(fl_ps_core *c) {
  fl_ps_layout *l;
  if (!c) return;
  l = atomic_load(&c->layout);
  free_blocks(c->blocks, c->n_my, c->nt);
  free_names(c->names, l ? l->n_params : 0);
  free(c->local);
  fl_ps_layout_free(l);
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    fl_ps_table_free(c->tables[i].t);
    pthread_mutex_destroy(&c->tables[i].mu);
    free(c->tables[i].cur_step);
    free(c->tables[i].seqmask);
  }
  for (int i = 0; i < MAX_BARRIERS; i++) {
    free(c->barriers[i].arrived);
    free(c->barriers[i].taken);
    free(c->barriers[i].vals);
    free(c->barriers[i].mins);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->cb_mu);
  free(c);
}

/* Call the progress hook (no core lock held).  The hook runs under cb_mu,
 * so once fl_ps_core_set_progress returns no old hook is still running. */
static void notify(fl_ps_core *c) {
  pthread_mutex_lock(&c->cb_mu);
  if (c->on_progress) c->on_progress(c->progress_ctx);
  pthread_mutex_unlock(&c->cb_mu);
}

void fl_ps_core_set_progress(fl_ps_core *c, void (*fn)(void *), void *ctx) {
  pthread_mutex_lock(&c->cb_mu);
  c->on_progress = fn;
  c->progress_ctx = ctx;
  pthread_mutex_unlock(&c->cb_mu);
}

/* ---------------------------------------------------------------- layout */

/* Make the layout (from numel and names) and this server's blocks.
 * c->mu held, no layout yet. */
static fl_status make_layout(fl_ps_core *c, const uint64_t *numel, char **names, size_t np) {
  fl_ps_layout *l = NULL;
  ps_block *blocks = NULL;
  uint32_t *local = NULL;
  size_t n_my = 0, k = 0;
  fl_status st;

  if ((st = fl_ps_layout_build(numel, np, c->o.job.pserver.dense_block_size, c->o.n_servers,
                               &l)) != FL_OK)
    return st;
  {
    /* Refuse what this server cannot or may not hold before reserving any
     * of it: values and optimizer state, fp32. */
    uint64_t mine = l->server_load[c->o.server_index];
    uint64_t per = sizeof(float) * (1u + (unsigned)fl_optim_state_count(c->dense_hp.kind));
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : UINT64_MAX;
    if (mine > c->o.max_dense_elements) {
      fl_ps_layout_free(l);
      return bad(c, "dense layout of %zu parameters puts %" PRIu64 " floats on this server, over "
                 "its limit of %" PRIu64 " (flotilla-pserver --max_dense_elements)",
                 np, mine, c->o.max_dense_elements);
    }
    if (mine > phys / per) {
      fl_ps_layout_free(l);
      return bad(c, "dense layout of %zu parameters puts %" PRIu64 " floats on this server: %"
                 PRIu64 " bytes with the optimizer state, over this host's %" PRIu64
                 " bytes of memory", np, mine, mine * per, phys);
    }
  }
  for (size_t b = 0; b < l->n_blocks; b++)
    if (l->blocks[b].server == c->o.server_index) n_my++;
  local = malloc(l->n_blocks * sizeof *local);
  blocks = calloc(n_my ? n_my : 1, sizeof *blocks);
  if (!local || !blocks) goto nomem;
  for (size_t b = 0; b < l->n_blocks; b++) {
    ps_block *x;
    local[b] = UINT32_MAX;
    if (l->blocks[b].server != c->o.server_index) continue;
    x = &blocks[k];
    local[b] = (uint32_t)k++;
    pthread_mutex_init(&x->mu, NULL);
    x->id = (uint32_t)b;
    x->n = l->blocks[b].n;
    x->name = names[l->blocks[b].param];
    x->value = calloc(x->n, sizeof(float));
    if (fl_optim_state_count(c->dense_hp.kind) >= 1) x->s1 = calloc(x->n, sizeof(float));
    if (fl_optim_state_count(c->dense_hp.kind) >= 2) x->s2 = calloc(x->n, sizeof(float));
    x->have = calloc((size_t)c->nt, 1);
    x->pend = calloc((size_t)c->nt, sizeof *x->pend);
    x->last = malloc((size_t)c->nt * sizeof *x->last);
    x->prev_step = -1;
    /* A trainer that rejoins while a sync step is applied on some blocks
     * and not yet on others computes that step from the values before it. */
    if (c->mode == FL_PS_SYNC && !(x->prev = malloc(x->n * sizeof(float)))) goto nomem;
    if (!x->value || (fl_optim_state_count(c->dense_hp.kind) >= 1 && !x->s1) ||
        (fl_optim_state_count(c->dense_hp.kind) >= 2 && !x->s2) || !x->have || !x->pend ||
        !x->last)
      goto nomem;
    for (int t = 0; t < c->nt; t++) x->last[t] = -1;
  }
  c->blocks = blocks;
  c->n_my = n_my;
  c->local = local;
  c->names = names;
  atomic_store(&c->layout, l);
  FL_LOGI("dense layout: %zu parameters in %zu blocks of <= %" PRIu64 " floats; %zu blocks "
          "(%" PRIu64 " floats) on this server",
          np, l->n_blocks, l->block_size, n_my, l->server_load[c->o.server_index]);
  return FL_OK;
nomem:
  free_blocks(blocks, k, c->nt);
  free(local);
  fl_ps_layout_free(l);
  return FL_ERR(FL_ENOMEM, "pserver: out of memory for the dense blocks");
}

static ps_block *block_of(fl_ps_core *c, uint32_t id) {
  fl_ps_layout *l = atomic_load(&c->layout);
  if (!l || id >= l->n_blocks || c->local[id] == UINT32_MAX) return NULL;
  return &c->blocks[c->local[id]];
}

static ps_table *table_of(fl_ps_core *c, const char *name) {
  size_t n = atomic_load(&c->n_tables);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(fl_ps_table_name(c->tables[i].t), name)) return &c->tables[i];
  return NULL;
}

fl_ps_table *fl_ps_core_table(fl_ps_core *c, const char *name) {
  ps_table *t = table_of(c, name);
  return t ? t->t : NULL;
}

/* Add a sparse table (c->mu held). */
static fl_status add_table(fl_ps_core *c, const char *name, uint32_t dim) {
  size_t n = atomic_load(&c->n_tables);
  ps_table *pt = &c->tables[n];
  fl_ps_table_opts to;
  fl_status st;

  if (n == MAX_TABLES) return bad(c, "more than %d sparse tables", MAX_TABLES);
  memset(&to, 0, sizeof to);
  to.name = name;
  to.dim = dim;
  to.max_rows = c->o.job.pserver.sparse.max_rows;
  to.init_range = c->o.job.pserver.sparse.init_range;
  to.seed = c->o.job.train.seed;
  to.hp = c->sparse_hp;
  to.lr = c->o.job.pserver.sparse.optimizer.lr;
  memset(pt, 0, sizeof *pt);
  if ((st = fl_ps_table_create(&to, &pt->t)) != FL_OK) return st;
  pt->cur_step = malloc((size_t)c->nt * sizeof *pt->cur_step);
  pt->seqmask = calloc((size_t)c->nt, sizeof *pt->seqmask);
  if (!pt->cur_step || !pt->seqmask) {
    fl_ps_table_free(pt->t);
    free(pt->cur_step);
    free(pt->seqmask);
    return FL_ERR(FL_ENOMEM, "pserver: out of memory for table %s", name);
  }
  for (int t = 0; t < c->nt; t++) pt->cur_step[t] = -1;
  pthread_mutex_init(&pt->mu, NULL);
  atomic_store(&c->n_tables, n + 1);
  FL_LOGI("sparse table %s: dim %u, %s, at most %lld rows on this server", name, dim,
          fl_optim_kind_name(c->sparse_hp.kind), (long long)to.max_rows);
  return FL_OK;
}

/* ------------------------------------------------------------ sync rule */

/* A sync step waits for every counted trainer that is not parked in a
 * barrier: a trainer waiting in a barrier trains no step meanwhile, so
 * waiting for it could deadlock against a trainer that must finish its
 * steps before it reaches the same barrier (uneven work, a rejoined
 * trainer). */
static int all_counted_pushed(fl_ps_core *c, const ps_block *b) {
  for (int t = 0; t < c->nt; t++)
    if (is_counted(c, t) && !is_parked(c, t) && !b->have[t]) return 0;
  return 1;
}

/* b->mu held: its pending step can be applied now (every push in, and the
 * block does not stand at the gate's step).  A block moved forward to the
 * gate's step by trainers ahead of it (after a restart from a checkpoint)
 * never stood there: it goes on, and the gate moves past it
 * (pserver/main.c gate_check), else it would wait for a checkpoint of a
 * step it does not hold. */
static int may_apply(fl_ps_core *c, const ps_block *b) {
  int64_t g = atomic_load(&c->gate);
  return !(b->pend_step == g && b->step == g) && all_counted_pushed(c, b);
}

/* Call the gate hook (no core lock held) when every block stands at the
 * gate's step (called when a block came to stand there). */
static void gate_reached(fl_ps_core *c) {
  if (fl_ps_core_at_gate(c) <= 0) return;
  pthread_mutex_lock(&c->cb_mu);
  if (c->on_gate) c->on_gate(c->gate_ctx);
  pthread_mutex_unlock(&c->cb_mu);
}

/* Sum the pushes of b's pending step in trainer-id order, average, run the
 * optimizer once.  b->mu held, b->n_pend > 0. */
static void sync_apply(fl_ps_core *c, ps_block *b) {
  const float *g = NULL;
  int cnt = 0;
  fl_optim_tensor x;
  fl_status st;

  for (int t = 0; t < c->nt; t++) {
    if (!b->have[t]) continue;
    if (cnt == 0) {
      g = b->pend[t];
    } else {
      const float *p = b->pend[t];
      if (cnt == 1) {
        memcpy(b->acc, g, b->n * sizeof(float));
        g = b->acc;
      }
      for (uint64_t i = 0; i < b->n; i++) b->acc[i] += p[i];
    }
    cnt++;
  }
  if (cnt > 1) {
    float inv = 1.0f / (float)cnt;
    for (uint64_t i = 0; i < b->n; i++) b->acc[i] *= inv;
  }
  memcpy(b->prev, b->value, b->n * sizeof(float));
  b->prev_step = b->pend_step;
  x.name = b->name;
  x.param = b->value;
  x.grad = g;
  x.state1 = b->s1;
  x.state2 = b->s2;
  x.n = b->n;
  st = fl_optim_step(&c->dense_hp, &x, 1, fl_lr_at(&c->lr, b->pend_step), b->updates + 1);
  if (st != FL_OK)
    FL_LOGE("block %u (%s): optimizer step %lld failed: %s", b->id, b->name,
            (long long)b->pend_step, fl_strerror(st));
  else
    b->updates++;
  atomic_fetch_add(&c->dense_updates, 1);
  b->step = b->pend_step + 1;
  b->n_pend = 0;
  memset(b->have, 0, (size_t)c->nt);
}

/* Look at every block and barrier again after the counted set changed,
 * then wake the service.  No lock held. */
static void reevaluate(fl_ps_core *c);

/* ----------------------------------------------------------- registration */

fl_status fl_ps_core_register(fl_ps_core *c, const Flotilla__RegisterRequest *req,
                              Flotilla__RegisterResponse *resp) {
  int t = req->trainer_id;
  fl_ps_layout *l;
  uint64_t *numel = NULL;
  char **names = NULL;
  fl_status st = FL_OK;
  int joined = 0;

  if (t < 0 || t >= c->nt)
    return bad(c, "register: trainer id %d not in [0, %d)", t, c->nt);
  if (req->num_trainers != c->nt || req->num_servers != c->o.n_servers ||
      req->server_index != c->o.server_index)
    return bad(c, "register: trainer %d expects %d trainers and server %d of %d; this is "
               "server %d of %d for %d trainers",
               t, req->num_trainers, req->server_index, req->num_servers, c->o.server_index,
               c->o.n_servers, c->nt);
  if ((int)req->mode != (int)c->mode)
    return bad(c, "register: trainer %d runs PS mode %d, this server %s", t, (int)req->mode,
               fl_ps_mode_name(c->mode));
  /* A trainer of another run (another job on the same ports sharing the
   * token, or a stale process) must not join this one. */
  if (c->o.run_id[0] && req->run_id && req->run_id[0] &&
      (strcmp(req->run_id, c->o.run_id) != 0 ||
       (req->job_hash && c->o.job_hash && req->job_hash != c->o.job_hash)))
    return bad(c, "register: trainer %d belongs to run %s (job %016" PRIx64 "), this pserver "
               "serves run %s (job %016" PRIx64 "): another job on the same address?", t,
               req->run_id, req->job_hash, c->o.run_id, c->o.job_hash);
  if (req->dense_block_size != c->o.job.pserver.dense_block_size)
    return bad(c, "register: trainer %d uses dense_block_size %" PRIu64 ", this server %zu", t,
               req->dense_block_size, c->o.job.pserver.dense_block_size);
  if (req->step < 0 || req->step >= FL_PS_MAX_STEP)
    return bad(c, "register: trainer %d declares step %" PRId64 " (must be in [0, %" PRId64 "))",
               t, req->step, FL_PS_MAX_STEP);
  if (req->n_dense > FL_PS_MAX_BLOCKS) return bad(c, "register: too many dense parameters");
  for (size_t i = 0; i < req->n_dense; i++) {
    const Flotilla__DenseParamSpec *p = req->dense[i];
    if (!p->name || !p->name[0] || strlen(p->name) >= PARAM_NAME_MAX || p->numel == 0 ||
        p->numel > MAX_NUMEL)
      return bad(c, "register: trainer %d: dense parameter %zu has a bad name or size", t, i);
  }
  for (size_t i = 0; i < req->n_sparse; i++) {
    const Flotilla__SparseTableSpec *s = req->sparse[i];
    if (!s->name || !s->name[0] || strlen(s->name) >= 128 || s->dim == 0 || s->dim > 65536)
      return bad(c, "register: trainer %d: sparse table %zu has a bad name or dim", t, i);
  }
  {
    /* The block count (the wire carries block ids as uint32). */
    uint64_t bs = c->o.job.pserver.dense_block_size, nb = 0;
    for (size_t i = 0; i < req->n_dense; i++) nb += (req->dense[i]->numel + bs - 1) / bs;
    if (nb > FL_PS_MAX_BLOCKS)
      return bad(c, "register: trainer %d declares %" PRIu64 " dense blocks of %" PRIu64
                 " floats (at most %u)", t, nb, bs, FL_PS_MAX_BLOCKS);
  }
  if (req->n_dense) {
    numel = malloc(req->n_dense * sizeof *numel);
    if (!numel) return FL_ERR(FL_ENOMEM, "pserver: out of memory registering trainer %d", t);
    for (size_t i = 0; i < req->n_dense; i++) numel[i] = req->dense[i]->numel;
  }

  pthread_mutex_lock(&c->mu);
  l = atomic_load(&c->layout);
  if (req->n_dense && !l) {
    names = calloc(req->n_dense, sizeof *names);
    for (size_t i = 0; names && i < req->n_dense; i++)
      if (!(names[i] = strdup(req->dense[i]->name))) {
        free_names(names, req->n_dense);
        names = NULL;
      }
    if (!names) {
      st = FL_ERR(FL_ENOMEM, "pserver: out of memory registering trainer %d", t);
      goto out;
    }
    if ((st = make_layout(c, numel, names, req->n_dense)) != FL_OK) {
      free_names(names, req->n_dense);
      goto out;
    }
    snprintf(c->layout_from, sizeof c->layout_from, "trainer %d, the first to register", t);
    if (req->total_steps > 0) {
      fl_lr_schedule s;
      if (fl_job_lr_schedule_for(&c->o.job, &c->o.job.pserver.optimizer, req->total_steps, &s) ==
          FL_OK)
        c->lr = s;
    }
  } else if (req->n_dense) {
    int same = l->n_params == req->n_dense;
    for (size_t i = 0; same && i < req->n_dense; i++)
      same = l->numel[i] == numel[i] && !strcmp(c->names[i], req->dense[i]->name);
    if (!same) {
      st = bad(c, "register: trainer %d declares dense parameters that differ from those this "
               "server holds (%zu parameters, declared by %s): is the model of the job file "
               "the same everywhere?", t, l->n_params, c->layout_from);
      goto out;
    }
  }
  for (size_t i = 0; i < req->n_sparse; i++) {
    const Flotilla__SparseTableSpec *s = req->sparse[i];
    ps_table *pt = table_of(c, s->name);
    if (pt && fl_ps_table_dim(pt->t) != s->dim) {
      st = bad(c, "register: trainer %d: table %s has dim %u here, not %u", t, s->name,
               fl_ps_table_dim(pt->t), s->dim);
      goto out;
    }
  }
  for (size_t i = 0; i < req->n_sparse; i++)
    if (!table_of(c, req->sparse[i]->name) &&
        (st = add_table(c, req->sparse[i]->name, req->sparse[i]->dim)) != FL_OK)
      goto out;

  if (c->tr[t].state != T_LIVE || c->tr[t].incarnation != req->incarnation) {
    int was = c->tr[t].state;
    if (c->tr[t].incarnation != req->incarnation) {
      /* A new process: forget its sparse push history (its steps restart). */
      for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
        pthread_mutex_lock(&c->tables[i].mu);
        c->tables[i].cur_step[t] = -1;
        c->tables[i].seqmask[t] = 0;
        pthread_mutex_unlock(&c->tables[i].mu);
      }
    }
    FL_LOGI("trainer %d registered%s", t,
            was == T_DEAD ? " again after being declared dead"
            : was == T_LIVE ? " again (new process)"
            : was == T_DONE ? " again after completing" : "");
    c->tr[t].state = T_LIVE;
    c->tr[t].incarnation = req->incarnation;
    joined = !is_counted(c, t) || is_parked(c, t);
    set_counted(c, t, 1);
    set_parked(c, t, 0);
  }
  c->tr[t].last_seen = fl_ps_now();
out:
  pthread_mutex_unlock(&c->mu);
  free(numel);
  if (st != FL_OK) return st;
  {
    /* The step window widens to what a registered trainer says it is at. */
    int64_t cur = atomic_load(&c->horizon);
    while (cur < req->step && !atomic_compare_exchange_weak(&c->horizon, &cur, req->step)) {
    }
  }
  if (joined) reevaluate(c);
  resp->step = fl_ps_core_step(c);
  resp->initialized = 1;
  resp->trainer_next_step = c->n_my ? INT64_MAX : -1;
  for (size_t i = 0; i < c->n_my; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    if (!c->blocks[i].initialized) resp->initialized = 0;
    if (c->blocks[i].last[t] + 1 < resp->trainer_next_step)
      resp->trainer_next_step = c->blocks[i].last[t] + 1;
    pthread_mutex_unlock(&c->blocks[i].mu);
  }
  resp->server_incarnation = c->incarnation;
  return FL_OK;
}

/* The trainer may call (registered, this process, alive).  c->mu held. */
static fl_status check_live(fl_ps_core *c, int t) {
  if (t < 0 || t >= c->nt) return bad(c, "trainer id %d not in [0, %d)", t, c->nt);
  if (c->tr[t].state != T_LIVE) return FL_ESTATE;
  c->tr[t].last_seen = fl_ps_now();
  return FL_OK;
}

static fl_status enter(fl_ps_core *c, int t) {
  fl_status st;
  pthread_mutex_lock(&c->mu);
  st = check_live(c, t);
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* ------------------------------------------------------------ dense tables */

static size_t dtype_size(int dt) {
  return dt == FLOTILLA__DTYPE__DTYPE_FP32 ? 4
         : dt == FLOTILLA__DTYPE__DTYPE_FP16 || dt == FLOTILLA__DTYPE__DTYPE_BF16 ? 2 : 0;
}

/* 1 when every element of the raw tensor bytes is finite. */
static int all_finite(int dt, const uint8_t *p, size_t n) {
  if (dt == FLOTILLA__DTYPE__DTYPE_FP32) {
    uint32_t bad_bits = 0;
    if (((uintptr_t)p & 3u) == 0) { /* the usual case: one vectorized pass */
      const uint32_t *w = (const uint32_t *)(const void *)p;
      for (size_t i = 0; i < n; i++) bad_bits |= (uint32_t)((w[i] & 0x7f800000u) == 0x7f800000u);
      return !bad_bits;
    }
    for (size_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      bad_bits |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad_bits;
  } else {
    uint16_t mask = dt == FLOTILLA__DTYPE__DTYPE_FP16 ? 0x7c00u : 0x7f80u;
    uint32_t bad_bits = 0;
    for (size_t i = 0; i < n; i++) {
      uint16_t u;
      memcpy(&u, p + 2 * i, 2);
      bad_bits |= (uint32_t)((u & mask) == mask);
    }
    return !bad_bits;
  }
}

/* Check one tensor: dtype known, shape exactly dims, bytes matching, all
 * finite.  Returns a message or NULL. */
static const char *check_tensor(const Flotilla__Tensor *x, int nd, const int64_t *dims) {
  size_t es, n = 1;
  if (!x) return "tensor missing";
  es = dtype_size(x->dtype);
  if (!es) return "unknown dtype";
  if ((int)x->n_shape != nd) return "wrong number of dimensions";
  for (int i = 0; i < nd; i++) {
    if (x->shape[i] != dims[i]) return "wrong shape";
    n *= (size_t)dims[i];
  }
  if (x->data.len != n * es) return "data length does not match dtype and shape";
  if (n && !x->data.data) return "data missing";
  if (!all_finite(x->dtype, x->data.data, n)) return "non-finite value";
  return NULL;
}

/* The tensor's values as floats: its own bytes when fp32 and aligned, else
 * converted (or copied) into dst, which holds n floats and does not overlap
 * the tensor. */
static const float *as_f32(const Flotilla__Tensor *x, size_t n, float *dst) {
  uint16_t tmp[1024];
  if (x->dtype == FLOTILLA__DTYPE__DTYPE_FP32) {
    if (((uintptr_t)x->data.data & 3u) == 0) return (const float *)(const void *)x->data.data;
    memcpy(dst, x->data.data, n * sizeof(float));
    return dst;
  }
  for (size_t off = 0; off < n; off += 1024) {
    size_t k = n - off < 1024 ? n - off : 1024;
    memcpy(tmp, x->data.data + 2 * off, 2 * k); /* any alignment */
    if (x->dtype == FLOTILLA__DTYPE__DTYPE_FP16) fl_cast_f16_to_f32(tmp, dst + off, k);
    else fl_cast_bf16_to_f32(tmp, dst + off, k);
  }
  return dst;
}

/* The highest step a gradient or delta push to b may carry (the step
 * window, see fl_ps.h); *at gets the step b is at (sync: the step it waits
 * for; async/geo: one past the highest step pushed).  Takes b->mu.  The
 * limit never shrinks, so a push checked against it stays acceptable. */
static int64_t push_limit(fl_ps_core *c, ps_block *b, int64_t *at) {
  int64_t lim, h = atomic_load(&c->horizon);
  if (c->mode == FL_PS_SYNC) {
    pthread_mutex_lock(&b->mu);
    *at = b->step;
    pthread_mutex_unlock(&b->mu);
    lim = *at + 1;
  } else {
    int64_t k = c->o.job.strategy.a_sync_configs.k_steps;
    *at = atomic_load(&c->next_step);
    lim = *at + (c->mode == FL_PS_GEO && k > 1 ? k : 1);
  }
  return lim > h ? lim : h;
}

fl_status fl_ps_core_push_dense(fl_ps_core *c, const Flotilla__PushDenseRequest *req,
                                Flotilla__PushDenseResponse *resp) {
  int t = req->trainer_id, kind = req->kind, progress = 0, at_gate = 0;
  fl_ps_layout *l = atomic_load(&c->layout);
  float *scratch = NULL;
  size_t scratch_n = 0;
  fl_status st;

  if ((st = enter(c, t)) != FL_OK) return st;
  if (!l) return bad(c, "push from trainer %d before any dense layout", t);
  if (kind != FLOTILLA__PUSH_KIND__PUSH_GRAD && kind != FLOTILLA__PUSH_KIND__PUSH_DELTA &&
      kind != FLOTILLA__PUSH_KIND__PUSH_INIT)
    return bad(c, "push from trainer %d: unknown kind %d", t, kind);
  if ((kind == FLOTILLA__PUSH_KIND__PUSH_GRAD && c->mode == FL_PS_GEO) ||
      (kind == FLOTILLA__PUSH_KIND__PUSH_DELTA && c->mode != FL_PS_GEO))
    return bad(c, "push from trainer %d: %s push in %s mode", t,
               kind == FLOTILLA__PUSH_KIND__PUSH_GRAD ? "gradient" : "delta",
               fl_ps_mode_name(c->mode));
  if (req->step < 0) return bad(c, "push from trainer %d: negative step", t);
  if (req->n_blocks == 0 || req->n_blocks > c->n_my)
    return bad(c, "push from trainer %d: %zu blocks (this server holds %zu)", t, req->n_blocks,
               c->n_my);
  /* Everything is checked before anything changes. */
  for (size_t i = 0; i < req->n_blocks; i++) {
    const Flotilla__DenseBlock *db = req->blocks[i];
    ps_block *b = db ? block_of(c, db->block) : NULL;
    const char *why;
    int64_t dim;
    if (!b) return bad(c, "push from trainer %d: block %u is not on this server", t,
                       db ? db->block : 0);
    dim = (int64_t)b->n;
    if ((why = check_tensor(db->value, 1, &dim)) != NULL)
      return bad(c, "push from trainer %d, block %u (%s, %" PRIu64 " floats): %s", t, db->block,
                 b->name, b->n, why);
    for (size_t j = 0; j < i; j++)
      if (req->blocks[j]->block == db->block)
        return bad(c, "push from trainer %d: block %u twice", t, db->block);
    if (kind != FLOTILLA__PUSH_KIND__PUSH_INIT) {
      /* Below FL_PS_MAX_STEP too: the block's step and the horizon are. */
      int64_t at, limit = push_limit(c, b, &at);
      if (req->step > limit)
        return bad(c, "push from trainer %d: step %" PRId64 " is ahead of the step window of "
                   "block %u (%s), which is at step %" PRId64 " and takes steps up to %" PRId64
                   " (register declaring the step to go further)",
                   t, req->step, db->block, b->name, at, limit);
    }
    if (db->value->dtype != FLOTILLA__DTYPE__DTYPE_FP32 && b->n > scratch_n) scratch_n = b->n;
    else if (((uintptr_t)db->value->data.data & 3u) && b->n > scratch_n) scratch_n = b->n;
  }
  if (scratch_n && c->mode != FL_PS_SYNC) {
    scratch = malloc(scratch_n * sizeof(float));
    if (!scratch) return FL_ERR(FL_ENOMEM, "pserver: out of memory converting a push");
  }
  atomic_fetch_add(&c->pushes, 1);
  for (size_t i = 0; i < req->n_blocks; i++) {
    const Flotilla__DenseBlock *db = req->blocks[i];
    ps_block *b = block_of(c, db->block);
    int dup = 0;

    pthread_mutex_lock(&b->mu);
    if (kind == FLOTILLA__PUSH_KIND__PUSH_INIT) {
      if (b->initialized) {
        dup = 1;
      } else {
        const float *v = as_f32(db->value, b->n, b->value);
        if (v != b->value) memcpy(b->value, v, b->n * sizeof(float));
        if (b->s1 || b->s2) {
          fl_optim_tensor x = {b->name, b->value, NULL, b->s1, b->s2, b->n};
          fl_optim_init_state(&c->dense_hp, &x, 1);
        }
        b->initialized = 1;
      }
    } else if (!b->initialized) {
      st = FL_ESTATE; /* pushed before anyone set its value: register again */
    } else if (c->mode == FL_PS_SYNC) {
      if (req->step < b->step || (b->n_pend && req->step == b->pend_step && b->have[t])) {
        dup = 1;
      } else {
        if (b->n_pend && req->step > b->pend_step) {
          FL_LOGW("block %u: trainer %d pushed step %lld while step %lld has %d of its pushes; "
                  "applying that step with what it has",
                  b->id, t, (long long)req->step, (long long)b->pend_step, b->n_pend);
          sync_apply(c, b);
          progress = 1;
        }
        if (!b->n_pend) {
          if (req->step > b->step)
            FL_LOGI("block %u: moving from step %lld to step %lld (trainer %d is ahead)", b->id,
                    (long long)b->step, (long long)req->step, t);
          b->pend_step = req->step;
        }
        if (!b->pend[t]) b->pend[t] = malloc(b->n * sizeof(float));
        if (!b->acc && c->nt > 1) b->acc = malloc(b->n * sizeof(float));
        if (!b->pend[t] || (c->nt > 1 && !b->acc)) {
          st = FL_ERR(FL_ENOMEM, "pserver: out of memory for block %u", b->id);
        } else {
          const float *g = as_f32(db->value, b->n, b->pend[t]);
          if (g != b->pend[t]) memcpy(b->pend[t], g, b->n * sizeof(float));
          b->have[t] = 1;
          b->n_pend++;
          if (may_apply(c, b)) {
            sync_apply(c, b);
            progress = 1;
            if (b->step == atomic_load(&c->gate)) at_gate = 1;
          }
        }
      }
    } else if (req->step <= b->last[t]) {
      dup = 1;
    } else {
      const float *g = as_f32(db->value, b->n, scratch);
      b->last[t] = req->step;
      if (c->mode == FL_PS_GEO) {
        for (uint64_t k = 0; k < b->n; k++) b->value[k] += g[k];
      } else {
        fl_optim_tensor x = {b->name, b->value, g, b->s1, b->s2, b->n};
        fl_status os = fl_optim_step(&c->dense_hp, &x, 1, fl_lr_at(&c->lr, req->step),
                                     b->updates + 1);
        if (os != FL_OK)
          FL_LOGE("block %u (%s): optimizer step failed: %s", b->id, b->name, fl_strerror(os));
        else
          b->updates++;
      }
      atomic_fetch_add(&c->dense_updates, 1);
      b->step++;
    }
    pthread_mutex_unlock(&b->mu);
    if (st != FL_OK) break;
    if (dup) {
      resp->duplicates++;
      atomic_fetch_add(&c->duplicates, 1);
    } else {
      resp->accepted++;
    }
  }
  free(scratch);
  if (at_gate) gate_reached(c);
  if (kind != FLOTILLA__PUSH_KIND__PUSH_INIT && c->mode != FL_PS_SYNC) {
    int64_t want = req->step + 1, cur = atomic_load(&c->next_step);
    while (cur < want && !atomic_compare_exchange_weak(&c->next_step, &cur, want)) {
    }
  }
  if (progress) notify(c);
  return st;
}

fl_status fl_ps_core_pull_check(fl_ps_core *c, int32_t t, int64_t min_step, const uint32_t *ids,
                                size_t n) {
  fl_status st = FL_OK;
  int ready = 1;
  if (t != FL_PS_OBSERVER && (st = enter(c, t)) != FL_OK) return st;
  if (!atomic_load(&c->layout)) return bad(c, "pull from trainer %d before any dense layout", t);
  if (n == 0 || n > c->n_my)
    return bad(c, "pull from trainer %d: %zu blocks (this server holds %zu)", t, n, c->n_my);
  for (size_t i = 0; i < n; i++) {
    if (!block_of(c, ids[i]))
      return bad(c, "pull from trainer %d: block %u is not on this server", t, ids[i]);
    for (size_t j = 0; j < i; j++)
      if (ids[j] == ids[i]) return bad(c, "pull from trainer %d: block %u twice", t, ids[i]);
  }
  for (size_t i = 0; i < n; i++) {
    ps_block *b = block_of(c, ids[i]);
    pthread_mutex_lock(&b->mu);
    if (!b->initialized) st = FL_ESTATE;
    else if (c->mode == FL_PS_SYNC && b->step < min_step) ready = 0;
    else if (c->mode == FL_PS_SYNC && min_step < 0 && b->step != -min_step - 1 &&
             b->prev_step != -min_step - 1)
      FL_LOGW("pull from trainer %d as of step %lld: block %u is at step %lld; answering its "
              "current value", t, (long long)(-min_step - 1), b->id, (long long)b->step);
    pthread_mutex_unlock(&b->mu);
  }
  if (st != FL_OK) return st;
  return ready ? FL_OK : FL_EAGAIN;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

fl_status fl_ps_core_pull_pack(fl_ps_core *c, int64_t min_step, const uint32_t *ids, size_t n,
                               fl_rpc_outbuf *ob, grpc_byte_buffer **out) {
  Flotilla__PullDenseResponse resp = FLOTILLA__PULL_DENSE_RESPONSE__INIT;
  Flotilla__DenseBlock *dbs = calloc(n, sizeof *dbs);
  Flotilla__DenseBlock **dbp = calloc(n, sizeof *dbp);
  Flotilla__Tensor *ts = calloc(n, sizeof *ts);
  int64_t *shapes = calloc(n, sizeof *shapes);
  uint32_t *order = malloc(n * sizeof *order);
  int64_t step = INT64_MAX;
  fl_status st;

  if (!dbs || !dbp || !ts || !shapes || !order) {
    st = FL_ERR(FL_ENOMEM, "pserver: out of memory answering a pull of %zu blocks", n);
    goto done;
  }
  memcpy(order, ids, n * sizeof *order);
  qsort(order, n, sizeof *order, cmp_u32);
  for (size_t i = 0; i < n; i++) pthread_mutex_lock(&block_of(c, order[i])->mu);
  for (size_t i = 0; i < n; i++) {
    ps_block *b = block_of(c, ids[i]);
    flotilla__dense_block__init(&dbs[i]);
    flotilla__tensor__init(&ts[i]);
    shapes[i] = (int64_t)b->n;
    ts[i].dtype = FLOTILLA__DTYPE__DTYPE_FP32;
    ts[i].n_shape = 1;
    ts[i].shape = &shapes[i];
    ts[i].data.data = (uint8_t *)b->value;
    ts[i].data.len = b->n * sizeof(float);
    dbs[i].block = ids[i];
    dbs[i].value = &ts[i];
    dbp[i] = &dbs[i];
    if (b->step < step) step = b->step;
    if (min_step < 0 && b->step == -min_step && b->prev_step == -min_step - 1) {
      ts[i].data.data = (uint8_t *)b->prev; /* as of the step asked for */
      step = -min_step - 1;
    }
  }
  resp.n_blocks = n;
  resp.blocks = dbp;
  resp.step = step;
  st = fl_rpc_pack(ob, &resp.base, out);
  for (size_t i = n; i-- > 0;) pthread_mutex_unlock(&block_of(c, order[i])->mu);
  if (st == FL_OK) {
    atomic_fetch_add(&c->pulls, 1);
  }
done:
  free(dbs);
  free(dbp);
  free(ts);
  free(shapes);
  free(order);
  return st;
}

/* ----------------------------------------------------------- sparse tables */

static fl_status check_keys(fl_ps_core *c, int t, const char *what, const char *table,
                            const uint64_t *keys, size_t n, ps_table **pt) {
  *pt = table ? table_of(c, table) : NULL;
  if (!*pt) return bad(c, "%s from trainer %d: unknown table '%s'", what, t, table ? table : "");
  if (n > c->o.max_sparse_keys)
    return bad(c, "%s from trainer %d: %zu keys (at most %zu per call)", what, t, n,
               c->o.max_sparse_keys);
  if (n && !keys) return bad(c, "%s from trainer %d: keys missing", what, t);
  for (size_t i = 0; i < n; i++)
    if (fl_ps_key_server(keys[i], c->o.n_servers) != c->o.server_index)
      return bad(c, "%s from trainer %d: key %" PRIu64 " of table %s belongs to server %d", what,
                 t, keys[i], table, fl_ps_key_server(keys[i], c->o.n_servers));
  return FL_OK;
}

fl_status fl_ps_core_pull_sparse(fl_ps_core *c, const Flotilla__PullSparseRequest *req,
                                 float **scratch, size_t *cap, Flotilla__PullSparseResponse *resp,
                                 Flotilla__Tensor *values, int64_t shape[2]) {
  ps_table *pt;
  size_t need, dim;
  fl_status st;

  if ((st = enter(c, req->trainer_id)) != FL_OK) return st;
  FL_TRY(check_keys(c, req->trainer_id, "sparse pull", req->table, req->keys, req->n_keys, &pt));
  dim = fl_ps_table_dim(pt->t);
  need = req->n_keys * dim;
  if (need > *cap) {
    float *ns = realloc(*scratch, need * sizeof(float));
    if (!ns) return FL_ERR(FL_ENOMEM, "pserver: out of memory for %zu sparse rows", req->n_keys);
    *scratch = ns;
    *cap = need;
  }
  pthread_mutex_lock(&pt->mu);
  st = fl_ps_table_pull(pt->t, req->keys, req->n_keys, *scratch);
  pthread_mutex_unlock(&pt->mu);
  if (st != FL_OK) return st;
  atomic_fetch_add(&c->pulls, 1);
  shape[0] = (int64_t)req->n_keys;
  shape[1] = (int64_t)dim;
  values->dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  values->n_shape = 2;
  values->shape = shape;
  values->data.data = (uint8_t *)*scratch;
  values->data.len = need * sizeof(float);
  resp->values = values;
  return FL_OK;
}

fl_status fl_ps_core_push_sparse(fl_ps_core *c, const Flotilla__PushSparseRequest *req,
                                 Flotilla__PushSparseResponse *resp) {
  int t = req->trainer_id;
  ps_table *pt;
  int64_t dims[2];
  const char *why;
  float *conv = NULL;
  const float *g;
  fl_status st;
  int dup;

  if ((st = enter(c, t)) != FL_OK) return st;
  FL_TRY(check_keys(c, t, "sparse push", req->table, req->keys, req->n_keys, &pt));
  dims[0] = (int64_t)req->n_keys;
  dims[1] = (int64_t)fl_ps_table_dim(pt->t);
  if ((why = check_tensor(req->grads, 2, dims)) != NULL)
    return bad(c, "sparse push from trainer %d, table %s, %zu keys: %s", t, req->table,
               req->n_keys, why);
  if (req->step < 0 || req->step >= FL_PS_MAX_STEP || req->seq >= MAX_SEQ)
    return bad(c, "sparse push from trainer %d: step %lld / part %u out of range", t,
               (long long)req->step, req->seq);
  if (req->grads->dtype != FLOTILLA__DTYPE__DTYPE_FP32 ||
      ((uintptr_t)req->grads->data.data & 3u)) {
    conv = malloc((req->n_keys * (size_t)dims[1] + 1) * sizeof(float));
    if (!conv) return FL_ERR(FL_ENOMEM, "pserver: out of memory converting a sparse push");
  }
  g = req->n_keys ? as_f32(req->grads, req->n_keys * (size_t)dims[1], conv) : NULL;
  pthread_mutex_lock(&pt->mu);
  dup = req->step < pt->cur_step[t] ||
        (req->step == pt->cur_step[t] && ((pt->seqmask[t] >> req->seq) & 1u));
  if (!dup) {
    if (req->step > pt->cur_step[t]) {
      pt->cur_step[t] = req->step;
      pt->seqmask[t] = 0;
    }
    pt->seqmask[t] |= 1ULL << req->seq;
    st = fl_ps_table_push(pt->t, req->keys, req->n_keys, g);
  }
  pthread_mutex_unlock(&pt->mu);
  free(conv);
  if (st != FL_OK) return st;
  atomic_fetch_add(&c->pushes, 1);
  if (dup) atomic_fetch_add(&c->duplicates, 1);
  resp->accepted = dup ? 0 : (int32_t)req->n_keys;
  return FL_OK;
}

/* ---------------------------------------------------------------- barriers */

static ps_barrier *barrier_find(fl_ps_core *c, const char *name) {
  for (int i = 0; i < MAX_BARRIERS; i++)
    if (c->barriers[i].used && !strcmp(c->barriers[i].name, name)) return &c->barriers[i];
  return NULL;
}

/* Complete b when every counted trainer arrived.  c->mu held. */
static int barrier_try_complete(fl_ps_core *c, ps_barrier *b) {
  int any = 0;
  if (b->done) return 0;
  for (int t = 0; t < c->nt; t++) {
    if (b->arrived[t]) any = 1;
    else if (is_counted(c, t)) return 0;
  }
  if (!any) return 0;
  memset(b->sums, 0, sizeof b->sums);
  b->min = INT64_MAX;
  b->count = 0;
  for (int t = 0; t < c->nt; t++) {
    if (!b->arrived[t]) continue;
    for (int k = 0; k < b->nv; k++) b->sums[k] += b->vals[t * FL_PS_BARRIER_MAX_VALUES + k];
    if (b->mins[t] < b->min) b->min = b->mins[t];
    b->count++;
    set_parked(c, t, 0);
  }
  b->done = 1;
  return 1;
}

/* Begin a new round of b (c->mu held): nobody arrived, nobody answered. */
static void start_round(fl_ps_core *c, ps_barrier *b, const Flotilla__BarrierRequest *req) {
  b->done = 0;
  b->seq = ++c->barrier_seq;
  b->nv = (int)req->n_values;
  memset(b->arrived, 0, (size_t)c->nt);
  memset(b->taken, 0, (size_t)c->nt * sizeof *b->taken);
}

/* The result of completed barrier b for trainer t into resp (sums in buf),
 * and, when take, t's current process counts as answered.  c->mu held. */
static void barrier_fill(fl_ps_core *c, ps_barrier *b, int t, Flotilla__BarrierResponse *resp,
                         double *buf, int take) {
  memcpy(buf, b->sums, (size_t)b->nv * sizeof *buf);
  resp->n_sums = (size_t)b->nv;
  resp->sums = buf;
  resp->min = b->min;
  resp->count = b->count;
  if (take && t >= 0 && t < c->nt) b->taken[t] = c->tr[t].incarnation;
}

/* fl_ps_core_barrier, and on FL_OK (when resp is not NULL) the result,
 * taken under the same lock. */
static fl_status barrier_call(fl_ps_core *c, const Flotilla__BarrierRequest *req,
                              Flotilla__BarrierResponse *resp, double *buf) {
  int t = req->trainer_id, done = 0, parked = 0;
  ps_barrier *b = NULL;
  fl_status st;

  if (!req->name || !req->name[0] || strlen(req->name) >= BARRIER_NAME_MAX)
    return bad(c, "barrier from trainer %d: name missing or too long", t);
  if (req->n_values > FL_PS_BARRIER_MAX_VALUES)
    return bad(c, "barrier %s from trainer %d: %zu values (at most %d)", req->name, t,
               req->n_values, FL_PS_BARRIER_MAX_VALUES);
  for (size_t k = 0; k < req->n_values; k++)
    if (!isfinite(req->values[k]))
      return bad(c, "barrier %s from trainer %d: non-finite value", req->name, t);
  pthread_mutex_lock(&c->mu);
  if ((st = check_live(c, t)) != FL_OK) goto out;
  b = barrier_find(c, req->name);
  if (b && b->done) {
    /* The same trainer process, answered already: it calls the name again,
     * which starts the next round.  Anyone else (a retry whose answer never
     * came, a restarted or late trainer) gets the completed round's result. */
    if (b->taken[t] == 0 || b->taken[t] != c->tr[t].incarnation) goto out;
    start_round(c, b, req);
  }
  if (!b) {
    ps_barrier *oldest = NULL;
    for (int i = 0; i < MAX_BARRIERS && !b; i++)
      if (!c->barriers[i].used) b = &c->barriers[i];
    for (int i = 0; i < MAX_BARRIERS && !b; i++)
      if (c->barriers[i].done && strncmp(c->barriers[i].name, "job/", 4) != 0 &&
          (!oldest || c->barriers[i].seq < oldest->seq))
        oldest = &c->barriers[i];
    if (!b) b = oldest;
    if (!b) {
      st = bad(c, "barrier %s from trainer %d: %d barriers already pending", req->name, t,
               MAX_BARRIERS);
      goto out;
    }
    if (!b->arrived) {
      b->arrived = calloc((size_t)c->nt, 1);
      b->taken = calloc((size_t)c->nt, sizeof *b->taken);
      b->vals = calloc((size_t)c->nt * FL_PS_BARRIER_MAX_VALUES, sizeof *b->vals);
      b->mins = calloc((size_t)c->nt, sizeof *b->mins);
      if (!b->arrived || !b->taken || !b->vals || !b->mins) {
        st = FL_ERR(FL_ENOMEM, "pserver: out of memory for barrier %s", req->name);
        goto out;
      }
    }
    snprintf(b->name, sizeof b->name, "%s", req->name);
    b->used = 1;
    start_round(c, b, req);
  }
  if (b->done) goto out;
  if ((int)req->n_values != b->nv) {
    st = bad(c, "barrier %s from trainer %d: %zu values, others sent %d", req->name, t,
             req->n_values, b->nv);
    goto out;
  }
  if (!b->arrived[t]) {
    b->arrived[t] = 1;
    for (size_t k = 0; k < req->n_values; k++)
      b->vals[t * FL_PS_BARRIER_MAX_VALUES + k] = req->values[k];
    b->mins[t] = req->value_min;
  }
  done = barrier_try_complete(c, b);
  if (!b->done) {
    st = FL_EAGAIN;
    parked = !is_parked(c, t);
    set_parked(c, t, 1);
  }
out:
  /* The result goes with the call that gets it, before anyone (answered by
   * the notify below) can start the next round. */
  if (st == FL_OK && resp) barrier_fill(c, b, t, resp, buf, 1);
  pthread_mutex_unlock(&c->mu);
  if (parked) reevaluate(c); /* steps no longer wait for it */
  else if (st == FL_OK && done) notify(c);
  return st;
}

fl_status fl_ps_core_barrier(fl_ps_core *c, const Flotilla__BarrierRequest *req) {
  return barrier_call(c, req, NULL, NULL);
}

fl_status fl_ps_core_barrier_answer(fl_ps_core *c, const Flotilla__BarrierRequest *req,
                                    Flotilla__BarrierResponse *resp, double *buf) {
  return barrier_call(c, req, resp, buf);
}

static fl_status barrier_get(fl_ps_core *c, const char *name, int32_t t,
                             Flotilla__BarrierResponse *resp, double *buf, int take) {
  ps_barrier *b;
  fl_status st = FL_OK;
  pthread_mutex_lock(&c->mu);
  b = barrier_find(c, name);
  if (!b) st = FL_ENOTFOUND;
  else if (!b->done) st = (t >= 0 && t < c->nt && c->tr[t].state == T_LIVE) ? FL_EAGAIN : FL_ESTATE;
  else barrier_fill(c, b, t, resp, buf, take);
  pthread_mutex_unlock(&c->mu);
  return st;
}

fl_status fl_ps_core_barrier_result(fl_ps_core *c, const char *name, int32_t t,
                                    Flotilla__BarrierResponse *resp, double *buf) {
  return barrier_get(c, name, t, resp, buf, 0);
}

fl_status fl_ps_core_barrier_take(fl_ps_core *c, const char *name, int32_t t,
                                  Flotilla__BarrierResponse *resp, double *buf) {
  return barrier_get(c, name, t, resp, buf, 1);
}

/* ------------------------------------------------------ membership, health */

static void reevaluate(fl_ps_core *c) {
  if (c->mode == FL_PS_SYNC) {
    int at_gate = 0;
    for (size_t i = 0; i < c->n_my; i++) {
      ps_block *b = &c->blocks[i];
      pthread_mutex_lock(&b->mu);
      if (b->n_pend && may_apply(c, b)) {
        sync_apply(c, b);
        if (b->step == atomic_load(&c->gate)) at_gate = 1;
      }
      pthread_mutex_unlock(&b->mu);
    }
    if (at_gate) gate_reached(c);
  }
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < MAX_BARRIERS; i++)
    if (c->barriers[i].used) barrier_try_complete(c, &c->barriers[i]);
  pthread_mutex_unlock(&c->mu);
  /* Always wake the service: held calls of dead trainers end too. */
  notify(c);
}

fl_status fl_ps_core_heartbeat(fl_ps_core *c, const Flotilla__HeartbeatRequest *req,
                               Flotilla__HeartbeatResponse *resp) {
  int t = req->trainer_id, live = 0;
  fl_status st = FL_OK;
  if (t < 0 || t >= c->nt) return bad(c, "heartbeat: trainer id %d not in [0, %d)", t, c->nt);
  pthread_mutex_lock(&c->mu);
  if (c->tr[t].state != T_LIVE || c->tr[t].incarnation != req->incarnation) {
    st = FL_ESTATE;
  } else {
    c->tr[t].last_seen = fl_ps_now();
    c->tr[t].step = req->step;
  }
  for (int i = 0; i < c->nt; i++) live += c->tr[i].state == T_LIVE;
  pthread_mutex_unlock(&c->mu);
  if (st != FL_OK) return st;
  resp->step = fl_ps_core_step(c);
  resp->server_incarnation = c->incarnation;
  resp->live_trainers = live;
  return FL_OK;
}

fl_status fl_ps_core_complete(fl_ps_core *c, const Flotilla__CompleteRequest *req,
                              Flotilla__CompleteResponse *resp) {
  int t = req->trainer_id, changed = 0, remaining = 0;
  if (t < 0 || t >= c->nt) return bad(c, "complete: trainer id %d not in [0, %d)", t, c->nt);
  pthread_mutex_lock(&c->mu);
  if (c->tr[t].state == T_LIVE) {
    c->tr[t].state = T_DONE;
    set_counted(c, t, 0);
    changed = 1;
    FL_LOGI("trainer %d completed", t);
  } else if (c->tr[t].state != T_DONE) {
    pthread_mutex_unlock(&c->mu);
    return FL_ESTATE;
  }
  for (int i = 0; i < c->nt; i++)
    remaining += c->tr[i].state == T_LIVE || (c->tr[i].state == T_UNKNOWN && is_counted(c, i));
  pthread_mutex_unlock(&c->mu);
  resp->remaining = remaining;
  if (changed) reevaluate(c);
  return FL_OK;
}

void fl_ps_core_tick(fl_ps_core *c, double now) {
  int changed = 0;
  double to = c->o.heartbeat_timeout_s;
  pthread_mutex_lock(&c->mu);
  for (int t = 0; to > 0 && t < c->nt; t++) {
    ps_trainer *x = &c->tr[t];
    if (x->state == T_LIVE && now - x->last_seen > to) {
      FL_LOGW("trainer %d declared dead: silent for %.1f s (heartbeat_timeout_s %.1f); "
              "going on with the others", t, now - x->last_seen, to);
      x->state = T_DEAD;
      set_counted(c, t, 0);
      changed = 1;
    } else if (x->state == T_UNKNOWN && is_counted(c, t) && now - c->start > to) {
      FL_LOGW("trainer %d has not registered within %.1f s; not waiting for it", t, to);
      set_counted(c, t, 0);
      changed = 1;
    }
  }
  pthread_mutex_unlock(&c->mu);
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    ps_table *pt = &c->tables[i];
    uint64_t ev;
    pthread_mutex_lock(&pt->mu);
    ev = fl_ps_table_evicted(pt->t);
    if (ev != pt->evicted_logged) {
      FL_LOGI("sparse table %s: evicted %" PRIu64 " rows unseen longest (%" PRIu64
              " in all; %zu rows, limit %lld)",
              fl_ps_table_name(pt->t), ev - pt->evicted_logged, ev, fl_ps_table_rows(pt->t),
              (long long)c->o.job.pserver.sparse.max_rows);
      pt->evicted_logged = ev;
    }
    pthread_mutex_unlock(&pt->mu);
  }
  if (changed) reevaluate(c);
}

int fl_ps_core_finished(fl_ps_core *c) {
  int done = 0, open = 0, never = 0;
  pthread_mutex_lock(&c->mu);
  for (int t = 0; t < c->nt; t++) {
    if (c->tr[t].state == T_DONE) done++;
    else if (c->tr[t].state == T_LIVE || (c->tr[t].state == T_UNKNOWN && is_counted(c, t)))
      open++;
    else if (c->tr[t].state == T_UNKNOWN)
      never++;
  }
  pthread_mutex_unlock(&c->mu);
  if (done == 0 || open > 0) return 0;
  return never ? -1 : 1;
}

size_t fl_ps_core_unregistered(fl_ps_core *c, char *out, size_t cap) {
  size_t n = 0, len = 0;
  if (cap) out[0] = '\0';
  pthread_mutex_lock(&c->mu);
  for (int t = 0; t < c->nt; t++) {
    if (c->tr[t].state != T_UNKNOWN) continue;
    if (len < cap) {
      int k = snprintf(out + len, cap - len, "%s%d", n ? ", " : "", t);
      if (k > 0) len += (size_t)k;
    }
    n++;
  }
  pthread_mutex_unlock(&c->mu);
  return n;
}

int fl_ps_core_settled(fl_ps_core *c) {
  int64_t step = -1;
  int settled = 1;
  if (c->mode != FL_PS_SYNC) return 1;
  for (int t = 0; t < c->nt; t++)
    if (is_parked(c, t)) return 0; /* a barrier still waits */
  for (size_t i = 0; i < c->n_my && settled; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    if (c->blocks[i].n_pend || (step >= 0 && c->blocks[i].step != step)) settled = 0;
    step = c->blocks[i].step;
    pthread_mutex_unlock(&c->blocks[i].mu);
  }
  return settled;
}

void fl_ps_core_set_gate_hook(fl_ps_core *c, void (*fn)(void *), void *ctx) {
  pthread_mutex_lock(&c->cb_mu);
  c->on_gate = fn;
  c->gate_ctx = ctx;
  pthread_mutex_unlock(&c->cb_mu);
}

void fl_ps_core_set_gate(fl_ps_core *c, int64_t step) {
  if (c->mode != FL_PS_SYNC) return;
  atomic_store(&c->gate, step < 0 ? -1 : step);
  reevaluate(c); /* the steps held at the old gate go on */
}

int64_t fl_ps_core_gate(fl_ps_core *c) { return atomic_load(&c->gate); }

int fl_ps_core_at_gate(fl_ps_core *c) {
  int64_t g = atomic_load(&c->gate);
  int at = c->n_my > 0;
  if (c->mode != FL_PS_SYNC || g < 0) return 0;
  for (size_t i = 0; i < c->n_my; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    int64_t s = c->blocks[i].step;
    pthread_mutex_unlock(&c->blocks[i].mu);
    if (s > g) return -1;
    if (s != g) at = 0;
  }
  return at;
}

int64_t fl_ps_core_step(fl_ps_core *c) {
  int64_t s = INT64_MAX;
  if (c->mode != FL_PS_SYNC || c->n_my == 0) return atomic_load(&c->next_step);
  for (size_t i = 0; i < c->n_my; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    if (c->blocks[i].step < s) s = c->blocks[i].step;
    pthread_mutex_unlock(&c->blocks[i].mu);
  }
  return s;
}

void fl_ps_core_count_bytes(fl_ps_core *c, uint64_t in, uint64_t out) {
  atomic_fetch_add(&c->bytes_in, in);
  atomic_fetch_add(&c->bytes_out, out);
}

void fl_ps_core_stats(fl_ps_core *c, Flotilla__StatsResponse *r) {
  fl_ps_layout *l = atomic_load(&c->layout);
  int live = 0;
  pthread_mutex_lock(&c->mu);
  for (int t = 0; t < c->nt; t++) live += c->tr[t].state == T_LIVE;
  pthread_mutex_unlock(&c->mu);
  r->step = fl_ps_core_step(c);
  r->pushes = atomic_load(&c->pushes);
  r->pulls = atomic_load(&c->pulls);
  r->bytes_in = atomic_load(&c->bytes_in);
  r->bytes_out = atomic_load(&c->bytes_out);
  r->duplicates = atomic_load(&c->duplicates);
  r->invalid = atomic_load(&c->invalid);
  r->dense_updates = atomic_load(&c->dense_updates);
  r->checkpoints = atomic_load(&c->checkpoints);
  r->live_trainers = live;
  r->server_incarnation = c->incarnation;
  r->dense_blocks = (int32_t)c->n_my;
  r->dense_elements = l ? l->server_load[c->o.server_index] : 0;
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    pthread_mutex_lock(&c->tables[i].mu);
    r->sparse_rows += fl_ps_table_rows(c->tables[i].t);
    r->evicted_rows += fl_ps_table_evicted(c->tables[i].t);
    pthread_mutex_unlock(&c->tables[i].mu);
  }
}

fl_status fl_ps_core_stats_layout(fl_ps_core *c, Flotilla__StatsResponse *r,
                                  Flotilla__DenseParamSpec **specs, Flotilla__DenseParamSpec ***ptrs) {
  fl_ps_layout *l = atomic_load(&c->layout);
  *specs = NULL;
  *ptrs = NULL;
  r->dense_block_size = c->o.job.pserver.dense_block_size;
  r->num_servers = c->o.n_servers;
  r->server_index = c->o.server_index;
  if (!l) return FL_OK;
  *specs = calloc(l->n_params, sizeof **specs);
  *ptrs = calloc(l->n_params, sizeof **ptrs);
  if (!*specs || !*ptrs) {
    free(*specs);
    free(*ptrs);
    *specs = NULL;
    *ptrs = NULL;
    return FL_ERR(FL_ENOMEM, "pserver: out of memory describing %zu parameters", l->n_params);
  }
  for (size_t i = 0; i < l->n_params; i++) {
    flotilla__dense_param_spec__init(&(*specs)[i]);
    (*specs)[i].name = c->names[i];
    (*specs)[i].numel = l->numel[i];
    (*ptrs)[i] = &(*specs)[i];
  }
  r->n_dense = l->n_params;
  r->dense = *ptrs;
  return FL_OK;
}

fl_status fl_ps_core_block_value(fl_ps_core *c, uint32_t id, float *out, size_t n,
                                 int64_t *step) {
  ps_block *b = block_of(c, id);
  fl_status st = FL_OK;
  if (!b) return FL_ENOTFOUND;
  pthread_mutex_lock(&b->mu);
  if (!b->initialized || n != b->n) st = FL_ENOTFOUND;
  else {
    memcpy(out, b->value, n * sizeof(float));
    if (step) *step = b->step;
  }
  pthread_mutex_unlock(&b->mu);
  return st;
}

/* ------------------------------------------------------------ checkpoints */

/* Write the state into w (the caller commits or aborts it); *step gets the
 * step the checkpoint holds, the one fl_ps_core_load will report: sync -
 * the lowest step among the blocks as they were copied (training goes on
 * while they are copied one at a time, so this can be past the server's
 * step when the save began); async/geo - next_step as recorded. */
static fl_status write_state(fl_ps_core *c, fl_ckpt_writer *w, int64_t *step) {
  fl_ps_layout *l = atomic_load(&c->layout);
  char name[FL_CKPT_NAME_MAX];
  fl_status st;
  size_t nt = atomic_load(&c->n_tables);
  int64_t next = atomic_load(&c->next_step), low = INT64_MAX;

#define I64(key, v)                                                          \
  if ((st = fl_ckpt_put_i64(w, key, v)) != FL_OK) return st
  if (c->o.run_id[0]) {
    if ((st = fl_ckpt_put(w, "meta/job_hash", FL_CKPT_U64, 0, NULL, &c->o.job_hash)) != FL_OK ||
        (st = fl_ckpt_put_blob(w, "meta/run_id", c->o.run_id, strlen(c->o.run_id))) != FL_OK)
      return st;
  }
  I64("ps/mode", (int64_t)c->mode);
  I64("ps/server_index", c->o.server_index);
  I64("ps/n_servers", c->o.n_servers);
  I64("ps/num_trainers", c->nt);
  I64("ps/block_size", (int64_t)c->o.job.pserver.dense_block_size);
  I64("ps/next_step", next);
  if (l) {
    int64_t shp = (int64_t)l->n_params;
    size_t blen = 0, off = 0;
    char *blob;
    for (size_t p = 0; p < l->n_params; p++) blen += strlen(c->names[p]) + 1;
    blob = malloc(blen);
    if (!blob) return FL_ERR(FL_ENOMEM, "checkpoint: out of memory");
    for (size_t p = 0; p < l->n_params; p++) {
      size_t k = strlen(c->names[p]) + 1;
      memcpy(blob + off, c->names[p], k);
      off += k;
    }
    st = fl_ckpt_put(w, "dense/numel", FL_CKPT_U64, 1, &shp, l->numel);
    if (st == FL_OK) st = fl_ckpt_put_blob(w, "dense/names", blob, blen);
    free(blob);
    if (st != FL_OK) return st;
  }
  for (size_t i = 0; i < c->n_my; i++) {
    ps_block *b = &c->blocks[i];
    int64_t shp = (int64_t)b->n, four = 4, ntr = c->nt;
    int64_t meta[4];
    pthread_mutex_lock(&b->mu);
    meta[0] = b->step;
    meta[1] = b->updates;
    meta[2] = b->initialized;
    meta[3] = 0;
    if (b->step < low) low = b->step;
#define PUT(suffix, dt, s, data)                                             \
  if (st == FL_OK) {                                                         \
    snprintf(name, sizeof name, "dense/%u/%s", b->id, suffix);               \
    st = fl_ckpt_put(w, name, dt, 1, s, data);                               \
  }
    st = FL_OK;
    PUT("meta", FL_CKPT_I64, &four, meta);
    PUT("last", FL_CKPT_I64, &ntr, b->last);
    PUT("value", FL_CKPT_F32, &shp, b->value);
    if (b->s1) PUT("state1", FL_CKPT_F32, &shp, b->s1);
    if (b->s2) PUT("state2", FL_CKPT_F32, &shp, b->s2);
#undef PUT
    pthread_mutex_unlock(&b->mu);
    if (st != FL_OK) return st;
  }
  for (size_t i = 0; i < nt; i++) {
    ps_table *pt = &c->tables[i];
    char prefix[256];
    snprintf(prefix, sizeof prefix, "sparse/%s/", fl_ps_table_name(pt->t));
    snprintf(name, sizeof name, "%sdim", prefix);
    if ((st = fl_ckpt_put_i64(w, name, fl_ps_table_dim(pt->t))) != FL_OK) return st;
    pthread_mutex_lock(&pt->mu);
    st = fl_ps_table_save(pt->t, w, prefix);
    pthread_mutex_unlock(&pt->mu);
    if (st != FL_OK) return st;
  }
  *step = c->mode != FL_PS_SYNC || c->n_my == 0 ? next : low;
  I64("ps/step", *step);
#undef I64
  return FL_OK;
}

fl_status fl_ps_core_save(fl_ps_core *c, const char *path) {
  fl_ckpt_writer *w = NULL;
  int64_t step;
  fl_status st;

  FL_TRY(fl_ckpt_writer_open(path, &w));
  if ((st = write_state(c, w, &step)) != FL_OK) {
    fl_ckpt_writer_abort(w);
    return st;
  }
  st = fl_ckpt_writer_commit(w);
  if (st == FL_OK) atomic_fetch_add(&c->checkpoints, 1);
  return st;
}

fl_status fl_ps_core_save_dir(fl_ps_core *c, const char *dir, int64_t *step, char *path,
                              size_t cap) {
  fl_ckpt_writer *w = NULL;
  fl_status st;

  /* The temporary goes beside the file of the current step; the file is
   * named after the step written, which may be later. */
  FL_TRY(fl_ckpt_dir_path(dir, fl_ps_core_step(c), path, cap));
  FL_TRY(fl_ckpt_writer_open(path, &w));
  st = write_state(c, w, step);
  if (st == FL_OK) st = fl_ckpt_dir_path(dir, *step, path, cap);
  if (st != FL_OK) {
    fl_ckpt_writer_abort(w);
    return st;
  }
  st = fl_ckpt_writer_commit_as(w, path);
  if (st == FL_OK) atomic_fetch_add(&c->checkpoints, 1);
  return st;
}

static fl_status get_i64(const fl_ckpt *ck, const char *file, const char *key, int64_t *v) {
  if (fl_ckpt_get_i64(ck, key, v) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint %s: record %s missing", file, key);
  return FL_OK;
}

/* Find a 1-d record of dtype and n elements. */
static fl_status rec1(const fl_ckpt *ck, const char *file, const char *key, fl_ckpt_dtype dt,
                      int64_t n, fl_ckpt_record *r) {
  if (fl_ckpt_find(ck, key, r) != FL_OK || r->dtype != dt || r->ndim != 1 || r->shape[0] != n)
    return FL_ERR(FL_ECORRUPT, "checkpoint %s: record %s missing or of the wrong shape", file, key);
  return FL_OK;
}

/* The table name of a "sparse/<name>/dim" record into out, or 0. */
static int sparse_dim_record(const fl_ckpt_record *rd, char *out, size_t cap) {
  const char *slash;
  size_t len;
  if (strncmp(rd->name, "sparse/", 7) != 0) return 0;
  slash = strrchr(rd->name, '/');
  if (!slash || strcmp(slash, "/dim") != 0) return 0;
  len = (size_t)(slash - (rd->name + 7));
  if (len == 0 || len >= cap || memchr(rd->name + 7, '/', len)) return -1;
  memcpy(out, rd->name + 7, len);
  out[len] = '\0';
  return 1;
}

fl_status fl_ps_core_load(fl_ps_core *c, const fl_ckpt *ck, const char *file) {
  int64_t mode, idx, ns, ntr, bs, next;
  fl_ckpt_record rn, rnames, r;
  fl_ps_layout *l, *tl = NULL;
  const fl_ps_layout *use;
  char name[FL_CKPT_NAME_MAX];
  uint64_t *numel = NULL;
  char **names = NULL;
  size_t np = 0, new_tables = 0;
  int nstate_dense = fl_optim_state_count(c->dense_hp.kind);
  int nstate_sparse = fl_optim_state_count(c->sparse_hp.kind);
  fl_status st = FL_OK;

  FL_TRY(get_i64(ck, file, "ps/mode", &mode));
  FL_TRY(get_i64(ck, file, "ps/server_index", &idx));
  FL_TRY(get_i64(ck, file, "ps/n_servers", &ns));
  FL_TRY(get_i64(ck, file, "ps/num_trainers", &ntr));
  FL_TRY(get_i64(ck, file, "ps/block_size", &bs));
  FL_TRY(get_i64(ck, file, "ps/next_step", &next));
  if (mode != (int64_t)c->mode || idx != c->o.server_index || ns != c->o.n_servers ||
      ntr != c->nt || bs != (int64_t)c->o.job.pserver.dense_block_size || next < 0)
    return FL_ERR(FL_EINVAL,
                  "checkpoint %s belongs to another job (mode %lld, server %lld of %lld, %lld "
                  "trainers, block size %lld)",
                  file, (long long)mode, (long long)idx, (long long)ns, (long long)ntr,
                  (long long)bs);
  /* Phase 1: check everything; nothing changes yet. */
  if (fl_ckpt_find(ck, "dense/numel", &rn) == FL_OK) {
    const char *p;
    if (rn.dtype != FL_CKPT_U64 || rn.ndim != 1 || rn.shape[0] < 1 ||
        rn.shape[0] > FL_PS_MAX_BLOCKS || fl_ckpt_find(ck, "dense/names", &rnames) != FL_OK ||
        rnames.dtype != FL_CKPT_U8)
      return FL_ERR(FL_ECORRUPT, "checkpoint %s: dense layout records malformed", file);
    np = (size_t)rn.shape[0];
    numel = malloc(np * sizeof *numel);
    names = calloc(np, sizeof *names);
    if (!numel || !names) {
      st = FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", file);
      goto out;
    }
    memcpy(numel, rn.data, np * sizeof *numel);
    p = rnames.data;
    for (size_t i = 0; i < np; i++) {
      size_t left = rnames.nbytes - (size_t)(p - (const char *)rnames.data);
      size_t k = strnlen(p, left);
      if (k == left || k == 0 || k >= PARAM_NAME_MAX || numel[i] == 0 || numel[i] > MAX_NUMEL) {
        st = FL_ERR(FL_ECORRUPT, "checkpoint %s: dense layout records malformed", file);
        goto out;
      }
      if (!(names[i] = strdup(p))) {
        st = FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", file);
        goto out;
      }
      p += k + 1;
    }
  }
  pthread_mutex_lock(&c->mu);
  l = atomic_load(&c->layout);
  pthread_mutex_unlock(&c->mu);
  if (np && l) {
    int same = l->n_params == np;
    for (size_t i = 0; same && i < np; i++)
      same = l->numel[i] == numel[i] && !strcmp(c->names[i], names[i]);
    if (!same) {
      st = FL_ERR(FL_EINVAL, "checkpoint %s: dense layout differs from this job's", file);
      goto out;
    }
  } else if (np) {
    if ((st = fl_ps_layout_build(numel, np, c->o.job.pserver.dense_block_size, c->o.n_servers,
                                 &tl)) != FL_OK)
      goto out;
  }
  if (!np && l) {
    st = FL_ERR(FL_EINVAL,
                "checkpoint %s: holds no dense parameters, but this server already has them", file);
    goto out;
  }
  use = np ? (l ? l : tl) : NULL;
  for (size_t b = 0; use && b < use->n_blocks; b++) {
    int64_t n = (int64_t)use->blocks[b].n;
    if (use->blocks[b].server != c->o.server_index) continue;
#define CHECK(suffix, dt, cnt)                                               \
  snprintf(name, sizeof name, "dense/%zu/%s", b, suffix);                    \
  if ((st = rec1(ck, file, name, dt, cnt, &r)) != FL_OK) goto out
    CHECK("meta", FL_CKPT_I64, 4);
    CHECK("last", FL_CKPT_I64, c->nt);
    CHECK("value", FL_CKPT_F32, n);
    if (nstate_dense >= 1) { CHECK("state1", FL_CKPT_F32, n); }
    if (nstate_dense >= 2) { CHECK("state2", FL_CKPT_F32, n); }
#undef CHECK
  }
  for (size_t i = 0; i < fl_ckpt_count(ck); i++) {
    fl_ckpt_record rd;
    char tname[128];
    ps_table *pt;
    int64_t dim;
    int kind;
    if (fl_ckpt_record_at(ck, i, &rd) != FL_OK) continue;
    kind = sparse_dim_record(&rd, tname, sizeof tname);
    if (kind == 0) continue;
    if (kind < 0 || rd.dtype != FL_CKPT_I64 || rd.ndim != 0) {
      st = FL_ERR(FL_ECORRUPT, "checkpoint %s: bad sparse record %s", file, rd.name);
      goto out;
    }
    dim = *(const int64_t *)rd.data;
    if (dim < 1 || dim > 65536) {
      st = FL_ERR(FL_ECORRUPT, "checkpoint %s: table %s has dim %lld", file, tname,
                  (long long)dim);
      goto out;
    }
    pt = table_of(c, tname);
    if (pt && (int64_t)fl_ps_table_dim(pt->t) != dim) {
      st = FL_ERR(FL_EINVAL, "checkpoint %s: table %s has another dim here", file, tname);
      goto out;
    }
    if (!pt) new_tables++;
    snprintf(name, sizeof name, "sparse/%s/", tname);
    if ((st = fl_ps_table_verify(ck, name, (uint32_t)dim, nstate_sparse, NULL)) != FL_OK) goto out;
  }
  if (atomic_load(&c->n_tables) + new_tables > MAX_TABLES) {
    st = FL_ERR(FL_EINVAL, "checkpoint %s: more than %d sparse tables", file, MAX_TABLES);
    goto out;
  }
  /* Phase 2: take it over. */
  if (np && !l) {
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->layout)) {
      st = make_layout(c, numel, names, np);
      if (st == FL_OK) names = NULL; /* the core owns them now */
      if (st == FL_OK)
        snprintf(c->layout_from, sizeof c->layout_from, "the checkpoint %s", file);
    }
    pthread_mutex_unlock(&c->mu);
    if (st != FL_OK) goto out;
  }
  for (size_t i = 0; i < c->n_my; i++) {
    ps_block *b = &c->blocks[i];
    const int64_t *meta;
    pthread_mutex_lock(&b->mu);
#define COPY(suffix, dst, bytes)                                             \
  snprintf(name, sizeof name, "dense/%u/%s", b->id, suffix);                 \
  fl_ckpt_find(ck, name, &r);                                                \
  memcpy(dst, r.data, bytes)
    COPY("value", b->value, b->n * sizeof(float));
    if (b->s1) { COPY("state1", b->s1, b->n * sizeof(float)); }
    if (b->s2) { COPY("state2", b->s2, b->n * sizeof(float)); }
    COPY("last", b->last, (size_t)c->nt * sizeof(int64_t));
#undef COPY
    snprintf(name, sizeof name, "dense/%u/meta", b->id);
    fl_ckpt_find(ck, name, &r);
    meta = r.data;
    b->step = meta[0];
    b->prev_step = -1;
    b->updates = meta[1];
    b->initialized = meta[2] != 0;
    b->n_pend = 0;
    memset(b->have, 0, (size_t)c->nt);
    pthread_mutex_unlock(&b->mu);
  }
  atomic_store(&c->next_step, next);
  for (size_t i = 0; i < fl_ckpt_count(ck); i++) {
    fl_ckpt_record rd;
    char tname[128];
    ps_table *pt;
    if (fl_ckpt_record_at(ck, i, &rd) != FL_OK || sparse_dim_record(&rd, tname, sizeof tname) != 1)
      continue;
    pthread_mutex_lock(&c->mu);
    pt = table_of(c, tname);
    if (!pt) st = add_table(c, tname, (uint32_t) * (const int64_t *)rd.data);
    pt = table_of(c, tname);
    pthread_mutex_unlock(&c->mu);
    if (st != FL_OK) goto out;
    snprintf(name, sizeof name, "sparse/%s/", tname);
    pthread_mutex_lock(&pt->mu);
    st = fl_ps_table_load(pt->t, ck, name);
    pthread_mutex_unlock(&pt->mu);
    if (st != FL_OK) goto out;
  }
  /* Everyone registers again (their view of this server is gone). */
  pthread_mutex_lock(&c->mu);
  for (int t = 0; t < c->nt; t++)
    if (c->tr[t].state == T_LIVE) c->tr[t].state = T_UNKNOWN;
  c->start = fl_ps_now();
  pthread_mutex_unlock(&c->mu);
  FL_LOGI("loaded checkpoint %s: step %lld", file, (long long)fl_ps_core_step(c));
out:
  fl_ps_layout_free(tl);
  free(numel);
  free_names(names, np);
  return st;
}
