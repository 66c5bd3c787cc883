/* core_rows.c - sparse rows in sync mode.  Each trainer's parts of a step
 * are held per (trainer, part) until every counted trainer sent all of its
 * parts (PushSparse `parts`); then the rows' gradients are summed in
 * trainer-id order (a trainer's parts in seq order), averaged over the
 * trainers that pushed the step by fl_gm_finalize, exactly as the dense
 * blocks are (core_modes.c sync_apply) and as a trainer's gradient merge
 * averages its micro-batches (trainer/loop_sparse.c), and applied once:
 * one optimizer step per row.
 * The table's step then moves on, and pulls asking for it are answered
 * (the mode's sparse_ready).  So the result depends neither on arrival
 * order nor on the number of trainers beyond the averaged gradient.
 * Locking: each table's mu (core_internal.h). */
#include <config.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

/* Trainer t sent every part it announced of the held step. */
static int trainer_done(const ps_table *pt, int t) {
  return pt->parts[t] && (uint32_t)__builtin_popcountll(pt->got[t]) >= pt->parts[t];
}

/* Every counted trainer not parked in a barrier sent the held step whole
 * (and committed it) (the dense rule, core_modes.c all_counted_pushed). */
static int all_sent(fl_ps_core *c, const ps_table *pt, int and_committed) {
  if (!pt->n_pend) return 0;
  for (int t = 0; t < c->nt; t++)
    if (psc_is_counted(c, t) && !psc_is_parked(c, t) &&
        (!trainer_done(pt, t) || (and_committed && !psc_committed(c, t, pt->pend_step))))
      return 0;
  return 1;
}

static int may_apply(fl_ps_core *c, const ps_table *pt) { return all_sent(c, pt, 1); }

/* Sum the held rows in trainer-id, then part, then row order into keys /
 * acc (nu distinct keys, first-seen order); slots: a hash of nslots. */
static size_t sum_rows(const fl_ps_core *c, const ps_table *pt, size_t dim, uint64_t *keys,
                       float *acc, int32_t *slots, size_t nslots) {
  size_t nu = 0;
  memset(slots, 0xff, nslots * sizeof *slots);
  for (int t = 0; t < c->nt; t++) {
    for (int s = 0; pt->parts[t] && s < MAX_SEQ; s++) {
      const ps_rows *r = &pt->pend[(size_t)t * MAX_SEQ + (size_t)s];
      for (size_t i = 0; i < r->n; i++) {
        size_t h = (size_t)fl_ps_mix64(r->keys[i]) & (nslots - 1);
        const float *g = r->g + i * dim;
        while (slots[h] >= 0 && keys[slots[h]] != r->keys[i]) h = (h + 1) & (nslots - 1);
        if (slots[h] < 0) {
          slots[h] = (int32_t)nu;
          keys[nu] = r->keys[i];
          memcpy(acc + nu * dim, g, dim * sizeof(float));
          nu++;
        } else {
          float *a = acc + (size_t)slots[h] * dim;
          for (size_t j = 0; j < dim; j++) a[j] += g[j];
        }
      }
    }
  }
  return nu;
}

/* Drop what pt holds of a step (the buffers stay); its step becomes step.
 * pt->mu held. */
static void rows_reset(ps_table *pt, int nt, int64_t step) {
  pt->step = step;
  pt->n_pend = 0;
  for (int t = 0; pt->pend && t < nt; t++) {
    pt->parts[t] = 0;
    pt->got[t] = 0;
    for (int s = 0; s < MAX_SEQ; s++) pt->pend[(size_t)t * MAX_SEQ + (size_t)s].n = 0;
  }
}

/* Apply the held step: summed, averaged over the trainers that pushed it,
 * one optimizer step per row; the table then waits for the next step.
 * pt->mu held, pt->n_pend > 0. */
static fl_status rows_apply(fl_ps_core *c, ps_table *pt) {
  size_t dim = fl_ps_table_dim(pt->t), total = 0, nslots = 16, nu;
  uint64_t *keys;
  float *acc;
  int32_t *slots;
  fl_status st = FL_OK;

  for (int t = 0; t < c->nt; t++)
    for (int s = 0; pt->parts[t] && s < MAX_SEQ; s++) total += pt->pend[t * MAX_SEQ + s].n;
  while (nslots < 2 * total + 1) nslots *= 2;
  keys = malloc((total ? total : 1) * sizeof *keys);
  acc = malloc((total ? total : 1) * dim * sizeof *acc);
  slots = malloc(nslots * sizeof *slots);
  if (!keys || !acc || !slots) {
    st = FL_ERR(FL_ENOMEM, "sparse table %s: out of memory applying step %lld (%zu rows)",
                fl_ps_table_name(pt->t), (long long)pt->pend_step, total);
  } else {
    nu = sum_rows(c, pt, dim, keys, acc, slots, nslots);
    const size_t len = nu * dim;
    /* the trainers' mean as a trainer's gradient merge takes it (loop_sparse.c) */
    if (len) st = fl_gm_finalize(&acc, &len, 1, pt->n_pend, 1);
    if (st == FL_OK) st = psc_stripes_push(pt, keys, nu, acc);
    if (st == FL_OK) psc_stripes_expire(pt, psc_wall_now());
  }
  free(keys);
  free(acc);
  free(slots);
  rows_reset(pt, c->nt, pt->pend_step + 1);
  return st;
}

