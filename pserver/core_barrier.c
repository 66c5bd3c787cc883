/* core_barrier.c - named barriers: each round completes when every counted
 * trainer arrived (sums and the minimum of what they sent), a trainer
 * waiting in one is "parked" so sync steps stop waiting for it, and each
 * trainer process takes a completed round's result once.  Under c->mu
 * (core_internal.h). */
#include <config.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

static ps_barrier *barrier_find(fl_ps_core *c, const char *name) {
  for (int i = 0; i < MAX_BARRIERS; i++)
    if (c->barriers[i].used && !strcmp(c->barriers[i].name, name)) return &c->barriers[i];
  return NULL;
}

/* Complete b when every counted trainer arrived.  c->mu held. */
int psc_barrier_try_complete(fl_ps_core *c, ps_barrier *b) {
  int any = 0;
  if (b->done) return 0;
  for (int t = 0; t < c->nt; t++) {
    if (b->arrived[t]) any = 1;
    else if (psc_is_counted(c, t)) return 0;
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
    psc_set_parked(c, t, 0);
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
    return psc_bad(c, "barrier from trainer %d: name missing or too long", t);
  if (req->n_values > FL_PS_BARRIER_MAX_VALUES)
    return psc_bad(c, "barrier %s from trainer %d: %zu values (at most %d)", req->name, t,
                   req->n_values, FL_PS_BARRIER_MAX_VALUES);
  for (size_t k = 0; k < req->n_values; k++)
    if (!isfinite(req->values[k]))
      return psc_bad(c, "barrier %s from trainer %d: non-finite value", req->name, t);
  pthread_mutex_lock(&c->mu);
  if ((st = psc_check_live(c, t)) != FL_OK) goto out;
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
      st = psc_bad(c, "barrier %s from trainer %d: %d barriers already pending", req->name, t,
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
    st = psc_bad(c, "barrier %s from trainer %d: %zu values, others sent %d", req->name, t,
                 req->n_values, b->nv);
    goto out;
  }
  if (!b->arrived[t]) {
    b->arrived[t] = 1;
    for (size_t k = 0; k < req->n_values; k++)
      b->vals[t * FL_PS_BARRIER_MAX_VALUES + k] = req->values[k];
    b->mins[t] = req->value_min;
  }
  done = psc_barrier_try_complete(c, b);
  if (!b->done) {
    st = FL_EAGAIN;
    parked = !psc_is_parked(c, t);
    psc_set_parked(c, t, 1);
  }
out:
  /* The result goes with the call that gets it, before anyone (answered by
   * the notify below) can start the next round. */
  if (st == FL_OK && resp) barrier_fill(c, b, t, resp, buf, 1);
  pthread_mutex_unlock(&c->mu);
  if (parked) psc_reevaluate(c); /* steps no longer wait for it */
  else if (st == FL_OK && done) psc_notify(c);
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

