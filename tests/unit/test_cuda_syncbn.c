/* test_cuda_syncbn.c - the CUDA twins of batch norm's phase kernels
 * (fl_layers.h: stats_sum, stats_sqdev, forward_apply, backward_reduce,
 * backward_apply; the double arrays in device memory).
 *
 *  - With the exchange an identity, the device phases give the bits of
 *    fl_batchnorm_forward_train_cuda and fl_batchnorm_backward_cuda (the
 *    same block reductions in the same order): y, saved and running
 *    statistics, dx (in place), dgamma, dbeta.
 *  - They agree with the CPU phases: the double sums to 1e-12 relative,
 *    the float outputs within the tolerances of test_cuda_layers.c.
 *  - With "global" sums (twice the local ones and twice the count, as two
 *    identical ranks would give), apply and backward_apply agree with the
 *    CPU phases given the same doubles (element-wise: 1e-6).
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

static void *hbuf(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

static float *host_rand(size_t n, float scale, float shift) {
  float *h = hbuf(n * sizeof(float));
  for (size_t i = 0; i < n; i++) h[i] = scale * urand() + shift;
  return h;
}

static void *to_host(const void *d, size_t bytes) {
  void *h = hbuf(bytes);
  ck_assert_int_eq(fl_cuda_copy_to_host(h, d, bytes, NULL), FL_OK);
  return h;
}

static void dev_free(void *d) { ck_assert_int_eq(fl_cuda_free(d), FL_OK); }

/* Device buffers a and b hold the same bytes. */
static void expect_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
  void *ha = to_host(a, bytes), *hb = to_host(b, bytes);
  ck_assert_msg(memcmp(ha, hb, bytes) == 0, "%s: fused and phase kernels differ", what);
  free(ha), free(hb);
}

/* Host a[n] against device d[n]: largest |a - d| relative to max |a|. */
static void expect_close(const char *what, const float *a, const float *d, size_t n, double tol) {
  float *h = to_host(d, n * sizeof(float));
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)a[i]));
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - (double)h[i]));
  free(h);
  const double rel = scale > 0.0 ? worst / scale : worst;
  ck_assert_msg(rel <= tol, "%s: error %g relative to %g exceeds %g", what, rel, scale, tol);
}

static void expect_close_d(const char *what, const double *a, const double *d, size_t n,
                           double tol) {
  double *h = to_host(d, n * sizeof(double));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(a[i] - h[i]) <= tol * fmax(1.0, fabs(a[i])), "%s[%zu]: %.17g vs %.17g",
                  what, i, a[i], h[i]);
  free(h);
}

/* _i: 0 ReLU over an image tensor, 1 tanh after a linear layer (inner 1),
 * 2 no activation with NULL gamma/beta and no running statistics. */
