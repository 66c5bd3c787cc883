/* test_ops_matrix.c - the matrix ops of the graph engine (ops_matrix.c):
 * Trilu on floats (forward against the definition for both triangles and
 * several offsets, on a stack of non-square matrices; backward against
 * finite differences) and on int64 (a bool mask), and its refusals. */
#include <config.h>

#include "graph_ops_harness.h"

START_TEST(test_trilu_float) {
  const int64_t ks[] = {0, 1, -1, 2, -2};
  for (int upper = 0; upper < 2; upper++)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
      harness h;
      uint64_t s = 77 + ki;
      const int64_t xs[] = {2, 3, 4}, one[] = {1};
      h_init(&h, "Trilu");
      h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
      h_i64(&h, "k", 0, one, &ks[ki]);
      h_ai(&h, "upper", upper);
      h_outs(&h, 1);
      h_ready(&h);
      h_expect_shape(&h, 0, 3, xs);
      h_fwd(&h);
      for (int m = 0; m < 2; m++)
        for (int i = 0; i < 3; i++)
          for (int j = 0; j < 4; j++) {
            const int e = (m * 3 + i) * 4 + j;
            const int keep = upper ? j - i >= ks[ki] : j - i <= ks[ki];
            ck_assert_float_eq(h_y(&h, 0)->data[e], keep ? h_x(&h, 0)->data[e] : 0.0f);
          }
      h_gradcheck(&h, "Trilu", 1, 1e-3, 1e-4, 1e-3);
      h_free(&h);
    }
}
END_TEST

START_TEST(test_trilu_mask) {
  /* torch.triu(ones(L, L, dtype=bool), 1): the causal mask */
  harness h;
  const int64_t xs[] = {3, 3}, one[] = {1}, k = 1;
  int64_t ones[9];
  for (int i = 0; i < 9; i++) ones[i] = 1;
  h_init(&h, "Trilu");
  h_i64(&h, "x", 2, xs, ones);
  h_i64(&h, "k", 0, one, &k);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  const int64_t want[] = {0, 1, 1, 0, 0, 1, 0, 0, 0};
  for (int i = 0; i < 9; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], want[i]);
  h_free(&h);
}
END_TEST

START_TEST(test_trilu_refusals) {
  harness h;
  uint64_t s = 5;
  const int64_t v[] = {4};
  h_init(&h, "Trilu");
  h_f32(&h, "x", 1, v, &s, -1, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* a vector is no matrix */
  h_free(&h);
  const int64_t xs[] = {2, 2};
  h_init(&h, "Trilu");
  h_f32(&h, "x", 2, xs, &s, -1, 1, 0);
  h_ai(&h, "upper", 2);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ops_matrix");
  TCase *tc = tcase_create("trilu");
  tcase_add_test(tc, test_trilu_float);
  tcase_add_test(tc, test_trilu_mask);
  tcase_add_test(tc, test_trilu_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
