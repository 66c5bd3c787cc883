/* test_ps_core.c - the pserver's update rules without a network: sync
 * aggregation in trainer-id order whatever the arrival order, pulls held
 * until the step is applied, duplicate pushes ignored, dead trainers not
 * waited for, async and geo updates, barriers, bad requests that change
 * nothing, sparse calls, a sync step's dense blocks held until the rows
 * of it are in, a sync step held until every trainer committed it (and a
 * restarted trainer's commit of a step applied elsewhere), and a
 * checkpoint round trip of the whole core. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ps.h"
#include "fl_ps_layout.h"

#define N 4

static uint64_t mk_max_dense; /* max_dense_elements of the next mk (0: default) */
static size_t mk_block = N;   /* dense_block_size of the next mk */
static int mk_elastic;        /* elastic trainer slots in the next mk */

static fl_ps_core *mk(int nt, int a_sync, int k_steps, fl_optim_kind kind, float lr,
                      double hb_timeout) {
  fl_ps_core_opts o;
  fl_ps_core *c = NULL;
  memset(&o, 0, sizeof o);
  fl_job_defaults(&o.job);
  o.job.pserver.optimizer.hp.kind = kind;
  o.job.pserver.optimizer.lr = lr;
  o.job.pserver.optimizer.hp.momentum = 0.9f;
  o.job.pserver.dense_block_size = mk_block;
  o.job.pserver.sparse.optimizer.hp.kind = FL_OPTIM_SGD;
  o.job.pserver.sparse.optimizer.lr = 1.0f;
  o.job.pserver.sparse.max_rows = 100;
  o.job.strategy.a_sync = a_sync;
  o.job.strategy.a_sync_configs.k_steps = k_steps;
  o.server_index = 0;
  o.n_servers = 1;
  o.num_trainers = nt;
  o.heartbeat_timeout_s = hb_timeout;
  o.max_dense_elements = mk_max_dense;
  o.elastic = mk_elastic;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_OK);
  return c;
}

/* A Register request with the specs it points to. */
typedef struct reg_req {
  Flotilla__RegisterRequest r;
  Flotilla__DenseParamSpec p, *pp;
  Flotilla__SparseTableSpec s, *sp;
} reg_req;

/* Fills q (the caller's, which may change any field after): trainer t of
 * nt, process inc, sync, with one dense parameter "w" of N floats in
 * blocks of N and a sparse table "emb" of dim 2, on the only server. */
static void reg_req_init(reg_req *q, int t, int nt, uint64_t inc) {
  flotilla__register_request__init(&q->r);
  flotilla__dense_param_spec__init(&q->p);
  flotilla__sparse_table_spec__init(&q->s);
  q->pp = &q->p;
  q->sp = &q->s;
  q->p.name = "w";
  q->p.numel = N;
  q->s.name = "emb";
  q->s.dim = 2;
  q->r.trainer_id = t;
  q->r.num_trainers = nt;
  q->r.incarnation = inc;
  q->r.dense_block_size = N;
  q->r.num_servers = 1;
  q->r.n_dense = 1;
  q->r.dense = &q->pp;
  q->r.n_sparse = 1;
  q->r.sparse = &q->sp;
}

/* Register trainer t (process 1000 + t) in mode, declaring `declare` as
 * its next push's step; *step gets the core's. */
static fl_status reg_at(fl_ps_core *c, int t, int nt, int mode, int64_t declare, int64_t *step) {
  Flotilla__RegisterResponse out = FLOTILLA__REGISTER_RESPONSE__INIT;
  reg_req q;
  fl_status st;
  reg_req_init(&q, t, nt, 1000 + (uint64_t)t);
  q.r.mode = mode;
  q.r.step = declare;
  st = fl_ps_core_register(c, &q.r, &out);
  if (step) *step = out.step;
  return st;
}

static fl_status reg(fl_ps_core *c, int t, int nt, int mode, int64_t *step) {
  return reg_at(c, t, nt, mode, 0, step);
}

/* Every trainer of nt registers in mode. */
static void reg_all(fl_ps_core *c, int nt, int mode) {
  for (int t = 0; t < nt; t++) ck_assert_int_eq(reg(c, t, nt, mode, NULL), FL_OK);
}

typedef struct push_req {
  Flotilla__PushDenseRequest r;
  Flotilla__DenseBlock b;
  Flotilla__DenseBlock *bp;
  Flotilla__Tensor t;
  int64_t shape;
} push_req;

static void mkpush(push_req *p, int t, int64_t step, int kind, const void *v, size_t n) {
  flotilla__push_dense_request__init(&p->r);
  flotilla__dense_block__init(&p->b);
  flotilla__tensor__init(&p->t);
  p->shape = (int64_t)n;
  p->t.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  p->t.n_shape = 1;
  p->t.shape = &p->shape;
  p->t.data.data = (uint8_t *)v;
  p->t.data.len = n * sizeof(float);
  p->b.block = 0;
  p->b.value = &p->t;
  p->bp = &p->b;
  p->r.trainer_id = t;
  p->r.step = step;
  p->r.kind = kind;
  p->r.n_blocks = 1;
  p->r.blocks = &p->bp;
}

static fl_status push(fl_ps_core *c, int t, int64_t step, int kind, const float *v, int *dup) {
  push_req p;
  Flotilla__PushDenseResponse out = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
  fl_status st;
  mkpush(&p, t, step, kind, v, N);
  st = fl_ps_core_push_dense(c, &p.r, &out);
  if (dup) *dup = out.duplicates;
  return st;
}

/* Trainer t's gradient g of step, accepted: 1 when it was a duplicate. */
static int grad_dup(fl_ps_core *c, int t, int64_t step, const float *g) {
  int dup = -1;
  ck_assert_int_eq(push(c, t, step, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, &dup), FL_OK);
  return dup;
}

static void value(fl_ps_core *c, float *out, int64_t *step) {
  ck_assert_int_eq(fl_ps_core_block_value(c, 0, out, N, step), FL_OK);
}

static const float init_v[N] = {1, 2, 3, 4};

/* Three trainers push step 0 in the given arrival order. */
static void sync_three(const int order[3], float out[N]) {
  fl_ps_core *c = mk(3, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  /* Float sums depend on order: in id order (1e8 + 1) - 1e8 = 0, arriving
   * as t2, t0, t1 it would be (-1e8 + 1e8) + 1 = 1. */
  const float g[3][N] = {{1e8f, 1e8f, 0, 3}, {1, 1, 0, 3}, {-1e8f, -1e8f, 0, 3}};
  uint32_t blk = 0;
  reg_all(c, 3, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(fl_ps_core_pull_check(c, order[i], 1, &blk, 1), FL_EAGAIN);
    ck_assert_int_eq(push(c, order[i], 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g[order[i]], NULL),
                     FL_OK);
  }
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 1, &blk, 1), FL_OK);
  value(c, out, NULL);
  fl_ps_core_free(c);
}

START_TEST(test_sync_order) {
  const int a[3] = {2, 0, 1}, b[3] = {1, 2, 0}, d[3] = {0, 1, 2};
  float va[N], vb[N], vd[N];
  sync_three(a, va);
  sync_three(b, vb);
  sync_three(d, vd);
  /* Same bits whatever the arrival order, and the id-order sum. */
  ck_assert_mem_eq(va, vb, sizeof va);
  ck_assert_mem_eq(va, vd, sizeof va);
  ck_assert_float_eq(va[0], 1.0f);      /* mean 0: unchanged */
  ck_assert_float_eq(va[2], 3.0f);
  ck_assert_float_eq(va[3], 4.0f - 3.0f); /* mean of 3,3,3 */
}
END_TEST

