/* test_lr.c - unit tests of the learning-rate schedules (kernels/lr.c):
 * values at the key steps (start, middle, end, past the end, warmup
 * boundaries) worked out by hand, names, and rejected schedules. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_optim.h"

#define EXPECT_LR(s, step, want)                                                     \
  do {                                                                               \
    float got_ = fl_lr_at((s), (step));                                              \
    ck_assert_msg(fabs((double)got_ - (want)) <= 1e-6 * fabs(want) + 1e-9,           \
                  "step %lld: lr %.9g, want %.9g", (long long)(step), (double)got_, \
                  (double)(want));                                                   \
  } while (0)

static fl_lr_schedule sched(fl_lr_kind kind) {
  fl_lr_schedule s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.base_lr = 0.1f;
  s.end_lr = 0.001f;
  s.power = 1.0f;
  s.decay_steps = 100;
  return s;
}

START_TEST(test_constant) {
  fl_lr_schedule s = sched(FL_LR_CONSTANT);
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  EXPECT_LR(&s, 0, 0.1);
  EXPECT_LR(&s, 1000000, 0.1);
  EXPECT_LR(&s, -5, 0.1); /* a negative step counts as 0 */
}
END_TEST

START_TEST(test_polynomial) {
  fl_lr_schedule s = sched(FL_LR_POLYNOMIAL);
  /* power 1: linear from 0.1 to 0.001 over 100 steps */
  EXPECT_LR(&s, 0, 0.1);
  EXPECT_LR(&s, 50, 0.0505);  /* 0.099*0.5 + 0.001 */
  EXPECT_LR(&s, 75, 0.02575); /* 0.099*0.25 + 0.001 */
  EXPECT_LR(&s, 100, 0.001);
  EXPECT_LR(&s, 5000, 0.001); /* held at end_lr */
  s.power = 2.0f;
  EXPECT_LR(&s, 50, 0.02575); /* 0.099*0.25 + 0.001 */
  EXPECT_LR(&s, 90, 0.00199); /* 0.099*0.01 + 0.001 */
  s.power = 0.5f;
  EXPECT_LR(&s, 75, 0.0505); /* 0.099*sqrt(0.25) + 0.001 */
}
END_TEST

START_TEST(test_cosine) {
  fl_lr_schedule s = sched(FL_LR_COSINE);
  s.end_lr = 0.0f;
  EXPECT_LR(&s, 0, 0.1);
  EXPECT_LR(&s, 50, 0.05);                /* (1 + cos(pi/2))/2 = 0.5 */
  EXPECT_LR(&s, 25, 0.08535533906);       /* (1 + sqrt(2)/2)/2 * 0.1 */
  EXPECT_LR(&s, 100, 0.0);
  EXPECT_LR(&s, 101, 0.0);
  s.end_lr = 0.02f;
  EXPECT_LR(&s, 50, 0.06); /* 0.02 + 0.08*0.5 */
  EXPECT_LR(&s, 200, 0.02);
}
END_TEST

START_TEST(test_piecewise) {
  fl_lr_schedule s = sched(FL_LR_PIECEWISE);
  s.n_boundaries = 2;
  s.boundaries[0] = 10, s.boundaries[1] = 20;
  s.values[0] = 1.0f, s.values[1] = 0.5f, s.values[2] = 0.25f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  EXPECT_LR(&s, 0, 1.0);
  EXPECT_LR(&s, 9, 1.0);
  EXPECT_LR(&s, 10, 0.5);
  EXPECT_LR(&s, 19, 0.5);
  EXPECT_LR(&s, 20, 0.25);
  EXPECT_LR(&s, 1 << 30, 0.25);
  s.n_boundaries = 0; /* a single piece */
  s.values[0] = 0.3f;
  EXPECT_LR(&s, 123, 0.3);
}
END_TEST

START_TEST(test_warmup) {
  fl_lr_schedule s = sched(FL_LR_POLYNOMIAL);
  s.warmup_steps = 10;
  s.warmup_start_lr = 0.0f;
  EXPECT_LR(&s, 0, 0.0);
  EXPECT_LR(&s, 5, 0.05); /* halfway to the schedule's start, 0.1 */
  EXPECT_LR(&s, 9, 0.09);
  EXPECT_LR(&s, 10, 0.1); /* the decay starts counting here */
  EXPECT_LR(&s, 60, 0.0505);
  EXPECT_LR(&s, 110, 0.001);
  s.warmup_start_lr = 0.02f;
  EXPECT_LR(&s, 5, 0.06);
  fl_lr_schedule c = sched(FL_LR_CONSTANT);
  c.warmup_steps = 4;
  EXPECT_LR(&c, 1, 0.025);
  EXPECT_LR(&c, 4, 0.1);
  fl_lr_schedule p = sched(FL_LR_PIECEWISE);
  p.n_boundaries = 1;
  p.boundaries[0] = 5;
  p.values[0] = 0.2f, p.values[1] = 0.02f;
  p.warmup_steps = 2;
  EXPECT_LR(&p, 1, 0.1);  /* halfway to values[0] */
  EXPECT_LR(&p, 6, 0.2);  /* t = 4 < 5 */
  EXPECT_LR(&p, 7, 0.02); /* t = 5 */
}
END_TEST

START_TEST(test_names) {
  for (int k = 0; k <= FL_LR_PIECEWISE; k++) {
    fl_lr_kind back;
    ck_assert_int_eq(fl_lr_kind_parse(fl_lr_kind_name((fl_lr_kind)k), &back), FL_OK);
    ck_assert_int_eq(back, k);
  }
  fl_lr_kind k;
  ck_assert_str_eq(fl_lr_kind_name(FL_LR_COSINE), "cosine");
  ck_assert_int_eq(fl_lr_kind_parse("exponential", &k), FL_EINVAL);
  ck_assert_int_eq(fl_lr_kind_parse(NULL, &k), FL_EINVAL);
  ck_assert_int_eq(fl_lr_kind_parse("cosine", NULL), FL_EINVAL);
  ck_assert_str_eq(fl_lr_kind_name((fl_lr_kind)9), "unknown");
}
END_TEST

START_TEST(test_bad_schedules) {
  ck_assert_int_eq(fl_lr_schedule_check(NULL), FL_EINVAL);
  ck_assert(isnan(fl_lr_at(NULL, 3)));
  fl_lr_schedule s = sched(FL_LR_POLYNOMIAL);
  s.base_lr = -0.1f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  ck_assert(isnan(fl_lr_at(&s, 3)));
  s = sched(FL_LR_POLYNOMIAL), s.decay_steps = 0;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_POLYNOMIAL), s.power = 0.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_COSINE), s.end_lr = NAN;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_COSINE), s.warmup_steps = -1;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_CONSTANT), s.warmup_start_lr = -1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_PIECEWISE), s.n_boundaries = FL_LR_MAX_PIECES + 1;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_PIECEWISE), s.n_boundaries = 2;
  s.boundaries[0] = 5, s.boundaries[1] = 5; /* not increasing */
  s.values[0] = s.values[1] = s.values[2] = 0.1f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.boundaries[1] = 6, s.values[2] = -1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.values[2] = 0.1f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  s.kind = (fl_lr_kind)7;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lr");
  TCase *tc = tcase_create("schedules");
  tcase_add_test(tc, test_constant);
  tcase_add_test(tc, test_polynomial);
  tcase_add_test(tc, test_cosine);
  tcase_add_test(tc, test_piecewise);
  tcase_add_test(tc, test_warmup);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_bad_schedules);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
