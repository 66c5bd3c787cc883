/* test_hostile.c - hostile input is refused with a status, not a crash, a
 * hang or a huge allocation: the job file (NaN, infinities, overflow,
 * negative sizes, wrong types at every numeric key; size and nesting
 * bombs), checkpoint files whose checksum is right but whose records claim
 * absurd sizes, and PServer requests as bytes off the wire (truncated,
 * mistyped, oversized, negative shapes, dtype / shape / length mismatches,
 * NaN and infinite payloads in fp32, fp16 and bf16), each refused request
 * leaving the server's blocks, tables and counters as they were.
 * (The same code paths are fuzzed by tests/fuzz; a live pserver's answers
 * to such calls are tested in tests/integration.) */
#include <config.h>

#include <check.h>
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_ckpt.h"
#include "fl_config.h"
#include "fl_log.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"
#include "fl_rpc.h"

#if defined(__SANITIZE_ADDRESS__)
#define HOSTILE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOSTILE_ASAN 1
#endif
#endif

/* Cap the address space at 1 GiB (in the forked test), so that code that
 * allocates what a header claims fails instead of quietly reserving it.
 * Not under ASan (terabytes of shadow) or valgrind. */
static void cap_memory(void) {
#ifndef HOSTILE_ASAN
  const char *pre = getenv("LD_PRELOAD");
  struct rlimit rl;
  if (pre && strstr(pre, "vgpreload")) return;
  if (getrlimit(RLIMIT_AS, &rl) != 0) return;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > ((rlim_t)1 << 30)) {
    rl.rlim_cur = (rlim_t)1 << 30;
    setrlimit(RLIMIT_AS, &rl);
  }
#endif
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ================================================================ job file */

static fl_job g_job; /* large: off the stack */

/* One scalar or list key of the resolved defaults: its dotted path, the
 * YAML text that opens every mapping down to it ("a:\n  b:\n    c: "),
 * and what its default looks like. */
typedef enum { L_NUMBER, L_BOOL, L_NUMBER_LIST, L_OTHER } leaf_kind;
typedef struct leaf {
  char path[192];
  char prefix[512];
  leaf_kind kind;
} leaf;

static leaf g_leaves[256];
static size_t g_n_leaves;

static int is_number(const char *v) {
  char *end;
  if (!*v || *v == '"') return 0;
  strtod(v, &end);
  return *end == '\0';
}

/* Walk fl_job_write_yaml's dump of the defaults (two spaces per level). */
static void collect_leaves(void) {
  char *dump = NULL, *save = NULL;
  size_t len = 0;
  char keys[8][64];
  FILE *m = open_memstream(&dump, &len);
  ck_assert_ptr_nonnull(m);
  fl_log_set_level(FL_LOG_OFF); /* thousands of refusals follow */
  fl_job_defaults(&g_job);
  ck_assert_int_eq(fl_job_write_yaml(&g_job, m), FL_OK);
  fclose(m);
  g_n_leaves = 0;
  for (char *line = strtok_r(dump, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#') continue;
    int ind = 0;
    while (line[ind] == ' ') ind++;
    int depth = ind / 2;
    char *colon = strchr(line + ind, ':');
    ck_assert_ptr_nonnull(colon);
    ck_assert_int_lt(depth, 8);
    snprintf(keys[depth], sizeof keys[depth], "%.*s", (int)(colon - (line + ind)), line + ind);
    const char *val = colon[1] == ' ' ? colon + 2 : colon + 1;
    if (!*val) continue; /* a mapping: its children follow */
    ck_assert_uint_lt(g_n_leaves, sizeof g_leaves / sizeof g_leaves[0]);
    leaf *l = &g_leaves[g_n_leaves++];
    size_t po = 0, pp = 0;
    for (int d = 0; d <= depth; d++) {
      po += (size_t)snprintf(l->prefix + po, sizeof l->prefix - po, "%*s%s:%s", 2 * d, "",
                             keys[d], d == depth ? " " : "\n");
      pp += (size_t)snprintf(l->path + pp, sizeof l->path - pp, "%s%s", d ? "." : "", keys[d]);
    }
    if (!strcmp(val, "true") || !strcmp(val, "false")) l->kind = L_BOOL;
    else if (is_number(val)) l->kind = L_NUMBER;
    else if (val[0] == '[' && (isdigit((unsigned char)val[1]) || val[1] == '-'))
      l->kind = L_NUMBER_LIST;
    else l->kind = L_OTHER;
  }
  free(dump);
}

/* Load the one-key job "<prefix><value>" and expect FL_EINVAL with a
 * message that names the key. */
static void expect_refused(const leaf *l, const char *value, const char *name_in_msg) {
  char text[1024];
  snprintf(text, sizeof text, "%s%s\n", l->prefix, value);
  fl_status st = fl_job_load_string(text, "hostile.yaml", &g_job);
  ck_assert_msg(st == FL_EINVAL, "%s: %s accepted (status %d)", l->path, value, (int)st);
  ck_assert_msg(strstr(fl_job_last_error(), name_in_msg) != NULL,
                "%s = %s: message does not name the key: %s", l->path, value,
                fl_job_last_error());
  ck_assert_msg(!strncmp(fl_job_last_error(), "hostile.yaml:", 13), "message: %s",
                fl_job_last_error());
}

static size_t count_kind(leaf_kind k) {
  size_t n = 0;
  for (size_t i = 0; i < g_n_leaves; i++) n += g_leaves[i].kind == k;
  return n;
}

/* The one number that takes "inf" or ".inf": grad_clip.norm_type (torch's
 * max norm), under optimizer and (refused there later) the pserver's. */
static int takes_inf(const leaf *l, const char *value) {
  const char *k = "grad_clip.norm_type";
  size_t n = strlen(l->path), m = strlen(k);
  return n >= m && !strcmp(l->path + n - m, k) && (!strcmp(value, "inf") || !strcmp(value, ".inf"));
}

/* The numbers that take a negative value: model.ignore_index (a class id
 * that no label uses, -100 by default as PyTorch's), FTRL's lr_power
 * (-0.5 by default, at most 0), wherever an optimizer section has it, and
 * the value an id not admitted to a sparse table reads as. */
static int takes_negative(const leaf *l, const char *value) {
  static const char *const keys[] = {"model.ignore_index", "optimizer.lr_power",
                                     "pserver.sparse.admit_default"};
  const size_t n = strlen(l->path);
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const size_t m = strlen(keys[i]);
    if (n >= m && !strcmp(l->path + n - m, keys[i]) && !strcmp(value, "-1")) return 1;
  }
  return 0;
}

