/* test_data.c - the trainer's data layer: IDX and sparse text readers (good
 * files and every documented error, with the file and offset or line in the
 * message), synthetic generators, sharding, shuffle determinism and the
 * prefetching loader, with and without augmentation. */
#include <config.h>

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_data.h"
#include "log_capture.h"

/* ------------------------------------------------------------- helpers */

static char g_dir[256];

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_data.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  g_dir[0] = '\0';
}

static void path_in_dir(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

static void write_gz(const char *path, const void *data, size_t len) {
  gzFile f = gzopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(gzwrite(f, data, (unsigned)len), (int)len);
  ck_assert_int_eq(gzclose(f), Z_OK);
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* An IDX image file of n rows x cols images with pixel (i, j) = (i*7+j)%256,
 * and a label file with label i % classes. */
static size_t make_images(unsigned char *buf, uint32_t n, uint32_t rows, uint32_t cols) {
  put_be32(buf, 0x00000803u);
  put_be32(buf + 4, n);
  put_be32(buf + 8, rows);
  put_be32(buf + 12, cols);
  size_t dim = (size_t)rows * cols;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < dim; j++) buf[16 + i * dim + j] = (unsigned char)((i * 7 + j) % 256);
  return 16 + n * dim;
}

static size_t make_labels(unsigned char *buf, uint32_t n, int classes) {
  put_be32(buf, 0x00000801u);
  put_be32(buf + 4, n);
  for (size_t i = 0; i < n; i++) buf[8 + i] = (unsigned char)(i % (size_t)classes);
  return 8 + n;
}

static unsigned char g_img[16 + 20 * 6 * 5 + 64];
static unsigned char g_lbl[8 + 20 + 64];
static size_t g_img_len, g_lbl_len;

static void make_pair(void) {
  g_img_len = make_images(g_img, 20, 6, 5);
  g_lbl_len = make_labels(g_lbl, 20, 10);
}

/* Load files written from the given images/labels buffers; returns the
 * status and leaves the captured log in *log. */
static fl_status load_files(const void *img, size_t img_len, const void *lbl, size_t lbl_len,
                            int gz, size_t limit, fl_dataset *d, char **log) {
  char ip[300], lp[300];
  path_in_dir(ip, sizeof ip, gz ? "img.gz" : "img");
  path_in_dir(lp, sizeof lp, gz ? "lbl.gz" : "lbl");
  if (gz) {
    write_gz(ip, img, img_len);
    write_gz(lp, lbl, lbl_len);
  } else {
    write_file(ip, img, img_len);
    write_file(lp, lbl, lbl_len);
  }
  capture_begin();
  fl_status st = fl_idx_load(ip, lp, 10, limit, d);
  *log = capture_end();
  return st;
}

/* ------------------------------------------------------------------ IDX */

START_TEST(idx_good_plain_and_gzip) {
  make_dir();
  make_pair();
  for (int gz = 0; gz < 2; gz++) {
    fl_dataset d;
    char *log;
    ck_assert_int_eq(load_files(g_img, g_img_len, g_lbl, g_lbl_len, gz, 0, &d, &log), FL_OK);
    ck_assert_uint_eq(d.n, 20);
    ck_assert_uint_eq(d.dim, 30);
    ck_assert_int_eq(d.height, 6);
    ck_assert_int_eq(d.width, 5);
    ck_assert_int_eq(d.channels, 1);
    for (size_t i = 0; i < 20; i++) {
      ck_assert_int_eq(d.y[i], (int)(i % 10));
      for (size_t j = 0; j < 30; j++)
        ck_assert_float_eq(d.x[i * 30 + j], (float)((i * 7 + j) % 256) / 255.0f);
    }
    fl_dataset_free(&d);
    ck_assert_ptr_null(d.x);
  }
  /* limit: only the prefix */
  fl_dataset d;
  char *log;
  ck_assert_int_eq(load_files(g_img, g_img_len, g_lbl, g_lbl_len, 1, 7, &d, &log), FL_OK);
  ck_assert_uint_eq(d.n, 7);
  ck_assert_int_eq(d.y[6], 6);
  fl_dataset_free(&d);
  remove_dir();
}
END_TEST

START_TEST(idx_truncated_data) {
  make_dir();
  make_pair();
  for (int gz = 0; gz < 2; gz++) {
    fl_dataset d;
    char *log;
    /* cut the image file 10 bytes short */
    ck_assert_int_eq(load_files(g_img, g_img_len - 10, g_lbl, g_lbl_len, gz, 0, &d, &log),
                     FL_EPROTO);
    ck_assert_ptr_nonnull(strstr(log, gz ? "img.gz" : "img"));
    ck_assert_ptr_nonnull(strstr(log, "truncated image data"));
    char want[64];
    snprintf(want, sizeof want, "at offset %zu", g_img_len - 10);
    ck_assert_msg(strstr(log, want) != NULL, "log: %s", log);
    ck_assert_ptr_null(d.x);
  }
  /* a header cut in the middle */
  fl_dataset d;
  char *log;
  ck_assert_int_eq(load_files(g_img, 10, g_lbl, g_lbl_len, 0, 0, &d, &log), FL_EPROTO);
  ck_assert_msg(strstr(log, "truncated header at offset 10") != NULL, "log: %s", log);
  remove_dir();
}
END_TEST

START_TEST(idx_truncated_gzip_stream) {
  make_dir();
  make_pair();
  char ip[300], lp[300], cut[300];
  path_in_dir(ip, sizeof ip, "img.gz");
  path_in_dir(lp, sizeof lp, "lbl.gz");
  path_in_dir(cut, sizeof cut, "cut.gz");
  write_gz(ip, g_img, g_img_len);
  write_gz(lp, g_lbl, g_lbl_len);
  /* copy all but the last 12 bytes of the compressed file */
  FILE *f = fopen(ip, "rb");
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  write_file(cut, buf, n - 12);
  fl_dataset d;
  capture_begin();
  fl_status st = fl_idx_load(cut, lp, 10, 0, &d);
  char *log = capture_end();
  ck_assert_int_eq(st, FL_EPROTO);
  ck_assert_msg(strstr(log, "cut.gz") && strstr(log, "offset"), "log: %s", log);
  remove_dir();
}
END_TEST

START_TEST(idx_wrong_magic) {
  make_dir();
  make_pair();
  fl_dataset d;
  char *log;
  /* labels file given as images */
  ck_assert_int_eq(load_files(g_lbl, g_lbl_len, g_lbl, g_lbl_len, 0, 0, &d, &log), FL_EPROTO);
  ck_assert_msg(strstr(log, "bad magic 0x00000801 at offset 0") != NULL, "log: %s", log);
  /* images file given as labels */
  ck_assert_int_eq(load_files(g_img, g_img_len, g_img, g_img_len, 1, 0, &d, &log), FL_EPROTO);
  ck_assert_msg(strstr(log, "lbl.gz: bad magic 0x00000803 at offset 0") != NULL, "log: %s", log);
  remove_dir();
}
END_TEST

START_TEST(idx_label_out_of_range) {
  make_dir();
  make_pair();
  g_lbl[8 + 13] = 10; /* classes are 0..9 */
  fl_dataset d;
  char *log;
  ck_assert_int_eq(load_files(g_img, g_img_len, g_lbl, g_lbl_len, 0, 0, &d, &log), FL_EINVAL);
  ck_assert_msg(strstr(log, "lbl: label 10 of sample 13 at offset 21 is out of range") != NULL,
                "log: %s", log);
  ck_assert_ptr_null(d.y);
  remove_dir();
}
END_TEST

START_TEST(idx_count_mismatch_and_trailing) {
  make_dir();
  make_pair();
  fl_dataset d;
  char *log;
  unsigned char lbl[64];
  size_t ll = make_labels(lbl, 19, 10);
  ck_assert_int_eq(load_files(g_img, g_img_len, lbl, ll, 0, 0, &d, &log), FL_EINVAL);
  ck_assert_msg(strstr(log, "20 images (count at offset 4)") && strstr(log, "19 labels"),
                "log: %s", log);
  /* trailing garbage after the label data */
  memcpy(lbl, g_lbl, g_lbl_len);
  lbl[g_lbl_len] = 0xff;
  ck_assert_int_eq(load_files(g_img, g_img_len, lbl, g_lbl_len + 1, 0, 0, &d, &log), FL_EPROTO);
  char want[80];
  snprintf(want, sizeof want, "unexpected bytes after the data at offset %zu", g_lbl_len);
  ck_assert_msg(strstr(log, want) != NULL, "log: %s", log);
  /* a zero dimension */
  unsigned char img[64];
  memcpy(img, g_img, 16);
  put_be32(img + 8, 0);
  ck_assert_int_eq(load_files(img, 16, g_lbl, g_lbl_len, 0, 0, &d, &log), FL_EPROTO);
  ck_assert_msg(strstr(log, "dimension 1 is 0 at offset 8") != NULL, "log: %s", log);
  remove_dir();
}
END_TEST

START_TEST(idx_missing_file_and_mem) {
  fl_dataset d;
  make_dir();
  char p[300];
  path_in_dir(p, sizeof p, "nope.gz");
  capture_begin();
  fl_status st = fl_idx_load(p, p, 10, 0, &d);
  char *log = capture_end();
  ck_assert_int_eq(st, FL_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(log, "nope.gz"));
  make_pair();
  ck_assert_int_eq(fl_idx_load_mem(g_img, g_img_len, "i", g_lbl, g_lbl_len, "l", 10, 0, &d),
                   FL_OK);
  ck_assert_uint_eq(d.n, 20);
  double mean, sd;
  fl_dataset_mean_std(&d, &mean, &sd);
  ck_assert(sd > 0);
  ck_assert_int_eq(fl_dataset_normalize(&d, mean, sd), FL_OK);
  fl_dataset_mean_std(&d, &mean, &sd);
  ck_assert_double_eq_tol(mean, 0.0, 1e-5);
  ck_assert_double_eq_tol(sd, 1.0, 1e-4);
  ck_assert_int_eq(fl_dataset_normalize(&d, 0, 0), FL_EINVAL);
  fl_dataset_free(&d);
  remove_dir();
}
END_TEST

START_TEST(idx_fashion_mnist) {
  const char *img = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  const char *lbl = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  if (access(img, R_OK) != 0 || access(lbl, R_OK) != 0) {
    fprintf(stderr, "idx_fashion_mnist: %s not installed, case not run\n", img);
    return;
  }
  fl_dataset d;
  ck_assert_int_eq(fl_idx_load(img, lbl, 10, 0, &d), FL_OK);
  ck_assert_uint_eq(d.n, 10000);
  ck_assert_uint_eq(d.dim, 784);
  size_t count[10] = {0};
  for (size_t i = 0; i < d.n; i++) count[d.y[i]]++;
  for (int c = 0; c < 10; c++) ck_assert_uint_eq(count[c], 1000); /* balanced test set */
  fl_dataset_free(&d);
}
END_TEST

/* --------------------------------------------------------------- sparse */

/* Field by field: the struct has padding, which memcmp would read. */
static void same_feats(const fl_sparse_feature *a, const fl_sparse_feature *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(a[i].slot, b[i].slot);
    ck_assert_uint_eq(a[i].id, b[i].id);
    ck_assert_float_eq(a[i].value, b[i].value);
  }
}

