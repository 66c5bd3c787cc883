/* test_ps_tier_ckpt.c - the disk tier's checkpoint side, store level:
 * a delta's copy is one SST file holding exactly the rows demoted since
 * the marking checkpoint before (each once, as it is now) and the notes,
 * read as a copy and replayed over its base's copy to the live store's
 * rows and order, no scratch store left behind; a truncated or damaged
 * delta copy is refused by name; a delta copy of layout 1 (a RocksDB
 * store of its own, tests/fixtures/tier_delta_layout1, written by the
 * build before layout 2 with README.gen.c.txt there) still reads and
 * replays; the record of demoted rows a delta's copy is written from
 * drops the rows evicted or expired since and goes with each marking
 * checkpoint, all tables' in one file (one descriptor), and a record
 * that cannot be opened (no descriptor left) makes the next checkpoint a
 * base, no row lost; and a stale order key in the live store (a promotion's
 * removal that never reached the disk, the row demoted again) never makes
 * eviction or expiry take the row's newer copy. */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_testutil.h"
#include "tier_rocks.h"

#define TABLE 7
#define LEN 16

static void blob(uint64_t key, unsigned char *b) {
  for (int i = 0; i < LEN; i++) b[i] = (unsigned char)(key * 7 + (uint64_t)i);
}

static void put(fl_ps_tier *t, uint64_t key, uint64_t seq) {
  unsigned char b[LEN];
  blob(key, b);
  ck_assert_int_eq(fl_ps_tier_put_at(t, TABLE, key, b, LEN, seq), FL_OK);
}

static fl_ps_tier *open_store(const char *dir, const char *name) {
  char p[600];
  fl_ps_tier *t = NULL;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  ck_assert_int_eq(fl_ps_tier_open(p, 1 << 20, &t), FL_OK);
  return t;
}

/* The scratch directory dir (a mkdtemp template) made, base and delta
 * (PATH_CAP bytes each) the paths of copies there, and a live store
 * "live" opened there (the caller closes it). */
#define PATH_CAP 600
static fl_ps_tier *scratch(char *dir, char *base, char *delta) {
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(base, PATH_CAP, "%s/base", dir);
  snprintf(delta, PATH_CAP, "%s/delta", dir);
  return open_store(dir, "live");
}

/* How many entries dir holds (without . and ..). */
static int entries(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* t holds exactly the keys in want (n of them), each with its blob. */
static void holds(fl_ps_tier *t, const uint64_t *want, size_t n) {
  uint64_t keys[32];
  unsigned char rows[32 * LEN], b[LEN];
  size_t got = 0;
  ck_assert_int_eq(fl_ps_tier_scan(t, TABLE, 0, 0, 32, keys, rows, LEN, &got), FL_OK);
  ck_assert_uint_eq(got, n);
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(keys[i], want[i]);
    blob(want[i], b);
    ck_assert_mem_eq(rows + i * LEN, b, LEN);
  }
}

/* The keys evict_oldest takes from t, in order, into out (at most cap). */
static size_t evict_all(fl_ps_tier *t, uint64_t *out, size_t cap) {
  size_t n = 0;
  int found = 1;
  while (n < cap) {
    ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, UINT64_MAX, &out[n], &found), FL_OK);
    if (!found) break;
    n++;
  }
  return n;
}

static fl_status count_row(void *ctx, uint64_t key, const void *row, size_t len) {
  unsigned char b[LEN];
  blob(key, b);
  ck_assert_uint_eq(len, LEN);
  ck_assert_mem_eq(row, b, LEN);
  (*(int *)ctx)++;
  return FL_OK;
}

/* Rows 1..5 and a base; then 6..8 demoted, 2 promoted and demoted again
 * (twice: one row in the copy), 3 promoted: a delta. */
static void make_chain(fl_ps_tier *t, const char *base, const char *delta) {
  for (uint64_t k = 1; k <= 5; k++) put(t, k, k);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, base, 1), FL_OK);
  for (uint64_t k = 6; k <= 8; k++) put(t, k, 10 + k);
  ck_assert_int_eq(fl_ps_tier_drop(t, TABLE, 2, 2), FL_OK);
  put(t, 2, 20);
  ck_assert_int_eq(fl_ps_tier_drop(t, TABLE, 2, 20), FL_OK);
  put(t, 2, 21);
  ck_assert_int_eq(fl_ps_tier_drop(t, TABLE, 3, 3), FL_OK);
  ck_assert_int_eq(fl_ps_tier_put_note(t, TABLE, "note", 4), FL_OK);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, delta), FL_OK);
}

