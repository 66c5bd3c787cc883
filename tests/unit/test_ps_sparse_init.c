/* test_ps_sparse_init.c - a model's own sparse tables on the pserver: the
 * per-table settings of pserver.sparse_tables (init_range, padding_id),
 * InitSparse (rows created when absent, existing rows unchanged, counted)
 * and DumpSparse (pages of keys ascending, read-only) through the core;
 * their bad requests refused with a clear message; rows made by InitSparse
 * kept by a checkpoint; and both calls over the wire: a bad request is
 * answered INVALID_ARGUMENT while the service goes on, and the trainer's
 * client initialises and dumps a table split over two servers. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ps.h"
#include "fl_ps_client.h"
#include "ps_testutil.h"

#define DIM 3

/* A core of one trainer, server si of ns, mode sync (a_sync 0) or async,
 * whose table "emb" has its own settings: init_range 0.5, padding id 7. */
static fl_ps_core *mk(int a_sync, int si, int ns, int64_t max_rows) {
  fl_ps_core_opts o;
  fl_job_sparse_table *jt;
  pt_opts(&o, 1, a_sync, FL_OPTIM_SGD, 0.5f, max_rows);
  jt = &o.job.pserver.sparse_tables[0];
  snprintf(jt->name, sizeof jt->name, "emb");
  jt->init = FL_SPARSE_INIT_FROM_MODEL;
  jt->init_range = 0.5f;
  jt->has_padding = 1;
  jt->padding_id = 7;
  o.job.pserver.n_sparse_tables = 1;
  o.server_index = si;
  o.n_servers = ns;
  return pt_core(&o);
}

/* Register trainer 0 with the tables "emb" (its own settings) and "plain"
 * (the server's), both DIM wide. */
static void reg(fl_ps_core *c, int a_sync, int si, int ns) {
  static const char *const names[2] = {"emb", "plain"};
  pt_register(c, &(pt_reg){.n_trainers = 1,
                           .mode = a_sync ? FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC
                                          : FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC,
                           .server_index = si, .n_servers = ns, .dim = DIM, .tables = names,
                           .n_tables = 2});
}

static void tensor(Flotilla__Tensor *t, int64_t *shape, size_t n, size_t dim, const float *v) {
  flotilla__tensor__init(t);
  shape[0] = (int64_t)n;
  shape[1] = (int64_t)dim;
  t->dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  t->n_shape = 2;
  t->shape = shape;
  t->data.data = (uint8_t *)v;
  t->data.len = n * dim * sizeof(float);
}

/* InitSparse of n rows (rows of dim floats); *created (may be NULL). */
static fl_status init_rows(fl_ps_core *c, const char *table, const uint64_t *keys, size_t n,
                           const float *v, size_t dim, int32_t *created) {
  Flotilla__InitSparseRequest q = FLOTILLA__INIT_SPARSE_REQUEST__INIT;
  Flotilla__InitSparseResponse r = FLOTILLA__INIT_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor t;
  int64_t shape[2];
  fl_status st;
  tensor(&t, shape, n, dim, v);
  q.trainer_id = 0;
  q.table = (char *)table;
  q.n_keys = n;
  q.keys = (uint64_t *)keys;
  q.values = &t;
  st = fl_ps_core_init_sparse(c, &q, &r);
  if (created) *created = r.created;
  return st;
}

static fl_status spull(fl_ps_core *c, const uint64_t *keys, size_t n, int read_only,
                       float *out) {
  return pt_pull_sparse(c, &(pt_call){.table = "emb", .dim = DIM, .read_only = read_only}, keys,
                        n, out);
}

static fl_status spush(fl_ps_core *c, int64_t step, const uint64_t *keys, size_t n,
                       const float *g) {
  return pt_push_sparse(c, &(pt_call){.table = "emb", .dim = DIM, .step = step, .parts = 1},
                        keys, n, g);
}

