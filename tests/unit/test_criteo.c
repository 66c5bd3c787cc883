/* test_criteo.c - the streaming Criteo TSV reader (trainer/data_criteo.c):
 * the hash and the log transform against hand-computed values, empty
 * fields, bad lines under both policies (file and line named), gzip, CRLF,
 * a file shorter than one batch, sharding over 2 and 3 ranks (every line
 * exactly once), the shuffle buffer's determinism per seed and epoch,
 * resume at the exact sample, and the generator script's output. */
#include <config.h>

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_data.h"
#include "log_capture.h"

static char g_dir[256];

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_criteo.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* A valid line for sample i: label i % 2, I1 = i, C1 = i in hex, the rest
 * fixed; eol "\n" or "\r\n". */
static int sample_line(char *buf, size_t cap, int i, const char *eol) {
  int n = snprintf(buf, cap, "%d\t%d", i % 2, i);
  for (int k = 1; k < 13; k++) n += snprintf(buf + n, cap - (size_t)n, "\t%d", k == 3 ? -k : k);
  n += snprintf(buf + n, cap - (size_t)n, "\t%08x", (unsigned)i);
  for (int c = 1; c < 26; c++) n += snprintf(buf + n, cap - (size_t)n, "\t%s", c == 5 ? "" : "a1b2c3d4");
  return n + snprintf(buf + n, cap - (size_t)n, "%s", eol);
}

/* Write lines first..first+count-1 into name (gzip when gz); its path in out. */
static void write_samples(char *out, const char *name, int first, int count, int gz) {
  char line[1024];
  snprintf(out, 300, "%s/%s", g_dir, name);
  FILE *f = gz ? NULL : fopen(out, "wb");
  gzFile z = gz ? gzopen(out, "wb") : NULL;
  for (int i = first; i < first + count; i++) {
    int n = sample_line(line, sizeof line, i, i % 3 == 0 ? "\r\n" : "\n");
    if (gz) ck_assert_int_eq(gzwrite(z, line, (unsigned)n), n);
    else ck_assert_uint_eq(fwrite(line, 1, (size_t)n, f), (size_t)n);
  }
  if (gz) ck_assert_int_eq(gzclose(z), Z_OK);
  else ck_assert_int_eq(fclose(f), 0);
}

static void write_text(char *out, const char *name, const char *text) {
  snprintf(out, 300, "%s/%s", g_dir, name);
  FILE *f = fopen(out, "wb");
  ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
  ck_assert_int_eq(fclose(f), 0);
}

static fl_criteo_reader *open_reader(const char *const *paths, size_t n, size_t bs, int rank,
                                     int world, size_t shuffle) {
  fl_criteo_options o = {.paths = paths, .n_paths = n, .batch_size = bs, .rank = rank,
                         .world_size = world, .seed = 42, .shuffle_buffer = shuffle};
  fl_criteo_reader *r;
  ck_assert_int_eq(fl_criteo_open(&o, &r), FL_OK);
  return r;
}

/* The I1 values (= sample numbers) of every sample of the epoch, in order. */
static size_t read_ids(fl_criteo_reader *r, int64_t epoch, int *ids, size_t cap) {
  fl_criteo_batch b;
  size_t n = 0;
  ck_assert_int_eq(fl_criteo_start(r, epoch), FL_OK);
  for (;;) {
    ck_assert_int_eq(fl_criteo_next(r, &b), FL_OK);
    if (b.size == 0) return n;
    for (size_t i = 0; i < b.size; i++) {
      ck_assert_uint_lt(n, cap);
      ids[n++] = (int)lround(expm1(b.dense[i * 13]));
    }
  }
}

START_TEST(test_hash_and_log) {
  ck_assert_uint_eq(fl_criteo_hash(0, 0, 0), 0x6220a8397b1dcdafULL);
  ck_assert_uint_eq(fl_criteo_hash(1, 0x68fd1e64u, 1), 0x37dfe84926ac4976ULL);
  ck_assert_uint_eq(fl_criteo_hash(25, 0, 1), 0x10c4defb22c26eafULL);
  ck_assert_uint_eq(fl_criteo_hash(2, 0xffffffffu, 1), 0x29604d64324ab2b8ULL);
  ck_assert_uint_ne(fl_criteo_hash(3, 0, 0), fl_criteo_hash(3, 0, 1));
  ck_assert_float_eq(fl_criteo_log1p(0), 0.0f);
  ck_assert_float_eq(fl_criteo_log1p(-7), 0.0f);
  ck_assert_float_eq(fl_criteo_log1p(1), (float)0.6931471805599453);
  ck_assert_float_eq(fl_criteo_log1p(1000), (float)6.90875477931522);
}
END_TEST