START_TEST(test_delta_copy_one_file) {
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX", base[PATH_CAP], delta[PATH_CAP];
  static const uint64_t all[] = {1, 2, 4, 5, 6, 7, 8}, order[] = {1, 4, 5, 6, 7, 8, 2};
  uint64_t keys[8], got[16];
  fl_ps_tier *t, *r, *c = NULL;
  void *note = NULL;
  size_t nl = 0;
  int n = 0;
  t = scratch(dir, base, delta);
  make_chain(t, base, delta);
  ck_assert_int_eq(entries(delta), 1); /* delta.sst alone */
  ck_assert_int_eq(fl_ps_tier_check_copy(delta), FL_OK);
  ck_assert_int_eq(fl_ps_tier_open_copy(delta, &c), FL_OK);
  for (uint64_t k = 1; k <= 8; k++) keys[k - 1] = k;
  ck_assert_int_eq(fl_ps_tier_copy_rows(c, TABLE, keys, 8, count_row, &n), FL_OK);
  ck_assert_int_eq(n, 4); /* 2, 6, 7, 8: the rows demoted since the base */
  fl_ps_tier_close(c);
  ck_assert_int_eq(entries(dir), 3); /* the scratch store went with the copy closed */
  r = open_store(dir, "restored");
  ck_assert_int_eq(fl_ps_tier_restore(r, base), FL_OK);
  ck_assert_int_eq(fl_ps_tier_remove_keys(r, TABLE, (const uint64_t[]){3}, 1), FL_OK);
  ck_assert_int_eq(fl_ps_tier_overlay(r, delta), FL_OK);
  fl_ps_tier_recount(r);
  holds(r, all, 7);
  holds(t, all, 7);
  ck_assert_uint_eq(fl_ps_tier_rows(r, TABLE), 7);
  ck_assert_uint_eq(fl_ps_tier_newest(r, TABLE), 21);
  ck_assert_int_eq(fl_ps_tier_get_note(r, TABLE, &note, &nl), FL_OK);
  ck_assert_uint_eq(nl, 4);
  ck_assert_mem_eq(note, "note", 4);
  free(note);
  ck_assert_uint_eq(evict_all(r, got, 16), 7);
  for (int i = 0; i < 7; i++) ck_assert_uint_eq(got[i], order[i]);
  fl_ps_tier_close(r);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

/* Copy the file from into to, the first keep bytes (all: -1), with the
 * byte at flip (-1: none) inverted. */
static void copy_file(const char *from, const char *to, long keep, long flip) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  long i = 0;
  int ch;
  ck_assert_ptr_nonnull(in);
  ck_assert_ptr_nonnull(out);
  while ((keep < 0 || i < keep) && (ch = fgetc(in)) != EOF) {
    fputc(i == flip ? ch ^ 0xff : ch, out);
    i++;
  }
  fclose(in);
  ck_assert_int_eq(fclose(out), 0);
}

START_TEST(test_delta_copy_damaged_refused) {
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX", base[PATH_CAP], delta[PATH_CAP], bad[600], f[700], g[700];
  struct stat sb;
  fl_ps_tier *t, *c = NULL;
  t = scratch(dir, base, delta);
  snprintf(bad, sizeof bad, "%s/bad", dir);
  make_chain(t, base, delta);
  fl_ps_tier_close(t);
  snprintf(f, sizeof f, "%s/delta.sst", delta);
  snprintf(g, sizeof g, "%s/delta.sst", bad);
  ck_assert_int_eq(stat(f, &sb), 0);
  ck_assert_int_eq(mkdir(bad, 0755), 0);
  copy_file(f, g, sb.st_size / 2, -1); /* truncated */
  ck_assert_int_eq(fl_ps_tier_check_copy(bad), FL_ECORRUPT);
  ck_assert_int_ne(fl_ps_tier_open_copy(bad, &c), FL_OK);
  ck_assert_ptr_null(c);
  copy_file(f, g, -1, 40); /* a byte of the first data block */
  ck_assert_int_eq(fl_ps_tier_check_copy(bad), FL_ECORRUPT);
  copy_file(f, g, -1, -1);
  ck_assert_int_eq(fl_ps_tier_check_copy(bad), FL_OK);
  ck_assert_int_eq(entries(dir), 4); /* base, delta, bad, live: no scratch left */
  pt_rm_tree(dir);
}
END_TEST

/* A copy of the layout 1 fixture (a store of its own: 6, 7, 8 at order
 * 16, 17, 18 and the note "note-v1") into dir/v1. */
