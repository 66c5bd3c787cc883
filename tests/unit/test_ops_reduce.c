/* test_ops_reduce.c - unit tests of the reductions (ReduceMax, ReduceMin,
 * ReduceL2, ReduceProd, ReduceLogSumExp, ReduceSumSquare), ArgMax, CumSum,
 * TopK, InstanceNormalization and opset 13's five-output
 * BatchNormalization, on hand-built nodes (graph_ops_harness.h): forward
 * against naive double references, backward against finite differences,
 * the gradients PyTorch gives where finite differences cannot tell (ties,
 * zeros), and the refusals. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_ops_harness.h"

START_TEST(test_registry) {
  static const char *const ops[] = {"ReduceMax", "ReduceMin", "ReduceL2", "ReduceProd",
                                    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "CumSum",
                                    "TopK", "InstanceNormalization", "BatchNormalization"};
  const char *all = fl_gop_supported();
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    const fl_gop *op = fl_gop_find(ops[i]);
    ck_assert_msg(op != NULL, "%s missing", ops[i]);
    ck_assert_msg(strstr(all, ops[i]) != NULL, "%s not listed", ops[i]);
    ck_assert_msg(op->doc && op->doc[0], "%s has no doc line", ops[i]);
  }
}
END_TEST

/* ---------------------------------------------------------- reductions */

typedef double (*ref_fn)(const double *v, size_t n);

static double ref_max(const double *v, size_t n) {
  double m = -INFINITY;
  for (size_t i = 0; i < n; i++) m = fmax(m, v[i]);
  return m;
}
static double ref_min(const double *v, size_t n) {
  double m = INFINITY;
  for (size_t i = 0; i < n; i++) m = fmin(m, v[i]);
  return m;
}
static double ref_l2(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i] * v[i];
  return sqrt(s);
}
static double ref_prod(const double *v, size_t n) {
  double p = 1;
  for (size_t i = 0; i < n; i++) p *= v[i];
  return p;
}
static double ref_lse(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += exp(v[i]);
  return log(s);
}
static double ref_sumsq(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i] * v[i];
  return s;
}

static const struct {
  const char *op;
  ref_fn ref;
  int away; /* inputs away from 0 (the product's finite differences) */
} kinds[] = {{"ReduceMax", ref_max, 0},  {"ReduceMin", ref_min, 0},
             {"ReduceL2", ref_l2, 0},    {"ReduceProd", ref_prod, 1},
             {"ReduceLogSumExp", ref_lse, 0}, {"ReduceSumSquare", ref_sumsq, 0}};

/* x [2,3,4] reduced over axes {0, 2} (given as {0, -1}) with keepdims, and
 * over {1} without: the output against the reference, then the gradient. */
START_TEST(test_reduce_kinds) {
  const int64_t xs[] = {2, 3, 4};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    for (int form = 0; form < 2; form++) {
      harness h;
      uint64_t s = 300 + k;
      h_init(&h, kinds[k].op);
      h_f32(&h, "x", 3, xs, &s, -1.5, 1.5, kinds[k].away);
      const int64_t ax02[] = {0, -1}, ax1[] = {1};
      if (form == 0) h_ais(&h, "axes", ax02, 2);
      else h_ais(&h, "axes", ax1, 1);
      h_ai(&h, "keepdims", form == 0);
      h_outs(&h, 1);
      h_ready(&h);
      const float *x = h_x(&h, 0)->data;
      double want[8], v[8];
      if (form == 0) {
        const int64_t ys[] = {1, 3, 1};
        h_expect_shape(&h, 0, 3, ys);
        for (int b = 0; b < 3; b++) {
          for (int a = 0; a < 2; a++)
            for (int c = 0; c < 4; c++) v[a * 4 + c] = x[(a * 3 + b) * 4 + c];
          want[b] = kinds[k].ref(v, 8);
        }
      } else {
        const int64_t ys[] = {2, 4};
        h_expect_shape(&h, 0, 2, ys);
        for (int a = 0; a < 2; a++)
          for (int c = 0; c < 4; c++) {
            for (int b = 0; b < 3; b++) v[b] = x[(a * 3 + b) * 4 + c];
            want[a * 4 + c] = kinds[k].ref(v, 3);
          }
      }
      h_fwd(&h);
      expect_close(h_y(&h, 0)->data, want, form == 0 ? 3 : 8, 1e-6, kinds[k].op);
      h_gradcheck(&h, kinds[k].op, 1, 1e-3, 2e-4, 2e-3);
      h_free(&h);
    }
  }
}
END_TEST

