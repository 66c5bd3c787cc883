/* test_ps_tier_tables.c - one disk tier store of many tables (a pserver
 * of many sparse tables, 16 stripes each, is as many tables there): the
 * store once held at most 64.  Threads adding hundreds of tables at once,
 * while another reads the store's counters, each find every row of
 * theirs; a base copy and a delta copy of hundreds of tables restore
 * every row as it was at the delta; the record buffers of so many tables
 * share a bounded sum, and the memory the tables take is counted. */
#include <config.h>

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_testutil.h"
#include "tier_rocks.h"

#define LEN 24  /* a row's bytes */
#define ROWS 12 /* rows a table */

/* The row of key in table, version v. */
static void row_of(uint64_t table, uint64_t key, int v, unsigned char *row) {
  uint64_t x = table * 0x9e3779b97f4a7c15ULL ^ (key + 1) * 0xbf58476d1ce4e5b9ULL ^ (uint64_t)v;
  for (int i = 0; i < LEN; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
    row[i] = (unsigned char)(x >> 56);
}

/* Table i's id in the store (as sparse tables' stripes: hashes). */
static uint64_t table_id(int i) { return 0x5bd1e9955bd1e995ULL * (uint64_t)(i + 1) ^ 0xabcdefULL; }

/* Every row of table (keys 0..n), found with version want[key] (0: not
 * there) in one look-up. */
static void check_table(fl_ps_tier *t, uint64_t table, size_t n, const int *want) {
  uint64_t keys[64];
  unsigned char got[64][LEN], row[LEN];
  uint8_t found[64];
  ck_assert_uint_le(n, 64);
  for (size_t k = 0; k < n; k++) keys[k] = k;
  ck_assert_int_eq(fl_ps_tier_get_many(t, table, keys, n, got, LEN, found, NULL), FL_OK);
  for (size_t k = 0; k < n; k++) {
    ck_assert_uint_eq(found[k], want[k] != 0);
    if (!want[k]) continue;
    row_of(table, k, want[k], row);
    ck_assert_mem_eq(got[k], row, LEN);
  }
}

#define THREADS 4
#define PER_THREAD 150

typedef struct worker {
  fl_ps_tier *t;
  int first; /* its tables: first, first + THREADS, ... */
  atomic_int *stop;
} worker;

/* Its tables created one after the other (interleaved with the other
 * threads': the directory grows under every one), each filled with ROWS
 * rows and read back. */
static void *fill(void *arg) {
  worker *w = arg;
  int want[ROWS];
  unsigned char row[LEN];
  for (int k = 0; k < ROWS; k++) want[k] = 1;
  for (int i = 0; i < PER_THREAD; i++) {
    uint64_t id = table_id(w->first + i * THREADS);
    for (uint64_t k = 0; k < ROWS; k++) {
      row_of(id, k, 1, row);
      ck_assert_int_eq(fl_ps_tier_put(w->t, id, k, row, LEN), FL_OK);
    }
    check_table(w->t, id, ROWS, want);
  }
  return NULL;
}

/* The store's counters read (every table's) until told to stop. */
static void *watch(void *arg) {
  worker *w = arg;
  fl_ps_tier_stats s;
  while (!atomic_load(w->stop)) fl_ps_tier_get_stats(w->t, &s);
  return NULL;
}

START_TEST(test_tables_added_at_once) {
  char dir[] = "/tmp/fl_test_tier_tables_XXXXXX", p[600];
  pthread_t th[THREADS + 1];
  worker w[THREADS + 1];
  atomic_int stop = 0;
  fl_ps_tier_stats s;
  fl_ps_tier *t;
  int want[ROWS];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(p, sizeof p, "%s/store", dir);
  ck_assert_int_eq(fl_ps_tier_open(p, 4 << 20, &t), FL_OK);
  fl_ps_tier_no_deltas(t);
  for (int i = 0; i <= THREADS; i++) {
    w[i] = (worker){.t = t, .first = i, .stop = &stop};
    ck_assert_int_eq(pthread_create(&th[i], NULL, i < THREADS ? fill : watch, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
  atomic_store(&stop, 1);
  ck_assert_int_eq(pthread_join(th[THREADS], NULL), 0);
  fl_ps_tier_get_stats(t, &s);
  ck_assert_uint_eq(s.rows, THREADS * PER_THREAD * ROWS);
  for (int k = 0; k < ROWS; k++) want[k] = 1;
  for (int i = 0; i < THREADS * PER_THREAD; i++) {
    ck_assert_uint_eq(fl_ps_tier_rows(t, table_id(i)), ROWS);
    check_table(t, table_id(i), ROWS, want);
  }
  ck_assert_uint_eq(fl_ps_tier_rows(t, table_id(THREADS * PER_THREAD)), 0);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

#define TABLES 300
#define OLD 16 /* rows a table before the base */
#define NEW 8  /* rows a table added after it */

START_TEST(test_base_and_delta_of_many_tables) {
  char dir[] = "/tmp/fl_test_tier_tables_XXXXXX", p[600], base[600], delta[600];
  static int want[TABLES][OLD + NEW];
  unsigned char row[LEN];
  fl_ps_tier_stats s;
  fl_ps_tier *t, *r;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(p, sizeof p, "%s/store", dir);
  snprintf(base, sizeof base, "%s/base", dir);
  snprintf(delta, sizeof delta, "%s/delta", dir);
  ck_assert_int_eq(fl_ps_tier_open(p, 4 << 20, &t), FL_OK);
  for (int i = 0; i < TABLES; i++)
    for (int k = 0; k < OLD; k++) {
      row_of(table_id(i), (uint64_t)k, 1, row);
      ck_assert_int_eq(fl_ps_tier_put(t, table_id(i), (uint64_t)k, row, LEN), FL_OK);
      want[i][k] = 1;
    }
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, base, 1), FL_OK);
  /* After the base: the first quarter of each table's rows promoted and
   * demoted again changed, new rows added, a row promoted for good. */
  for (int i = 0; i < TABLES; i++) {
    uint64_t id = table_id(i), keys[OLD / 4 + 1], seqs[OLD / 4 + 1];
    unsigned char got[OLD / 4 + 1][LEN];
    uint8_t found[OLD / 4 + 1];
    for (int k = 0; k <= OLD / 4; k++) keys[k] = (uint64_t)k;
    ck_assert_int_eq(fl_ps_tier_get_many(t, id, keys, OLD / 4 + 1, got, LEN, found, seqs), FL_OK);
    for (int k = 0; k <= OLD / 4; k++) {
      ck_assert_uint_eq(found[k], 1);
      ck_assert_int_eq(fl_ps_tier_drop(t, id, keys[k], seqs[k]), FL_OK);
    }
    for (int k = 0; k < OLD / 4; k++) {
      row_of(id, (uint64_t)k, 2, row);
      ck_assert_int_eq(fl_ps_tier_put(t, id, (uint64_t)k, row, LEN), FL_OK);
      want[i][k] = 2;
    }
    want[i][OLD / 4] = 0;
    for (int k = OLD; k < OLD + NEW; k++) {
      row_of(id, (uint64_t)k, 2, row);
      ck_assert_int_eq(fl_ps_tier_put(t, id, (uint64_t)k, row, LEN), FL_OK);
      want[i][k] = 2;
    }
  }
  /* The tables' own memory counted, their record buffers sized down to a
   * share of a bounded sum (64 KiB each held 300 times 64 KiB). */
  fl_ps_tier_get_stats(t, &s);
  ck_assert_uint_gt(s.tables, TABLES * (size_t)(4 << 10));
  ck_assert_uint_lt(s.tables, TABLES * (size_t)(16 << 10));
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, delta), FL_OK);
  fl_ps_tier_close(t);
  /* A fresh store: the base, the delta over it.  The row promoted for good
   * is still the base's on disk (a pserver's load keeps its memory copy,
   * newer); every other row is as at the delta. */
  ck_assert_int_eq(fl_ps_tier_open(p, 4 << 20, &r), FL_OK);
  ck_assert_int_eq(fl_ps_tier_restore(r, base), FL_OK);
  ck_assert_int_eq(fl_ps_tier_overlay(r, delta), FL_OK);
  fl_ps_tier_recount(r);
  for (int i = 0; i < TABLES; i++) {
    want[i][OLD / 4] = 1;
    check_table(r, table_id(i), OLD + NEW, want[i]);
    ck_assert_uint_eq(fl_ps_tier_rows(r, table_id(i)), OLD + NEW);
  }
  fl_ps_tier_close(r);
  pt_rm_tree(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_tier_tables");
  TCase *tc = tcase_create("store");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_tables_added_at_once);
  tcase_add_test(tc, test_base_and_delta_of_many_tables);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