START_TEST(test_sync_pull_waits_and_steps) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  const float g0[N] = {1, 1, 1, 1}, g1[N] = {3, 3, 3, 3};
  float v[N];
  int64_t step;
  uint32_t blk = 0;
  ck_assert_int_eq(reg(c, 0, 2, 0, &step), FL_OK);
  ck_assert_int_eq(step, 0);
  ck_assert_int_eq(reg(c, 1, 2, 0, NULL), FL_OK);
  /* Not initialized yet: pulls and pushes must register/init first. */
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 0, &blk, 1), FL_ESTATE);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(c, 1, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, g1, NULL), FL_OK); /* ignored */
  value(c, v, &step);
  ck_assert_mem_eq(v, init_v, sizeof v);
  for (int s = 0; s < 3; s++) {
    ck_assert_int_eq(push(c, 0, s, FLOTILLA__PUSH_KIND__PUSH_GRAD, g0, NULL), FL_OK);
    ck_assert_int_eq(fl_ps_core_pull_check(c, 0, s + 1, &blk, 1), FL_EAGAIN);
    ck_assert_int_eq(fl_ps_core_pull_check(c, 1, s, &blk, 1), FL_OK);
    ck_assert_int_eq(push(c, 1, s, FLOTILLA__PUSH_KIND__PUSH_GRAD, g1, NULL), FL_OK);
    ck_assert_int_eq(fl_ps_core_pull_check(c, 0, s + 1, &blk, 1), FL_OK);
  }
  value(c, v, &step);
  ck_assert_int_eq(step, 3);
  ck_assert_int_eq(fl_ps_core_step(c), 3);
  for (int i = 0; i < N; i++) ck_assert_float_eq_tol(v[i], init_v[i] - 3 * 0.5f * 2.0f, 1e-6f);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_duplicate_push_ignored) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  fl_ps_core *a = mk(1, 1, 0, FL_OPTIM_SGD, 1.0f, 0);
  const float g[N] = {1, 1, 1, 1};
  float v[N];
  /* Sync: the retried push of step 0 counts once, before and after apply. */
  reg_all(c, 2, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(grad_dup(c, 0, 0, g), 0);
  ck_assert_int_eq(grad_dup(c, 0, 0, g), 1);
  ck_assert_int_eq(push(c, 1, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(grad_dup(c, 1, 0, g), 1);
  value(c, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 1.0f);
  /* Async: one application per (trainer, step), older steps ignored (the
   * trainer says it is at step 5). */
  ck_assert_int_eq(reg_at(a, 0, 1, 1, 5, NULL), FL_OK);
  ck_assert_int_eq(push(a, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(grad_dup(a, 0, 5, g), 0);
  ck_assert_int_eq(grad_dup(a, 0, 5, g), 1);
  ck_assert_int_eq(grad_dup(a, 0, 4, g), 1);
  value(a, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 1.0f);
  ck_assert_int_eq(grad_dup(a, 0, 6, g), 0);
  value(a, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 2.0f);
  ck_assert_int_eq(fl_ps_core_step(a), 7);
  fl_ps_core_free(c);
  fl_ps_core_free(a);
}
END_TEST

START_TEST(test_dead_trainer_not_waited_for) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0.2);
  const float g[N] = {2, 2, 2, 2};
  Flotilla__HeartbeatRequest hb = FLOTILLA__HEARTBEAT_REQUEST__INIT;
  Flotilla__HeartbeatResponse hr = FLOTILLA__HEARTBEAT_RESPONSE__INIT;
  float v[N];
  uint32_t blk = 0;
  reg_all(c, 2, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  usleep(300000);
  hb.trainer_id = 0;
  hb.incarnation = 1000;
  ck_assert_int_eq(fl_ps_core_heartbeat(c, &hb, &hr), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 1, &blk, 1), FL_EAGAIN);
  fl_ps_core_tick(c, fl_ps_now()); /* trainer 1 silent for 0.3 s: dead */
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 1, &blk, 1), FL_OK);
  value(c, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 2.0f); /* only trainer 0 */
  /* The dead one is told to register again; after that it is waited for. */
  hb.trainer_id = 1;
  hb.incarnation = 1001;
  ck_assert_int_eq(fl_ps_core_heartbeat(c, &hb, &hr), FL_ESTATE);
  ck_assert_int_eq(push(c, 1, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_ESTATE);
  ck_assert_int_eq(reg(c, 1, 2, 0, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 2, &blk, 1), FL_EAGAIN);
  ck_assert_int_eq(push(c, 1, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 2, &blk, 1), FL_OK);
  /* Completion: once both completed the job is finished. */
  {
    Flotilla__CompleteRequest cr = FLOTILLA__COMPLETE_REQUEST__INIT;
    Flotilla__CompleteResponse co = FLOTILLA__COMPLETE_RESPONSE__INIT;
    cr.trainer_id = 0;
    ck_assert_int_eq(fl_ps_core_complete(c, &cr, &co), FL_OK);
    ck_assert_int_eq(co.remaining, 1);
    ck_assert(!fl_ps_core_finished(c));
    cr.trainer_id = 1;
    ck_assert_int_eq(fl_ps_core_complete(c, &cr, &co), FL_OK);
    ck_assert_int_eq(co.remaining, 0);
    ck_assert_int_eq(fl_ps_core_finished(c), 1);
  }
  fl_ps_core_free(c);
}
END_TEST

/* Fault 5: a trainer that never registered (its connection refused, e.g.
 * EMFILE) is not waited for after heartbeat_timeout_s, but the job does not
 * count as complete when the others are done. */
START_TEST(test_incomplete_without_every_trainer) {
  fl_ps_core *c = mk(3, 0, 0, FL_OPTIM_SGD, 0.1f, 0.2);
  Flotilla__CompleteRequest cr = FLOTILLA__COMPLETE_REQUEST__INIT;
  Flotilla__CompleteResponse co = FLOTILLA__COMPLETE_RESPONSE__INIT;
  char ids[64];
  ck_assert_int_eq(reg(c, 0, 3, 0, NULL), FL_OK);
  usleep(300000);
  fl_ps_core_tick(c, fl_ps_now()); /* 1 and 2 never came: not waited for */
  ck_assert_int_eq(reg(c, 0, 3, 0, NULL), FL_OK); /* 0 was silent as well */
  ck_assert_int_eq(fl_ps_core_finished(c), 0);
  cr.trainer_id = 0;
  ck_assert_int_eq(fl_ps_core_complete(c, &cr, &co), FL_OK);
  ck_assert_int_eq(fl_ps_core_finished(c), -1);
  ck_assert_uint_eq(fl_ps_core_unregistered(c, ids, sizeof ids), 2);
  ck_assert_str_eq(ids, "1, 2");
  fl_ps_core_free(c);
}
END_TEST

/* Elastic slots (async): nothing waits for a slot nobody took; a trainer
 * registering mid-run counts from then on; the job is complete when the
 * trainers that came completed.  Sync mode refuses elastic slots. */
START_TEST(test_elastic_slots) {
  Flotilla__BarrierRequest b = FLOTILLA__BARRIER_REQUEST__INIT;
  Flotilla__CompleteRequest cr = FLOTILLA__COMPLETE_REQUEST__INIT;
  Flotilla__CompleteResponse co = FLOTILLA__COMPLETE_RESPONSE__INIT;
  fl_ps_core_opts o;
  fl_ps_core *c = NULL;
  mk_elastic = 1;
  c = mk(3, 1, 0, FL_OPTIM_SGD, 0.1f, 0);
  mk_elastic = 0;
  ck_assert_int_eq(reg(c, 0, 3, 1, NULL), FL_OK);
  b.name = "epoch0";
  b.trainer_id = 0;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK); /* slots 1, 2: nobody */
  ck_assert_int_eq(reg(c, 2, 3, 1, NULL), FL_OK);     /* a trainer joins */
  b.name = "epoch1";
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN);
  b.trainer_id = 2;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK);
  for (int t = 0; t <= 2; t += 2) {
    cr.trainer_id = t;
    ck_assert_int_eq(fl_ps_core_complete(c, &cr, &co), FL_OK);
  }
  ck_assert_int_eq(fl_ps_core_finished(c), 1);
  fl_ps_core_free(c);
  memset(&o, 0, sizeof o);
  fl_job_defaults(&o.job);
  o.n_servers = 1;
  o.num_trainers = 2;
  o.elastic = 1;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_EINVAL);
}
END_TEST