START_TEST(sparse_formats) {
  const char *svm = "1 3:0.5 17:2\n"
                    "# comment\n"
                    "\n"
                    "0 2:1:0.25 5:18446744073709551615:1e-3\n"
                    "-1\n";
  fl_sparse_dataset d;
  ck_assert_int_eq(fl_sparse_load_mem(svm, strlen(svm), "svm", FL_SPARSE_LIBSVM, &d), FL_OK);
  ck_assert_uint_eq(d.n, 3);
  ck_assert_float_eq(d.labels[0], 1.0f);
  ck_assert_float_eq(d.labels[2], -1.0f);
  ck_assert_uint_eq(d.offsets[1], 2);
  ck_assert_uint_eq(d.offsets[2], 4);
  ck_assert_uint_eq(d.offsets[3], 4);
  ck_assert_uint_eq(d.feats[1].id, 17);
  ck_assert_float_eq(d.feats[1].value, 2.0f);
  ck_assert_uint_eq(d.feats[0].slot, 0);
  ck_assert_uint_eq(d.feats[2].slot, 2);
  ck_assert_uint_eq(d.feats[2].id, 1);
  ck_assert_float_eq(d.feats[2].value, 0.25f);
  ck_assert_uint_eq(d.feats[3].id, UINT64_MAX);
  ck_assert_uint_eq(d.num_slots, 6);
  ck_assert_ptr_null(d.prob);
  fl_sparse_dataset_free(&d);

  const char *slots = "1 0:123456789012 1:42 25:7\r\n0 3:9";
  ck_assert_int_eq(fl_sparse_load_mem(slots, strlen(slots), "slots", FL_SPARSE_SLOT, &d), FL_OK);
  ck_assert_uint_eq(d.n, 2);
  ck_assert_uint_eq(d.feats[0].id, 123456789012ULL);
  ck_assert_uint_eq(d.feats[2].slot, 25);
  ck_assert_float_eq(d.feats[2].value, 1.0f);
  ck_assert_uint_eq(d.num_slots, 26);
  fl_sparse_dataset_free(&d);

  /* the same text from a gzip file */
  make_dir();
  char p[300];
  path_in_dir(p, sizeof p, "train.txt.gz");
  write_gz(p, svm, strlen(svm));
  ck_assert_int_eq(fl_sparse_load(p, FL_SPARSE_LIBSVM, &d), FL_OK);
  ck_assert_uint_eq(d.n, 3);
  ck_assert_uint_eq(d.feats[3].id, UINT64_MAX);
  fl_sparse_dataset_free(&d);
  remove_dir();
}
END_TEST