/* One reduction of a 1-D x over everything (no axes attribute), with
 * output gradient 2: the gradient backward gives. */
static void reduce_1d(const char *op, const float *xv, size_t n, float *want_y, float *dx) {
  harness h;
  const int64_t xs[] = {(int64_t)n};
  uint64_t s = 1;
  h_init(&h, op);
  h_f32(&h, "x", 1, xs, &s, 0, 1, 0);
  memcpy(h_x(&h, 0)->data, xv, n * sizeof *xv);
  h_ai(&h, "keepdims", 0);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h_y(&h, 0)->ndim, 0);
  h_fwd(&h);
  *want_y = h_y(&h, 0)->data[0];
  h_y(&h, 0)->grad = calloc(1, sizeof(float));
  h_y(&h, 0)->grad[0] = 2.0f;
  h_x(&h, 0)->grad = calloc(n, sizeof(float));
  ck_assert_int_eq(h.node.op->backward(&h.node, &h.c, 0), FL_OK);
  memcpy(dx, h_x(&h, 0)->grad, n * sizeof *dx);
  h_free(&h);
}

/* Where finite differences say nothing: PyTorch's gradients at ties
 * (amax/amin split evenly), zeros (prod: the product of the others),
 * a zero norm (0).  Checked against torch 1.13. */
START_TEST(test_reduce_ties_and_zeros) {
  float y, dx[4];
  const float tie[] = {1, 3, 3, 2};
  reduce_1d("ReduceMax", tie, 4, &y, dx);
  ck_assert(y == 3 && dx[0] == 0 && dx[1] == 1 && dx[2] == 1 && dx[3] == 0);
  const float tie2[] = {-1, 3, -1, 2};
  reduce_1d("ReduceMin", tie2, 4, &y, dx);
  ck_assert(y == -1 && dx[0] == 1 && dx[1] == 0 && dx[2] == 1 && dx[3] == 0);
  const float one0[] = {2, 0, 3, -1};
  reduce_1d("ReduceProd", one0, 4, &y, dx);
  ck_assert(y == 0 && dx[0] == 0 && dx[1] == -12 && dx[2] == 0 && dx[3] == 0);
  const float two0[] = {2, 0, 3, 0};
  reduce_1d("ReduceProd", two0, 4, &y, dx);
  ck_assert(y == 0 && dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dx[3] == 0);
  const float none0[] = {2, 0.5f, 3, -1};
  reduce_1d("ReduceProd", none0, 4, &y, dx);
  ck_assert(y == -3 && dx[0] == -3 && dx[1] == -12 && dx[2] == -2 && dx[3] == 6);
  const float zeros[] = {0, 0, 0, 0};
  reduce_1d("ReduceL2", zeros, 4, &y, dx);
  ck_assert(y == 0 && dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dx[3] == 0);
  const float big[] = {100, 101, -50, 100};
  reduce_1d("ReduceLogSumExp", big, 4, &y, dx);
  ck_assert_float_eq_tol(y, 101 + log(1 + 2 * exp(-1.0)), 1e-4);
  ck_assert_float_eq_tol(dx[1], 2 / (1 + 2 * exp(-1.0)), 1e-5);
}
END_TEST

/* noop_with_empty_axes, keepdims over everything, repeated and
 * out-of-range axes. */