static void fixture(const char *dir, char *out, size_t cap) {
  static const char *const files[] = {"000004.log", "000008.sst",      "CURRENT",
                                      "IDENTITY",   "MANIFEST-000005", "OPTIONS-000007"};
  const char *src = getenv("FL_SRCDIR");
  char a[700], b[700];
  snprintf(out, cap, "%s/v1", dir);
  ck_assert_int_eq(mkdir(out, 0755), 0);
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    snprintf(a, sizeof a, "%s/tests/fixtures/tier_delta_layout1/%s", src ? src : "..", files[i]);
    snprintf(b, sizeof b, "%s/%s", out, files[i]);
    copy_file(a, b, -1, -1);
  }
}

START_TEST(test_delta_copy_layout1_replays) {
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX", v1[600];
  static const uint64_t all[] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t keys[3] = {6, 7, 8}, got[16];
  fl_ps_tier *t, *c = NULL;
  void *note = NULL;
  size_t nl = 0;
  int n = 0;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  fixture(dir, v1, sizeof v1);
  ck_assert_int_eq(fl_ps_tier_check_copy(v1), FL_OK);
  ck_assert_int_eq(fl_ps_tier_open_copy(v1, &c), FL_OK);
  ck_assert_int_eq(fl_ps_tier_copy_rows(c, TABLE, keys, 3, count_row, &n), FL_OK);
  ck_assert_int_eq(n, 3);
  fl_ps_tier_close(c);
  t = open_store(dir, "live");
  for (uint64_t k = 1; k <= 5; k++) put(t, k, k);
  ck_assert_int_eq(fl_ps_tier_overlay(t, v1), FL_OK);
  fl_ps_tier_recount(t);
  holds(t, all, 8);
  ck_assert_int_eq(fl_ps_tier_get_note(t, TABLE, &note, &nl), FL_OK);
  ck_assert_uint_eq(nl, 7);
  ck_assert_mem_eq(note, "note-v1", 7);
  free(note);
  ck_assert_uint_eq(evict_all(t, got, 16), 8);
  for (uint64_t i = 0; i < 8; i++) ck_assert_uint_eq(got[i], i + 1);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

/* X (1) demoted at 10, Y (2) at 20, X promoted but the removal of its
 * copy never reached the disk, X demoted again at 30: the order key 10
 * is stale. */
static fl_ps_tier *stale_store(const char *dir) {
  fl_ps_tier *t = open_store(dir, "live");
  put(t, 1, 10);
  put(t, 2, 20);
  put(t, 1, 30);
  return t;
}

START_TEST(test_stale_order_key_evict) {
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX";
  uint64_t key = 0, seq = 0;
  unsigned char row[LEN], b[LEN];
  uint8_t found = 0;
  int f = 0;
  fl_ps_tier *t;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  t = stale_store(dir);
  ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, 25, &key, &f), FL_OK);
  ck_assert_int_eq(f, 1);
  ck_assert_uint_eq(key, 2); /* Y: X's copy is of 30 */
  ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, 25, &key, &f), FL_OK);
  ck_assert_int_eq(f, 0);
  ck_assert_int_eq(fl_ps_tier_get_many(t, TABLE, (const uint64_t[]){1}, 1, row, LEN, &found, &seq),
                   FL_OK);
  ck_assert_int_eq(found, 1);
  ck_assert_uint_eq(seq, 30);
  blob(1, b);
  ck_assert_mem_eq(row, b, LEN);
  ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, UINT64_MAX, &key, &f), FL_OK);
  ck_assert_int_eq(f, 1);
  ck_assert_uint_eq(key, 1);
  ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, UINT64_MAX, &key, &f), FL_OK);
  ck_assert_int_eq(f, 0);
  ck_assert_uint_eq(fl_ps_tier_rows(t, TABLE), 0);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

/* Expiry's verdict: every row is due; the keys seen, in order. */
typedef struct seen {
  uint64_t keys[8];
  int n;
} seen;

static int all_old(void *ctx, uint64_t key, const void *row) {
  seen *s = ctx;
  (void)row;
  ck_assert_int_lt(s->n, 8);
  s->keys[s->n++] = key;
  return 1;
}