/* The per-trainer buffers, made on the first sync push.  pt->mu held. */
static fl_status rows_alloc(ps_table *pt, int nt) {
  if (pt->pend) return FL_OK;
  pt->parts = calloc((size_t)nt, sizeof *pt->parts);
  pt->got = calloc((size_t)nt, sizeof *pt->got);
  pt->pend = calloc((size_t)nt * MAX_SEQ, sizeof *pt->pend);
  if (pt->parts && pt->got && pt->pend) return FL_OK;
  free(pt->parts);
  free(pt->got);
  free(pt->pend);
  pt->parts = NULL;
  pt->got = NULL;
  pt->pend = NULL;
  return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory", fl_ps_table_name(pt->t));
}

/* Copy n rows into r. */
static fl_status rows_hold(ps_rows *r, const uint64_t *keys, size_t n, const float *g,
                           size_t dim) {
  if (n > r->cap) {
    uint64_t *nk = realloc(r->keys, n * sizeof *nk);
    float *ng = nk ? realloc(r->g, n * dim * sizeof *ng) : NULL;
    if (nk) r->keys = nk;
    if (!nk || !ng) return FL_ERR(FL_ENOMEM, "pserver: out of memory holding %zu rows", n);
    r->g = ng;
    r->cap = n;
  }
  if (n) {
    memcpy(r->keys, keys, n * sizeof *keys);
    memcpy(r->g, g, n * dim * sizeof *g);
  }
  r->n = n;
  return FL_OK;
}

/* A part held but not committed, sent again (a restarted trainer that
 * computed its step again): it replaces the held one.  Announcing another
 * number of parts drops the trainer's other held parts.  pt->mu held. */
static fl_status rows_replace(ps_table *pt, int t, uint32_t seq, uint32_t parts,
                              const uint64_t *keys, size_t n, const float *g) {
  if ((parts ? parts : 1) != pt->parts[t]) {
    pt->got[t] = 0;
    for (int s = 0; s < MAX_SEQ; s++) pt->pend[(size_t)t * MAX_SEQ + (size_t)s].n = 0;
    pt->parts[t] = parts ? parts : 1;
  }
  pt->got[t] |= 1ULL << seq;
  return rows_hold(&pt->pend[(size_t)t * MAX_SEQ + seq], keys, n, g, fl_ps_table_dim(pt->t));
}

fl_status psc_rows_push(fl_ps_core *c, ps_table *pt, int t, int64_t step, uint32_t seq,
                        uint32_t parts, const uint64_t *keys, size_t n, const float *g, int *dup,
                        int *progress) {
  const int held = pt->n_pend && step == pt->pend_step && ((pt->got[t] >> seq) & 1u);
  if (step < pt->step || (held && psc_committed(c, t, step))) {
    *dup = 1;
    return FL_OK;
  }
  if (held) return rows_replace(pt, t, seq, parts, keys, n, g);
  FL_TRY(rows_alloc(pt, c->nt));
  if (step > pt->step && all_sent(c, pt, 0)) { /* the core_modes.c sync_push rule */
    fl_status st = rows_apply(c, pt);
    *progress = 1;
    if (st != FL_OK) return st;
  }
  if (step > pt->step) { /* skipped here */
    if (pt->n_pend)
      FL_LOGW("sparse table %s: trainer %d pushed step %lld while step %lld has %d of its "
              "trainers; skipping that step (this server lost the others)",
              fl_ps_table_name(pt->t), t, (long long)step, (long long)pt->pend_step, pt->n_pend);
    else
      FL_LOGI("sparse table %s: moving from step %lld to step %lld (trainer %d is ahead)",
              fl_ps_table_name(pt->t), (long long)pt->step, (long long)step, t);
    rows_reset(pt, c->nt, step);
    *progress = 1;
  }
  pt->pend_step = step;
  FL_TRY(rows_hold(&pt->pend[(size_t)t * MAX_SEQ + seq], keys, n, g, fl_ps_table_dim(pt->t)));
  if (!pt->parts[t]) pt->n_pend++;
  pt->parts[t] = parts ? parts : 1;
  pt->got[t] |= 1ULL << seq;
  if (may_apply(c, pt)) {
    *progress = 1;
    return rows_apply(c, pt);
  }
  return FL_OK;
}

int psc_rows_reevaluate(fl_ps_core *c) {
  int applied = 0;
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    ps_table *pt = &c->tables[i];
    pthread_mutex_lock(&pt->mu);
    if (may_apply(c, pt)) {
      fl_status st = rows_apply(c, pt);
      if (st != FL_OK)
        FL_LOGE("sparse table %s: step not applied: %s", fl_ps_table_name(pt->t),
                fl_strerror(st));
      applied = 1;
    }
    pthread_mutex_unlock(&pt->mu);
  }
  return applied;
}

int psc_rows_through(fl_ps_core *c, int64_t step) {
  int through = 1;
  for (size_t i = 0; through && i < atomic_load(&c->n_tables); i++) {
    ps_table *pt = &c->tables[i];
    pthread_mutex_lock(&pt->mu);
    through = !pt->pend || pt->step > step; /* a table nobody pushed rows to holds nothing */
    pthread_mutex_unlock(&pt->mu);
  }
  return through;
}

int psc_rows_staged(ps_table *pt, int t, int64_t step) {
  pthread_mutex_lock(&pt->mu);
  int ok = !pt->pend || pt->step > step ||
           (pt->n_pend && pt->pend_step == step && trainer_done(pt, t));
  pthread_mutex_unlock(&pt->mu);
  return ok;
}

void psc_rows_free(ps_table *pt, int nt) {
  for (size_t i = 0; pt->pend && i < (size_t)nt * MAX_SEQ; i++) {
    free(pt->pend[i].keys);
    free(pt->pend[i].g);
  }
  free(pt->pend);
  free(pt->parts);
  free(pt->got);
}
