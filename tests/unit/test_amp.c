/* test_amp.c - unit tests of AMP (kernels/amp.c): check_finite_and_unscale
 * over tensor lists (finite, inf, nan, big threaded tensors), and the
 * dynamic loss-scaling state machine over whole step sequences: overflow
 * skips the update and lowers the scale after decr_every_n_nan_or_inf bad
 * steps in a row, the scale never drops below 1, incr_every_n_steps good
 * steps in a row raise it, and a skipped step leaves the optimizer alone. */
#include <config.h>

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_optim.h"

START_TEST(test_unscale_finite) {
  float a[3] = {1024, -2048, 0.5f}, b[2] = {3, 0};
  float *t[2] = {a, b};
  size_t n[2] = {3, 2};
  int found = -1;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 2, 1024.0f, &found), FL_OK);
  ck_assert_int_eq(found, 0);
  ck_assert(a[0] == 1.0f && a[1] == -2.0f && a[2] == 0.5f / 1024 && b[0] == 3.0f / 1024);
  ck_assert(b[1] == 0.0f);
}
END_TEST

START_TEST(test_unscale_nonfinite) {
  const float bad[] = {INFINITY, -INFINITY, NAN};
  for (int k = 0; k < 3; k++) {
    float a[2] = {2, 4}, b[3] = {8, bad[k], 16};
    float *t[2] = {a, b};
    size_t n[2] = {2, 3};
    int found = 0;
    ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 2, 2.0f, &found), FL_OK);
    ck_assert_int_eq(found, 1);
    /* unscaled either way, as Paddle does */
    ck_assert(a[0] == 1 && a[1] == 2 && b[0] == 4 && b[2] == 8);
  }
  /* finite values that only overflow after unscaling by 1/0.5 are no overflow */
  float c[1] = {FLT_MAX};
  float *tc[1] = {c};
  size_t nc[1] = {1};
  int found = 1;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(tc, nc, 1, 0.5f, &found), FL_OK);
  ck_assert_int_eq(found, 0);
}
END_TEST

START_TEST(test_unscale_large) {
  /* Threaded path: one nan near the end of the last tensor is found, and
   * every element is unscaled exactly like a plain loop would. */
  size_t n[2] = {300001, 70000};
  float *a = malloc(n[0] * sizeof(float)), *b = malloc(n[1] * sizeof(float));
  ck_assert(a && b);
  for (size_t i = 0; i < n[0]; i++)
    a[i] = (float)(i % 1000) - 500.0f;
  for (size_t i = 0; i < n[1]; i++)
    b[i] = (float)i;
  float *t[2] = {a, b};
  int found = 0;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 2, 4.0f, &found), FL_OK);
  ck_assert_int_eq(found, 0);
  for (size_t i = 0; i < n[0]; i++)
    if (a[i] != ((float)(i % 1000) - 500.0f) * 0.25f)
      ck_abort_msg("a[%zu] = %g", i, (double)a[i]);
  b[n[1] - 3] = NAN;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 2, 4.0f, &found), FL_OK);
  ck_assert_int_eq(found, 1);
  free(a), free(b);
}
END_TEST

START_TEST(test_unscale_bad_args) {
  float a[2] = {1, 2};
  float *t[1] = {a}, *tnull[1] = {NULL};
  size_t n[1] = {2}, n0[1] = {0};
  int found = 7;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(NULL, n, 1, 2.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, NULL, 1, 2.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 0, 2.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n0, 1, 2.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(tnull, n, 1, 2.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 1, 2.0f, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 1, 0.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 1, -1.0f, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 1, NAN, &found), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, 1, INFINITY, &found), FL_EINVAL);
  ck_assert(a[0] == 1 && a[1] == 2 && found == 7);
}
END_TEST

/* One step of the scaler; Check is called only on a mismatch (sequences
 * run thousands of steps). */
static void feed(fl_loss_scaler *s, int found_inf, int want_skip, float want_scale) {
  int skip = -1;
  fl_status st = fl_loss_scaler_update(s, found_inf, &skip);
  if (st != FL_OK || skip != want_skip || s->scale != want_scale)
    ck_abort_msg("found_inf %d: status %d, skip %d (want %d), scale %.9g (want %.9g)", found_inf,
                 st, skip, want_skip, (double)s->scale, (double)want_scale);
}

START_TEST(test_scaler_decrease) {
  fl_loss_scaler s = fl_loss_scaler_default();
  ck_assert(s.scale == 32768.0f && s.incr_every_n_steps == 1000 &&
            s.decr_every_n_nan_or_inf == 2 && s.incr_ratio == 2.0f && s.decr_ratio == 0.8f);
  feed(&s, 1, 1, 32768.0f); /* one bad step: skip, scale kept */
  ck_assert_int_eq(s.bad_steps, 1);
  feed(&s, 1, 1, 32768.0f * 0.8f); /* two in a row: scale * 0.8 */
  ck_assert_int_eq(s.bad_steps, 0);
  /* bad, good, bad: never two in a row, so no decrease */
  float sc = s.scale;
  feed(&s, 1, 1, sc);
  feed(&s, 0, 0, sc);
  feed(&s, 1, 1, sc);
  feed(&s, 1, 1, sc * 0.8f);
}
END_TEST

START_TEST(test_scaler_floor) {
  fl_loss_scaler s = fl_loss_scaler_default();
  s.scale = 1.2f;
  feed(&s, 1, 1, 1.2f);
  feed(&s, 1, 1, 1.0f); /* 0.96 floors at 1 */
  for (int i = 0; i < 50; i++)
    feed(&s, 1, 1, 1.0f);
  /* from the default, a long overflow streak ends at exactly 1 */
  fl_loss_scaler d = fl_loss_scaler_default();
  for (int i = 0; i < 200; i++) {
    int skip;
    if (fl_loss_scaler_update(&d, 1, &skip) != FL_OK || skip != 1 || !(d.scale >= 1.0f))
      ck_abort_msg("overflow %d: skip %d, scale %.9g", i, skip, (double)d.scale);
  }
  ck_assert(d.scale == 1.0f);
}
END_TEST

