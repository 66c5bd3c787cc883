/* test_layers.c - the CPU layer kernels of fl_layers.h.
 *
 * Each op's forward is compared with a direct double-precision
 * implementation, and its backward with central differences of the
 * objective sum(r * forward(...)) for a fixed random r (gradcheck.h), for
 * every input that has a gradient.  Bad arguments must give FL_EINVAL and
 * leave outputs alone. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_layers.h"
#include "gradcheck.h"

/* Tolerances for smooth ops (values O(1), step 1e-2). */
#define EPS 1e-2
#define ATOL 1e-3
#define RTOL 1e-3

static float *fbuf(size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  ck_assert_ptr_nonnull(p);
  return p;
}

static double dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
  return s;
}

static double act_ref(fl_act act, double v) {
  if (act == FL_ACT_RELU) return v > 0 ? v : 0;
  if (act == FL_ACT_TANH) return tanh(v);
  return v;
}

/* ------------------------------------------------------------ element-wise */

typedef struct act_ctx {
  fl_act act;
  float *x, *y, *r;
  size_t n;
} act_ctx;

static double act_obj(void *p) {
  act_ctx *c = p;
  ck_assert_int_eq(fl_act_forward(c->act, c->x, c->y, c->n), FL_OK);
  return dot(c->r, c->y, c->n);
}

START_TEST(act_forward_backward) {
  const fl_act acts[] = {FL_ACT_NONE, FL_ACT_RELU, FL_ACT_TANH};
  uint64_t s = 1;
  const size_t n = 37;
  for (size_t a = 0; a < 3; a++) {
    act_ctx c = {acts[a], fbuf(n), fbuf(n), fbuf(n), n};
    gc_fill_away(c.x, n, &s, 0.05, 2.0);
    gc_fill(c.r, n, &s, -1, 1);
    act_obj(&c);
    for (size_t i = 0; i < n; i++)
      ck_assert_float_eq_tol(c.y[i], act_ref(acts[a], c.x[i]), 1e-6);
    float *dx = fbuf(n);
    ck_assert_int_eq(fl_act_backward(acts[a], c.y, c.r, dx, n), FL_OK);
    gc_result r = gc_check(c.x, n, dx, act_obj, &c, 1e-3, ATOL, RTOL);
    GC_ASSERT(fl_act_name(acts[a]), r);
    /* in place: dx == dy */
    float *g = fbuf(n);
    memcpy(g, c.r, n * sizeof *g);
    ck_assert_int_eq(fl_act_backward(acts[a], c.y, g, g, n), FL_OK);
    ck_assert_mem_eq(g, dx, n * sizeof *g);
    memcpy(g, c.x, n * sizeof *g);
    ck_assert_int_eq(fl_act_forward(acts[a], g, g, n), FL_OK);
    ck_assert_mem_eq(g, c.y, n * sizeof *g);
    free(g), free(dx), free(c.x), free(c.y), free(c.r);
  }
  fl_act parsed;
  ck_assert_int_eq(fl_act_parse("tanh", &parsed), FL_OK);
  ck_assert_int_eq(parsed, FL_ACT_TANH);
  ck_assert_int_eq(fl_act_parse("relu", &parsed), FL_OK);
  ck_assert_int_eq(parsed, FL_ACT_RELU);
  ck_assert_int_eq(fl_act_parse("sigmoid", &parsed), FL_EINVAL);
  ck_assert_str_eq(fl_act_name(FL_ACT_RELU), "relu");
}
END_TEST

typedef struct bias_ctx {
  float *y0, *y, *b, *r;
  size_t B, C, S;
} bias_ctx;

static double bias_obj(void *p) {
  bias_ctx *c = p;
  memcpy(c->y, c->y0, c->B * c->C * c->S * sizeof *c->y);
  ck_assert_int_eq(fl_bias_forward(c->y, c->b, c->B, c->C, c->S), FL_OK);
  return dot(c->r, c->y, c->B * c->C * c->S);
}

START_TEST(bias_forward_backward) {
  const size_t inner[] = {1, 5};
  uint64_t s = 2;
  for (size_t k = 0; k < 2; k++) {
    bias_ctx c = {NULL, NULL, NULL, NULL, 3, 4, inner[k]};
    const size_t n = c.B * c.C * c.S;
    c.y0 = fbuf(n), c.y = fbuf(n), c.b = fbuf(c.C), c.r = fbuf(n);
    gc_fill(c.y0, n, &s, -1, 1);
    gc_fill(c.b, c.C, &s, -1, 1);
    gc_fill(c.r, n, &s, -1, 1);
    bias_obj(&c);
    for (size_t i = 0; i < n; i++)
      ck_assert_float_eq(c.y[i], c.y0[i] + c.b[(i / c.S) % c.C]);
    float *db = fbuf(c.C);
    ck_assert_int_eq(fl_bias_backward(c.r, db, c.B, c.C, c.S), FL_OK);
    gc_result r = gc_check(c.b, c.C, db, bias_obj, &c, EPS, ATOL, RTOL);
    GC_ASSERT("bias", r);
    free(db), free(c.y0), free(c.y), free(c.b), free(c.r);
  }
}
END_TEST

/* ------------------------------------------------------------------ linear */

typedef struct lin_ctx {
  float *x, *w, *b, *y, *r;
  size_t B, I, O;
  fl_act act;
} lin_ctx;

static double lin_obj(void *p) {
  lin_ctx *c = p;
  ck_assert_int_eq(fl_linear_forward(c->x, c->w, c->b, c->y, c->B, c->I, c->O, c->act), FL_OK);
  return dot(c->r, c->y, c->B * c->O);
}

