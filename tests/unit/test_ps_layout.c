/* test_ps_layout.c - PServer placement: how dense parameters are cut into
 * blocks and spread over servers, and how sparse keys are sharded.  The
 * trainer and every server rely on computing the same answer. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "fl_ps_layout.h"

START_TEST(test_split) {
  /* 10 floats in blocks of 4: 4 + 4 + 2; 3 floats: one block; 8: 4 + 4. */
  const uint64_t numel[] = {10, 3, 8};
  fl_ps_layout *l;
  ck_assert_int_eq(fl_ps_layout_build(numel, 3, 4, 1, &l), 0);
  ck_assert_uint_eq(l->n_blocks, 6);
  ck_assert_uint_eq(l->first_block[0], 0);
  ck_assert_uint_eq(l->first_block[1], 3);
  ck_assert_uint_eq(l->first_block[2], 4);
  ck_assert_uint_eq(l->first_block[3], 6);
  ck_assert_uint_eq(l->blocks[0].offset, 0);
  ck_assert_uint_eq(l->blocks[1].offset, 4);
  ck_assert_uint_eq(l->blocks[2].offset, 8);
  ck_assert_uint_eq(l->blocks[2].n, 2);
  ck_assert_uint_eq(l->blocks[3].param, 1);
  ck_assert_uint_eq(l->blocks[3].n, 3);
  ck_assert_uint_eq(l->blocks[5].offset, 4);
  ck_assert_uint_eq(l->blocks[5].n, 4);
  /* Every element of every parameter is in exactly one block. */
  for (size_t p = 0; p < 3; p++) {
    uint64_t covered = 0;
    for (size_t b = l->first_block[p]; b < l->first_block[p + 1]; b++) {
      ck_assert_uint_eq(l->blocks[b].param, p);
      ck_assert_uint_eq(l->blocks[b].offset, covered);
      covered += l->blocks[b].n;
    }
    ck_assert_uint_eq(covered, numel[p]);
  }
  fl_ps_layout_free(l);
}
END_TEST

START_TEST(test_placement_greedy) {
  /* Blocks 4,4,2 | 3 | 4,4 over 2 servers, each to the lighter one:
   * 4->s0, 4->s1, 2->s0 (4<=4: lowest index), 3->s0? s0=6,s1=4 -> s1,
   * then s0=6,s1=7 -> 4 to s0, then s0=10,s1=7 -> 4 to s1. */
  const uint64_t numel[] = {10, 3, 8};
  const int want[] = {0, 1, 0, 1, 0, 1};
  fl_ps_layout *l;
  ck_assert_int_eq(fl_ps_layout_build(numel, 3, 4, 2, &l), 0);
  for (int b = 0; b < 6; b++) ck_assert_int_eq(l->blocks[b].server, want[b]);
  ck_assert_uint_eq(l->server_load[0], 10);
  ck_assert_uint_eq(l->server_load[1], 11);
  fl_ps_layout_free(l);
}
END_TEST

START_TEST(test_placement_balanced_and_deterministic) {
  /* An MLP-like model (weights and biases) over 3 servers: loads differ by
   * at most one block, and building it again gives the same placement. */
  const uint64_t numel[] = {784 * 256, 256, 256 * 128, 128, 128 * 10, 10};
  fl_ps_layout *a, *b;
  uint64_t mx = 0, mn = UINT64_MAX;
  ck_assert_int_eq(fl_ps_layout_build(numel, 6, 16384, 3, &a), 0);
  ck_assert_int_eq(fl_ps_layout_build(numel, 6, 16384, 3, &b), 0);
  ck_assert(fl_ps_layout_equal(a, b));
  ck_assert_uint_eq(a->n_blocks, b->n_blocks);
  for (size_t i = 0; i < a->n_blocks; i++) {
    ck_assert_int_eq(a->blocks[i].server, b->blocks[i].server);
    ck_assert_uint_le(a->blocks[i].n, 16384);
  }
  for (int s = 0; s < 3; s++) {
    if (a->server_load[s] > mx) mx = a->server_load[s];
    if (a->server_load[s] < mn) mn = a->server_load[s];
  }
  ck_assert_uint_le(mx - mn, 16384);
  fl_ps_layout_free(a);
  fl_ps_layout_free(b);
}
END_TEST

START_TEST(test_layout_equal_and_bad) {
  const uint64_t x[] = {5, 6}, y[] = {5, 7}, zero[] = {5, 0};
  fl_ps_layout *a, *b, *c;
  ck_assert_int_eq(fl_ps_layout_build(x, 2, 4, 2, &a), 0);
  ck_assert_int_eq(fl_ps_layout_build(y, 2, 4, 2, &b), 0);
  ck_assert_int_eq(fl_ps_layout_build(x, 2, 4, 3, &c), 0);
  ck_assert(!fl_ps_layout_equal(a, b));
  ck_assert(!fl_ps_layout_equal(a, c));
  fl_ps_layout_free(a);
  fl_ps_layout_free(b);
  fl_ps_layout_free(c);
  ck_assert_int_ne(fl_ps_layout_build(zero, 2, 4, 2, &a), 0);
  ck_assert_ptr_null(a);
  ck_assert_int_ne(fl_ps_layout_build(x, 2, 0, 2, &a), 0);
  ck_assert_int_ne(fl_ps_layout_build(x, 2, 4, 0, &a), 0);
  ck_assert_int_ne(fl_ps_layout_build(x, 0, 4, 2, &a), 0);
}
END_TEST

START_TEST(test_key_sharding) {
  /* Every key maps into range, the same way every time, and 100k
   * consecutive ids spread evenly (within 5%) over 4 servers. */
  size_t count[4] = {0};
  for (uint64_t k = 0; k < 100000; k++) {
    int s = fl_ps_key_server(k, 4);
    ck_assert_int_ge(s, 0);
    ck_assert_int_lt(s, 4);
    ck_assert_int_eq(s, fl_ps_key_server(k, 4));
    count[s]++;
  }
  for (int s = 0; s < 4; s++) {
    ck_assert_uint_gt(count[s], 23750);
    ck_assert_uint_lt(count[s], 26250);
  }
  for (uint64_t k = 0; k < 1000; k++) ck_assert_int_eq(fl_ps_key_server(k * 7919, 1), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_layout");
  TCase *tc = tcase_create("layout");
  tcase_add_test(tc, test_split);
  tcase_add_test(tc, test_placement_greedy);
  tcase_add_test(tc, test_placement_balanced_and_deterministic);
  tcase_add_test(tc, test_layout_equal_and_bad);
  tcase_add_test(tc, test_key_sharding);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