START_TEST(test_async_and_geo) {
  fl_ps_core *a = mk(2, 1, 0, FL_OPTIM_SGD, 0.1f, 0);
  fl_ps_core *g = mk(2, 1, 4, FL_OPTIM_SGD, 0.1f, 0);
  const float grad[N] = {1, 2, 3, 4}, delta[N] = {0.5f, 0.5f, -1, 0};
  float v[N];
  reg_all(a, 2, 1);
  ck_assert_int_eq(push(a, 1, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  /* Each push applies at once, no waiting for the other trainer. */
  ck_assert_int_eq(push(a, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_OK);
  value(a, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq_tol(v[i], init_v[i] - 0.1f * grad[i], 1e-6f);
  ck_assert_int_eq(push(a, 1, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_OK);
  value(a, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq_tol(v[i], init_v[i] - 0.2f * grad[i], 1e-6f);
  /* Geo: deltas are added; gradients are refused (wrong kind for geo). */
  ck_assert_int_eq(reg(g, 0, 2, 2, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 4, FLOTILLA__PUSH_KIND__PUSH_DELTA, delta, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 4, FLOTILLA__PUSH_KIND__PUSH_DELTA, delta, NULL), FL_OK); /* dup */
  ck_assert_int_eq(push(g, 0, 8, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_EINVAL);
  value(g, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] + delta[i]);
  /* A trainer registered in another mode is refused. */
  ck_assert_int_eq(reg(g, 1, 2, 1, NULL), FL_EINVAL);
  fl_ps_core_free(a);
  fl_ps_core_free(g);
}
END_TEST

START_TEST(test_bad_requests_change_nothing) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  const float g[N] = {1, 1, 1, 1};
  float nan_g[N] = {1, NAN, 1, 1}, v[N];
  uint8_t odd[N * 4 + 1];
  push_req p;
  Flotilla__PushDenseResponse out = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
  Flotilla__StatsResponse stats = FLOTILLA__STATS_RESPONSE__INIT;
  uint32_t blk = 0, twice[2] = {0, 0}, far = 7;
  int64_t three = 3;

  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_ESTATE);
  reg_all(c, 2, 0);
  ck_assert_int_eq(reg(c, 5, 2, 0, NULL), FL_EINVAL);
  ck_assert_int_eq(reg(c, 0, 3, 0, NULL), FL_EINVAL); /* other trainer count */
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  /* wrong shape */
  mkpush(&p, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, N);
  p.t.shape = &three;
  ck_assert_int_eq(fl_ps_core_push_dense(c, &p.r, &out), FL_EINVAL);
  /* data length not matching */
  mkpush(&p, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, N);
  p.t.data.len -= 4;
  ck_assert_int_eq(fl_ps_core_push_dense(c, &p.r, &out), FL_EINVAL);
  /* unknown dtype */
  mkpush(&p, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, N);
  p.t.dtype = 7;
  ck_assert_int_eq(fl_ps_core_push_dense(c, &p.r, &out), FL_EINVAL);
  /* fp16 with fp32's byte count */
  mkpush(&p, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, N);
  p.t.dtype = FLOTILLA__DTYPE__DTYPE_FP16;
  ck_assert_int_eq(fl_ps_core_push_dense(c, &p.r, &out), FL_EINVAL);
  /* a block not on this server */
  mkpush(&p, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, N);
  p.b.block = 9;
  ck_assert_int_eq(fl_ps_core_push_dense(c, &p.r, &out), FL_EINVAL);
  /* NaN payload */
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, nan_g, NULL), FL_EINVAL);
  /* unknown kind, negative step, geo delta in sync mode */
  ck_assert_int_eq(push(c, 0, 0, 9, g, NULL), FL_EINVAL);
  ck_assert_int_eq(push(c, 0, -1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_EINVAL);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_DELTA, g, NULL), FL_EINVAL);
  /* the same block twice in one push */
  {
    push_req q;
    Flotilla__DenseBlock *two[2];
    mkpush(&q, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, N);
    two[0] = two[1] = &q.b;
    q.r.n_blocks = 2;
    q.r.blocks = two;
    ck_assert_int_eq(fl_ps_core_push_dense(c, &q.r, &out), FL_EINVAL);
  }
  /* unaligned fp32 bytes are fine (copied), so use them as a last valid
   * check that nothing before changed the state */
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 0, twice, 2), FL_EINVAL);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 0, &far, 1), FL_EINVAL);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 1, &blk, 1), FL_EAGAIN);
  value(c, v, NULL);
  ck_assert_mem_eq(v, init_v, sizeof v);
  fl_ps_core_stats(c, &stats);
  ck_assert_uint_ge(stats.invalid, 12);
  ck_assert_uint_eq(stats.dense_updates, 0);
  memcpy(odd + 1, g, sizeof g);
  mkpush(&p, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, odd + 1, N);
  ck_assert_int_eq(fl_ps_core_push_dense(c, &p.r, &out), FL_OK);
  ck_assert_int_eq(push(c, 1, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  value(c, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 1.0f);
  fl_ps_core_free(c);
}
END_TEST

/* a push beyond the step window (INT64_MAX used to
 * wrap the block's step; a stray 10^12 made every later real push a
 * duplicate) is INVALID_ARGUMENT naming both steps and changes nothing. */
START_TEST(test_step_window) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  fl_ps_core *a = mk(1, 1, 0, FL_OPTIM_SGD, 1.0f, 0);
  fl_ps_core *g = mk(1, 1, 4, FL_OPTIM_SGD, 1.0f, 0);
  const float grad[N] = {1, 1, 1, 1};
  Flotilla__StatsResponse stats = FLOTILLA__STATS_RESPONSE__INIT;
  float v[N];
  int64_t step;
  uint32_t blk = 0;

  /* sync: the block waits for step 0, so steps up to 1 are taken */
  reg_all(c, 2, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, INT64_MAX, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "9223372036854775807"));
  ck_assert_int_eq(push(c, 0, 1000000000000LL, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL),
                   FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "step 1000000000000"));
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "at step 0"));
  ck_assert_int_eq(push(c, 1, 2, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "step 2 "));
  value(c, v, &step);
  ck_assert_mem_eq(v, init_v, sizeof v);
  ck_assert_int_eq(step, 0);
  fl_ps_core_stats(c, &stats);
  ck_assert_int_eq(stats.step, 0);
  ck_assert_uint_eq(stats.pushes, 1); /* the init only */
  /* real steps go on as if nothing happened: not duplicates */
  for (int s = 0; s < 3; s++) {
    ck_assert_int_eq(grad_dup(c, 0, s, grad), 0);
    ck_assert_int_eq(grad_dup(c, 1, s, grad), 0);
  }
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 3, &blk, 1), FL_OK);
  value(c, v, &step);
  ck_assert_int_eq(step, 3);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 3.0f);
  /* A trainer that registers declaring step 50 (it is ahead of a restarted
   * server) moves the block there; the declaration itself is bounded. */
  ck_assert_int_eq(reg_at(c, 0, 2, 0, INT64_MAX, NULL), FL_EINVAL);
  ck_assert_int_eq(reg_at(c, 0, 2, 0, -1, NULL), FL_EINVAL);
  ck_assert_int_eq(push(c, 0, 50, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_EINVAL);
  ck_assert_int_eq(reg_at(c, 0, 2, 0, 50, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 50, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_OK);
  ck_assert_int_eq(push(c, 1, 50, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 51, &blk, 1), FL_OK);
  ck_assert_int_eq(push(c, 0, 53, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_EINVAL);

  /* async: one past the highest step pushed */
  ck_assert_int_eq(reg(a, 0, 1, 1, NULL), FL_OK);
  ck_assert_int_eq(push(a, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(a, 0, INT64_MAX, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL), FL_EINVAL);
  ck_assert_int_eq(push(a, 0, 1000000000000LL, FLOTILLA__PUSH_KIND__PUSH_GRAD, grad, NULL),
                   FL_EINVAL);
  ck_assert_int_eq(fl_ps_core_step(a), 0);
  for (int s = 0; s < 3; s++) {
    ck_assert_int_eq(grad_dup(a, 0, s, grad), 0);
  }
  ck_assert_int_eq(fl_ps_core_step(a), 3);
  value(a, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 3.0f);

  /* geo: pushes come every k_steps = 4 steps */
  ck_assert_int_eq(reg(g, 0, 1, 2, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 4, FLOTILLA__PUSH_KIND__PUSH_DELTA, grad, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 9, FLOTILLA__PUSH_KIND__PUSH_DELTA, grad, NULL), FL_OK);
  ck_assert_int_eq(push(g, 0, 15, FLOTILLA__PUSH_KIND__PUSH_DELTA, grad, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_ps_core_step(g), 10);
  fl_ps_core_free(c);
  fl_ps_core_free(a);
  fl_ps_core_free(g);
}
END_TEST

/* Register a dense layout of one parameter of numel floats. */
static fl_status reg_numel(fl_ps_core *c, uint64_t numel, uint64_t block) {
  Flotilla__RegisterResponse out = FLOTILLA__REGISTER_RESPONSE__INIT;
  reg_req q;
  reg_req_init(&q, 0, 1, 7);
  q.p.name = "huge";
  q.p.numel = numel;
  q.r.dense_block_size = block;
  q.r.n_sparse = 0;
  return fl_ps_core_register(c, &q.r, &out);
}

/* a first Register declaring 2^40 floats reserved
 * 4 TiB of virtual memory; a layout over the configured limit or the
 * host's memory is refused naming the limit, and the job can still start. */
START_TEST(test_layout_limit) {
  fl_ps_core *c, *d;
  Flotilla__StatsResponse stats = FLOTILLA__STATS_RESPONSE__INIT;
  /* blocks of 2^30 floats keep the block count legal: only size refuses */
  mk_block = (size_t)1 << 30;
  c = mk(1, 0, 0, FL_OPTIM_ADAM, 1.0f, 0);
  ck_assert_int_eq(reg_numel(c, UINT64_C(1) << 40, mk_block), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "limit of 4294967296"));
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "--max_dense_elements"));
  fl_ps_core_stats(c, &stats);
  ck_assert_int_eq(stats.dense_blocks, 0);
  ck_assert_uint_eq(stats.dense_elements, 0);
  ck_assert_int_eq(reg_numel(c, 1000, mk_block), FL_OK); /* the real job registers */
  fl_ps_core_stats(c, &stats);
  ck_assert_uint_eq(stats.dense_elements, 1000);
  fl_ps_core_free(c);
  /* over the host's memory though under a raised limit */
  mk_max_dense = UINT64_C(1) << 40;
  d = mk(1, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  mk_max_dense = 0;
  mk_block = N;
  ck_assert_int_eq(reg_numel(d, UINT64_C(1) << 40, (size_t)1 << 30), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "bytes of memory"));
  fl_ps_core_free(d);
  /* a configured limit below the model */
  mk_max_dense = N - 1;
  d = mk(1, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  mk_max_dense = 0;
  ck_assert_int_eq(reg(d, 0, 1, 0, NULL), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "limit of 3"));
  fl_ps_core_free(d);
}
END_TEST

/* A reader of a running job (deploy/examples/ps_read_params.py): Stats
 * gives the layout, PullDense as FL_PS_OBSERVER reads without registering. */
START_TEST(test_observer_reads) {
  fl_ps_core *c = mk(1, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  Flotilla__DenseParamSpec *specs, **ptrs;
  const float g[N] = {1, 1, 1, 1};
  uint32_t blk = 0;
  ck_assert_int_eq(fl_ps_core_stats_layout(c, &st, &specs, &ptrs), FL_OK);
  ck_assert_uint_eq(st.n_dense, 0);
  ck_assert_ptr_null(specs);
  ck_assert_int_eq(fl_ps_core_pull_check(c, FL_PS_OBSERVER, 0, &blk, 1), FL_EINVAL);
  ck_assert_int_eq(reg(c, 0, 1, 0, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_stats_layout(c, &st, &specs, &ptrs), FL_OK);
  ck_assert_uint_eq(st.n_dense, 1);
  ck_assert_str_eq(st.dense[0]->name, "w");
  ck_assert_uint_eq(st.dense[0]->numel, N);
  ck_assert_uint_eq(st.dense_block_size, N);
  ck_assert_int_eq(st.num_servers, 1);
  free(specs);
  free(ptrs);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, FL_PS_OBSERVER, 0, &blk, 1), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, FL_PS_OBSERVER, 1, &blk, 1), FL_EAGAIN);
  ck_assert_int_eq(fl_ps_core_pull_check(c, -2, 0, &blk, 1), FL_EINVAL);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, FL_PS_OBSERVER, 1, &blk, 1), FL_OK);
  /* the observer is no trainer: the job's trainer count is unchanged */
  fl_ps_core_stats(c, &st);
  ck_assert_int_eq(st.live_trainers, 1);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_barrier) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  Flotilla__BarrierRequest b = FLOTILLA__BARRIER_REQUEST__INIT;
  Flotilla__BarrierResponse r = FLOTILLA__BARRIER_RESPONSE__INIT;
  double v0[2] = {1, 2}, v1[2] = {10, 20}, buf[FL_PS_BARRIER_MAX_VALUES];
  reg_all(c, 2, 0);
  b.name = "epoch0";
  b.trainer_id = 0;
  b.n_values = 2;
  b.values = v0;
  b.value_min = 7;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN);
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN); /* a retry */
  ck_assert_int_eq(fl_ps_core_barrier_result(c, "epoch0", 0, &r, buf), FL_EAGAIN);
  b.trainer_id = 1;
  b.values = v1;
  b.value_min = 5;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK);
  ck_assert_int_eq(fl_ps_core_barrier_result(c, "epoch0", 0, &r, buf), FL_OK);
  ck_assert_int_eq(r.count, 2);
  ck_assert_int_eq(r.min, 5);
  ck_assert_uint_eq(r.n_sums, 2);
  ck_assert_double_eq(r.sums[0], 11);
  ck_assert_double_eq(r.sums[1], 22);
  /* Mismatched value count in another barrier is refused. */
  b.name = "epoch1";
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN);
  b.trainer_id = 0;
  b.n_values = 1;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EINVAL);
  fl_ps_core_free(c);
}
END_TEST

