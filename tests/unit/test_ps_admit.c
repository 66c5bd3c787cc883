/* test_ps_admit.c - sparse tables past memory: the admission sketch's
 * bound, admission against a scripted id stream with known counts
 * (read-only reads count nothing), expiry by table steps and by seconds,
 * admission and expiry surviving a checkpoint, a base plus deltas
 * replaying bit for bit into the whole checkpoint of the same state (the
 * table alone, then a core's checkpoint directory), and a truncated or
 * corrupt delta named in the log, the restart stopping at the last good
 * one; the tick publishing the counters in /metrics; tables of several
 * lock stripes with admission, expiry and deltas (format 3, and format 2
 * of older builds still loading): a sync run over 16 stripes equal bit
 * for bit to one stripe, its base and deltas replaying into the whole
 * state, its DumpSparse pages merged from every stripe. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_metrics.h"
#include "fl_ps.h"
#include "ps_admit.h"
#include "ps_testutil.h"

#define DIM 3

static fl_ps_table_opts opts(fl_optim_kind kind, int64_t max_rows) {
  fl_ps_table_opts o;
  memset(&o, 0, sizeof o);
  o.name = "emb";
  o.dim = DIM;
  o.max_rows = max_rows;
  o.init_range = 0.5f;
  o.seed = 11;
  o.hp = fl_optim_hparams_default(kind);
  o.lr = 0.1f;
  o.admit_sketch_bytes = 4096;
  o.now = 1000;
  return o;
}

static fl_ps_table *make(const fl_ps_table_opts *o) {
  fl_ps_table *t = NULL;
  ck_assert_int_eq(fl_ps_table_create(o, &t), FL_OK);
  return t;
}

START_TEST(test_sketch_bound) {
  fl_ps_sketch *s = NULL;
  uint32_t truth[2000];
  size_t n, over = 0, width;
  uint64_t total = 0;
  ck_assert_int_eq(fl_ps_sketch_create(FL_PS_SKETCH_MIN_BYTES - 1, 1, &s), FL_EINVAL);
  ck_assert_int_eq(fl_ps_sketch_create(8192, 1, &s), FL_OK);
  fl_ps_sketch_counters(s, &n);
  width = n / FL_PS_SKETCH_DEPTH;
  memset(truth, 0, sizeof truth);
  for (uint64_t i = 0; i < 20000; i++) { /* a skewed stream over 2000 ids */
    uint64_t id = (i * i * 2654435761u) % 2000 % (1 + i % 2000);
    truth[id]++;
    total++;
    ck_assert_uint_ge(fl_ps_sketch_add(s, id), truth[id]);
  }
  ck_assert_uint_eq(fl_ps_sketch_total(s), total);
  for (uint64_t id = 0; id < 2000; id++) {
    uint32_t e = fl_ps_sketch_estimate(s, id);
    ck_assert_uint_ge(e, truth[id]); /* never below */
    over += (double)(e - truth[id]) > 2.0 * (double)total / (double)width;
  }
  /* The documented bound: each id over by more than 2N/w w.p. <= 2^-4. */
  ck_assert_uint_le(over, 2000 / 16);
  fl_ps_sketch_free(s);
}
END_TEST

