/* test_coll_bucket.c - the fusion-bucket planner of collective mode:
 * reverse parameter order, one bucket per parameter without fusion, the
 * size limit (fuse_grad_size_in_MB), the layer limit
 * (fuse_grad_size_in_TFLOPS), oversized parameters, and buffers left out. */
#include <config.h>

#include <check.h>

#include "coll_bucket.h"

/* fc0.w fc0.b bn.mean(buffer) fc1.w fc1.b fc2.w fc2.b */
static const size_t k_n[] = {100, 10, 10, 50, 5, 20, 2};
static const int k_layer[] = {0, 0, 1, 2, 2, 3, 3};
static const int k_tr[] = {1, 1, 0, 1, 1, 1, 1};
#define NP 7

static void check_offsets(const fl_bucket_plan *p) {
  for (size_t b = 0; b < p->nb; b++) {
    size_t off = 0;
    for (size_t k = p->start[b]; k < p->start[b + 1]; k++) {
      size_t i = p->order[k];
      ck_assert_int_eq(p->bucket_of[i], (int)b);
      ck_assert_uint_eq(p->offset[i], off);
      off += k_n[i];
    }
    ck_assert_uint_eq(p->floats[b], off);
  }
}

START_TEST(no_fusion_one_per_param_reversed) {
  fl_bucket_plan p;
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 0, 0, 0, &p), FL_OK);
  ck_assert_uint_eq(p.nb, 6);
  static const size_t want[] = {6, 5, 4, 3, 1, 0};
  for (size_t k = 0; k < 6; k++) ck_assert_uint_eq(p.order[k], want[k]);
  for (size_t b = 0; b < 6; b++) ck_assert_uint_eq(p.start[b + 1] - p.start[b], 1);
  ck_assert_int_eq(p.bucket_of[2], -1);
  check_offsets(&p);
  fl_bucket_plan_free(&p);
}
END_TEST

START_TEST(one_big_bucket) {
  fl_bucket_plan p;
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 1, 32u << 20, 50, &p), FL_OK);
  ck_assert_uint_eq(p.nb, 1);
  ck_assert_uint_eq(p.floats[0], 187);
  ck_assert_uint_eq(p.order[0], 6);
  ck_assert_uint_eq(p.order[5], 0);
  check_offsets(&p);
  fl_bucket_plan_free(&p);
}
END_TEST

START_TEST(size_limit) {
  fl_bucket_plan p;
  /* 60 floats = 240 bytes: {fc2.b, fc2.w}=22, +fc1.b=27, +fc1.w would be
   * 77 > 60 -> new; {fc1.w}=50, +fc0.b=60 fits; fc0.w (100) is larger
   * than the limit and gets its own bucket. */
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 1, 60 * sizeof(float), 50, &p),
                   FL_OK);
  ck_assert_uint_eq(p.nb, 3);
  ck_assert_uint_eq(p.floats[0], 27);
  ck_assert_uint_eq(p.floats[1], 60);
  ck_assert_uint_eq(p.floats[2], 100);
  check_offsets(&p);
  fl_bucket_plan_free(&p);
}
END_TEST

START_TEST(layer_limit) {
  fl_bucket_plan p;
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 1, 32u << 20, 1, &p), FL_OK);
  ck_assert_uint_eq(p.nb, 3); /* layers 3, 2, 0 (layer 1 only has a buffer) */
  ck_assert_uint_eq(p.floats[0], 22);
  ck_assert_uint_eq(p.floats[1], 55);
  ck_assert_uint_eq(p.floats[2], 110);
  check_offsets(&p);
  fl_bucket_plan_free(&p);
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 1, 32u << 20, 2, &p), FL_OK);
  ck_assert_uint_eq(p.nb, 2);
  ck_assert_uint_eq(p.floats[0], 77);
  ck_assert_uint_eq(p.floats[1], 110);
  fl_bucket_plan_free(&p);
}
END_TEST

START_TEST(edge_cases) {
  fl_bucket_plan p;
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 1, 0, 1, &p), FL_EINVAL);
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, k_tr, NP, 1, 100, 0, &p), FL_EINVAL);
  ck_assert_int_eq(fl_bucket_plan_build(NULL, NULL, NULL, 0, 1, 100, 1, &p), FL_OK);
  ck_assert_uint_eq(p.nb, 0);
  fl_bucket_plan_free(&p);
  static const int none[] = {0, 0, 0, 0, 0, 0, 0};
  ck_assert_int_eq(fl_bucket_plan_build(k_n, k_layer, none, NP, 1, 100, 1, &p), FL_OK);
  ck_assert_uint_eq(p.nb, 0);
  for (int i = 0; i < NP; i++) ck_assert_int_eq(p.bucket_of[i], -1);
  fl_bucket_plan_free(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coll_bucket");
  TCase *t = tcase_create("plan");
  tcase_add_test(t, no_fusion_one_per_param_reversed);
  tcase_add_test(t, one_big_bucket);
  tcase_add_test(t, size_limit);
  tcase_add_test(t, layer_limit);
  tcase_add_test(t, edge_cases);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
