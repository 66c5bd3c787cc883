/* core_modes.c - the pserver's update modes as an ops table
 * (fl_ps_mode_ops, core_internal.h), one per mode, chosen once at create:
 *   sync  - a block's step is applied once every counted trainer pushed its
 *           gradient (summed in trainer-id order, averaged, one optimizer
 *           step), held at the checkpoint gate; a sparse table's rows the
 *           same way (core_rows.c), and its pulls wait for the step;
 *   async - each gradient push runs the optimizer at once (rows too);
 *   geo   - each delta push is added to the values at once; the step window
 *           is k_steps wide.
 * Everything that differs between the modes is here, so the rest of the
 * core does not branch on the mode (as the trainer's fl_sync_ops). */
#include <config.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

/* ------------------------------------------------------------ sync rule */

/* A sync step waits for every counted trainer that is not parked in a
 * barrier: a trainer waiting in a barrier trains no step meanwhile, so
 * waiting for it could deadlock against a trainer that must finish its
 * steps before it reaches the same barrier (uneven work, a rejoined
 * trainer). */
static int all_counted_pushed(fl_ps_core *c, const ps_block *b, int and_committed) {
  for (int t = 0; t < c->nt; t++)
    if (psc_is_counted(c, t) && !psc_is_parked(c, t) &&
        (!b->have[t] || (and_committed && !psc_committed(c, t, b->pend_step))))
      return 0;
  return 1;
}

/* b->mu held: its pending step can be applied now (every push in, this
 * server's sparse rows of the step applied, and the block does not stand
 * at the gate's step).  The rows first: a trainer killed after its dense
 * pushes of a step and before its rows' leaves the step unapplied here,
 * and redoes it whole once restarted.  A block holding pushes stands at
 * their step (b->step == b->pend_step).  One moved forward to the gate's
 * step by a trainer ahead of it (after a restart from a checkpoint) did
 * not apply the step before it: it goes on, and the gate moves past it
 * (pserver/main.c gate_check), else it would wait for a checkpoint of a
 * step it does not hold. */
static int may_apply(fl_ps_core *c, const ps_block *b) {
  return (b->moved || b->step != atomic_load(&c->gate)) && all_counted_pushed(c, b, 1) &&
         psc_rows_through(c, b->pend_step);
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
  if (cnt > 1) /* the mean as a trainer's gradient merge takes it, bit for bit */
    (void)fl_gm_finalize(&b->acc, &(size_t){b->n}, 1, cnt, 1); /* b->n > 0: cannot fail */
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
  b->moved = 0;
  b->n_pend = 0;
  memset(b->have, 0, (size_t)c->nt);
}

static int64_t sync_push_limit(fl_ps_core *c, ps_block *b, int64_t *at) {
  (void)c;
  pthread_mutex_lock(&b->mu);
  *at = b->step;
  pthread_mutex_unlock(&b->mu);
  return *at + 1;
}

/* A gradient of step from trainer t joins b's pending step; the step is
 * applied once every counted trainer pushed and committed it.  A trainer
 * pushes a later step only once every server applied the pending one, so
 * every trainer committed it: a pending step holding every counted
 * trainer's push is applied first (its commits are on their way); one
 * missing a push was lost with this server's state (restarted from a
 * checkpoint).  Then a step above b's moves b there: the steps between,
 * and such a pending step, are skipped here, whichever trainer's push
 * comes first; a later push of a skipped step is a duplicate.  b->mu
 * held. */