START_TEST(test_admission_stream) {
  fl_ps_table_opts o = opts(FL_OPTIM_SGD, 100);
  fl_ps_table *t;
  fl_ps_table_counts n;
  float v[4 * DIM], g[DIM] = {1, 1, 1};
  /* Scripted stream: id 7 three times, id 8 twice, id 9 once. */
  const uint64_t stream[] = {7, 8, 7, 9, 8, 7};
  const int rows_after[] = {0, 0, 0, 0, 0, 1};
  uint64_t k8 = 8, k7 = 7;

  o.admit_threshold = 3;
  o.admit_default = 0.25f;
  t = make(&o);
  for (size_t i = 0; i < 6; i++) {
    ck_assert_int_eq(fl_ps_table_pull(t, &stream[i], 1, v), FL_OK);
    ck_assert_uint_eq(fl_ps_table_rows(t), (size_t)rows_after[i]);
    if (i < 5)
      for (int j = 0; j < DIM; j++) ck_assert(v[j] == 0.25f);
  }
  fl_ps_table_counts_of(t, &n);
  ck_assert_uint_eq(n.admitted, 1);
  ck_assert_uint_eq(n.refused, 5);
  /* A gradient of an id below the threshold is dropped, no row made. */
  ck_assert_int_eq(fl_ps_table_push(t, &k8, 1, g), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 1);
  ck_assert(!fl_ps_table_peek(t, 8, v));
  /* Read-only reads count nothing and create nothing. */
  for (int i = 0; i < 5; i++) ck_assert_int_eq(fl_ps_table_read(t, &k8, 1, v), FL_OK);
  ck_assert(v[0] == 0.25f);
  fl_ps_table_counts_of(t, &n);
  ck_assert_uint_eq(n.refused, 5);
  ck_assert_uint_eq(fl_ps_table_rows(t), 1);
  /* Id 8's third training pull admits it; id 7's gradient applies. */
  ck_assert_int_eq(fl_ps_table_pull(t, &k8, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 2);
  ck_assert(fl_ps_table_peek(t, 7, v));
  ck_assert_int_eq(fl_ps_table_push(t, &k7, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(t, 7, v + DIM));
  ck_assert(v[DIM] == v[0] - 0.1f);
  fl_ps_table_free(t);
}
END_TEST

START_TEST(test_expire_steps) {
  fl_ps_table_opts o = opts(FL_OPTIM_SGD, 100);
  fl_ps_table *t;
  fl_ps_table_counts n;
  float v[4 * DIM], g[4 * DIM];
  uint64_t a[] = {1, 2}, b[] = {3}, c[] = {1}, d[] = {4};

  memset(g, 0, sizeof g);
  o.expire_after_steps = 2;
  t = make(&o);
  ck_assert_int_eq(fl_ps_table_pull(t, d, 1, v), FL_OK);  /* 4 seen at step 0 */
  ck_assert_int_eq(fl_ps_table_push(t, a, 2, g), FL_OK);  /* step 1: 1, 2 */
  ck_assert_uint_eq(fl_ps_table_expire(t, 0), 0);         /* 4: unseen 1 step */
  ck_assert_int_eq(fl_ps_table_push(t, b, 1, g), FL_OK);  /* step 2: 3 */
  ck_assert_uint_eq(fl_ps_table_expire(t, 0), 1);         /* 4: unseen 2 steps */
  ck_assert(!fl_ps_table_peek(t, 4, v));
  ck_assert_int_eq(fl_ps_table_push(t, c, 1, g), FL_OK);  /* step 3: 1 */
  ck_assert_uint_eq(fl_ps_table_expire(t, 0), 1);         /* 2 (seen at 1) */
  ck_assert(!fl_ps_table_peek(t, 2, v));
  ck_assert(fl_ps_table_peek(t, 1, v) && fl_ps_table_peek(t, 3, v));
  ck_assert_uint_eq(fl_ps_table_rows(t), 2);
  fl_ps_table_counts_of(t, &n);
  ck_assert_uint_eq(n.expired, 2);
  /* The rows left still work (indices moved on deletion). */
  ck_assert_int_eq(fl_ps_table_pull(t, b, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 2);
  fl_ps_table_free(t);
}
END_TEST

START_TEST(test_expire_seconds) {
  fl_ps_table_opts o = opts(FL_OPTIM_SGD, 100);
  fl_ps_table *t;
  float v[DIM];
  uint64_t k1 = 1, k2 = 2;

  o.expire_after_seconds = 10;
  t = make(&o); /* now 1000 */
  ck_assert_int_eq(fl_ps_table_pull(t, &k1, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_expire(t, 1005), 0);
  ck_assert_int_eq(fl_ps_table_pull(t, &k2, 1, v), FL_OK); /* seen at 1005 */
  ck_assert_uint_eq(fl_ps_table_expire(t, 1012), 1);
  ck_assert(!fl_ps_table_peek(t, 1, v));
  ck_assert(fl_ps_table_peek(t, 2, v));
  ck_assert_uint_eq(fl_ps_table_expire(t, 1015), 1);
  ck_assert_uint_eq(fl_ps_table_rows(t), 0);
  fl_ps_table_free(t);
}
END_TEST

/* Save t (whole, or its delta) into memory: the bytes (caller frees). */
static void *save_mem(const fl_ps_table *t, int delta, size_t *len) {
  fl_ckpt_writer *w = NULL;
  void *buf = NULL;
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  if (delta) ck_assert_int_eq(fl_ps_table_save_delta(t, w, "sparse/emb/"), FL_OK);
  else ck_assert_int_eq(fl_ps_table_save(t, w, "sparse/emb/"), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, len), FL_OK);
  return buf;
}

/* The ns stripes ts saved by fl_ps_table_save_many, in memory (the
 * caller frees the bytes). */
static void *save_many_mem(fl_ps_table *const *ts, size_t ns, size_t *len) {
  fl_ckpt_writer *w = NULL;
  void *buf = NULL;
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ps_table_save_many((const fl_ps_table *const *)ts, ns, w, "sparse/emb/"),
                   FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, len), FL_OK);
  return buf;
}

static fl_ckpt *open_mem(const void *buf, size_t len) {
  fl_ckpt *c = NULL;
  ck_assert_int_eq(fl_ckpt_load_mem(buf, len, "mem", &c), FL_OK);
  return c;
}

START_TEST(test_admission_survives_checkpoint) {
  fl_ps_table_opts o = opts(FL_OPTIM_ADAGRAD, 100);
  fl_ps_table *t, *u;
  fl_ckpt *c;
  void *buf;
  size_t len;
  float v[DIM];
  uint64_t k = 5, j = 6;

  o.admit_threshold = 3;
  o.expire_after_steps = 3;
  t = make(&o);
  u = make(&o);
  ck_assert_int_eq(fl_ps_table_pull(t, &k, 1, v), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(t, &k, 1, v), FL_OK);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(fl_ps_table_pull(t, &j, 1, v), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(t, &j, 1, v), FL_OK); /* step 1 */
  ck_assert_int_eq(fl_ps_table_push(t, &j, 1, v), FL_OK); /* step 2 */
  buf = save_mem(t, 0, &len);
  c = open_mem(buf, len);
  ck_assert_int_eq(fl_ps_table_load(u, c, "sparse/emb/"), FL_OK);
  fl_ckpt_free(c);
  free(buf);
  /* Id 5 was seen twice before: its third pull admits it. */
  ck_assert_int_eq(fl_ps_table_pull(u, &k, 1, v), FL_OK);
  ck_assert(fl_ps_table_peek(u, 5, v));
  /* Id 6, last seen at step 2, expires at step 5 with the clock restored. */
  ck_assert_int_eq(fl_ps_table_push(u, &k, 1, v), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(u, &k, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_expire(u, 0), 0);
  ck_assert_int_eq(fl_ps_table_push(u, &k, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_expire(u, 0), 1);
  ck_assert(!fl_ps_table_peek(u, 6, v));
  fl_ps_table_free(t);
  fl_ps_table_free(u);
}
END_TEST

/* Round r of a scripted workload on t: an expiry sweep at time 1000 + r
 * (it sets the table's clock, as the server's tick does), then pulls and
 * pushes over a key range wider than max_rows (evictions). */
static void workload(fl_ps_table *t, int r) {
  uint64_t keys[16];
  float v[16 * DIM], g[16 * DIM];
  fl_ps_table_expire(t, 1000 + r);
  for (int i = 0; i < 16; i++) {
    keys[i] = (uint64_t)((r * 37 + i * 11) % 97);
    for (int j = 0; j < DIM; j++) g[i * DIM + j] = 0.01f * (float)(i - j + r);
  }
  ck_assert_int_eq(fl_ps_table_pull(t, keys, 16, v), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(t, keys, 8 + r % 8, g), FL_OK);
}

START_TEST(test_delta_bit_for_bit) {
  fl_ps_table_opts o = opts(FL_OPTIM_ADAM, 40);
  fl_ps_table *t, *u;
  void *base, *d[3], *whole, *again;
  size_t lb, ld[3], lw, la;
  fl_ckpt *c;
  fl_ps_table_counts n;

  o.admit_threshold = 2;
  o.expire_after_steps = 3;
  o.track_changes = 1;
  t = make(&o);
  u = make(&o);
  for (int r = 0; r < 5; r++) workload(t, r);
  base = save_mem(t, 0, &lb);
  fl_ps_table_mark_saved(t);
  for (int k = 0; k < 3; k++) {
    for (int r = 0; r < 2; r++) workload(t, 5 + k * 2 + r);
    ck_assert(fl_ps_table_delta_ok(t));
    d[k] = save_mem(t, 1, &ld[k]);
    fl_ps_table_mark_saved(t);
  }
  whole = save_mem(t, 0, &lw);
  fl_ps_table_counts_of(t, &n);
  ck_assert(n.evicted > 0 && n.expired > 0 && n.refused > 0); /* deletions replayed too */
  ck_assert_uint_lt(ld[2], lw); /* a delta is smaller */
  c = open_mem(base, lb);
  ck_assert_int_eq(fl_ps_table_load(u, c, "sparse/emb/"), FL_OK);
  /* A delta is not a base, a base not a delta. */
  ck_assert_int_eq(fl_ps_table_apply_delta(u, c, "sparse/emb/"), FL_EINVAL);
  fl_ckpt_free(c);
  for (int k = 0; k < 3; k++) {
    c = open_mem(d[k], ld[k]);
    if (k == 0) ck_assert_int_eq(fl_ps_table_load(u, c, "sparse/emb/"), FL_EINVAL);
    ck_assert_int_eq(fl_ps_table_apply_delta(u, c, "sparse/emb/"), FL_OK);
    fl_ckpt_free(c);
    free(d[k]);
  }
  again = save_mem(u, 0, &la);
  ck_assert_uint_eq(la, lw);
  ck_assert_mem_eq(again, whole, lw);
  /* ... and both go on alike. */
  workload(t, 99);
  workload(u, 99);
  free(again);
  free(whole);
  whole = save_mem(t, 0, &lw);
  again = save_mem(u, 0, &la);
  ck_assert_uint_eq(la, lw);
  ck_assert_mem_eq(again, whole, lw);
  free(base);
  free(again);
  free(whole);
  fl_ps_table_free(t);
  fl_ps_table_free(u);
}
END_TEST

/* ------------------------------------------------------- a core's directory */

/* What mk_core_with sets besides its arguments (zero: async, no expiry,
 * a sketch of 4096 bytes). */
static struct {
  int sync;
  int64_t expire_steps;
  size_t sketch_bytes;
} cfg;

/* A core of one trainer (async unless cfg.sync) and table emb of max_rows rows, with
 * admit_threshold admit and checkpoint_delta.every every (and cfg). */
static fl_ps_core *mk_core_with(int64_t max_rows, int admit, int64_t every) {
  fl_ps_core_opts o;
  fl_ps_core *c;
  pt_opts(&o, 1, !cfg.sync, FL_OPTIM_ADAGRAD, 0.1f, max_rows);
  o.job.pserver.sparse.admit_threshold = admit;
  o.job.pserver.sparse.admit_sketch_bytes = cfg.sketch_bytes ? cfg.sketch_bytes : 4096;
  o.job.pserver.sparse.expire_after_steps = cfg.expire_steps;
  o.job.pserver.checkpoint_delta.every = every;
  snprintf(o.run_id, sizeof o.run_id, "run-a");
  c = pt_core(&o);
  pt_register(c, &(pt_reg){.n_trainers = 1,
                           .mode = cfg.sync ? FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC
                                            : FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC,
                           .dim = DIM});
  return c;
}

static int64_t core_rows = 40; /* mk_core's max_rows */

static fl_ps_core *mk_core(void) { return mk_core_with(core_rows, 2, 2); }

/* The bytes of file path (caller frees). */
static void *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  void *buf;
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc(*len ? *len : 1);
  ck_assert_uint_eq(fread(buf, 1, *len, f), *len);
  fclose(f);
  return buf;
}

/* Restart a fresh core from dir; its whole checkpoint (plain, no nonce)
 * must equal want_path's bytes; stderr of the restart into log_path. */
static int64_t restart_equals(const char *dir, const char *want_path, const char *log_path) {
  fl_ps_core *d = mk_core();
  int64_t deltas = pt_load_chain(d, dir, log_path);
  char got[512];
  void *a, *b;
  size_t la, lb;

  snprintf(got, sizeof got, "%s/got.flc", dir);
  ck_assert_int_eq(fl_ps_core_save(d, got), FL_OK);
  a = slurp(got, &la);
  b = slurp(want_path, &lb);
  ck_assert_uint_eq(la, lb);
  ck_assert_mem_eq(a, b, la);
  free(a);
  free(b);
  unlink(got);
  fl_ps_core_free(d);
  return deltas;
}

/* Round r of rows pushed and pulled through the core's table. */
static void rows_round(fl_ps_core *c, int r) {
  workload(fl_ps_core_table(c, "emb"), r);
}

static int log_names(const char *log_path, const char *what) {
  size_t n;
  char *text = slurp(log_path, &n);
  int found;
  text = realloc(text, n + 1);
  text[n] = '\0';
  found = strstr(text, what) != NULL;
  free(text);
  return found;
}

START_TEST(test_core_delta_dir) {
  char dir[] = "/tmp/fl_test_admit_XXXXXX", path[512], want1[512], want2[512], logp[512];
  char d1[512], d2[512];
  fl_ps_core *c;
  int64_t step;
  FILE *f;
  size_t len;
  unsigned char *buf;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(want1, sizeof want1, "%s/want1.flc", dir);
  snprintf(want2, sizeof want2, "%s/want2.flc", dir);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  c = mk_core();
  for (int r = 0; r < 4; r++) rows_round(c, r);
  ck_assert_int_eq(fl_ps_core_save_dir(c, dir, &step, path, sizeof path), FL_OK);
  ck_assert_ptr_nonnull(strstr(path, "/ckpt-"));
  rows_round(c, 4);
  ck_assert_int_eq(fl_ps_core_save_dir(c, dir, &step, d1, sizeof d1), FL_OK);
  ck_assert_ptr_nonnull(strstr(d1, "/delta-0+1.flc"));
  ck_assert_int_eq(fl_ps_core_save(c, want1), FL_OK);
  rows_round(c, 5);
  rows_round(c, 6);
  ck_assert_int_eq(fl_ps_core_save_dir(c, dir, &step, d2, sizeof d2), FL_OK);
  ck_assert_ptr_nonnull(strstr(d2, "/delta-0+2.flc"));
  ck_assert_int_eq(fl_ps_core_save(c, want2), FL_OK);
  /* Base and both deltas replay to the whole state, bit for bit. */
  ck_assert_int_eq(restart_equals(dir, want2, logp), 2);
  /* A truncated second delta is named; the restart stops after the first. */
  buf = slurp(d2, &len);
  ck_assert_int_eq(truncate(d2, (off_t)(len / 2)), 0);
  ck_assert_int_eq(restart_equals(dir, want1, logp), 1);
  ck_assert(log_names(logp, d2));
  /* A corrupted one (a byte flipped) likewise. */
  buf[len / 2] ^= 0x5a;
  f = fopen(d2, "wb");
  ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
  fclose(f);
  ck_assert_int_eq(restart_equals(dir, want1, logp), 1);
  ck_assert(log_names(logp, d2));
  free(buf);
  /* The tick publishes the table's counters in /metrics. */
  {
    fl_ps_table_counts n;
    char *text = NULL, want[160];
    size_t tlen;
    fl_ps_core_tick(c, fl_ps_now());
    fl_ps_table_counts_of(fl_ps_core_table(c, "emb"), &n);
    ck_assert_uint_gt(n.refused, 0);
    ck_assert_int_eq(fl_metrics_render(fl_metrics_default(), &text, &tlen), FL_OK);
    snprintf(want, sizeof want, "flotilla_table_row_events{table=\"emb\",event=\"refused\"} %llu\n",
             (unsigned long long)n.refused);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "flotilla_table_row_events{table=\"emb\",event=\"admitted\"} %llu\n",
             (unsigned long long)n.admitted);
    ck_assert_ptr_nonnull(strstr(text, want));
    free(text);
  }
  /* After two deltas (every 2) the next checkpoint is a base again. */
  rows_round(c, 7);
  ck_assert_int_eq(fl_ps_core_save_dir(c, dir, &step, path, sizeof path), FL_OK);
  ck_assert_ptr_nonnull(strstr(path, "/ckpt-"));
  fl_ps_core_free(c);
  unlink(want1);
  unlink(want2);
  unlink(logp);
  unlink(d1);
  unlink(d2);
  unlink(path);
  ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A table of several stripes saves as format 3 (marks and all), stripe
 * after stripe, and loads back into as many stripes or into one table;
 * one stripe through fl_ps_table_save_many is fl_ps_table_save. */
START_TEST(test_striped_save_load) {
  fl_ps_table_opts o = opts(FL_OPTIM_ADAGRAD, 64);
  fl_ps_table *ts[4], *us[4], *one;
  fl_ckpt *c;
  fl_ckpt_record r;
  void *buf, *b1, *b2;
  size_t len, l1, l2;
  int64_t fmt;
  float v[DIM], g[DIM] = {0.5f, -0.25f, 1.0f}, x[DIM];

  for (int s = 0; s < 4; s++) ts[s] = make(&o), us[s] = make(&o);
  for (uint64_t k = 0; k < 100; k++) {
    fl_ps_table *t = ts[fl_ps_table_stripe(k, 4)];
    ck_assert_int_eq(fl_ps_table_pull(t, &k, 1, v), FL_OK);
    if (k % 3 == 0) ck_assert_int_eq(fl_ps_table_push(t, &k, 1, g), FL_OK);
  }
  buf = save_many_mem(ts, 4, &len);
  c = open_mem(buf, len);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "sparse/emb/format", &fmt), FL_OK);
  ck_assert_int_eq(fmt, FL_PS_TABLE_FORMAT);
  ck_assert_int_eq(fl_ckpt_find(c, "sparse/emb/seen_step", &r), FL_OK);
  ck_assert_int_eq(fl_ps_table_load_many(us, 4, c, "sparse/emb/"), FL_OK);
  o.max_rows = 400;
  one = make(&o);
  ck_assert_int_eq(fl_ps_table_load(one, c, "sparse/emb/"), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(one), 100);
  for (uint64_t k = 0; k < 100; k++) {
    unsigned s = fl_ps_table_stripe(k, 4);
    ck_assert(fl_ps_table_peek(ts[s], k, v));
    ck_assert(fl_ps_table_peek(us[s], k, x));
    ck_assert_mem_eq(v, x, sizeof v);
    ck_assert(fl_ps_table_peek(one, k, x));
    ck_assert_mem_eq(v, x, sizeof v);
  }
  fl_ckpt_free(c);
  /* Loaded into as many stripes, it saves the same bytes again. */
  b1 = save_many_mem(us, 4, &l1);
  ck_assert_uint_eq(l1, len);
  ck_assert_mem_eq(b1, buf, len);
  free(b1);
  free(buf);
  b1 = save_mem(one, 0, &l1);
  b2 = save_many_mem(&one, 1, &l2);
  ck_assert_uint_eq(l1, l2);
  ck_assert_mem_eq(b1, b2, l1);
  free(b1);
  free(b2);
  for (int s = 0; s < 4; s++) fl_ps_table_free(ts[s]), fl_ps_table_free(us[s]);
  fl_ps_table_free(one);
}
END_TEST

