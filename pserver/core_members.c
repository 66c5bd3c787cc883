/* core_members.c - who trains with this pserver: Register (checks, the
 * dense layout and sparse tables a trainer declares, its process
 * incarnation), heartbeats, liveness (fl_ps_core_tick declares the silent
 * dead), completion, and the re-evaluation of held steps and barriers when
 * the set of trainers a step waits for changes.  Locking: core_internal.h. */
#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

/* ----------------------------------------------------------- registration */

/* The request is one this server can take: the trainer id, the cluster's
 * shape, the mode, the run, the block size, the step and the declared
 * parameters and tables.  No lock held; nothing changes. */
static fl_status register_check(fl_ps_core *c, const Flotilla__RegisterRequest *req) {
  int t = req->trainer_id;

  if (t < 0 || t >= c->nt)
    return psc_bad(c, "register: trainer id %d not in [0, %d)", t, c->nt);
  if (req->num_trainers != c->nt || req->num_servers != c->o.n_servers ||
      req->server_index != c->o.server_index)
    return psc_bad(c, "register: trainer %d expects %d trainers and server %d of %d; this is "
                   "server %d of %d for %d trainers",
                   t, req->num_trainers, req->server_index, req->num_servers, c->o.server_index,
                   c->o.n_servers, c->nt);
  if ((int)req->mode != (int)c->ops->mode)
    return psc_bad(c, "register: trainer %d runs PS mode %d, this server %s", t, (int)req->mode,
                   fl_ps_mode_name(c->ops->mode));
  /* A trainer of another run (another job on the same ports sharing the
   * token, or a stale process) must not join this one. */
  if (c->o.run_id[0] && req->run_id && req->run_id[0] &&
      (strcmp(req->run_id, c->o.run_id) != 0 ||
       (req->job_hash && c->o.job_hash && req->job_hash != c->o.job_hash)))
    return psc_bad(c, "register: trainer %d belongs to run %s (job %016" PRIx64 "), this pserver "
                   "serves run %s (job %016" PRIx64 "): another job on the same address?", t,
                   req->run_id, req->job_hash, c->o.run_id, c->o.job_hash);
  if (req->dense_block_size != c->o.job.pserver.dense_block_size)
    return psc_bad(c, "register: trainer %d uses dense_block_size %" PRIu64 ", this server %zu", t,
                   req->dense_block_size, c->o.job.pserver.dense_block_size);
  if (req->step < 0 || req->step >= FL_PS_MAX_STEP)
    return psc_bad(c, "register: trainer %d declares step %" PRId64 " (must be in [0, %" PRId64
                   "))", t, req->step, FL_PS_MAX_STEP);
  if (req->committed < 0 || req->committed > FL_PS_MAX_STEP)
    return psc_bad(c, "register: trainer %d declares its commits below step %" PRId64
                   " (must be in [0, %" PRId64 "])", t, req->committed, FL_PS_MAX_STEP);
  if (req->n_dense > FL_PS_MAX_BLOCKS) return psc_bad(c, "register: too many dense parameters");
  for (size_t i = 0; i < req->n_dense; i++) {
    const Flotilla__DenseParamSpec *p = req->dense[i];
    if (!p->name || !p->name[0] || strlen(p->name) >= PARAM_NAME_MAX || p->numel == 0 ||
        p->numel > MAX_NUMEL)
      return psc_bad(c, "register: trainer %d: dense parameter %zu has a bad name or size", t, i);
  }
  for (size_t i = 0; i < req->n_sparse; i++) {
    const Flotilla__SparseTableSpec *s = req->sparse[i];
    if (!s->name || !s->name[0] || strlen(s->name) >= 128 || s->dim == 0 || s->dim > 65536)
      return psc_bad(c, "register: trainer %d: sparse table %zu has a bad name or dim", t, i);
  }
  {
    /* The block count (the wire carries block ids as uint32). */
    uint64_t bs = c->o.job.pserver.dense_block_size, nb = 0;
    for (size_t i = 0; i < req->n_dense; i++) nb += (req->dense[i]->numel + bs - 1) / bs;
    if (nb > FL_PS_MAX_BLOCKS)
      return psc_bad(c, "register: trainer %d declares %" PRIu64 " dense blocks of %" PRIu64
                     " floats (at most %u)", t, nb, bs, FL_PS_MAX_BLOCKS);
  }
  return FL_OK;
}

/* The dense layout: made from req's parameters (numel) when there is none
 * yet, else compared with them.  c->mu held. */
