/* test_ps_rows.c - the pserver's sparse rows through the core, without a
 * network: in sync mode 1, 2 and 3 trainers (pushes split in parts,
 * arriving in any order) leave every row bitwise equal to one trainer
 * pushing the gradients summed in trainer-id order and averaged, for every
 * sparse optimizer (row-wise Adagrad and FTRL included); a pull waits for
 * the step before it; read-only pulls change nothing (rows, values,
 * counters, recency); tables with their own optimizers keep them through
 * a checkpoint of the core; and a server of one thread without a disk
 * tier keeps a table in one lock stripe, with the rows and values of 16,
 * and a checkpoint loads across stripe counts. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ps.h"
#include "ps_testutil.h"

#define DIM 2
#define STEPS 3
#define MAXK 8

static fl_ps_core *mk(int nt, int a_sync, fl_optim_kind sparse, int64_t max_rows) {
  fl_ps_core_opts o;
  pt_opts(&o, nt, a_sync, sparse, 0.1f, max_rows);
  return pt_core(&o);
}

static void reg(fl_ps_core *c, int t, int nt, int mode) {
  pt_register(c, &(pt_reg){.trainer = t, .n_trainers = nt, .mode = mode, .dim = DIM});
}

static fl_status spush(fl_ps_core *c, int t, int64_t step, uint32_t seq, uint32_t parts,
                       const uint64_t *keys, size_t n, const float *g) {
  return pt_push_sparse(c, &(pt_call){.trainer = t, .table = "emb", .dim = DIM, .step = step,
                                      .seq = seq, .parts = parts},
                        keys, n, g);
}

static fl_status spull(fl_ps_core *c, int t, int64_t min_step, int read_only,
                       const uint64_t *keys, size_t n, float *out) {
  return pt_pull_sparse(c, &(pt_call){.trainer = t, .table = "emb", .dim = DIM,
                                      .min_step = min_step, .read_only = read_only},
                        keys, n, out);
}

/* Trainer t's rows of step s: overlapping key sets, values that do not
 * sum exactly in float. */
static size_t rows_of(int t, int64_t s, uint64_t *keys, float *g) {
  size_t n = 0;
  for (uint64_t k = 0; k < 6; k++) {
    if ((k + (uint64_t)t + (uint64_t)s) % 3 == 0) continue;
    keys[n] = 10 + (k * 7 + (uint64_t)t) % 6;
    for (int j = 0; j < DIM; j++)
      g[n * DIM + (size_t)j] = 0.1f * (float)(t + 1) + 0.37f * (float)k - 0.23f * (float)j +
                               0.011f * (float)s;
    n++;
  }
  return n;
}

/* The averaged gradient of step s over nt trainers into keys / g (distinct
 * keys, first seen in trainer-id order), as the server must compute it. */
static size_t averaged(int nt, int64_t s, uint64_t *keys, float *g) {
  size_t nu = 0;
  for (int t = 0; t < nt; t++) {
    uint64_t k[MAXK];
    float x[MAXK * DIM];
    size_t n = rows_of(t, s, k, x);
    for (size_t i = 0; i < n; i++) {
      size_t u = 0;
      while (u < nu && keys[u] != k[i]) u++;
      if (u == nu) {
        keys[nu++] = k[i];
        memcpy(g + u * DIM, x + i * DIM, DIM * sizeof(float));
      } else {
        for (int j = 0; j < DIM; j++) g[u * DIM + (size_t)j] += x[i * DIM + (size_t)j];
      }
    }
  }
  const size_t len = nu * DIM; /* the mean as the pserver and a gradient merge take it */
  if (len) ck_assert_int_eq(fl_gm_finalize(&g, &len, 1, nt, 1), FL_OK);
  return nu;
}

static const fl_optim_kind k_kinds[] = {FL_OPTIM_SGD, FL_OPTIM_ADAGRAD, FL_OPTIM_ADAM,
                                        FL_OPTIM_ROWWISE_ADAGRAD, FL_OPTIM_FTRL};

/* nt trainers push every step (the last trainer first, each in two parts);
 * its pull of the next step waits until the last part came in. */
