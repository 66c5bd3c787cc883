/* test_ps_tier.c - the sparse tables' disk tier (pserver.memory_budget)
 * and lock stripes: a table with a budget of a few rows gives bit for bit
 * the pulls and rows of one without (rows demoted and promoted, a call's
 * misses looked up at once, row-wise Adagrad and Adam state and step
 * counts carried), max_rows evicts the least recent row of both tiers
 * exactly as one memory tier would; with admission and expiry (steps or
 * seconds) the same rows are admitted, refused and expired, from disk too,
 * and an id on disk is a row, not admitted again; a value of the layout
 * before the marks reads with them zero; the store's id filter never
 * hides a row held (rebuilt as it grows) nor shows one removed; a disk
 * row without marks counts as seen at the table's start; a core's checkpoint keeps the disk
 * tier (a RocksDB checkpoint beside the file) and a fresh core restores
 * it, one without a budget refuses it; delta checkpoints with a budget
 * restore the same bits as whole ones without, a damaged delta (or its
 * lost store copy) stops the restart at the one before; a store another process holds is
 * refused, not wiped; /metrics shows both tiers; a full
 * disk keeps every row (in memory, over budget); striped tables give the
 * same rows from concurrent trainers as from one thread: sync bit for bit,
 * async without a lost update. */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fl_metrics.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"
#include "ps_testutil.h"
#include "tier_rocks.h"

#define DIM 8
#define KEYS 600
#define BATCH 64

static fl_ps_table_opts opts(fl_optim_kind kind, int64_t max_rows) {
  fl_ps_table_opts o;
  memset(&o, 0, sizeof o);
  o.name = "emb";
  o.dim = DIM;
  o.max_rows = max_rows;
  o.init_range = 0.5f;
  o.seed = 11;
  o.hp = fl_optim_hparams_default(kind);
  o.lr = 0.05f;
  return o;
}

/* A table of options o whose memory tier holds about hot_rows rows. */
static void make_tiered(pt_tiered *x, fl_ps_table_opts o, size_t hot_rows) {
  pt_tiered_open(x, "fl_test_tier", o,
                 hot_rows * (sizeof(uint64_t) + (DIM + 2 * DIM) * sizeof(float) + 24));
}

/* *mem, a table of options o all in memory, and x, one of the same
 * options with a disk tier (make_tiered); free_pair frees both. */
static void make_pair(fl_ps_table_opts o, size_t hot_rows, fl_ps_table **mem, pt_tiered *x) {
  ck_assert_int_eq(fl_ps_table_create(&o, mem), FL_OK);
  make_tiered(x, o, hot_rows);
}

static void free_pair(fl_ps_table *mem, pt_tiered *x) {
  fl_ps_table_free(mem);
  pt_tiered_free(x);
}

/* Batch b of a skewed id stream (a few hot keys, a long tail), with
 * repeats inside a batch. */
static void batch(int b, uint64_t *keys, float *g) {
  uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(b + 1);
  for (int i = 0; i < BATCH; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    keys[i] = (s % 4 == 0) ? s % 8 : (s >> 8) % KEYS;
    for (int j = 0; j < DIM; j++) g[i * DIM + j] = (float)((int)((s >> (j * 4)) % 17) - 8) * 0.03f;
  }
}

/* Batch i pulled then pushed on both tables: the pulls are the same bits. */
static void step_both(fl_ps_table *a, fl_ps_table *b, int i) {
  uint64_t keys[BATCH];
  float g[BATCH * DIM], pa[BATCH * DIM], pb[BATCH * DIM];
  batch(i, keys, g);
  ck_assert_int_eq(fl_ps_table_pull(a, keys, BATCH, pa), FL_OK);
  ck_assert_int_eq(fl_ps_table_pull(b, keys, BATCH, pb), FL_OK);
  ck_assert_mem_eq(pa, pb, sizeof pa);
  ck_assert_int_eq(fl_ps_table_push(a, keys, BATCH, g), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(b, keys, BATCH, g), FL_OK);
}

/* Every row of both tables (read) is the same bits. */
static void same_rows(fl_ps_table *a, fl_ps_table *b) {
  uint64_t all[KEYS];
  static float ra[KEYS * DIM], rb[KEYS * DIM];
  for (uint64_t k = 0; k < KEYS; k++) all[k] = k;
  ck_assert_int_eq(fl_ps_table_read(a, all, KEYS, ra), FL_OK);
  ck_assert_int_eq(fl_ps_table_read(b, all, KEYS, rb), FL_OK);
  ck_assert_mem_eq(ra, rb, sizeof ra);
}

/* Pull then push batches on both tables; every pull and, at the end,
 * every row (read) are the same bits. */
static void run_both(fl_ps_table *a, fl_ps_table *b, int batches) {
  for (int i = 0; i < batches; i++) step_both(a, b, i);
  same_rows(a, b);
}