static fl_status sync_push(fl_ps_core *c, ps_block *b, int t, int64_t step,
                           const Flotilla__Tensor *v, float *scratch, int *dup, int *progress,
                           int *at_gate) {
  fl_status st = FL_OK;
  (void)scratch;
  const int held = b->n_pend && step == b->pend_step && b->have[t];
  if (step < b->step || (held && psc_committed(c, t, step))) {
    *dup = 1;
  } else if (held) { /* sent again before its commit (core_commit.c): replaces */
    const float *g = psc_as_f32(v, b->n, b->pend[t]);
    if (g != b->pend[t]) memcpy(b->pend[t], g, b->n * sizeof(float));
  } else {
    if (b->n_pend && step > b->pend_step && all_counted_pushed(c, b, 0)) {
      sync_apply(c, b); /* its commits came late: the trainer ahead saw it committed */
      *progress = 1;
    } else if (b->n_pend && step > b->pend_step) {
      FL_LOGW("block %u: trainer %d pushed step %lld while step %lld has %d of its pushes; "
              "skipping that step (this server lost the others)",
              b->id, t, (long long)step, (long long)b->pend_step, b->n_pend);
      b->n_pend = 0;
      memset(b->have, 0, (size_t)c->nt);
    }
    if (!b->n_pend) {
      if (step > b->step) {
        FL_LOGI("block %u: moving from step %lld to step %lld (trainer %d is ahead)", b->id,
                (long long)b->step, (long long)step, t);
        b->step = step; /* the steps between are skipped here: pulls of them are answered */
        b->moved = 1;
        *progress = 1;
      }
      b->pend_step = step;
    }
    if (!b->pend[t]) b->pend[t] = malloc(b->n * sizeof(float));
    if (!b->acc && c->nt > 1) b->acc = malloc(b->n * sizeof(float));
    if (!b->pend[t] || (c->nt > 1 && !b->acc)) {
      st = FL_ERR(FL_ENOMEM, "pserver: out of memory for block %u", b->id);
    } else {
      const float *g = psc_as_f32(v, b->n, b->pend[t]);
      if (g != b->pend[t]) memcpy(b->pend[t], g, b->n * sizeof(float));
      b->have[t] = 1;
      b->n_pend++;
      if (may_apply(c, b)) {
        sync_apply(c, b);
        *progress = 1;
        if (b->step == atomic_load(&c->gate)) *at_gate = 1;
      }
    }
  }
  return st;
}

static void sync_pushed(fl_ps_core *c, int64_t step) {
  (void)c;
  (void)step;
}

/* A pull asking for step min_step waits until b applied it; one as of a
 * step (min_step < 0) b no longer holds is answered its current value. */
static int sync_pull_ready(fl_ps_core *c, const ps_block *b, int32_t t, int64_t min_step) {
  (void)c;
  if (b->step < min_step) return 0;
  if (min_step < 0 && b->step != -min_step - 1 && b->prev_step != -min_step - 1)
    FL_LOGW("pull from trainer %d as of step %lld: block %u is at step %lld; answering its "
            "current value", t, (long long)(-min_step - 1), b->id, (long long)b->step);
  return 1;
}

/* Apply every pending step that may be applied now (a trainer left, a
 * barrier parked one, the gate moved).  No lock held. */
static void sync_reevaluate(fl_ps_core *c) {
  int at_gate = 0;
  psc_rows_reevaluate(c); /* first: the blocks may wait for these rows */
  for (size_t i = 0; i < c->n_my; i++) {
    ps_block *b = &c->blocks[i];
    pthread_mutex_lock(&b->mu);
    if (b->n_pend && may_apply(c, b)) {
      sync_apply(c, b);
      if (b->step == atomic_load(&c->gate)) at_gate = 1;
    }
    pthread_mutex_unlock(&b->mu);
  }
  if (at_gate) psc_gate_reached(c);
}

/* No step in flight: no barrier waits, every block at one step with
 * nothing pending. */
static int sync_settled(fl_ps_core *c) {
  int64_t step = -1;
  int settled = 1;
  for (int t = 0; t < c->nt; t++)
    if (psc_is_parked(c, t)) return 0; /* a barrier still waits */
  for (size_t i = 0; i < c->n_my && settled; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    if (c->blocks[i].n_pend || (step >= 0 && c->blocks[i].step != step)) settled = 0;
    step = c->blocks[i].step;
    pthread_mutex_unlock(&c->blocks[i].mu);
  }
  return settled;
}