START_TEST(job_numbers_refuse_nan_inf_overflow_and_wrong_types) {
  static const char *const bad[] = {
      ".nan", ".NaN", "nan", "NaN", ".inf", "-.inf", "+.inf", "inf", "Infinity", "1e999",
      "-1e999", "1e-999", "0x10", "0x1p3", "1_000", "1,5", "\"1\"", "'1'", "~", "null", "",
      "[1]", "{a: 1}", "1 2", "true", "-1"};
  collect_leaves();
  ck_assert_uint_ge(count_kind(L_NUMBER), 50); /* the dump walk found the numeric keys */
  for (size_t i = 0; i < g_n_leaves; i++) {
    if (g_leaves[i].kind != L_NUMBER) continue;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
      if (!takes_inf(&g_leaves[i], bad[k]) && !takes_negative(&g_leaves[i], bad[k]))
        expect_refused(&g_leaves[i], bad[k], g_leaves[i].path);
  }
}
END_TEST

START_TEST(job_lists_and_bools_refuse_bad_elements) {
  static const char *const bad_list[] = {"[.nan]", "[.inf]", "[1e999]", "[-1]", "[[1]]", "[{}]",
                                         "[\"1\"]", "1", "{a: 1}"};
  static const char *const bad_bool[] = {"2", "0", "1", "tru", "\"true\"", "[true]", "{}", ".nan"};
  collect_leaves();
  ck_assert_uint_ge(count_kind(L_NUMBER_LIST), 3);
  ck_assert_uint_ge(count_kind(L_BOOL), 10);
  for (size_t i = 0; i < g_n_leaves; i++) {
    const leaf *l = &g_leaves[i];
    if (l->kind == L_NUMBER_LIST)
      for (size_t k = 0; k < sizeof bad_list / sizeof bad_list[0]; k++)
        expect_refused(l, bad_list[k], l->path);
    if (l->kind == L_BOOL)
      for (size_t k = 0; k < sizeof bad_bool / sizeof bad_bool[0]; k++)
        expect_refused(l, bad_bool[k], l->path);
  }
  /* the lists whose default is empty */
  leaf pw = {.path = "lr_schedule.values",
             .prefix = "lr_schedule:\n  kind: piecewise\n  boundaries: [10]\n  values: "};
  expect_refused(&pw, "[0.1, .nan]", "lr_schedule.values[1]");
  expect_refused(&pw, "[0.1, -.inf]", "lr_schedule.values[1]");
  leaf pb = {.path = "lr_schedule.boundaries",
             .prefix = "lr_schedule:\n  kind: piecewise\n  values: [1, 2]\n  boundaries: "};
  expect_refused(&pb, "[-5]", "lr_schedule.boundaries");
  expect_refused(&pb, "[1e999]", "lr_schedule.boundaries[0]");
  expect_refused(&pb, "[99999999999999999999]", "lr_schedule.boundaries[0]");
}
END_TEST

START_TEST(job_strings_refuse_nul_overlong_and_bad_utf8) {
  char text[4096];
  fl_log_set_level(FL_LOG_OFF);
  leaf ck = {.path = "train.checkpoint_dir", .prefix = "train:\n  checkpoint_dir: "};
  expect_refused(&ck, "\"a\\0b\"", "train.checkpoint_dir");
  memset(text, 'p', 600);
  text[600] = '\0';
  expect_refused(&ck, text, "train.checkpoint_dir");
  expect_refused(&ck, "[a]", "train.checkpoint_dir");
  /* bytes that are not UTF-8: a syntax error with a position, not a crash */
  ck_assert_int_eq(fl_job_load_string("train:\n  checkpoint_dir: \xff\xfe\n", "hostile.yaml",
                                      &g_job),
                   FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_job_last_error(), "hostile.yaml:"));
  /* a key far longer than any key path */
  size_t o = (size_t)snprintf(text, sizeof text, "train:\n  ");
  memset(text + o, 'k', 3000);
  snprintf(text + o + 3000, sizeof text - o - 3000, ": 1\n");
  ck_assert_int_eq(fl_job_load_string(text, "hostile.yaml", &g_job), FL_EINVAL);
}
END_TEST

/* Text of n bytes built by fill (NUL-terminated, caller frees). */
static char *big_text(size_t n, const char *head, char c) {
  char *t = malloc(n + 1);
  ck_assert_ptr_nonnull(t);
  memset(t, c, n);
  memcpy(t, head, strlen(head));
  t[n] = '\0';
  return t;
}

START_TEST(job_size_and_nesting_bombs_are_cheap) {
  /* 100000 nested flow sequences cost libyaml quadratic time (minutes);
   * the loader refuses them before parsing. */
  size_t depth = 100000;
  fl_log_set_level(FL_LOG_OFF);
  char *t = malloc(2 * depth + 32);
  ck_assert_ptr_nonnull(t);
  size_t o = (size_t)sprintf(t, "model:\n  hidden: ");
  memset(t + o, '[', depth);
  memset(t + o + depth, ']', depth);
  t[o + 2 * depth] = '\0';
  double t0 = now_s();
  ck_assert_int_eq(fl_job_load_string(t, "hostile.yaml", &g_job), FL_EINVAL);
  ck_assert_double_lt(now_s() - t0, 2.0);
  free(t);

  /* more than a megabyte of text, as a string and as a file */
  t = big_text((2u << 20), "train:\n  checkpoint_dir: \"", 'a');
  t0 = now_s();
  ck_assert_int_eq(fl_job_load_string(t, "hostile.yaml", &g_job), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_job_last_error(), "larger than"));
  char path[] = "/tmp/fl_test_hostile_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, t, strlen(t)), (ssize_t)strlen(t));
  close(fd);
  ck_assert_int_eq(fl_job_load_file(path, &g_job), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_job_last_error(), "larger than"));
  unlink(path);
  ck_assert_double_lt(now_s() - t0, 2.0);
  free(t);

  /* an alias bomb: every level refers to the previous one ten times */
  char bomb[2048];
  o = (size_t)snprintf(bomb, sizeof bomb, "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
  for (int i = 1; i < 20; i++)
    o += (size_t)snprintf(bomb + o, sizeof bomb - o,
                          "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, "
                          "*a%d]\n",
                          i, i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1,
                          i - 1);
  snprintf(bomb + o, sizeof bomb - o, "model:\n  hidden: *a19\n");
  t0 = now_s();
  ck_assert_int_eq(fl_job_load_string(bomb, "hostile.yaml", &g_job), FL_EINVAL);
  ck_assert_double_lt(now_s() - t0, 2.0);
  /* aliases inside known keys are not expanded into lists either */
  snprintf(bomb, sizeof bomb, "model:\n  hidden: &x [1, 1]\n  conv_channels: [*x, *x]\n");
  ck_assert_int_eq(fl_job_load_string(bomb, "hostile.yaml", &g_job), FL_EINVAL);
}
END_TEST