/* One DumpSparse page into keys / vals (copied); its row count. */
static size_t dump(fl_ps_core *c, const char *table, int has_after, uint64_t after,
                   uint32_t max_rows, uint64_t *keys, float *vals, int *more, fl_status *st) {
  Flotilla__DumpSparseRequest q = FLOTILLA__DUMP_SPARSE_REQUEST__INIT;
  Flotilla__DumpSparseResponse r = FLOTILLA__DUMP_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
  fl_ps_dump_buf buf = {NULL, NULL, 0, 0};
  int64_t shape[2];
  size_t n = 0;
  q.trainer_id = FL_PS_OBSERVER;
  q.table = (char *)table;
  q.has_after = has_after;
  q.after_key = after;
  q.max_rows = max_rows;
  *st = fl_ps_core_dump_sparse(c, &q, &buf, &r, &v, shape);
  if (*st == FL_OK) {
    n = r.n_keys;
    ck_assert_int_eq(shape[0], (int64_t)n);
    ck_assert_int_eq(shape[1], DIM);
    if (n) memcpy(keys, r.keys, n * sizeof *keys);
    if (n) memcpy(vals, v.data.data, n * DIM * sizeof(float));
    *more = r.more;
  }
  free(buf.keys);
  free(buf.vals);
  return n;
}

static void stats(fl_ps_core *c, Flotilla__StatsResponse *s) {
  flotilla__stats_response__init(s);
  fl_ps_core_stats(c, s);
}

START_TEST(test_init_creates_if_absent) {
  fl_ps_core *c = mk(1, 0, 1, 100);
  uint64_t keys[3] = {1, 2, 3}, again[2] = {3, 4};
  float v[3 * DIM], w[2 * DIM], got[DIM], pulled[DIM];
  int32_t created = -1;
  Flotilla__StatsResponse s;
  for (int i = 0; i < 3 * DIM; i++) v[i] = 0.25f * (float)i - 1.0f;
  for (int i = 0; i < 2 * DIM; i++) w[i] = 9.0f + (float)i;
  reg(c, 1, 0, 1);
  /* Key 2 exists (pulled) before the init: it keeps its value. */
  ck_assert_int_eq(spull(c, &keys[1], 1, 0, pulled), FL_OK);
  ck_assert_int_eq(init_rows(c, "emb", keys, 3, v, DIM, &created), FL_OK);
  ck_assert_int_eq(created, 2);
  ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 1, got));
  ck_assert_mem_eq(got, v, sizeof got);
  ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 2, got));
  ck_assert_mem_eq(got, pulled, sizeof got);
  /* Again, with other values: 3 stays, 4 is new; the same call twice
   * changes nothing the second time. */
  ck_assert_int_eq(init_rows(c, "emb", again, 2, w, DIM, &created), FL_OK);
  ck_assert_int_eq(created, 1);
  ck_assert_int_eq(init_rows(c, "emb", again, 2, w, DIM, &created), FL_OK);
  ck_assert_int_eq(created, 0);
  ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 3, got));
  ck_assert_mem_eq(got, v + 2 * DIM, sizeof got);
  ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 4, got));
  ck_assert_mem_eq(got, w + DIM, sizeof got);
  stats(c, &s);
  ck_assert_uint_eq(s.sparse_init_rows, 3);
  ck_assert_uint_eq(s.sparse_rows, 4);
  /* An initialised row trains from its values (sgd, lr 0.5). */
  {
    float g[DIM] = {1, 2, 4};
    ck_assert_int_eq(spush(c, 0, &keys[0], 1, g), FL_OK);
    ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 1, got));
    for (int j = 0; j < DIM; j++) ck_assert_float_eq(got[j], v[j] - 0.5f * g[j]);
  }
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_table_settings_and_padding) {
  for (int a_sync = 0; a_sync <= 1; a_sync++) {
    fl_ps_core *c = mk(a_sync, 0, 1, 100);
    uint64_t keys[3] = {5, 7, 6}, pad = 7;
    float out[3 * DIM], ro[3 * DIM], g[3 * DIM], plain[DIM], v[DIM] = {1, 1, 1};
    const float zero[DIM] = {0};
    float maxabs = 0, pmax = 0;
    int32_t created = -1;
    Flotilla__StatsResponse s;
    reg(c, a_sync, 0, 1);
    /* The padding id reads as zeros, training pull or read, and is never a row. */
    ck_assert_int_eq(spull(c, keys, 3, 0, out), FL_OK);
    ck_assert_mem_eq(out + DIM, zero, sizeof zero);
    ck_assert_int_eq(spull(c, keys, 3, 1, ro), FL_OK);
    ck_assert_mem_eq(ro, out, sizeof out);
    ck_assert(!fl_ps_table_peek(fl_ps_core_table(c, "emb"), pad, plain));
    ck_assert_uint_eq(fl_ps_table_rows(fl_ps_core_table(c, "emb")), 2);
    /* ... its gradient is dropped (counted), the others' applied. */
    for (int i = 0; i < 3 * DIM; i++) g[i] = 1.0f;
    ck_assert_int_eq(spush(c, 0, keys, 3, g), FL_OK);
    ck_assert(!fl_ps_table_peek(fl_ps_core_table(c, "emb"), pad, plain));
    ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), 5, plain));
    ck_assert_float_eq(plain[0], out[0] - 0.5f);
    stats(c, &s);
    ck_assert_uint_eq(s.padding_dropped, 1);
    /* ... and InitSparse does not create it. */
    ck_assert_int_eq(init_rows(c, "emb", &pad, 1, v, DIM, &created), FL_OK);
    ck_assert_int_eq(created, 0);
    ck_assert(!fl_ps_table_peek(fl_ps_core_table(c, "emb"), pad, plain));
    /* init_range 0.5 for emb, the server's 0.01 for plain. */
    for (uint64_t k = 100; k < 164; k++) {
      float x[DIM];
      ck_assert_int_eq(spull(c, &k, 1, 1, x), FL_OK);
      for (int j = 0; j < DIM; j++) maxabs = x[j] > maxabs ? x[j] : -x[j] > maxabs ? -x[j] : maxabs;
    }
    ck_assert(maxabs > 0.1f && maxabs <= 0.5f);
    {
      uint64_t pk[2] = {7, 100};
      float pv[2 * DIM];
      /* no padding id there: 7 is a row like any other */
      ck_assert_int_eq(pt_pull_sparse(c, &(pt_call){.table = "plain", .dim = DIM}, pk, 2, pv),
                       FL_OK);
      for (int j = 0; j < 2 * DIM; j++) pmax = pv[j] > pmax ? pv[j] : -pv[j] > pmax ? -pv[j] : pmax;
      ck_assert(pmax > 0 && pmax <= 0.01f);
      ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "plain"), 7, plain));
    }
    fl_ps_core_free(c);
  }
}
END_TEST