/* Format 2, as builds before striped admission wrote a striped table (no
 * marks, clock, counts or sketch), still loads into stripes and into one. */
START_TEST(test_format2_loads) {
  fl_ps_table_opts o = opts(FL_OPTIM_ADAGRAD, 64);
  fl_ps_table *us[4], *one;
  fl_ckpt_writer *w = NULL;
  fl_ckpt *c;
  uint64_t keys[50];
  int64_t steps[50], n = 50, shape[2] = {50, DIM};
  float vals[50 * DIM], st1[50 * DIM], x[DIM];
  void *buf;
  size_t len;

  for (int i = 0; i < 50; i++) {
    keys[i] = (uint64_t)(1000 + 7 * i);
    steps[i] = i % 3;
    for (int j = 0; j < DIM; j++) {
      vals[i * DIM + j] = 0.125f * (float)(i - j);
      st1[i * DIM + j] = 0.5f + (float)j;
    }
  }
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_i64(w, "sparse/emb/format", 2), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_i64(w, "sparse/emb/optimizer", FL_OPTIM_ADAGRAD), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/emb/keys", FL_CKPT_U64, 1, &n, keys), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/emb/steps", FL_CKPT_I64, 1, &n, steps), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/emb/values", FL_CKPT_F32, 2, shape, vals), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/emb/state1", FL_CKPT_F32, 2, shape, st1), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &buf, &len), FL_OK);
  c = open_mem(buf, len);
  o.admit_threshold = 2;
  one = make(&o);
  us[0] = make(&o);
  o.sketch_of = us[0];
  for (int s = 1; s < 4; s++) us[s] = make(&o);
  ck_assert_int_eq(fl_ps_table_load_many(us, 4, c, "sparse/emb/"), FL_OK);
  ck_assert_int_eq(fl_ps_table_load(one, c, "sparse/emb/"), FL_OK);
  for (int i = 0; i < 50; i++) {
    ck_assert(fl_ps_table_peek(us[fl_ps_table_stripe(keys[i], 4)], keys[i], x));
    ck_assert_mem_eq(x, vals + i * DIM, sizeof x);
    ck_assert(fl_ps_table_peek(one, keys[i], x));
    ck_assert_mem_eq(x, vals + i * DIM, sizeof x);
  }
  fl_ckpt_free(c);
  free(buf);
  for (int s = 3; s >= 0; s--) fl_ps_table_free(us[s]);
  fl_ps_table_free(one);
}
END_TEST