START_TEST(test_reduce_axes_forms) {
  harness h;
  uint64_t s = 5;
  const int64_t xs[] = {2, 3};
  h_init(&h, "ReduceMax");
  h_f32(&h, "x", 2, xs, &s, -1, 1, 0);
  h_ai(&h, "noop_with_empty_axes", 1);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 2, xs);
  h_fwd(&h);
  ck_assert_mem_eq(h_y(&h, 0)->data, h_x(&h, 0)->data, 6 * sizeof(float));
  h_free(&h);
  h_init(&h, "ReduceSumSquare");
  h_f32(&h, "x", 2, xs, &s, -1, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y11[] = {1, 1};
  h_expect_shape(&h, 0, 2, y11);
  h_free(&h);
  const int64_t twice[] = {1, -1}, far[] = {2};
  for (int i = 0; i < 2; i++) {
    h_init(&h, "ReduceL2");
    h_f32(&h, "x", 2, xs, &s, -1, 1, 0);
    if (i == 0) h_ais(&h, "axes", twice, 2);
    else h_ais(&h, "axes", far, 1);
    h_outs(&h, 1);
    ck_assert_int_eq(h_infer(&h), FL_EINVAL);
    h_free(&h);
  }
}
END_TEST

/* -------------------------------------------------------------- ArgMax */

START_TEST(test_argmax) {
  harness h;
  uint64_t s = 9;
  const int64_t xs[] = {2, 5, 3};
  for (int kd = 0; kd < 2; kd++) {
    h_init(&h, "ArgMax");
    h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
    h_ai(&h, "axis", -2);
    h_ai(&h, "keepdims", kd);
    h_outs(&h, 1);
    h_ready(&h);
    const int64_t y13[] = {2, 1, 3}, y3[] = {2, 3};
    if (kd) h_expect_shape(&h, 0, 3, y13);
    else h_expect_shape(&h, 0, 2, y3);
    ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
    h_fwd(&h);
    const float *x = h_x(&h, 0)->data;
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 3; c++) {
        int best = 0;
        for (int b = 1; b < 5; b++)
          if (x[(a * 5 + b) * 3 + c] > x[(a * 5 + best) * 3 + c]) best = b;
        ck_assert_int_eq(h_y(&h, 0)->idata[a * 3 + c], best);
      }
    h_free(&h);
  }
  /* Ties: the first index, or the last with select_last_index. */
  const int64_t ts[] = {1, 5};
  const float tv[] = {1, 4, 2, 4, 0};
  for (int last = 0; last < 2; last++) {
    h_init(&h, "ArgMax");
    h_f32(&h, "x", 2, ts, &s, 0, 1, 0);
    memcpy(h_x(&h, 0)->data, tv, sizeof tv);
    h_ai(&h, "axis", 1);
    h_ai(&h, "select_last_index", last);
    h_outs(&h, 1);
    h_ready(&h);
    h_fwd(&h);
    ck_assert_int_eq(h_y(&h, 0)->idata[0], last ? 3 : 1);
    h_free(&h);
  }
  /* An empty axis has no index. */
  const int64_t es[] = {2, 0};
  h_init(&h, "ArgMax");
  h_f32(&h, "x", 2, es, &s, 0, 1, 0);
  h_ai(&h, "axis", 1);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* -------------------------------------------------------------- CumSum */

START_TEST(test_cumsum) {
  const int64_t xs[] = {2, 4, 3}, one[] = {1};
  for (int mode = 0; mode < 4; mode++) {
    const int excl = mode & 1, rev = mode >> 1;
    harness h;
    uint64_t s = 40 + (uint64_t)mode;
    h_init(&h, "CumSum");
    h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
    const int64_t axis[] = {mode == 3 ? -2 : 1};
    h_i64(&h, "axis", mode == 3 ? 0 : 1, one, axis);
    if (excl) h_ai(&h, "exclusive", 1);
    if (rev) h_ai(&h, "reverse", 1);
    h_outs(&h, 1);
    h_ready(&h);
    h_expect_shape(&h, 0, 3, xs);
    h_fwd(&h);
    const float *x = h_x(&h, 0)->data;
    double want[24];
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 3; c++)
        for (int b = 0; b < 4; b++) {
          double sum = 0;
          for (int j = 0; j < 4; j++) {
            const int in = rev ? (excl ? j > b : j >= b) : (excl ? j < b : j <= b);
            if (in) sum += x[(a * 4 + j) * 3 + c];
          }
          want[(a * 4 + b) * 3 + c] = sum;
        }
    expect_close(h_y(&h, 0)->data, want, 24, 1e-6, "CumSum");
    h_gradcheck(&h, "CumSum", 1, 1e-3, 1e-4, 1e-3);
    h_free(&h);
  }
  /* The axis must be known at bind and hold one value. */
  harness h;
  uint64_t s = 3;
  const int64_t two[] = {2}, ax2[] = {0, 1};
  h_init(&h, "CumSum");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "axis", 1, two, ax2);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "CumSum");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "axis", 1, one, ax2);
  h_x(&h, 1)->known = 0;
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ---------------------------------------------------------------- TopK */