/* A table's init uniform(0) (init_range 0): its rows start at zeros. */
START_TEST(test_uniform_zero_rows) {
  fl_ps_core_opts o;
  fl_job_sparse_table *jt = &o.job.pserver.sparse_tables[0];
  uint64_t keys[16];
  float v[16 * DIM];
  pt_opts(&o, 1, 1, FL_OPTIM_SGD, 0.5f, 100);
  snprintf(jt->name, sizeof jt->name, "emb");
  jt->init = FL_SPARSE_INIT_UNIFORM;
  jt->init_range = 0.0f;
  o.job.pserver.n_sparse_tables = 1;
  fl_ps_core *c = pt_core(&o);
  pt_register(c, &(pt_reg){.n_trainers = 1, .mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC,
                           .dim = DIM});
  for (uint64_t k = 0; k < 16; k++) keys[k] = k * 7919;
  ck_assert_int_eq(spull(c, keys, 16, 0, v), FL_OK);
  for (int j = 0; j < 16 * DIM; j++) ck_assert_float_eq(v[j], 0.0f);
  ck_assert_uint_eq(fl_ps_table_rows(fl_ps_core_table(c, "emb")), 16);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_dump_pages) {
  fl_ps_core *c = mk(1, 0, 1, 1000);
  /* Keys in no order, the extremes included (7 is the padding id: no row). */
  const uint64_t in[8] = {42, 0, UINT64_MAX, 9, 1000000007ULL, 3, 8, 1ULL << 63};
  const uint64_t sorted[8] = {0, 3, 8, 9, 42, 1000000007ULL, 1ULL << 63, UINT64_MAX};
  float v[8 * DIM], vals[8 * DIM];
  uint64_t keys[8], after = 0;
  int more = -1, has_after = 0;
  size_t total = 0, n;
  fl_status st;
  Flotilla__StatsResponse s0, s1;
  for (int i = 0; i < 8 * DIM; i++) v[i] = (float)i * 0.125f;
  reg(c, 1, 0, 1);
  /* Empty table: no row, no more. */
  n = dump(c, "emb", 0, 0, 3, keys, vals, &more, &st);
  ck_assert_int_eq(st, FL_OK);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(more, 0);
  ck_assert_int_eq(init_rows(c, "emb", in, 8, v, DIM, NULL), FL_OK);
  stats(c, &s0);
  /* Pages of 3: 3, 3, 2 rows, keys ascending across the boundaries. */
  for (int page = 0; page < 3; page++) {
    uint64_t k[3];
    float x[3 * DIM];
    n = dump(c, "emb", has_after, after, 3, k, x, &more, &st);
    ck_assert_int_eq(st, FL_OK);
    ck_assert_uint_eq(n, page < 2 ? 3 : 2);
    ck_assert_int_eq(more, page < 2);
    for (size_t i = 0; i < n; i++) {
      size_t src = 0;
      ck_assert(k[i] == sorted[total + i]);
      while (in[src] != k[i]) src++;
      ck_assert_mem_eq(x + i * DIM, v + src * DIM, DIM * sizeof(float));
    }
    total += n;
    after = k[n - 1];
    has_after = 1;
  }
  ck_assert_uint_eq(total, 8);
  /* Exactly one page of 8; above the last key: nothing; max_rows 0: all. */
  n = dump(c, "emb", 0, 0, 8, keys, vals, &more, &st);
  ck_assert_uint_eq(n, 8);
  ck_assert_int_eq(more, 0);
  n = dump(c, "emb", 1, UINT64_MAX, 8, keys, vals, &more, &st);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(more, 0);
  n = dump(c, "emb", 1, 8, 0, keys, vals, &more, &st);
  ck_assert_uint_eq(n, 5);
  ck_assert(keys[0] == 9);
  /* Read-only: counters as they were. */
  stats(c, &s1);
  ck_assert_uint_eq(s1.pulls, s0.pulls);
  ck_assert_uint_eq(s1.pushes, s0.pushes);
  ck_assert_uint_eq(s1.sparse_rows, s0.sparse_rows);
  ck_assert_uint_eq(s1.invalid, s0.invalid);
  /* An unknown table: a clear error. */
  dump(c, "nope", 0, 0, 3, keys, vals, &more, &st);
  ck_assert_int_eq(st, FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "unknown table 'nope'"));
  fl_ps_core_free(c);
}
END_TEST