static void run_sync(fl_ps_core *c, int nt) {
  uint64_t probe = 10;
  float row[DIM];
  for (int64_t s = 0; s < STEPS; s++) {
    for (int t = nt - 1; t >= 0; t--) {
      uint64_t k[MAXK];
      float g[MAXK * DIM];
      size_t n = rows_of(t, s, k, g), half = n / 2;
      ck_assert_int_eq(spush(c, t, s, 1, 2, k + half, n - half, g + half * DIM), FL_OK);
      ck_assert_int_eq(spull(c, nt - 1, s + 1, 0, &probe, 1, row), FL_EAGAIN);
      ck_assert_int_eq(spush(c, t, s, 0, 2, k, half, g), FL_OK);
      ck_assert_int_eq(spull(c, nt - 1, s + 1, 0, &probe, 1, row), t ? FL_EAGAIN : FL_OK);
    }
  }
}

START_TEST(test_sync_rows_equal_one_trainer) {
  for (size_t o = 0; o < sizeof k_kinds / sizeof *k_kinds; o++) {
    for (int nt = 1; nt <= 3; nt++) {
      fl_ps_core *c = mk(nt, 0, k_kinds[o], 100), *ref = mk(1, 0, k_kinds[o], 100);
      for (int t = 0; t < nt; t++) reg(c, t, nt, FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
      reg(ref, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
      run_sync(c, nt);
      for (int64_t s = 0; s < STEPS; s++) {
        uint64_t k[3 * MAXK];
        float g[3 * MAXK * DIM];
        size_t nu = averaged(nt, s, k, g);
        ck_assert_int_eq(spush(ref, 0, s, 0, 1, k, nu, g), FL_OK);
      }
      ck_assert_uint_eq(fl_ps_table_rows(fl_ps_core_table(c, "emb")),
                        fl_ps_table_rows(fl_ps_core_table(ref, "emb")));
      for (uint64_t key = 10; key < 16; key++) {
        float a[DIM], b[DIM];
        ck_assert(fl_ps_table_peek(fl_ps_core_table(c, "emb"), key, a));
        ck_assert(fl_ps_table_peek(fl_ps_core_table(ref, "emb"), key, b));
        ck_assert_mem_eq(a, b, sizeof a);
      }
      fl_ps_core_free(c);
      fl_ps_core_free(ref);
    }
  }
}
END_TEST

START_TEST(test_sync_rows_dead_and_old_clients) {
  /* A trainer that sends no `parts` sends one part; a step with a trainer
   * missing is applied once it is no longer counted (the dense rule). */
  fl_ps_core *c = mk(2, 0, FL_OPTIM_SGD, 100);
  uint64_t key = 5;
  float g[DIM] = {1, 2}, before[DIM], after[DIM];
  reg(c, 0, 2, 0);
  reg(c, 1, 2, 0);
  ck_assert_int_eq(spull(c, 0, 0, 0, &key, 1, before), FL_OK);
  ck_assert_int_eq(spush(c, 0, 0, 0, 0, &key, 1, g), FL_OK);
  ck_assert_int_eq(spull(c, 0, 1, 0, &key, 1, after), FL_EAGAIN);
  ck_assert_int_eq(spush(c, 0, 0, 0, 0, &key, 1, g), FL_OK); /* retried: ignored */
  ck_assert_int_eq(spush(c, 1, 0, 0, 0, NULL, 0, NULL), FL_OK); /* none of its rows here */
  ck_assert_int_eq(spull(c, 0, 1, 0, &key, 1, after), FL_OK);
  for (int j = 0; j < DIM; j++) ck_assert_float_eq(after[j], before[j] - 0.1f * (g[j] * 0.5f));
  /* A part beyond the announced count is refused. */
  ck_assert_int_eq(spush(c, 0, 1, 2, 2, &key, 1, g), FL_EINVAL);
  ck_assert_int_eq(spush(c, 0, 1, 0, 65, &key, 1, g), FL_EINVAL);
  fl_ps_core_free(c);
}
END_TEST

/* Everything a read-only pull must leave as it was. */
typedef struct snapshot {
  Flotilla__StatsResponse st;
  size_t rows;
  uint64_t evicted;
  float v[16][DIM];
  int have[16];
} snapshot;

static void snap(fl_ps_core *c, snapshot *s) {
  fl_ps_table *t = fl_ps_core_table(c, "emb");
  memset(s, 0, sizeof *s);
  flotilla__stats_response__init(&s->st);
  fl_ps_core_stats(c, &s->st);
  s->rows = fl_ps_table_rows(t);
  s->evicted = fl_ps_table_evicted(t);
  for (uint64_t k = 0; k < 16; k++) s->have[k] = fl_ps_table_peek(t, k, s->v[k]);
}

static void same(const snapshot *a, const snapshot *b) {
  ck_assert_uint_eq(a->rows, b->rows);
  ck_assert_uint_eq(a->evicted, b->evicted);
  ck_assert_uint_eq(a->st.pulls, b->st.pulls);
  ck_assert_uint_eq(a->st.pushes, b->st.pushes);
  ck_assert_uint_eq(a->st.sparse_rows, b->st.sparse_rows);
  ck_assert_uint_eq(a->st.evicted_rows, b->st.evicted_rows);
  ck_assert_mem_eq(a->have, b->have, sizeof a->have);
  ck_assert_mem_eq(a->v, b->v, sizeof a->v);
}

START_TEST(test_read_only_pull_changes_nothing) {
  for (int a_sync = 0; a_sync <= 1; a_sync++) {
    fl_ps_core *c = mk(1, a_sync, FL_OPTIM_ADAGRAD, 4);
    uint64_t known[4] = {1, 2, 3, 4}, mixed[3] = {1, 9, 4}, fresh = 12, nine = 9;
    float buf[4 * DIM], ro[3 * DIM], created[DIM], g[4 * DIM] = {1, 1, 1, 1, 1, 1, 1, 1};
    snapshot s0, s1;
    reg(c, 0, 1, a_sync ? FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC : FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
    ck_assert_int_eq(spull(c, 0, 0, 0, known, 4, buf), FL_OK); /* 1 is the oldest */
    ck_assert_int_eq(spush(c, 0, 0, 0, 1, known, 4, g), FL_OK);
    ck_assert_int_eq(spull(c, 0, 1, 0, known, 4, buf), FL_OK);
    snap(c, &s0);
    ck_assert_int_eq(spull(c, 0, 1, 1, mixed, 3, ro), FL_OK);
    snap(c, &s1);
    same(&s0, &s1);
    ck_assert_mem_eq(ro, buf, DIM * sizeof(float));               /* key 1 as stored */
    ck_assert_mem_eq(ro + 2 * DIM, buf + 3 * DIM, DIM * sizeof(float)); /* key 4 */
    /* Key 1 was read, not touched: it is still the oldest, evicted first. */
    ck_assert_int_eq(spull(c, 0, 1, 0, &fresh, 1, created), FL_OK);
    ck_assert(!fl_ps_table_peek(fl_ps_core_table(c, "emb"), 1, created));
    /* An unseen key reads as the row it becomes when created. */
    ck_assert_int_eq(spull(c, 0, 1, 0, &nine, 1, created), FL_OK);
    ck_assert_mem_eq(ro + DIM, created, sizeof created);
    fl_ps_core_free(c);
  }
}
END_TEST

/* A sync core of one trainer whose sparse tables take adagrad, except
 * "wide" (FTRL with l1) and "narrow" (row-wise Adagrad) by their own
 * per-table settings. */
static fl_ps_core *mk_per_table(void) {
  fl_ps_core_opts o;
  pt_opts(&o, 1, 0, FL_OPTIM_ADAGRAD, 0.1f, 100);
  o.n_table_optims = 2;
  snprintf(o.table_optims[0].name, sizeof o.table_optims[0].name, "wide");
  o.table_optims[0].hp = fl_optim_hparams_default(FL_OPTIM_FTRL);
  o.table_optims[0].hp.l1 = 0.01f;
  o.table_optims[0].lr = 0.5f;
  snprintf(o.table_optims[1].name, sizeof o.table_optims[1].name, "narrow");
  o.table_optims[1].hp = fl_optim_hparams_default(FL_OPTIM_ROWWISE_ADAGRAD);
  o.table_optims[1].lr = 0.2f;
  return pt_core(&o);
}

/* Register trainer 0 with the tables emb, wide and narrow (dim DIM). */
static void reg3(fl_ps_core *c) {
  static const char *const names[3] = {"emb", "wide", "narrow"};
  pt_register(c, &(pt_reg){.n_trainers = 1, .mode = FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC,
                           .dim = DIM, .tables = names, .n_tables = 3});
}

START_TEST(test_per_table_optimizers) {
  char path[] = "/tmp/fl_test_ps_rows_XXXXXX";
  int fd = mkstemp(path);
  const char *names[3] = {"emb", "wide", "narrow"};
  const fl_optim_kind kinds[3] = {FL_OPTIM_ADAGRAD, FL_OPTIM_FTRL, FL_OPTIM_ROWWISE_ADAGRAD};
  fl_ps_core *c = mk_per_table(), *d = mk_per_table();
  uint64_t keys[3] = {1, 2, 3};
  float g[3 * DIM] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f};
  fl_ckpt *ck;

  ck_assert_int_ge(fd, 0);
  close(fd);
  reg3(c);
  for (int i = 0; i < 3; i++) {
    fl_ps_table *t = fl_ps_core_table(c, names[i]);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(fl_ps_table_kind(t), kinds[i]);
    ck_assert_int_eq(fl_ps_table_push(t, keys, 3, g), FL_OK);
  }
  /* The checkpoint takes each table's state; a fresh core with the same
   * settings loads it and steps on bit for bit. */
  ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  ck_assert_int_eq(fl_ps_core_load(d, ck, path), FL_OK);
  fl_ckpt_free(ck);
  unlink(path);
  for (int i = 0; i < 3; i++) {
    fl_ps_table *a = fl_ps_core_table(c, names[i]), *b = fl_ps_core_table(d, names[i]);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(fl_ps_table_kind(b), kinds[i]);
    ck_assert_int_eq(fl_ps_table_push(a, keys, 3, g), FL_OK);
    ck_assert_int_eq(fl_ps_table_push(b, keys, 3, g), FL_OK);
    for (int k = 0; k < 3; k++) {
      float x[DIM], y[DIM];
      ck_assert(fl_ps_table_peek(a, keys[k], x));
      ck_assert(fl_ps_table_peek(b, keys[k], y));
      ck_assert_mem_eq(x, y, sizeof x);
    }
  }
  fl_ps_core_free(c);
  fl_ps_core_free(d);
}
END_TEST

START_TEST(test_per_table_optimizers_refused) {
  fl_ps_core_opts o;
  fl_ps_core *c = NULL;
  memset(&o, 0, sizeof o);
  fl_job_defaults(&o.job);
  o.job.pserver.optimizer.hp.kind = FL_OPTIM_SGD;
  o.job.pserver.sparse.optimizer.hp.kind = FL_OPTIM_SGD;
  o.n_servers = 1;
  o.num_trainers = 1;
  o.n_table_optims = 1;
  o.table_optims[0].hp = fl_optim_hparams_default(FL_OPTIM_FTRL);
  o.table_optims[0].lr = 0.1f;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_EINVAL); /* no name */
  snprintf(o.table_optims[0].name, sizeof o.table_optims[0].name, "t");
  o.table_optims[0].lr = 0.0f;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_EINVAL); /* ftrl without alpha */
  o.table_optims[0].lr = 0.1f;
  o.table_optims[0].hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_EINVAL); /* not a row optimizer */
  o.table_optims[0].hp = fl_optim_hparams_default(FL_OPTIM_ADAM);
  o.table_optims[1] = o.table_optims[0];
  o.n_table_optims = 2;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_EINVAL); /* twice */
  o.n_table_optims = 1;
  ck_assert_int_eq(fl_ps_core_create(&o, &c), FL_OK);
  fl_ps_core_free(c);
}
END_TEST