static lin_ctx lin_make(size_t B, size_t I, size_t O, fl_act act, int bias, uint64_t *s) {
  lin_ctx c = {fbuf(B * I), fbuf(O * I), bias ? fbuf(O) : NULL, fbuf(B * O), fbuf(B * O),
               B, I, O, act};
  gc_fill(c.x, B * I, s, -1, 1);
  gc_fill(c.w, O * I, s, -1, 1);
  if (bias) gc_fill(c.b, O, s, -1, 1);
  gc_fill(c.r, B * O, s, -1, 1);
  return c;
}

static void lin_free(lin_ctx *c) { free(c->x), free(c->w), free(c->b), free(c->y), free(c->r); }

/* Analytic gradients of lin_obj: dx, dw, db. */
static void lin_grads(lin_ctx *c, float *dx, float *dw, float *db) {
  lin_obj(c);
  float *dy = fbuf(c->B * c->O);
  memcpy(dy, c->r, c->B * c->O * sizeof *dy);
  ck_assert_int_eq(fl_linear_backward(c->x, c->w, c->act == FL_ACT_NONE ? NULL : c->y, dy, dx,
                                      dw, db, c->B, c->I, c->O, c->act), FL_OK);
  free(dy);
}

START_TEST(linear_forward_matches_reference) {
  uint64_t s = 3;
  const fl_act acts[] = {FL_ACT_NONE, FL_ACT_RELU, FL_ACT_TANH};
  for (size_t a = 0; a < 3; a++)
    for (int bias = 0; bias < 2; bias++) {
      lin_ctx c = lin_make(5, 7, 6, acts[a], bias, &s);
      lin_obj(&c);
      for (size_t n = 0; n < c.B; n++)
        for (size_t o = 0; o < c.O; o++) {
          double v = bias ? c.b[o] : 0.0;
          for (size_t i = 0; i < c.I; i++) v += (double)c.x[n * c.I + i] * c.w[o * c.I + i];
          ck_assert_double_eq_tol(c.y[n * c.O + o], act_ref(acts[a], v), 1e-5);
        }
      lin_free(&c);
    }
}
END_TEST

START_TEST(linear_gradients) {
  uint64_t s = 4;
  const fl_act acts[] = {FL_ACT_NONE, FL_ACT_RELU, FL_ACT_TANH};
  for (size_t a = 0; a < 3; a++)
    for (int bias = 0; bias < 2; bias++) {
      lin_ctx c = lin_make(5, 7, 6, acts[a], bias, &s);
      float *dx = fbuf(c.B * c.I), *dw = fbuf(c.O * c.I), *db = fbuf(c.O);
      lin_grads(&c, dx, dw, db);
      gc_result rx, rw, rb = {.num_norm = 1};
      if (acts[a] == FL_ACT_RELU) { /* kinks where a pre-activation crosses 0 */
        rx = gc_check_kinked(c.x, c.B * c.I, dx, lin_obj, &c, EPS, ATOL, RTOL);
        rw = gc_check_kinked(c.w, c.O * c.I, dw, lin_obj, &c, EPS, ATOL, RTOL);
        if (bias) rb = gc_check_kinked(c.b, c.O, db, lin_obj, &c, EPS, ATOL, RTOL);
        ck_assert_uint_le(rx.skipped + rw.skipped + rb.skipped, 4);
      } else {
        rx = gc_check(c.x, c.B * c.I, dx, lin_obj, &c, EPS, ATOL, RTOL);
        rw = gc_check(c.w, c.O * c.I, dw, lin_obj, &c, EPS, ATOL, RTOL);
        if (bias) rb = gc_check(c.b, c.O, db, lin_obj, &c, EPS, ATOL, RTOL);
      }
      GC_ASSERT("linear dx", rx);
      GC_ASSERT("linear dw", rw);
      GC_ASSERT("linear db", rb);
      free(dx), free(dw), free(db);
      lin_free(&c);
    }
}
END_TEST

/* The check fails on a gradient that is 1% off: the tolerance bites. */
START_TEST(gradcheck_bites) {
  uint64_t s = 5;
  lin_ctx c = lin_make(5, 7, 6, FL_ACT_TANH, 1, &s);
  float *dx = fbuf(c.B * c.I), *dw = fbuf(c.O * c.I), *db = fbuf(c.O);
  lin_grads(&c, dx, dw, db);
  for (size_t i = 0; i < c.O * c.I; i++) dw[i] *= 1.01f;
  gc_result r = gc_check(c.w, c.O * c.I, dw, lin_obj, &c, EPS, ATOL, RTOL);
  ck_assert_msg(r.worst > 1.0, "a 1%% error passed (ratio %g)", r.worst);
  free(dx), free(dw), free(db);
  lin_free(&c);
}
END_TEST

START_TEST(linear_skips_null_outputs) {
  uint64_t s = 6;
  lin_ctx c = lin_make(4, 3, 5, FL_ACT_RELU, 1, &s);
  float *dx = fbuf(c.B * c.I), *dw = fbuf(c.O * c.I), *db = fbuf(c.O);
  lin_grads(&c, dx, dw, db);
  float *dw2 = fbuf(c.O * c.I), *dy = fbuf(c.B * c.O);
  memcpy(dy, c.r, c.B * c.O * sizeof *dy);
  ck_assert_int_eq(fl_linear_backward(c.x, c.w, c.y, dy, NULL, dw2, NULL, c.B, c.I, c.O,
                                      c.act), FL_OK);
  ck_assert_mem_eq(dw2, dw, c.O * c.I * sizeof *dw);
  free(dx), free(dw), free(db), free(dw2), free(dy);
  lin_free(&c);
}
END_TEST