START_TEST(test_fields_and_empty) {
  char p[300], text[1200];
  make_dir();
  /* all integers and categoricals empty; then a normal line (CRLF) */
  int n = snprintf(text, sizeof text, "1");
  for (int k = 0; k < 39; k++) n += snprintf(text + n, sizeof text - (size_t)n, "\t");
  n += snprintf(text + n, sizeof text - (size_t)n, "\n");
  sample_line(text + n, sizeof text - (size_t)n, 1000, "\r\n");
  write_text(p, "f.tsv", text);
  const char *paths[] = {p};
  fl_criteo_reader *r = open_reader(paths, 1, 8, 0, 1, 0);
  fl_criteo_batch b;
  ck_assert_int_eq(fl_criteo_start(r, 0), FL_OK);
  ck_assert_int_eq(fl_criteo_next(r, &b), FL_OK);
  ck_assert_uint_eq(b.size, 2);
  ck_assert_float_eq(b.labels[0], 1.0f);
  ck_assert_int_eq(b.y[1], 0);
  for (int k = 0; k < 13; k++) ck_assert_float_eq(b.dense[k], 0.0f);
  for (uint32_t c = 0; c < 26; c++) ck_assert_int_eq(b.sparse[c], (int64_t)fl_criteo_hash(c, 0, 0));
  ck_assert_float_eq(b.dense[13], fl_criteo_log1p(1000));
  ck_assert_float_eq(b.dense[13 + 3], 0.0f); /* -3 */
  ck_assert_float_eq(b.dense[13 + 4], fl_criteo_log1p(4));
  ck_assert_int_eq(b.sparse[26], (int64_t)fl_criteo_hash(0, 1000, 1));
  ck_assert_int_eq(b.sparse[26 + 5], (int64_t)fl_criteo_hash(5, 0, 0));
  ck_assert_int_eq(b.sparse[26 + 6], (int64_t)fl_criteo_hash(6, 0xa1b2c3d4u, 1));
  fl_batch fb;
  fl_criteo_as_batch(&b, 0, 0, &fb);
  ck_assert_uint_eq(fb.n_inputs, 2);
  ck_assert_ptr_eq(fb.inputs[1], b.sparse);
  fl_sparse_dataset sd = {0}; /* the CTR preset's form */
  ck_assert_int_eq(fl_criteo_append_sparse(&b, &sd), FL_OK);
  ck_assert_int_eq(fl_criteo_append_sparse(&b, &sd), FL_OK);
  ck_assert_uint_eq(sd.n, 4);
  ck_assert_uint_eq(sd.offsets[4], 4 * 39);
  ck_assert_uint_eq(sd.num_slots, 39);
  ck_assert_uint_eq(sd.feats[39 + 26].slot, 26); /* sample 1's I1 */
  ck_assert_float_eq(sd.feats[39 + 26].value, fl_criteo_log1p(1000));
  ck_assert_uint_eq(sd.feats[39 + 6].id, fl_criteo_hash(6, 0xa1b2c3d4u, 1));
  ck_assert_float_eq(sd.labels[2], 1.0f);
  fl_sparse_dataset_free(&sd);
  ck_assert_int_eq(fl_criteo_next(r, &b), FL_OK);
  ck_assert_uint_eq(b.size, 0);
  fl_criteo_close(r);
  remove_dir();
}
END_TEST