/* Format of table emb in core c's whole checkpoint, and whether it holds
 * an admission sketch. */
static int64_t core_table_format(fl_ps_core *c, int *sketch) {
  char path[] = "/tmp/fl_test_admit_ck_XXXXXX";
  int fd = mkstemp(path);
  fl_ckpt *ck = NULL;
  fl_ckpt_record r;
  int64_t fmt = -1;
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  ck_assert_int_eq(fl_ckpt_get_i64(ck, "sparse/emb/format", &fmt), FL_OK);
  *sketch = fl_ckpt_find(ck, "sparse/emb/sketch", &r) == FL_OK;
  fl_ckpt_free(ck);
  unlink(path);
  return fmt;
}

/* A sync pull of keys at min_step (1 for the pulls of step 0 on), and a
 * push of step with gradients from the keys. */
static void core_pull(fl_ps_core *c, int64_t min_step, const uint64_t *keys, size_t n) {
  const pt_call k = {.table = "emb", .dim = DIM, .min_step = min_step};
  float out[64 * DIM];
  ck_assert_uint_le(n, 64);
  ck_assert_int_eq(pt_pull_sparse(c, &k, keys, n, out), FL_OK);
}

static void core_push(fl_ps_core *c, int64_t step, const uint64_t *keys, size_t n) {
  const pt_call k = {.table = "emb", .dim = DIM, .step = step, .parts = 1};
  float g[64 * DIM];
  ck_assert_uint_le(n, 64);
  for (size_t i = 0; i < n * DIM; i++) g[i] = 0.03f * (float)((keys[i / DIM] + i) % 17) - 0.2f;
  ck_assert_int_eq(pt_push_sparse(c, &k, keys, n, g), FL_OK);
}