/* ------------------------------------------------- softmax cross-entropy */

typedef struct xent_ctx {
  float *z;
  int32_t *lab;
  size_t B, C;
  float scale;
} xent_ctx;

static double xent_obj(void *p) {
  xent_ctx *c = p;
  double loss;
  ck_assert_int_eq(fl_softmax_xent(c->z, c->lab, c->B, c->C, 1.0f, NULL, &loss, NULL, NULL),
                   FL_OK);
  return c->scale * loss / (double)c->B;
}

START_TEST(softmax_xent_values_and_gradient) {
  uint64_t s = 7;
  xent_ctx c = {fbuf(6 * 9), malloc(6 * sizeof(int32_t)), 6, 9, 4.0f};
  gc_fill(c.z, c.B * c.C, &s, -3, 3);
  for (size_t n = 0; n < c.B; n++) c.lab[n] = (int32_t)((n * 5) % c.C);
  double loss;
  size_t c1, c5;
  float *g = fbuf(c.B * c.C);
  ck_assert_int_eq(fl_softmax_xent(c.z, c.lab, c.B, c.C, c.scale, g, &loss, &c1, &c5), FL_OK);
  /* reference loss and ranks */
  double ref = 0.0;
  size_t r1 = 0, r5 = 0;
  for (size_t n = 0; n < c.B; n++) {
    double se = 0.0;
    for (size_t j = 0; j < c.C; j++) se += exp(c.z[n * c.C + j]);
    ref += log(se) - c.z[n * c.C + c.lab[n]];
    size_t above = 0;
    for (size_t j = 0; j < c.C; j++) above += c.z[n * c.C + j] > c.z[n * c.C + c.lab[n]];
    r1 += above == 0;
    r5 += above < 5;
  }
  ck_assert_double_eq_tol(loss, ref, 1e-9 * c.B);
  ck_assert_uint_eq(c1, r1);
  ck_assert_uint_eq(c5, r5);
  gc_result r = gc_check(c.z, c.B * c.C, g, xent_obj, &c, EPS, ATOL, RTOL);
  GC_ASSERT("softmax_xent", r);
  /* in place */
  float *z2 = fbuf(c.B * c.C);
  memcpy(z2, c.z, c.B * c.C * sizeof *z2);
  ck_assert_int_eq(fl_softmax_xent(z2, c.lab, c.B, c.C, c.scale, z2, NULL, NULL, NULL), FL_OK);
  ck_assert_mem_eq(z2, g, c.B * c.C * sizeof *g);
  free(z2), free(g), free(c.z), free(c.lab);
}
END_TEST

START_TEST(softmax_xent_stable_and_topk) {
  /* Huge logits: no overflow, the loss of the right class is ~0. */
  float z[2 * 3] = {1e4f, -1e4f, 0.0f, 88.0f, 89.0f, 90.0f};
  int32_t lab[2] = {0, 2};
  float g[6];
  double loss;
  size_t c1, c5;
  ck_assert_int_eq(fl_softmax_xent(z, lab, 2, 3, 1.0f, g, &loss, &c1, &c5), FL_OK);
  ck_assert(isfinite(loss));
  ck_assert_double_eq_tol(loss, log(1 + exp(-1.0) + exp(-2.0)), 1e-6);
  for (int i = 0; i < 6; i++) ck_assert(isfinite(g[i]));
  ck_assert_uint_eq(c1, 2);
  /* Top-5 over 7 classes: label ranked 5th (4 larger) is in, 6th is out;
   * ties count the lower index first. */
  float t[2 * 7] = {5, 6, 7, 8, 1, 4.5f, 0, /* label 5: 4 larger -> rank 4 */
                    5, 6, 7, 8, 9, 4.5f, 0}; /* label 5: 5 larger -> rank 5 */
  int32_t tl[2] = {5, 5};
  ck_assert_int_eq(fl_softmax_xent(t, tl, 2, 7, 1.0f, NULL, NULL, &c1, &c5), FL_OK);
  ck_assert_uint_eq(c1, 0);
  ck_assert_uint_eq(c5, 1);
  float tie[3] = {2, 2, 2};
  int32_t l0 = 0, l2 = 2;
  ck_assert_int_eq(fl_softmax_xent(tie, &l0, 1, 3, 1.0f, NULL, NULL, &c1, NULL), FL_OK);
  ck_assert_uint_eq(c1, 1);
  ck_assert_int_eq(fl_softmax_xent(tie, &l2, 1, 3, 1.0f, NULL, NULL, &c1, NULL), FL_OK);
  ck_assert_uint_eq(c1, 0);
}
END_TEST

/* ------------------------------------------------------------------ conv2d */

typedef struct conv_ctx {
  fl_conv2d_desc d;
  float *x, *w, *b, *y, *r, *ws;
  fl_act act;
  size_t nx, nw, ny;
} conv_ctx;

static double conv_obj(void *p) {
  conv_ctx *c = p;
  ck_assert_int_eq(fl_conv2d_forward(&c->d, c->x, c->w, c->b, c->y, c->ws, c->act), FL_OK);
  return dot(c->r, c->y, c->ny);
}