/* A table large enough for several lock stripes (max_rows 2^20): InitSparse
 * puts each row in its stripe (a pull reads its values back, a repeat
 * creates nothing) and DumpSparse pages merge the stripes, keys ascending,
 * every row once. */
START_TEST(test_init_and_dump_over_stripes) {
  enum { N = 2000, PAGE = 97 };
  fl_ps_core *c = mk(1, 0, 1, 1 << 20);
  uint64_t *in = malloc(N * sizeof *in), *keys = malloc(N * sizeof *keys), after = 0;
  float *v = malloc(N * DIM * sizeof *v), *vals = malloc(N * DIM * sizeof *vals), got[DIM];
  int32_t created = 0;
  int more = 1, has_after = 0;
  size_t total = 0;
  fl_status st;
  ck_assert_ptr_nonnull(in && keys && v && vals ? in : NULL);
  for (size_t i = 0; i < N; i++) {
    in[i] = (i * 2654435761u) % 1000003u + 100; /* distinct, none the padding id */
    for (int d = 0; d < DIM; d++) v[i * DIM + d] = (float)i + 0.25f * (float)d;
  }
  reg(c, 1, 0, 1);
  ck_assert_int_eq(init_rows(c, "emb", in, N, v, DIM, &created), FL_OK);
  ck_assert_int_eq(created, N);
  ck_assert_int_eq(init_rows(c, "emb", in, N, v, DIM, &created), FL_OK);
  ck_assert_int_eq(created, 0);
  for (size_t i = 0; i < N; i += 191) {
    ck_assert_int_eq(spull(c, &in[i], 1, 1, got), FL_OK);
    ck_assert(got[0] == v[i * DIM] && got[DIM - 1] == v[i * DIM + DIM - 1]);
  }
  while (more) {
    size_t n = dump(c, "emb", has_after, after, PAGE, keys + total, vals + total * DIM, &more, &st);
    ck_assert_int_eq(st, FL_OK);
    ck_assert(n > 0 || !more);
    total += n;
    if (n) after = keys[total - 1], has_after = 1;
  }
  ck_assert_uint_eq(total, N);
  for (size_t i = 1; i < N; i++) ck_assert(keys[i - 1] < keys[i]);
  for (size_t i = 0; i < N; i++) { /* each row once, with its values */
    size_t j = (size_t)-1;
    for (size_t q = 0; q < N && j == (size_t)-1; q++)
      if (in[q] == keys[i]) j = q;
    ck_assert_uint_ne(j, (size_t)-1);
    ck_assert(vals[i * DIM + 1] == v[j * DIM + 1]);
  }
  free(in);
  free(keys);
  free(v);
  free(vals);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_dump_keeps_recency) {
  /* A table of 3 rows at most: a dump does not refresh the oldest row,
   * which is still the one evicted next. */
  fl_ps_core *c = mk(1, 0, 1, 3);
  uint64_t keys[3] = {1, 2, 3}, k4 = 4, got[3];
  float v[3 * DIM] = {0}, x[3 * DIM];
  int more;
  fl_status st;
  reg(c, 1, 0, 1);
  ck_assert_int_eq(init_rows(c, "emb", keys, 3, v, DIM, NULL), FL_OK);
  ck_assert_uint_eq(dump(c, "emb", 0, 0, 0, got, x, &more, &st), 3);
  ck_assert_int_eq(spull(c, &k4, 1, 0, x), FL_OK);
  ck_assert(!fl_ps_table_peek(fl_ps_core_table(c, "emb"), 1, x));
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_bad_requests) {
  fl_ps_core *c = mk(1, 0, 2, 100);
  uint64_t mine[2], other = 0;
  float v[4 * DIM] = {0};
  size_t n = 0;
  int32_t created;
  Flotilla__StatsResponse s;
  for (uint64_t k = 1; n < 2; k++)
    if (fl_ps_key_server(k, 2) == 0) mine[n++] = k;
  while (fl_ps_key_server(other, 2) != 1) other++;
  reg(c, 1, 0, 2);
  /* Keys and values of different lengths. */
  ck_assert_int_eq(init_rows(c, "emb", mine, 2, v, DIM, NULL), FL_OK);
  {
    Flotilla__InitSparseRequest q = FLOTILLA__INIT_SPARSE_REQUEST__INIT;
    Flotilla__InitSparseResponse r = FLOTILLA__INIT_SPARSE_RESPONSE__INIT;
    Flotilla__Tensor t;
    int64_t shape[2];
    tensor(&t, shape, 3, DIM, v); /* 3 rows for 2 keys */
    q.table = "emb";
    q.n_keys = 2;
    q.keys = mine;
    q.values = &t;
    ck_assert_int_eq(fl_ps_core_init_sparse(c, &q, &r), FL_EINVAL);
    ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "sparse init from trainer 0, table emb"));
    q.values = NULL;
    ck_assert_int_eq(fl_ps_core_init_sparse(c, &q, &r), FL_EINVAL);
  }
  /* Rows of another width than the table's. */
  ck_assert_int_eq(init_rows(c, "emb", mine, 2, v, DIM + 1, NULL), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "dim 3"));
  /* A key of the other server, an unknown table, an unregistered trainer. */
  ck_assert_int_eq(init_rows(c, "emb", &other, 1, v, DIM, NULL), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(fl_ps_core_last_error(), "belongs to server 1"));
  ck_assert_int_eq(init_rows(c, "nope", mine, 1, v, DIM, NULL), FL_EINVAL);
  {
    Flotilla__InitSparseRequest q = FLOTILLA__INIT_SPARSE_REQUEST__INIT;
    Flotilla__InitSparseResponse r = FLOTILLA__INIT_SPARSE_RESPONSE__INIT;
    q.trainer_id = 5;
    q.table = "emb";
    ck_assert_int_eq(fl_ps_core_init_sparse(c, &q, &r), FL_EINVAL);
  }
  /* Non-finite values. */
  v[1] = INFINITY;
  ck_assert_int_eq(init_rows(c, "emb", mine, 1, v, DIM, &created), FL_EINVAL);
  /* Nothing changed: the two rows of the first init, no more. */
  stats(c, &s);
  ck_assert_uint_eq(s.sparse_rows, 2);
  ck_assert_uint_eq(s.sparse_init_rows, 2);
  ck_assert_uint_ge(s.invalid, 7);
  fl_ps_core_free(c);
}
END_TEST