/* Parse text expecting status st and a message containing want. */
static void sparse_bad(const char *text, fl_sparse_format fmt, fl_status st, const char *want) {
  fl_sparse_dataset d;
  capture_begin();
  fl_status got = fl_sparse_load_mem(text, strlen(text), "bad.txt", fmt, &d);
  char *log = capture_end();
  ck_assert_int_eq(got, st);
  ck_assert_msg(strstr(log, want) != NULL, "want '%s' in log: %s", want, log);
  ck_assert_ptr_null(d.labels);
}

START_TEST(sparse_errors) {
  make_dir();
  sparse_bad("1 1:1\nx 2:3\n", FL_SPARSE_LIBSVM, FL_EPROTO,
             "bad.txt:2:1: expected a numeric label");
  sparse_bad("1 1:1\n0 2:3 4\n", FL_SPARSE_LIBSVM, FL_EPROTO, "bad.txt:2:7: expected idx:val");
  sparse_bad("1 1:abc\n", FL_SPARSE_LIBSVM, FL_EPROTO,
             "bad.txt:1:5: expected a finite float value");
  sparse_bad("1 1:inf\n", FL_SPARSE_LIBSVM, FL_EPROTO, "bad.txt:1:5");
  sparse_bad("1 -1:2\n", FL_SPARSE_LIBSVM, FL_EPROTO, "bad.txt:1:3: expected idx:val");
  sparse_bad("1 99999999999999999999:1\n", FL_SPARSE_LIBSVM, FL_EPROTO, "bad.txt:1:3");
  sparse_bad("\n\n1 3:1.5\n", FL_SPARSE_SLOT, FL_EPROTO,
             "bad.txt:3:5: expected an unsigned integer feasign");
  sparse_bad("1 70000:1\n", FL_SPARSE_SLOT, FL_EPROTO, "bad.txt:1:3: slot number too large");
  sparse_bad("# only a comment\n\n", FL_SPARSE_LIBSVM, FL_EINVAL, "bad.txt: no samples");
  fl_sparse_dataset d;
  char p[300];
  path_in_dir(p, sizeof p, "missing.txt");
  capture_begin();
  fl_status st = fl_sparse_load(p, FL_SPARSE_LIBSVM, &d);
  char *log = capture_end();
  ck_assert_int_eq(st, FL_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(log, "missing.txt"));
  /* a long file: the error names the right line */
  size_t cap = 200000, len = 0;
  char *big = malloc(cap);
  for (int i = 0; i < 5000; i++) len += (size_t)snprintf(big + len, cap - len, "1 %d:1\n", i);
  len += (size_t)snprintf(big + len, cap - len, "1 7:\n");
  path_in_dir(p, sizeof p, "big.txt");
  write_file(p, big, len);
  free(big);
  capture_begin();
  st = fl_sparse_load(p, FL_SPARSE_LIBSVM, &d);
  log = capture_end();
  ck_assert_int_eq(st, FL_EPROTO);
  ck_assert_msg(strstr(log, "big.txt:5001:5") != NULL, "log: %s", log);
  remove_dir();
}
END_TEST