static conv_ctx conv_make(fl_conv2d_desc d, fl_act act, int bias, uint64_t *s) {
  conv_ctx c = {.d = d, .act = act};
  ck_assert_int_eq(fl_conv2d_check(&d), FL_OK);
  c.nx = d.batch * d.in_c * d.in_h * d.in_w;
  c.nw = d.out_c * d.in_c * d.k_h * d.k_w;
  c.ny = d.batch * d.out_c * fl_conv2d_out_h(&d) * fl_conv2d_out_w(&d);
  c.x = fbuf(c.nx), c.w = fbuf(c.nw), c.b = bias ? fbuf(d.out_c) : NULL;
  c.y = fbuf(c.ny), c.r = fbuf(c.ny), c.ws = fbuf(fl_conv2d_workspace_floats(&d));
  gc_fill(c.x, c.nx, s, -1, 1);
  gc_fill(c.w, c.nw, s, -1, 1);
  if (bias) gc_fill(c.b, d.out_c, s, -1, 1);
  gc_fill(c.r, c.ny, s, -1, 1);
  return c;
}

static void conv_free(conv_ctx *c) {
  free(c->x), free(c->w), free(c->b), free(c->y), free(c->r), free(c->ws);
}

static const fl_conv2d_desc conv_cases[] = {
    /* batch, in_c, in_h, in_w, out_c, k_h, k_w, stride_h, stride_w, pad_h, pad_w */
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1}, /* 'same' */
    {2, 2, 8, 7, 3, 3, 3, 2, 2, 0, 0}, /* stride 2, no padding */
    {1, 2, 6, 5, 3, 2, 3, 2, 1, 1, 2}, /* rectangular kernel, mixed stride/pad */
    {2, 4, 3, 5, 3, 1, 1, 1, 1, 0, 0}, /* pointwise (no im2col) */
    {2, 1, 5, 5, 2, 5, 5, 1, 1, 2, 2}, /* the model's 5x5 'same' on one channel */
};

START_TEST(conv2d_forward_matches_reference) {
  uint64_t s = 8;
  for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
    conv_ctx c = conv_make(conv_cases[k], k % 2 ? FL_ACT_RELU : FL_ACT_NONE, 1, &s);
    const fl_conv2d_desc *d = &c.d;
    conv_obj(&c);
    const size_t OH = fl_conv2d_out_h(d), OW = fl_conv2d_out_w(d);
    for (size_t n = 0; n < d->batch; n++)
      for (size_t o = 0; o < d->out_c; o++)
        for (size_t oh = 0; oh < OH; oh++)
          for (size_t ow = 0; ow < OW; ow++) {
            double v = c.b[o];
            for (size_t ci = 0; ci < d->in_c; ci++)
              for (size_t i = 0; i < d->k_h; i++)
                for (size_t j = 0; j < d->k_w; j++) {
                  long ih = (long)(oh * d->stride_h + i) - (long)d->pad_h;
                  long iw = (long)(ow * d->stride_w + j) - (long)d->pad_w;
                  if (ih < 0 || iw < 0 || ih >= (long)d->in_h || iw >= (long)d->in_w) continue;
                  v += (double)c.x[((n * d->in_c + ci) * d->in_h + ih) * d->in_w + iw] *
                       c.w[((o * d->in_c + ci) * d->k_h + i) * d->k_w + j];
                }
            ck_assert_double_eq_tol(c.y[((n * d->out_c + o) * OH + oh) * OW + ow],
                                    act_ref(c.act, v), 1e-5);
          }
    conv_free(&c);
  }
}
END_TEST

START_TEST(conv2d_gradients) {
  uint64_t s = 9;
  for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
    const fl_act act = k == 2 ? FL_ACT_TANH : FL_ACT_NONE;
    conv_ctx c = conv_make(conv_cases[k], act, 1, &s);
    conv_obj(&c);
    float *dy = fbuf(c.ny), *dx = fbuf(c.nx), *dw = fbuf(c.nw), *db = fbuf(c.d.out_c);
    memcpy(dy, c.r, c.ny * sizeof *dy);
    ck_assert_int_eq(fl_conv2d_backward(&c.d, c.x, c.w, c.y, dy, dx, dw, db, c.ws, act), FL_OK);
    gc_result rx = gc_check(c.x, c.nx, dx, conv_obj, &c, EPS, ATOL, RTOL);
    gc_result rw = gc_check(c.w, c.nw, dw, conv_obj, &c, EPS, ATOL, RTOL);
    gc_result rb = gc_check(c.b, c.d.out_c, db, conv_obj, &c, EPS, ATOL, RTOL);
    GC_ASSERT("conv2d dx", rx);
    GC_ASSERT("conv2d dw", rw);
    GC_ASSERT("conv2d db", rb);
    /* dx, dw, db may each be skipped; the rest is unchanged */
    float *dw2 = fbuf(c.nw);
    memcpy(dy, c.r, c.ny * sizeof *dy);
    ck_assert_int_eq(fl_conv2d_backward(&c.d, c.x, c.w, c.y, dy, NULL, dw2, NULL, c.ws, act),
                     FL_OK);
    ck_assert_mem_eq(dw2, dw, c.nw * sizeof *dw);
    free(dw2), free(dy), free(dx), free(dw), free(db);
    conv_free(&c);
  }
}
END_TEST

START_TEST(conv2d_relu_fused_gradients) {
  uint64_t s = 10;
  conv_ctx c = conv_make(conv_cases[0], FL_ACT_RELU, 1, &s);
  conv_obj(&c);
  float *dy = fbuf(c.ny), *dx = fbuf(c.nx), *dw = fbuf(c.nw), *db = fbuf(c.d.out_c);
  memcpy(dy, c.r, c.ny * sizeof *dy);
  ck_assert_int_eq(fl_conv2d_backward(&c.d, c.x, c.w, c.y, dy, dx, dw, db, c.ws, c.act), FL_OK);
  gc_result rx = gc_check_kinked(c.x, c.nx, dx, conv_obj, &c, EPS, ATOL, RTOL);
  gc_result rw = gc_check_kinked(c.w, c.nw, dw, conv_obj, &c, EPS, ATOL, RTOL);
  GC_ASSERT("conv2d+relu dx", rx);
  GC_ASSERT("conv2d+relu dw", rw);
  ck_assert_uint_le(rx.skipped, c.nx / 10);
  ck_assert_uint_le(rw.skipped, c.nw / 10);
  free(dy), free(dx), free(dw), free(db);
  conv_free(&c);
}
END_TEST

