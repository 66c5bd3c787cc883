/* test_npy.c - the .npy reader and data.format npy: good files of every
 * accepted dtype and header variant (versions 1-3, quoting, key order,
 * unaligned payloads), every class of bad header, payloads too short or too
 * long, features/labels mismatches, each error naming the file; and the
 * loader feeding npy features (fp32 and uint8) with class ids or float
 * targets through the per-epoch shuffle. */
#include <config.h>

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_data.h"
#include "log_capture.h"

/* ------------------------------------------------------------- helpers */

static char g_dir[256];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_npy.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  g_dir[0] = '\0';
}

static const char *path_of(const char *name) {
  static char buf[4][300];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

/* A .npy file image: version major, the header text as given (padded with
 * `pad` spaces and a newline), then `payload` bytes of data.  Returns the
 * length written to buf. */
static size_t make_npy(unsigned char *buf, int major, const char *header, size_t pad,
                       const void *payload, size_t payload_len) {
  size_t pre = major == 1 ? 10 : 12, hl = strlen(header) + pad + 1;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  if (major != 1) buf[10] = buf[11] = 0;
  memcpy(buf + pre, header, strlen(header));
  memset(buf + pre + strlen(header), ' ', pad);
  buf[pre + hl - 1] = '\n';
  if (payload_len) memcpy(buf + pre + hl, payload, payload_len);
  return pre + hl + payload_len;
}

/* Write a hand-made file `name` and open it; returns the status and leaves
 * the log in *log. */
static fl_status open_made(const char *name, const unsigned char *img, size_t len, fl_npy **f,
                           char **log) {
  write_file(path_of(name), img, len);
  capture_begin();
  fl_status st = fl_npy_open(path_of(name), f);
  *log = capture_end();
  return st;
}

/* The header `header` (v1, 4 floats of payload) must be refused with
 * FL_EPROTO and a message naming the file and containing `want`. */
static void expect_bad_header(const char *name, const char *header, const char *want) {
  unsigned char img[512];
  float v[4] = {1, 2, 3, 4};
  size_t len = make_npy(img, 1, header, 3, v, sizeof v);
  fl_npy *f = (fl_npy *)1;
  char *log;
  ck_assert_int_eq(open_made(name, img, len, &f, &log), FL_EPROTO);
  ck_assert_ptr_null(f);
  ck_assert_msg(strstr(log, name) != NULL, "%s: log lacks the file name: %s", name, log);
  ck_assert_msg(strstr(log, want) != NULL, "%s: log lacks '%s': %s", name, want, log);
}

/* ------------------------------------------------------------ good files */

START_TEST(save_and_open_each_dtype) {
  float f4[6] = {0.5f, -1.0f, 2.25f, 3.0f, 1e-3f, -7.5f};
  uint8_t u1[6] = {0, 1, 127, 128, 254, 255};
  int64_t i8[6] = {0, 1, -2, 3, (int64_t)1 << 40, 9};
  int32_t i4[6] = {5, 4, 3, 2, 1, -1};
  const void *data[4] = {f4, u1, i8, i4};
  size_t es[4] = {4, 1, 8, 4};
  fl_npy_dtype dts[4] = {FL_NPY_F32, FL_NPY_U8, FL_NPY_I64, FL_NPY_I32};
  int64_t shape[2] = {2, 3};
  for (int k = 0; k < 4; k++) {
    char name[32];
    snprintf(name, sizeof name, "a_%s.npy", fl_npy_dtype_name(dts[k]));
    ck_assert_int_eq(fl_npy_save(path_of(name), dts[k], 2, shape, data[k]), FL_OK);
    fl_npy *f;
    ck_assert_int_eq(fl_npy_open(path_of(name), &f), FL_OK);
    ck_assert_int_eq(fl_npy_dtype_of(f), dts[k]);
    ck_assert_int_eq(fl_npy_ndim(f), 2);
    ck_assert_int_eq(fl_npy_shape(f)[0], 2);
    ck_assert_int_eq(fl_npy_shape(f)[1], 3);
    ck_assert_uint_eq(fl_npy_count(f), 6);
    ck_assert_uint_eq((uintptr_t)fl_npy_data(f) % es[k], 0);
    ck_assert_int_eq(memcmp(fl_npy_data(f), data[k], 6 * es[k]), 0);
    ck_assert_str_eq(fl_npy_name(f), path_of(name));
    fl_npy_close(f);
  }
  /* a 1-d and a 0-d array, and an empty one */
  int64_t s1[1] = {6};
  ck_assert_int_eq(fl_npy_save(path_of("v.npy"), FL_NPY_F32, 1, s1, f4), FL_OK);
  ck_assert_int_eq(fl_npy_save(path_of("s.npy"), FL_NPY_F32, 0, NULL, f4), FL_OK);
  int64_t s0[2] = {0, 3};
  ck_assert_int_eq(fl_npy_save(path_of("e.npy"), FL_NPY_F32, 2, s0, NULL), FL_OK);
  fl_npy *f;
  ck_assert_int_eq(fl_npy_open(path_of("v.npy"), &f), FL_OK);
  ck_assert_int_eq(fl_npy_ndim(f), 1);
  ck_assert_uint_eq(fl_npy_count(f), 6);
  fl_npy_close(f);
  ck_assert_int_eq(fl_npy_open(path_of("s.npy"), &f), FL_OK);
  ck_assert_int_eq(fl_npy_ndim(f), 0);
  ck_assert_uint_eq(fl_npy_count(f), 1);
  ck_assert(((float *)fl_npy_data(f))[0] == 0.5f);
  fl_npy_close(f);
  ck_assert_int_eq(fl_npy_open(path_of("e.npy"), &f), FL_OK);
  ck_assert_uint_eq(fl_npy_count(f), 0);
  fl_npy_close(f);
}
END_TEST

/* Header variants numpy (or another writer) produces: versions 2 and 3,
 * double quotes, other key orders, no trailing comma, Python 2's 3L, an
 * unaligned payload (copied to aligned memory), and the in-memory reader. */
START_TEST(header_variants) {
  static const struct {
    int major;
    const char *h;
    size_t pad;
  } cases[] = {
      {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", 5},
      {2, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", 5},
      {3, "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2,2)}", 0},
      {1, "{'shape': (2, 2), 'fortran_order': False, 'descr': '=i4'}", 1},
      {1, "{ 'descr' : '<i4' , 'fortran_order' : False , 'shape' : ( 2 , 2 , ) , }", 2},
      {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 2L), }", 3},
  };
  int32_t v[4] = {7, -8, 9, 1 << 30};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    unsigned char img[512];
    size_t len = make_npy(img, cases[k].major, cases[k].h, cases[k].pad, v, sizeof v);
    char name[32], *log;
    snprintf(name, sizeof name, "var%zu.npy", k);
    fl_npy *f;
    ck_assert_msg(open_made(name, img, len, &f, &log) == FL_OK, "case %zu: %s", k, log);
    ck_assert_int_eq(fl_npy_dtype_of(f), FL_NPY_I32);
    ck_assert_int_eq(fl_npy_ndim(f), 2);
    ck_assert_uint_eq((uintptr_t)fl_npy_data(f) % 4, 0);
    ck_assert_int_eq(memcmp(fl_npy_data(f), v, sizeof v), 0);
    fl_npy_close(f);
    ck_assert_int_eq(fl_npy_open_mem(img, len, name, &f), FL_OK);
    ck_assert_int_eq(memcmp(fl_npy_data(f), v, sizeof v), 0);
    fl_npy_close(f);
  }
}
END_TEST

/* ------------------------------------------------------------ bad files */

START_TEST(bad_headers) {
  expect_bad_header("b_notdict.npy", "['descr', '<f4']", "expected '{'");
  expect_bad_header("b_nodescr.npy", "{'fortran_order': False, 'shape': (4,), }",
                    "missing key 'descr'");
  expect_bad_header("b_noshape.npy", "{'descr': '<f4', 'fortran_order': False}",
                    "missing key 'shape'");
  expect_bad_header("b_nofortran.npy", "{'descr': '<f4', 'shape': (4,)}",
                    "missing key 'fortran_order'");
  expect_bad_header("b_unknown.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), "
                    "'extra': 1}", "unknown key 'extra'");
  expect_bad_header("b_dup.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                    "'shape': (4,)}", "duplicate key 'descr'");
  expect_bad_header("b_bigend.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (4,)}",
                    "unsupported .npy dtype '>f4'");
  expect_bad_header("b_f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}",
                    "unsupported .npy dtype '<f8'");
  expect_bad_header("b_struct.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, "
                    "'shape': (4,)}", "'descr' must be a dtype string");
  expect_bad_header("b_fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2)}",
                    "Fortran order");
  expect_bad_header("b_fbool.npy", "{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}",
                    "must be True or False");
  expect_bad_header("b_notuple.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4)}",
                    "is not a tuple");
  expect_bad_header("b_list.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': [4]}",
                    "'shape' must be a tuple");
  expect_bad_header("b_neg.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}",
                    "non-negative integer");
  expect_bad_header("b_9dims.npy", "{'descr': '<f4', 'fortran_order': False, "
                    "'shape': (1,1,1,1,1,1,1,1,4)}", "more than 8 dimensions");
  expect_bad_header("b_dimovf.npy", "{'descr': '<f4', 'fortran_order': False, "
                    "'shape': (99999999999999999999,)}", "dimension overflows");
  expect_bad_header("b_prodovf.npy", "{'descr': '<f4', 'fortran_order': False, "
                    "'shape': (4294967296, 4294967296, 4)}", "overflows the address space");
  expect_bad_header("b_after.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x",
                    "text after the dict");
  expect_bad_header("b_unterm.npy", "{'descr': '<f4", "unexpected character in a string");
  expect_bad_header("b_nocolon.npy", "{'descr' '<f4'}", "expected ':'");
  expect_bad_header("b_nocomma.npy", "{'descr': '<f4' 'shape': (4,)}", "expected ',' or '}'");
}
END_TEST

START_TEST(bad_prefix) {
  unsigned char img[512];
  float v[4] = {1, 2, 3, 4};
  fl_npy *f;
  char *log;
  size_t len = make_npy(img, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 3, v,
                        sizeof v);
  /* bad magic */
  img[1] = 'X';
  ck_assert_int_eq(open_made("p_magic.npy", img, len, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_magic.npy: not a .npy file"));
  img[1] = 'N';
  /* versions */
  img[6] = 4;
  ck_assert_int_eq(open_made("p_v4.npy", img, len, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_v4.npy: .npy format version 4.0 not supported"));
  img[6] = 1;
  img[7] = 1;
  ck_assert_int_eq(open_made("p_v11.npy", img, len, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_v11.npy: .npy format version 1.1"));
  img[7] = 0;
  /* shorter than magic + version, empty, missing */
  ck_assert_int_eq(open_made("p_short.npy", img, 5, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_short.npy: not a .npy file"));
  ck_assert_int_eq(open_made("p_empty.npy", img, 0, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_empty.npy"));
  ck_assert_int_eq(open_made("p_len.npy", img, 9, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_len.npy: file too short"));
  capture_begin();
  ck_assert_int_eq(fl_npy_open(path_of("p_missing.npy"), &f), FL_ENOTFOUND);
  log = capture_end();
  ck_assert_ptr_nonnull(strstr(log, "p_missing.npy: no such file"));
  /* header length past the end */
  unsigned char h2[64];
  memcpy(h2, img, 10);
  h2[8] = 0xff;
  h2[9] = 0x7f;
  ck_assert_int_eq(open_made("p_hlen.npy", h2, 40, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_hlen.npy: file too short: header length 32767"));
  /* payload one byte short, one byte long */
  ck_assert_int_eq(open_made("p_trunc.npy", img, len - 1, &f, &log), FL_EPROTO);
  ck_assert_msg(strstr(log, "p_trunc.npy: file too short: shape (4,) of f4 needs 16 payload "
                       "bytes, the file has 15") != NULL, "%s", log);
  unsigned char big[600];
  memcpy(big, img, len);
  big[len] = 0;
  ck_assert_int_eq(open_made("p_long.npy", big, len + 1, &f, &log), FL_EPROTO);
  ck_assert_ptr_nonnull(strstr(log, "p_long.npy: file too long"));
  /* a directory is not a file */
  capture_begin();
  ck_assert_int_eq(fl_npy_open(g_dir, &f), FL_EIO);
  log = capture_end();
  ck_assert_ptr_nonnull(strstr(log, "not a regular file"));
}
END_TEST

/* ------------------------------------------------------------ dataset */

#define N 10
#define D 6

/* Features where sample i holds i*D + j (fp32) or (i*D + j) % 256 (uint8),
 * labels i % 3 (int64 or int32) or float targets (2*i, -i). */
static void write_set(const char *xname, fl_npy_dtype xd, const char *yname, fl_npy_dtype yd) {
  float xf[N * D];
  uint8_t xu[N * D];
  for (int i = 0; i < N * D; i++) {
    xf[i] = (float)i;
    xu[i] = (uint8_t)(i % 256);
  }
  int64_t xs[3] = {N, 2, 3};
  ck_assert_int_eq(fl_npy_save(path_of(xname), xd, 3, xs, xd == FL_NPY_F32 ? (void *)xf : xu),
                   FL_OK);
  int64_t y8[N];
  int32_t y4[N];
  float yt[N * 2];
  for (int i = 0; i < N; i++) {
    y8[i] = i % 3;
    y4[i] = i % 3;
    yt[2 * i] = 2.0f * (float)i;
    yt[2 * i + 1] = -(float)i;
  }
  int64_t ys1[1] = {N}, ys2[2] = {N, 2};
  if (yd == FL_NPY_F32)
    ck_assert_int_eq(fl_npy_save(path_of(yname), yd, 2, ys2, yt), FL_OK);
  else
    ck_assert_int_eq(fl_npy_save(path_of(yname), yd, 1, ys1, yd == FL_NPY_I64 ? (void *)y8 : y4),
                     FL_OK);
}

START_TEST(load_class_ids) {
  fl_dataset d;
  write_set("x.npy", FL_NPY_F32, "y.npy", FL_NPY_I64);
  ck_assert_int_eq(fl_npy_load(path_of("x.npy"), path_of("y.npy"), 3, FL_NPY_DEFAULT_SCALE, 0, &d),
                   FL_OK);
  ck_assert_uint_eq(d.n, N);
  ck_assert_uint_eq(d.dim, D);
  ck_assert_int_eq(d.sample_ndim, 2);
  ck_assert_int_eq(d.sample_shape[0], 2);
  ck_assert_int_eq(d.sample_shape[1], 3);
  ck_assert_int_eq(d.channels, 1);
  ck_assert_int_eq(d.height, 2);
  ck_assert_int_eq(d.width, 3);
  ck_assert_ptr_nonnull(d.x);
  ck_assert_ptr_null(d.xq);
  ck_assert_ptr_null(d.t);
  for (int i = 0; i < N; i++) ck_assert_int_eq(d.y[i], i % 3);
  ck_assert(d.x[N * D - 1] == (float)(N * D - 1));
  ck_assert_ptr_eq(fl_dataset_rows(&d, 2, 1, NULL), d.x + 2 * D);
  fl_dataset_free(&d);
  ck_assert_ptr_null(d.x);

  /* uint8 features with a scale, int32 labels, a limit */
  write_set("xu.npy", FL_NPY_U8, "y4.npy", FL_NPY_I32);
  ck_assert_int_eq(fl_npy_load(path_of("xu.npy"), path_of("y4.npy"), 3, 0.5f, 4, &d), FL_OK);
  ck_assert_uint_eq(d.n, 4);
  ck_assert_ptr_null(d.x);
  ck_assert_ptr_nonnull(d.xq);
  float rows[2 * D];
  const float *r = fl_dataset_rows(&d, 1, 2, rows);
  ck_assert_ptr_eq(r, rows);
  for (int j = 0; j < 2 * D; j++) ck_assert(rows[j] == 0.5f * (float)(D + j));
  fl_dataset_free(&d);
}
END_TEST

START_TEST(load_float_targets) {
  fl_dataset d;
  write_set("x.npy", FL_NPY_F32, "t.npy", FL_NPY_F32);
  ck_assert_int_eq(fl_npy_load(path_of("x.npy"), path_of("t.npy"), 0, FL_NPY_DEFAULT_SCALE, 0, &d),
                   FL_OK);
  ck_assert_ptr_null(d.y);
  ck_assert_ptr_nonnull(d.t);
  ck_assert_uint_eq(d.tdim, 2);
  for (int i = 0; i < N; i++) {
    ck_assert(d.t[2 * i] == 2.0f * (float)i);
    ck_assert(d.t[2 * i + 1] == -(float)i);
  }
  fl_dataset_free(&d);
}
END_TEST

/* fl_npy_load must fail with `want` and the file `who` in the message. */
static void expect_load_error(const char *x, const char *y, int nc, float scale, fl_status code,
                              const char *who, const char *want) {
  fl_dataset d;
  memset(&d, 0xab, sizeof d);
  capture_begin();
  fl_status st = fl_npy_load(path_of(x), path_of(y), nc, scale, 0, &d);
  char *log = capture_end();
  ck_assert_msg(st == code, "%s/%s: status %d, log %s", x, y, st, log);
  ck_assert_ptr_null(d.x);
  ck_assert_ptr_null(d.y);
  ck_assert_uint_eq(d.n, 0);
  ck_assert_msg(strstr(log, path_of(who)) != NULL, "log lacks %s: %s", who, log);
  ck_assert_msg(strstr(log, want) != NULL, "log lacks '%s': %s", want, log);
}

START_TEST(load_mismatches) {
  write_set("x.npy", FL_NPY_F32, "y.npy", FL_NPY_I64);
  write_set("xu.npy", FL_NPY_U8, "t.npy", FL_NPY_F32);
  /* labels count differs from features count */
  int64_t s7[1] = {7};
  int64_t y7[7] = {0, 1, 2, 0, 1, 2, 0};
  ck_assert_int_eq(fl_npy_save(path_of("y7.npy"), FL_NPY_I64, 1, s7, y7), FL_OK);
  expect_load_error("x.npy", "y7.npy", 3, FL_NPY_DEFAULT_SCALE, FL_EINVAL, "y7.npy",
                    "has 10 samples but");
  /* a label out of range */
  expect_load_error("x.npy", "y.npy", 2, FL_NPY_DEFAULT_SCALE, FL_EINVAL, "y.npy",
                    "label 2 of sample 2 outside [0, 2)");
  /* labels of a dtype that is neither ids nor targets */
  int64_t s10[1] = {N};
  uint8_t yu[N] = {0};
  ck_assert_int_eq(fl_npy_save(path_of("yu.npy"), FL_NPY_U8, 1, s10, yu), FL_OK);
  expect_load_error("x.npy", "yu.npy", 3, FL_NPY_DEFAULT_SCALE, FL_EINVAL, "yu.npy", "got uint8");
  /* class ids of shape (n, 2) */
  int64_t s2[2] = {N / 2, 2};
  int64_t y2[N] = {0};
  ck_assert_int_eq(fl_npy_save(path_of("y2.npy"), FL_NPY_I64, 2, s2, y2), FL_OK);
  int64_t xs[2] = {N / 2, 2};
  float x5[N] = {0};
  ck_assert_int_eq(fl_npy_save(path_of("x5.npy"), FL_NPY_F32, 2, xs, x5), FL_OK);
  expect_load_error("x5.npy", "y2.npy", 3, FL_NPY_DEFAULT_SCALE, FL_EINVAL, "y2.npy",
                    "class ids must have shape (n,) or (n, 1)");
  /* features of an integer dtype */
  expect_load_error("y.npy", "y.npy", 3, FL_NPY_DEFAULT_SCALE, FL_EINVAL, "y.npy",
                    "features must be float32");
  /* a scale with float32 features */
  expect_load_error("x.npy", "y.npy", 3, 0.5f, FL_EINVAL, "x.npy", "applies to uint8 features");
  /* zero samples */
  int64_t s0[2] = {0, 3}, s00[1] = {0};
  ck_assert_int_eq(fl_npy_save(path_of("x0.npy"), FL_NPY_F32, 2, s0, NULL), FL_OK);
  ck_assert_int_eq(fl_npy_save(path_of("y0.npy"), FL_NPY_I64, 1, s00, NULL), FL_OK);
  expect_load_error("x0.npy", "y0.npy", 3, FL_NPY_DEFAULT_SCALE, FL_EINVAL, "x0.npy",
                    "no samples");
  /* a broken or missing file among the two */
  unsigned char img[256], zeros[40] = {0};
  size_t len = make_npy(img, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (10,)}", 3,
                        zeros, sizeof zeros);
  write_file(path_of("ytrunc.npy"), img, len);
  expect_load_error("xu.npy", "ytrunc.npy", 3, FL_NPY_DEFAULT_SCALE, FL_EPROTO, "ytrunc.npy",
                    "file too short");
  expect_load_error("nope.npy", "y.npy", 3, FL_NPY_DEFAULT_SCALE, FL_ENOTFOUND, "nope.npy",
                    "no such file");
  expect_load_error("x.npy", "nope.npy", 3, FL_NPY_DEFAULT_SCALE, FL_ENOTFOUND, "nope.npy",
                    "no such file");
}
END_TEST

/* The loader over npy data: every batch's features, class ids and float
 * targets belong to the same sample, uint8 features are scaled, and the
 * epoch's order is the shard permutation. */
START_TEST(loader_npy) {
  write_set("xu.npy", FL_NPY_U8, "t.npy", FL_NPY_F32);
  fl_dataset d;
  ck_assert_int_eq(fl_npy_load(path_of("xu.npy"), path_of("t.npy"), 0, 0.25f, 0, &d), FL_OK);
  for (size_t depth = 0; depth <= 2; depth += 2) {
    fl_shard_spec spec = {.n = N, .batch_size = 2, .rank = 1, .world_size = 2, .seed = 9,
                          .shuffle = 1, .remainder = FL_REMAINDER_DROP};
    fl_loader *l;
    ck_assert_int_eq(fl_loader_create(&d, NULL, &spec, depth, &l), FL_OK);
    size_t idx[4];
    ck_assert_uint_eq(fl_loader_batches(l), 2);
    ck_assert_int_eq(fl_shard_indices(&spec, 3, idx), FL_OK);
    ck_assert_int_eq(fl_loader_start(l, 3, 0), FL_OK);
    for (size_t b = 0; b < 2; b++) {
      fl_batch bt;
      ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
      ck_assert_ptr_null(bt.y);
      ck_assert_ptr_nonnull(bt.t);
      for (size_t i = 0; i < 2; i++) {
        size_t s = idx[b * 2 + i];
        ck_assert(bt.t[2 * i] == 2.0f * (float)s);
        ck_assert(bt.t[2 * i + 1] == -(float)s);
        for (size_t j = 0; j < D; j++) ck_assert(bt.x[i * D + j] == 0.25f * (float)(s * D + j));
      }
    }
    fl_loader_destroy(l);
  }
  fl_dataset_free(&d);

  write_set("x.npy", FL_NPY_F32, "y.npy", FL_NPY_I32);
  ck_assert_int_eq(fl_npy_load(path_of("x.npy"), path_of("y.npy"), 3, FL_NPY_DEFAULT_SCALE, 0, &d),
                   FL_OK);
  fl_shard_spec spec = {.n = N, .batch_size = 5, .rank = 0, .world_size = 1, .seed = 4,
                        .shuffle = 1, .remainder = FL_REMAINDER_DROP};
  fl_loader *l;
  ck_assert_int_eq(fl_loader_create(&d, NULL, &spec, 1, &l), FL_OK);
  ck_assert_int_eq(fl_loader_start(l, 0, 0), FL_OK);
  fl_batch bt;
  ck_assert_int_eq(fl_loader_next(l, &bt), FL_OK);
  ck_assert_ptr_null(bt.t);
  for (size_t i = 0; i < 5; i++) {
    size_t s = (size_t)bt.x[i * D] / D;
    ck_assert_int_eq(bt.y[i], (int)(s % 3));
  }
  fl_loader_destroy(l);
  fl_dataset_free(&d);
}
END_TEST

static Suite *npy_suite(void) {
  Suite *s = suite_create("npy");
  TCase *t = tcase_create("npy");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, save_and_open_each_dtype);
  tcase_add_test(t, header_variants);
  tcase_add_test(t, bad_headers);
  tcase_add_test(t, bad_prefix);
  tcase_add_test(t, load_class_ids);
  tcase_add_test(t, load_float_targets);
  tcase_add_test(t, load_mismatches);
  tcase_add_test(t, loader_npy);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(npy_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