/* a reused barrier name returned the old round's
 * result at once.  Now the trainer process that was answered starts the
 * next round; a retry before the answer, or a restarted trainer, still
 * gets the completed round's result. */
START_TEST(test_barrier_rounds) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  Flotilla__BarrierRequest b = FLOTILLA__BARRIER_REQUEST__INIT;
  Flotilla__BarrierResponse r = FLOTILLA__BARRIER_RESPONSE__INIT;
  double one = 1, ten = 10, buf[FL_PS_BARRIER_MAX_VALUES];
  reg_all(c, 2, 0);
  b.name = "round";
  b.n_values = 1;
  b.values = &one;
  b.trainer_id = 0;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN);
  b.trainer_id = 1;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK);
  /* trainer 0's held call was cancelled before its answer: its retry gets
   * round 1's result (looking does not count as answered) */
  b.trainer_id = 0;
  ck_assert_int_eq(fl_ps_core_barrier_result(c, "round", 0, &r, buf), FL_OK);
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK);
  ck_assert_int_eq(fl_ps_core_barrier_take(c, "round", 0, &r, buf), FL_OK);
  ck_assert_double_eq(r.sums[0], 2);
  b.trainer_id = 1;
  ck_assert_int_eq(fl_ps_core_barrier_answer(c, &b, &r, buf), FL_OK); /* retry, answered */
  ck_assert_double_eq(r.sums[0], 2);
  b.trainer_id = 0;
  /* both were answered: the name again is round 2, which waits */
  b.values = &ten;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN);
  ck_assert_int_eq(fl_ps_core_barrier_result(c, "round", 0, &r, buf), FL_EAGAIN);
  b.trainer_id = 1;
  ck_assert_int_eq(fl_ps_core_barrier_answer(c, &b, &r, buf), FL_OK);
  ck_assert_double_eq(r.sums[0], 20);
  ck_assert_int_eq(r.count, 2);
  /* trainer 1 restarted (a new process): it gets round 2's result */
  {
    Flotilla__RegisterResponse ro = FLOTILLA__REGISTER_RESPONSE__INIT;
    reg_req rr;
    reg_req_init(&rr, 1, 2, 99); /* not 1001: another process */
    rr.r.n_sparse = 0;
    ck_assert_int_eq(fl_ps_core_register(c, &rr.r, &ro), FL_OK);
  }
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK);
  ck_assert_int_eq(fl_ps_core_barrier_result(c, "round", 1, &r, buf), FL_OK);
  ck_assert_double_eq(r.sums[0], 20);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_sparse_calls) {
  fl_ps_core *c = mk(1, 1, 0, FL_OPTIM_SGD, 1.0f, 0);
  Flotilla__PullSparseRequest q = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
  Flotilla__PullSparseResponse r = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
  Flotilla__PushSparseRequest p = FLOTILLA__PUSH_SPARSE_REQUEST__INIT;
  Flotilla__PushSparseResponse pr = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor vals = FLOTILLA__TENSOR__INIT, grads = FLOTILLA__TENSOR__INIT;
  uint64_t keys[2] = {11, 12};
  int64_t shape[2], gshape[2] = {2, 2};
  float *scratch = NULL, before[4], after[4], g[4] = {1, 1, 2, 2};
  size_t cap = 0;

  ck_assert_int_eq(reg(c, 0, 1, 1, NULL), FL_OK);
  q.trainer_id = 0;
  q.table = "emb";
  q.n_keys = 2;
  q.keys = keys;
  ck_assert_int_eq(fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &r, &vals, shape), FL_OK);
  ck_assert_int_eq(shape[0], 2);
  ck_assert_int_eq(shape[1], 2);
  memcpy(before, scratch, sizeof before);
  grads.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  grads.n_shape = 2;
  grads.shape = gshape;
  grads.data.data = (uint8_t *)g;
  grads.data.len = sizeof g;
  p.trainer_id = 0;
  p.step = 3;
  p.table = "emb";
  p.n_keys = 2;
  p.keys = keys;
  p.grads = &grads;
  ck_assert_int_eq(fl_ps_core_push_sparse(c, &p, &pr), FL_OK);
  ck_assert_int_eq(pr.accepted, 2);
  ck_assert_int_eq(fl_ps_core_push_sparse(c, &p, &pr), FL_OK); /* retried: ignored */
  ck_assert_int_eq(pr.accepted, 0);
  p.seq = 1; /* another part of the same step: applied */
  ck_assert_int_eq(fl_ps_core_push_sparse(c, &p, &pr), FL_OK);
  ck_assert_int_eq(pr.accepted, 2);
  ck_assert_int_eq(fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &r, &vals, shape), FL_OK);
  memcpy(after, scratch, sizeof after);
  for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(after[i], before[i] - 2 * g[i], 1e-6f);
  /* unknown table, wrong grad shape */
  q.table = "nope";
  ck_assert_int_eq(fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &r, &vals, shape), FL_EINVAL);
  p.step = 4;
  gshape[1] = 3;
  ck_assert_int_eq(fl_ps_core_push_sparse(c, &p, &pr), FL_EINVAL);
  gshape[1] = 2;
  p.step = INT64_MAX; /* beyond the step range */
  ck_assert_int_eq(fl_ps_core_push_sparse(c, &p, &pr), FL_EINVAL);
  p.step = 4; /* and the trainer's real next step is no duplicate */
  ck_assert_int_eq(fl_ps_core_push_sparse(c, &p, &pr), FL_OK);
  ck_assert_int_eq(pr.accepted, 2);
  for (int i = 0; i < 4; i++) after[i] -= g[i];
  q.table = "emb";
  ck_assert_int_eq(fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &r, &vals, shape), FL_OK);
  ck_assert_mem_eq(scratch, after, sizeof after);
  free(scratch);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_sparse_key_sharding) {
  /* Server 0 of 2 refuses keys that belong to server 1. */
  fl_ps_core_opts o;
  fl_ps_core *c;
  Flotilla__RegisterRequest r = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__RegisterResponse ro = FLOTILLA__REGISTER_RESPONSE__INIT;
  Flotilla__SparseTableSpec s = FLOTILLA__SPARSE_TABLE_SPEC__INIT, *sp = &s;
  Flotilla__PullSparseRequest q = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
  Flotilla__PullSparseResponse qr = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor vals = FLOTILLA__TENSOR__INIT;
  uint64_t mine = 0, theirs = 0;
  int64_t shape[2];
  float *scratch = NULL;
  size_t cap = 0;

  memset(&o, 0, sizeof o);
  fl_job_defaults(&o.job);
  o.job.strategy.a_sync = 1;
  o.n_servers = 2;
  o.num_trainers = 1;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_OK);
  s.name = "t";
  s.dim = 1;
  r.num_trainers = 1;
  r.mode = 1;
  r.dense_block_size = o.job.pserver.dense_block_size;
  r.num_servers = 2;
  r.n_sparse = 1;
  r.sparse = &sp;
  ck_assert_int_eq(fl_ps_core_register(c, &r, &ro), FL_OK);
  while (fl_ps_key_server(mine, 2) != 0) mine++;
  while (fl_ps_key_server(theirs, 2) != 1) theirs++;
  q.table = "t";
  q.n_keys = 1;
  q.keys = &mine;
  ck_assert_int_eq(fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &qr, &vals, shape), FL_OK);
  q.keys = &theirs;
  ck_assert_int_eq(fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &qr, &vals, shape), FL_EINVAL);
  free(scratch);
  fl_ps_core_free(c);
}
END_TEST

