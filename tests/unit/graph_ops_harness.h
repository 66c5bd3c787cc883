/* graph_ops_harness.h - what the op-library tests (test_graph_ops.c on the
 * CPU, test_graph_ops_cuda.c against the CUDA twins) share: tensors and one
 * node built by hand, bound as the engine would (infer, then output, ws and
 * saved buffers), the finite-difference gradient check of a fixed random
 * weighting of the outputs, and a naive broadcasting index.  Header-only,
 * for test programs; every buffer is the harness's, freed by h_free. */
#ifndef FL_GRAPH_OPS_HARNESS_H
#define FL_GRAPH_OPS_HARNESS_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "graph_internal.h"

#define MAXT 16

typedef struct harness {
  fl_gtensor t[MAXT];
  int nt;
  fl_gnode node;
  int in[8], out[4];
  fl_gattr attrs[8];
  int nattrs;
  fl_gctx c;
  float *w[4];           /* objective weights per output */
  float *analytic[8];    /* input grads from backward */
} harness;

static inline void h_init(harness *h, const char *op) {
  memset(h, 0, sizeof *h);
  h->node.name = "node0";
  h->node.op = fl_gop_find(op);
  ck_assert_msg(h->node.op != NULL, "op %s not found", op);
  h->node.in = h->in;
  h->node.out = h->out;
  h->node.attrs = h->attrs;
  h->c.t = h->t;
  h->c.training = 1;
  h->c.seed = 42;
  h->c.step = 3;
  h->c.node_index = 5;
}

static inline int h_tensor(harness *h, const char *name, fl_gdtype dt, int nd,
                           const int64_t *shape) {
  ck_assert_int_lt(h->nt, MAXT);
  fl_gtensor *t = &h->t[h->nt];
  t->name = (char *)name;
  t->kind = FL_GT_PARAM;
  t->dtype = dt;
  t->ndim = nd;
  for (int d = 0; d < nd; d++) t->dims[d] = t->shape[d] = shape[d];
  t->n = 1;
  for (int d = 0; d < nd; d++) t->n *= (size_t)shape[d];
  t->producer = -1;
  if (dt == FL_G_F32)
    t->data = calloc(t->n ? t->n : 1, sizeof *t->data);
  else
    t->idata = calloc(t->n ? t->n : 1, sizeof *t->idata);
  return h->nt++;
}

/* A float input filled uniformly in [lo, hi) (away from 0 when away). */
static inline int h_f32(harness *h, const char *name, int nd, const int64_t *shape,
                        uint64_t *s, double lo, double hi, int away) {
  const int id = h_tensor(h, name, FL_G_F32, nd, shape);
  if (away)
    gc_fill_away(h->t[id].data, h->t[id].n, s, lo, hi);
  else
    gc_fill(h->t[id].data, h->t[id].n, s, lo, hi);
  h->in[h->node.n_in++] = id;
  return id;
}

/* A known int64 input (a constant of the shape domain). */
static inline int h_i64(harness *h, const char *name, int nd, const int64_t *shape,
                        const int64_t *v) {
  const int id = h_tensor(h, name, FL_G_I64, nd, shape);
  memcpy(h->t[id].idata, v, h->t[id].n * sizeof *v);
  h->t[id].kind = FL_GT_CONST;
  h->t[id].known = 1;
  h->in[h->node.n_in++] = id;
  return id;
}

static inline void h_none(harness *h) { h->in[h->node.n_in++] = -1; }

static inline void h_outs(harness *h, int n) {
  static const char *const names[] = {"y0", "y1", "y2", "y3"};
  for (int i = 0; i < n; i++) {
    ck_assert_int_lt(h->nt, MAXT);
    fl_gtensor *t = &h->t[h->nt];
    t->name = (char *)names[i];
    t->kind = FL_GT_VALUE;
    t->producer = 0;
    h->out[h->node.n_out++] = h->nt++;
  }
}