/* ---------------------------------------------------------------- max-pool */

typedef struct pool_ctx {
  fl_pool2d_desc d;
  float *x, *y, *r;
  int32_t *am;
  size_t nx, ny;
} pool_ctx;

static double pool_obj(void *p) {
  pool_ctx *c = p;
  ck_assert_int_eq(fl_maxpool2d_forward(&c->d, c->x, c->y, c->am), FL_OK);
  return dot(c->r, c->y, c->ny);
}

START_TEST(maxpool_forward_backward) {
  const fl_pool2d_desc cases[] = {
      {2, 3, 6, 7, 2, 2, 2, 2}, /* the model's 2x2/2, odd width (last column dropped) */
      {1, 2, 7, 7, 3, 3, 2, 2}, /* overlapping windows */
      {2, 1, 5, 6, 2, 3, 1, 3}, /* rectangular */
      {1, 2, 6, 9, 4, 5, 1, 2}, /* a window of 20 (beyond the precomputed 16) */
  };
  uint64_t s = 11;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    pool_ctx c = {.d = cases[k]};
    ck_assert_int_eq(fl_pool2d_check(&c.d), FL_OK);
    const size_t OH = fl_pool2d_out_h(&c.d), OW = fl_pool2d_out_w(&c.d);
    c.nx = c.d.batch * c.d.channels * c.d.in_h * c.d.in_w;
    c.ny = c.d.batch * c.d.channels * OH * OW;
    c.x = fbuf(c.nx), c.y = fbuf(c.ny), c.r = fbuf(c.ny);
    c.am = malloc(c.ny * sizeof *c.am);
    /* distinct values 0.1 apart in random order: no ties within a step */
    for (size_t i = 0; i < c.nx; i++) c.x[i] = 0.1f * (float)i;
    for (size_t i = c.nx - 1; i > 0; i--) {
      size_t j = (size_t)gc_uniform(&s, 0, (double)(i + 1));
      float t = c.x[i];
      c.x[i] = c.x[j], c.x[j] = t;
    }
    gc_fill(c.r, c.ny, &s, -1, 1);
    pool_obj(&c);
    for (size_t p = 0; p < c.d.batch * c.d.channels; p++)
      for (size_t oh = 0; oh < OH; oh++)
        for (size_t ow = 0; ow < OW; ow++) {
          float m = -INFINITY;
          for (size_t i = 0; i < c.d.k_h; i++)
            for (size_t j = 0; j < c.d.k_w; j++)
              m = fmaxf(m, c.x[p * c.d.in_h * c.d.in_w +
                               (oh * c.d.stride_h + i) * c.d.in_w + ow * c.d.stride_w + j]);
          const size_t o = (p * OH + oh) * OW + ow;
          ck_assert_float_eq(c.y[o], m);
          ck_assert_float_eq(c.x[p * c.d.in_h * c.d.in_w + (size_t)c.am[o]], m);
        }
    float *dx = fbuf(c.nx);
    ck_assert_int_eq(fl_maxpool2d_backward(&c.d, c.r, c.am, dx), FL_OK);
    gc_result r = gc_check(c.x, c.nx, dx, pool_obj, &c, 1e-2, ATOL, RTOL);
    GC_ASSERT("maxpool", r);
    /* inference: no argmax, same values */
    float *y2 = fbuf(c.ny);
    ck_assert_int_eq(fl_maxpool2d_forward(&c.d, c.x, y2, NULL), FL_OK);
    ck_assert_mem_eq(y2, c.y, c.ny * sizeof *y2);
    free(y2), free(dx), free(c.x), free(c.y), free(c.r), free(c.am);
  }
}
END_TEST

START_TEST(maxpool_nan_and_ties) {
  fl_pool2d_desc d = {1, 1, 2, 4, 2, 2, 2, 2};
  float x[8] = {1, 3, NAN, 0, 3, 2, 5, 5};
  float y[2];
  int32_t am[2];
  ck_assert_int_eq(fl_maxpool2d_forward(&d, x, y, am), FL_OK);
  ck_assert_float_eq(y[0], 3.0f);
  ck_assert_int_eq(am[0], 1); /* first maximum in window order */
  ck_assert(isnan(y[1]));
  ck_assert_int_eq(am[1], 2);
}
END_TEST

/* ------------------------------------------------------------ normalisation */

typedef struct norm_ctx {
  fl_norm_desc d;
  int gn;
  float *x, *y, *g, *b, *r, *sm, *si, *rm, *rv;
  fl_act act;
  size_t n;
} norm_ctx;

static double norm_obj(void *p) {
  norm_ctx *c = p;
  if (c->gn)
    ck_assert_int_eq(fl_groupnorm_forward(&c->d, c->x, c->y, c->g, c->b, c->sm, c->si, c->act),
                     FL_OK);
  else
    ck_assert_int_eq(fl_batchnorm_forward_train(&c->d, c->x, c->y, c->g, c->b, NULL, NULL, c->sm,
                                                c->si, c->act), FL_OK);
  return dot(c->r, c->y, c->n);
}

