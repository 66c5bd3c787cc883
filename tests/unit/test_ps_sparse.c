/* test_ps_sparse.c - the pserver's sparse table: seeded init on first
 * touch (in range, independent of arrival order), the per-row optimizers
 * against hand-computed values, LRU eviction at the row limit, and a
 * checkpoint round trip. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ps.h"

static fl_ps_table *make(const char *name, uint32_t dim, int64_t max_rows, fl_optim_kind kind,
                         float lr, uint64_t seed) {
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  memset(&o, 0, sizeof o);
  o.name = name;
  o.dim = dim;
  o.max_rows = max_rows;
  o.init_range = 0.5f;
  o.seed = seed;
  o.hp = fl_optim_hparams_default(kind);
  o.lr = lr;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_OK);
  return t;
}

START_TEST(test_init_seeded) {
  fl_ps_table *a = make("emb", 8, 100, FL_OPTIM_SGD, 0.1f, 7);
  fl_ps_table *b = make("emb", 8, 100, FL_OPTIM_SGD, 0.1f, 7);
  fl_ps_table *c = make("emb", 8, 100, FL_OPTIM_SGD, 0.1f, 8);
  uint64_t k1[] = {1, 2, 3}, k2[] = {3, 1, 2};
  float va[24], vb[24], vc[24];
  int differs = 0, spread = 0;

  ck_assert_int_eq(fl_ps_table_pull(a, k1, 3, va), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(b, k2, 3, vb), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(c, k1, 3, vc), FL_OK);
  /* Row of key 1 is the same whatever the order of first touches. */
  ck_assert_mem_eq(va, vb + 8, 8 * sizeof(float));
  ck_assert_mem_eq(va + 16, vb, 8 * sizeof(float));
  for (int i = 0; i < 24; i++) {
    ck_assert(va[i] >= -0.5f && va[i] <= 0.5f);
    differs |= va[i] != vc[i];
    spread |= fabsf(va[i]) > 0.1f;
  }
  ck_assert(differs); /* another seed, other rows */
  ck_assert(spread);  /* not all near zero */
  ck_assert_uint_eq(fl_ps_table_rows(a), 3);
  /* Pulling again returns the same rows and creates nothing. */
  ck_assert_int_eq(fl_ps_table_pull(a, k2, 3, vb), FL_OK);
  ck_assert_mem_eq(va, vb + 8, 8 * sizeof(float));
  ck_assert_uint_eq(fl_ps_table_rows(a), 3);
  fl_ps_table_free(a);
  fl_ps_table_free(b);
  fl_ps_table_free(c);
}
END_TEST