static void topk_build(harness *h, const int64_t *xs, int64_t k, int64_t axis, int largest,
                       uint64_t *s) {
  const int64_t one[] = {1}, kv[] = {k};
  h_init(h, "TopK");
  h_f32(h, "x", 3, xs, s, -1, 1, 0);
  h_i64(h, "K", 1, one, kv);
  h_ai(h, "axis", axis);
  h_ai(h, "largest", largest);
  h_outs(h, 2);
}

START_TEST(test_topk) {
  const int64_t xs[] = {2, 6, 3};
  for (int largest = 0; largest < 2; largest++) {
    harness h;
    uint64_t s = 70 + (uint64_t)largest;
    topk_build(&h, xs, 3, 1, largest, &s);
    h_ready(&h);
    const int64_t ys[] = {2, 3, 3};
    h_expect_shape(&h, 0, 3, ys);
    h_expect_shape(&h, 1, 3, ys);
    ck_assert_int_eq(h_y(&h, 1)->dtype, FL_G_I64);
    h_fwd(&h);
    const float *x = h_x(&h, 0)->data;
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 3; c++) {
        int used[6] = {0};
        for (int j = 0; j < 3; j++) { /* selection by hand */
          int best = -1;
          for (int b = 0; b < 6; b++) {
            const float v = x[(a * 6 + b) * 3 + c];
            if (!used[b] && (best < 0 || (largest ? v > x[(a * 6 + best) * 3 + c]
                                                  : v < x[(a * 6 + best) * 3 + c])))
              best = b;
          }
          used[best] = 1;
          const size_t q = (size_t)((a * 3 + j) * 3 + c);
          ck_assert_int_eq(h_y(&h, 1)->idata[q], best);
          ck_assert(h_y(&h, 0)->data[q] == x[(a * 6 + best) * 3 + c]);
        }
      }
    h_gradcheck(&h, "TopK", 1, 1e-3, 1e-4, 1e-3);
    h_free(&h);
  }
  /* Equal values come lower index first, as ONNX says (torch 1.13's CPU
   * topk orders ties otherwise: 3, 5, 1 here); the gradient goes to the
   * kept positions only. */
  harness h;
  uint64_t s = 5;
  const int64_t ts[] = {1, 1, 6};
  topk_build(&h, ts, 3, -1, 1, &s);
  const float tv[] = {1, 5, 2, 5, 0, 5};
  memcpy(h_x(&h, 0)->data, tv, sizeof tv);
  h_ready(&h);
  h_fwd(&h);
  ck_assert(h_y(&h, 1)->idata[0] == 1 && h_y(&h, 1)->idata[1] == 3 &&
            h_y(&h, 1)->idata[2] == 5);
  h_y(&h, 0)->grad = calloc(3, sizeof(float));
  h_x(&h, 0)->grad = calloc(6, sizeof(float));
  for (int j = 0; j < 3; j++) h_y(&h, 0)->grad[j] = (float)(j + 1);
  ck_assert_int_eq(h.node.op->backward(&h.node, &h.c, 0), FL_OK);
  const float want[] = {0, 1, 0, 2, 0, 3};
  ck_assert_mem_eq(h_x(&h, 0)->grad, want, sizeof want);
  h_free(&h);
  /* K beyond the axis, or known only at run time, is refused. */
  topk_build(&h, xs, 7, 1, 1, &s);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  topk_build(&h, xs, 2, 1, 1, &s);
  h_x(&h, 1)->known = 0;
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ------------------------------------------------ InstanceNormalization */