START_TEST(phases) {
  const size_t N = 6, C = 5, S = _i == 1 ? 1 : 37, n = N * C * S;
  const fl_norm_desc d = {N, C, S, 0, 1e-5f, 0.1f};
  const fl_act act = _i == 0 ? FL_ACT_RELU : _i == 1 ? FL_ACT_TANH : FL_ACT_NONE;
  const int affine = _i != 2, running = _i != 2;
  const double count = (double)(N * S);
  rng_state = 91 + (uint64_t)_i;
  float *x = host_rand(n, 2.0f, 0.5f), *dy = host_rand(n, 1.0f, 0.0f);
  float *gm = affine ? host_rand(C, 0.5f, 1.0f) : NULL;
  float *bt = affine ? host_rand(C, 0.5f, 0.0f) : NULL;
  float *rm = host_rand(C, 0.1f, 0.0f), *rv = host_rand(C, 0.1f, 1.0f);
  const size_t fb = n * sizeof(float), cb = C * sizeof(float);
  float *x_ = dev_from(x, fb), *gm_ = gm ? dev_from(gm, cb) : NULL;
  float *bt_ = bt ? dev_from(bt, cb) : NULL;
  /* fused on the device */
  float *yf = dev_alloc(fb), *smf = dev_alloc(cb), *sif = dev_alloc(cb);
  float *rmf = dev_from(rm, cb), *rvf = dev_from(rv, cb), *dyf = dev_from(dy, fb);
  float *dgf = dev_alloc(cb), *dbf = dev_alloc(cb);
  ck_assert_int_eq(fl_batchnorm_forward_train_cuda(&d, x_, yf, gm_, bt_, running ? rmf : NULL,
                                                   running ? rvf : NULL, smf, sif, act, NULL),
                   FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_cuda(&d, x_, yf, dyf, gm_, smf, sif, dyf, dgf, dbf, act,
                                              NULL),
                   FL_OK);
  /* phases on the device, the exchange an identity */
  double *sum_ = dev_alloc(C * sizeof(double)), *sq_ = dev_alloc(C * sizeof(double));
  double *sums_ = dev_alloc(2 * C * sizeof(double));
  float *yp = dev_alloc(fb), *smp = dev_alloc(cb), *sip = dev_alloc(cb);
  float *rmp = dev_from(rm, cb), *rvp = dev_from(rv, cb), *dyp = dev_from(dy, fb);
  float *dgp = dev_alloc(cb), *dbp = dev_alloc(cb);
  ck_assert_int_eq(fl_batchnorm_stats_sum_cuda(&d, x_, sum_, NULL), FL_OK);
  ck_assert_int_eq(fl_batchnorm_stats_sqdev_cuda(&d, x_, sum_, count, sq_, NULL), FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_apply_cuda(&d, x_, yp, gm_, bt_, sum_, sq_, count,
                                                   running ? rmp : NULL, running ? rvp : NULL,
                                                   smp, sip, act, NULL),
                   FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_reduce_cuda(&d, x_, yp, dyp, smp, sip, sums_, dgp, dbp,
                                                     act, NULL),
                   FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_apply_cuda(&d, x_, dyp, gm_, smp, sip, sums_, count, dyp,
                                                    NULL),
                   FL_OK);
  expect_same_bits("y", yf, yp, fb);
  expect_same_bits("save_mean", smf, smp, cb);
  expect_same_bits("save_invstd", sif, sip, cb);
  expect_same_bits("running_mean", rmf, rmp, cb);
  expect_same_bits("running_var", rvf, rvp, cb);
  expect_same_bits("dx", dyf, dyp, fb);
  expect_same_bits("dgamma", dgf, dgp, cb);
  expect_same_bits("dbeta", dbf, dbp, cb);
  /* against the CPU phases */
  double *sum = hbuf(C * sizeof(double)), *sq = hbuf(C * sizeof(double));
  double *sums = hbuf(2 * C * sizeof(double));
  float *y = hbuf(fb), *sm = hbuf(cb), *si = hbuf(cb), *dg = hbuf(cb), *db = hbuf(cb);
  float *dz = hbuf(fb);
  memcpy(dz, dy, fb);
  ck_assert_int_eq(fl_batchnorm_stats_sum(&d, x, sum), FL_OK);
  ck_assert_int_eq(fl_batchnorm_stats_sqdev(&d, x, sum, count, sq), FL_OK);
  expect_close_d("sum", sum, sum_, C, 1e-12);
  expect_close_d("sqdev", sq, sq_, C, 1e-12);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&d, x, y, gm, bt, sum, sq, count,
                                              running ? rm : NULL, running ? rv : NULL, sm, si,
                                              act),
                   FL_OK);
  expect_close("y", y, yp, n, TOL_SUM);
  expect_close("save_mean", sm, smp, C, TOL_SUM);
  expect_close("save_invstd", si, sip, C, TOL_SUM);
  expect_close("running_mean", rm, rmp, C, TOL_SUM);
  expect_close("running_var", rv, rvp, C, TOL_SUM);
  ck_assert_int_eq(fl_batchnorm_backward_reduce(&d, x, y, dz, sm, si, sums, dg, db, act), FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_apply(&d, x, dz, gm, sm, si, sums, count, dz), FL_OK);
  expect_close("dx", dz, dyp, n, TOL_SUM);
  expect_close("dgamma", dg, dgp, C, TOL_SUM);
  expect_close("dbeta", db, dbp, C, TOL_SUM);
  /* "global" sums: both sides get the same doubles (the device's, doubled,
   * with twice the count); what follows is element-wise */
  double *gsum = to_host(sum_, C * sizeof(double)), *gsq = to_host(sq_, C * sizeof(double));
  double *gsums = to_host(sums_, 2 * C * sizeof(double));
  for (size_t c = 0; c < C; c++) gsum[c] *= 2.0, gsq[c] *= 2.0;
  for (size_t k = 0; k < 2 * C; k++) gsums[k] *= 2.0;
  ck_assert_int_eq(fl_cuda_copy_to_device(sum_, gsum, C * sizeof(double), NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(sq_, gsq, C * sizeof(double), NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(sums_, gsums, 2 * C * sizeof(double), NULL), FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&d, x, y, gm, bt, gsum, gsq, 2 * count, NULL, NULL,
                                              sm, si, act),
                   FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_apply_cuda(&d, x_, yp, gm_, bt_, sum_, sq_, 2 * count,
                                                   NULL, NULL, smp, sip, act, NULL),
                   FL_OK);
  expect_close("global y", y, yp, n, TOL_ELEM);
  expect_close("global save_invstd", si, sip, C, TOL_ELEM);
  float *dzp = to_host(dyp, fb); /* any dz will do: the same on both sides */
  ck_assert_int_eq(fl_cuda_copy_to_device(dyp, dz, fb, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(smp, sm, cb, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(sip, si, cb, NULL), FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_apply(&d, x, dz, gm, sm, si, gsums, 2 * count, dzp),
                   FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_apply_cuda(&d, x_, dyp, gm_, smp, sip, sums_, 2 * count,
                                                    dyp, NULL),
                   FL_OK);
  expect_close("global dx", dzp, dyp, n, TOL_ELEM);
  /* argument checks as on the CPU */
  ck_assert_int_eq(fl_batchnorm_stats_sqdev_cuda(&d, x_, sum_, count - 1, sq_, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_backward_apply_cuda(&d, x_, dyp, gm_, smp, sip, sums_, count,
                                                    NULL, NULL),
                   FL_EINVAL);
  free(x), free(dy), free(gm), free(bt), free(rm), free(rv), free(sum), free(sq), free(sums),
      free(y), free(sm), free(si), free(dg), free(db), free(dz), free(gsum), free(gsq),
      free(gsums), free(dzp);
  void *dv[] = {x_, gm_, bt_, yf, smf, sif, rmf, rvf, dyf, dgf, dbf, sum_, sq_, sums_,
                yp, smp, sip, rmp, rvp, dyp, dgp, dbp};
  for (size_t k = 0; k < sizeof dv / sizeof dv[0]; k++)
    if (dv[k]) dev_free(dv[k]);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_syncbn");
  TCase *tc = tcase_create("phases");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, phases, 0, 3);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cuda_test_main(suite); }