/* ------------------------------------------------------------ synthetic */

START_TEST(synth_images_deterministic) {
  fl_synth_image_config c = {.n = 300, .channels = 1, .height = 8, .width = 8,
                             .num_classes = 4, .seed = 7};
  fl_dataset a, b, t;
  ck_assert_int_eq(fl_synth_images(&c, 0, &a), FL_OK);
  ck_assert_int_eq(fl_synth_images(&c, 0, &b), FL_OK);
  ck_assert_int_eq(fl_synth_images(&c, 1, &t), FL_OK);
  ck_assert_mem_eq(a.x, b.x, a.n * a.dim * sizeof(float));
  ck_assert_mem_eq(a.y, b.y, a.n * sizeof(int32_t));
  ck_assert(memcmp(a.x, t.x, a.n * a.dim * sizeof(float)) != 0);
  /* learnable: nearest class mean (from the train split) classifies the
   * test split far better than chance (0.25) */
  double mean[4][64] = {{0}};
  size_t cnt[4] = {0};
  for (size_t i = 0; i < a.n; i++) {
    ck_assert(a.y[i] >= 0 && a.y[i] < 4);
    cnt[a.y[i]]++;
    for (size_t j = 0; j < 64; j++) mean[a.y[i]][j] += a.x[i * 64 + j];
  }
  for (int k = 0; k < 4; k++)
    for (size_t j = 0; j < 64; j++) mean[k][j] /= (double)(cnt[k] ? cnt[k] : 1);
  size_t right = 0;
  for (size_t i = 0; i < t.n; i++) {
    int best = 0;
    double bd = 1e30;
    for (int k = 0; k < 4; k++) {
      double dd = 0;
      for (size_t j = 0; j < 64; j++) dd += (t.x[i * 64 + j] - mean[k][j]) * (t.x[i * 64 + j] - mean[k][j]);
      if (dd < bd) bd = dd, best = k;
    }
    right += best == t.y[i];
  }
  ck_assert_msg(right > t.n * 9 / 10, "nearest-mean accuracy %zu/%zu", right, t.n);
  fl_dataset_free(&a);
  fl_dataset_free(&b);
  fl_dataset_free(&t);
}
END_TEST