START_TEST(test_bad_lines) {
  char p[300], good[1024], text[4096];
  make_dir();
  sample_line(good, sizeof good, 7, "\n");
  snprintf(text, sizeof text, "%s%s%s", good, "1\t2\t3\n", good);
  write_text(p, "bad.tsv", text);
  const char *paths[] = {p};
  fl_criteo_reader *r = open_reader(paths, 1, 4, 0, 1, 0);
  fl_criteo_batch b;
  ck_assert_int_eq(fl_criteo_start(r, 0), FL_OK);
  capture_begin();
  fl_status st = fl_criteo_next(r, &b);
  char *log = capture_end();
  ck_assert_int_eq(st, FL_EPROTO);
  char want[400];
  snprintf(want, sizeof want, "%s:2: fewer than 40", p);
  ck_assert_msg(strstr(log, want), "log lacks '%s': %s", want, log);
  fl_criteo_close(r);
  /* skip: lines 1 (bad hex) and 3 (not an integer) are counted and skipped */
  snprintf(text, sizeof text, "%s%s", good, good);
  char *q = strstr(text, "00000007");
  q[0] = 'x';
  strcat(text, "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t1.5\t13");
  for (int c = 0; c < 26; c++) strcat(text, "\tab");
  strcat(text, "\n");
  strcat(text, good);
  write_text(p, "bad.tsv", text);
  fl_criteo_options o = {.paths = paths, .n_paths = 1, .batch_size = 4, .world_size = 1,
                         .bad_lines = FL_CRITEO_SKIP};
  ck_assert_int_eq(fl_criteo_open(&o, &r), FL_OK);
  ck_assert_int_eq(fl_criteo_start(r, 0), FL_OK);
  capture_begin();
  st = fl_criteo_next(r, &b);
  log = capture_end();
  ck_assert_int_eq(st, FL_OK);
  ck_assert_uint_eq(b.size, 2);
  snprintf(want, sizeof want, "%s:1: a categorical", p);
  ck_assert_msg(strstr(log, want), "log lacks '%s': %s", want, log);
  snprintf(want, sizeof want, "%s:3: an integer", p);
  ck_assert_msg(strstr(log, want), "log lacks '%s': %s", want, log);
  fl_criteo_pos pos;
  fl_criteo_tell(r, &pos);
  ck_assert_uint_eq(pos.skipped, 2);
  ck_assert_uint_eq(pos.line, 4);
  fl_criteo_close(r);
  remove_dir();
}
END_TEST

/* gzip, a file shorter than one batch, several files in a row. */
START_TEST(test_gzip_and_short) {
  char p1[300], p2[300];
  int ids[64];
  make_dir();
  write_samples(p1, "a.tsv.gz", 0, 5, 1);
  write_samples(p2, "b.tsv", 5, 3, 0);
  const char *paths[] = {p1, p2};
  fl_criteo_reader *r = open_reader(paths, 1, 16, 0, 1, 0);
  ck_assert_uint_eq(read_ids(r, 0, ids, 64), 5); /* one short batch */
  for (int i = 0; i < 5; i++) ck_assert_int_eq(ids[i], i);
  fl_criteo_close(r);
  r = open_reader(paths, 2, 3, 0, 1, 0);
  ck_assert_uint_eq(read_ids(r, 0, ids, 64), 8);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(ids[i], i);
  fl_criteo_close(r);
  /* a rank with no line at all is refused */
  r = open_reader(paths, 1, 4, 7, 8, 0);
  fl_criteo_batch b;
  ck_assert_int_eq(fl_criteo_start(r, 0), FL_OK);
  ck_assert_int_eq(fl_criteo_next(r, &b), FL_EINVAL);
  fl_criteo_close(r);
  remove_dir();
}
END_TEST

START_TEST(test_sharding) {
  char p1[300], p2[300];
  int ids[128], seen[101];
  make_dir();
  write_samples(p1, "a.tsv", 0, 60, 0);
  write_samples(p2, "b.tsv.gz", 60, 41, 1);
  const char *paths[] = {p1, p2};
  for (int w = 2; w <= 3; w++) {
    memset(seen, 0, sizeof seen);
    for (int rank = 0; rank < w; rank++) {
      fl_criteo_reader *r = open_reader(paths, 2, 7, rank, w, rank == 1 ? 16 : 0);
      size_t n = read_ids(r, 3, ids, 128);
      ck_assert_uint_eq(n, (size_t)((101 - rank + w - 1) / w));
      for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(ids[i] % w, rank);
        seen[ids[i]]++;
      }
      fl_criteo_close(r);
    }
    for (int i = 0; i < 101; i++) ck_assert_int_eq(seen[i], 1);
  }
  remove_dir();
}
END_TEST