/* ============================================================== checkpoint */

/* A checkpoint image assembled by hand with a valid trailer and CRC, so
 * that only the record fields are hostile. */
typedef struct img {
  uint8_t b[4096];
  size_t n;
} img;

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void img_start(img *m, uint32_t version, uint32_t hsize) {
  memcpy(m->b, "FLCKPT\r\n", 8);
  put_le(m->b + 8, version, 4);
  put_le(m->b + 12, hsize, 4);
  m->n = 16;
}

/* A record header (name, dtype, shape, nbytes), padding, then `have`
 * bytes of data (which may be fewer than nbytes claims). */
static void img_record(img *m, const char *name, size_t name_len, int dtype, int ndim,
                       const uint64_t *shape, uint64_t nbytes, size_t have) {
  memcpy(m->b + m->n, "REC1", 4);
  put_le(m->b + m->n + 4, name_len, 2);
  m->b[m->n + 6] = (uint8_t)dtype;
  m->b[m->n + 7] = (uint8_t)ndim;
  m->n += 8;
  size_t real = strlen(name);
  memcpy(m->b + m->n, name, real);
  m->n += real;
  for (int d = 0; d < ndim && d < 16; d++, m->n += 8) put_le(m->b + m->n, shape[d], 8);
  put_le(m->b + m->n, nbytes, 8);
  m->n += 8;
  while (m->n & 7) m->b[m->n++] = 0;
  memset(m->b + m->n, 0x41, have);
  m->n += have;
}

static void img_finish(img *m, uint64_t count) {
  size_t t = m->n;
  memcpy(m->b + t, "FLCKEND\n", 8);
  put_le(m->b + t + 8, count, 8);
  put_le(m->b + t + 16, t, 8);
  uLong crc = crc32(crc32(0L, Z_NULL, 0), m->b, (uInt)(t + 24));
  put_le(m->b + t + 24, crc, 4);
  put_le(m->b + t + 28, 0, 4);
  m->n = t + 32;
}

static void expect_corrupt(const img *m, const char *what) {
  fl_ckpt *c = NULL;
  fl_status st = fl_ckpt_load_mem(m->b, m->n, what, &c);
  ck_assert_msg(st == FL_ECORRUPT, "%s: status %d", what, (int)st);
  ck_assert_ptr_null(c);
}

START_TEST(ckpt_absurd_sizes_refused) {
  img m;
  uint64_t s[16] = {0};
  fl_ckpt *c = NULL;
  cap_memory();
  fl_log_set_level(FL_LOG_OFF);

  /* the well-formed base case loads */
  img_start(&m, 1, 16);
  s[0] = 2;
  img_record(&m, "x", 1, FL_CKPT_F32, 1, s, 8, 8);
  img_finish(&m, 1);
  ck_assert_int_eq(fl_ckpt_load_mem(m.b, m.n, "base", &c), FL_OK);
  fl_ckpt_free(c);

  img_start(&m, 1, 16);
  img_record(&m, "x", 1, FL_CKPT_F32, 1, s, 8, 8);
  img_finish(&m, UINT64_MAX);
  expect_corrupt(&m, "record count 2^64-1");
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, FL_CKPT_F32, 1, s, 8, 8);
  img_finish(&m, (m.n - 16) / 8);
  expect_corrupt(&m, "record count larger than the records");
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, FL_CKPT_F32, 1, s, 8, 8);
  img_finish(&m, 0);
  expect_corrupt(&m, "record count 0 with a record");

  s[0] = UINT64_C(1) << 62;
  s[1] = 4;
  img_start(&m, 1, 16);
  img_record(&m, "big", 3, FL_CKPT_F32, 2, s, UINT64_C(1) << 63, 0);
  img_finish(&m, 1);
  expect_corrupt(&m, "shape 2^62 x 4 (elements overflow bytes)");
  s[0] = UINT64_C(1) << 63;
  img_start(&m, 1, 16);
  img_record(&m, "neg", 3, FL_CKPT_U8, 1, s, UINT64_C(1) << 63, 0);
  img_finish(&m, 1);
  expect_corrupt(&m, "shape entry above INT64_MAX (negative)");
  s[0] = s[1] = UINT64_C(1) << 32;
  s[2] = 2;
  img_start(&m, 1, 16);
  img_record(&m, "ovf", 3, FL_CKPT_U8, 3, s, 0, 0);
  img_finish(&m, 1);
  expect_corrupt(&m, "shape product overflows");
  s[0] = UINT64_C(1) << 61;
  img_start(&m, 1, 16);
  img_record(&m, "wrap", 4, FL_CKPT_F64, 1, s, 0, 0);
  img_finish(&m, 1);
  expect_corrupt(&m, "2^61 f64 = 2^64 bytes (wraps to 0)");
  s[0] = UINT64_C(1) << 38;
  img_start(&m, 1, 16);
  img_record(&m, "huge", 4, FL_CKPT_F32, 1, s, UINT64_C(1) << 40, 64);
  img_finish(&m, 1);
  expect_corrupt(&m, "1 TiB of data claimed, 64 bytes present");
  s[0] = 3;
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, FL_CKPT_U8, 1, s, UINT64_MAX, 3);
  img_finish(&m, 1);
  expect_corrupt(&m, "nbytes 2^64-1");
  img_start(&m, 1, 16);
  img_record(&m, "x", 65535, FL_CKPT_U8, 1, s, 3, 3);
  img_finish(&m, 1);
  expect_corrupt(&m, "name length 65535");
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, FL_CKPT_U8, 255, s, 3, 3);
  img_finish(&m, 1);
  expect_corrupt(&m, "ndim 255");
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, 0, 1, s, 3, 3);
  img_finish(&m, 1);
  expect_corrupt(&m, "dtype 0");
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, 200, 1, s, 3, 3);
  img_finish(&m, 1);
  expect_corrupt(&m, "dtype 200");
  img_start(&m, UINT32_MAX, 16);
  img_finish(&m, 0);
  expect_corrupt(&m, "version 2^32-1");
  img_start(&m, 1, UINT32_MAX);
  img_finish(&m, 0);
  expect_corrupt(&m, "header size 2^32-1");
  /* an image that ends inside its own trailer, at every length */
  img_start(&m, 1, 16);
  img_record(&m, "x", 1, FL_CKPT_U8, 1, s, 3, 3);
  img_finish(&m, 1);
  for (size_t n = 0; n < m.n; n++) {
    fl_ckpt *t = NULL;
    ck_assert_int_eq(fl_ckpt_load_mem(m.b, n, "prefix", &t), FL_ECORRUPT);
  }
  /* not a regular file */
  ck_assert_int_eq(fl_ckpt_load("/dev/null", &c), FL_ECORRUPT);
  ck_assert_int_eq(fl_ckpt_load("/proc/self/status", &c), FL_ECORRUPT);
  ck_assert_int_eq(fl_ckpt_load("/", &c), FL_EIO);
}
END_TEST

