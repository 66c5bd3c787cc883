/* test_ps_sparse.c - the pserver's sparse table: seeded init on first
 * touch (in range, independent of arrival order), the per-row optimizers
 * against hand-computed values and (row-wise Adagrad, FTRL) a double
 * reference, LRU eviction at the row limit, a checkpoint round trip for
 * every sparse optimizer, and the checkpoint format rules (format 1 still
 * loads; another optimizer's state or an unknown format is refused). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ps.h"

static fl_ps_table *make(const char *name, uint32_t dim, int64_t max_rows, fl_optim_kind kind,
                         float lr, uint64_t seed) {
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  memset(&o, 0, sizeof o);
  o.name = name;
  o.dim = dim;
  o.max_rows = max_rows;
  o.init_range = 0.5f;
  o.seed = seed;
  o.hp = fl_optim_hparams_default(kind);
  o.lr = lr;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_OK);
  return t;
}

START_TEST(test_init_seeded) {
  fl_ps_table *a = make("emb", 8, 100, FL_OPTIM_SGD, 0.1f, 7);
  fl_ps_table *b = make("emb", 8, 100, FL_OPTIM_SGD, 0.1f, 7);
  fl_ps_table *c = make("emb", 8, 100, FL_OPTIM_SGD, 0.1f, 8);
  uint64_t k1[] = {1, 2, 3}, k2[] = {3, 1, 2};
  float va[24], vb[24], vc[24];
  int differs = 0, spread = 0;

  ck_assert_int_eq(fl_ps_table_pull(a, k1, 3, va), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(b, k2, 3, vb), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(c, k1, 3, vc), FL_OK);
  /* Row of key 1 is the same whatever the order of first touches. */
  ck_assert_mem_eq(va, vb + 8, 8 * sizeof(float));
  ck_assert_mem_eq(va + 16, vb, 8 * sizeof(float));
  for (int i = 0; i < 24; i++) {
    ck_assert(va[i] >= -0.5f && va[i] <= 0.5f);
    differs |= va[i] != vc[i];
    spread |= fabsf(va[i]) > 0.1f;
  }
  ck_assert(differs); /* another seed, other rows */
  ck_assert(spread);  /* not all near zero */
  ck_assert_uint_eq(fl_ps_table_rows(a), 3);
  /* Pulling again returns the same rows and creates nothing. */
  ck_assert_int_eq(fl_ps_table_pull(a, k2, 3, vb), FL_OK);
  ck_assert_mem_eq(va, vb + 8, 8 * sizeof(float));
  ck_assert_uint_eq(fl_ps_table_rows(a), 3);
  fl_ps_table_free(a);
  fl_ps_table_free(b);
  fl_ps_table_free(c);
}
END_TEST

