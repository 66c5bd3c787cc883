/* test_cuda_layers.c - the CUDA twins of fl_layers.h against their CPU twins.
 *
 * Each op runs on the same random inputs on the CPU and on the device, and
 * every output (gradients, saved statistics, running statistics, losses,
 * counts, argmax) is compared.  Tolerances, as errors relative to the
 * largest magnitude of the CPU's output tensor:
 *  - element-wise ops (activations, bias add, normalise-and-affine passes,
 *    max-pool) 1e-6 (they are the same float operations; tanhf may differ
 *    in its last ulp);
 *  - results of sums (GEMMs, convolutions, bias and norm gradients, norm
 *    statistics) 1e-5: cuBLAS, cuDNN and the device reductions add in a
 *    different order than OpenBLAS and the CPU loops;
 *  - max-pool and the top-1/top-5 counts must be exact.
 * FP16/BF16 linear and conv are checked against the CPU op on inputs
 * rounded to 16 bits by the CPU casts (fp32 accumulation both sides).
 *
 * Without a CUDA device (or in a --without-cuda tree) the program exits 77
 * (SKIP).  Check runs in-process (CK_NOFORK): CUDA does not survive fork. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_device.h"
#include "fl_layers.h"
#include "fl_optim.h"

#include "cuda_testutil.h"

#define TOL_ELEM 1e-6
#define TOL_SUM 1e-5

static uint64_t rng_state;

static float urand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static float *host_rand(size_t n, float scale) {
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < n; i++) h[i] = scale * urand();
  return h;
}

static float *host_copy(const float *a, size_t n) {
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  memcpy(h, a, n * sizeof(float));
  return h;
}


/* Compare the CPU's a[n] with device d[n]: the largest |a - d| relative to
 * the largest |a| must be <= tol.  Nan must match nan. */
static void expect_close(const char *what, const float *a, const float *d, size_t n, double tol) {
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(fl_cuda_copy_to_host(h, d, n * sizeof(float), NULL), FL_OK);
  double scale = 0.0, worst = 0.0;
  size_t at = 0;
  int nan_mismatch = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(a[i])) scale = fmax(scale, fabs((double)a[i]));
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isnan(h[i])) {
      nan_mismatch |= !(isnan(a[i]) && isnan(h[i]));
      continue;
    }
    double e = fabs((double)a[i] - (double)h[i]);
    if (e > worst) worst = e, at = i;
  }
  free(h);
  ck_assert_msg(!nan_mismatch, "%s: nan in one result only", what);
  double rel = scale > 0.0 ? worst / scale : worst;
  ck_assert_msg(rel <= tol, "%s: error %g (relative to max %g) at %zu exceeds %g", what, rel,
                scale, at, tol);
}

static void dev_free(void *d) { ck_assert_int_eq(fl_cuda_free(d), FL_OK); }

/* Round to fp16 (math 1) or bf16 (math 2) and back, on the CPU. */
static void round16(float *a, size_t n, fl_math math) {
  if (math == FL_MATH_FP32) return;
  uint16_t *t = malloc(n * sizeof(uint16_t));
  ck_assert_ptr_nonnull(t);
  if (math == FL_MATH_FP16) {
    ck_assert_int_eq(fl_cast_f32_to_f16(a, t, n), FL_OK);
    ck_assert_int_eq(fl_cast_f16_to_f32(t, a, n), FL_OK);
  } else {
    ck_assert_int_eq(fl_cast_f32_to_bf16(a, t, n), FL_OK);
    ck_assert_int_eq(fl_cast_bf16_to_f32(t, a, n), FL_OK);
  }
  free(t);
}

/* ------------------------------------------------------------ element-wise */