START_TEST(synth_ctr_signal) {
  fl_synth_ctr_config c = {.n = 20000, .num_slots = 6, .signal_slots = 3, .vocab = 50,
                           .weight_scale = 1.5f, .bias = -0.5f, .seed = 3};
  fl_sparse_dataset a, b;
  ck_assert_int_eq(fl_synth_ctr(&c, 0, &a), FL_OK);
  ck_assert_int_eq(fl_synth_ctr(&c, 0, &b), FL_OK);
  ck_assert_mem_eq(a.labels, b.labels, a.n * sizeof(float));
  same_feats(a.feats, b.feats, a.offsets[a.n]);
  ck_assert_uint_eq(a.num_slots, 6);
  /* ids: as documented, and distinct over (slot, index) */
  for (size_t i = 0; i < 100; i++) {
    for (uint32_t s = 0; s < 6; s++) {
      const fl_sparse_feature *f = &a.feats[a.offsets[i] + s];
      ck_assert_uint_eq(f->slot, s);
      int found = 0;
      for (uint32_t j = 0; j < c.vocab; j++) found += fl_synth_ctr_feature_id(&c, s, j) == f->id;
      ck_assert_int_eq(found, 1);
    }
  }
  /* labels follow prob: high-prob samples click more often */
  double hi = 0, hin = 0, lo = 0, lon = 0;
  for (size_t i = 0; i < a.n; i++) {
    if (a.prob[i] > 0.5f) hi += a.labels[i], hin++;
    else lo += a.labels[i], lon++;
  }
  ck_assert(hin > 1000 && lon > 1000);
  ck_assert_msg(hi / hin > lo / lon + 0.3, "click rate %.3f vs %.3f", hi / hin, lo / lon);
  fl_sparse_dataset_free(&a);
  fl_sparse_dataset_free(&b);
  c.signal_slots = 7;
  ck_assert_int_eq(fl_synth_ctr(&c, 0, &a), FL_EINVAL);
}
END_TEST

/* ------------------------------------------------------------- sharding */

START_TEST(shard_equal_and_disjoint) {
  for (int world = 1; world <= 4; world++) {
    for (int rem = 0; rem < 2; rem++) {
      size_t n = 103, bs = 5;
      unsigned seen[103] = {0};
      size_t batches0 = 0;
      for (int r = 0; r < world; r++) {
        fl_shard_spec s = {.n = n, .batch_size = bs, .rank = r, .world_size = world,
                           .seed = 11, .shuffle = 1, .remainder = (fl_remainder)rem};
        ck_assert_int_eq(fl_shard_check(&s), FL_OK);
        size_t b = fl_shard_batches(&s);
        if (r == 0) batches0 = b;
        ck_assert_uint_eq(b, batches0); /* same on every rank */
        size_t *idx = malloc(b * bs * sizeof *idx);
        ck_assert_int_eq(fl_shard_indices(&s, 2, idx), FL_OK);
        for (size_t i = 0; i < b * bs; i++) {
          ck_assert_uint_lt(idx[i], n);
          seen[idx[i]]++;
        }
        free(idx);
      }
      size_t total = 0, covered = 0;
      for (size_t i = 0; i < n; i++) total += seen[i], covered += seen[i] > 0;
      ck_assert_uint_eq(total, batches0 * bs * (size_t)world);
      if (rem == FL_REMAINDER_DROP) {
        ck_assert_uint_eq(batches0, n / (size_t)world / bs);
        for (size_t i = 0; i < n; i++) ck_assert_uint_le(seen[i], 1); /* disjoint */
      } else {
        ck_assert_uint_eq(covered, n); /* every sample at least once */
        for (size_t i = 0; i < n; i++) ck_assert_uint_le(seen[i], 2);
      }
    }
  }
  fl_shard_spec bad = {.n = 10, .batch_size = 4, .rank = 0, .world_size = 3, .seed = 1};
  ck_assert_int_eq(fl_shard_check(&bad), FL_EINVAL); /* 3 samples per rank < one batch */
  bad.remainder = FL_REMAINDER_WRAP;
  ck_assert_int_eq(fl_shard_check(&bad), FL_OK);
  bad.rank = 3;
  ck_assert_int_eq(fl_shard_check(&bad), FL_EINVAL);
}
END_TEST

/* An elastic resume: a world of 3 takes b batches, a world of 2 the rest
 * from the offset; no sample twice, and every sample but the dropped tail. */
