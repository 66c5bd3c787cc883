/* test_metrics_auc.c - exact AUC and log loss over several ranks' pairs
 * (trainer/metrics_auc.c) against a brute-force count of every
 * (positive, negative) pair and a direct log-loss sum. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "fl_metrics_auc.h"

/* Brute force: every positive against every negative, ties 1/2. */
static double brute_auc(const float *s, const float *y, size_t n) {
  double num = 0, pos = 0, neg = 0;
  for (size_t i = 0; i < n; i++) {
    if (y[i] > 0.5f) pos++;
    else neg++;
    if (y[i] <= 0.5f) continue;
    for (size_t j = 0; j < n; j++)
      if (y[j] <= 0.5f) num += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
  }
  return num / (pos * neg);
}

static double brute_loss(const float *s, const float *y, size_t n) {
  double l = 0;
  for (size_t i = 0; i < n; i++) {
    double p = fmin(fmax(s[i], 1e-15), 1 - 1e-15);
    l -= y[i] > 0.5f ? log(p) : log(1 - p);
  }
  return l / (double)n;
}

/* Scores on a coarse grid (many ties), labels correlated with them. */
static void fill(float *s, float *y, size_t n, unsigned seed) {
  srand(seed);
  for (size_t i = 0; i < n; i++) {
    s[i] = (float)(rand() % 21) / 20.0f;
    y[i] = (float)(rand() % 100) < 30.0f + 40.0f * s[i] ? 1.0f : 0.0f;
  }
}

START_TEST(test_merge_equals_brute_force) {
  enum { N = 997 };
  float s[N], y[N];
  fill(s, y, N, 7);
  /* three ranks of unequal sizes, one of them empty */
  fl_auc_acc acc[4] = {{0}};
  const size_t cut[5] = {0, 100, 100, 600, N};
  fl_auc_part parts[4];
  for (int r = 0; r < 4; r++) {
    ck_assert_int_eq(fl_auc_add(&acc[r], s + cut[r], y + cut[r], cut[r + 1] - cut[r]), FL_OK);
    parts[r] = (fl_auc_part){acc[r].score, acc[r].label, acc[r].n};
  }
  fl_auc_result res, again;
  ck_assert_int_eq(fl_auc_merge(parts, 4, &res), FL_OK);
  ck_assert_uint_eq(res.n, N);
  ck_assert_double_eq_tol(res.auc, brute_auc(s, y, N), 1e-12);
  ck_assert_double_eq_tol(res.logloss, brute_loss(s, y, N), 1e-12);
  ck_assert_int_eq(fl_auc_merge(parts, 4, &again), FL_OK);
  ck_assert(again.auc == res.auc && again.logloss == res.logloss);
  /* the same pairs as one part: the same AUC (order-free) */
  fl_auc_part one = {s, y, N};
  ck_assert_int_eq(fl_auc_merge(&one, 1, &again), FL_OK);
  ck_assert(again.auc == res.auc);
  for (int r = 0; r < 4; r++) fl_auc_acc_free(&acc[r]);
}
END_TEST

/* Not the mean of the per-rank AUCs: each rank ranks perfectly, the union
 * does not. */
START_TEST(test_not_mean_of_ranks) {
  const float s0[] = {0.1f, 0.2f}, y0[] = {0, 1};
  const float s1[] = {0.8f, 0.9f}, y1[] = {0, 1};
  fl_auc_part parts[2] = {{s0, y0, 2}, {s1, y1, 2}};
  fl_auc_result res;
  ck_assert_int_eq(fl_auc_merge(parts, 2, &res), FL_OK);
  ck_assert_double_eq_tol(res.auc, 0.75, 1e-15);
  ck_assert_uint_eq(res.positives, 2);
}
END_TEST

START_TEST(test_hand_values) {
  /* all tied: 0.5; perfect: 1; reversed: 0 */
  const float tie[] = {0.3f, 0.3f, 0.3f}, yt[] = {1, 0, 0};
  const float up[] = {0.1f, 0.9f}, yu[] = {0, 1}, yd[] = {1, 0};
  fl_auc_result r;
  fl_auc_part p = {tie, yt, 3};
  ck_assert_int_eq(fl_auc_merge(&p, 1, &r), FL_OK);
  ck_assert_double_eq(r.auc, 0.5);
  ck_assert_double_eq_tol(r.logloss, -(log((double)0.3f) + 2 * log(1.0 - (double)0.3f)) / 3, 1e-12);
  p = (fl_auc_part){up, yu, 2};
  ck_assert_int_eq(fl_auc_merge(&p, 1, &r), FL_OK);
  ck_assert_double_eq(r.auc, 1.0);
  p = (fl_auc_part){up, yd, 2};
  ck_assert_int_eq(fl_auc_merge(&p, 1, &r), FL_OK);
  ck_assert_double_eq(r.auc, 0.0);
  /* one class only: no pair to rank; a certain wrong answer is clipped */
  const float one[] = {0.0f}, y1[] = {1};
  p = (fl_auc_part){one, y1, 1};
  ck_assert_int_eq(fl_auc_merge(&p, 1, &r), FL_OK);
  ck_assert(isnan(r.auc));
  ck_assert_double_eq_tol(r.logloss, -log(1e-15), 1e-9);
  ck_assert_int_eq(fl_auc_merge(NULL, 0, &r), FL_OK);
  ck_assert(isnan(r.logloss));
}
END_TEST

START_TEST(test_bad_scores) {
  fl_auc_acc acc = {0};
  const float bad[] = {0.5f, NAN}, y[] = {1, 0};
  ck_assert_int_eq(fl_auc_add(&acc, bad, y, 2), FL_EINVAL);
  const float big[] = {1.5f};
  fl_auc_part p = {big, y, 1};
  fl_auc_result r;
  ck_assert_int_eq(fl_auc_merge(&p, 1, &r), FL_EINVAL);
  fl_auc_acc_free(&acc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("metrics_auc");
  TCase *tc = tcase_create("auc");
  tcase_add_test(tc, test_merge_equals_brute_force);
  tcase_add_test(tc, test_not_mean_of_ranks);
  tcase_add_test(tc, test_hand_values);
  tcase_add_test(tc, test_bad_scores);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