START_TEST(test_scaler_increase) {
  fl_loss_scaler s = fl_loss_scaler_default();
  for (int i = 0; i < 999; i++)
    feed(&s, 0, 0, 32768.0f);
  feed(&s, 0, 0, 65536.0f); /* the 1000th good step */
  ck_assert_int_eq(s.good_steps, 0);
  /* 999 good, one bad, 999 good: the streak restarted, no increase */
  for (int i = 0; i < 999; i++)
    feed(&s, 0, 0, 65536.0f);
  feed(&s, 1, 1, 65536.0f);
  for (int i = 0; i < 999; i++)
    feed(&s, 0, 0, 65536.0f);
  feed(&s, 0, 0, 131072.0f);
  /* a scale that would overflow stays */
  s.scale = FLT_MAX;
  s.good_steps = 999;
  feed(&s, 0, 0, FLT_MAX);
}
END_TEST

START_TEST(test_scaler_static) {
  fl_loss_scaler s = fl_loss_scaler_default();
  s.dynamic = 0;
  s.scale = 128.0f;
  for (int i = 0; i < 5; i++)
    feed(&s, 1, 1, 128.0f); /* still skipped, never rescaled */
  for (int i = 0; i < 2000; i++)
    feed(&s, 0, 0, 128.0f);
}
END_TEST

START_TEST(test_overflow_skips_update) {
  /* The loop a trainer runs: scaled gradients, check, update the scaler,
   * step only when not skipped.  The overflow step must leave both the
   * parameters and the momentum buffer where they were. */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  fl_loss_scaler ls = fl_loss_scaler_default();
  float p[2] = {1, 1}, v[2] = {0, 0}, g[2];
  fl_optim_tensor t = {"w", p, g, v, NULL, 2};
  float *gl[1] = {g};
  size_t n[1] = {2};
  const int overflow[] = {0, 1, 0};
  int64_t step = 0;
  for (int k = 0; k < 3; k++) {
    g[0] = 0.5f * ls.scale;
    g[1] = overflow[k] ? INFINITY : 0.25f * ls.scale;
    float p_before[2] = {p[0], p[1]}, v_before[2] = {v[0], v[1]};
    int found, skip;
    ck_assert_int_eq(fl_amp_check_finite_and_unscale(gl, n, 1, ls.scale, &found), FL_OK);
    ck_assert_int_eq(fl_loss_scaler_update(&ls, found, &skip), FL_OK);
    ck_assert_int_eq(skip, overflow[k]);
    if (!skip)
      ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.1f, ++step), FL_OK);
    if (overflow[k]) {
      ck_assert(p[0] == p_before[0] && p[1] == p_before[1]);
      ck_assert(v[0] == v_before[0] && v[1] == v_before[1]);
    }
  }
  /* two real steps of g = (0.5, 0.25): v = g then 1.9 g; p = 1 - 0.1*2.9*g */
  ck_assert(fabsf(v[0] - 0.95f) < 1e-6f && fabsf(p[0] - (1.0f - 0.145f)) < 1e-6f);
  ck_assert(fabsf(p[1] - (1.0f - 0.0725f)) < 1e-6f);
}
END_TEST

START_TEST(test_scaler_bad_args) {
  fl_loss_scaler s = fl_loss_scaler_default();
  int skip;
  ck_assert_int_eq(fl_loss_scaler_update(NULL, 0, &skip), FL_EINVAL);
  ck_assert_int_eq(fl_loss_scaler_update(&s, 0, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_loss_scaler_check(NULL), FL_EINVAL);
  ck_assert_int_eq(fl_loss_scaler_check(&s), FL_OK);
  fl_loss_scaler b = s;
  b.scale = 0.0f;
  ck_assert_int_eq(fl_loss_scaler_update(&b, 1, &skip), FL_EINVAL);
  b = s, b.scale = NAN;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.scale = 0.5f; /* below the floor of a dynamic scale */
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b.dynamic = 0; /* a static scale may be anything positive */
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_OK);
  b = s, b.incr_every_n_steps = 0;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.decr_every_n_nan_or_inf = -1;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.incr_ratio = 0.5f;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.decr_ratio = 1.5f;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.decr_ratio = 0.0f;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.good_steps = -1;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.dynamic = 5;
  ck_assert_int_eq(fl_loss_scaler_check(&b), FL_EINVAL);
  b = s, b.scale = 0.0f, b.bad_steps = 1;
  ck_assert_int_eq(fl_loss_scaler_update(&b, 1, &skip), FL_EINVAL);
  ck_assert_int_eq(b.bad_steps, 1); /* nothing changed */
}
END_TEST

int main(void) {
  Suite *s = suite_create("amp");
  TCase *tc = tcase_create("unscale");
  tcase_add_test(tc, test_unscale_finite);
  tcase_add_test(tc, test_unscale_nonfinite);
  tcase_add_test(tc, test_unscale_large);
  tcase_add_test(tc, test_unscale_bad_args);
  suite_add_tcase(s, tc);
  tc = tcase_create("scaler");
  tcase_add_test(tc, test_scaler_decrease);
  tcase_add_test(tc, test_scaler_floor);
  tcase_add_test(tc, test_scaler_increase);
  tcase_add_test(tc, test_scaler_static);
  tcase_add_test(tc, test_overflow_skips_update);
  tcase_add_test(tc, test_scaler_bad_args);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