/* Step s of a sync run: 40 keys of 300 (each seen every few steps, so
 * that admission admits them and expiry takes the ones gone quiet). */
static void sync_step(fl_ps_core *c, int64_t s) {
  uint64_t keys[40];
  for (int i = 0; i < 40; i++) keys[i] = (uint64_t)((s * 53 + i * (s < 12 ? 7 : 3)) % 300);
  core_pull(c, s, keys, 40);
  core_push(c, s, keys, 40);
}

/* Every row of core c's table emb through DumpSparse pages of 37 rows:
 * keys and values (caller frees), their count. */
static size_t dump_all(fl_ps_core *c, uint64_t **keys, float **vals) {
  fl_ps_dump_buf buf = {NULL, NULL, 0, 0};
  size_t n = 0;
  int more = 1;
  *keys = malloc(4096 * sizeof **keys);
  *vals = malloc(4096 * DIM * sizeof **vals);
  while (more) {
    Flotilla__DumpSparseRequest q = FLOTILLA__DUMP_SPARSE_REQUEST__INIT;
    Flotilla__DumpSparseResponse r = FLOTILLA__DUMP_SPARSE_RESPONSE__INIT;
    Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
    int64_t shape[2];
    q.trainer_id = FL_PS_OBSERVER;
    q.table = "emb";
    q.has_after = n > 0;
    q.after_key = n ? (*keys)[n - 1] : 0;
    q.max_rows = 37;
    ck_assert_int_eq(fl_ps_core_dump_sparse(c, &q, &buf, &r, &v, shape), FL_OK);
    ck_assert_uint_le(n + r.n_keys, 4096);
    for (size_t i = 0; i < r.n_keys; i++)
      ck_assert(i + n == 0 || r.keys[i] > (i ? r.keys[i - 1] : (*keys)[n - 1]));
    memcpy(*keys + n, r.keys, r.n_keys * sizeof **keys);
    memcpy(*vals + n * DIM, v.data.data, r.n_keys * DIM * sizeof **vals);
    n += r.n_keys;
    more = r.more;
    ck_assert(r.n_keys == 37 || !more);
  }
  free(buf.keys);
  free(buf.vals);
  return n;
}