START_TEST(test_stale_order_key_expire) {
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX";
  unsigned char row[LEN];
  seen s = {.n = 0};
  size_t n = 0;
  int all = 0, f = 0;
  uint64_t key;
  fl_ps_tier *t;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  t = stale_store(dir);
  ck_assert_int_eq(fl_ps_tier_expire(t, TABLE, row, LEN, all_old, &s, &n, &all), FL_OK);
  ck_assert_int_eq(all, 1);
  ck_assert_uint_eq(n, 2); /* Y, then X once, at its copy's order */
  ck_assert_int_eq(s.n, 2);
  ck_assert_uint_eq(s.keys[0], 2);
  ck_assert_uint_eq(s.keys[1], 1);
  ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, UINT64_MAX, &key, &f), FL_OK);
  ck_assert_int_eq(f, 0); /* no order key left */
  ck_assert_uint_eq(fl_ps_tier_rows(t, TABLE), 0);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

/* How many records of demoted rows (demoted.rec) dir holds. */
static int records(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, "demoted.rec") == 0;
  closedir(d);
  return n;
}

/* Only row 5 is old (expiry stops at the next). */
static int only_5_old(void *ctx, uint64_t key, const void *row) {
  (void)ctx;
  (void)row;
  return key == 5;
}

START_TEST(test_delta_copy_record) {
  /* Rows 1..3 at order 10..12, a base; then 4 at order 1, 5 at 2, 6 at 20
   * demoted: 4 evicted, 5 expired since (their removals in the record):
   * the delta's copy holds 6 alone.  The record goes with each marking
   * checkpoint; a store without deltas writes none. */
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX", base[PATH_CAP], delta[PATH_CAP], live[600], away[600];
  unsigned char row[LEN];
  uint64_t keys[6] = {1, 2, 3, 4, 5, 6}, key = 0;
  size_t n = 0;
  int all = 0, f = 0, got = 0;
  fl_ps_tier *t, *c = NULL;
  t = scratch(dir, base, delta);
  snprintf(live, sizeof live, "%s/live", dir);
  for (uint64_t k = 1; k <= 3; k++) put(t, k, 9 + k);
  ck_assert_int_eq(records(live), 1);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, base, 1), FL_OK);
  ck_assert_int_eq(records(live), 0);
  put(t, 4, 1);
  put(t, 5, 2);
  put(t, 6, 20);
  ck_assert_int_eq(fl_ps_tier_evict_oldest(t, TABLE, UINT64_MAX, &key, &f), FL_OK);
  ck_assert_int_eq(f, 1);
  ck_assert_uint_eq(key, 4);
  ck_assert_int_eq(fl_ps_tier_expire(t, TABLE, row, LEN, only_5_old, NULL, &n, &all), FL_OK);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, delta), FL_OK);
  ck_assert_int_eq(records(live), 0);
  ck_assert_int_eq(fl_ps_tier_open_copy(delta, &c), FL_OK);
  ck_assert_int_eq(fl_ps_tier_copy_rows(c, TABLE, keys, 6, count_row, &got), FL_OK);
  ck_assert_int_eq(got, 1);
  ck_assert_int_eq(fl_ps_tier_copy_rows(c, TABLE, keys + 5, 1, count_row, &got), FL_OK);
  ck_assert_int_eq(got, 2); /* the one is 6 */
  fl_ps_tier_close(c);
  fl_ps_tier_close(t);
  pt_rm_tree(live);
  t = open_store(dir, "live");
  fl_ps_tier_no_deltas(t);
  put(t, 1, 1);
  ck_assert_int_eq(fl_ps_tier_drop(t, TABLE, 1, 1), FL_OK);
  ck_assert_int_eq(records(live), 0);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 0);
  fl_ps_tier_close(t);
  /* A record that cannot be written (its directory gone meanwhile): no
   * delta until the next marking checkpoint. */
  pt_rm_tree(live);
  t = open_store(dir, "live");
  snprintf(away, sizeof away, "%s/away", dir);
  ck_assert_int_eq(rename(live, away), 0);
  put(t, 1, 1);
  ck_assert_int_eq(rename(away, live), 0);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 0);
  snprintf(delta, sizeof delta, "%s/delta2", dir);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, delta), FL_EIO);
  snprintf(base, sizeof base, "%s/base2", dir);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, base, 1), FL_OK);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 1);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

/* The rows of table tab in the copy c: keys ascending, each with its
 * blob; *n gets how many. */