START_TEST(test_tier_same_bits) {
  const fl_optim_kind kinds[] = {FL_OPTIM_ROWWISE_ADAGRAD, FL_OPTIM_ADAM, FL_OPTIM_SGD};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    fl_ps_table_opts o = opts(kinds[k], 100000);
    fl_ps_table *mem = NULL;
    pt_tiered x;
    fl_ps_tier_stats st;
    make_pair(o, 40, &mem, &x);
    run_both(mem, x.t, 60);
    fl_ps_tier_get_stats(x.tier, &st);
    /* Rows went both ways, and live in one tier or the other. */
    ck_assert_uint_gt(st.demotions, 100);
    ck_assert_uint_gt(st.promotions, 50);
    ck_assert_uint_gt(st.hits, 50);
    ck_assert_uint_lt(fl_ps_table_rows(x.t), fl_ps_table_rows(mem) / 3);
    ck_assert_uint_eq(fl_ps_table_rows(x.t) + fl_ps_table_disk_rows(x.t), fl_ps_table_rows(mem));
    ck_assert_uint_eq(st.rows, fl_ps_table_disk_rows(x.t));
    ck_assert_uint_le(fl_ps_table_hot_bytes(x.t), x.budget);
    free_pair(mem, &x);
  }
}
END_TEST

START_TEST(test_tier_max_rows_lru) {
  /* 200 rows at most, 30 in memory: the row evicted at the bound is the
   * least recent of both tiers, as in a table all in memory. */
  fl_ps_table_opts o = opts(FL_OPTIM_ADAGRAD, 200);
  fl_ps_table *mem = NULL;
  pt_tiered x;
  make_pair(o, 30, &mem, &x);
  run_both(mem, x.t, 40);
  ck_assert_uint_gt(fl_ps_table_evicted(mem), 0);
  ck_assert_uint_eq(fl_ps_table_evicted(x.t), fl_ps_table_evicted(mem));
  ck_assert_uint_eq(fl_ps_table_rows(x.t) + fl_ps_table_disk_rows(x.t), 200);
  free_pair(mem, &x);
}
END_TEST

START_TEST(test_tier_disk_full_keeps_rows) {
  /* Files of this process may not grow past 256 KiB: the store's flushes
   * fail; demotion stops, every row stays readable, none lost. */
  fl_ps_table_opts o = opts(FL_OPTIM_ROWWISE_ADAGRAD, 100000);
  fl_ps_table *mem = NULL;
  pt_tiered x;
  struct rlimit rl = {256 << 10, 256 << 10};
  fl_ps_tier_stats st;
  make_pair(o, 10, &mem, &x);
  signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
  {
    /* Enough distinct rows to fill the memtables several times over. */
    static uint64_t keys[20000];
    static float g[20000 * DIM], va[20000 * DIM], vb[20000 * DIM];
    for (size_t i = 0; i < 20000; i++) keys[i] = 1000 + i;
    for (size_t i = 0; i < 20000 * DIM; i++) g[i] = 0.01f * (float)(i % 13);
    for (size_t off = 0; off < 20000; off += 2000) {
      ck_assert_int_eq(fl_ps_table_push(mem, keys + off, 2000, g + off * DIM), FL_OK);
      ck_assert_int_eq(fl_ps_table_push(x.t, keys + off, 2000, g + off * DIM), FL_OK);
    }
    fl_ps_tier_get_stats(x.tier, &st);
    ck_assert_uint_gt(st.write_errors, 0);
    ck_assert_uint_gt(fl_ps_table_rows(x.t), 10); /* kept in memory, over budget */
    ck_assert_uint_eq(fl_ps_table_rows(x.t) + fl_ps_table_disk_rows(x.t), 20000);
    ck_assert_int_eq(fl_ps_table_read(mem, keys, 20000, va), FL_OK);
    ck_assert_int_eq(fl_ps_table_read(x.t, keys, 20000, vb), FL_OK);
    ck_assert_mem_eq(va, vb, sizeof va);
  }
  fl_ps_table_free(mem);
  fl_ps_table_free(x.t);
  fl_ps_tier_close(x.tier);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_FSIZE, &rl);
  pt_rm_tree(x.dir);
}
END_TEST

START_TEST(test_tier_copy_on_full_disk) {
  /* A base and a delta copy of a store of 4 MB into a real full disk (a
   * 256 KiB tmpfs: RocksDB copies across file systems; skipped where mount
   * is refused): both refused, no abort; the store keeps every row and
   * copies into a directory with room. */
  enum { N = 20000, LEN = 200 };
  char dir[] = "/tmp/fl_test_tier_full_XXXXXX", p[700], full[600];
  static unsigned char row[N][LEN], got[N][LEN];
  static uint64_t keys[N];
  static uint8_t found[N];
  fl_ps_tier *t = NULL;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(full, sizeof full, "%s/full", dir);
  ck_assert_int_eq(mkdir(full, 0700), 0);
  if (mount("flotilla-test", full, "tmpfs", 0, "size=256k") != 0) {
    fprintf(stderr, "test_tier_copy_on_full_disk skipped: mount: %s\n", strerror(errno));
    pt_rm_tree(dir);
    return;
  }
  snprintf(p, sizeof p, "%s/store", dir);
  ck_assert_int_eq(fl_ps_tier_open(p, 1 << 20, &t), FL_OK);
  for (size_t i = 0; i < N; i++) {
    keys[i] = 7 + 3 * i;
    memset(row[i], (int)(i % 251), LEN);
    ck_assert_int_eq(fl_ps_tier_put(t, 1, keys[i], row[i], LEN), FL_OK);
  }
  snprintf(p, sizeof p, "%s/base", full);
  ck_assert_int_ne(fl_ps_tier_checkpoint(t, p, 1), FL_OK);
  snprintf(p, sizeof p, "%s/delta", full);
  ck_assert_int_ne(fl_ps_tier_checkpoint_delta(t, p), FL_OK);
  ck_assert_int_eq(fl_ps_tier_get_many(t, 1, keys, N, got, LEN, found, NULL), FL_OK);
  for (size_t i = 0; i < N; i++) ck_assert_uint_eq(found[i], 1);
  ck_assert_mem_eq(got, row, sizeof row);
  snprintf(p, sizeof p, "%s/base", dir);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, p, 1), FL_OK);
  snprintf(p, sizeof p, "%s/delta", dir);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, p), FL_OK);
  fl_ps_tier_close(t);
  ck_assert_int_eq(umount2(full, MNT_DETACH), 0);
  pt_rm_tree(dir);
}
END_TEST