/* Core c's whole checkpoint, loaded (caller frees). */
static fl_ckpt *core_ckpt(fl_ps_core *c) {
  char path[] = "/tmp/fl_test_admit_ck_XXXXXX";
  int fd = mkstemp(path);
  fl_ckpt *ck = NULL;
  close(fd);
  ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  unlink(path);
  return ck;
}

static void same_record(const fl_ckpt *a, const fl_ckpt *b, const char *name) {
  fl_ckpt_record x, y;
  ck_assert_int_eq(fl_ckpt_find(a, name, &x), FL_OK);
  ck_assert_int_eq(fl_ckpt_find(b, name, &y), FL_OK);
  ck_assert_uint_eq(x.nbytes, y.nbytes);
  ck_assert_mem_eq(x.data, y.data, x.nbytes);
}

/* Sync training with admission, expiry by steps and delta checkpoints
 * over 16 stripes ends bit for bit where one stripe does: the same rows
 * and values (DumpSparse, merged from every stripe's cursor), counters,
 * clock and sketch; and the striped core's base plus deltas replay into
 * its whole state. */
START_TEST(test_core_stripes_equal_one) {
  char dir[] = "/tmp/fl_test_admit_XXXXXX", path[512], want[512], logp[512];
  fl_ps_core *one, *many;
  uint64_t *k1, *k2;
  float *v1, *v2;
  size_t n1, n2;
  int64_t step;
  fl_ckpt *a, *b;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  cfg.sync = 1;
  cfg.expire_steps = 6;
  cfg.sketch_bytes = 1 << 20; /* no two of the 300 ids share a counter */
  one = mk_core_with(2000, 2, 2);
  many = mk_core_with(1 << 17, 2, 2);
  for (int64_t s = 0; s < 27; s++) {
    sync_step(one, s);
    sync_step(many, s);
    if (s % 3 == 2) {
      ck_assert_int_eq(fl_ps_core_save_dir(many, dir, &step, path, sizeof path), FL_OK);
      fl_ps_core_tick(one, fl_ps_now()); /* the same expiry sweep */
    }
  }
  n1 = dump_all(one, &k1, &v1);
  n2 = dump_all(many, &k2, &v2);
  ck_assert_uint_gt(n1, 100);
  ck_assert_uint_lt(fl_ps_table_rows(fl_ps_core_table(many, "emb")), n2 / 4); /* striped */
  ck_assert_uint_eq(n1, n2);
  ck_assert_mem_eq(k1, k2, n1 * sizeof *k1);
  ck_assert_mem_eq(v1, v2, n1 * DIM * sizeof *v1);
  a = core_ckpt(one);
  b = core_ckpt(many);
  same_record(a, b, "sparse/emb/counts");
  same_record(a, b, "sparse/emb/clock");
  same_record(a, b, "sparse/emb/sketch");
  {
    fl_ckpt_record r;
    ck_assert_int_eq(fl_ckpt_find(a, "sparse/emb/counts", &r), FL_OK);
    ck_assert(((const int64_t *)r.data)[2] > 0 && ((const int64_t *)r.data)[1] > 0);
  }
  fl_ckpt_free(a);
  fl_ckpt_free(b);
  /* The last save_dir was a delta; the whole state equals its replay. */
  ck_assert_ptr_nonnull(strstr(path, "/delta-"));
  snprintf(want, sizeof want, "%s/want.flc", dir);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  ck_assert_int_eq(fl_ps_core_save(many, want), FL_OK);
  core_rows = 1 << 17;
  ck_assert_int_eq(restart_equals(dir, want, logp), 2);
  core_rows = 40;
  memset(&cfg, 0, sizeof cfg);
  free(k1), free(k2), free(v1), free(v2);
  fl_ps_core_free(one);
  fl_ps_core_free(many);
  snprintf(want, sizeof want, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(want), 0);
}
END_TEST

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* DumpSparse pages of a 16-stripe table whose rows crowd into one stripe:
 * that stripe's cursor fetches chunk after chunk, the page stays full and
 * ascending, and every row comes once. */