/* Sync mode: a gate at step 2 holds the block there
 * (pulls of step 3 wait, every push in) until the gate moves; the hook says
 * when the server stands at the gate; the step then goes on. */
static int gate_calls;
static void count_gate(void *ctx) {
  (void)ctx;
  gate_calls++;
}

START_TEST(test_sync_gate) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  const float g[N] = {1, 1, 1, 1};
  float v[N];
  int64_t step;
  uint32_t blk = 0;
  gate_calls = 0;
  fl_ps_core_set_gate_hook(c, count_gate, NULL);
  fl_ps_core_set_gate(c, 2);
  ck_assert_int_eq(fl_ps_core_gate(c), 2);
  reg_all(c, 2, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_at_gate(c), 0);
  for (int s = 0; s < 3; s++)
    for (int t = 0; t < 2; t++)
      ck_assert_int_eq(push(c, t, s, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  /* steps 0 and 1 applied, step 2 held with both pushes in */
  ck_assert_int_eq(gate_calls, 1);
  ck_assert_int_eq(fl_ps_core_at_gate(c), 1);
  ck_assert_int_eq(fl_ps_core_step(c), 2);
  ck_assert_int_eq(fl_ps_core_settled(c), 0);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 3, &blk, 1), FL_EAGAIN);
  value(c, v, &step);
  ck_assert_int_eq(step, 2);
  for (int i = 0; i < N; i++) ck_assert_float_eq_tol(v[i], init_v[i] - 2 * 0.5f, 1e-6f);
  fl_ps_core_set_gate(c, 4);
  ck_assert_int_eq(fl_ps_core_at_gate(c), 0);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 3, &blk, 1), FL_OK);
  ck_assert_int_eq(fl_ps_core_step(c), 3);
  /* no gate: nothing held */
  fl_ps_core_set_gate(c, -1);
  for (int t = 0; t < 2; t++)
    ck_assert_int_eq(push(c, t, 3, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_step(c), 4);
  ck_assert_int_eq(fl_ps_core_at_gate(c), 0);
  ck_assert_int_eq(gate_calls, 1);
  fl_ps_core_set_gate_hook(c, NULL, NULL);
  fl_ps_core_free(c);

  /* A block moved forward onto the gate's step by a trainer ahead of it
   * (a server restarted from an older checkpoint) never stood there: its
   * step is applied, not held for ever. */
  c = mk(1, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  fl_ps_core_set_gate(c, 5);
  ck_assert_int_eq(reg_at(c, 0, 1, 0, 5, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 5, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 0, 6, &blk, 1), FL_OK);
  ck_assert_int_eq(fl_ps_core_step(c), 6);
  ck_assert_int_eq(fl_ps_core_at_gate(c), -1); /* past it: the gate must move on */
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_core_checkpoint) {
  char path[] = "/tmp/fl_test_pscore_XXXXXX";
  int fd = mkstemp(path);
  fl_ps_core *c = mk(1, 1, 0, FL_OPTIM_ADAM, 0.01f, 0);
  fl_ps_core *d = mk(1, 1, 0, FL_OPTIM_ADAM, 0.01f, 0);
  fl_ps_core *wrong = mk(1, 0, 0, FL_OPTIM_ADAM, 0.01f, 0);
  const float g[N] = {1, -1, 0.5f, 2};
  float a[N], b[N];
  int64_t sa, sb, step;
  fl_ckpt *ck;

  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(reg(c, 0, 1, 1, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  ck_assert_int_eq(fl_ps_core_load(wrong, ck, path), FL_EINVAL); /* sync job: refused */
  ck_assert_int_eq(fl_ps_core_load(d, ck, path), FL_OK);
  fl_ckpt_free(ck);
  unlink(path);
  value(c, a, &sa);
  value(d, b, &sb);
  ck_assert_mem_eq(a, b, sizeof a);
  ck_assert_int_eq(sa, sb);
  /* Trainers register again and carry on from the same step and state. */
  ck_assert_int_eq(reg(d, 0, 1, 1, &step), FL_OK);
  ck_assert_int_eq(step, 2);
  ck_assert_int_eq(push(c, 0, 2, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(push(d, 0, 2, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  value(c, a, NULL);
  value(d, b, NULL);
  ck_assert_mem_eq(a, b, sizeof a);
  fl_ps_core_free(c);
  fl_ps_core_free(d);
  fl_ps_core_free(wrong);
}
END_TEST

START_TEST(test_parked_trainer_not_waited_for) {
  /* A trainer waiting in a barrier trains no step: sync steps go on
   * without it until the barrier completes, then wait for it again. */
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 1.0f, 0);
  Flotilla__BarrierRequest b = FLOTILLA__BARRIER_REQUEST__INIT;
  const float g[N] = {1, 1, 1, 1};
  float v[N];
  uint32_t blk = 0;
  reg_all(c, 2, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  b.name = "eval";
  b.trainer_id = 0;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_EAGAIN);
  ck_assert_int_eq(push(c, 1, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 1, 1, &blk, 1), FL_OK);
  value(c, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 1.0f);
  b.trainer_id = 1;
  ck_assert_int_eq(fl_ps_core_barrier(c, &b), FL_OK);
  ck_assert_int_eq(push(c, 1, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 1, 2, &blk, 1), FL_EAGAIN); /* waits for 0 again */
  ck_assert_int_eq(push(c, 0, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, g, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_pull_check(c, 1, 2, &blk, 1), FL_OK);
  fl_ps_core_free(c);
}
END_TEST

/* Trainer t's sync rows of step (one row, key, of table "emb"). */
static fl_status rpush(fl_ps_core *c, int t, int64_t step, uint64_t key, const float g[2]) {
  Flotilla__PushSparseRequest p = FLOTILLA__PUSH_SPARSE_REQUEST__INIT;
  Flotilla__PushSparseResponse pr = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor gt = FLOTILLA__TENSOR__INIT;
  int64_t shape[2] = {1, 2};
  gt.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  gt.n_shape = 2;
  gt.shape = shape;
  gt.data.data = (uint8_t *)g;
  gt.data.len = 2 * sizeof(float);
  p.trainer_id = t;
  p.step = step;
  p.table = "emb";
  p.n_keys = 1;
  p.keys = &key;
  p.grads = &gt;
  p.parts = 1;
  return fl_ps_core_push_sparse(c, &p, &pr);
}

START_TEST(test_dense_waits_for_rows) {
  /* Trainer 1 killed after its dense push of step 1, before its rows:
   * the step waits (dense and rows); restarted, it redoes the step whole
   * (its dense push again, a duplicate, then its rows) and the step
   * applies as if never interrupted. */
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  const float g0[N] = {1, 1, 1, 1}, g1[N] = {3, 3, 3, 3}, r[2] = {0.5f, 1};
  float v[N], row[2];
  uint32_t blk = 0;
  uint64_t key = 7;
  reg_all(c, 2, 0);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  for (int64_t s = 0; s < 2; s++) {
    ck_assert_int_eq(push(c, 0, s, FLOTILLA__PUSH_KIND__PUSH_GRAD, g0, NULL), FL_OK);
    ck_assert_int_eq(rpush(c, 0, s, key, r), FL_OK);
    ck_assert_int_eq(push(c, 1, s, FLOTILLA__PUSH_KIND__PUSH_GRAD, g1, NULL), FL_OK);
    if (s == 1) { /* killed here */
      ck_assert_int_eq(fl_ps_core_pull_check(c, 0, s + 1, &blk, 1), FL_EAGAIN);
      ck_assert_int_eq(fl_ps_core_sparse_ready(c, 0, "emb", s + 1), FL_EAGAIN);
      ck_assert_int_eq(grad_dup(c, 1, s, g1), 1);
      ck_assert_int_eq(fl_ps_core_pull_check(c, 0, s + 1, &blk, 1), FL_EAGAIN);
    }
    ck_assert_int_eq(rpush(c, 1, s, key, r), FL_OK);
    ck_assert_int_eq(fl_ps_core_pull_check(c, 0, s + 1, &blk, 1), FL_OK);
    ck_assert_int_eq(fl_ps_core_sparse_ready(c, 0, "emb", s + 1), FL_OK);
  }
  value(c, v, NULL);
  for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], init_v[i] - 2.0f); /* 2 x 0.5 x mean 2 */
  ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), key, row));
  fl_ps_core_free(c);
}
END_TEST

/* Register trainer t (process `inc`) announcing the commit protocol (or
 * not: a foreign client); *staged gets whether this core holds all its
 * pushes of the core's step, *step that step. */
static int64_t reg_committed; /* Register's `committed` in the next reg_commit calls */

static void reg_commit(fl_ps_core *c, int t, int nt, uint64_t inc, int commits, int *staged,
                       int64_t *step) {
  Flotilla__RegisterResponse out = FLOTILLA__REGISTER_RESPONSE__INIT;
  reg_req q;
  reg_req_init(&q, t, nt, inc);
  q.r.commits = commits;
  q.r.committed = reg_committed;
  ck_assert_int_eq(fl_ps_core_register(c, &q.r, &out), FL_OK);
  if (staged) *staged = out.trainer_staged;
  if (step) *step = out.step;
}

/* Trainer t's pushes of step s: its dense gradient g and the row of key 7. */
static void push_step(fl_ps_core *c, int t, int64_t s, const float *g, const float r[2]) {
  ck_assert_int_eq(grad_dup(c, t, s, g), 0);
  ck_assert_int_eq(rpush(c, t, s, 7, r), FL_OK);
}

/* Step s applied on c (dense and rows), as a pull of s + 1 sees it. */
static int applied(fl_ps_core *c, int64_t s) {
  uint32_t blk = 0;
  fl_status d = fl_ps_core_pull_check(c, 0, s + 1, &blk, 1);
  fl_status r = fl_ps_core_sparse_ready(c, 0, "emb", s + 1);
  ck_assert_int_eq(d, r);
  return d == FL_OK;
}

/* The dense values and key 7's row of c. */
static void state_of(fl_ps_core *c, float v[N + 2]) {
  value(c, v, NULL);
  ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 7, v + N));
}