START_TEST(test_sgd_adagrad_adam_rows) {
  uint64_t key = 42;
  float w0[2], w[2], g[2] = {0.5f, -1.0f};
  fl_ps_table *sgd = make("s", 2, 10, FL_OPTIM_SGD, 0.1f, 1);
  fl_ps_table *ada = make("a", 2, 10, FL_OPTIM_ADAGRAD, 0.1f, 1);
  fl_ps_table *adam = make("m", 2, 10, FL_OPTIM_ADAM, 0.01f, 1);

  /* SGD: w -= lr*g, twice. */
  ck_assert_int_eq(fl_ps_table_pull(sgd, &key, 1, w0), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(sgd, &key, 1, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(sgd, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(sgd, key, w));
  for (int j = 0; j < 2; j++) ck_assert_float_eq_tol(w[j], w0[j] - 0.2f * g[j], 1e-6f);

  /* Adagrad: s = g^2 then 2g^2; w -= lr*g/(sqrt(s)+eps). */
  ck_assert_int_eq(fl_ps_table_pull(ada, &key, 1, w0), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(ada, &key, 1, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(ada, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(ada, key, w));
  for (int j = 0; j < 2; j++) {
    double s1 = (double)g[j] * g[j], s2 = 2 * s1;
    double want = w0[j] - 0.1 * g[j] / (sqrt(s1) + 1e-8) - 0.1 * g[j] / (sqrt(s2) + 1e-8);
    ck_assert_double_eq_tol(w[j], want, 1e-6);
  }

  /* Adam with per-row bias correction: after one step |dw| = lr exactly
   * (m_hat = g, v_hat = g^2), after a second step with the same g too. */
  ck_assert_int_eq(fl_ps_table_pull(adam, &key, 1, w0), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(adam, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(adam, key, w));
  for (int j = 0; j < 2; j++)
    ck_assert_double_eq_tol(w[j], w0[j] - 0.01 * (g[j] > 0 ? 1 : -1), 1e-6);
  ck_assert_int_eq(fl_ps_table_push(adam, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(adam, key, w));
  for (int j = 0; j < 2; j++)
    ck_assert_double_eq_tol(w[j], w0[j] - 0.02 * (g[j] > 0 ? 1 : -1), 1e-6);
  /* A second row starts its own bias correction at step 1. */
  {
    uint64_t k2 = 43;
    float v0[2], v[2];
    ck_assert_int_eq(fl_ps_table_pull(adam, &k2, 1, v0), FL_OK);
    ck_assert_int_eq(fl_ps_table_push(adam, &k2, 1, g), FL_OK);
    ck_assert(fl_ps_table_peek(adam, k2, v));
    for (int j = 0; j < 2; j++)
      ck_assert_double_eq_tol(v[j], v0[j] - 0.01 * (g[j] > 0 ? 1 : -1), 1e-6);
  }
  fl_ps_table_free(sgd);
  fl_ps_table_free(ada);
  fl_ps_table_free(adam);
}
END_TEST

START_TEST(test_push_creates_missing_row) {
  fl_ps_table *t = make("e", 4, 10, FL_OPTIM_SGD, 1.0f, 3);
  fl_ps_table *ref = make("e", 4, 10, FL_OPTIM_SGD, 1.0f, 3);
  uint64_t k = 9;
  float g[4] = {1, 2, 3, 4}, w[4], init[4];
  ck_assert_int_eq(fl_ps_table_push(t, &k, 1, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(ref, &k, 1, init), FL_OK);
  ck_assert(fl_ps_table_peek(t, k, w));
  for (int j = 0; j < 4; j++) ck_assert_float_eq_tol(w[j], init[j] - g[j], 1e-6f);
  fl_ps_table_free(t);
  fl_ps_table_free(ref);
}
END_TEST

START_TEST(test_eviction_lru) {
  /* Limit 4 rows: touch 1..4, then 1 and 2 again, then create 5 and 6:
   * 3 and 4 (unseen longest) go, 1 and 2 stay. */
  fl_ps_table *t = make("lru", 2, 4, FL_OPTIM_SGD, 0.1f, 1);
  uint64_t keys[] = {1, 2, 3, 4}, again[] = {1, 2}, fresh[] = {5, 6};
  float buf[8], row[2];
  ck_assert_int_eq(fl_ps_table_pull(t, keys, 4, buf), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(t, again, 2, buf), FL_OK);
  ck_assert_uint_eq(fl_ps_table_evicted(t), 0);
  ck_assert_int_eq(fl_ps_table_pull(t, fresh, 2, buf), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 4);
  ck_assert_uint_eq(fl_ps_table_evicted(t), 2);
  ck_assert(fl_ps_table_peek(t, 1, row));
  ck_assert(fl_ps_table_peek(t, 2, row));
  ck_assert(!fl_ps_table_peek(t, 3, row));
  ck_assert(!fl_ps_table_peek(t, 4, row));
  ck_assert(fl_ps_table_peek(t, 5, row));
  ck_assert(fl_ps_table_peek(t, 6, row));
  /* A push touches too: push 5, then create 7: 1 (now the oldest) goes. */
  {
    uint64_t k5 = 5, k7 = 7;
    float g[2] = {0, 0};
    ck_assert_int_eq(fl_ps_table_push(t, &k5, 1, g), FL_OK);
    ck_assert_int_eq(fl_ps_table_pull(t, &k7, 1, buf), FL_OK);
    ck_assert(!fl_ps_table_peek(t, 1, row));
    ck_assert(fl_ps_table_peek(t, 2, row));
    ck_assert(fl_ps_table_peek(t, 5, row));
  }
  ck_assert_uint_eq(fl_ps_table_evicted(t), 3);
  fl_ps_table_free(t);
}
END_TEST

START_TEST(test_eviction_many) {
  /* 50k keys through a 1000-row table: the hash stays consistent (every
   * one of the last 1000 keys present with its own init, none older). */
  fl_ps_table *t = make("big", 4, 1000, FL_OPTIM_ADAGRAD, 0.1f, 5);
  fl_ps_table *ref = make("big", 4, 100000, FL_OPTIM_ADAGRAD, 0.1f, 5);
  float v[4], w[4];
  for (uint64_t k = 0; k < 50000; k++) ck_assert_int_eq(fl_ps_table_pull(t, &k, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 1000);
  ck_assert_uint_eq(fl_ps_table_evicted(t), 49000);
  for (uint64_t k = 0; k < 50000; k++) {
    int present = fl_ps_table_peek(t, k, v);
    ck_assert_int_eq(present, k >= 49000);
    if (present) {
      ck_assert_int_eq(fl_ps_table_pull(ref, &k, 1, w), FL_OK);
      ck_assert_mem_eq(v, w, sizeof v);
    }
  }
  fl_ps_table_free(t);
  fl_ps_table_free(ref);
}
END_TEST

START_TEST(test_checkpoint_roundtrip) {
  char path[] = "/tmp/fl_test_sparse_XXXXXX";
  int fd = mkstemp(path);
  fl_ps_table *t = make("rt", 3, 5, FL_OPTIM_ADAM, 0.01f, 2);
  fl_ps_table *u = make("rt", 3, 5, FL_OPTIM_ADAM, 0.01f, 99);
  fl_ckpt_writer *w;
  fl_ckpt *ck;
  uint64_t keys[] = {10, 20, 30};
  float g[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, buf[9], a[3], b[3];

  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(fl_ps_table_pull(t, keys, 3, buf), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(t, keys, 3, g), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_open(path, &w), FL_OK);
  ck_assert_int_eq(fl_ps_table_save(t, w, "sparse/rt/"), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  ck_assert_int_eq(fl_ps_table_load(u, ck, "sparse/rt/"), FL_OK);
  fl_ckpt_free(ck);
  unlink(path);
  for (int i = 0; i < 3; i++) {
    ck_assert(fl_ps_table_peek(u, keys[i], a));
    ck_assert(fl_ps_table_peek(t, keys[i], b));
    ck_assert_mem_eq(a, b, sizeof a);
  }
  /* The optimizer state came along: the next step matches. */
  ck_assert_int_eq(fl_ps_table_push(t, keys, 3, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(u, keys, 3, g), FL_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert(fl_ps_table_peek(u, keys[i], a));
    ck_assert(fl_ps_table_peek(t, keys[i], b));
    ck_assert_mem_eq(a, b, sizeof a);
  }
  fl_ps_table_free(t);
  fl_ps_table_free(u);
}
END_TEST

START_TEST(test_bad_options) {
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  memset(&o, 0, sizeof o);
  o.name = "x";
  o.dim = 4;
  o.max_rows = 10;
  o.hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  o.lr = 0.1f;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL); /* momentum: not per row */
  o.hp = fl_optim_hparams_default(FL_OPTIM_SGD);
  o.dim = 0;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL);
  o.dim = 4;
  o.max_rows = 0;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL);
  ck_assert_ptr_null(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_sparse");
  TCase *tc = tcase_create("sparse");
  tcase_add_test(tc, test_init_seeded);
  tcase_add_test(tc, test_sgd_adagrad_adam_rows);
  tcase_add_test(tc, test_push_creates_missing_row);
  tcase_add_test(tc, test_eviction_lru);
  tcase_add_test(tc, test_eviction_many);
  tcase_add_test(tc, test_checkpoint_roundtrip);
  tcase_add_test(tc, test_bad_options);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