START_TEST(activations) {
  const size_t n = 100003;
  rng_state = 11 + (uint64_t)_i;
  fl_act act = (fl_act)_i;
  float *x = host_rand(n, 3.0f), *dy = host_rand(n, 1.0f);
  x[0] = 0.0f;
  x[1] = NAN;
  float *y = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
  float *x_ = dev_floats(x, n), *dy_ = dev_floats(dy, n), *y_ = dev_alloc(n * sizeof(float));
  float *dx_ = dev_alloc(n * sizeof(float));
  ck_assert_int_eq(fl_act_forward(act, x, y, n), FL_OK);
  ck_assert_int_eq(fl_act_forward_cuda(act, x_, y_, n, NULL), FL_OK);
  expect_close("act forward", y, y_, n, TOL_ELEM);
  ck_assert_int_eq(fl_act_backward(act, y, dy, dx, n), FL_OK);
  ck_assert_int_eq(fl_act_backward_cuda(act, y_, dy_, dx_, n, NULL), FL_OK);
  expect_close("act backward", dx, dx_, n, TOL_ELEM);
  /* In place. */
  ck_assert_int_eq(fl_act_forward_cuda(act, x_, x_, n, NULL), FL_OK);
  expect_close("act forward in place", y, x_, n, TOL_ELEM);
  ck_assert_int_eq(fl_act_backward_cuda(act, y_, dy_, dy_, n, NULL), FL_OK);
  expect_close("act backward in place", dx, dy_, n, TOL_ELEM);
  ck_assert_int_eq(fl_act_forward_cuda((fl_act)7, x_, y_, n, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_act_forward_cuda(act, x_, y_, 0, NULL), FL_EINVAL);
  if (act != FL_ACT_NONE)
    ck_assert_int_eq(fl_act_backward_cuda(act, NULL, dy_, dx_, n, NULL), FL_EINVAL);
  free(x), free(dy), free(y), free(dx);
  dev_free(x_), dev_free(dy_), dev_free(y_), dev_free(dx_);
}
END_TEST

START_TEST(bias) {
  const size_t N = 7, C = 13, S = _i ? 49 : 1, n = N * C * S;
  rng_state = 21;
  float *y = host_rand(n, 1.0f), *b = host_rand(C, 1.0f), *db = malloc(C * sizeof(float));
  float *y_ = dev_floats(y, n), *b_ = dev_floats(b, C), *db_ = dev_alloc(C * sizeof(float));
  ck_assert_int_eq(fl_bias_forward(y, b, N, C, S), FL_OK);
  ck_assert_int_eq(fl_bias_forward_cuda(y_, b_, N, C, S, NULL), FL_OK);
  expect_close("bias forward", y, y_, n, TOL_ELEM);
  ck_assert_int_eq(fl_bias_backward(y, db, N, C, S), FL_OK);
  ck_assert_int_eq(fl_bias_backward_cuda(y_, db_, N, C, S, NULL), FL_OK);
  expect_close("bias backward", db, db_, C, TOL_SUM);
  ck_assert_int_eq(fl_bias_forward_cuda(y_, NULL, N, C, S, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_bias_backward_cuda(y_, db_, N, 0, S, NULL), FL_EINVAL);
  free(y), free(b), free(db);
  dev_free(y_), dev_free(b_), dev_free(db_);
}
END_TEST

/* ------------------------------------------------------------------ linear */

/* _i = math * 3 + act. */
START_TEST(linear) {
  const fl_math math = (fl_math)(_i / 3);
  const fl_act act = (fl_act)(_i % 3);
  const size_t B = 33, IN = 300, OUT = 70;
  rng_state = 31 + (uint64_t)_i;
  float *x = host_rand(B * IN, 1.0f), *w = host_rand(OUT * IN, 0.1f), *b = host_rand(OUT, 0.5f);
  float *dy = host_rand(B * OUT, 1.0f);
  float *x_ = dev_floats(x, B * IN), *w_ = dev_floats(w, OUT * IN), *b_ = dev_floats(b, OUT);
  float *dy_ = dev_floats(dy, B * OUT), *y_ = dev_alloc(B * OUT * sizeof(float));
  float *dx_ = dev_alloc(B * IN * sizeof(float)), *dw_ = dev_alloc(OUT * IN * sizeof(float));
  float *db_ = dev_alloc(OUT * sizeof(float));
  /* The CPU reference computes on the 16-bit-rounded GEMM inputs. */
  float *xr = host_copy(x, B * IN), *wr = host_copy(w, OUT * IN);
  round16(xr, B * IN, math);
  round16(wr, OUT * IN, math);
  float *y = malloc(B * OUT * sizeof(float)), *dx = malloc(B * IN * sizeof(float));
  float *dw = malloc(OUT * IN * sizeof(float)), *db = malloc(OUT * sizeof(float));
  ck_assert_int_eq(fl_linear_forward(xr, wr, b, y, B, IN, OUT, act), FL_OK);
  ck_assert_int_eq(fl_linear_forward_cuda(x_, w_, b_, y_, B, IN, OUT, act, math, NULL), FL_OK);
  expect_close("linear forward", y, y_, B * OUT, TOL_SUM);
  /* Backward: dz = dy * act'(y) on both sides, then GEMMs on rounded dz. */
  float *yd = malloc(B * OUT * sizeof(float));
  ck_assert_int_eq(fl_cuda_copy_to_host(yd, y_, B * OUT * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_linear_backward_cuda(x_, w_, y_, dy_, dx_, dw_, db_, B, IN, OUT, act, math,
                                           NULL),
                   FL_OK);
  ck_assert_int_eq(fl_act_backward(act, yd, dy, dy, B * OUT), FL_OK); /* dy now dz */
  expect_close("linear dz (in dy)", dy, dy_, B * OUT, TOL_ELEM);
  ck_assert_int_eq(fl_bias_backward(dy, db, B, OUT, 1), FL_OK);
  round16(dy, B * OUT, math);
  ck_assert_int_eq(fl_linear_backward(xr, wr, NULL, dy, dx, dw, NULL, B, IN, OUT, FL_ACT_NONE),
                   FL_OK);
  expect_close("linear dx", dx, dx_, B * IN, TOL_SUM);
  expect_close("linear dw", dw, dw_, OUT * IN, TOL_SUM);
  expect_close("linear db", db, db_, OUT, TOL_SUM);
  ck_assert_int_eq(fl_linear_forward_cuda(x_, w_, b_, y_, B, IN, OUT, act, (fl_math)9, NULL),
                   FL_EINVAL);
  ck_assert_int_eq(fl_linear_forward_cuda(NULL, w_, b_, y_, B, IN, OUT, act, math, NULL),
                   FL_EINVAL);
  free(x), free(w), free(b), free(dy), free(xr), free(wr), free(y), free(yd), free(dx), free(dw),
      free(db);
  dev_free(x_), dev_free(w_), dev_free(b_), dev_free(dy_), dev_free(y_), dev_free(dx_),
      dev_free(dw_), dev_free(db_);
}
END_TEST

/* ------------------------------------------------- softmax cross-entropy */

START_TEST(softmax_xent) {
  const size_t B = 37, C = _i ? 1000 : 10;
  rng_state = 41 + (uint64_t)_i;
  float *z = host_rand(B * C, 4.0f), *g = malloc(B * C * sizeof(float));
  int32_t lab[37];
  for (size_t n = 0; n < B; n++) lab[n] = (int32_t)((n * 7) % C);
  z[3 * C + 1] = z[3 * C + 2]; /* a tie */
  lab[3] = 2;
  float *z_ = dev_floats(z, B * C), *g_ = dev_alloc(B * C * sizeof(float));
  int32_t *lab_ = dev_from(lab, sizeof lab);
  double loss, loss_;
  size_t c1, c5, c1_ = 99, c5_ = 99;
  ck_assert_int_eq(fl_softmax_xent(z, lab, B, C, 2.0f, g, &loss, &c1, &c5), FL_OK);
  ck_assert_int_eq(fl_softmax_xent_cuda(z_, lab_, B, C, 2.0f, g_, &loss_, &c1_, &c5_, NULL),
                   FL_OK);
  ck_assert_msg(fabs(loss - loss_) <= 1e-9 * fabs(loss), "loss %.17g vs %.17g", loss, loss_);
  ck_assert_uint_eq(c1, c1_);
  ck_assert_uint_eq(c5, c5_);
  expect_close("dlogits", g, g_, B * C, TOL_ELEM);
  /* In place, and without the host outputs. */
  ck_assert_int_eq(fl_softmax_xent_cuda(z_, lab_, B, C, 2.0f, z_, NULL, NULL, NULL, NULL), FL_OK);
  expect_close("dlogits in place", g, z_, B * C, TOL_ELEM);
  /* A bad label: FL_EINVAL, dlogits untouched. */
  lab[5] = (int32_t)C;
  ck_assert_int_eq(fl_cuda_copy_to_device(lab_, lab, sizeof lab, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(z_, z, B * C * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_softmax_xent_cuda(z_, lab_, B, C, 1.0f, z_, &loss_, NULL, NULL, NULL),
                   FL_EINVAL);
  expect_close("logits after a bad label", z, z_, B * C, 0.0);
  free(z), free(g);
  dev_free(z_), dev_free(g_), dev_free(lab_);
}
END_TEST

/* ------------------------------------------------------------------ conv2d */

static const fl_conv2d_desc conv_cases[] = {
    /* batch in_c in_h in_w out_c k_h k_w s_h s_w p_h p_w */
    {4, 3, 12, 11, 8, 3, 3, 1, 1, 1, 1},
    {3, 5, 13, 13, 6, 5, 5, 2, 2, 0, 0},
    {2, 6, 7, 9, 4, 1, 1, 1, 1, 0, 0},
    {2, 2, 9, 8, 3, 3, 2, 2, 1, 2, 1},
};

/* _i = case * 2 + (fp16 math). */
START_TEST(conv2d) {
  const fl_conv2d_desc *d = &conv_cases[_i / 2];
  const fl_math math = _i % 2 ? FL_MATH_FP16 : FL_MATH_FP32;
  const fl_act act = (_i / 2) % 2 ? FL_ACT_TANH : FL_ACT_RELU;
  const size_t oh = fl_conv2d_out_h(d), ow = fl_conv2d_out_w(d);
  const size_t nx = d->batch * d->in_c * d->in_h * d->in_w, nw = d->out_c * d->in_c * d->k_h * d->k_w;
  const size_t ny = d->batch * d->out_c * oh * ow;
  rng_state = 51 + (uint64_t)_i;
  float *x = host_rand(nx, 1.0f), *w = host_rand(nw, 0.3f), *b = host_rand(d->out_c, 0.2f);
  float *dy = host_rand(ny, 1.0f);
  float *x_ = dev_floats(x, nx), *w_ = dev_floats(w, nw), *b_ = dev_floats(b, d->out_c);
  float *dy_ = dev_floats(dy, ny), *y_ = dev_alloc(ny * sizeof(float));
  float *dx_ = dev_alloc(nx * sizeof(float)), *dw_ = dev_alloc(nw * sizeof(float));
  float *db_ = dev_alloc(d->out_c * sizeof(float));
  size_t wsb = 0;
  ck_assert_int_eq(fl_conv2d_workspace_bytes_cuda(d, &wsb), FL_OK);
  void *ws_ = wsb ? dev_alloc(wsb) : NULL;
  float *ws = malloc((fl_conv2d_workspace_floats(d) + 1) * sizeof(float));
  float *xr = host_copy(x, nx), *wr = host_copy(w, nw);
  round16(xr, nx, math);
  round16(wr, nw, math);
  float *y = malloc(ny * sizeof(float)), *yd = malloc(ny * sizeof(float));
  float *dx = malloc(nx * sizeof(float)), *dw = malloc(nw * sizeof(float));
  float *db = malloc(d->out_c * sizeof(float));
  ck_assert_int_eq(fl_conv2d_forward(d, xr, wr, b, y, ws, act), FL_OK);
  ck_assert_int_eq(fl_conv2d_forward_cuda(d, x_, w_, b_, y_, ws_, act, math, NULL), FL_OK);
  expect_close("conv forward", y, y_, ny, TOL_SUM);
  ck_assert_int_eq(fl_cuda_copy_to_host(yd, y_, ny * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(
      fl_conv2d_backward_cuda(d, x_, w_, y_, dy_, dx_, dw_, db_, ws_, act, math, NULL), FL_OK);
  ck_assert_int_eq(fl_act_backward(act, yd, dy, dy, ny), FL_OK);
  expect_close("conv dz (in dy)", dy, dy_, ny, TOL_ELEM);
  ck_assert_int_eq(fl_bias_backward(dy, db, d->batch, d->out_c, oh * ow), FL_OK);
  round16(dy, ny, math);
  ck_assert_int_eq(fl_conv2d_backward(d, xr, wr, NULL, dy, dx, dw, NULL, ws, FL_ACT_NONE), FL_OK);
  expect_close("conv dx", dx, dx_, nx, TOL_SUM);
  expect_close("conv dw", dw, dw_, nw, TOL_SUM);
  expect_close("conv db", db, db_, d->out_c, TOL_SUM);
  fl_conv2d_desc bad = *d;
  bad.k_h = d->in_h + 2 * d->pad_h + 1;
  ck_assert_int_eq(fl_conv2d_forward_cuda(&bad, x_, w_, b_, y_, ws_, act, math, NULL), FL_EINVAL);
  free(x), free(w), free(b), free(dy), free(ws), free(xr), free(wr), free(y), free(yd), free(dx),
      free(dw), free(db);
  dev_free(x_), dev_free(w_), dev_free(b_), dev_free(dy_), dev_free(y_), dev_free(dx_),
      dev_free(dw_), dev_free(db_), dev_free(ws_);
}
END_TEST

/* ---------------------------------------------------------------- max-pool */

static const fl_pool2d_desc pool_cases[] = {
    /* batch channels in_h in_w k_h k_w s_h s_w */
    {3, 4, 12, 12, 2, 2, 2, 2},
    {2, 3, 11, 10, 3, 3, 2, 2}, /* overlapping windows */
    {2, 2, 7, 9, 3, 2, 1, 3},
};

START_TEST(maxpool) {
  const fl_pool2d_desc *d = &pool_cases[_i];
  const size_t oh = fl_pool2d_out_h(d), ow = fl_pool2d_out_w(d);
  const size_t nx = d->batch * d->channels * d->in_h * d->in_w;
  const size_t ny = d->batch * d->channels * oh * ow;
  rng_state = 61 + (uint64_t)_i;
  float *x = host_rand(nx, 1.0f), *dy = host_rand(ny, 1.0f);
  for (size_t i = 0; i < nx; i += 5) x[i] = 0.25f; /* ties */
  x[17] = NAN;
  float *y = malloc(ny * sizeof(float)), *dx = malloc(nx * sizeof(float));
  int32_t *am = malloc(ny * sizeof(int32_t)), *am_h = malloc(ny * sizeof(int32_t));
  float *x_ = dev_floats(x, nx), *dy_ = dev_floats(dy, ny), *y_ = dev_alloc(ny * sizeof(float));
  float *dx_ = dev_alloc(nx * sizeof(float));
  int32_t *am_ = dev_alloc(ny * sizeof(int32_t));
  ck_assert_int_eq(fl_maxpool2d_forward(d, x, y, am), FL_OK);
  ck_assert_int_eq(fl_maxpool2d_forward_cuda(d, x_, y_, am_, NULL), FL_OK);
  expect_close("maxpool forward", y, y_, ny, 0.0);
  ck_assert_int_eq(fl_cuda_copy_to_host(am_h, am_, ny * sizeof(int32_t), NULL), FL_OK);
  ck_assert_int_eq(memcmp(am, am_h, ny * sizeof(int32_t)), 0);
  ck_assert_int_eq(fl_maxpool2d_forward_cuda(d, x_, y_, NULL, NULL), FL_OK);
  ck_assert_int_eq(fl_maxpool2d_backward(d, dy, am, dx), FL_OK);
  ck_assert_int_eq(fl_maxpool2d_backward_cuda(d, dy_, am_, dx_, NULL), FL_OK);
  expect_close("maxpool backward", dx, dx_, nx, 0.0);
  am_h[1] = -1;
  ck_assert_int_eq(fl_cuda_copy_to_device(am_, am_h, ny * sizeof(int32_t), NULL), FL_OK);
  ck_assert_int_eq(fl_maxpool2d_backward_cuda(d, dy_, am_, dx_, NULL), FL_EINVAL);
  expect_close("maxpool dx after a bad argmax", dx, dx_, nx, 0.0);
  free(x), free(dy), free(y), free(dx), free(am), free(am_h);
  dev_free(x_), dev_free(dy_), dev_free(y_), dev_free(dx_), dev_free(am_);
}
END_TEST

/* ------------------------------------------------------------ normalisation */

/* _i: 0 BN over an image tensor, 1 BN after a linear layer (inner 1),
 * 2 BN with NULL gamma/beta and no running stats. */
START_TEST(batchnorm) {
  const size_t N = 6, C = 5, S = _i == 1 ? 1 : 37, n = N * C * S;
  const fl_norm_desc d = {N, C, S, 0, 1e-5f, 0.1f};
  const fl_act act = _i == 0 ? FL_ACT_RELU : FL_ACT_NONE;
  rng_state = 71 + (uint64_t)_i;
  float *x = host_rand(n, 2.0f), *dy = host_rand(n, 1.0f);
  for (size_t i = 0; i < n; i++) x[i] += 0.5f;
  float *gm = _i == 2 ? NULL : host_rand(C, 1.0f), *bt = _i == 2 ? NULL : host_rand(C, 1.0f);
  float *rm = host_rand(C, 0.1f), *rv = host_rand(C, 0.1f);
  for (size_t c = 0; c < C; c++) rv[c] += 1.0f;
  float *x_ = dev_floats(x, n), *dy_ = dev_floats(dy, n);
  float *gm_ = gm ? dev_floats(gm, C) : NULL, *bt_ = bt ? dev_floats(bt, C) : NULL;
  float *rm_ = dev_floats(rm, C), *rv_ = dev_floats(rv, C);
  float *y = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
  float sm[5], si[5], dg[5], dbt[5];
  float *y_ = dev_alloc(n * sizeof(float)), *dx_ = dev_alloc(n * sizeof(float));
  float *sm_ = dev_alloc(C * sizeof(float)), *si_ = dev_alloc(C * sizeof(float));
  float *dg_ = dev_alloc(C * sizeof(float)), *dbt_ = dev_alloc(C * sizeof(float));
  float *rmp = _i == 2 ? NULL : rm, *rvp = _i == 2 ? NULL : rv;
  ck_assert_int_eq(fl_batchnorm_forward_train(&d, x, y, gm, bt, rmp, rvp, sm, si, act), FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_train_cuda(&d, x_, y_, gm_, bt_, _i == 2 ? NULL : rm_,
                                                   _i == 2 ? NULL : rv_, sm_, si_, act, NULL),
                   FL_OK);
  expect_close("bn y", y, y_, n, TOL_SUM);
  expect_close("bn save_mean", sm, sm_, C, TOL_SUM);
  expect_close("bn save_invstd", si, si_, C, TOL_SUM);
  expect_close("bn running_mean", rm, rm_, C, TOL_SUM);
  expect_close("bn running_var", rv, rv_, C, TOL_SUM);
  /* Backward from the device's saved statistics on both sides. */
  ck_assert_int_eq(fl_cuda_copy_to_host(sm, sm_, sizeof sm, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_host(si, si_, sizeof si, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_host(y, y_, n * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward(&d, x, y, dy, gm, sm, si, dx, dg, dbt, act), FL_OK);
  ck_assert_int_eq(
      fl_batchnorm_backward_cuda(&d, x_, y_, dy_, gm_, sm_, si_, dx_, dg_, dbt_, act, NULL), FL_OK);
  expect_close("bn dx", dx, dx_, n, TOL_SUM);
  expect_close("bn dgamma", dg, dg_, C, TOL_SUM);
  expect_close("bn dbeta", dbt, dbt_, C, TOL_SUM);
  /* Inference mode. */
  ck_assert_int_eq(fl_cuda_copy_to_device(rm_, rm, C * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(rv_, rv, C * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_eval(&d, x, y, gm, bt, rm, rv, act), FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_eval_cuda(&d, x_, y_, gm_, bt_, rm_, rv_, act, NULL),
                   FL_OK);
  expect_close("bn eval y", y, y_, n, TOL_ELEM);
  fl_norm_desc bad = d;
  bad.eps = 0.0f;
  ck_assert_int_eq(fl_batchnorm_forward_eval_cuda(&bad, x_, y_, gm_, bt_, rm_, rv_, act, NULL),
                   FL_EINVAL);
  free(x), free(dy), free(gm), free(bt), free(rm), free(rv), free(y), free(dx);
  dev_free(x_), dev_free(dy_), dev_free(gm_), dev_free(bt_), dev_free(rm_), dev_free(rv_),
      dev_free(y_), dev_free(dx_), dev_free(sm_), dev_free(si_), dev_free(dg_), dev_free(dbt_);
}
END_TEST

/* _i: 0 GN 2 groups with tanh, 1 GN with NULL gamma/beta and 1 group. */
START_TEST(groupnorm) {
  const size_t N = 3, C = 6, S = 29, n = N * C * S, G = _i ? 1 : 2;
  const fl_norm_desc d = {N, C, S, G, 1e-5f, 0.1f};
  const fl_act act = _i ? FL_ACT_NONE : FL_ACT_TANH;
  rng_state = 81 + (uint64_t)_i;
  float *x = host_rand(n, 2.0f), *dy = host_rand(n, 1.0f);
  float *gm = _i ? NULL : host_rand(C, 1.0f), *bt = _i ? NULL : host_rand(C, 1.0f);
  float *x_ = dev_floats(x, n), *dy_ = dev_floats(dy, n);
  float *gm_ = gm ? dev_floats(gm, C) : NULL, *bt_ = bt ? dev_floats(bt, C) : NULL;
  float *y = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
  float sm[6], si[6], dg[6], dbt[6];
  float *y_ = dev_alloc(n * sizeof(float)), *dx_ = dev_alloc(n * sizeof(float));
  float *sm_ = dev_alloc(N * G * sizeof(float)), *si_ = dev_alloc(N * G * sizeof(float));
  float *dg_ = dev_alloc(C * sizeof(float)), *dbt_ = dev_alloc(C * sizeof(float));
  ck_assert_int_eq(fl_groupnorm_forward(&d, x, y, gm, bt, sm, si, act), FL_OK);
  ck_assert_int_eq(fl_groupnorm_forward_cuda(&d, x_, y_, gm_, bt_, sm_, si_, act, NULL), FL_OK);
  expect_close("gn y", y, y_, n, TOL_SUM);
  expect_close("gn save_mean", sm, sm_, N * G, TOL_SUM);
  expect_close("gn save_invstd", si, si_, N * G, TOL_SUM);
  ck_assert_int_eq(fl_cuda_copy_to_host(sm, sm_, N * G * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_host(si, si_, N * G * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_host(y, y_, n * sizeof(float), NULL), FL_OK);
  ck_assert_int_eq(fl_groupnorm_backward(&d, x, y, dy, gm, sm, si, dx, dg, dbt, act), FL_OK);
  ck_assert_int_eq(
      fl_groupnorm_backward_cuda(&d, x_, y_, dy_, gm_, sm_, si_, dx_, dg_, dbt_, act, NULL), FL_OK);
  expect_close("gn dx", dx, dx_, n, TOL_SUM);
  expect_close("gn dgamma", dg, dg_, C, TOL_SUM);
  expect_close("gn dbeta", dbt, dbt_, C, TOL_SUM);
  fl_norm_desc bad = d;
  bad.groups = 4; /* does not divide 6 */
  ck_assert_int_eq(fl_groupnorm_forward_cuda(&bad, x_, y_, gm_, bt_, sm_, si_, act, NULL),
                   FL_EINVAL);
  free(x), free(dy), free(gm), free(bt), free(y), free(dx);
  dev_free(x_), dev_free(dy_), dev_free(gm_), dev_free(bt_), dev_free(y_), dev_free(dx_),
      dev_free(sm_), dev_free(si_), dev_free(dg_), dev_free(dbt_);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_layers");
  TCase *tc = tcase_create("layers");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, activations, 0, 3);
  tcase_add_loop_test(tc, bias, 0, 2);
  tcase_add_loop_test(tc, linear, 0, 9);
  tcase_add_loop_test(tc, softmax_xent, 0, 2);
  tcase_add_loop_test(tc, conv2d, 0, 8);
  tcase_add_loop_test(tc, maxpool, 0, 3);
  tcase_add_loop_test(tc, batchnorm, 0, 3);
  tcase_add_loop_test(tc, groupnorm, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cuda_test_main(suite); }