static const float cg0[N] = {1, 2, 3, 4}, cg1[N] = {0.25f, 3, -1, 7};
static const float cr0[2] = {0.5f, 1}, cr1[2] = {-2, 0.125f};

/* Two trainers that commit, on core c: registered, initial values. */
static fl_ps_core *commit_core(void) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  reg_commit(c, 0, 2, 1000, 1, NULL, NULL);
  reg_commit(c, 1, 2, 1001, 1, NULL, NULL);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  return c;
}

START_TEST(test_commit_all_or_none) {
  /* Trainer 1's pushes of step 0 are on two servers (a, b); it commits to
   * a, which applies the step, and is killed before committing to b.
   * Restarted, it finds the step applied on a and staged on b, and
   * commits to b: both end with the bits of an undisturbed run (ref). */
  fl_ps_core *a = commit_core(), *b = commit_core(), *ref = commit_core();
  fl_ps_core *all[3] = {a, b, ref};
  float va[N + 2], vb[N + 2], vr[N + 2];
  int staged = 0;
  int64_t step = -1;
  for (int i = 0; i < 3; i++) {
    push_step(all[i], 0, 0, cg0, cr0);
    push_step(all[i], 1, 0, cg1, cr1);
    ck_assert(!applied(all[i], 0)); /* pushed everywhere, committed nowhere */
    ck_assert_int_eq(fl_ps_core_commit(all[i], 0, 1), FL_OK);
    ck_assert(!applied(all[i], 0));
  }
  ck_assert_int_eq(fl_ps_core_commit(ref, 1, 1), FL_OK);
  ck_assert_int_eq(fl_ps_core_commit(a, 1, 1), FL_OK); /* killed after this one */
  ck_assert(applied(a, 0));
  ck_assert(!applied(b, 0));
  reg_commit(a, 1, 2, 2001, 1, &staged, &step); /* the restarted process */
  ck_assert_int_eq(step, 1);
  reg_commit(b, 1, 2, 2001, 1, &staged, &step);
  ck_assert_int_eq(step, 0);
  ck_assert(staged);
  ck_assert_int_eq(fl_ps_core_commit(b, 1, 1), FL_OK);
  ck_assert(applied(b, 0));
  state_of(a, va);
  state_of(b, vb);
  state_of(ref, vr);
  ck_assert_mem_eq(va, vr, sizeof va);
  ck_assert_mem_eq(vb, vr, sizeof vb);
  for (int i = 0; i < 3; i++) fl_ps_core_free(all[i]);
}
END_TEST