START_TEST(ckpt_reads_with_wrong_expectations_refused) {
  fl_ckpt_writer *w;
  fl_ckpt *c;
  void *buf;
  size_t len;
  float v[6] = {1, 2, 3, 4, 5, 6}, out[6];
  int64_t s23[FL_CKPT_MAX_DIMS] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6}, neg[1] = {-6},
          huge[2] = {INT64_MAX, 4};
  fl_log_set_level(FL_LOG_OFF);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "w", FL_CKPT_F32, 2, s23, v), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_blob(w, "blob", "abc", 3), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, &len), FL_OK);
  ck_assert_int_eq(fl_ckpt_load_mem(buf, len, "mem", &c), FL_OK);
  ck_assert_int_eq(fl_ckpt_read(c, "w", FL_CKPT_F32, 2, s32, out), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "w", FL_CKPT_F32, 1, s6, out), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "w", FL_CKPT_F16, 2, s23, out), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "w", FL_CKPT_F32, -1, s23, out), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "w", FL_CKPT_F32, 99, s23, out), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "nope", FL_CKPT_F32, 2, s23, out), FL_ENOTFOUND);
  int64_t i;
  ck_assert_int_eq(fl_ckpt_get_i64(c, "blob", &i), FL_EINVAL);
  ck_assert_int_eq(fl_ckpt_read(c, "w", FL_CKPT_F32, 2, s23, out), FL_OK);
  ck_assert_mem_eq(out, v, sizeof v);
  fl_ckpt_free(c);
  free(buf);
  /* the writer refuses what the reader would refuse */
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "n", FL_CKPT_F32, 1, neg, v), FL_EINVAL);
  fl_ckpt_writer_abort(w);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "h", FL_CKPT_F32, 2, huge, v), FL_EINVAL);
  fl_ckpt_writer_abort(w);
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "d", (fl_ckpt_dtype)77, 1, s6, v), FL_EINVAL);
  fl_ckpt_writer_abort(w);
}
END_TEST

/* ============================================================ PServer wire */

#define BLK 4

/* Server 0 of 2 for trainers 0 and 1 (async: a push applies at once),
 * dense parameters of 10 and 3 floats in blocks of 4, sparse table "emb"
 * of dim 3, every block of this server initialised. */
typedef struct ps_fix {
  fl_ps_core *core;
  fl_rpc_arena arena;
  uint32_t mine[8]; /* this server's block ids */
  size_t n_mine[8]; /* and sizes */
  int n;
} ps_fix;

static void ps_setup(ps_fix *f) {
  fl_ps_core_opts o;
  uint64_t numel[2] = {10, 3};
  fl_ps_layout *l;

  memset(f, 0, sizeof *f);
  memset(&o, 0, sizeof o);
  fl_job_defaults(&o.job);
  o.job.pserver.dense_block_size = BLK;
  o.job.pserver.sparse.max_rows = 16;
  o.job.strategy.a_sync = 1;
  o.n_servers = 2;
  o.num_trainers = 2;
  o.max_sparse_keys = 8;
  ck_assert_int_eq(fl_ps_core_create(&o, &f->core), FL_OK);
  fl_rpc_arena_init(&f->arena);

  Flotilla__DenseParamSpec w = FLOTILLA__DENSE_PARAM_SPEC__INIT;
  Flotilla__DenseParamSpec b = FLOTILLA__DENSE_PARAM_SPEC__INIT;
  Flotilla__DenseParamSpec *dense[2] = {&w, &b};
  Flotilla__SparseTableSpec emb = FLOTILLA__SPARSE_TABLE_SPEC__INIT, *sparse[1] = {&emb};
  w.name = "w";
  w.numel = 10;
  b.name = "b";
  b.numel = 3;
  emb.name = "emb";
  emb.dim = 3;
  for (int t = 0; t < 2; t++) {
    Flotilla__RegisterRequest q = FLOTILLA__REGISTER_REQUEST__INIT;
    Flotilla__RegisterResponse r = FLOTILLA__REGISTER_RESPONSE__INIT;
    q.trainer_id = t;
    q.num_trainers = 2;
    q.incarnation = 7 + (uint64_t)t;
    q.mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC;
    q.dense_block_size = BLK;
    q.num_servers = 2;
    q.n_dense = 2;
    q.dense = dense;
    q.n_sparse = 1;
    q.sparse = sparse;
    ck_assert_int_eq(fl_ps_core_register(f->core, &q, &r), FL_OK);
  }
  ck_assert_int_eq(fl_ps_layout_build(numel, 2, BLK, 2, &l), FL_OK);
  for (uint32_t id = 0; id < l->n_blocks; id++) {
    if (l->blocks[id].server != 0) continue;
    float v[BLK] = {1, 2, 3, 4};
    int64_t shape = (int64_t)l->blocks[id].n;
    Flotilla__PushDenseRequest q = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
    Flotilla__PushDenseResponse r = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
    Flotilla__DenseBlock db = FLOTILLA__DENSE_BLOCK__INIT, *dbs = &db;
    Flotilla__Tensor x = FLOTILLA__TENSOR__INIT;
    x.n_shape = 1;
    x.shape = &shape;
    x.data.data = (uint8_t *)v;
    x.data.len = l->blocks[id].n * sizeof(float);
    db.block = id;
    db.value = &x;
    q.kind = FLOTILLA__PUSH_KIND__PUSH_INIT;
    q.n_blocks = 1;
    q.blocks = &dbs;
    ck_assert_int_eq(fl_ps_core_push_dense(f->core, &q, &r), FL_OK);
    f->mine[f->n] = id;
    f->n_mine[f->n++] = l->blocks[id].n;
  }
  fl_ps_layout_free(l);
  ck_assert_int_ge(f->n, 2);
}