static norm_ctx norm_make(int gn, fl_act act, uint64_t *s) {
  norm_ctx c = {.d = {.batch = 3, .channels = 4, .inner = 5, .groups = 2, .eps = 1e-5f,
                      .momentum = 0.1f},
                .gn = gn, .act = act};
  c.n = c.d.batch * c.d.channels * c.d.inner;
  const size_t ns = gn ? c.d.batch * c.d.groups : c.d.channels;
  c.x = fbuf(c.n), c.y = fbuf(c.n), c.r = fbuf(c.n);
  c.g = fbuf(c.d.channels), c.b = fbuf(c.d.channels);
  c.sm = fbuf(ns), c.si = fbuf(ns), c.rm = fbuf(c.d.channels), c.rv = fbuf(c.d.channels);
  gc_fill(c.x, c.n, s, -2, 2);
  gc_fill(c.g, c.d.channels, s, 0.5, 1.5);
  gc_fill(c.b, c.d.channels, s, -0.5, 0.5);
  gc_fill(c.r, c.n, s, -1, 1);
  return c;
}

static void norm_free(norm_ctx *c) {
  free(c->x), free(c->y), free(c->r), free(c->g), free(c->b);
  free(c->sm), free(c->si), free(c->rm), free(c->rv);
}

static void norm_grads(norm_ctx *c, float *dx, float *dg, float *db) {
  norm_obj(c);
  float *dy = fbuf(c->n);
  memcpy(dy, c->r, c->n * sizeof *dy);
  if (c->gn)
    ck_assert_int_eq(fl_groupnorm_backward(&c->d, c->x, c->y, dy, c->g, c->sm, c->si, dx, dg, db,
                                           c->act), FL_OK);
  else
    ck_assert_int_eq(fl_batchnorm_backward(&c->d, c->x, c->y, dy, c->g, c->sm, c->si, dx, dg, db,
                                           c->act), FL_OK);
  free(dy);
}

START_TEST(norm_forward_statistics) {
  uint64_t s = 12;
  for (int gn = 0; gn < 2; gn++) {
    norm_ctx c = norm_make(gn, FL_ACT_NONE, &s);
    norm_obj(&c);
    const size_t C = c.d.channels, S = c.d.inner, N = c.d.batch, cg = C / c.d.groups;
    /* y = gamma * (x - mean) / sqrt(var + eps) + beta over the right sets */
    for (size_t n = 0; n < N; n++)
      for (size_t ch = 0; ch < C; ch++)
        for (size_t i = 0; i < S; i++) {
          double mu = 0, var = 0, m = 0;
          for (size_t n2 = 0; n2 < N; n2++)
            for (size_t c2 = 0; c2 < C; c2++)
              for (size_t i2 = 0; i2 < S; i2++) {
                const int same = gn ? (n2 == n && c2 / cg == ch / cg) : c2 == ch;
                if (same) mu += c.x[(n2 * C + c2) * S + i2], m++;
              }
          mu /= m;
          for (size_t n2 = 0; n2 < N; n2++)
            for (size_t c2 = 0; c2 < C; c2++)
              for (size_t i2 = 0; i2 < S; i2++) {
                const int same = gn ? (n2 == n && c2 / cg == ch / cg) : c2 == ch;
                if (same) var += pow(c.x[(n2 * C + c2) * S + i2] - mu, 2);
              }
          var /= m;
          const double want = c.g[ch] * (c.x[(n * C + ch) * S + i] - mu) / sqrt(var + 1e-5) +
                              c.b[ch];
          ck_assert_double_eq_tol(c.y[(n * C + ch) * S + i], want, 1e-5);
        }
    norm_free(&c);
  }
}
END_TEST

START_TEST(norm_gradients) {
  uint64_t s = 13;
  const fl_act acts[] = {FL_ACT_NONE, FL_ACT_TANH, FL_ACT_RELU};
  for (int gn = 0; gn < 2; gn++)
    for (size_t a = 0; a < 3; a++) {
      norm_ctx c = norm_make(gn, acts[a], &s);
      float *dx = fbuf(c.n), *dg = fbuf(c.d.channels), *db = fbuf(c.d.channels);
      norm_grads(&c, dx, dg, db);
      gc_result rx, rg, rb;
      if (acts[a] == FL_ACT_RELU) {
        rx = gc_check_kinked(c.x, c.n, dx, norm_obj, &c, EPS, ATOL, RTOL);
        rg = gc_check_kinked(c.g, c.d.channels, dg, norm_obj, &c, EPS, ATOL, RTOL);
        rb = gc_check_kinked(c.b, c.d.channels, db, norm_obj, &c, EPS, ATOL, RTOL);
        ck_assert_uint_le(rx.skipped + rg.skipped + rb.skipped, c.n / 10);
      } else {
        rx = gc_check(c.x, c.n, dx, norm_obj, &c, EPS, ATOL, RTOL);
        rg = gc_check(c.g, c.d.channels, dg, norm_obj, &c, EPS, ATOL, RTOL);
        rb = gc_check(c.b, c.d.channels, db, norm_obj, &c, EPS, ATOL, RTOL);
      }
      GC_ASSERT(gn ? "groupnorm dx" : "batchnorm dx", rx);
      GC_ASSERT(gn ? "groupnorm dgamma" : "batchnorm dgamma", rg);
      GC_ASSERT(gn ? "groupnorm dbeta" : "batchnorm dbeta", rb);
      /* in place (dx == dy) gives the same bits */
      float *g = fbuf(c.n);
      memcpy(g, c.r, c.n * sizeof *g);
      if (gn)
        ck_assert_int_eq(fl_groupnorm_backward(&c.d, c.x, c.y, g, c.g, c.sm, c.si, g, NULL, NULL,
                                               c.act), FL_OK);
      else
        ck_assert_int_eq(fl_batchnorm_backward(&c.d, c.x, c.y, g, c.g, c.sm, c.si, g, NULL, NULL,
                                               c.act), FL_OK);
      ck_assert_mem_eq(g, dx, c.n * sizeof *g);
      free(g), free(dx), free(dg), free(db);
      norm_free(&c);
    }
}
END_TEST