START_TEST(shard_offset_new_world) {
  size_t n = 211, bs = 4, taken = 0;
  unsigned seen[211] = {0};
  int worlds[2] = {3, 2};
  for (int w = 0; w < 2; w++) {
    size_t first = 0;
    for (int r = 0; r < worlds[w]; r++) {
      fl_shard_spec s = {.n = n, .batch_size = bs, .rank = r, .world_size = worlds[w],
                         .seed = 9, .shuffle = 1, .offset = taken};
      size_t b = fl_shard_batches(&s), use = w == 0 ? 5 : b; /* the 3 stop after 5 */
      size_t *idx = malloc(b * bs * sizeof *idx);
      ck_assert_int_eq(fl_shard_indices(&s, 1, idx), FL_OK);
      for (size_t i = 0; i < use * bs; i++) seen[idx[i]]++;
      free(idx);
      first = use;
    }
    taken += first * bs * (size_t)worlds[w];
  }
  ck_assert_uint_eq(taken, 5 * 4 * 3 + (211 - 60) / 2 / 4 * 4 * 2);
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_le(seen[i], 1);
    total += seen[i];
  }
  ck_assert_uint_eq(total, taken);
  ck_assert_uint_gt(total, n - 2 * bs); /* only the tail of fewer than W*bs is dropped */
}
END_TEST

START_TEST(shuffle_deterministic) {
  fl_shard_spec s = {.n = 1000, .batch_size = 10, .rank = 0, .world_size = 1, .seed = 5,
                     .shuffle = 1};
  size_t a[1000], b[1000], c[1000];
  ck_assert_int_eq(fl_shard_permutation(&s, 3, a), FL_OK);
  s.rank = 0;
  ck_assert_int_eq(fl_shard_permutation(&s, 3, b), FL_OK);
  ck_assert_mem_eq(a, b, sizeof a); /* same (seed, epoch): same order */
  /* the permutation is the same whichever rank computes it */
  fl_shard_spec s2 = s;
  s2.world_size = 4;
  s2.rank = 3;
  ck_assert_int_eq(fl_shard_permutation(&s2, 3, c), FL_OK);
  ck_assert_mem_eq(a, c, sizeof a);
  ck_assert_int_eq(fl_shard_permutation(&s, 4, b), FL_OK);
  ck_assert(memcmp(a, b, sizeof a) != 0); /* another epoch: another order */
  s.seed = 6;
  ck_assert_int_eq(fl_shard_permutation(&s, 3, b), FL_OK);
  ck_assert(memcmp(a, b, sizeof a) != 0);
  /* a permutation: each index once */
  unsigned char seen[1000] = {0};
  for (int i = 0; i < 1000; i++) seen[a[i]]++;
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(seen[i], 1);
  s.shuffle = 0;
  ck_assert_int_eq(fl_shard_permutation(&s, 9, b), FL_OK);
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(b[i], (size_t)i);
}
END_TEST

/* --------------------------------------------------------------- loader */

START_TEST(loader_dense_order_and_restart) {
  make_dir();
  fl_synth_image_config c = {.n = 97, .channels = 1, .height = 3, .width = 2, .num_classes = 5,
                             .seed = 1};
  fl_dataset d;
  ck_assert_int_eq(fl_synth_images(&c, 0, &d), FL_OK);
  fl_shard_spec s = {.n = d.n, .batch_size = 4, .rank = 1, .world_size = 2, .seed = 9,
                     .shuffle = 1};
  size_t nb = fl_shard_batches(&s);
  size_t *idx = malloc(nb * 4 * sizeof *idx);
  for (size_t depth = 0; depth <= 3; depth += 3) {
    fl_loader *l;
    ck_assert_int_eq(fl_loader_create(&d, NULL, &s, depth, &l), FL_OK);
    ck_assert_uint_eq(fl_loader_batches(l), nb);
    for (int64_t epoch = 0; epoch < 2; epoch++) {
      ck_assert_int_eq(fl_shard_indices(&s, epoch, idx), FL_OK);
      ck_assert_int_eq(fl_loader_start(l, epoch, 0), FL_OK);
      for (size_t b = 0; b < nb; b++) {
        fl_batch bt;
        ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
        ck_assert_uint_eq(bt.index, b);
        ck_assert_int_eq(bt.epoch, epoch);
        ck_assert_uint_eq(bt.size, 4);
        for (size_t i = 0; i < 4; i++) {
          ck_assert_int_eq(bt.y[i], d.y[idx[b * 4 + i]]);
          ck_assert_mem_eq(bt.x + i * 6, d.x + idx[b * 4 + i] * 6, 6 * sizeof(float));
        }
      }
      fl_batch bt;
      capture_begin();
      ck_assert_int_eq(fl_loader_next(l, &bt), FL_ESTATE);
      capture_end();
    }
    /* restart in the middle of an epoch, with batches still queued */
    ck_assert_int_eq(fl_shard_indices(&s, 5, idx), FL_OK);
    ck_assert_int_eq(fl_loader_start(l, 5, 0), FL_OK);
    fl_batch bt;
    ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
    ck_assert_int_eq(fl_loader_start(l, 5, 7), FL_OK);
    ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
    ck_assert_uint_eq(bt.index, 7);
    ck_assert_int_eq(bt.y[0], d.y[idx[28]]);
    fl_loader_destroy(l);
  }
  free(idx);
  fl_dataset_free(&d);
  remove_dir();
}
END_TEST