static inline void h_ai(harness *h, const char *name, int64_t v) {
  h->attrs[h->nattrs++] = (fl_gattr){.name = name, .kind = FL_GA_INT, .i = v};
  h->node.n_attrs = h->nattrs;
}
static inline void h_af(harness *h, const char *name, float v) {
  h->attrs[h->nattrs++] = (fl_gattr){.name = name, .kind = FL_GA_FLOAT, .f = v};
  h->node.n_attrs = h->nattrs;
}
static inline void h_ais(harness *h, const char *name, const int64_t *v, size_t n) {
  h->attrs[h->nattrs++] = (fl_gattr){.name = name, .kind = FL_GA_INTS, .ints = v, .n = n};
  h->node.n_attrs = h->nattrs;
}
static inline void h_as(harness *h, const char *name, const char *s) {
  h->attrs[h->nattrs++] = (fl_gattr){.name = name, .kind = FL_GA_STRING, .s = s};
  h->node.n_attrs = h->nattrs;
}

/* Infer, then bind the outputs, ws and saved (as the engine would). */
static inline fl_status h_infer(harness *h) {
  size_t ws = 0, saved = 0;
  const fl_status st = h->node.op->infer(&h->node, &h->c, &ws, &saved);
  if (st != FL_OK) return st;
  for (int i = 0; i < h->node.n_out; i++) {
    fl_gtensor *t = &h->t[h->out[i]];
    free(t->data);
    free(t->idata);
    t->data = NULL;
    t->idata = NULL;
    if (t->dtype == FL_G_F32)
      t->data = calloc(t->n ? t->n : 1, sizeof *t->data);
    else
      t->idata = calloc(t->n ? t->n : 1, sizeof *t->idata);
  }
  free(h->node.ws);
  free(h->node.saved);
  h->node.ws = calloc(ws ? ws : 1, sizeof(float));
  h->node.saved = calloc(saved ? saved : 1, sizeof(float));
  h->node.ws_floats = ws;
  h->node.saved_floats = saved;
  return FL_OK;
}

static inline void h_ready(harness *h) { ck_assert_int_eq(h_infer(h), FL_OK); }

static inline void h_fwd(harness *h) {
  ck_assert_int_eq(h->node.op->forward(&h->node, &h->c), FL_OK);
}

static inline fl_gtensor *h_y(harness *h, int i) { return &h->t[h->out[i]]; }
static inline fl_gtensor *h_x(harness *h, int i) { return &h->t[h->in[i]]; }

static inline void h_free(harness *h) {
  if (h->node.op && h->node.op->free_state) h->node.op->free_state(&h->node);
  for (int i = 0; i < h->nt; i++) {
    free(h->t[i].data);
    free(h->t[i].idata);
    free(h->t[i].grad);
  }
  for (int i = 0; i < 4; i++) free(h->w[i]);
  for (int i = 0; i < 8; i++) free(h->analytic[i]);
  free(h->node.ws);
  free(h->node.saved);
}

/* Whether input i takes a gradient in the checks. */
static inline int h_diff(const harness *h, int i) {
  return h->in[i] >= 0 && h->t[h->in[i]].dtype == FL_G_F32 &&
         !((h->node.op->nodiff_in >> i) & 1u);
}

/* The objective: sum over float outputs of w . y, in double. */
static inline double h_objective(void *ctx) {
  harness *h = ctx;
  h_fwd(h);
  double s = 0.0;
  for (int o = 0; o < h->node.n_out; o++) {
    const fl_gtensor *y = h_y(h, o);
    if (y->dtype != FL_G_F32 || !h->w[o]) continue;
    for (size_t i = 0; i < y->n; i++) s += (double)h->w[o][i] * y->data[i];
  }
  return s;
}

/* Forward, output grads = w, backward with accum. */
static inline void h_bwd(harness *h, unsigned accum) {
  h_fwd(h);
  for (int o = 0; o < h->node.n_out; o++) {
    fl_gtensor *y = h_y(h, o);
    if (!h->w[o]) continue;
    memcpy(y->grad, h->w[o], y->n * sizeof *y->grad);
  }
  ck_assert_int_eq(h->node.op->backward(&h->node, &h->c, accum), FL_OK);
}