START_TEST(test_checkpoint_keeps_init_rows) {
  char path[] = "/tmp/fl_test_ps_sparse_init_XXXXXX";
  int fd = mkstemp(path);
  fl_ps_core *c = mk(0, 0, 1, 100), *d = mk(0, 0, 1, 100);
  uint64_t keys[4] = {11, 12, 13, 14};
  float v[4 * DIM], w[4 * DIM], got[DIM];
  int32_t created = -1;
  fl_ckpt *ck;
  ck_assert_int_ge(fd, 0);
  close(fd);
  for (int i = 0; i < 4 * DIM; i++) {
    v[i] = 0.5f * (float)i;
    w[i] = -1.0f;
  }
  reg(c, 0, 0, 1);
  ck_assert_int_eq(init_rows(c, "emb", keys, 4, v, DIM, NULL), FL_OK);
  ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  ck_assert_int_eq(fl_ps_core_load(d, ck, path), FL_OK);
  fl_ckpt_free(ck);
  unlink(path);
  /* The restarted server holds the rows; the trainers' InitSparse after the
   * restart changes nothing. */
  reg(d, 0, 0, 1);
  ck_assert_int_eq(init_rows(d, "emb", keys, 4, w, DIM, &created), FL_OK);
  ck_assert_int_eq(created, 0);
  for (int i = 0; i < 4; i++) {
    ck_assert(fl_ps_table_peek(fl_ps_core_table(d, "emb"), keys[i], got));
    ck_assert_mem_eq(got, v + i * DIM, sizeof got);
  }
  fl_ps_core_free(c);
  fl_ps_core_free(d);
}
END_TEST