static void ps_teardown(ps_fix *f) {
  fl_rpc_arena_free(&f->arena);
  fl_ps_core_free(f->core);
}

/* Everything a refused request must leave alone. */
typedef struct ps_state {
  float v[8][BLK];
  int64_t step[8];
  size_t rows;
  uint64_t pushes, dense_updates;
} ps_state;

static void ps_snap(ps_fix *f, ps_state *s) {
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  memset(s, 0, sizeof *s);
  for (int i = 0; i < f->n; i++)
    ck_assert_int_eq(
        fl_ps_core_block_value(f->core, f->mine[i], s->v[i], f->n_mine[i], &s->step[i]), FL_OK);
  s->rows = fl_ps_table_rows(fl_ps_core_table(f->core, "emb"));
  fl_ps_core_stats(f->core, &st);
  s->pushes = st.pushes;
  s->dense_updates = st.dense_updates;
}

enum { R_PUSH_DENSE, R_PULL_DENSE, R_PUSH_SPARSE, R_PULL_SPARSE, R_BARRIER, R_REGISTER,
       R_HEARTBEAT, R_COMPLETE };

static const ProtobufCMessageDescriptor *req_desc(int kind) {
  switch (kind) {
  case R_PUSH_DENSE: return &flotilla__push_dense_request__descriptor;
  case R_PULL_DENSE: return &flotilla__pull_dense_request__descriptor;
  case R_PUSH_SPARSE: return &flotilla__push_sparse_request__descriptor;
  case R_PULL_SPARSE: return &flotilla__pull_sparse_request__descriptor;
  case R_BARRIER: return &flotilla__barrier_request__descriptor;
  case R_REGISTER: return &flotilla__register_request__descriptor;
  case R_HEARTBEAT: return &flotilla__heartbeat_request__descriptor;
  default: return &flotilla__complete_request__descriptor;
  }
}

/* Unpack bytes as the service does (into the arena) and run the request;
 * FL_EPROTO stands for "did not unpack" (the service's "malformed message"). */
static fl_status ps_call(ps_fix *f, int kind, const uint8_t *p, size_t n) {
  ProtobufCMessage *m;
  fl_status st;
  float *scratch = NULL;
  size_t cap = 0;
  fl_rpc_arena_reset(&f->arena);
  m = fl_rpc_unpack(&f->arena, req_desc(kind), p, n);
  if (!m) return FL_EPROTO;
  switch (kind) {
  case R_PUSH_DENSE: {
    Flotilla__PushDenseResponse r = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
    return fl_ps_core_push_dense(f->core, (Flotilla__PushDenseRequest *)m, &r);
  }
  case R_PULL_DENSE: {
    Flotilla__PullDenseRequest *q = (Flotilla__PullDenseRequest *)m;
    return fl_ps_core_pull_check(f->core, q->trainer_id, q->min_step, q->blocks, q->n_blocks);
  }
  case R_PUSH_SPARSE: {
    Flotilla__PushSparseResponse r = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
    return fl_ps_core_push_sparse(f->core, (Flotilla__PushSparseRequest *)m, &r);
  }
  case R_PULL_SPARSE: {
    Flotilla__PullSparseResponse r = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
    Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
    int64_t shape[2];
    st = fl_ps_core_pull_sparse(f->core, (Flotilla__PullSparseRequest *)m, &scratch, &cap, &r, &v,
                                shape);
    free(scratch);
    return st;
  }
  case R_BARRIER: return fl_ps_core_barrier(f->core, (Flotilla__BarrierRequest *)m);
  case R_REGISTER: {
    Flotilla__RegisterResponse r = FLOTILLA__REGISTER_RESPONSE__INIT;
    return fl_ps_core_register(f->core, (Flotilla__RegisterRequest *)m, &r);
  }
  case R_HEARTBEAT: {
    Flotilla__HeartbeatResponse r = FLOTILLA__HEARTBEAT_RESPONSE__INIT;
    return fl_ps_core_heartbeat(f->core, (Flotilla__HeartbeatRequest *)m, &r);
  }
  default: {
    Flotilla__CompleteResponse r = FLOTILLA__COMPLETE_RESPONSE__INIT;
    return fl_ps_core_complete(f->core, (Flotilla__CompleteRequest *)m, &r);
  }
  }
}

/* The request must be refused (FL_EINVAL, or not unpack at all) and change
 * nothing. */
static void expect_ps_refused(ps_fix *f, int kind, const uint8_t *p, size_t n, const char *what) {
  ps_state a, b;
  ps_snap(f, &a);
  fl_status st = ps_call(f, kind, p, n);
  ck_assert_msg(st == FL_EINVAL || st == FL_EPROTO, "%s: status %d", what, (int)st);
  ps_snap(f, &b);
  ck_assert_msg(!memcmp(&a, &b, sizeof a), "%s: refused but the server's state changed", what);
}

/* ---- a small protobuf encoder for building hostile messages by hand */

typedef struct pb {
  uint8_t b[1 << 16];
  size_t n;
} pb;

