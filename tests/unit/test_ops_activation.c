/* test_ops_activation.c - unit tests of the activation family
 * (trainer/graph/ops_activation.c) and of Cast to BOOL, without the
 * engine: each test builds one node by hand (graph_ops_harness.h), checks
 * forward against a double-precision reference and backward against
 * central finite differences, then the accumulate path.  The rules at the
 * kinks (PyTorch 1.13's: Clip's ends, HardSwish's, ties of Max/Min, Abs at
 * 0, zero gradients of Sign/Floor/Ceil/Round) are pinned by exact values,
 * and the binary ops are checked with broadcasting. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_ops_harness.h"

/* ------------------------------------------------------------ helpers */

/* Move v off the points in kinks (within 0.02) so a finite difference
 * does not straddle one. */
static void nudge(float *v, size_t n, const double *kinks, int nk) {
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < nk; k++)
      if (fabs(v[i] - kinks[k]) < 0.02) v[i] = (float)(kinks[k] + 0.05);
}

/* A float input with the given values. */
static int h_vals(harness *h, const char *name, int nd, const int64_t *shape, const float *v) {
  const int id = h_tensor(h, name, FL_G_F32, nd, shape);
  memcpy(h->t[id].data, v, h->t[id].n * sizeof *v);
  h->in[h->node.n_in++] = id;
  return id;
}

/* Forward, then backward with output grad 1 everywhere (accum 0): the
 * input grads of a sum of the outputs, as torch's y.sum().backward(). */
static void sum_grad(harness *h) {
  for (int i = 0; i < h->node.n_in; i++)
    if (h_diff(h, i)) {
      free(h_x(h, i)->grad); /* a second call on one harness starts afresh */
      h_x(h, i)->grad = calloc(h_x(h, i)->n, sizeof(float));
    }
  fl_gtensor *y = h_y(h, 0);
  free(y->grad);
  y->grad = calloc(y->n, sizeof(float));
  h_fwd(h);
  for (size_t i = 0; i < y->n; i++) y->grad[i] = 1.0f;
  ck_assert_int_eq(h->node.op->backward(&h->node, &h->c, 0), FL_OK);
}

static void expect_f(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-6f * (1.0f + fabsf(want[i])),
                  "%s[%zu]: %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
}

/* ------------------------------------------------------------ registry */

START_TEST(test_registry) {
  static const char *const ops[] = {"Clip", "HardSwish", "HardSigmoid", "Elu", "Selu",
                                    "Celu", "PRelu", "Softplus", "Softsign", "Mish",
                                    "Abs", "Max", "Min", "Reciprocal", "Sign", "Floor",
                                    "Ceil", "Round", "Mod", "And", "Or", "Xor"};
  const char *all = fl_gop_supported();
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    const fl_gop *op = fl_gop_find(ops[i]);
    ck_assert_msg(op != NULL, "%s missing", ops[i]);
    ck_assert_msg(strstr(all, ops[i]) != NULL, "%s not listed", ops[i]);
    ck_assert_msg(op->infer && op->forward && op->attrs && op->doc, "%s incomplete", ops[i]);
  }
  ck_assert_int_eq(fl_gop_find("HardSwish")->opset_min, 14);
  ck_assert_int_eq(fl_gop_find("Mish")->opset_min, 18);
}
END_TEST

/* -------------------------------------------------------------- unary */

typedef struct un_case {
  const char *op;
  double lo, hi;        /* input range */
  double kinks[2];
  int nk;
  const char *attr[2];  /* float attributes set, NULL: default */
  float av[2];
} un_case;

static double un_ref(const un_case *k, double x) {
  const char *op = k->op;
  const double a = k->av[0], b = k->av[1];
  if (!strcmp(op, "HardSwish")) return x * fmin(fmax(x + 3, 0), 6) / 6;
  if (!strcmp(op, "HardSigmoid")) return fmin(1, fmax(0, a * x + b));
  if (!strcmp(op, "Elu")) return x > 0 ? x : a * (exp(x) - 1);
  if (!strcmp(op, "Selu"))
    return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (exp(x) - 1));
  if (!strcmp(op, "Celu")) return x > 0 ? x : a * (exp(x / a) - 1);
  if (!strcmp(op, "Softplus")) return log1p(exp(x));
  if (!strcmp(op, "Softsign")) return x / (1 + fabs(x));
  if (!strcmp(op, "Mish")) return x * tanh(log1p(exp(x)));
  if (!strcmp(op, "Abs")) return fabs(x);
  return 1 / x; /* Reciprocal */
}