/* ------------------------------------------------------------ on the wire */

typedef struct served {
  fl_ps_core *core;
  fl_ps_server *srv;
  int port;
} served;

static void serve(served *s, int si, int ns) {
  fl_ps_server_opts so;
  s->core = mk(1, si, ns, 1000);
  memset(&so, 0, sizeof so);
  so.bind_addr = "127.0.0.1:0";
  so.threads = 1;
  so.calls_per_thread = 2;
  so.rpc.token = "init-test-token";
  ck_assert_int_eq(fl_ps_server_start(s->core, &so, &s->srv, &s->port), FL_OK);
}

static void unserve(served *s) {
  fl_ps_server_stop(s->srv);
  fl_ps_core_free(s->core);
}

START_TEST(test_wire_bad_request_then_serving) {
  served s;
  grpc_channel *ch = NULL;
  Flotilla__InitSparseRequest q = FLOTILLA__INIT_SPARSE_REQUEST__INIT;
  Flotilla__StatsRequest sq = FLOTILLA__STATS_REQUEST__INIT;
  Flotilla__Tensor t;
  fl_rpc_outbuf *ob = NULL;
  fl_rpc_inbuf in = {0};
  grpc_status_code code;
  char target[64], details[512];
  uint64_t keys[2] = {1, 2};
  float v[3 * DIM] = {0};
  int64_t shape[2];
  fl_rpc_init();
  serve(&s, 0, 1);
  reg(s.core, 1, 0, 1);
  snprintf(target, sizeof target, "127.0.0.1:%d", s.port);
  ck_assert_int_eq(fl_rpc_channel_create(target, NULL, &ch), FL_OK);
  ck_assert_int_eq(fl_rpc_outbuf_create(0, &ob), FL_OK);
  tensor(&t, shape, 3, DIM, v);
  q.table = "emb";
  q.n_keys = 2;
  q.keys = keys;
  q.values = &t;
  ck_assert_int_ne(fl_rpc_unary(ch, "/flotilla.ParameterServer/InitSparse", &q.base, 5,
                                "init-test-token", ob, &in, &code, details, sizeof details),
                   FL_OK);
  ck_assert_int_eq(code, GRPC_STATUS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(details, "table emb, 2 keys of dim 3"));
  /* Without the token: refused before the body is read. */
  ck_assert_int_ne(fl_rpc_unary(ch, "/flotilla.ParameterServer/InitSparse", &q.base, 5, NULL, ob,
                                &in, &code, NULL, 0), FL_OK);
  ck_assert_int_eq(code, GRPC_STATUS_UNAUTHENTICATED);
  /* The service goes on. */
  ck_assert_int_eq(fl_rpc_unary(ch, "/flotilla.ParameterServer/Stats", &sq.base, 5,
                                "init-test-token", ob, &in, &code, NULL, 0), FL_OK);
  fl_rpc_outbuf_free(ob);
  fl_rpc_inbuf_free(&in);
  grpc_channel_destroy(ch);
  unserve(&s);
  fl_rpc_shutdown();
}
END_TEST