static void pb_varint(pb *m, uint64_t v) {
  do {
    m->b[m->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
}
static void pb_key(pb *m, int field, int wt) {
  pb_varint(m, ((uint64_t)field << 3) | (unsigned)wt);
}
static void pb_int(pb *m, int field, int64_t v) {
  pb_key(m, field, 0);
  pb_varint(m, (uint64_t)v);
}
static void pb_bytes(pb *m, int field, const void *p, size_t n) {
  pb_key(m, field, 2);
  pb_varint(m, n);
  memcpy(m->b + m->n, p, n);
  m->n += n;
}
static void pb_sub(pb *m, int field, const pb *sub) { pb_bytes(m, field, sub->b, sub->n); }

/* Tensor {dtype, packed shape, data}. */
static void pb_tensor(pb *t, int dtype, const int64_t *shape, size_t nd, const void *data,
                      size_t len) {
  pb s = {.n = 0};
  t->n = 0;
  pb_int(t, 1, dtype);
  for (size_t i = 0; i < nd; i++) pb_varint(&s, (uint64_t)shape[i]);
  pb_sub(t, 2, &s);
  pb_bytes(t, 3, data, len);
}

/* PushDenseRequest {trainer 0, step, GRAD, one block}. */
static void pb_push_dense(pb *m, int trainer, int64_t step, uint32_t block, const pb *tensor) {
  pb blk = {.n = 0};
  m->n = 0;
  pb_int(m, 1, trainer);
  pb_int(m, 2, step);
  pb_int(m, 3, FLOTILLA__PUSH_KIND__PUSH_GRAD);
  pb_int(&blk, 1, block);
  pb_sub(&blk, 2, tensor);
  pb_sub(m, 4, &blk);
}

/* PushSparseRequest {trainer, step, "emb", keys, grads}. */
static void pb_push_sparse(pb *m, int trainer, const uint64_t *keys, size_t nk, const pb *grads) {
  pb k = {.n = 0};
  m->n = 0;
  pb_int(m, 1, trainer);
  pb_int(m, 2, 0);
  pb_bytes(m, 3, "emb", 3);
  for (size_t i = 0; i < nk; i++) {
    for (int j = 0; j < 8; j++) k.b[k.n++] = (uint8_t)(keys[i] >> (8 * j));
  }
  pb_sub(m, 4, &k);
  pb_sub(m, 5, grads);
}

/* Keys of server 0 (of 2) for table rows. */
static void keys_of_server0(uint64_t *keys, size_t n) {
  size_t k = 0;
  for (uint64_t key = 0; k < n; key++)
    if (fl_ps_key_server(key, 2) == 0) keys[k++] = key;
}

START_TEST(wire_truncated_and_malformed_refused) {
  ps_fix f;
  pb t, m;
  float g[BLK] = {0.5f, 0.5f, 0.5f, 0.5f};
  fl_log_set_level(FL_LOG_OFF);
  ps_setup(&f);
  int64_t shape = (int64_t)f.n_mine[0];
  pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, &shape, 1, g, f.n_mine[0] * 4);
  pb_push_dense(&m, 0, 1, f.mine[0], &t);
  /* every proper prefix of a valid one-block push */
  for (size_t n = 0; n < m.n; n++) expect_ps_refused(&f, R_PUSH_DENSE, m.b, n, "prefix");
  /* a varint of 11 bytes, field number 0, wire types 6 and 7 */
  static const uint8_t long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff, 0xff, 0xff, 0xff, 0x01};
  static const uint8_t field0[] = {0x00, 0x01};
  static const uint8_t wt6[] = {0x0e, 0x01}, wt7[] = {0x0f, 0x01};
  expect_ps_refused(&f, R_PUSH_DENSE, long_varint, sizeof long_varint, "11-byte varint");
  expect_ps_refused(&f, R_PUSH_DENSE, field0, sizeof field0, "field 0");
  expect_ps_refused(&f, R_PUSH_DENSE, wt6, sizeof wt6, "wire type 6");
  expect_ps_refused(&f, R_PUSH_DENSE, wt7, sizeof wt7, "wire type 7");
  /* mistyped fields: step as bytes, blocks as a varint, tensor data as fixed32 */
  static const uint8_t step_bytes[] = {0x08, 0x00, 0x12, 0x01, 0x00};
  static const uint8_t blocks_varint[] = {0x08, 0x00, 0x20, 0x05};
  static const uint8_t data_fixed32[] = {0x08, 0x00, 0x22, 0x09, 0x08, 0x00, 0x12,
                                         0x05, 0x1d, 0x00, 0x00, 0x80, 0x3f};
  expect_ps_refused(&f, R_PUSH_DENSE, step_bytes, sizeof step_bytes, "step as bytes");
  expect_ps_refused(&f, R_PUSH_DENSE, blocks_varint, sizeof blocks_varint, "blocks as varint");
  expect_ps_refused(&f, R_PUSH_DENSE, data_fixed32, sizeof data_fixed32, "data as fixed32");
  /* lengths far beyond the message: 2 GiB of tensor data, a huge block */
  static const uint8_t huge_data[] = {0x08, 0x00, 0x22, 0x09, 0x08, 0x00, 0x12,
                                      0x05, 0x1a, 0xff, 0xff, 0xff, 0x07};
  static const uint8_t huge_block[] = {0x22, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x08};
  expect_ps_refused(&f, R_PUSH_DENSE, huge_data, sizeof huge_data, "2 GiB data length");
  expect_ps_refused(&f, R_PUSH_DENSE, huge_block, sizeof huge_block, "4 GiB block length");
  /* the same bytes as every other request type */
  for (int k = R_PULL_DENSE; k <= R_COMPLETE; k++) {
    expect_ps_refused(&f, k, long_varint, sizeof long_varint, "11-byte varint");
    expect_ps_refused(&f, k, huge_block, sizeof huge_block, "4 GiB field length");
    expect_ps_refused(&f, k, wt7, sizeof wt7, "wire type 7");
  }
  /* and the whole message, once, is fine */
  ck_assert_int_eq(ps_call(&f, R_PUSH_DENSE, m.b, m.n), FL_OK);
  ps_teardown(&f);
}
END_TEST