START_TEST(loader_sparse) {
  make_dir();
  fl_synth_ctr_config c = {.n = 50, .num_slots = 3, .signal_slots = 1, .vocab = 10,
                           .weight_scale = 1, .seed = 2};
  fl_sparse_dataset d;
  ck_assert_int_eq(fl_synth_ctr(&c, 0, &d), FL_OK);
  fl_shard_spec s = {.n = d.n, .batch_size = 8, .rank = 0, .world_size = 3, .seed = 4,
                     .shuffle = 1, .remainder = FL_REMAINDER_WRAP};
  size_t nb = fl_shard_batches(&s);
  ck_assert_uint_eq(nb, 3); /* ceil(50/3)=17 samples -> 3 batches of 8 */
  size_t idx[24];
  ck_assert_int_eq(fl_shard_indices(&s, 0, idx), FL_OK);
  fl_loader *l;
  ck_assert_int_eq(fl_loader_create(NULL, &d, &s, 2, &l), FL_OK);
  ck_assert_int_eq(fl_loader_start(l, 0, 0), FL_OK);
  for (size_t b = 0; b < nb; b++) {
    fl_batch bt;
    ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
    ck_assert_ptr_null(bt.x);
    for (size_t i = 0; i < 8; i++) {
      size_t k = idx[b * 8 + i];
      ck_assert_float_eq(bt.sparse.labels[i], d.labels[k]);
      ck_assert_uint_eq(bt.sparse.offsets[i + 1] - bt.sparse.offsets[i], 3);
      same_feats(&bt.sparse.feats[bt.sparse.offsets[i]], &d.feats[d.offsets[k]], 3);
    }
  }
  fl_loader_destroy(l);
  capture_begin();
  ck_assert_int_eq(fl_loader_create(NULL, NULL, &s, 2, &l), FL_EINVAL);
  capture_end();
  fl_sparse_dataset_free(&d);
  remove_dir();
}
END_TEST

/* The pixel the augmentation must put at (c, i, j) for one draw (dy, dx,
 * flip) of the 2 x 4 x 5 test image whose pixel is 100c + 10i + j. */
static float aug_expect(int c, int i, int j, int dy, int dx, int flip, float fill) {
  int si = i + dy, sj = (flip ? 4 - j : j) + dx;
  return si < 0 || si >= 4 || sj < 0 || sj >= 5 ? fill : (float)(100 * c + 10 * si + sj);
}

START_TEST(augment_sample_geometry) {
  const fl_augment a = {.hflip = 1, .crop_padding = 2, .channels = 2, .height = 4, .width = 5,
                        .fill = -7.0f, .seed = 3};
  float x[40], again[40], scratch[40];
  int seen_flip[2] = {0, 0}, seen_dy[5] = {0}, seen_dx[5] = {0};
  for (size_t sample = 0; sample < 400; sample++) {
    for (int k = 0; k < 40; k++) x[k] = (float)(100 * (k / 20) + 10 * (k % 20 / 5) + k % 5);
    memcpy(again, x, sizeof x);
    fl_augment_sample(&a, 1, sample, x, scratch);
    fl_augment_sample(&a, 1, sample, again, scratch);
    ck_assert_mem_eq(x, again, sizeof x); /* a pure function of (seed, epoch, sample) */
    int found = 0;
    for (int dy = -2; dy <= 2 && !found; dy++)
      for (int dx = -2; dx <= 2 && !found; dx++)
        for (int f = 0; f < 2 && !found; f++) {
          int ok = 1;
          for (int k = 0; k < 40 && ok; k++)
            ok = x[k] == aug_expect(k / 20, k % 20 / 5, k % 5, dy, dx, f, -7.0f);
          if (ok) {
            found = 1;
            seen_flip[f]++;
            seen_dy[dy + 2]++;
            seen_dx[dx + 2]++;
          }
        }
    ck_assert_msg(found, "sample %zu: not a shift by at most 2 and an optional mirror", sample);
  }
  /* every draw happens: both flips about half the time, every offset */
  ck_assert_int_gt(seen_flip[0], 150);
  ck_assert_int_gt(seen_flip[1], 150);
  for (int k = 0; k < 5; k++) {
    ck_assert_int_gt(seen_dy[k], 40);
    ck_assert_int_gt(seen_dx[k], 40);
  }
}
END_TEST