static fl_status register_dense(fl_ps_core *c, const Flotilla__RegisterRequest *req,
                                const uint64_t *numel) {
  int t = req->trainer_id;
  fl_ps_layout *l = atomic_load(&c->layout);
  char **names = NULL;
  fl_status st;

  if (req->n_dense && !l) {
    names = calloc(req->n_dense, sizeof *names);
    for (size_t i = 0; names && i < req->n_dense; i++)
      if (!(names[i] = strdup(req->dense[i]->name))) {
        psc_free_names(names, req->n_dense);
        names = NULL;
      }
    if (!names) {
      st = FL_ERR(FL_ENOMEM, "pserver: out of memory registering trainer %d", t);
      return st;
    }
    if ((st = psc_make_layout(c, numel, names, req->n_dense)) != FL_OK) {
      psc_free_names(names, req->n_dense);
      return st;
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
      st = psc_bad(c, "register: trainer %d declares dense parameters that differ from those this "
                   "server holds (%zu parameters, declared by %s): is the model of the job file "
                   "the same everywhere?", t, l->n_params, c->layout_from);
      return st;
    }
  }
  return FL_OK;
}

/* req's sparse tables: those held here have the same dim, the others are
 * added.  c->mu held. */
static fl_status register_sparse(fl_ps_core *c, const Flotilla__RegisterRequest *req) {
  int t = req->trainer_id;
  fl_status st;

  for (size_t i = 0; i < req->n_sparse; i++) {
    const Flotilla__SparseTableSpec *s = req->sparse[i];
    ps_table *pt = psc_table_of(c, s->name);
    if (pt && fl_ps_table_dim(pt->t) != s->dim) {
      st = psc_bad(c, "register: trainer %d: table %s has dim %u here, not %u", t, s->name,
                   fl_ps_table_dim(pt->t), s->dim);
      return st;
    }
  }
  for (size_t i = 0; i < req->n_sparse; i++)
    if (!psc_table_of(c, req->sparse[i]->name) &&
        (st = psc_add_table(c, req->sparse[i]->name, req->sparse[i]->dim)) != FL_OK)
      return st;
  return FL_OK;
}

/* Trainer t's process incarnation is live and counted; 1 when it joins the
 * steps' count (again).  c->mu held. */
static int register_trainer(fl_ps_core *c, int t, uint64_t incarnation) {
  int joined = 0;

  if (c->tr[t].state != T_LIVE || c->tr[t].incarnation != incarnation) {
    int was = c->tr[t].state;
    if (c->tr[t].incarnation != incarnation) {
      /* A new process: forget its sparse push history (its steps restart). */
      for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
        pthread_mutex_lock(&c->tables[i].mu);
        c->tables[i].cur_step[t] = -1;
        c->tables[i].seqmask[t] = 0;
        pthread_mutex_unlock(&c->tables[i].mu);
      }
    }
    FL_LOGI("trainer %d registered%s", t,
            c->o.elastic && was != T_LIVE ? " (elastic: it joins the running job)"
            : was == T_DEAD ? " again after being declared dead"
            : was == T_LIVE ? " again (new process)"
            : was == T_DONE ? " again after completing" : "");
    c->tr[t].state = T_LIVE;
    c->tr[t].incarnation = incarnation;
    joined = !psc_is_counted(c, t) || psc_is_parked(c, t);
    psc_set_counted(c, t, 1);
    psc_set_parked(c, t, 0);
  }
  return joined;
}

/* The answer: the server's step, whether every block is initialized, and
 * the step trainer t goes on from.  No lock held (takes each block's). */
static void register_answer(fl_ps_core *c, int t, Flotilla__RegisterResponse *resp) {
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
}

fl_status fl_ps_core_register(fl_ps_core *c, const Flotilla__RegisterRequest *req,
                              Flotilla__RegisterResponse *resp) {
  int t = req->trainer_id;
  uint64_t *numel = NULL;
  fl_status st;
  int joined = 0;

  if ((st = register_check(c, req)) != FL_OK) return st;
  if (req->n_dense) {
    numel = malloc(req->n_dense * sizeof *numel);
    if (!numel) return FL_ERR(FL_ENOMEM, "pserver: out of memory registering trainer %d", t);
    for (size_t i = 0; i < req->n_dense; i++) numel[i] = req->dense[i]->numel;
  }

  pthread_mutex_lock(&c->mu);
  if ((st = register_dense(c, req, numel)) != FL_OK) goto out;
  if ((st = register_sparse(c, req)) != FL_OK) goto out;
  joined = register_trainer(c, t, req->incarnation);
  if (psc_set_commits(c, t, req->commits, req->committed)) joined = 1; /* re-evaluated below */
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
  if (joined) psc_reevaluate(c);
  register_answer(c, t, resp);
  if (c->ops->mode == FL_PS_SYNC) resp->trainer_staged = psc_staged(c, t, resp->step);
  return FL_OK;
}