START_TEST(test_commit_resend_replaces) {
  /* A restarted trainer sends its staged (uncommitted) step again: the new
   * pushes replace the held ones; once committed, a push of the step is a
   * duplicate. */
  fl_ps_core *c = commit_core(), *ref = commit_core();
  const float bad[N] = {9, 9, 9, 9}, rbad[2] = {9, 9};
  float vc[N + 2], vr[N + 2];
  int staged = 0;
  push_step(c, 0, 0, cg0, cr0);
  push_step(c, 1, 0, bad, rbad);
  reg_commit(c, 1, 2, 2001, 1, &staged, NULL); /* restarted before its commit */
  ck_assert(staged);
  push_step(c, 1, 0, cg1, cr1); /* not a duplicate: replaces */
  push_step(ref, 0, 0, cg0, cr0);
  push_step(ref, 1, 0, cg1, cr1);
  for (int t = 0; t < 2; t++) {
    ck_assert_int_eq(fl_ps_core_commit(c, t, 1), FL_OK);
    ck_assert_int_eq(fl_ps_core_commit(ref, t, 1), FL_OK);
  }
  ck_assert(applied(c, 0));
  state_of(c, vc);
  state_of(ref, vr);
  ck_assert_mem_eq(vc, vr, sizeof vc);
  push_step(c, 0, 1, cg0, cr0);
  push_step(c, 1, 1, cg1, cr1);
  ck_assert_int_eq(fl_ps_core_commit(c, 1, 2), FL_OK);
  reg_commit(c, 1, 2, 3001, 1, NULL, NULL);
  ck_assert_int_eq(grad_dup(c, 1, 1, bad), 1); /* committed: what the other servers hold stays */
  fl_ps_core_free(c);
  fl_ps_core_free(ref);
}
END_TEST

START_TEST(test_commit_declared_at_register) {
  /* A server that restarted lost the commits it took: the trainers
   * declare them when they register again, and repeat their pushes of
   * the step in flight, which then applies without another commit. */
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  reg_committed = 1;
  reg_commit(c, 0, 2, 1000, 1, NULL, NULL);
  reg_commit(c, 1, 2, 1001, 1, NULL, NULL);
  reg_committed = 0;
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  push_step(c, 0, 0, cg0, cr0);
  push_step(c, 1, 0, cg1, cr1);
  ck_assert(applied(c, 0));
  push_step(c, 0, 1, cg0, cr0);
  push_step(c, 1, 1, cg1, cr1);
  ck_assert(!applied(c, 1)); /* step 1: not committed yet */
  fl_ps_core_free(c);
}
END_TEST

/* Register trainer t (process 1000 + t) with the commit protocol,
 * declaring `declare` as its next push's step and `committed`. */
static void reg_declare(fl_ps_core *c, int t, int64_t declare, int64_t committed) {
  Flotilla__RegisterResponse out = FLOTILLA__REGISTER_RESPONSE__INIT;
  reg_req q;
  reg_req_init(&q, t, 2, 1000 + (uint64_t)t);
  q.r.step = declare;
  q.r.commits = 1;
  q.r.committed = committed;
  ck_assert_int_eq(fl_ps_core_register(c, &q.r, &out), FL_OK);
}

/* A server restarted from its checkpoint (step 0 here) while trainer 0
 * had pushed step 6 and trainer 1, its step 5 committed, waited for the
 * pulls of step 6 (answered by the other servers, and by this one for
 * trainer 0 before it was killed).  Both register again and repeat what
 * they sent, in the order given (0: trainer 0 first).  The server skips
 * to step 6 (step 5, which trainer 0 will not push again, included), so
 * trainer 1's pull of step 6 is answered and both go on. */