static void copy_keys(fl_ps_tier *c, uint64_t tab, uint64_t *keys, size_t cap, size_t *n) {
  fl_ps_tier_cursor *cur = NULL;
  unsigned char b[LEN];
  const void *row;
  size_t len;
  uint64_t key;
  int more = 1;
  *n = 0;
  ck_assert_int_eq(fl_ps_tier_cursor_open(c, tab, &cur), FL_OK);
  for (;;) {
    ck_assert_int_eq(fl_ps_tier_cursor_next(cur, &key, &row, &len, &more), FL_OK);
    if (!more) break;
    ck_assert_uint_lt(*n, cap);
    ck_assert_uint_eq(len, LEN);
    blob(key, b);
    ck_assert_mem_eq(row, b, LEN);
    keys[(*n)++] = key;
  }
  fl_ps_tier_cursor_close(cur);
}

#define TABS 3
#define TAB_ROWS 5000 /* entries of 40 bytes: about three 64 KiB chunks a table */

START_TEST(test_delta_copy_tables) {
  /* Three tables demote TAB_ROWS rows each, interleaved, after a base;
   * every tenth row is promoted since.  One record file holds them all;
   * the delta's copy holds each table's rows still on disk, no other. */
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX", base[PATH_CAP], delta[PATH_CAP], live[600];
  unsigned char b[LEN];
  static uint64_t keys[TAB_ROWS];
  size_t n = 0;
  fl_ps_tier *t, *c = NULL;
  t = scratch(dir, base, delta);
  snprintf(live, sizeof live, "%s/live", dir);
  blob(0, b);
  for (uint64_t tab = 1; tab <= TABS; tab++)
    ck_assert_int_eq(fl_ps_tier_put_at(t, tab, 0, b, LEN, 1), FL_OK);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, base, 1), FL_OK);
  for (uint64_t k = 1; k <= TAB_ROWS; k++)
    for (uint64_t tab = 1; tab <= TABS; tab++) {
      blob(k, b);
      ck_assert_int_eq(fl_ps_tier_put_at(t, tab, k, b, LEN, 1 + k), FL_OK);
      if (k % 10 == 0) ck_assert_int_eq(fl_ps_tier_drop(t, tab, k, 1 + k), FL_OK);
    }
  ck_assert_int_eq(records(live), 1);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 1);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, delta), FL_OK);
  ck_assert_int_eq(records(live), 0);
  ck_assert_int_eq(fl_ps_tier_open_copy(delta, &c), FL_OK);
  for (uint64_t tab = 1; tab <= TABS; tab++) {
    uint64_t want = 1;
    copy_keys(c, tab, keys, TAB_ROWS, &n);
    ck_assert_uint_eq(n, TAB_ROWS - TAB_ROWS / 10);
    for (size_t i = 0; i < n; i++, want++) {
      if (want % 10 == 0) want++;
      ck_assert_uint_eq(keys[i], want);
    }
  }
  fl_ps_tier_close(c);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

/* The lowest descriptor free now: a limit of that many leaves none. */
static rlim_t lowest_free_fd(void) {
  int fd = dup(0);
  ck_assert_int_ge(fd, 0);
  close(fd);
  return (rlim_t)fd;
}

START_TEST(test_record_no_descriptor) {
  /* The record cannot be opened (no descriptor left): the demotion goes
   * on, the row is on disk, the next delta is refused and the checkpoint
   * after it is a base; then the record starts again. */
  char dir[] = "/tmp/fl_test_tckpt_XXXXXX", base[PATH_CAP], delta[PATH_CAP];
  unsigned char b[LEN], row[LEN];
  uint64_t key = 3;
  uint8_t found = 0;
  struct rlimit was, low;
  fl_ps_tier *t;
  t = scratch(dir, base, delta);
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
  low = was;
  low.rlim_cur = lowest_free_fd();
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
  blob(key, b);
  ck_assert_int_eq(fl_ps_tier_put_at(t, TABLE, key, b, LEN, 1), FL_OK);
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 0);
  ck_assert_int_eq(fl_ps_tier_get_many(t, TABLE, &key, 1, row, LEN, &found, NULL), FL_OK);
  ck_assert_int_eq(found, 1);
  ck_assert_mem_eq(row, b, LEN);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, delta), FL_EIO);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, base, 1), FL_OK);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 1);
  put(t, 4, 2);
  ck_assert_int_eq(fl_ps_tier_delta_ok(t), 1);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_tier_ckpt");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_delta_copy_one_file);
  tcase_add_test(tc, test_delta_copy_damaged_refused);
  tcase_add_test(tc, test_delta_copy_layout1_replays);
  tcase_add_test(tc, test_delta_copy_record);
  tcase_add_test(tc, test_delta_copy_tables);
  tcase_add_test(tc, test_record_no_descriptor);
  tcase_add_test(tc, test_stale_order_key_evict);
  tcase_add_test(tc, test_stale_order_key_expire);
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