START_TEST(test_shuffle_determinism) {
  char p[300];
  int a[256], b[256], c[256];
  make_dir();
  write_samples(p, "a.tsv", 0, 200, 0);
  const char *paths[] = {p};
  fl_criteo_reader *r = open_reader(paths, 1, 32, 0, 1, 50);
  size_t n = read_ids(r, 0, a, 256);
  ck_assert_uint_eq(n, 200);
  ck_assert_uint_eq(read_ids(r, 0, b, 256), 200);
  ck_assert_int_eq(memcmp(a, b, sizeof(int) * 200), 0); /* same epoch: same order */
  ck_assert_uint_eq(read_ids(r, 1, c, 256), 200);
  ck_assert_int_ne(memcmp(a, c, sizeof(int) * 200), 0); /* another epoch: another */
  int moved = 0, seen[200] = {0};
  for (int i = 0; i < 200; i++) {
    moved += a[i] != i;
    seen[a[i]]++;
  }
  for (int i = 0; i < 200; i++) ck_assert_int_eq(seen[i], 1);
  ck_assert_int_gt(moved, 150);
  fl_criteo_close(r);
  remove_dir();
}
END_TEST

/* Read k samples, save the position, reopen, continue: the rest equals an
 * uninterrupted read; with and without a shuffle buffer, plain and gzip. */
static void check_resume(const char *path, size_t shuffle, size_t k) {
  int whole[256], rest[256];
  const char *paths[] = {path};
  fl_criteo_reader *r = open_reader(paths, 1, 5, 1, 2, shuffle);
  size_t n = read_ids(r, 2, whole, 256);
  fl_criteo_batch b;
  ck_assert_int_eq(fl_criteo_start(r, 2), FL_OK);
  size_t done = 0;
  while (done < k) {
    ck_assert_int_eq(fl_criteo_next(r, &b), FL_OK);
    done += b.size;
  }
  fl_criteo_pos pos;
  fl_criteo_tell(r, &pos);
  fl_criteo_close(r);
  ck_assert_uint_eq(pos.emitted, done);
  r = open_reader(paths, 1, 5, 1, 2, shuffle);
  ck_assert_int_eq(fl_criteo_seek(r, &pos), FL_OK);
  size_t m = 0;
  for (;;) {
    ck_assert_int_eq(fl_criteo_next(r, &b), FL_OK);
    if (!b.size) break;
    for (size_t i = 0; i < b.size; i++) rest[m++] = (int)lround(expm1(b.dense[i * 13]));
  }
  ck_assert_uint_eq(done + m, n);
  ck_assert_int_eq(memcmp(whole + done, rest, m * sizeof(int)), 0);
  fl_criteo_close(r);
}

START_TEST(test_resume) {
  char p[300], z[300];
  make_dir();
  write_samples(p, "a.tsv", 0, 150, 0);
  write_samples(z, "a.tsv.gz", 0, 150, 1);
  check_resume(p, 0, 35);
  check_resume(z, 0, 35);
  check_resume(p, 20, 35);
  check_resume(z, 20, 70);
  remove_dir();
}
END_TEST

/* The generator writes files that parse (skipped without python3/numpy). */
START_TEST(test_generator) {
  const char *src = getenv("FL_SRCDIR");
  char cmd[1024], p[300];
  if (system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) return;
  make_dir();
  snprintf(p, sizeof p, "%s/gen.tsv.gz", g_dir);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/deploy/examples/recsys/gen_criteo.py --rows 2000 "
           "--seed 3 --gzip --out %s", src ? src : "..", p);
  ck_assert_int_eq(system(cmd), 0);
  const char *paths[] = {p};
  fl_criteo_reader *r = open_reader(paths, 1, 512, 0, 1, 0);
  fl_criteo_batch b;
  size_t n = 0;
  double clicks = 0;
  ck_assert_int_eq(fl_criteo_start(r, 0), FL_OK);
  do {
    ck_assert_int_eq(fl_criteo_next(r, &b), FL_OK);
    for (size_t i = 0; i < b.size; i++) clicks += b.labels[i];
    n += b.size;
  } while (b.size);
  ck_assert_uint_eq(n, 2000);
  ck_assert_double_gt(clicks / (double)n, 0.15);
  ck_assert_double_lt(clicks / (double)n, 0.35);
  fl_criteo_close(r);
  remove_dir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("criteo");
  TCase *tc = tcase_create("reader");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_hash_and_log);
  tcase_add_test(tc, test_fields_and_empty);
  tcase_add_test(tc, test_bad_lines);
  tcase_add_test(tc, test_gzip_and_short);
  tcase_add_test(tc, test_sharding);
  tcase_add_test(tc, test_shuffle_determinism);
  tcase_add_test(tc, test_resume);
  tcase_add_test(tc, test_generator);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