/* Finite-difference check of every differentiable input's gradient, then
 * the accumulate path: grads pre-set to 0.25 must come out 0.25 + the
 * overwritten result.  nouts: how many outputs enter the objective. */
static inline void h_gradcheck(harness *h, const char *what, int nouts, double eps,
                               double atol, double rtol) {
  uint64_t s = 777;
  for (int o = 0; o < nouts; o++) {
    fl_gtensor *y = h_y(h, o);
    h->w[o] = malloc((y->n ? y->n : 1) * sizeof(float));
    gc_fill(h->w[o], y->n, &s, -1.0, 1.0);
    y->grad = calloc(y->n ? y->n : 1, sizeof(float));
  }
  for (int i = 0; i < h->node.n_in; i++)
    if (h_diff(h, i)) h_x(h, i)->grad = calloc(h_x(h, i)->n, sizeof(float));
  h_bwd(h, 0);
  for (int i = 0; i < h->node.n_in; i++) {
    if (!h_diff(h, i)) continue;
    const fl_gtensor *x = h_x(h, i);
    h->analytic[i] = malloc(x->n * sizeof(float));
    memcpy(h->analytic[i], x->grad, x->n * sizeof(float));
  }
  for (int i = 0; i < h->node.n_in; i++) {
    if (!h_diff(h, i)) continue;
    fl_gtensor *x = h_x(h, i);
    const gc_result r = gc_check(x->data, x->n, h->analytic[i], h_objective, h, eps, atol, rtol);
    char msg[128];
    snprintf(msg, sizeof msg, "%s: input %d", what, i);
    GC_ASSERT(msg, r);
  }
  /* Accumulate into every grad at once. */
  for (int i = 0; i < h->node.n_in; i++)
    if (h_diff(h, i))
      for (size_t k = 0; k < h_x(h, i)->n; k++) h_x(h, i)->grad[k] = 0.25f;
  h_bwd(h, 0xffu);
  for (int i = 0; i < h->node.n_in; i++) {
    if (!h_diff(h, i)) continue;
    const fl_gtensor *x = h_x(h, i);
    for (size_t k = 0; k < x->n; k++) {
      const double want = 0.25 + (double)h->analytic[i][k];
      ck_assert_msg(fabs(x->grad[k] - want) <= 1e-5 * (1.0 + fabs(want)),
                    "%s: input %d accumulate at %zu: %g, want %g", what, i, k,
                    (double)x->grad[k], want);
    }
  }
}

static inline void h_expect_shape(harness *h, int o, int nd, const int64_t *shape) {
  const fl_gtensor *y = h_y(h, o);
  ck_assert_int_eq(y->ndim, nd);
  for (int d = 0; d < nd; d++)
    ck_assert_msg(y->shape[d] == shape[d], "output %d dim %d: %lld, want %lld", o, d,
                  (long long)y->shape[d], (long long)shape[d]);
}

static inline void expect_close(const float *got, const double *want, size_t n, double tol,
                                const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])),
                  "%s[%zu]: %.9g, want %.9g", what, i, (double)got[i], want[i]);
}

/* Flat index into a tensor of shape (nb, sb) broadcast to (na, sa) for
 * output flat index o (numpy rules, independent of the library's
 * iterator). */
static inline size_t bidx(size_t o, int na, const int64_t *sa, int nb, const int64_t *sb) {
  size_t idx = 0, mul = 1;
  for (int d = na - 1; d >= 0; d--) {
    const size_t i = o % (size_t)sa[d];
    o /= (size_t)sa[d];
    const int db = d - (na - nb);
    if (db >= 0) {
      if (sb[db] != 1) idx += i * mul;
      mul *= (size_t)sb[db];
    }
  }
  return idx;
}

#endif