/* The trainer may call (registered, this process, alive).  c->mu held. */
fl_status psc_check_live(fl_ps_core *c, int t) {
  if (t < 0 || t >= c->nt) return psc_bad(c, "trainer id %d not in [0, %d)", t, c->nt);
  if (c->tr[t].state != T_LIVE) return FL_ESTATE;
  c->tr[t].last_seen = fl_ps_now();
  return FL_OK;
}

fl_status psc_enter(fl_ps_core *c, int t) {
  fl_status st;
  pthread_mutex_lock(&c->mu);
  st = psc_check_live(c, t);
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* ------------------------------------------------------ membership, health */

/* Look at every block and barrier again after the counted set changed,
 * then wake the service.  No lock held. */
void psc_reevaluate(fl_ps_core *c) {
  c->ops->reevaluate(c);
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < MAX_BARRIERS; i++)
    if (c->barriers[i].used) psc_barrier_try_complete(c, &c->barriers[i]);
  pthread_mutex_unlock(&c->mu);
  /* Always wake the service: held calls of dead trainers end too. */
  psc_notify(c);
}

fl_status fl_ps_core_heartbeat(fl_ps_core *c, const Flotilla__HeartbeatRequest *req,
                               Flotilla__HeartbeatResponse *resp) {
  int t = req->trainer_id, live = 0;
  fl_status st = FL_OK;
  if (t < 0 || t >= c->nt) return psc_bad(c, "heartbeat: trainer id %d not in [0, %d)", t, c->nt);
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
  if (t < 0 || t >= c->nt) return psc_bad(c, "complete: trainer id %d not in [0, %d)", t, c->nt);
  pthread_mutex_lock(&c->mu);
  if (c->tr[t].state == T_LIVE) {
    c->tr[t].state = T_DONE;
    psc_set_counted(c, t, 0);
    changed = 1;
    FL_LOGI("trainer %d completed", t);
  } else if (c->tr[t].state != T_DONE) {
    pthread_mutex_unlock(&c->mu);
    return FL_ESTATE;
  }
  for (int i = 0; i < c->nt; i++)
    remaining += c->tr[i].state == T_LIVE || (c->tr[i].state == T_UNKNOWN && psc_is_counted(c, i));
  pthread_mutex_unlock(&c->mu);
  resp->remaining = remaining;
  if (changed) psc_reevaluate(c);
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
      psc_set_counted(c, t, 0);
      changed = 1;
    } else if (x->state == T_UNKNOWN && psc_is_counted(c, t) && now - c->start > to) {
      FL_LOGW("trainer %d has not registered within %.1f s; not waiting for it", t, to);
      psc_set_counted(c, t, 0);
      changed = 1;
    }
  }
  pthread_mutex_unlock(&c->mu);
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    ps_table *pt = &c->tables[i];
    fl_ps_table_counts n;
    size_t rows;
    uint64_t ev;
    psc_stripes_sweep(pt, 0, 0, &n, &rows); /* every stripe's, under its lock */
    ev = n.evicted;
    pthread_mutex_lock(&pt->mu);
    if (ev != pt->evicted_logged) {
      FL_LOGI("sparse table %s: evicted %" PRIu64 " rows unseen longest (%" PRIu64
              " in all; %zu rows, limit %lld)",
              fl_ps_table_name(pt->t), ev - pt->evicted_logged, ev, rows,
              (long long)c->o.job.pserver.sparse.max_rows);
      pt->evicted_logged = ev;
    }
    pthread_mutex_unlock(&pt->mu);
  }
  /* sync mode expires rows at each step's apply (core_rows.c) */
  psc_sparse_sweep(c, c->ops->mode != FL_PS_SYNC);
  if (changed) psc_reevaluate(c);
}

int fl_ps_core_finished(fl_ps_core *c) {
  int done = 0, open = 0, never = 0;
  pthread_mutex_lock(&c->mu);
  for (int t = 0; t < c->nt; t++) {
    if (c->tr[t].state == T_DONE) done++;
    else if (c->tr[t].state == T_LIVE || (c->tr[t].state == T_UNKNOWN && psc_is_counted(c, t)))
      open++;
    else if (c->tr[t].state == T_UNKNOWN)
      never++;
  }
  pthread_mutex_unlock(&c->mu);
  if (done == 0 || open > 0) return 0;
  /* elastic: a slot no trainer took is spare room, not a missing trainer */
  return never && !c->o.elastic ? -1 : 1;
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