START_TEST(test_client_init_and_dump_two_servers) {
  served s[2];
  fl_endpoint eps[2];
  fl_ps_client_opts o;
  fl_ps_client *cl = NULL;
  fl_ps_sparse_spec specs[2] = {{"emb", DIM}, {"plain", DIM}};
  float dense[4] = {0};
  fl_ps_dense_param dp = {"w", dense, 4};
  enum { N = 300 };
  uint64_t ids[N], *got = NULL;
  float rows[N * DIM], other[N * DIM], *vals = NULL;
  size_t n = 0;
  int64_t step = 0;
  fl_rpc_init();
  for (int i = 0; i < 2; i++) {
    serve(&s[i], i, 2);
    memset(&eps[i], 0, sizeof eps[i]);
    snprintf(eps[i].host, sizeof eps[i].host, "127.0.0.1");
    eps[i].port = s[i].port;
  }
  memset(&o, 0, sizeof o);
  o.servers = eps;
  o.n_servers = 2;
  o.num_trainers = 1;
  o.mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC;
  o.dense_block_size = 4;
  o.rpc_timeout_s = 5;
  o.retry_budget_s = 5;
  o.token = "init-test-token";
  ck_assert_int_eq(fl_ps_client_create(&o, &cl), FL_OK);
  ck_assert_int_eq(fl_ps_client_register(cl, &dp, 1, specs, 2, &step), FL_OK);
  /* Descending ids (the padding id 7 among them), spread over both servers. */
  for (int i = 0; i < N; i++) {
    ids[i] = (uint64_t)(N - i) * 2654435761ULL % 100003ULL;
    if (i == 17) ids[i] = 7;
    for (int j = 0; j < DIM; j++) {
      rows[i * DIM + j] = (float)i + 0.25f * (float)j;
      other[i * DIM + j] = -5.0f;
    }
  }
  ck_assert_int_eq(fl_ps_client_init_sparse(cl, "emb", DIM, ids, N, rows), FL_OK);
  ck_assert_int_eq(fl_ps_client_init_sparse(cl, "emb", DIM, ids, N, other), FL_OK);
  ck_assert_int_eq(fl_ps_client_init_sparse(cl, "emb", DIM + 1, ids, N, rows), FL_EINVAL);
  ck_assert_int_eq(fl_ps_client_dump_sparse(cl, "emb", DIM, &got, &vals, &n), FL_OK);
  ck_assert_uint_eq(n, N - 1); /* not the padding id */
  ck_assert_ptr_nonnull(fl_ps_core_table(s[0].core, "emb"));
  ck_assert_uint_gt(fl_ps_table_rows(fl_ps_core_table(s[0].core, "emb")), 0);
  ck_assert_uint_gt(fl_ps_table_rows(fl_ps_core_table(s[1].core, "emb")), 0);
  for (size_t i = 0; i < n; i++) {
    int src = 0;
    if (i) ck_assert(got[i] > got[i - 1]);
    while (ids[src] != got[i]) src++;
    ck_assert_mem_eq(vals + i * DIM, rows + src * DIM, DIM * sizeof(float));
  }
  free(got);
  free(vals);
  /* An empty table dumps as nothing. */
  ck_assert_int_eq(fl_ps_client_dump_sparse(cl, "plain", DIM, &got, &vals, &n), FL_OK);
  ck_assert_uint_eq(n, 0);
  free(got);
  free(vals);
  fl_ps_client_destroy(cl);
  for (int i = 0; i < 2; i++) unserve(&s[i]);
  fl_rpc_shutdown();
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_sparse_init");
  TCase *tc = tcase_create("init");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_init_creates_if_absent);
  tcase_add_test(tc, test_table_settings_and_padding);
  tcase_add_test(tc, test_uniform_zero_rows);
  tcase_add_test(tc, test_dump_pages);
  tcase_add_test(tc, test_dump_keeps_recency);
  tcase_add_test(tc, test_init_and_dump_over_stripes);
  tcase_add_test(tc, test_bad_requests);
  tcase_add_test(tc, test_checkpoint_keeps_init_rows);
  tcase_add_test(tc, test_wire_bad_request_then_serving);
  tcase_add_test(tc, test_client_init_and_dump_two_servers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