START_TEST(loader_augment_deterministic) {
  make_dir();
  fl_synth_image_config c = {.n = 97, .channels = 2, .height = 4, .width = 3, .num_classes = 5,
                             .seed = 1};
  fl_dataset d;
  ck_assert_int_eq(fl_synth_images(&c, 0, &d), FL_OK);
  fl_shard_spec s = {.n = d.n, .batch_size = 4, .rank = 1, .world_size = 2, .seed = 9,
                     .shuffle = 1};
  const fl_augment a = {.hflip = 1, .crop_padding = 1, .channels = 2, .height = 4, .width = 3,
                        .fill = 0.0f, .seed = 5};
  size_t nb = fl_shard_batches(&s);
  size_t *idx = malloc(nb * 4 * sizeof *idx);
  float want[24], scratch[24];
  int changed = 0;
  ck_assert_int_eq(fl_shard_indices(&s, 2, idx), FL_OK);
  for (size_t depth = 0; depth <= 3; depth += 3) {
    fl_loader *l;
    ck_assert_int_eq(fl_loader_create(&d, NULL, &s, depth, &l), FL_OK);
    ck_assert_int_eq(fl_loader_set_augment(l, &a, "test"), FL_OK);
    /* from the start, and resumed at batch 5: the same bits either way */
    for (size_t first = 0; first <= 5; first += 5) {
      ck_assert_int_eq(fl_loader_start(l, 2, first), FL_OK);
      for (size_t b = first; b < nb; b++) {
        fl_batch bt;
        ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
        for (size_t i = 0; i < 4; i++) {
          memcpy(want, d.x + idx[b * 4 + i] * 24, sizeof want);
          fl_augment_sample(&a, 2, idx[b * 4 + i], want, scratch);
          ck_assert_mem_eq(bt.x + i * 24, want, sizeof want);
          changed += memcmp(want, d.x + idx[b * 4 + i] * 24, sizeof want) != 0;
        }
      }
    }
    fl_loader_destroy(l);
  }
  ck_assert_int_gt(changed, 0);
  /* refused: padding as large as the image, samples that are not images */
  fl_loader *l;
  ck_assert_int_eq(fl_loader_create(&d, NULL, &s, 0, &l), FL_OK);
  fl_augment bad = a;
  bad.crop_padding = 3;
  capture_begin();
  ck_assert_int_eq(fl_loader_set_augment(l, &bad, "pad.npy"), FL_EINVAL);
  bad = a;
  bad.height = 1;
  bad.width = 24;
  ck_assert_int_eq(fl_loader_set_augment(l, &bad, "flat.npy"), FL_EINVAL);
  bad = a;
  bad.channels = 1;
  ck_assert_int_eq(fl_loader_set_augment(l, &bad, "shape.npy"), FL_EINVAL);
  const char *log = capture_end();
  ck_assert_ptr_nonnull(strstr(log, "pad.npy: data.augment.random_crop_padding 3 must be below"));
  ck_assert_ptr_nonnull(strstr(log, "flat.npy: data.augment needs image samples"));
  ck_assert_ptr_nonnull(strstr(log, "shape.npy: samples of 24 values are not 1 x 4 x 3 images"));
  fl_loader_destroy(l);
  free(idx);
  fl_dataset_free(&d);
  remove_dir();
}
END_TEST

static Suite *data_suite(void) {
  Suite *s = suite_create("data");
  TCase *t = tcase_create("idx");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, idx_good_plain_and_gzip);
  tcase_add_test(t, idx_truncated_data);
  tcase_add_test(t, idx_truncated_gzip_stream);
  tcase_add_test(t, idx_wrong_magic);
  tcase_add_test(t, idx_label_out_of_range);
  tcase_add_test(t, idx_count_mismatch_and_trailing);
  tcase_add_test(t, idx_missing_file_and_mem);
  tcase_add_test(t, idx_fashion_mnist);
  suite_add_tcase(s, t);
  t = tcase_create("sparse");
  tcase_add_test(t, sparse_formats);
  tcase_add_test(t, sparse_errors);
  suite_add_tcase(s, t);
  t = tcase_create("synthetic");
  tcase_add_test(t, synth_images_deterministic);
  tcase_add_test(t, synth_ctr_signal);
  suite_add_tcase(s, t);
  t = tcase_create("shard");
  tcase_add_test(t, shard_equal_and_disjoint);
  tcase_add_test(t, shard_offset_new_world);
  tcase_add_test(t, shuffle_deterministic);
  tcase_add_test(t, loader_dense_order_and_restart);
  tcase_add_test(t, loader_sparse);
  tcase_add_test(t, augment_sample_geometry);
  tcase_add_test(t, loader_augment_deterministic);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(data_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