START_TEST(test_dump_cursor_refills) {
  fl_ps_core *c = mk_core_with(1 << 17, 0, 0);
  uint64_t want[200], *got;
  float *vals;
  size_t n = 0;
  for (uint64_t k = 1; n < 200; k++)
    if (fl_ps_table_stripe(k, 16) == 5 || k % 7 == 0) want[n++] = k;
  for (size_t i = 0; i < 200; i += 40) core_pull(c, 0, want + i, 40);
  qsort(want, 200, sizeof *want, cmp_u64);
  ck_assert_uint_eq(dump_all(c, &got, &vals), 200);
  ck_assert_mem_eq(got, want, sizeof want);
  free(got);
  free(vals);
  fl_ps_core_free(c);
}
END_TEST

/* A table big enough for lock stripes is striped with admission or delta
 * checkpoints as without them, and saves as format 3 (its sketch with
 * admission). */
START_TEST(test_core_stripes_by_feature) {
  static const struct {
    int admit;
    int64_t every;
    int sketch;
  } cases[] = {{2, 0, 1}, {0, 2, 0}, {0, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fl_ps_core *c = mk_core_with(1 << 17, cases[i].admit, cases[i].every);
    int sketch = -1;
    for (int64_t s = 0; s < 4; s++) {
      uint64_t keys[40];
      for (int j = 0; j < 40; j++) keys[j] = (uint64_t)(j * 13 + s);
      core_pull(c, 0, keys, 40);
    }
    ck_assert_uint_lt(fl_ps_table_rows(fl_ps_core_table(c, "emb")), 40);
    ck_assert_int_eq(core_table_format(c, &sketch), FL_PS_TABLE_FORMAT);
    ck_assert_int_eq(sketch, cases[i].sketch);
    fl_ps_core_free(c);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_admit");
  TCase *tc = tcase_create("admit");
  tcase_add_test(tc, test_sketch_bound);
  tcase_add_test(tc, test_admission_stream);
  tcase_add_test(tc, test_expire_steps);
  tcase_add_test(tc, test_expire_seconds);
  tcase_add_test(tc, test_admission_survives_checkpoint);
  tcase_add_test(tc, test_delta_bit_for_bit);
  tcase_add_test(tc, test_core_delta_dir);
  tcase_add_test(tc, test_striped_save_load);
  tcase_add_test(tc, test_format2_loads);
  tcase_add_test(tc, test_core_stripes_equal_one);
  tcase_add_test(tc, test_dump_cursor_refills);
  tcase_add_test(tc, test_core_stripes_by_feature);
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