START_TEST(batchnorm_running_stats_and_eval) {
  uint64_t s = 14;
  norm_ctx c = norm_make(0, FL_ACT_NONE, &s);
  const size_t C = c.d.channels, S = c.d.inner, N = c.d.batch;
  for (size_t ch = 0; ch < C; ch++) c.rm[ch] = 0.5f, c.rv[ch] = 2.0f;
  ck_assert_int_eq(fl_batchnorm_forward_train(&c.d, c.x, c.y, c.g, c.b, c.rm, c.rv, c.sm, c.si,
                                              FL_ACT_NONE), FL_OK);
  for (size_t ch = 0; ch < C; ch++) {
    double mu = 0, var = 0;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < S; i++) mu += c.x[(n * C + ch) * S + i];
    mu /= N * S;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < S; i++) var += pow(c.x[(n * C + ch) * S + i] - mu, 2);
    const double unbiased = var / (N * S - 1);
    ck_assert_double_eq_tol(c.sm[ch], mu, 1e-6);
    ck_assert_double_eq_tol(c.si[ch], 1 / sqrt(var / (N * S) + 1e-5), 1e-5);
    ck_assert_double_eq_tol(c.rm[ch], 0.9 * 0.5 + 0.1 * mu, 1e-6);
    ck_assert_double_eq_tol(c.rv[ch], 0.9 * 2.0 + 0.1 * unbiased, 1e-6);
  }
  /* eval uses the running statistics, in place allowed */
  float *y = fbuf(c.n);
  memcpy(y, c.x, c.n * sizeof *y);
  ck_assert_int_eq(fl_batchnorm_forward_eval(&c.d, y, y, c.g, c.b, c.rm, c.rv, FL_ACT_RELU),
                   FL_OK);
  for (size_t i = 0; i < c.n; i++) {
    const size_t ch = (i / S) % C;
    const double want = c.g[ch] * (c.x[i] - c.rm[ch]) / sqrt(c.rv[ch] + 1e-5) + c.b[ch];
    ck_assert_double_eq_tol(y[i], want > 0 ? want : 0, 1e-5);
  }
  /* NULL running stats: not updated (recompute) */
  float rm0 = c.rm[0];
  ck_assert_int_eq(fl_batchnorm_forward_train(&c.d, c.x, c.y, c.g, c.b, NULL, NULL, c.sm, c.si,
                                              FL_ACT_NONE), FL_OK);
  ck_assert_float_eq(c.rm[0], rm0);
  free(y);
  norm_free(&c);
}
END_TEST

/* ----------------------------------------------------------- bad arguments */

