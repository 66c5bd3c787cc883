/* core.c - a pserver's parameter state: create and free, the dense layout
 * and its blocks, the sparse table list, statistics, and the helpers the
 * other core files share (core_internal.h).  The rules live beside it:
 * core_members.c (registration, heartbeats, liveness, completion),
 * core_dense.c (dense push and pull), core_modes.c (the sync / async / geo
 * update rules as an ops table), core_sparse.c (sparse push and pull),
 * core_barrier.c (barriers), core_ckpt.c (checkpoints and the sync gate).
 * No gRPC here (see fl_ps.h for the rules; locking in core_internal.h). */
#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fl_log.h"
#include "core_internal.h"
#include "tier_rocks.h"

double fl_ps_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

fl_ps_mode fl_ps_mode_of(const fl_job *job) {
  return (fl_ps_mode)fl_proto_mode(job->strategy.a_sync, job->strategy.a_sync_configs.k_steps);
}

const char *fl_ps_mode_name(fl_ps_mode m) { return fl_proto_mode_name((int)m); }

static _Thread_local char t_last_error[512];

const char *fl_ps_core_last_error(void) { return t_last_error; }

/* A rejected request: counted, logged at warn level, and kept for the
 * service to send back as the status details (the client gets
 * INVALID_ARGUMENT; the server itself is fine). */
fl_status psc_bad(fl_ps_core *c, const char *fmt, ...) {
  va_list ap;
  atomic_fetch_add(&c->invalid, 1);
  va_start(ap, fmt);
  vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
  va_end(ap);
  FL_LOGW("rejected request: %s", t_last_error);
  return FL_EINVAL;
}

/* The per-table optimizers: named, distinct, of a kind and settings a
 * sparse table takes. */
static fl_status check_table_optims(const fl_ps_core_opts *o) {
  if (o->n_table_optims > FL_PS_MAX_TABLE_OPTIMS)
    return FL_ERR(FL_EINVAL, "pserver: %zu per-table optimizers, at most %d", o->n_table_optims,
                  FL_PS_MAX_TABLE_OPTIMS);
  for (size_t i = 0; i < o->n_table_optims; i++) {
    const fl_ps_table_optim *x = &o->table_optims[i];
    if (!x->name[0] || !memchr(x->name, '\0', sizeof x->name))
      return FL_ERR(FL_EINVAL, "pserver: per-table optimizer %zu has no table name", i);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(o->table_optims[j].name, x->name))
        return FL_ERR(FL_EINVAL, "pserver: table %s has two optimizers: give it one", x->name);
    if (!fl_proto_sparse_optim_ok(x->hp.kind))
      return FL_ERR(FL_EINVAL, "pserver: table %s: optimizer %s (" FL_PROTO_SPARSE_OPTIMS " only)",
                    x->name, fl_optim_kind_name(x->hp.kind));
    if (fl_optim_hparams_check(&x->hp) != FL_OK || !(x->lr >= 0) ||
        (x->hp.kind == FL_OPTIM_FTRL && !(x->lr > 0)))
      return FL_ERR(FL_EINVAL, "pserver: table %s: %s settings or lr %g out of range", x->name,
                    fl_optim_kind_name(x->hp.kind), (double)x->lr);
  }
  return FL_OK;
}

void psc_table_optim(const fl_ps_core *c, const char *name, fl_optim_hparams *hp, float *lr) {
  for (size_t i = 0; i < c->o.n_table_optims; i++)
    if (!strcmp(c->o.table_optims[i].name, name)) {
      *hp = c->o.table_optims[i].hp;
      *lr = c->o.table_optims[i].lr;
      return;
    }
  *hp = c->sparse_hp;
  *lr = c->o.job.pserver.sparse.optimizer.lr;
}

fl_status fl_ps_core_create(const fl_ps_core_opts *o, fl_ps_core **out) {
  fl_ps_core *c;
  fl_status st;

  *out = NULL;
  if (o->num_trainers < 1 || o->num_trainers > FL_CLUSTER_MAX_TRAINERS || o->n_servers < 1 ||
      o->server_index < 0 || o->server_index >= o->n_servers)
    return FL_ERR(FL_EINVAL, "pserver: %d trainers, server %d of %d: out of range",
                  o->num_trainers, o->server_index, o->n_servers);
  FL_TRY(check_table_optims(o));
  c = calloc(1, sizeof *c);
  if (!c) return FL_ERR(FL_ENOMEM, "pserver: out of memory");
  c->o = *o;
  if (!c->o.max_sparse_keys) c->o.max_sparse_keys = 1u << 20;
  if (!c->o.max_dense_elements) c->o.max_dense_elements = FL_PS_DEFAULT_MAX_DENSE;
  c->ops = fl_ps_mode_ops_of(fl_ps_mode_of(&c->o.job));
  c->nt = o->num_trainers;
  if (o->elastic && c->ops->mode == FL_PS_SYNC) {
    free(c);
    return FL_ERR(FL_EINVAL, "pserver: elastic trainers (FLOTILLA_PS_ELASTIC) need async or geo "
                  "mode (strategy.a_sync); sync PS trains with a fixed set of trainers");
  }
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
  /* elastic: a trainer counts from its registration on */
  for (int t = 0; t < c->nt && !o->elastic; t++) psc_set_counted(c, t, 1);
  atomic_init(&c->gate, -1);
  *out = c;
  return FL_OK;
}