START_TEST(wire_shape_dtype_length_mismatch_refused) {
  ps_fix f;
  pb t, m;
  uint8_t bytes[64];
  fl_log_set_level(FL_LOG_OFF);
  memset(bytes, 0, sizeof bytes);
  ps_setup(&f);
  uint32_t id = f.mine[0];
  int64_t n = (int64_t)f.n_mine[0];
  struct {
    int dtype;
    int64_t shape[3];
    size_t nd, len;
    const char *what;
  } cases[] = {
      {FLOTILLA__DTYPE__DTYPE_FP32, {n}, 1, 4 * (size_t)n - 1, "fp32, one byte short"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {n}, 1, 4 * (size_t)n + 4, "fp32, one float long"},
      {FLOTILLA__DTYPE__DTYPE_FP16, {n}, 1, 4 * (size_t)n, "fp16 with fp32's length"},
      {FLOTILLA__DTYPE__DTYPE_BF16, {n}, 1, 2 * (size_t)n - 1, "bf16, odd length"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {-n}, 1, 4 * (size_t)n, "negative shape"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {INT64_MIN}, 1, 4 * (size_t)n, "shape INT64_MIN"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {n + 1}, 1, 4 * (size_t)n + 4, "shape one too many"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {1, n}, 2, 4 * (size_t)n, "rank 2"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {0}, 0, 4 * (size_t)n, "rank 0"},
      {FLOTILLA__DTYPE__DTYPE_FP32, {INT64_C(1) << 62, 4}, 2, 0, "shape product overflows"},
      {3, {n}, 1, 4 * (size_t)n, "dtype 3"},
      {-1, {n}, 1, 4 * (size_t)n, "dtype -1"},
      {INT32_MAX, {n}, 1, 4 * (size_t)n, "dtype INT32_MAX"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pb_tensor(&t, cases[i].dtype, cases[i].shape, cases[i].nd, bytes, cases[i].len);
    pb_push_dense(&m, 0, 1, id, &t);
    expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, cases[i].what);
  }
  /* 20000 dimensions */
  {
    static int64_t dims[20000];
    for (size_t i = 0; i < 20000; i++) dims[i] = 1;
    dims[0] = n;
    pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, dims, 20000, bytes, 4 * (size_t)n);
    pb_push_dense(&m, 0, 1, id, &t);
    expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, "20000 dimensions");
  }
  /* a block id of the other server, past the end, and a missing tensor */
  pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, &n, 1, bytes, 4 * (size_t)n);
  pb_push_dense(&m, 0, 1, 1, &t);
  expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, "block of server 1");
  pb_push_dense(&m, 0, 1, UINT32_MAX, &t);
  expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, "block 2^32-1");
  {
    pb blk = {.n = 0};
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_int(&m, 2, 1);
    pb_int(&blk, 1, id);
    pb_sub(&m, 4, &blk);
    expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, "block without a tensor");
  }
  /* trainer ids out of range, on every call that names one */
  static const int64_t bad_ids[] = {-1, 2, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
    m.n = 0;
    pb_int(&m, 1, bad_ids[i]);
    for (int k = R_PUSH_DENSE; k <= R_COMPLETE; k++) {
      if (k == R_REGISTER) continue; /* needs the rest of the request to get that far */
      ps_state a, b;
      ps_snap(&f, &a);
      fl_status st = ps_call(&f, k, m.b, m.n);
      ck_assert_msg(st == FL_EINVAL, "call %d, trainer %lld: status %d", k,
                    (long long)bad_ids[i], (int)st);
      ps_snap(&f, &b);
      ck_assert(!memcmp(&a, &b, sizeof a));
    }
  }
  ps_teardown(&f);
}
END_TEST

START_TEST(wire_nan_and_inf_payloads_refused) {
  ps_fix f;
  pb t, m;
  fl_log_set_level(FL_LOG_OFF);
  ps_setup(&f);
  uint32_t id = f.mine[0];
  int64_t n = (int64_t)f.n_mine[0];
  const float fbad[] = {NAN, -NAN, INFINITY, -INFINITY};
  const uint16_t hbad[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff}; /* fp16 inf, -inf, NaNs */
  const uint16_t bbad[] = {0x7f80, 0xff80, 0x7fc0, 0xffc1};         /* bf16 inf, -inf, NaNs */
  uint64_t keys[2];
  keys_of_server0(keys, 2);
  int64_t sshape[2] = {2, 3};

  for (size_t i = 0; i < sizeof fbad / sizeof fbad[0]; i++) {
    float v[BLK] = {1, 2, 3, 4}, s[6] = {1, 1, 1, 1, 1, 1};
    v[(size_t)n - 1] = fbad[i];
    s[5] = fbad[i];
    pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, &n, 1, v, 4 * (size_t)n);
    pb_push_dense(&m, 0, 1, id, &t);
    expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, "fp32 non-finite dense");
    pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, sshape, 2, s, sizeof s);
    pb_push_sparse(&m, 0, keys, 2, &t);
    expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, "fp32 non-finite sparse");
  }
  for (int bf = 0; bf < 2; bf++) {
    const uint16_t *bad = bf ? bbad : hbad;
    size_t nb = bf ? sizeof bbad / sizeof bbad[0] : sizeof hbad / sizeof hbad[0];
    int dt = bf ? FLOTILLA__DTYPE__DTYPE_BF16 : FLOTILLA__DTYPE__DTYPE_FP16;
    for (size_t i = 0; i < nb; i++) {
      uint16_t v[BLK] = {0x3c00, 0x3c00, 0x3c00, 0x3c00}, s[6] = {0, 0, 0, 0, 0, 0};
      v[0] = bad[i];
      s[3] = bad[i];
      pb_tensor(&t, dt, &n, 1, v, 2 * (size_t)n);
      pb_push_dense(&m, 0, 1, id, &t);
      expect_ps_refused(&f, R_PUSH_DENSE, m.b, m.n, bf ? "bf16 non-finite" : "fp16 non-finite");
      pb_tensor(&t, dt, sshape, 2, s, sizeof s);
      pb_push_sparse(&m, 0, keys, 2, &t);
      expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, bf ? "bf16 sparse" : "fp16 sparse");
    }
  }
  /* barrier values */
  const double dbad[] = {NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < 3; i++) {
    pb p = {.n = 0};
    uint8_t d[16];
    double two[2] = {1.0, dbad[i]};
    memcpy(d, two, sizeof d);
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_bytes(&m, 2, "epoch", 5);
    memcpy(p.b, d, sizeof d);
    p.n = sizeof d;
    pb_sub(&m, 3, &p);
    expect_ps_refused(&f, R_BARRIER, m.b, m.n, "barrier non-finite");
  }
  /* finite extremes pass: largest fp16 / bf16, FLT_MAX, a denormal, -0 */
  {
    uint16_t h[BLK] = {0x7bff, 0xfbff, 0x0001, 0x8000};
    uint16_t b[BLK] = {0x7f7f, 0xff7f, 0x0001, 0x8000};
    float x[BLK] = {FLT_MAX, -FLT_MAX, 1e-45f, -0.0f};
    pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP16, &n, 1, h, 2 * (size_t)n);
    pb_push_dense(&m, 0, 1, id, &t);
    ck_assert_int_eq(ps_call(&f, R_PUSH_DENSE, m.b, m.n), FL_OK);
    pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_BF16, &n, 1, b, 2 * (size_t)n);
    pb_push_dense(&m, 0, 2, id, &t);
    ck_assert_int_eq(ps_call(&f, R_PUSH_DENSE, m.b, m.n), FL_OK);
    pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, &n, 1, x, 4 * (size_t)n);
    pb_push_dense(&m, 0, 3, id, &t);
    ck_assert_int_eq(ps_call(&f, R_PUSH_DENSE, m.b, m.n), FL_OK);
  }
  ps_teardown(&f);
}
END_TEST