static void apart_after_restart(int t1_first, float out[N + 2]) {
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  uint32_t blk = 0;
  for (int k = 0; k < 2; k++) {
    if (k == t1_first) {
      reg_declare(c, 0, 6, 7);
      if (!t1_first)
        ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
      push_step(c, 0, 6, cg0, cr0);
    } else {
      reg_declare(c, 1, 5, 6);
      if (t1_first)
        ck_assert_int_eq(push(c, 1, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
      int dup = -1;
      ck_assert_int_eq(push(c, 1, 5, FLOTILLA__PUSH_KIND__PUSH_GRAD, cg1, &dup), FL_OK);
      ck_assert_int_eq(dup, !t1_first); /* a step the server skipped already */
      ck_assert_int_eq(rpush(c, 1, 5, 7, cr1), FL_OK);
    }
  }
  ck_assert_int_eq(fl_ps_core_pull_check(c, 1, 6, &blk, 1), FL_OK);
  ck_assert_int_eq(fl_ps_core_sparse_ready(c, 1, "emb", 6), FL_OK);
  ck_assert(!applied(c, 6));
  push_step(c, 1, 6, cg1, cr1);
  ck_assert_int_eq(fl_ps_core_commit(c, 1, 7), FL_OK);
  ck_assert(applied(c, 6));
  state_of(c, out);
  fl_ps_core_free(c);
}

START_TEST(test_push_after_declared_step) {
  /* A server restarted from an old checkpoint (step 0 here) while the
   * trainers waited in a Barrier after pushing step 6: a trainer registers
   * again declaring 6, the last step it pushed, and then pushes step 7,
   * which the window takes (it moves the block there); step 9 is still
   * past the window. */
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  int dup = -1;
  reg_declare(c, 0, 6, 7);
  reg_declare(c, 1, 6, 7);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  ck_assert_int_eq(push(c, 0, 9, FLOTILLA__PUSH_KIND__PUSH_GRAD, cg0, NULL), FL_EINVAL);
  ck_assert_int_eq(push(c, 0, 7, FLOTILLA__PUSH_KIND__PUSH_GRAD, cg0, &dup), FL_OK);
  ck_assert_int_eq(dup, 0);
  ck_assert_int_eq(push(c, 1, 7, FLOTILLA__PUSH_KIND__PUSH_GRAD, cg1, &dup), FL_OK);
  ck_assert_int_eq(dup, 0);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_restart_trainers_a_step_apart) {
  /* Either order of the registrations ends the same: step 6 applied with
   * both trainers' gradients onto the checkpoint's values, as on a server
   * that took only step 6 (ref). */
  float a[N + 2], b[N + 2], vr[N + 2];
  fl_ps_core *ref = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  apart_after_restart(0, a);
  apart_after_restart(1, b);
  reg_declare(ref, 0, 6, 0);
  reg_declare(ref, 1, 6, 0);
  ck_assert_int_eq(push(ref, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  push_step(ref, 0, 6, cg0, cr0);
  push_step(ref, 1, 6, cg1, cr1);
  for (int t = 0; t < 2; t++) ck_assert_int_eq(fl_ps_core_commit(ref, t, 7), FL_OK);
  ck_assert(applied(ref, 6));
  state_of(ref, vr);
  ck_assert_mem_eq(a, vr, sizeof a);
  ck_assert_mem_eq(b, vr, sizeof b);
  fl_ps_core_free(ref);
}
END_TEST

START_TEST(test_late_commit_whole_step_applied) {
  /* Step 0 holds both trainers' pushes and trainer 0's commit; trainer 1's
   * commit is still on its way when trainer 0 pushes step 1 (it went on:
   * another server applied step 0).  Step 0 is applied with both pushes,
   * as once the commit came (ref), not skipped. */
  fl_ps_core *c = commit_core(), *ref = commit_core();
  float vc[N + 2], vr[N + 2];
  fl_ps_core *both[2] = {c, ref};
  for (int i = 0; i < 2; i++) {
    push_step(both[i], 0, 0, cg0, cr0);
    push_step(both[i], 1, 0, cg1, cr1);
    ck_assert_int_eq(fl_ps_core_commit(both[i], 0, 1), FL_OK);
  }
  ck_assert_int_eq(fl_ps_core_commit(ref, 1, 1), FL_OK);
  ck_assert(applied(ref, 0));
  ck_assert(!applied(c, 0));
  push_step(c, 0, 1, cg0, cr0);
  ck_assert(applied(c, 0));
  state_of(c, vc);
  state_of(ref, vr);
  ck_assert_mem_eq(vc, vr, sizeof vc);
  fl_ps_core_free(c);
  fl_ps_core_free(ref);
}
END_TEST

START_TEST(test_commit_foreign_client) {
  /* Trainer 1 registers without the commit protocol (a foreign client):
   * its pushes count as committed; trainer 0's step waits for its own
   * commit only.  A commit of a trainer not registered, or of a step
   * past the step range, is refused. */
  fl_ps_core *c = mk(2, 0, 0, FL_OPTIM_SGD, 0.5f, 0);
  ck_assert_int_eq(fl_ps_core_commit(c, 0, 1), FL_ESTATE);
  reg_commit(c, 0, 2, 1000, 1, NULL, NULL);
  reg_commit(c, 1, 2, 1001, 0, NULL, NULL);
  ck_assert_int_eq(fl_ps_core_commit(c, 0, INT64_MAX), FL_EINVAL);
  ck_assert_int_eq(push(c, 0, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, init_v, NULL), FL_OK);
  push_step(c, 1, 0, cg1, cr1);
  push_step(c, 0, 0, cg0, cr0);
  ck_assert(!applied(c, 0));
  ck_assert_int_eq(fl_ps_core_commit(c, 0, 1), FL_OK);
  ck_assert(applied(c, 0));
  push_step(c, 0, 1, cg0, cr0);
  ck_assert_int_eq(fl_ps_core_commit(c, 0, 2), FL_OK);
  ck_assert(!applied(c, 1)); /* the foreign client's push of step 1 is missing */
  push_step(c, 1, 1, cg1, cr1);
  ck_assert(applied(c, 1));
  fl_ps_core_free(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_core");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_sync_order);
  tcase_add_test(tc, test_incomplete_without_every_trainer);
  tcase_add_test(tc, test_sync_pull_waits_and_steps);
  tcase_add_test(tc, test_duplicate_push_ignored);
  tcase_add_test(tc, test_dead_trainer_not_waited_for);
  tcase_add_test(tc, test_async_and_geo);
  tcase_add_test(tc, test_elastic_slots);
  tcase_add_test(tc, test_bad_requests_change_nothing);
  tcase_add_test(tc, test_step_window);
  tcase_add_test(tc, test_layout_limit);
  tcase_add_test(tc, test_observer_reads);
  tcase_add_test(tc, test_barrier);
  tcase_add_test(tc, test_barrier_rounds);
  tcase_add_test(tc, test_parked_trainer_not_waited_for);
  tcase_add_test(tc, test_dense_waits_for_rows);
  tcase_add_test(tc, test_commit_all_or_none);
  tcase_add_test(tc, test_commit_resend_replaces);
  tcase_add_test(tc, test_commit_declared_at_register);
  tcase_add_test(tc, test_push_after_declared_step);
  tcase_add_test(tc, test_restart_trainers_a_step_apart);
  tcase_add_test(tc, test_late_commit_whole_step_applied);
  tcase_add_test(tc, test_commit_foreign_client);
  tcase_add_test(tc, test_sparse_calls);
  tcase_add_test(tc, test_sparse_key_sharding);
  tcase_add_test(tc, test_core_checkpoint);
  tcase_add_test(tc, test_sync_gate);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