START_TEST(bad_arguments) {
  float a[64] = {0}, b[64] = {0}, c[64] = {0}, d[64] = {0};
  int32_t lab[4] = {0, 1, 2, 3};
  fl_act bad_act = (fl_act)7;
  /* element-wise */
  ck_assert_int_eq(fl_act_forward(FL_ACT_RELU, NULL, a, 4), FL_EINVAL);
  ck_assert_int_eq(fl_act_forward(FL_ACT_RELU, a, b, 0), FL_EINVAL);
  ck_assert_int_eq(fl_act_forward(bad_act, a, b, 4), FL_EINVAL);
  ck_assert_int_eq(fl_act_backward(FL_ACT_TANH, NULL, a, b, 4), FL_EINVAL);
  ck_assert_int_eq(fl_act_parse("relu", NULL), FL_EINVAL);
  ck_assert_int_eq(fl_bias_forward(a, NULL, 1, 4, 1), FL_EINVAL);
  ck_assert_int_eq(fl_bias_backward(a, b, 0, 4, 1), FL_EINVAL);
  /* linear */
  ck_assert_int_eq(fl_linear_forward(NULL, a, b, c, 2, 3, 4, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward(a, NULL, b, c, 2, 3, 4, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward(a, b, NULL, NULL, 2, 3, 4, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward(a, b, c, d, 0, 3, 4, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward(a, b, c, d, 2, 0, 4, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward(a, b, c, d, 2, 3, 0, bad_act), FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward(a, b, c, d, (size_t)1 << 40, 3, 4, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_linear_backward(a, b, NULL, c, d, d, d, 2, 3, 4, FL_ACT_RELU), FL_EINVAL);
  ck_assert_int_eq(fl_linear_backward(a, b, c, NULL, d, d, d, 2, 3, 4, FL_ACT_NONE), FL_EINVAL);
  /* softmax cross-entropy: labels out of range, nothing written */
  float z[8] = {1, 2, 3, 4, 5, 6, 7, 8}, g[8] = {42, 42, 42, 42, 42, 42, 42, 42};
  int32_t badlab[2] = {1, 4}, neglab[2] = {-1, 0};
  double loss = 42;
  ck_assert_int_eq(fl_softmax_xent(z, badlab, 2, 4, 1.0f, g, &loss, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_softmax_xent(z, neglab, 2, 4, 1.0f, g, &loss, NULL, NULL), FL_EINVAL);
  ck_assert_float_eq(g[0], 42.0f);
  ck_assert_double_eq(loss, 42.0);
  ck_assert_int_eq(fl_softmax_xent(NULL, lab, 2, 4, 1.0f, g, &loss, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_softmax_xent(z, NULL, 2, 4, 1.0f, g, &loss, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_softmax_xent(z, lab, 0, 4, 1.0f, g, &loss, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_softmax_xent(z, lab, 2, 0, 1.0f, g, &loss, NULL, NULL), FL_EINVAL);
  /* conv2d: geometry */
  fl_conv2d_desc cd = {1, 1, 4, 4, 2, 3, 3, 1, 1, 0, 0};
  ck_assert_int_eq(fl_conv2d_check(&cd), FL_OK);
  fl_conv2d_desc big = cd;
  big.k_h = 5; /* kernel larger than the padded input */
  ck_assert_int_eq(fl_conv2d_check(&big), FL_EINVAL);
  ck_assert_uint_eq(fl_conv2d_out_h(&big), 0);
  ck_assert_uint_eq(fl_conv2d_workspace_floats(&big), 0);
  ck_assert_int_eq(fl_conv2d_forward(&big, a, b, NULL, c, d, FL_ACT_NONE), FL_EINVAL);
  fl_conv2d_desc zs = cd;
  zs.stride_w = 0;
  ck_assert_int_eq(fl_conv2d_check(&zs), FL_EINVAL);
  ck_assert_int_eq(fl_conv2d_check(NULL), FL_EINVAL);
  ck_assert_int_eq(fl_conv2d_forward(&cd, a, b, NULL, c, NULL, FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_conv2d_backward(&cd, a, b, NULL, c, d, NULL, NULL, NULL, FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_conv2d_backward(&cd, a, b, NULL, c, d, d, d, d, FL_ACT_RELU), FL_EINVAL);
  /* pool */
  fl_pool2d_desc pd = {1, 1, 4, 4, 2, 2, 2, 2};
  fl_pool2d_desc pbig = pd;
  pbig.k_w = 5;
  ck_assert_int_eq(fl_pool2d_check(&pbig), FL_EINVAL);
  ck_assert_int_eq(fl_maxpool2d_forward(&pbig, a, b, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_maxpool2d_forward(&pd, NULL, b, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_maxpool2d_backward(&pd, a, NULL, b), FL_EINVAL);
  int32_t am[4] = {0, 2, 16, 10}; /* 16 is outside the 4x4 plane */
  c[0] = 42;
  ck_assert_int_eq(fl_maxpool2d_backward(&pd, a, am, c), FL_EINVAL);
  ck_assert_float_eq(c[0], 42.0f);
  /* norms */
  fl_norm_desc nd = {.batch = 2, .channels = 4, .inner = 3, .groups = 3, .eps = 1e-5f,
                     .momentum = 0.1f};
  ck_assert_int_eq(fl_groupnorm_forward(&nd, a, b, NULL, NULL, c, d, FL_ACT_NONE), FL_EINVAL);
  nd.groups = 2;
  ck_assert_int_eq(fl_groupnorm_forward(&nd, a, b, NULL, NULL, c, d, FL_ACT_NONE), FL_OK);
  ck_assert_int_eq(fl_groupnorm_forward(&nd, a, b, NULL, NULL, NULL, d, FL_ACT_NONE), FL_EINVAL);
  fl_norm_desc one = {.batch = 1, .channels = 4, .inner = 1, .eps = 1e-5f, .momentum = 0.1f};
  ck_assert_int_eq(fl_batchnorm_forward_train(&one, a, b, NULL, NULL, NULL, NULL, c, d,
                                              FL_ACT_NONE), FL_EINVAL);
  fl_norm_desc neg = nd;
  neg.eps = 0.0f;
  ck_assert_int_eq(fl_batchnorm_forward_train(&neg, a, b, NULL, NULL, NULL, NULL, c, d,
                                              FL_ACT_NONE), FL_EINVAL);
  neg = nd;
  neg.momentum = 1.5f;
  ck_assert_int_eq(fl_batchnorm_forward_train(&neg, a, b, NULL, NULL, NULL, NULL, c, d,
                                              FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_forward_train(&nd, a, b, NULL, NULL, c, NULL, c, d,
                                              FL_ACT_NONE), FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_forward_eval(&nd, a, b, NULL, NULL, NULL, c, FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_backward(&nd, a, NULL, b, NULL, c, d, a, NULL, NULL,
                                         FL_ACT_RELU), FL_EINVAL);
  ck_assert_int_eq(fl_groupnorm_backward(NULL, a, NULL, b, NULL, c, d, a, NULL, NULL,
                                         FL_ACT_NONE), FL_EINVAL);
}
END_TEST

static Suite *layers_suite(void) {
  Suite *s = suite_create("layers");
  TCase *t = tcase_create("core");
  tcase_add_test(t, act_forward_backward);
  tcase_add_test(t, bias_forward_backward);
  tcase_add_test(t, linear_forward_matches_reference);
  tcase_add_test(t, linear_gradients);
  tcase_add_test(t, gradcheck_bites);
  tcase_add_test(t, linear_skips_null_outputs);
  tcase_add_test(t, softmax_xent_values_and_gradient);
  tcase_add_test(t, softmax_xent_stable_and_topk);
  tcase_add_test(t, conv2d_forward_matches_reference);
  tcase_add_test(t, conv2d_gradients);
  tcase_add_test(t, conv2d_relu_fused_gradients);
  tcase_add_test(t, maxpool_forward_backward);
  tcase_add_test(t, maxpool_nan_and_ties);
  tcase_add_test(t, norm_forward_statistics);
  tcase_add_test(t, norm_gradients);
  tcase_add_test(t, batchnorm_running_stats_and_eval);
  tcase_add_test(t, bad_arguments);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(layers_suite());
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
