/* test_ps_tier_policy.c - which rows the disk tier keeps in memory
 * (pserver.memory_budget; sparse.c's frequency-aware admission): rows
 * used often stay in memory while a scan of ids seen once passes through
 * (exact LRU would have demoted them all), and with memory no longer
 * holding just the most recent rows, eviction at max_rows and expiry still
 * take the least recent rows of both tiers: the same bits, the same
 * counts as a table all in memory. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_ps.h"
#include "fl_ps_layout.h"
#include "ps_testutil.h"
#include "tier_rocks.h"

#define DIM 8
#define BATCH 32

static fl_ps_table_opts opts(int64_t max_rows, int64_t expire) {
  fl_ps_table_opts o;
  memset(&o, 0, sizeof o);
  o.name = "emb";
  o.dim = DIM;
  o.max_rows = max_rows;
  o.init_range = 0.5f;
  o.seed = 5;
  o.hp = fl_optim_hparams_default(FL_OPTIM_ADAGRAD);
  o.lr = 0.05f;
  o.expire_after_steps = expire;
  return o;
}

/* A table of options o whose memory holds about hot_rows rows (a row's
 * cost measured on a table of one row first). */
static void make_tiered(pt_tiered *x, fl_ps_table_opts o, size_t hot_rows) {
  uint64_t key = 7;
  float out[DIM];
  pt_tiered_open(x, "fl_test_policy", o, 1 << 30);
  ck_assert_int_eq(fl_ps_table_pull(x->t, &key, 1, out), FL_OK);
  const uint64_t row = x->hot;
  fl_ps_table_free(x->t);
  o.tier = x->tier;
  o.hot_bytes = &x->hot;
  o.hot_budget = x->budget = hot_rows * row;
  ck_assert_int_eq(fl_ps_table_create(&o, &x->t), FL_OK);
}

static void grads(uint64_t seed, float *g, size_t n) {
  for (size_t i = 0; i < n; i++) g[i] = (float)((int)(fl_ps_mix64(seed + i) % 17) - 8) * 0.03f;
}

/* Pull and push keys[0..n) on t. */
static void step(fl_ps_table *t, const uint64_t *keys, size_t n, uint64_t seed) {
  static float out[BATCH * DIM], g[BATCH * DIM];
  grads(seed, g, n * DIM);
  ck_assert_int_eq(fl_ps_table_pull(t, keys, n, out), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(t, keys, n, g), FL_OK);
}

START_TEST(test_policy_hot_rows_survive_scan) {
  /* 60 rows in memory; 20 ids used in every batch, then a scan of 320
   * ids seen once: the 20 are still in memory after it. */
  pt_tiered x;
  uint64_t keys[BATCH];
  fl_ps_tier_stats a, b;
  make_tiered(&x, opts(1 << 20, 0), 60);
  for (int i = 0; i < 30; i++) {
    for (int j = 0; j < 20; j++) keys[j] = (uint64_t)j;
    for (int j = 20; j < BATCH; j++) keys[j] = 1000 + (uint64_t)(i * BATCH + j);
    step(x.t, keys, BATCH, (uint64_t)i);
  }
  for (int i = 0; i < 10; i++) {
    for (int j = 0; j < BATCH; j++) keys[j] = 100000 + (uint64_t)(i * BATCH + j);
    step(x.t, keys, BATCH, 100 + (uint64_t)i);
  }
  fl_ps_tier_get_stats(x.tier, &a);
  for (int j = 0; j < 20; j++) keys[j] = (uint64_t)j;
  step(x.t, keys, 20, 999);
  fl_ps_tier_get_stats(x.tier, &b);
  ck_assert_uint_le(b.promotions - a.promotions, 2);
  ck_assert_uint_gt(b.demotions, 300); /* the scan went to disk */
  pt_tiered_free(&x);
}
END_TEST

/* Batch b of a stream whose hot ids drift: ids [b/8 * 16, + 48) often,
 * 600 others seldom; repeats inside a batch. */
static void drift(int b, uint64_t *keys) {
  uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(b + 1);
  for (int i = 0; i < BATCH; i++) {
    s = fl_ps_mix64(s + (uint64_t)i);
    keys[i] = (s % 3) ? (uint64_t)(b / 8 * 16) + s % 48 : 5000 + (s >> 8) % 600;
  }
}

START_TEST(test_policy_evict_expire_same_bits) {
  /* max_rows 150 and expiry after 10 steps, 40 rows in memory: every
   * pull and the counts equal those of the table all in memory. */
  const int64_t expire[2] = {0, 10};
  for (int v = 0; v < 2; v++) {
    fl_ps_table_opts o = opts(150, expire[v]);
    fl_ps_table *mem = NULL;
    fl_ps_table_counts cm, ct;
    pt_tiered x;
    uint64_t keys[BATCH];
    static float pm[BATCH * DIM], pt[BATCH * DIM], g[BATCH * DIM];
    ck_assert_int_eq(fl_ps_table_create(&o, &mem), FL_OK);
    make_tiered(&x, o, 40);
    for (int b = 0; b < 160; b++) {
      drift(b, keys);
      grads((uint64_t)b, g, BATCH * DIM);
      ck_assert_int_eq(fl_ps_table_pull(mem, keys, BATCH, pm), FL_OK);
      ck_assert_int_eq(fl_ps_table_pull(x.t, keys, BATCH, pt), FL_OK);
      ck_assert_mem_eq(pm, pt, sizeof pm);
      ck_assert_int_eq(fl_ps_table_push(mem, keys, BATCH, g), FL_OK);
      ck_assert_int_eq(fl_ps_table_push(x.t, keys, BATCH, g), FL_OK);
      ck_assert_uint_eq(fl_ps_table_expire(mem, 0), fl_ps_table_expire(x.t, 0));
    }
    fl_ps_table_counts_of(mem, &cm);
    fl_ps_table_counts_of(x.t, &ct);
    ck_assert_uint_eq(ct.evicted, cm.evicted);
    ck_assert_uint_eq(ct.expired, cm.expired);
    ck_assert_uint_gt(v ? cm.expired : cm.evicted, 0);
    ck_assert_uint_eq(fl_ps_table_rows(x.t) + fl_ps_table_disk_rows(x.t), fl_ps_table_rows(mem));
    fl_ps_table_free(mem);
    pt_tiered_free(&x);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_tier_policy");
  TCase *tc = tcase_create("policy");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_policy_hot_rows_survive_scan);
  tcase_add_test(tc, test_policy_evict_expire_same_bits);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  int failed;
  srunner_run_all(r, CK_NORMAL);
  failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