START_TEST(test_sgd_adagrad_adam_rows) {
  uint64_t key = 42;
  float w0[2], w[2], g[2] = {0.5f, -1.0f};
  fl_ps_table *sgd = make("s", 2, 10, FL_OPTIM_SGD, 0.1f, 1);
  fl_ps_table *ada = make("a", 2, 10, FL_OPTIM_ADAGRAD, 0.1f, 1);
  fl_ps_table *adam = make("m", 2, 10, FL_OPTIM_ADAM, 0.01f, 1);

  /* SGD: w -= lr*g, twice. */
  ck_assert_int_eq(fl_ps_table_pull(sgd, &key, 1, w0), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(sgd, &key, 1, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(sgd, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(sgd, key, w));
  for (int j = 0; j < 2; j++) ck_assert_float_eq_tol(w[j], w0[j] - 0.2f * g[j], 1e-6f);

  /* Adagrad: s = g^2 then 2g^2; w -= lr*g/(sqrt(s)+eps). */
  ck_assert_int_eq(fl_ps_table_pull(ada, &key, 1, w0), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(ada, &key, 1, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(ada, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(ada, key, w));
  for (int j = 0; j < 2; j++) {
    double s1 = (double)g[j] * g[j], s2 = 2 * s1;
    double want = w0[j] - 0.1 * g[j] / (sqrt(s1) + 1e-8) - 0.1 * g[j] / (sqrt(s2) + 1e-8);
    ck_assert_double_eq_tol(w[j], want, 1e-6);
  }

  /* Adam with per-row bias correction: after one step |dw| = lr exactly
   * (m_hat = g, v_hat = g^2), after a second step with the same g too. */
  ck_assert_int_eq(fl_ps_table_pull(adam, &key, 1, w0), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(adam, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(adam, key, w));
  for (int j = 0; j < 2; j++)
    ck_assert_double_eq_tol(w[j], w0[j] - 0.01 * (g[j] > 0 ? 1 : -1), 1e-6);
  ck_assert_int_eq(fl_ps_table_push(adam, &key, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(adam, key, w));
  for (int j = 0; j < 2; j++)
    ck_assert_double_eq_tol(w[j], w0[j] - 0.02 * (g[j] > 0 ? 1 : -1), 1e-6);
  /* A second row starts its own bias correction at step 1. */
  {
    uint64_t k2 = 43;
    float v0[2], v[2];
    ck_assert_int_eq(fl_ps_table_pull(adam, &k2, 1, v0), FL_OK);
    ck_assert_int_eq(fl_ps_table_push(adam, &k2, 1, g), FL_OK);
    ck_assert(fl_ps_table_peek(adam, k2, v));
    for (int j = 0; j < 2; j++)
      ck_assert_double_eq_tol(v[j], v0[j] - 0.01 * (g[j] > 0 ? 1 : -1), 1e-6);
  }
  fl_ps_table_free(sgd);
  fl_ps_table_free(ada);
  fl_ps_table_free(adam);
}
END_TEST

/* Gradient of row `key` at step s, element j: rows differ, so a shared
 * accumulator would show. */
static float grad_of(uint64_t key, int s, int j) {
  return 0.3f * (float)key - 0.45f * (float)j + 0.2f * (float)s - 0.5f;
}

/* One step of row-wise Adagrad or FTRL (hp's settings, rate lr) on a row of
 * dim doubles in p with state a (1 or dim), b (dim) in double. */
static void ref_row(const fl_optim_hparams *hp, double lr, double *p, double *a, double *b,
                    const float *g, int dim) {
  if (hp->kind == FL_OPTIM_ROWWISE_ADAGRAD) {
    double ss = 0;
    for (int j = 0; j < dim; j++) ss += (double)g[j] * g[j];
    a[0] += ss / dim;
    for (int j = 0; j < dim; j++) p[j] -= lr * g[j] / (sqrt(a[0]) + hp->epsilon);
    return;
  }
  for (int j = 0; j < dim; j++) { /* FTRL, lr_power -0.5 */
    double nn = b[j] + (double)g[j] * g[j];
    a[j] += g[j] - (sqrt(nn) - sqrt(b[j])) / lr * p[j];
    b[j] = nn;
    double z = a[j], q = (hp->beta + sqrt(nn)) / lr + 2 * hp->l2;
    p[j] = fabs(z) <= hp->l1 ? 0 : -(z - (z < 0 ? -hp->l1 : hp->l1)) / q;
  }
}

START_TEST(test_rowwise_ftrl_rows) {
  enum { D = 3, NK = 3 };
  fl_optim_kind kind = _i ? FL_OPTIM_FTRL : FL_OPTIM_ROWWISE_ADAGRAD;
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  uint64_t keys[NK] = {4, 9, 17};
  float w[NK * D], g[NK * D];
  double p[NK][D], a[NK][D], b[NK][D];
  memset(&o, 0, sizeof o);
  o.name = "rows";
  o.dim = D;
  o.max_rows = 10;
  o.init_range = 0.5f;
  o.seed = 3;
  o.hp = fl_optim_hparams_default(kind);
  o.hp.l1 = 0.05f, o.hp.l2 = 0.1f, o.hp.beta = 1.0f;
  o.hp.initial_accumulator = 0.1f;
  o.lr = 0.1f;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_OK);
  ck_assert_int_eq(fl_ps_table_kind(t), kind);
  ck_assert_int_eq(fl_ps_table_pull(t, keys, NK, w), FL_OK);
  for (int i = 0; i < NK; i++)
    for (int j = 0; j < D; j++) p[i][j] = w[i * D + j], a[i][j] = _i ? 0 : 0.1, b[i][j] = 0.1;
  for (int s = 0; s < 4; s++) {
    /* Step 3 pushes only the first row: the others keep their state. */
    int nk = s == 3 ? 1 : NK;
    for (int i = 0; i < nk; i++)
      for (int j = 0; j < D; j++) g[i * D + j] = grad_of(keys[i], s, j);
    ck_assert_int_eq(fl_ps_table_push(t, keys, (size_t)nk, g), FL_OK);
    for (int i = 0; i < nk; i++) ref_row(&o.hp, o.lr, p[i], a[i], b[i], g + i * D, D);
    for (int i = 0; i < NK; i++) {
      ck_assert(fl_ps_table_peek(t, keys[i], w));
      for (int j = 0; j < D; j++) ck_assert_double_eq_tol(w[j], p[i][j], 2e-6);
    }
  }
  fl_ps_table_free(t);
}
END_TEST

START_TEST(test_push_creates_missing_row) {
  fl_ps_table *t = make("e", 4, 10, FL_OPTIM_SGD, 1.0f, 3);
  fl_ps_table *ref = make("e", 4, 10, FL_OPTIM_SGD, 1.0f, 3);
  uint64_t k = 9;
  float g[4] = {1, 2, 3, 4}, w[4], init[4];
  ck_assert_int_eq(fl_ps_table_push(t, &k, 1, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(ref, &k, 1, init), FL_OK);
  ck_assert(fl_ps_table_peek(t, k, w));
  for (int j = 0; j < 4; j++) ck_assert_float_eq_tol(w[j], init[j] - g[j], 1e-6f);
  fl_ps_table_free(t);
  fl_ps_table_free(ref);
}
END_TEST

START_TEST(test_eviction_lru) {
  /* Limit 4 rows: touch 1..4, then 1 and 2 again, then create 5 and 6:
   * 3 and 4 (unseen longest) go, 1 and 2 stay. */
  fl_ps_table *t = make("lru", 2, 4, FL_OPTIM_SGD, 0.1f, 1);
  uint64_t keys[] = {1, 2, 3, 4}, again[] = {1, 2}, fresh[] = {5, 6};
  float buf[8], row[2];
  ck_assert_int_eq(fl_ps_table_pull(t, keys, 4, buf), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(t, again, 2, buf), FL_OK);
  ck_assert_uint_eq(fl_ps_table_evicted(t), 0);
  ck_assert_int_eq(fl_ps_table_pull(t, fresh, 2, buf), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 4);
  ck_assert_uint_eq(fl_ps_table_evicted(t), 2);
  ck_assert(fl_ps_table_peek(t, 1, row));
  ck_assert(fl_ps_table_peek(t, 2, row));
  ck_assert(!fl_ps_table_peek(t, 3, row));
  ck_assert(!fl_ps_table_peek(t, 4, row));
  ck_assert(fl_ps_table_peek(t, 5, row));
  ck_assert(fl_ps_table_peek(t, 6, row));
  /* A push touches too: push 5, then create 7: 1 (now the oldest) goes. */
  {
    uint64_t k5 = 5, k7 = 7;
    float g[2] = {0, 0};
    ck_assert_int_eq(fl_ps_table_push(t, &k5, 1, g), FL_OK);
    ck_assert_int_eq(fl_ps_table_pull(t, &k7, 1, buf), FL_OK);
    ck_assert(!fl_ps_table_peek(t, 1, row));
    ck_assert(fl_ps_table_peek(t, 2, row));
    ck_assert(fl_ps_table_peek(t, 5, row));
  }
  ck_assert_uint_eq(fl_ps_table_evicted(t), 3);
  fl_ps_table_free(t);
}
END_TEST

START_TEST(test_eviction_many) {
  /* 50k keys through a 1000-row table: the hash stays consistent (every
   * one of the last 1000 keys present with its own init, none older). */
  fl_ps_table *t = make("big", 4, 1000, FL_OPTIM_ADAGRAD, 0.1f, 5);
  fl_ps_table *ref = make("big", 4, 100000, FL_OPTIM_ADAGRAD, 0.1f, 5);
  float v[4], w[4];
  for (uint64_t k = 0; k < 50000; k++) ck_assert_int_eq(fl_ps_table_pull(t, &k, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(t), 1000);
  ck_assert_uint_eq(fl_ps_table_evicted(t), 49000);
  for (uint64_t k = 0; k < 50000; k++) {
    int present = fl_ps_table_peek(t, k, v);
    ck_assert_int_eq(present, k >= 49000);
    if (present) {
      ck_assert_int_eq(fl_ps_table_pull(ref, &k, 1, w), FL_OK);
      ck_assert_mem_eq(v, w, sizeof v);
    }
  }
  fl_ps_table_free(t);
  fl_ps_table_free(ref);
}
END_TEST

static const fl_optim_kind k_sparse_kinds[] = {FL_OPTIM_SGD, FL_OPTIM_ADAGRAD, FL_OPTIM_ADAM,
                                               FL_OPTIM_ROWWISE_ADAGRAD, FL_OPTIM_FTRL};

START_TEST(test_checkpoint_roundtrip) {
  char path[] = "/tmp/fl_test_sparse_XXXXXX";
  int fd = mkstemp(path);
  fl_ps_table *t = make("rt", 3, 5, k_sparse_kinds[_i], 0.01f, 2);
  fl_ps_table *u = make("rt", 3, 5, k_sparse_kinds[_i], 0.01f, 99);
  fl_ckpt_writer *w;
  fl_ckpt *ck;
  uint64_t keys[] = {10, 20, 30};
  float g[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, buf[9], a[3], b[3];

  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(fl_ps_table_pull(t, keys, 3, buf), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(t, keys, 3, g), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_open(path, &w), FL_OK);
  ck_assert_int_eq(fl_ps_table_save(t, w, "sparse/rt/"), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  {
    int64_t fmt = 0, kind = -1;
    fl_ckpt_record r;
    ck_assert_int_eq(fl_ckpt_get_i64(ck, "sparse/rt/format", &fmt), FL_OK);
    ck_assert_int_eq(fmt, FL_PS_TABLE_FORMAT);
    ck_assert_int_eq(fl_ckpt_get_i64(ck, "sparse/rt/optimizer", &kind), FL_OK);
    ck_assert_int_eq(kind, k_sparse_kinds[_i]);
    if (fl_optim_state_count(k_sparse_kinds[_i]) >= 1) {
      ck_assert_int_eq(fl_ckpt_find(ck, "sparse/rt/state1", &r), FL_OK);
      ck_assert_int_eq(r.shape[1], (int64_t)fl_optim_state_len(k_sparse_kinds[_i], 3));
    }
  }
  ck_assert_int_eq(fl_ps_table_load(u, ck, "sparse/rt/"), FL_OK);
  fl_ckpt_free(ck);
  unlink(path);
  /* The optimizer state came along: the next steps match bit for bit. */
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < 3; i++) {
      ck_assert(fl_ps_table_peek(u, keys[i], a));
      ck_assert(fl_ps_table_peek(t, keys[i], b));
      ck_assert_mem_eq(a, b, sizeof a);
    }
    for (int j = 0; j < 9; j++) g[j] = 0.5f * g[j] - 1.25f;
    ck_assert_int_eq(fl_ps_table_push(t, keys, 3, g), FL_OK);
    ck_assert_int_eq(fl_ps_table_push(u, keys, 3, g), FL_OK);
  }
  fl_ps_table_free(t);
  fl_ps_table_free(u);
}
END_TEST

/* A checkpoint file at path holding table "sparse/f/" (2 rows of dim 2)
 * with the given format record (0: none, format 1) and optimizer record
 * (-1: none), and nstate state records of width slen. */
static void write_table(const char *path, int64_t format, int64_t kind, int nstate, int64_t slen) {
  fl_ckpt_writer *w;
  uint64_t keys[2] = {1, 2};
  int64_t steps[2] = {1, 1}, shape[2] = {2, 2}, sshape[2] = {2, slen};
  float v[4] = {0.1f, 0.2f, 0.3f, 0.4f}, st[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  ck_assert_int_eq(fl_ckpt_writer_open(path, &w), FL_OK);
  if (format) ck_assert_int_eq(fl_ckpt_put_i64(w, "sparse/f/format", format), FL_OK);
  if (kind >= 0) ck_assert_int_eq(fl_ckpt_put_i64(w, "sparse/f/optimizer", kind), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/f/keys", FL_CKPT_U64, 1, shape, keys), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/f/steps", FL_CKPT_I64, 1, shape, steps), FL_OK);
  ck_assert_int_eq(fl_ckpt_put(w, "sparse/f/values", FL_CKPT_F32, 2, shape, v), FL_OK);
  if (nstate >= 1)
    ck_assert_int_eq(fl_ckpt_put(w, "sparse/f/state1", FL_CKPT_F32, 2, sshape, st), FL_OK);
  if (nstate >= 2)
    ck_assert_int_eq(fl_ckpt_put(w, "sparse/f/state2", FL_CKPT_F32, 2, sshape, st), FL_OK);
  ck_assert_int_eq(fl_ckpt_writer_commit(w), FL_OK);
}

/* Load path's table into a fresh table of kind: the status. */
static fl_status load_as(const char *path, fl_optim_kind kind) {
  fl_ps_table *t = make("f", 2, 10, kind, 0.1f, 1);
  fl_ckpt *ck;
  fl_status st;
  float row[2];
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  st = fl_ps_table_load(t, ck, "sparse/f/");
  if (st == FL_OK) {
    ck_assert(fl_ps_table_peek(t, 2, row));
    ck_assert(row[0] == 0.3f && row[1] == 0.4f);
  } else {
    ck_assert_uint_eq(fl_ps_table_rows(t), 0); /* unchanged */
  }
  fl_ckpt_free(ck);
  fl_ps_table_free(t);
  return st;
}

START_TEST(test_checkpoint_formats) {
  char path[] = "/tmp/fl_test_sparse_fmt_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  /* Format 1 (no format record): sgd, adagrad and adam state load as before. */
  write_table(path, 0, -1, 1, 2);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAGRAD), FL_OK);
  ck_assert_int_eq(load_as(path, FL_OPTIM_SGD), FL_OK);
  /* ... but it holds no row-wise Adagrad or FTRL state. */
  ck_assert_int_eq(load_as(path, FL_OPTIM_ROWWISE_ADAGRAD), FL_EINVAL);
  write_table(path, 0, -1, 2, 2);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAM), FL_OK);
  ck_assert_int_eq(load_as(path, FL_OPTIM_FTRL), FL_EINVAL);
  /* Format 2: the optimizer must be the table's (adam and ftrl state have
   * the same shapes: only the record tells them apart). */
  write_table(path, 2, FL_OPTIM_ADAM, 2, 2);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAM), FL_OK);
  ck_assert_int_eq(load_as(path, FL_OPTIM_FTRL), FL_EINVAL);
  write_table(path, 2, FL_OPTIM_ROWWISE_ADAGRAD, 1, 1);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ROWWISE_ADAGRAD), FL_OK);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAGRAD), FL_EINVAL);
  write_table(path, 2, FL_OPTIM_ROWWISE_ADAGRAD, 1, 2); /* state of the wrong width */
  ck_assert_int_eq(load_as(path, FL_OPTIM_ROWWISE_ADAGRAD), FL_ECORRUPT);
  write_table(path, 2, -1, 1, 1); /* optimizer record missing */
  ck_assert_int_eq(load_as(path, FL_OPTIM_ROWWISE_ADAGRAD), FL_ECORRUPT);
  write_table(path, 2, 1000, 1, 2); /* an optimizer this build does not know */
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAGRAD), FL_EINVAL);
  /* Format 3 without its marks is corrupt; a later format is refused,
   * naming it. */
  write_table(path, 3, FL_OPTIM_ADAGRAD, 1, 2);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAGRAD), FL_ECORRUPT);
  write_table(path, 4, FL_OPTIM_ADAGRAD, 1, 2);
  ck_assert_int_eq(load_as(path, FL_OPTIM_ADAGRAD), FL_EINVAL);
  unlink(path);
}
END_TEST