/* The lowest step among the blocks (next_step when there are none). */
static int64_t sync_step(fl_ps_core *c) {
  int64_t s = INT64_MAX;
  if (c->n_my == 0) return atomic_load(&c->next_step);
  for (size_t i = 0; i < c->n_my; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    if (c->blocks[i].step < s) s = c->blocks[i].step;
    pthread_mutex_unlock(&c->blocks[i].mu);
  }
  return s;
}

static int64_t sync_ckpt_step(const fl_ps_core *c, int64_t next, int64_t low) {
  return c->n_my == 0 ? next : low;
}

/* A sparse pull asking for step min_step waits until the table applied
 * every step before it, when trainer t pushed the step before it here: a
 * server that never took that step from t (restarted since, or t sent no
 * push of it) answers at once, as it has nothing to wait for. */
static int sync_sparse_ready(const ps_table *pt, int t, int64_t min_step) {
  return pt->step >= min_step || pt->cur_step[t] < min_step - 1;
}

/* ------------------------------------------------------- async and geo */

static int64_t async_push_limit(fl_ps_core *c, ps_block *b, int64_t *at) {
  (void)b;
  *at = atomic_load(&c->next_step);
  return *at + 1;
}

static int64_t geo_push_limit(fl_ps_core *c, ps_block *b, int64_t *at) {
  int64_t k = c->o.job.strategy.a_sync_configs.k_steps;
  (void)b;
  *at = atomic_load(&c->next_step);
  return *at + (k > 1 ? k : 1);
}

/* async: one optimizer step with gradient g.  b->mu held. */
static void async_update(fl_ps_core *c, ps_block *b, const float *g, int64_t step) {
  fl_optim_tensor x = {b->name, b->value, g, b->s1, b->s2, b->n};
  fl_status os = fl_optim_step(&c->dense_hp, &x, 1, fl_lr_at(&c->lr, step), b->updates + 1);
  if (os != FL_OK)
    FL_LOGE("block %u (%s): optimizer step failed: %s", b->id, b->name, fl_strerror(os));
  else
    b->updates++;
}

/* geo: the delta g added to the values.  b->mu held. */
static void geo_update(fl_ps_core *c, ps_block *b, const float *g, int64_t step) {
  (void)c;
  (void)step;
  for (uint64_t k = 0; k < b->n; k++) b->value[k] += g[k];
}

/* async and geo: a push of a step newer than t's last one is applied at
 * once by update, converted through scratch.  b->mu held. */
static fl_status push_at_once(fl_ps_core *c, ps_block *b, int t, int64_t step,
                              const Flotilla__Tensor *v, float *scratch, int *dup,
                              void (*update)(fl_ps_core *, ps_block *, const float *, int64_t)) {
  if (step <= b->last[t]) {
    *dup = 1;
  } else {
    const float *g = psc_as_f32(v, b->n, scratch);
    b->last[t] = step;
    update(c, b, g, step);
    atomic_fetch_add(&c->dense_updates, 1);
    b->step++;
  }
  return FL_OK;
}

static fl_status async_push(fl_ps_core *c, ps_block *b, int t, int64_t step,
                            const Flotilla__Tensor *v, float *scratch, int *dup, int *progress,
                            int *at_gate) {
  (void)progress;
  (void)at_gate;
  return push_at_once(c, b, t, step, v, scratch, dup, async_update);
}

static fl_status geo_push(fl_ps_core *c, ps_block *b, int t, int64_t step,
                          const Flotilla__Tensor *v, float *scratch, int *dup, int *progress,
                          int *at_gate) {
  (void)progress;
  (void)at_gate;
  return push_at_once(c, b, t, step, v, scratch, dup, geo_update);
}

/* next_step: one past the highest step pushed. */
static void async_pushed(fl_ps_core *c, int64_t step) {
  int64_t want = step + 1, cur = atomic_load(&c->next_step);
  while (cur < want && !atomic_compare_exchange_weak(&c->next_step, &cur, want)) {
  }
}

