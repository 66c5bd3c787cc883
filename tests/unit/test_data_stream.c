/* test_data_stream.c - the Criteo batch stream the training loop reads
 * (trainer/data_stream.c): globs expanded in name order after plain names,
 * the rank's samples counted at open, the two named inputs described for
 * a feed, labels as float targets or class ids, an epoch begun at a saved
 * position and by replaying equal to one read straight through, a bad
 * line reported at open under bad_lines stop, ranges of counted batches
 * (elastic chunks) that together hand out the epoch once. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_data.h"

static char g_dir[256];

/* n lines of sample i = first.. into DIR/name: label i % 2, I1 = i, the
 * other fields fixed or empty. */
static void write_file(const char *name, int first, int n) {
  char path[400];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  for (int i = first; i < first + n; i++) {
    fprintf(f, "%d\t%d", i % 2, i);
    for (int k = 1; k < 13; k++) fprintf(f, "\t%s", k == 4 ? "" : "3");
    for (int c = 0; c < 26; c++) fprintf(f, "\t%s", c == 2 ? "" : "00ab12cd");
    fputc('\n', f);
  }
  ck_assert_int_eq(fclose(f), 0);
}

static fl_stream *open_stream(const char *const *pat, size_t n, size_t shuffle, int ft,
                              fl_status *st) {
  const fl_stream_spec o = {.patterns = pat, .n_patterns = n, .dense_name = "d",
                            .sparse_name = "s", .batch_size = 4, .rank = 0, .world_size = 1,
                            .seed = 3, .shuffle_buffer = shuffle, .count = 1,
                            .float_targets = ft};
  fl_stream *s = NULL;
  *st = fl_stream_open(&o, &s);
  return s;
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_stream.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  write_file("b.tsv", 0, 5);   /* named first */
  write_file("p2.tsv", 20, 3); /* the glob's matches: p1 then p2 */
  write_file("p1.tsv", 10, 2);
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* The I1 values (sample numbers) of the next batch; its size. */
static size_t next_ids(fl_stream *s, int *ids) {
  fl_batch b;
  ck_assert_int_eq(fl_stream_next(s, &b), FL_OK);
  for (size_t i = 0; i < b.size; i++) {
    const float *d = (const float *)b.inputs[0] + i * FL_CRITEO_DENSE;
    ids[i] = (int)lroundf(expm1f(d[0]));
  }
  return b.size;
}

START_TEST(test_globs_count_inputs) {
  char p0[300], p1[300];
  snprintf(p0, sizeof p0, "%s/b.tsv", g_dir);
  snprintf(p1, sizeof p1, "%s/p*.tsv", g_dir);
  const char *pat[2] = {p0, p1};
  fl_status st;
  fl_stream *s = open_stream(pat, 2, 0, 1, &st);
  ck_assert_int_eq(st, FL_OK);
  ck_assert_uint_eq(fl_stream_samples(s), 10);
  const fl_dataset *d = fl_stream_inputs(s);
  ck_assert_uint_eq(d->n_inputs, 2);
  ck_assert_str_eq(d->inputs[0].name, "d");
  ck_assert_uint_eq(d->inputs[0].dim, 13);
  ck_assert_int_eq(d->inputs[0].elem, FL_DATA_F32);
  ck_assert_str_eq(d->inputs[1].name, "s");
  ck_assert_uint_eq(d->inputs[1].dim, 26);
  ck_assert_int_eq(d->inputs[1].elem, FL_DATA_I64);
  ck_assert_int_eq(fl_stream_start(s, 0, 0, 4, NULL), FL_OK);
  static const int want[10] = {0, 1, 2, 3, 4, 10, 11, 20, 21, 22};
  int ids[4];
  fl_batch b;
  size_t got = 0;
  for (size_t n; (n = next_ids(s, ids)) > 0; got += n)
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(ids[i], want[got + i]);
  ck_assert_uint_eq(got, 10);
  /* float targets: t set, y not */
  ck_assert_int_eq(fl_stream_start(s, 1, 0, 4, NULL), FL_OK);
  ck_assert_int_eq(fl_stream_next(s, &b), FL_OK);
  ck_assert_ptr_nonnull(b.t);
  ck_assert_ptr_null(b.y);
  ck_assert_float_eq(b.t[1], 1.0f);
  ck_assert_int_eq(b.epoch, 1);
  fl_stream_close(s);
  s = open_stream(pat, 1, 0, 0, &st);
  ck_assert_int_eq(fl_stream_start(s, 0, 0, 4, NULL), FL_OK);
  ck_assert_int_eq(fl_stream_next(s, &b), FL_OK);
  ck_assert_ptr_null(b.t);
  ck_assert_int_eq(b.y[3], 1);
  fl_stream_close(s);
}
END_TEST

/* Batches 2.. of an epoch: read straight through, begun at the position
 * after batch 2, and begun by replaying (no position): the same. */
START_TEST(test_resume_paths) {
  char p[300];
  write_file("big.tsv", 100, 40);
  snprintf(p, sizeof p, "%s/big.tsv", g_dir);
  const char *pat[1] = {p};
  for (size_t shuffle = 0; shuffle <= 8; shuffle += 8) {
    fl_status st;
    fl_stream *s = open_stream(pat, 1, shuffle, 1, &st);
    ck_assert_int_eq(st, FL_OK);
    int all[10][4], ids[4];
    fl_criteo_pos pos;
    ck_assert_int_eq(fl_stream_start(s, 2, 0, 4, NULL), FL_OK);
    for (int k = 0; k < 10; k++) {
      ck_assert_uint_eq(next_ids(s, all[k]), 4);
      if (k == 1) fl_stream_tell(s, &pos);
    }
    for (int way = 0; way < 2; way++) {
      ck_assert_int_eq(fl_stream_start(s, 2, 2, 4, way ? NULL : &pos), FL_OK);
      for (int k = 2; k < 10; k++) {
        ck_assert_uint_eq(next_ids(s, ids), 4);
        ck_assert_int_eq(memcmp(ids, all[k], sizeof ids), 0);
      }
    }
    fl_stream_close(s);
  }
}
END_TEST

START_TEST(test_bad_line_at_open) {
  char p[300];
  snprintf(p, sizeof p, "%s/bad.tsv", g_dir);
  FILE *f = fopen(p, "w");
  fputs("1\tnot a line\n", f);
  fclose(f);
  const char *pat[1] = {p};
  fl_status st;
  fl_stream *s = open_stream(pat, 1, 0, 1, &st);
  ck_assert_int_eq(st, FL_EPROTO);
  ck_assert_ptr_null(s);
  snprintf(p, sizeof p, "%s/none*.tsv", g_dir); /* a glob without a match: named missing */
  s = open_stream(pat, 1, 0, 1, &st);
  ck_assert_int_eq(st, FL_ENOTFOUND);
  ck_assert_ptr_null(s);
}
END_TEST

/* Ranges of batches across two files: in file order they tile the epoch's
 * full batches; with a shuffle buffer each is its own samples reordered;
 * a range past the counted batches is refused. */
START_TEST(test_ranges) {
  char p[300];
  write_file("r1.tsv", 0, 14);
  write_file("r2.tsv", 14, 16);
  snprintf(p, sizeof p, "%s/r*.tsv", g_dir);
  const char *pat[1] = {p};
  static const size_t cut[4] = {0, 2, 5, 7}; /* 30 samples: 7 full batches of 4 */
  for (size_t shuffle = 0; shuffle <= 8; shuffle += 8) {
    const fl_stream_spec o = {.patterns = pat, .n_patterns = 1, .dense_name = "d",
                              .sparse_name = "s", .batch_size = 4, .world_size = 1, .seed = 3,
                              .shuffle_buffer = shuffle, .count = 1, .marks = 1};
    fl_stream *s = NULL;
    ck_assert_int_eq(fl_stream_open(&o, &s), FL_OK);
    for (int r = 2; r >= 0; r--) { /* any order */
      int seen[28] = {0}, ids[4];
      ck_assert_int_eq(fl_stream_range(s, 1, cut[r], cut[r + 1]), FL_OK);
      for (size_t k = cut[r]; k < cut[r + 1]; k++) {
        ck_assert_uint_eq(next_ids(s, ids), 4);
        for (int i = 0; i < 4; i++) {
          ck_assert_int_ge(ids[i], (int)cut[r] * 4);
          ck_assert_int_lt(ids[i], (int)cut[r + 1] * 4);
          ck_assert_int_eq(seen[ids[i]]++, 0);
          if (!shuffle) ck_assert_int_eq(ids[i], (int)k * 4 + i);
        }
      }
      ck_assert_uint_eq(next_ids(s, ids), 0); /* the range's end */
    }
    ck_assert_int_eq(fl_stream_range(s, 1, 5, 8), FL_EINVAL);
    fl_stream_close(s);
  }
}
END_TEST

int main(void) {
  Suite *su = suite_create("data_stream");
  TCase *tc = tcase_create("stream");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_globs_count_inputs);
  tcase_add_test(tc, test_resume_paths);
  tcase_add_test(tc, test_bad_line_at_open);
  tcase_add_test(tc, test_ranges);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