START_TEST(test_bad_options) {
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  memset(&o, 0, sizeof o);
  o.name = "x";
  o.dim = 4;
  o.max_rows = 10;
  o.hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  o.lr = 0.1f;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL); /* momentum: not per row */
  o.hp = fl_optim_hparams_default(FL_OPTIM_SGD);
  o.dim = 0;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL);
  o.dim = 4;
  o.max_rows = 0;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL);
  o.max_rows = 10;
  o.hp = fl_optim_hparams_default(FL_OPTIM_FTRL);
  o.lr = 0.0f; /* FTRL divides by its alpha */
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL);
  o.lr = 0.1f;
  o.hp.lr_power = 0.5f;
  ck_assert_int_eq(fl_ps_table_create(&o, &t), FL_EINVAL);
  ck_assert_ptr_null(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_sparse");
  TCase *tc = tcase_create("sparse");
  tcase_add_test(tc, test_init_seeded);
  tcase_add_test(tc, test_sgd_adagrad_adam_rows);
  tcase_add_test(tc, test_push_creates_missing_row);
  tcase_add_test(tc, test_eviction_lru);
  tcase_add_test(tc, test_eviction_many);
  tcase_add_loop_test(tc, test_rowwise_ftrl_rows, 0, 2);
  tcase_add_loop_test(tc, test_checkpoint_roundtrip, 0,
                      (int)(sizeof k_sparse_kinds / sizeof k_sparse_kinds[0]));
  tcase_add_test(tc, test_checkpoint_formats);
  tcase_add_test(tc, test_bad_options);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