void psc_free_blocks(ps_block *b, size_t n, int nt) {
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

void psc_free_names(char **names, size_t n) {
  for (size_t i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

void fl_ps_core_free(fl_ps_core *c) {
  fl_ps_layout *l;
  if (!c) return;
  l = atomic_load(&c->layout);
  psc_free_blocks(c->blocks, c->n_my, c->nt);
  psc_free_names(c->names, l ? l->n_params : 0);
  free(c->local);
  fl_ps_layout_free(l);
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    psc_stripes_free(&c->tables[i]);
    pthread_mutex_destroy(&c->tables[i].mu);
    free(c->tables[i].cur_step);
    free(c->tables[i].seqmask);
    psc_rows_free(&c->tables[i], c->nt);
  }
  fl_ps_tier_close(c->tier);
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
void psc_notify(fl_ps_core *c) {
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
fl_status psc_make_layout(fl_ps_core *c, const uint64_t *numel, char **names, size_t np) {
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
      return psc_bad(c, "dense layout of %zu parameters puts %" PRIu64 " floats on this server, "
                     "over its limit of %" PRIu64 " (flotilla-pserver --max_dense_elements)",
                     np, mine, c->o.max_dense_elements);
    }
    if (mine > phys / per) {
      fl_ps_layout_free(l);
      return psc_bad(c, "dense layout of %zu parameters puts %" PRIu64 " floats on this server: %"
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
    if (c->ops->keeps_prev && !(x->prev = malloc(x->n * sizeof(float)))) goto nomem;
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
  psc_free_blocks(blocks, k, c->nt);
  free(local);
  fl_ps_layout_free(l);
  return FL_ERR(FL_ENOMEM, "pserver: out of memory for the dense blocks");
}

ps_table *psc_table_of(fl_ps_core *c, const char *name) {
  size_t n = atomic_load(&c->n_tables);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(fl_ps_table_name(c->tables[i].t), name)) return &c->tables[i];
  return NULL;
}

fl_ps_table *fl_ps_core_table(fl_ps_core *c, const char *name) {
  ps_table *t = psc_table_of(c, name);
  return t ? t->t : NULL;
}

/* The job's own settings of the table called name (pserver.sparse_tables),
 * or NULL. */
static const fl_job_sparse_table *job_table(const fl_ps_core *c, const char *name) {
  const fl_job_pserver *p = &c->o.job.pserver;
  for (int i = 0; i < p->n_sparse_tables; i++)
    if (!strcmp(p->sparse_tables[i].name, name)) return &p->sparse_tables[i];
  return NULL;
}

/* Add a sparse table (c->mu held). */
fl_status psc_add_table(fl_ps_core *c, const char *name, uint32_t dim) {
  size_t n = atomic_load(&c->n_tables);
  ps_table *pt = &c->tables[n];
  const fl_job_sparse_table *jt;
  fl_ps_table_opts to;
  fl_status st;

  if (n == MAX_TABLES) return psc_bad(c, "more than %d sparse tables", MAX_TABLES);
  memset(&to, 0, sizeof to);
  to.name = name;
  to.dim = dim;
  to.max_rows = c->o.job.pserver.sparse.max_rows;
  to.init_range = c->o.job.pserver.sparse.init_range;
  to.seed = c->o.job.train.seed;
  if ((jt = job_table(c, name)) != NULL) {
    to.init_range = jt->init_range;
    to.has_padding = jt->has_padding;
    to.padding_id = (uint64_t)jt->padding_id;
  }
  psc_table_optim(c, name, &to.hp, &to.lr);
  to.admit_threshold = (uint32_t)c->o.job.pserver.sparse.admit_threshold;
  to.admit_sketch_bytes = c->o.job.pserver.sparse.admit_sketch_bytes;
  to.admit_default = c->o.job.pserver.sparse.admit_default;
  to.expire_after_steps = c->o.job.pserver.sparse.expire_after_steps;
  to.expire_after_seconds = c->o.job.pserver.sparse.expire_after_seconds;
  to.now = psc_wall_now();
  to.track_changes = c->o.job.pserver.checkpoint_delta.every > 0;
  memset(pt, 0, sizeof *pt);
  if ((st = psc_stripes_create(c, pt, &to)) != FL_OK) return st;
  pt->cur_step = malloc((size_t)c->nt * sizeof *pt->cur_step);
  pt->seqmask = calloc((size_t)c->nt, sizeof *pt->seqmask);
  if (!pt->cur_step || !pt->seqmask) {
    psc_stripes_free(pt);
    free(pt->cur_step);
    free(pt->seqmask);
    return FL_ERR(FL_ENOMEM, "pserver: out of memory for table %s", name);
  }
  for (int t = 0; t < c->nt; t++) pt->cur_step[t] = -1;
  pthread_mutex_init(&pt->mu, NULL);
  atomic_store(&c->n_tables, n + 1);
  FL_LOGI("sparse table %s: dim %u, %s, init uniform(%g), at most %lld rows on this server in "
          "%u stripes%s%s", name, dim, fl_optim_kind_name(to.hp.kind), (double)to.init_range,
          (long long)to.max_rows, pt->ns, to.has_padding ? ", with a padding id" : "",
          c->tier ? ", beyond pserver.memory_budget on disk" : "");
  return FL_OK;
}

/* ------------------------------------------------------ step, statistics */

int64_t fl_ps_core_step(fl_ps_core *c) { return c->ops->step(c); }

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
  r->sparse_init_rows = atomic_load(&c->sparse_init_rows);
  r->live_trainers = live;
  r->server_incarnation = c->incarnation;
  r->dense_blocks = (int32_t)c->n_my;
  r->dense_elements = l ? l->server_load[c->o.server_index] : 0;
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    uint64_t hot = 0, disk = 0, rows = 0, evicted = 0, padding = 0;
    psc_stripes_count(&c->tables[i], &rows, &evicted, &hot, &disk, &padding);
    r->sparse_rows += rows + disk;
    r->evicted_rows += evicted;
    r->padding_dropped += padding;
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
  ps_block *b = psc_block_of(c, id);
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