/* ------------------------------------------------------------- the core */

static fl_ps_core *mk(int nt, int a_sync, size_t budget, int64_t max_rows) {
  fl_ps_core_opts o;
  pt_opts(&o, nt, a_sync, FL_OPTIM_ROWWISE_ADAGRAD, 0.1f, max_rows);
  o.job.pserver.memory_budget = budget;
  return pt_core(&o);
}

static void reg(fl_ps_core *c, int t, int nt, int mode) {
  pt_register(c, &(pt_reg){.trainer = t, .n_trainers = nt, .mode = mode, .dim = DIM});
}

static fl_status spush(fl_ps_core *c, int t, int64_t step, const uint64_t *keys, size_t n,
                       const float *g) {
  return pt_push_sparse(c, &(pt_call){.trainer = t, .table = "emb", .dim = DIM, .step = step,
                                      .parts = 1},
                        keys, n, g);
}

static fl_status spull(fl_ps_core *c, int t, int64_t min_step, int read_only,
                       const uint64_t *keys, size_t n, float *out) {
  return pt_pull_sparse(c, &(pt_call){.trainer = t, .table = "emb", .dim = DIM,
                                      .min_step = min_step, .read_only = read_only},
                        keys, n, out);
}

static void read_all(fl_ps_core *c, float *out) {
  static uint64_t all[KEYS];
  for (uint64_t k = 0; k < KEYS; k++) all[k] = k;
  ck_assert_int_eq(spull(c, 0, 0, 1, all, KEYS, out), FL_OK);
}

/* d, just restored, registers its one async trainer: its rows are want,
 * some of them on disk; *ts its tiers then. */