START_TEST(test_unary) {
  static const un_case cases[] = {
      {"HardSwish", -5, 5, {-3, 3}, 2, {NULL}, {0}},
      {"HardSigmoid", -4, 4, {-4.0 / 3, 2}, 2, {"alpha", "beta"}, {0.3f, 0.4f}},
      {"Elu", -3, 3, {0}, 1, {"alpha"}, {0.7f}},
      {"Selu", -3, 3, {0}, 1, {NULL}, {0}},
      {"Celu", -3, 3, {0}, 1, {"alpha"}, {0.8f}},
      {"Softplus", -6, 6, {0}, 0, {NULL}, {0}},
      {"Softsign", -4, 4, {0}, 1, {NULL}, {0}},
      {"Mish", -5, 5, {0}, 0, {NULL}, {0}},
      {"Abs", -2, 2, {0}, 1, {NULL}, {0}},
      {"Reciprocal", 0.5, 2, {0}, 0, {NULL}, {0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const un_case *k = &cases[c];
    harness h;
    uint64_t s = 21 + c;
    const int64_t sh[] = {3, 11};
    h_init(&h, k->op);
    const int x = h_f32(&h, "x", 2, sh, &s, k->lo, k->hi, 0);
    nudge(h.t[x].data, h.t[x].n, k->kinks, k->nk);
    for (int a = 0; a < 2; a++)
      if (k->attr[a]) h_af(&h, k->attr[a], k->av[a]);
    h_outs(&h, 1);
    h_ready(&h);
    h_fwd(&h);
    double want[33];
    for (int i = 0; i < 33; i++) want[i] = un_ref(k, h.t[x].data[i]);
    expect_close(h_y(&h, 0)->data, want, 33, 2e-6, k->op);
    h_gradcheck(&h, k->op, 1, 1e-3, 1e-3, 2e-3);
    h_free(&h);
  }
}
END_TEST

/* Values and gradients at the kinks, as PyTorch 1.13 gives them
 * (y.sum().backward() on these inputs). */
START_TEST(test_unary_kinks) {
  static const struct {
    const char *op;
    float x[6], y[6], dx[6];
  } k[] = {
      {"HardSwish", {-3, -0.5f, 0, 0.5f, 3, 6}, {0, -0.5f * 2.5f / 6, 0, 0.5f * 3.5f / 6, 3, 6},
       {-0.5f, 1.0f / 3, 0.5f, 2.0f / 3, 1.5f, 1}},
      {"HardSigmoid", {-3, -0.5f, 0, 0.5f, 3, 6}, {0, 0.4f, 0.5f, 0.6f, 1, 1},
       {0, 0.2f, 0.2f, 0.2f, 0, 0}},
      {"Elu", {-3, -0.5f, 0, 0.5f, 3, 6}, {expm1f(-3), expm1f(-0.5f), 0, 0.5f, 3, 6},
       {expf(-3), expf(-0.5f), 1, 1, 1, 1}},
      {"Abs", {-3, -0.5f, 0, 0.5f, 3, -0.0f}, {3, 0.5f, 0, 0.5f, 3, 0}, {-1, -1, 0, 1, 1, 0}},
      {"Sign", {-3, -0.5f, 0, 0.5f, 3, -0.0f}, {-1, -1, 0, 1, 1, 0}, {0}},
      {"Floor", {-2.5f, -0.5f, 0, 0.5f, 1.5f, 2}, {-3, -1, 0, 0, 1, 2}, {0}},
      {"Ceil", {-2.5f, -0.5f, 0, 0.5f, 1.5f, 2}, {-2, -0.0f, 0, 1, 2, 2}, {0}},
      {"Round", {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f}, {0, 2, 2, -0.0f, -2, 2}, {0}},
      {"Softplus", {20, 20.5f, 30, -30, 0, 1}, {20, 20.5f, 30, 9.3576229e-14f, 0.69314718f,
                                                 1.3132616f},
       {1, 1, 1, 9.3576229e-14f, 0.5f, 0.7310586f}},
  };
  const int64_t sh[] = {6};
  for (size_t c = 0; c < sizeof k / sizeof k[0]; c++) {
    harness h;
    h_init(&h, k[c].op);
    h_vals(&h, "x", 1, sh, k[c].x);
    h_outs(&h, 1);
    h_ready(&h);
    sum_grad(&h);
    expect_f(h_y(&h, 0)->data, k[c].y, 6, k[c].op);
    expect_f(h_x(&h, 0)->grad, k[c].dx, 6, k[c].op);
    /* accumulating adds nothing where the gradient is zero */
    for (int i = 0; i < 6; i++) h_x(&h, 0)->grad[i] = 0.25f;
    ck_assert_int_eq(h.node.op->backward(&h.node, &h.c, 1), FL_OK);
    for (int i = 0; i < 6; i++)
      ck_assert_float_eq_tol(h_x(&h, 0)->grad[i], 0.25f + k[c].dx[i], 1e-6f);
    h_free(&h);
  }
}
END_TEST

START_TEST(test_unary_refusals) {
  harness h;
  const int64_t s1[] = {1}, v[] = {1};
  h_init(&h, "Elu");
  h_i64(&h, "x", 1, s1, v);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* float only */
  h_free(&h);
  uint64_t s = 3;
  h_init(&h, "Celu");
  h_f32(&h, "x", 1, s1, &s, -1, 1, 0);
  h_af(&h, "alpha", 0.0f);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* divides by alpha */
  h_free(&h);
  h_init(&h, "HardSigmoid");
  h_f32(&h, "x", 1, s1, &s, -1, 1, 0);
  h_ai(&h, "alpha", 1);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* an int where a float is due */
  h_free(&h);
}
END_TEST

/* --------------------------------------------------------------- Clip */

static int scalar(harness *h, const char *name, float v) {
  const int64_t none[] = {1};
  const int id = h_tensor(h, name, FL_G_F32, 0, none);
  h->t[id].data[0] = v;
  h->t[id].kind = FL_GT_CONST;
  h->in[h->node.n_in++] = id;
  return id;
}

START_TEST(test_clip) {
  /* both bounds, only min, only max (min omitted), none */
  static const float lo[] = {-0.5f, -0.5f, -INFINITY, -INFINITY};
  static const float hi[] = {0.7f, INFINITY, 0.7f, INFINITY};
  for (int m = 0; m < 4; m++) {
    harness h;
    uint64_t s = 8;
    const int64_t sh[] = {4, 9};
    h_init(&h, "Clip");
    const int x = h_f32(&h, "x", 2, sh, &s, -2, 2, 0);
    const double kinks[] = {lo[m], hi[m]};
    nudge(h.t[x].data, h.t[x].n, kinks, 2);
    if (m < 2) scalar(&h, "min", lo[m]);
    if (m == 2) h_none(&h);
    if (m == 0 || m == 2) scalar(&h, "max", hi[m]);
    h_outs(&h, 1);
    h_ready(&h);
    h_fwd(&h);
    double want[36];
    for (int i = 0; i < 36; i++) want[i] = fmin(fmax(h.t[x].data[i], lo[m]), hi[m]);
    expect_close(h_y(&h, 0)->data, want, 36, 1e-7, "Clip");
    h_gradcheck(&h, "Clip", 1, 1e-3, 1e-4, 1e-3);
    h_free(&h);
  }
  /* torch.clamp's ends: the gradient passes at x == min and x == max;
   * min > max gives max everywhere and no gradient. */
  harness h;
  const int64_t s5[] = {5};
  const float xv[] = {-1, -0.5f, 0, 0.5f, 1};
  h_init(&h, "Clip");
  h_vals(&h, "x", 1, s5, xv);
  scalar(&h, "min", -0.5f);
  scalar(&h, "max", 0.5f);
  h_outs(&h, 1);
  h_ready(&h);
  sum_grad(&h);
  const float y1[] = {-0.5f, -0.5f, 0, 0.5f, 0.5f}, d1[] = {0, 1, 1, 1, 0};
  expect_f(h_y(&h, 0)->data, y1, 5, "Clip ends");
  expect_f(h_x(&h, 0)->grad, d1, 5, "Clip ends grad");
  h.t[h.in[1]].data[0] = 1.0f, h.t[h.in[2]].data[0] = -1.0f;
  sum_grad(&h);
  const float y2[] = {-1, -1, -1, -1, -1}, d2[] = {0, 0, 0, 0, 0};
  expect_f(h_y(&h, 0)->data, y2, 5, "Clip min > max");
  expect_f(h_x(&h, 0)->grad, d2, 5, "Clip min > max grad");
  h_free(&h);
  /* a bound that is no scalar */
  uint64_t s = 1;
  const int64_t s2[] = {2};
  h_init(&h, "Clip");
  h_f32(&h, "x", 1, s5, &s, -1, 1, 0);
  h_f32(&h, "min", 1, s2, &s, -1, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* -------------------------------------------------------------- PRelu */

static void check_prelu(int nx, const int64_t *sx, int ns, const int64_t *ss) {
  harness h;
  uint64_t s = 31;
  h_init(&h, "PRelu");
  h_f32(&h, "x", nx, sx, &s, 0.1, 2, 1);
  h_f32(&h, "slope", ns, ss, &s, 0.05, 0.5, 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  const fl_gtensor *x = h_x(&h, 0), *a = h_x(&h, 1), *y = h_y(&h, 0);
  h_expect_shape(&h, 0, nx, sx);
  double *want = malloc(y->n * sizeof *want);
  for (size_t o = 0; o < y->n; o++) {
    const double v = x->data[o];
    want[o] = v > 0 ? v : a->data[bidx(o, nx, sx, ns, ss)] * v;
  }
  expect_close(y->data, want, y->n, 1e-6, "PRelu");
  free(want);
  h_gradcheck(&h, "PRelu", 1, 1e-3, 1e-3, 2e-3);
  h_free(&h);
}

START_TEST(test_prelu) {
  const int64_t x234[] = {2, 3, 4}, x25[] = {2, 5};
  const int64_t one[] = {1}, c31[] = {3, 1}, c4[] = {4}, c5[] = {5}, full[] = {2, 3, 4};
  check_prelu(3, x234, 1, one);  /* num_parameters 1 */
  check_prelu(3, x234, 2, c31);  /* per channel of [N, C, L] */
  check_prelu(3, x234, 1, c4);
  check_prelu(3, x234, 3, full);
  check_prelu(2, x25, 1, c5);    /* per feature of [N, C] */
  check_prelu(2, x25, 0, one);   /* a scalar slope */
  /* the slope at 0 as PyTorch: dx = slope * g, dslope = g * x = 0 */
  harness h;
  const float xv[] = {-2, 0, 3}, av[] = {0.25f};
  const int64_t s3[] = {3};
  h_init(&h, "PRelu");
  h_vals(&h, "x", 1, s3, xv);
  h_vals(&h, "slope", 1, one, av);
  h_outs(&h, 1);
  h_ready(&h);
  sum_grad(&h);
  const float y[] = {-0.5f, 0, 3}, dx[] = {0.25f, 0.25f, 1}, da[] = {-2};
  expect_f(h_y(&h, 0)->data, y, 3, "PRelu at 0");
  expect_f(h_x(&h, 0)->grad, dx, 3, "PRelu dx at 0");
  expect_f(h_x(&h, 1)->grad, da, 1, "PRelu dslope");
  h_free(&h);
  /* the slope may not make X bigger (one-way broadcasting) */
  uint64_t s = 2;
  const int64_t x34[] = {3, 4};
  h_init(&h, "PRelu");
  h_f32(&h, "x", 2, x34, &s, -1, 1, 0);
  h_f32(&h, "slope", 3, full, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* --------------------------------------------------------- Max and Min */

/* vals: each input's values, or NULL for random ones. */
static void check_maxmin(const char *op, int nin, const int *nd, const int64_t *const *sh,
                         const float *const *vals) {
  harness h;
  uint64_t s = 41;
  h_init(&h, op);
  for (int k = 0; k < nin; k++) {
    const int id = h_f32(&h, "in", nd[k], sh[k], &s, -2, 2, 0);
    if (vals && vals[k]) memcpy(h.t[id].data, vals[k], h.t[id].n * sizeof(float));
  }
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  const fl_gtensor *y = h_y(&h, 0);
  double *want = malloc(y->n * sizeof *want);
  for (size_t o = 0; o < y->n; o++) {
    for (int k = 0; k < nin; k++) {
      const double v = h_x(&h, k)->data[bidx(o, y->ndim, y->shape, nd[k], sh[k])];
      if (k == 0 || (op[1] == 'a' ? v > want[o] : v < want[o])) want[o] = v;
    }
  }
  expect_close(y->data, want, y->n, 0, op);
  free(want);
  h_gradcheck(&h, op, 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}

START_TEST(test_maxmin) {
  static const char *const ops[] = {"Max", "Min"};
  const int64_t s234[] = {2, 3, 4}, s31[] = {3, 1}, s4[] = {4}, one[] = {1};
  const int nd2[] = {3, 2}, nd3[] = {1, 3, 0}, nd1[] = {3}, ndb[] = {2, 1};
  const int64_t *sh2[] = {s234, s31}, *sh3[] = {s4, s234, one}, *sh1[] = {s234};
  const int64_t *shb[] = {s31, s4}; /* [3,1] and [4] broadcast to [3,4] */
  /* each input wins somewhere: a scalar inside the others' range, and
   * interleaved values where both inputs are broadcast */
  const float mid[] = {0.3f}, a31[] = {-1, 0.2f, 1.1f}, b4[] = {-0.5f, 0.6f, 1.5f, -1.4f};
  const float *v3[] = {NULL, NULL, mid}, *vb[] = {a31, b4};
  for (int k = 0; k < 2; k++) {
    check_maxmin(ops[k], 2, nd2, sh2, NULL);
    check_maxmin(ops[k], 3, nd3, sh3, v3);
    check_maxmin(ops[k], 1, nd1, sh1, NULL);
    check_maxmin(ops[k], 2, ndb, shb, vb);
  }
  /* ties split the gradient: torch.maximum gives each of two equal inputs
   * half; three equal inputs take a third each */
  for (int k = 0; k < 2; k++) {
    harness h;
    const int64_t s3[] = {3};
    const float a[] = {1, 2, 3}, b[] = {1, 1, 4}, c[] = {1, 5, 3};
    h_init(&h, ops[k]);
    h_vals(&h, "a", 1, s3, a);
    h_vals(&h, "b", 1, s3, b);
    h_vals(&h, "c", 1, s3, c);
    h_outs(&h, 1);
    h_ready(&h);
    sum_grad(&h);
    const float third = 1.0f / 3;
    const float da[2][3] = {{third, 0, 0}, {third, 0, 0.5f}},
                db[2][3] = {{third, 0, 1}, {third, 1, 0}},
                dc[2][3] = {{third, 1, 0}, {third, 0, 0.5f}};
    expect_f(h_x(&h, 0)->grad, da[k], 3, "tie a");
    expect_f(h_x(&h, 1)->grad, db[k], 3, "tie b");
    expect_f(h_x(&h, 2)->grad, dc[k], 3, "tie c");
    h_free(&h);
  }
  /* int64 (shape domain), and mixed types refused */
  harness h;
  const int64_t s3[] = {3}, s1[] = {1}, a[] = {4, -2, 9}, b[] = {3};
  h_init(&h, "Max");
  h_i64(&h, "a", 1, s3, a);
  h_i64(&h, "b", 1, s1, b);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert(h_y(&h, 0)->idata[0] == 4 && h_y(&h, 0)->idata[1] == 3 &&
            h_y(&h, 0)->idata[2] == 9);
  h_free(&h);
  uint64_t s = 4;
  h_init(&h, "Min");
  h_i64(&h, "a", 1, s3, a);
  h_f32(&h, "b", 1, s1, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  const int64_t s2[] = {2};
  h_init(&h, "Min");
  h_f32(&h, "a", 1, s3, &s, 0, 1, 0);
  h_f32(&h, "b", 1, s2, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ---------------------------------------------------------------- Mod */

static double mod_ref(double a, double b, int fm) {
  double r = fmod(a, b);
  if (!fm && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/* Keep a/b away from integers (the jumps of Mod and of its b-gradient). */
static void mod_off_jumps(harness *h, const int64_t *sa, int na, const int64_t *sb, int nb) {
  fl_gtensor *a = h_x(h, 0), *b = h_x(h, 1);
  for (size_t o = 0; o < a->n; o++) {
    const float v = b->data[bidx(o, na, sa, nb, sb)];
    const double q = a->data[o] / v, f = q - floor(q);
    if (f < 0.05 || f > 0.95) a->data[o] += 0.2f * v; /* f moves into [0.15, 0.25] */
  }
}

static void check_mod(int fm, int na, const int64_t *sa, int nb, const int64_t *sb) {
  harness h;
  uint64_t s = 51;
  h_init(&h, "Mod");
  h_f32(&h, "a", na, sa, &s, 0.1, 5, 1);
  h_f32(&h, "b", nb, sb, &s, 0.6, 1.7, 1);
  h_ai(&h, "fmod", fm);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h_y(&h, 0)->ndim, na); /* a is the bigger one here */
  mod_off_jumps(&h, sa, na, sb, nb);
  h_fwd(&h);
  const fl_gtensor *a = h_x(&h, 0), *b = h_x(&h, 1), *y = h_y(&h, 0);
  double *want = malloc(y->n * sizeof *want);
  for (size_t o = 0; o < y->n; o++)
    want[o] = mod_ref(a->data[o], b->data[bidx(o, na, sa, nb, sb)], fm);
  expect_close(y->data, want, y->n, 1e-6, fm ? "Mod fmod 1" : "Mod fmod 0");
  free(want);
  h_gradcheck(&h, fm ? "Mod fmod 1" : "Mod fmod 0", 1, 1e-3, 1e-3, 2e-3);
  h_free(&h);
}

START_TEST(test_mod) {
  const int64_t s234[] = {2, 3, 4}, s31[] = {3, 1}, s4[] = {4}, one[] = {1};
  for (int fm = 0; fm <= 1; fm++) {
    check_mod(fm, 3, s234, 3, s234);
    check_mod(fm, 3, s234, 2, s31);
    check_mod(fm, 3, s234, 1, s4);
    check_mod(fm, 3, s234, 0, one);
  }
  /* the signs, and the b-gradient -trunc(a/b) (fmod 1) or -floor(a/b)
   * (fmod 0): PyTorch's fmod and remainder on these values */
  static const float want_y[2][4] = {{1.5f, 0.5f, -0.5f, -1.5f}, {1.5f, -1.5f, 1.5f, -1.5f}};
  static const float want_db[2][4] = {{-2, 3, 3, -2}, {-2, 2, 2, -2}};
  for (int fm = 0; fm <= 1; fm++) {
    harness h;
    const int64_t s4v[] = {4};
    const float a[] = {5.5f, -5.5f, 5.5f, -5.5f}, b[] = {2, 2, -2, -2};
    h_init(&h, "Mod");
    h_vals(&h, "a", 1, s4v, a);
    h_vals(&h, "b", 1, s4v, b);
    h_ai(&h, "fmod", fm);
    h_outs(&h, 1);
    h_ready(&h);
    sum_grad(&h);
    const float ones[] = {1, 1, 1, 1};
    expect_f(h_y(&h, 0)->data, want_y[fm], 4, "Mod signs");
    expect_f(h_x(&h, 0)->grad, ones, 4, "Mod da");
    expect_f(h_x(&h, 1)->grad, want_db[fm], 4, "Mod db");
    h_free(&h);
  }
}
END_TEST

START_TEST(test_mod_int64_and_refusals) {
  static const int64_t a[] = {5, -5, 5, -5, 7, -9}, b[] = {2, 2, -2, -2, -1, 3};
  static const int64_t want[2][6] = {{1, 1, -1, -1, 0, 0}, {1, -1, 1, -1, 0, 0}};
  const int64_t s6[] = {6}, s1[] = {1}, zero[] = {0};
  for (int fm = 0; fm <= 1; fm++) {
    harness h;
    h_init(&h, "Mod");
    h_i64(&h, "a", 1, s6, a);
    h_i64(&h, "b", 1, s6, b);
    h_ai(&h, "fmod", fm);
    h_outs(&h, 1);
    h_ready(&h);
    ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
    h_fwd(&h);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], want[fm][i]);
    h_free(&h);
  }
  harness h;
  h_init(&h, "Mod");
  h_i64(&h, "a", 1, s6, a);
  h_i64(&h, "b", 1, s1, zero);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_EINVAL); /* modulo by zero */
  h_free(&h);
  h_init(&h, "Mod");
  h_i64(&h, "a", 1, s6, a);
  h_i64(&h, "b", 1, s6, b);
  h_ai(&h, "fmod", 2);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  uint64_t s = 6;
  h_init(&h, "Mod");
  h_i64(&h, "a", 1, s6, a);
  h_f32(&h, "b", 1, s1, &s, 1, 2, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* mixed element types */
  h_free(&h);
}
END_TEST

/* ------------------------------------------------- And, Or, Xor, Cast */

START_TEST(test_logic) {
  static const char *const ops[] = {"And", "Or", "Xor"};
  /* a [2,2] against b [2] broadcast along rows; nonzero is true */
  static const int64_t a[] = {0, 0, 1, 3}, b[] = {0, -1};
  static const int64_t want[3][4] = {{0, 0, 0, 1}, {0, 1, 1, 1}, {0, 1, 1, 0}};
  const int64_t s22[] = {2, 2}, s2[] = {2};
  for (int k = 0; k < 3; k++) {
    harness h;
    h_init(&h, ops[k]);
    h_i64(&h, "a", 2, s22, a);
    h_i64(&h, "b", 1, s2, b);
    h_outs(&h, 1);
    h_ready(&h);
    h_expect_shape(&h, 0, 2, s22);
    h_fwd(&h);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], want[k][i]);
    ck_assert(h.node.op->backward == NULL);
    h_free(&h);
  }
  harness h;
  uint64_t s = 7;
  h_init(&h, "And");
  h_f32(&h, "a", 1, s2, &s, 0, 1, 0);
  h_i64(&h, "b", 1, s2, b);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* booleans are int64 */
  h_free(&h);
  const int64_t s3[] = {3};
  h_init(&h, "Xor");
  h_i64(&h, "a", 2, s22, a);
  h_i64(&h, "b", 1, s3, (const int64_t[]){0, 1, 0});
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* no broadcast */
  h_free(&h);
}
END_TEST

START_TEST(test_cast_bool) {
  harness h;
  const int64_t s5[] = {5};
  const float xv[] = {0.0f, -0.0f, 2.5f, -1e-30f, NAN};
  h_init(&h, "Cast");
  h_vals(&h, "x", 1, s5, xv);
  h_ai(&h, "to", 9);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
  h_fwd(&h);
  const int64_t want[] = {0, 0, 1, 1, 1};
  for (int i = 0; i < 5; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], want[i]);
  h_free(&h);
  const int64_t iv[] = {0, 7, -3, 1, 0}, wi[] = {0, 1, 1, 1, 0};
  h_init(&h, "Cast");
  h_i64(&h, "x", 1, s5, iv);
  h_ai(&h, "to", 9);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], wi[i]);
  h_free(&h);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF); /* the refusal tests log their errors */
  Suite *s = suite_create("ops_activation");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_registry);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_unary_kinks);
  tcase_add_test(tc, test_unary_refusals);
  tcase_add_test(tc, test_clip);
  tcase_add_test(tc, test_prelu);
  tcase_add_test(tc, test_maxmin);
  tcase_add_test(tc, test_mod);
  tcase_add_test(tc, test_mod_int64_and_refusals);
  tcase_add_test(tc, test_logic);
  tcase_add_test(tc, test_cast_bool);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