/* A core of threads service threads (and memory_budget) whose "emb"
 * holds up to 2^20 rows (16 stripes at most), after three sync steps of
 * Adagrad on 64 keys; vals gets their rows. */
static fl_ps_core *striped(int threads, size_t memory_budget, float *vals) {
  enum { NK = 64 };
  fl_ps_core_opts o;
  uint64_t keys[NK];
  float g[NK * DIM];
  pt_opts(&o, 1, 0, FL_OPTIM_ADAGRAD, 0.1f, 1 << 20);
  o.threads = threads;
  o.job.pserver.memory_budget = memory_budget;
  fl_ps_core *c = pt_core(&o);
  reg(c, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
  for (int64_t s = 0; s < STEPS; s++) {
    for (size_t i = 0; i < NK; i++) {
      keys[i] = 1000003 * i + (uint64_t)s;
      for (int j = 0; j < DIM; j++) g[i * DIM + (size_t)j] = 0.01f * (float)i - 0.3f * (float)j;
    }
    ck_assert_int_eq(spush(c, 0, s, 0, 1, keys, NK, g), FL_OK);
  }
  for (size_t i = 0; i < NK; i++) keys[i] = 1000003 * i + 1;
  ck_assert_int_eq(spull(c, 0, STEPS, 1, keys, NK, vals), FL_OK);
  return c;
}

START_TEST(test_stripes_by_threads) {
  /* Stripe 0 (fl_ps_core_table) holds every row only when it is the one
   * stripe; the values are the same bits however many stripes. */
  float one[64 * DIM], two[64 * DIM], budget[64 * DIM], unsaid[64 * DIM];
  const size_t all = 3 * 64;
  fl_ps_core *c1 = striped(1, 0, one), *c2 = striped(2, 0, two);
  fl_ps_core *cb = striped(1, 1 << 30, budget), *c0 = striped(0, 0, unsaid);
  ck_assert_uint_eq(fl_ps_table_rows(fl_ps_core_table(c1, "emb")), all);
  ck_assert_uint_lt(fl_ps_table_rows(fl_ps_core_table(c2, "emb")), all);
  ck_assert_uint_lt(fl_ps_table_rows(fl_ps_core_table(cb, "emb")), all);
  ck_assert_uint_lt(fl_ps_table_rows(fl_ps_core_table(c0, "emb")), all);
  ck_assert_mem_eq(one, two, sizeof one);
  ck_assert_mem_eq(one, budget, sizeof one);
  ck_assert_mem_eq(one, unsaid, sizeof one);
  fl_ps_core_free(c1);
  fl_ps_core_free(c2);
  fl_ps_core_free(cb);
  fl_ps_core_free(c0);
}
END_TEST

/* A checkpoint does not depend on the stripes: one written by a server of
 * 16 stripes (2 threads) loads into a server of one thread (1 stripe, a
 * job restarted with one trainer), and the other way round, with every
 * row's bits; both then take the next step alike. */
START_TEST(test_checkpoint_across_stripes) {
  enum { NK = 64 };
  uint64_t keys[3 * NK];
  float g[3 * NK * DIM], x[3 * NK * DIM], y[3 * NK * DIM], vals[NK * DIM];
  for (size_t i = 0; i < 3 * NK; i++) {
    keys[i] = 1000003 * (i / 3) + i % 3; /* every row striped() made */
    for (int j = 0; j < DIM; j++) g[i * DIM + (size_t)j] = 0.125f - 0.002f * (float)(i + (size_t)j);
  }
  for (int dir = 0; dir < 2; dir++) {
    char path[] = "/tmp/fl_test_ps_rows_XXXXXX";
    int fd = mkstemp(path);
    fl_ps_core_opts o;
    fl_ckpt *ck;
    ck_assert_int_ge(fd, 0);
    close(fd);
    fl_ps_core *c = striped(dir ? 1 : 2, 0, vals);
    pt_opts(&o, 1, 0, FL_OPTIM_ADAGRAD, 0.1f, 1 << 20);
    o.threads = dir ? 2 : 1;
    fl_ps_core *d = pt_core(&o);
    ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
    ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
    ck_assert_int_eq(fl_ps_core_load(d, ck, path), FL_OK);
    fl_ckpt_free(ck);
    unlink(path);
    if (!dir) /* the one stripe holds every row loaded */
      ck_assert_uint_eq(fl_ps_table_rows(fl_ps_core_table(d, "emb")), 3 * NK);
    reg(d, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
    for (int64_t s = STEPS; s <= STEPS + 1; s++) { /* the loaded rows, then after a step */
      ck_assert_int_eq(spull(c, 0, s, 1, keys, 3 * NK, x), FL_OK);
      ck_assert_int_eq(spull(d, 0, s, 1, keys, 3 * NK, y), FL_OK);
      ck_assert_mem_eq(x, y, sizeof x);
      ck_assert_int_eq(spush(c, 0, s, 0, 1, keys, 3 * NK, g), FL_OK);
      ck_assert_int_eq(spush(d, 0, s, 0, 1, keys, 3 * NK, g), FL_OK);
    }
    fl_ps_core_free(c);
    fl_ps_core_free(d);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_rows");
  TCase *tc = tcase_create("rows");
  tcase_add_test(tc, test_sync_rows_equal_one_trainer);
  tcase_add_test(tc, test_sync_rows_dead_and_old_clients);
  tcase_add_test(tc, test_read_only_pull_changes_nothing);
  tcase_add_test(tc, test_per_table_optimizers);
  tcase_add_test(tc, test_per_table_optimizers_refused);
  tcase_add_test(tc, test_stripes_by_threads);
  tcase_add_test(tc, test_checkpoint_across_stripes);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