static void restored_rows(fl_ps_core *d, const float *want, fl_ps_tiers *ts) {
  static float got[KEYS * DIM];
  reg(d, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
  read_all(d, got);
  ck_assert_mem_eq(got, want, sizeof got);
  fl_ps_core_tier_stats(d, ts);
  ck_assert_uint_gt(ts->disk_rows, 0);
}

START_TEST(test_core_checkpoint_keeps_disk_tier) {
  char dir[] = "/tmp/fl_test_tier_core_XXXXXX", path[128], copy[160];
  fl_ps_core *c, *d, *plain;
  static float va[KEYS * DIM];
  uint64_t keys[BATCH];
  float g[BATCH * DIM];
  fl_ps_tiers ts;
  fl_ckpt *ck;
  struct stat sb;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  c = mk(1, 1, 16 << 10, 100000); /* about 150 hot rows of 600 */
  ck_assert_int_eq(fl_ps_core_open_tier(c, dir), FL_OK);
  reg(c, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
  for (int i = 0; i < 40; i++) {
    batch(i, keys, g);
    ck_assert_int_eq(spush(c, 0, i, keys, BATCH, g), FL_OK);
  }
  fl_ps_core_tier_stats(c, &ts);
  ck_assert_uint_gt(ts.disk_rows, 0);
  ck_assert_uint_gt(ts.demotions, 0);
  ck_assert_uint_le(ts.mem_bytes, (16 << 10) - fl_ps_tier_overhead(16 << 10));
  {
    /* /metrics: rows and bytes per tier, the tier's counters. */
    char *text = NULL, want[96];
    size_t len;
    fl_ps_core_publish_tiers(c);
    ck_assert_int_eq(fl_metrics_render(fl_metrics_default(), &text, &len), FL_OK);
    snprintf(want, sizeof want, "flotilla_ps_sparse_rows{tier=\"disk\"} %llu",
             (unsigned long long)ts.disk_rows);
    ck_assert_ptr_nonnull(strstr(text, want));
    ck_assert_ptr_nonnull(strstr(text, "flotilla_ps_sparse_bytes{tier=\"memory\"}"));
    snprintf(want, sizeof want, "flotilla_ps_tier_demotions_total %llu",
             (unsigned long long)ts.demotions);
    ck_assert_ptr_nonnull(strstr(text, want));
    ck_assert_ptr_nonnull(strstr(text, "flotilla_ps_tier_promotions_total"));
    /* The budget's split: hot rows and RocksDB's share make the budget. */
    snprintf(want, sizeof want, "flotilla_ps_memory_budget_bytes{part=\"rocksdb\"} %llu",
             (unsigned long long)fl_ps_tier_overhead(16 << 10));
    ck_assert_ptr_nonnull(strstr(text, want));
    ck_assert_ptr_nonnull(strstr(text, "flotilla_ps_memory_budget_bytes{part=\"hot_rows\"}"));
    ck_assert_ptr_nonnull(strstr(text, "flotilla_ps_memory_budget_bytes{part=\"rocksdb_used\"}"));
    /* RocksDB's background work; no error on this disk. */
    ck_assert_ptr_nonnull(strstr(text, "flotilla_ps_tier_background{work=\"compactions\"}"));
    ck_assert_ptr_nonnull(strstr(text, "flotilla_ps_tier_background{work=\"errors\"} 0\n"));
    free(text);
  }
  snprintf(path, sizeof path, "%s/ckpt-40.flc", dir);
  ck_assert_int_eq(fl_ps_core_save(c, path), FL_OK);
  snprintf(copy, sizeof copy, "%s.tier", path);
  ck_assert_int_eq(stat(copy, &sb), 0);
  read_all(c, va);
  fl_ps_core_free(c);

  /* The same data directory: the store is made afresh, then restored. */
  d = mk(1, 1, 16 << 10, 100000);
  ck_assert_int_eq(fl_ps_core_open_tier(d, dir), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(path, &ck), FL_OK);
  plain = mk(1, 1, 0, 100000);
  ck_assert_int_eq(fl_ps_core_load(plain, ck, path), FL_EINVAL); /* rows on disk: refused */
  ck_assert_int_eq(fl_ps_core_load(d, ck, path), FL_OK);
  fl_ckpt_free(ck);
  restored_rows(d, va, &ts);
  fl_ps_core_free(d);
  fl_ps_core_free(plain);
  pt_rm_tree(dir);
}
END_TEST

/* ------------------------------------------------- delta checkpoints */

/* A core of one async trainer: with budget (then its disk tier in dir
 * and deltas every 4 checkpoints) or without (whole checkpoints), rows
 * expiring after expire steps (0: never); registered after a load. */
static fl_ps_core *mk_delta(size_t budget, int64_t max_rows, int64_t expire, const char *dir) {
  fl_ps_core_opts o;
  fl_ps_core *c;
  pt_opts(&o, 1, 1, FL_OPTIM_ROWWISE_ADAGRAD, 0.1f, max_rows);
  o.job.pserver.memory_budget = budget;
  o.job.pserver.sparse.expire_after_steps = expire;
  o.job.pserver.checkpoint_delta.every = budget ? 4 : 0;
  c = pt_core(&o);
  if (budget) ck_assert_int_eq(fl_ps_core_open_tier(c, dir), FL_OK);
  return c;
}

/* Batches from..from+n pushed to both cores alike (b may be NULL). */
static void train(fl_ps_core *a, fl_ps_core *b, int from, int n) {
  uint64_t keys[BATCH];
  float g[BATCH * DIM];
  for (int i = from; i < from + n; i++) {
    batch(i, keys, g);
    ck_assert_int_eq(spush(a, 0, i, keys, BATCH, g), FL_OK);
    if (b) ck_assert_int_eq(spush(b, 0, i, keys, BATCH, g), FL_OK);
  }
}

#define DELTA_BUDGET (16 << 10)

/* A fresh core with the budget restarts from the newest base of dir and
 * its deltas (stderr into dir/log.txt): its rows are want, its memory
 * tier within the budget; with b (at the same state, no budget) it holds
 * as many rows and trains on alike, bit for bit.  Returns the deltas
 * replayed. */
static int64_t restart_tier(const char *dir, int64_t max_rows, int64_t expire, const float *want,
                            fl_ps_core *b) {
  static float got[KEYS * DIM], vb[KEYS * DIM];
  fl_ps_core *d = mk_delta(DELTA_BUDGET, max_rows, expire, dir);
  int64_t deltas;
  char logp[512];
  fl_ps_tiers td, tb;
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  deltas = pt_load_chain(d, dir, logp);
  restored_rows(d, want, &td);
  ck_assert_uint_le(td.mem_bytes, DELTA_BUDGET - fl_ps_tier_overhead(DELTA_BUDGET));
  if (b) {
    fl_ps_core_tier_stats(b, &tb);
    ck_assert_uint_eq(td.mem_rows + td.disk_rows, tb.mem_rows);
    train(d, b, 100, 10);
    read_all(d, got);
    read_all(b, vb);
    ck_assert_mem_eq(got, vb, sizeof got);
  }
  fl_ps_core_free(d);
  return deltas;
}

/* 1 when dir/log.txt names what. */
static int log_names(const char *dir, const char *what) {
  char p[512], line[1024];
  int found = 0;
  FILE *f;
  snprintf(p, sizeof p, "%s/log.txt", dir);
  ck_assert_ptr_nonnull(f = fopen(p, "r"));
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
  fclose(f);
  return found;
}

START_TEST(test_core_delta_chain_same_bits) {
  /* The same training with a budget and deltas (base + 4) and without a
   * budget: the same rows after each checkpoint; a restart from the chain
   * has them again (rows demoted since a delta wrote them, rows evicted
   * from either tier at max_rows 400; 16 stripes at max_rows 2^20; rows
   * unseen 12 steps expiring from either tier) and trains on alike.  A
   * truncated third delta, or one whose store copy is gone, is named and
   * the restart stops after the second, with its disk tier. */
  const int64_t maxr[3] = {400, 1 << 20, 1 << 20}, expire[3] = {0, 0, 12};
  uint64_t rows[3];
  fl_ps_tiers tb;
  for (int v = 0; v < 3; v++) {
    char dir[] = "/tmp/fl_test_tier_delta_XXXXXX", bdir[] = "/tmp/fl_test_tier_whole_XXXXXX";
    char p[512], d3[512], cp[600], moved[600];
    static float snap[5][KEYS * DIM], vb[KEYS * DIM];
    fl_ps_core *a, *b;
    int64_t step;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(mkdtemp(bdir));
    a = mk_delta(DELTA_BUDGET, maxr[v], expire[v], dir);
    b = mk_delta(0, maxr[v], expire[v], NULL);
    reg(a, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
    reg(b, 0, 1, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
    for (int k = 0; k < 5; k++) {
      train(a, b, k * 8, 8);
      ck_assert_int_eq(fl_ps_core_save_dir(a, dir, &step, p, sizeof p), FL_OK);
      ck_assert_ptr_nonnull(strstr(p, k ? "/delta-" : "/ckpt-"));
      if (k == 3) snprintf(d3, sizeof d3, "%s", p);
      ck_assert_int_eq(fl_ps_core_save_dir(b, bdir, &step, p, sizeof p), FL_OK);
      ck_assert_ptr_nonnull(strstr(p, "/ckpt-"));
      read_all(a, snap[k]);
      read_all(b, vb);
      ck_assert_mem_eq(snap[k], vb, sizeof vb);
    }
    fl_ps_core_free(a);
    fl_ps_core_tier_stats(b, &tb);
    rows[v] = tb.mem_rows;
    if (v == 2) ck_assert_uint_lt(rows[2], rows[1]); /* rows expired */
    ck_assert_int_eq(restart_tier(dir, maxr[v], expire[v], snap[4], b), 4);
    /* The third delta's copy gone: named, the chain stops after the second. */
    snprintf(cp, sizeof cp, "%s.tier", d3);
    snprintf(moved, sizeof moved, "%s/away.tier", dir);
    ck_assert_int_eq(rename(cp, moved), 0);
    ck_assert_int_eq(restart_tier(dir, maxr[v], expire[v], snap[2], NULL), 2);
    ck_assert(log_names(dir, d3));
    ck_assert_int_eq(rename(moved, cp), 0);
    /* Its copy's file cut in half: named, likewise. */
    {
      struct stat sb;
      char sst[700];
      snprintf(sst, sizeof sst, "%s/delta.sst", cp);
      ck_assert_int_eq(stat(sst, &sb), 0);
      ck_assert_int_eq(truncate(sst, sb.st_size / 2), 0);
      ck_assert_int_eq(restart_tier(dir, maxr[v], expire[v], snap[2], NULL), 2);
      ck_assert(log_names(dir, "delta.sst is truncated or corrupt"));
    }
    /* Truncated: likewise. */
    ck_assert_int_eq(truncate(d3, 100), 0);
    ck_assert_int_eq(restart_tier(dir, maxr[v], expire[v], snap[2], NULL), 2);
    ck_assert(log_names(dir, d3));
    fl_ps_core_free(b);
    pt_rm_tree(dir);
    pt_rm_tree(bdir);
  }
}
END_TEST

START_TEST(test_tier_in_use_refused) {
  /* Another process holds the store open: a second one refuses it and
   * removes nothing. */
  char dir[] = "/tmp/fl_test_tier_lock_XXXXXX", path[96], lock[128];
  int up[2], down[2];
  char c = 0;
  pid_t pid;
  fl_ps_tier *t = NULL;
  struct stat sb;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/store", dir);
  snprintf(lock, sizeof lock, "%s/LOCK", path);
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid = fork();
  if (pid == 0) {
    fl_ps_tier *held = NULL;
    char x = fl_ps_tier_open(path, 1 << 20, &held) == FL_OK;
    if (write(up[1], &x, 1) != 1 || read(down[0], &x, 1) != 1) _exit(1);
    fl_ps_tier_close(held);
    _exit(0);
  }
  ck_assert_int_eq(read(up[0], &c, 1), 1);
  ck_assert_int_eq(c, 1);
  ck_assert_int_eq(fl_ps_tier_open(path, 1 << 20, &t), FL_ESTATE);
  ck_assert_int_eq(stat(lock, &sb), 0);
  ck_assert_int_eq(write(down[1], &c, 1), 1);
  waitpid(pid, NULL, 0);
  ck_assert_int_eq(fl_ps_tier_open(path, 1 << 20, &t), FL_OK); /* free again */
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

START_TEST(test_core_budget_needs_dir) {
  fl_ps_core *c = mk(1, 1, 1 << 20, 100);
  ck_assert_int_eq(fl_ps_core_open_tier(c, ""), FL_EINVAL);
  fl_ps_core_free(c);
}
END_TEST

/* ------------------------------------------------------------ stripes */

#define NTH 4
#define ROUNDS 50

typedef struct worker {
  fl_ps_core *c;
  int t, nt, sync;
} worker;

/* Trainer t's keys of step s: shared hot keys and its own. */
static size_t step_keys(int t, int s, uint64_t *keys, float *g) {
  size_t n = 0;
  for (int i = 0; i < 48; i++) {
    keys[n] = i < 16 ? (uint64_t)i : (uint64_t)(100 + (t * 997 + s * 31 + i * 13) % 400);
    for (int j = 0; j < DIM; j++)
      g[n * DIM + (size_t)j] = 0.01f * (float)((t + 1) * (j + 1)) - 0.003f * (float)(i % 7) +
                               0.001f * (float)s;
    n++;
  }
  return n;
}

static void *work(void *arg) {
  worker *w = arg;
  uint64_t keys[64];
  float g[64 * DIM], out[64 * DIM];
  for (int s = 0; s < ROUNDS; s++) {
    size_t n = step_keys(w->t, s, keys, g);
    fl_status st;
    while ((st = spull(w->c, w->t, s, 0, keys, n, out)) == FL_EAGAIN) usleep(100);
    if (st != FL_OK || spush(w->c, w->t, s, keys, n, g) != FL_OK) return arg;
  }
  return NULL;
}

static void run_threads(fl_ps_core *c, int nt, int sync) {
  pthread_t th[NTH];
  worker w[NTH];
  for (int t = 0; t < nt; t++) {
    w[t] = (worker){c, t, nt, sync};
    ck_assert_int_eq(pthread_create(&th[t], NULL, work, &w[t]), 0);
  }
  for (int t = 0; t < nt; t++) {
    void *r;
    pthread_join(th[t], &r);
    ck_assert_ptr_null(r);
  }
}

START_TEST(test_stripes_sync_same_bits) {
  /* 16 stripes (max_rows 1<<20): 4 trainers in threads against 4 trainers
   * pushing in turn from one thread. */
  fl_ps_core *a = mk(NTH, 0, 0, 1 << 20), *b = mk(NTH, 0, 0, 1 << 20);
  static float va[KEYS * DIM], vb[KEYS * DIM];
  for (int t = 0; t < NTH; t++) {
    reg(a, t, NTH, FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
    reg(b, t, NTH, FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC);
  }
  run_threads(a, NTH, 1);
  for (int s = 0; s < ROUNDS; s++)
    for (int t = NTH - 1; t >= 0; t--) {
      uint64_t keys[64];
      float g[64 * DIM], out[64 * DIM];
      size_t n = step_keys(t, s, keys, g);
      ck_assert_int_eq(spull(b, t, s, 0, keys, n, out), FL_OK);
      ck_assert_int_eq(spush(b, t, s, keys, n, g), FL_OK);
    }
  read_all(a, va);
  read_all(b, vb);
  ck_assert_mem_eq(va, vb, sizeof va);
  fl_ps_core_free(a);
  fl_ps_core_free(b);
}
END_TEST

START_TEST(test_stripes_async_no_lost_update) {
  /* SGD: each update subtracts lr * g, so the rows after the threads
   * equal those of one thread (within rounding: sums in another order)
   * only when no update was lost (one is lr * g >= 1e-3 away). */
  fl_ps_core_opts o;
  fl_ps_core *a = NULL, *b = NULL;
  static float va[KEYS * DIM], vb[KEYS * DIM];
  pt_opts(&o, NTH, 1, FL_OPTIM_SGD, 0.25f, 1 << 20);
  a = pt_core(&o);
  b = pt_core(&o);
  for (int t = 0; t < NTH; t++) {
    reg(a, t, NTH, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
    reg(b, t, NTH, FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC);
  }
  run_threads(a, NTH, 0);
  for (int t = 0; t < NTH; t++) {
    worker w = {b, t, NTH, 0};
    ck_assert_ptr_null(work(&w));
  }
  read_all(a, va);
  read_all(b, vb);
  for (size_t i = 0; i < KEYS * DIM; i++) ck_assert_float_eq_tol(va[i], vb[i], 1e-4f);
  fl_ps_core_free(a);
  fl_ps_core_free(b);
}
END_TEST

/* Options with admission (ids seen twice) and expiry (after steps or
 * seconds, one second a batch). */
static fl_ps_table_opts admit_opts(int64_t steps, double seconds) {
  fl_ps_table_opts o = opts(FL_OPTIM_ADAGRAD, 100000);
  o.admit_threshold = 2;
  o.admit_default = 0.125f;
  o.admit_sketch_bytes = 8192;
  o.expire_after_steps = steps;
  o.expire_after_seconds = seconds;
  o.now = 1000;
  return o;
}

/* run_both with an expiry sweep after each push: the same rows expire
 * from both, the same ids are admitted and refused. */
static void run_expiring(fl_ps_table *a, fl_ps_table *b, int batches) {
  fl_ps_table_counts na, nb;
  for (int i = 0; i < batches; i++) {
    step_both(a, b, i);
    ck_assert_uint_eq(fl_ps_table_expire(a, 1001.0 + i), fl_ps_table_expire(b, 1001.0 + i));
  }
  same_rows(a, b);
  fl_ps_table_counts_of(a, &na);
  fl_ps_table_counts_of(b, &nb);
  ck_assert_mem_eq(&na, &nb, sizeof na);
  ck_assert_uint_gt(na.refused, 0);
  ck_assert_uint_gt(na.expired, 100);
  ck_assert_uint_eq(fl_ps_table_rows(b) + fl_ps_table_disk_rows(b), fl_ps_table_rows(a));
}

START_TEST(test_tier_admission_expiry_same_bits) {
  /* Expiry after 6 steps, then after 6 seconds: 30 rows in memory, the
   * rest on disk, where most of the expired rows are. */
  const int64_t steps[2] = {6, 0};
  const double secs[2] = {0, 6};
  for (int k = 0; k < 2; k++) {
    fl_ps_table_opts o = admit_opts(steps[k], secs[k]);
    fl_ps_table *mem = NULL;
    pt_tiered x;
    fl_ps_tier_stats st;
    make_pair(o, 30, &mem, &x);
    run_expiring(mem, x.t, 80);
    fl_ps_tier_get_stats(x.tier, &st);
    ck_assert_uint_gt(st.demotions, 100);
    ck_assert_uint_gt(st.promotions, 10);
    ck_assert_uint_gt(fl_ps_table_disk_rows(x.t), 0);
    /* Rows demoted and not promoted, not on disk now: expired there. */
    ck_assert_uint_eq(st.rows, fl_ps_table_disk_rows(x.t));
    ck_assert_uint_gt(st.demotions - st.promotions - st.rows, 50);
    ck_assert_uint_le(fl_ps_table_hot_bytes(x.t), x.budget);
    free_pair(mem, &x);
  }
}
END_TEST

START_TEST(test_tier_disk_row_not_readmitted) {
  /* Id 7 admitted (two sightings), then demoted by ids 100..: a pull of 7
   * promotes it, neither admitted nor refused again, its trained value
   * kept; a gradient of an id on disk applies. */
  fl_ps_table_opts o = admit_opts(0, 0);
  pt_tiered x;
  fl_ps_table_counts n0, n1;
  float v[DIM], w[DIM], g[DIM];
  uint64_t k7 = 7;
  for (int j = 0; j < DIM; j++) g[j] = 0.5f;
  make_tiered(&x, o, 4);
  ck_assert_int_eq(fl_ps_table_pull(x.t, &k7, 1, v), FL_OK);
  ck_assert_uint_eq(fl_ps_table_rows(x.t), 0);
  ck_assert(v[0] == 0.125f);
  ck_assert_int_eq(fl_ps_table_pull(x.t, &k7, 1, v), FL_OK);
  ck_assert_int_eq(fl_ps_table_push(x.t, &k7, 1, g), FL_OK);
  ck_assert(fl_ps_table_peek(x.t, 7, v));
  for (uint64_t k = 100; k < 120; k++)
    for (int r = 0; r < 2; r++) ck_assert_int_eq(fl_ps_table_pull(x.t, &k, 1, w), FL_OK);
  ck_assert(!fl_ps_table_peek(x.t, 7, w));
  ck_assert_uint_gt(fl_ps_table_disk_rows(x.t), 0);
  fl_ps_table_counts_of(x.t, &n0);
  ck_assert_uint_eq(n0.admitted, 21);
  ck_assert_uint_eq(n0.refused, 21);
  ck_assert_int_eq(fl_ps_table_push(x.t, &k7, 1, g), FL_OK); /* on disk: applies */
  ck_assert_int_eq(fl_ps_table_pull(x.t, &k7, 1, w), FL_OK);
  fl_ps_table_counts_of(x.t, &n1);
  ck_assert_uint_eq(n1.admitted, n0.admitted);
  ck_assert_uint_eq(n1.refused, n0.refused);
  ck_assert(w[0] != 0.125f && w[0] < v[0]);
  /* A gradient of an id on neither tier is dropped, no row made. */
  k7 = 500;
  ck_assert_int_eq(fl_ps_table_push(x.t, &k7, 1, g), FL_OK);
  ck_assert(!fl_ps_table_peek(x.t, 500, w));
  ck_assert_int_eq(fl_ps_table_read(x.t, &k7, 1, w), FL_OK);
  ck_assert(w[0] == 0.125f);
  pt_tiered_free(&x);
}
END_TEST

START_TEST(test_tier_value_without_marks) {
  /* A value written before the marks (24 bytes shorter) reads with them
   * zero; any other length is refused as corrupt. */
  char dir[] = "/tmp/fl_test_tier_XXXXXX", path[64];
  fl_ps_tier *t = NULL;
  unsigned char row[64], got[64 + FL_PS_TIER_MARKS_LEN];
  uint64_t key = 5;
  uint8_t found = 0;
  memset(row, 0xab, sizeof row);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/store", dir);
  ck_assert_int_eq(fl_ps_tier_open(path, 1 << 20, &t), FL_OK);
  ck_assert_int_eq(fl_ps_tier_put(t, 1, key, row, sizeof row), FL_OK);
  memset(got, 0xff, sizeof got);
  ck_assert_int_eq(fl_ps_tier_get_many(t, 1, &key, 1, got, sizeof got, &found, NULL), FL_OK);
  ck_assert_int_eq(found, 1);
  ck_assert_mem_eq(got, row, sizeof row);
  for (size_t i = sizeof row; i < sizeof got; i++) ck_assert_int_eq(got[i], 0);
  ck_assert_int_eq(fl_ps_tier_get_many(t, 1, &key, 1, got, sizeof row + 8, &found, NULL),
                   FL_ECORRUPT);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

START_TEST(test_tier_legacy_row_expires) {
  /* A disk row of the layout before the marks (as a store copy of an older
   * pserver holds) reads, and counts as seen when the table was made or
   * loaded: expired 3 steps later. */
  fl_ps_table_opts o = opts(FL_OPTIM_SGD, 1000);
  pt_tiered x;
  uint64_t h = 1469598103934665603ULL, k42 = 42, k1 = 1;
  unsigned char old[8 + DIM * 4];
  float v[DIM], g[DIM] = {0};
  int64_t updates = 5;
  for (const char *p = "emb"; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ULL;
  o.expire_after_steps = 3;
  make_tiered(&x, o, 4);
  memcpy(old, &updates, 8);
  for (int j = 0; j < DIM; j++) memcpy(old + 8 + j * 4, &(float){0.25f}, 4);
  ck_assert_int_eq(fl_ps_tier_put(x.tier, fl_ps_mix64(h + 0), 42, old, sizeof old), FL_OK);
  ck_assert_int_eq(fl_ps_table_read(x.t, &k42, 1, v), FL_OK);
  ck_assert(v[0] == 0.25f && v[DIM - 1] == 0.25f);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(fl_ps_table_push(x.t, &k1, 1, g), FL_OK);
  ck_assert_uint_eq(fl_ps_table_expire(x.t, 0), 0); /* unseen 2 steps */
  ck_assert_uint_eq(fl_ps_table_disk_rows(x.t), 1);
  ck_assert_int_eq(fl_ps_table_push(x.t, &k1, 1, g), FL_OK);
  ck_assert_uint_eq(fl_ps_table_expire(x.t, 0), 1);
  ck_assert_uint_eq(fl_ps_table_disk_rows(x.t), 0);
  ck_assert_int_eq(fl_ps_table_read(x.t, &k42, 1, v), FL_OK);
  ck_assert(v[0] != 0.25f);
  pt_tiered_free(&x);
}
END_TEST

START_TEST(test_tier_filter_no_false_negative) {
  /* 20000 rows (the id filter rebuilt on the way, sized from 4096), some
   * removed: every row held is found, no id never written is, and a row
   * removed reads as absent though the filter still holds it. */
  char dir[] = "/tmp/fl_test_tier_XXXXXX", path[64];
  fl_ps_tier *t = NULL;
  enum { N = 20000 };
  static uint64_t keys[N], seqs[N];
  static unsigned char rows[N * 8];
  static uint8_t found[N];
  uint64_t v;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/store", dir);
  ck_assert_int_eq(fl_ps_tier_open(path, 1 << 20, &t), FL_OK);
  for (uint64_t i = 0; i < N; i++) {
    keys[i] = i * 7919 + 3;
    v = i;
    ck_assert_int_eq(fl_ps_tier_put(t, 9, keys[i], &v, 8), FL_OK);
  }
  ck_assert_int_eq(fl_ps_tier_get_many(t, 9, keys, N, rows, 8, found, seqs), FL_OK);
  for (size_t i = 0; i < N; i++) {
    ck_assert_int_eq(found[i], 1);
    memcpy(&v, rows + i * 8, 8);
    ck_assert_uint_eq(v, i);
  }
  ck_assert_int_eq(fl_ps_tier_drop(t, 9, keys[5], seqs[5]), FL_OK);
  for (uint64_t i = 0; i < N; i++) keys[i] = i * 7919 + 4;
  keys[0] = 5 * 7919 + 3;
  ck_assert_int_eq(fl_ps_tier_get_many(t, 9, keys, N, rows, 8, found, NULL), FL_OK);
  for (size_t i = 0; i < N; i++) ck_assert_int_eq(found[i], 0);
  ck_assert_int_eq(fl_ps_tier_get_many(t, 10, keys, 1, rows, 8, found, NULL), FL_OK);
  ck_assert_int_eq(found[0], 0);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

START_TEST(test_tier_no_deltas) {
  /* A store that takes no deltas keeps its rows as any (a row demoted,
   * promoted and demoted again reads its last copy; keys looked up in
   * ascending order or not), and refuses a delta copy. */
  char dir[] = "/tmp/fl_test_tier_XXXXXX", path[64], cp[96];
  fl_ps_tier *t = NULL;
  uint64_t keys[3] = {30, 10, 20}, seqs[3], v;
  unsigned char rows[3 * 8];
  uint8_t found[3];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/store", dir);
  snprintf(cp, sizeof cp, "%s/delta", dir);
  ck_assert_int_eq(fl_ps_tier_open(path, 1 << 20, &t), FL_OK);
  fl_ps_tier_no_deltas(t);
  for (uint64_t i = 0; i < 3; i++) ck_assert_int_eq(fl_ps_tier_put(t, 4, keys[i], &i, 8), FL_OK);
  ck_assert_int_eq(fl_ps_tier_get_many(t, 4, keys, 1, rows, 8, found, seqs), FL_OK);
  ck_assert_int_eq(fl_ps_tier_drop(t, 4, keys[0], seqs[0]), FL_OK);
  v = 7;
  ck_assert_int_eq(fl_ps_tier_put(t, 4, keys[0], &v, 8), FL_OK);
  ck_assert_int_eq(fl_ps_tier_get_many(t, 4, keys, 3, rows, 8, found, NULL), FL_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(found[i], 1);
    memcpy(&v, rows + i * 8, 8);
    ck_assert_uint_eq(v, i ? (uint64_t)i : 7);
  }
  ck_assert_uint_eq(fl_ps_tier_rows(t, 4), 3);
  ck_assert_int_eq(fl_ps_tier_checkpoint_delta(t, cp), FL_ESTATE);
  fl_ps_tier_close(t);
  pt_rm_tree(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_tier");
  TCase *tc = tcase_create("tier");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_tier_same_bits);
  tcase_add_test(tc, test_tier_max_rows_lru);
  tcase_add_test(tc, test_tier_admission_expiry_same_bits);
  tcase_add_test(tc, test_tier_disk_row_not_readmitted);
  tcase_add_test(tc, test_tier_value_without_marks);
  tcase_add_test(tc, test_tier_filter_no_false_negative);
  tcase_add_test(tc, test_tier_no_deltas);
  tcase_add_test(tc, test_tier_legacy_row_expires);
  tcase_add_test(tc, test_tier_disk_full_keeps_rows);
  tcase_add_test(tc, test_tier_copy_on_full_disk);
  tcase_add_test(tc, test_core_checkpoint_keeps_disk_tier);
  tcase_add_test(tc, test_core_budget_needs_dir);
  tcase_add_test(tc, test_core_delta_chain_same_bits);
  tcase_add_test(tc, test_tier_in_use_refused);
  tcase_add_test(tc, test_stripes_sync_same_bits);
  tcase_add_test(tc, test_stripes_async_no_lost_update);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  int failed;
  srunner_run_all(r, CK_NORMAL);
  failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