static int async_pull_ready(fl_ps_core *c, const ps_block *b, int32_t t, int64_t min_step) {
  (void)c;
  (void)b;
  (void)t;
  (void)min_step;
  return 1;
}

static void async_reevaluate(fl_ps_core *c) { (void)c; }

static int async_settled(fl_ps_core *c) {
  (void)c;
  return 1;
}

static int64_t async_step(fl_ps_core *c) { return atomic_load(&c->next_step); }

static int64_t async_ckpt_step(const fl_ps_core *c, int64_t next, int64_t low) {
  (void)c;
  (void)low;
  return next;
}

/* async and geo: rows are updated by each push at once, and pulls answered
 * at once. */
static fl_status async_sparse_push(fl_ps_core *c, ps_table *pt, int t, int64_t step,
                                   uint32_t seq, uint32_t parts, const uint64_t *keys, size_t n,
                                   const float *g, int *dup, int *progress) {
  (void)c;
  (void)t;
  (void)step;
  (void)seq;
  (void)parts;
  (void)dup;
  (void)progress;
  return psc_stripes_push(pt, keys, n, g);
}

/* sync: held for the step under the table's lock (core_rows.c). */
static fl_status sync_sparse_push(fl_ps_core *c, ps_table *pt, int t, int64_t step, uint32_t seq,
                                  uint32_t parts, const uint64_t *keys, size_t n,
                                  const float *g, int *dup, int *progress) {
  fl_status st;
  pthread_mutex_lock(&pt->mu);
  st = psc_rows_push(c, pt, t, step, seq, parts, keys, n, g, dup, progress);
  pthread_mutex_unlock(&pt->mu);
  return st;
}

static int async_sparse_ready(const ps_table *pt, int t, int64_t min_step) {
  (void)pt;
  (void)t;
  (void)min_step;
  return 1;
}

/* ---------------------------------------------------------------- tables */

static const fl_ps_mode_ops k_sync = {
    .mode = FL_PS_SYNC,
    .push_kind = FLOTILLA__PUSH_KIND__PUSH_GRAD,
    /* A trainer that rejoins while a sync step is applied on some blocks
     * and not yet on others computes that step from the values before it. */
    .keeps_prev = 1,
    .uses_scratch = 0, /* converted into the block's pending buffer */
    .gated = 1,
    .push_limit = sync_push_limit,
    .apply = sync_push,
    .pushed = sync_pushed,
    .pull_ready = sync_pull_ready,
    .reevaluate = sync_reevaluate,
    .settled = sync_settled,
    .step = sync_step,
    .ckpt_step = sync_ckpt_step,
    .sparse_push = sync_sparse_push,
    .sparse_ready = sync_sparse_ready,
};

static const fl_ps_mode_ops k_async = {
    .mode = FL_PS_ASYNC,
    .push_kind = FLOTILLA__PUSH_KIND__PUSH_GRAD,
    .uses_scratch = 1,
    .push_limit = async_push_limit,
    .apply = async_push,
    .pushed = async_pushed,
    .pull_ready = async_pull_ready,
    .reevaluate = async_reevaluate,
    .settled = async_settled,
    .step = async_step,
    .ckpt_step = async_ckpt_step,
    .sparse_push = async_sparse_push,
    .sparse_ready = async_sparse_ready,
};

static const fl_ps_mode_ops k_geo = {
    .mode = FL_PS_GEO,
    .push_kind = FLOTILLA__PUSH_KIND__PUSH_DELTA,
    .uses_scratch = 1,
    .push_limit = geo_push_limit,
    .apply = geo_push,
    .pushed = async_pushed,
    .pull_ready = async_pull_ready,
    .reevaluate = async_reevaluate,
    .settled = async_settled,
    .step = async_step,
    .ckpt_step = async_ckpt_step,
    .sparse_push = async_sparse_push,
    .sparse_ready = async_sparse_ready,
};

const fl_ps_mode_ops *fl_ps_mode_ops_of(fl_ps_mode m) {
  return m == FL_PS_SYNC ? &k_sync : m == FL_PS_GEO ? &k_geo : &k_async;
}