START_TEST(wire_sparse_and_register_limits_refused) {
  ps_fix f;
  pb t, m;
  float g[64 * 3];
  uint64_t keys[16];
  fl_log_set_level(FL_LOG_OFF);
  for (size_t i = 0; i < 64 * 3; i++) g[i] = 0.25f;
  ps_setup(&f);
  keys_of_server0(keys, 16);
  /* more keys than max_sparse_keys (8), with matching grads */
  int64_t s9[2] = {9, 3};
  pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, s9, 2, g, 9 * 3 * 4);
  pb_push_sparse(&m, 0, keys, 9, &t);
  expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, "9 keys");
  /* grads for 3 keys sent with 2 keys; dim 4 instead of 3 */
  int64_t s3[2] = {3, 3}, s24[2] = {2, 4};
  pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, s3, 2, g, 3 * 3 * 4);
  pb_push_sparse(&m, 0, keys, 2, &t);
  expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, "grads for 3 keys, 2 keys");
  pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, s24, 2, g, 2 * 4 * 4);
  pb_push_sparse(&m, 0, keys, 2, &t);
  expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, "dim 4");
  /* a key of the other server among ours */
  uint64_t mixed[2] = {keys[0], 0};
  for (uint64_t k = 0;; k++)
    if (fl_ps_key_server(k, 2) == 1) {
      mixed[1] = k;
      break;
    }
  int64_t s2[2] = {2, 3};
  pb_tensor(&t, FLOTILLA__DTYPE__DTYPE_FP32, s2, 2, g, 2 * 3 * 4);
  pb_push_sparse(&m, 0, mixed, 2, &t);
  expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, "key of server 1");
  /* keys bytes not a multiple of 8 */
  {
    pb k = {.n = 0};
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_bytes(&m, 3, "emb", 3);
    memset(k.b, 0, 12);
    k.n = 12;
    pb_sub(&m, 4, &k);
    pb_sub(&m, 5, &t);
    expect_ps_refused(&f, R_PUSH_SPARSE, m.b, m.n, "12 bytes of fixed64 keys");
  }
  /* pulls: unknown table, too many keys */
  {
    pb k = {.n = 0};
    for (int i = 0; i < 9; i++)
      for (int j = 0; j < 8; j++) k.b[k.n++] = (uint8_t)(keys[i] >> (8 * j));
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_bytes(&m, 2, "emb", 3);
    pb_sub(&m, 3, &k);
    expect_ps_refused(&f, R_PULL_SPARSE, m.b, m.n, "pull of 9 keys");
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_bytes(&m, 2, "nope", 4);
    expect_ps_refused(&f, R_PULL_SPARSE, m.b, m.n, "unknown table");
  }
  /* registrations declaring absurd sizes */
  struct {
    const char *name;
    uint64_t numel;
    const char *table;
    uint64_t dim;
    const char *what;
  } regs[] = {
      {"w", 0, NULL, 0, "numel 0"},
      {"w", (UINT64_C(1) << 40) + 1, NULL, 0, "numel 2^40 + 1"},
      {"w", UINT64_MAX, NULL, 0, "numel 2^64-1"},
      {"", 10, NULL, 0, "empty parameter name"},
      {NULL, 0, "t", 0, "dim 0"},
      {NULL, 0, "t", 65537, "dim 65537"},
      {NULL, 0, "t", UINT64_C(1) << 32, "dim 2^32 (truncated to 0)"},
      {NULL, 0, "", 3, "empty table name"},
  };
  for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++) {
    pb spec = {.n = 0};
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_int(&m, 2, 2);
    pb_int(&m, 3, 7);
    pb_int(&m, 4, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
    pb_int(&m, 5, BLK);
    pb_int(&m, 6, 2);
    if (regs[i].name) {
      pb_bytes(&spec, 1, regs[i].name, strlen(regs[i].name));
      pb_int(&spec, 2, (int64_t)regs[i].numel);
      pb_sub(&m, 8, &spec);
    } else {
      pb_bytes(&spec, 1, regs[i].table, strlen(regs[i].table));
      pb_int(&spec, 2, (int64_t)regs[i].dim);
      pb_sub(&m, 9, &spec);
    }
    expect_ps_refused(&f, R_REGISTER, m.b, m.n, regs[i].what);
  }
  {
    char name[300];
    pb spec = {.n = 0};
    memset(name, 'n', sizeof name);
    m.n = 0;
    pb_int(&m, 1, 0);
    pb_int(&m, 2, 2);
    pb_int(&m, 4, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
    pb_int(&m, 5, BLK);
    pb_int(&m, 6, 2);
    pb_bytes(&spec, 1, name, sizeof name);
    pb_int(&spec, 2, 3);
    pb_sub(&m, 9, &spec);
    expect_ps_refused(&f, R_REGISTER, m.b, m.n, "300-byte table name");
  }
  ps_teardown(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hostile");
  TCase *job = tcase_create("job_file");
  tcase_set_timeout(job, 60);
  tcase_add_test(job, job_numbers_refuse_nan_inf_overflow_and_wrong_types);
  tcase_add_test(job, job_lists_and_bools_refuse_bad_elements);
  tcase_add_test(job, job_strings_refuse_nul_overlong_and_bad_utf8);
  tcase_add_test(job, job_size_and_nesting_bombs_are_cheap);
  suite_add_tcase(s, job);
  TCase *ck = tcase_create("checkpoint");
  tcase_add_test(ck, ckpt_absurd_sizes_refused);
  tcase_add_test(ck, ckpt_reads_with_wrong_expectations_refused);
  suite_add_tcase(s, ck);
  TCase *wire = tcase_create("pserver_wire");
  tcase_set_timeout(wire, 60);
  tcase_add_test(wire, wire_truncated_and_malformed_refused);
  tcase_add_test(wire, wire_shape_dtype_length_mismatch_refused);
  tcase_add_test(wire, wire_nan_and_inf_payloads_refused);
  tcase_add_test(wire, wire_sparse_and_register_limits_refused);
  suite_add_tcase(s, wire);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