static void in_build(harness *h, int nd, const int64_t *xs, uint64_t *s) {
  const int64_t cs[] = {xs[1]};
  h_init(h, "InstanceNormalization");
  h_f32(h, "x", nd, xs, s, -1, 2, 0);
  h_f32(h, "scale", 1, cs, s, 0.5, 1.5, 0);
  h_f32(h, "B", 1, cs, s, -0.5, 0.5, 0);
  h_af(h, "epsilon", 1e-5f);
  h_outs(h, 1);
}

START_TEST(test_instancenorm) {
  const int64_t s3[] = {3, 4, 5}, s4[] = {2, 3, 2, 3};
  for (int form = 0; form < 2; form++) {
    harness h;
    uint64_t s = 90 + (uint64_t)form;
    const int64_t *xs = form ? s4 : s3;
    in_build(&h, form ? 4 : 3, xs, &s);
    h_ready(&h);
    h_fwd(&h);
    const fl_gtensor *x = h_x(&h, 0);
    const size_t C = (size_t)xs[1], rows = (size_t)xs[0] * C, inner = x->n / rows;
    double want[60];
    for (size_t r = 0; r < rows; r++) {
      double m = 0, v = 0;
      for (size_t k = 0; k < inner; k++) m += x->data[r * inner + k];
      m /= (double)inner;
      for (size_t k = 0; k < inner; k++) v += pow(x->data[r * inner + k] - m, 2);
      v /= (double)inner;
      for (size_t k = 0; k < inner; k++)
        want[r * inner + k] = (x->data[r * inner + k] - m) / sqrt(v + 1e-5) *
                                  h_x(&h, 1)->data[r % C] + h_x(&h, 2)->data[r % C];
    }
    expect_close(h_y(&h, 0)->data, want, x->n, 2e-5, "InstanceNormalization");
    h_gradcheck(&h, "InstanceNormalization", 1, 1e-3, 2e-3, 3e-3);
    h_free(&h);
  }
  /* Rank 2, and a scale of the wrong length, are refused. */
  harness h;
  uint64_t s = 4;
  const int64_t s2[] = {3, 4};
  in_build(&h, 2, s2, &s);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  in_build(&h, 3, s3, &s);
  h_x(&h, 1)->shape[0] = 3;
  h_x(&h, 1)->n = 3;
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ---------------------------------- BatchNormalization, opset 13's form */

static void bn_inputs(harness *h) {
  uint64_t s = 81;
  const int64_t xs[] = {4, 3, 5}, cs[] = {3};
  h_init(h, "BatchNormalization");
  h_f32(h, "x", 3, xs, &s, -1, 2, 0);
  h_f32(h, "gamma", 1, cs, &s, 0.5, 1.5, 0);
  h_f32(h, "beta", 1, cs, &s, -0.5, 0.5, 0);
  h_f32(h, "rmean", 1, cs, &s, -0.1, 0.1, 0);
  h_f32(h, "rvar", 1, cs, &s, 0.9, 1.1, 0);
  h_x(h, 3)->kind = FL_GT_BUFFER;
  h_x(h, 4)->kind = FL_GT_BUFFER;
  h_af(h, "epsilon", 1e-5f);
  h_af(h, "momentum", 0.9f);
}

/* Five outputs (the harness binds at most four): the node's outputs are
 * outs, bound here as h_infer binds; the status of infer. */
static fl_status bn5_bind(harness *h, int *outs) {
  static const char *const names[] = {"y", "running_mean", "running_var", "saved_mean",
                                      "saved_var"};
  for (int o = 0; o < 5; o++) {
    fl_gtensor *t = &h->t[h->nt];
    t->name = (char *)names[o];
    t->kind = FL_GT_VALUE;
    t->producer = 0;
    outs[o] = h->nt++;
  }
  h->node.out = outs;
  h->node.n_out = 5;
  size_t ws = 0, saved = 0;
  const fl_status st = h->node.op->infer(&h->node, &h->c, &ws, &saved);
  if (st != FL_OK) return st;
  for (int o = 0; o < 5; o++) {
    fl_gtensor *t = &h->t[outs[o]];
    t->data = calloc(t->n, sizeof *t->data);
    t->grad = calloc(t->n, sizeof *t->grad);
  }
  h->node.ws = calloc(ws ? ws : 1, sizeof(float));
  h->node.saved = calloc(saved ? saved : 1, sizeof(float));
  h->node.ws_floats = ws;
  h->node.saved_floats = saved;
  return FL_OK;
}

/* Opset 13's node: outputs running_mean, running_var (the updated
 * buffers), saved_mean and saved_var (the batch's mean and biased
 * variance); y and the gradients are the one-output node's, bit for bit. */
START_TEST(test_batchnorm_opset13) {
  harness a, b;
  int outs[5];
#define Y5(o) (&b.t[outs[o]])
  bn_inputs(&a);
  h_outs(&a, 1);
  h_ready(&a);
  bn_inputs(&b);
  ck_assert_int_eq(bn5_bind(&b, outs), FL_OK);
  for (int o = 1; o < 5; o++) ck_assert(b.t[outs[o]].ndim == 1 && b.t[outs[o]].shape[0] == 3);
  h_fwd(&a);
  h_fwd(&b);
  const fl_gtensor *y = Y5(0);
  ck_assert_mem_eq(y->data, h_y(&a, 0)->data, y->n * sizeof(float));
  const float *x = h_x(&b, 0)->data;
  for (int c = 0; c < 3; c++) {
    double m = 0, v = 0;
    for (int n = 0; n < 4; n++)
      for (int k = 0; k < 5; k++) m += x[(n * 3 + c) * 5 + k];
    m /= 20;
    for (int n = 0; n < 4; n++)
      for (int k = 0; k < 5; k++) v += pow(x[(n * 3 + c) * 5 + k] - m, 2);
    ck_assert_float_eq_tol(Y5(3)->data[c], m, 1e-6);
    ck_assert_float_eq_tol(Y5(4)->data[c], v / 20, 1e-6);
    ck_assert(Y5(1)->data[c] == h_x(&b, 3)->data[c]);
    ck_assert(Y5(2)->data[c] == h_x(&b, 4)->data[c]);
  }
  /* Backward: the saved outputs' gradients (here 1) pass nothing back. */
  uint64_t s = 7;
  a.t[a.out[0]].grad = calloc(y->n, sizeof(float));
  gc_fill(a.t[a.out[0]].grad, y->n, &s, -1, 1);
  memcpy(y->grad, a.t[a.out[0]].grad, y->n * sizeof(float));
  for (int o = 3; o < 5; o++)
    for (int c = 0; c < 3; c++) Y5(o)->grad[c] = 1.0f;
  for (int i = 0; i < 3; i++) {
    h_x(&a, i)->grad = calloc(h_x(&a, i)->n, sizeof(float));
    h_x(&b, i)->grad = calloc(h_x(&b, i)->n, sizeof(float));
  }
  ck_assert_int_eq(a.node.op->backward(&a.node, &a.c, 0), FL_OK);
  ck_assert_int_eq(b.node.op->backward(&b.node, &b.c, 0), FL_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_mem_eq(h_x(&b, i)->grad, h_x(&a, i)->grad, h_x(&a, i)->n * sizeof(float));
  h_free(&a);
  h_free(&b);
  /* A gpu bind refuses the saved outputs. */
  int dummy;
  bn_inputs(&b);
  b.c.stream = &dummy;
  ck_assert_int_eq(bn5_bind(&b, outs), FL_ENOTSUP);
  h_free(&b);
#undef Y5
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF); /* the refusal tests log their errors */
  Suite *s = suite_create("ops_reduce");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_registry);
  tcase_add_test(tc, test_reduce_kinds);
  tcase_add_test(tc, test_reduce_ties_and_zeros);
  tcase_add_test(tc, test_reduce_axes_forms);
  tcase_add_test(tc, test_argmax);
  tcase_add_test(tc, test_cumsum);
  tcase_add_test(tc, test_topk);
  tcase_add_test(tc, test_instancenorm);
  tcase_add_test(tc, test_batchnorm_opset13);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
