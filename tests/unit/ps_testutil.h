/* ps_testutil.h - helpers for the pserver core's unit tests, which build a
 * core without a network: its options (one server, dense SGD in blocks of
 * 4 floats, the sparse rows' optimizer, sync or async), the core itself,
 * a trainer registered with its sparse tables, PushSparse / PullSparse of
 * rows of one width, a restart from a directory's checkpoint chain, and
 * a sparse table with a disk tier in a temporary directory (pt_tiered).
 * Failures are Check assertions in the caller's test; the calls that a
 * test expects to fail return their fl_status. */
#ifndef PS_TESTUTIL_H
#define PS_TESTUTIL_H

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ps.h"
#include "tier_rocks.h"

/* Fill o (caller's): the job's defaults, server 0 of 1 with nt trainers,
 * dense SGD in blocks of 4 floats, sparse rows by `sparse` at lr, at most
 * max_rows rows per table, async when a_sync. */
static inline void pt_opts(fl_ps_core_opts *o, int nt, int a_sync, fl_optim_kind sparse,
                           float lr, int64_t max_rows) {
  memset(o, 0, sizeof *o);
  fl_job_defaults(&o->job);
  o->job.pserver.optimizer.hp.kind = FL_OPTIM_SGD;
  o->job.pserver.dense_block_size = 4;
  o->job.pserver.sparse.optimizer.hp.kind = sparse;
  o->job.pserver.sparse.optimizer.lr = lr;
  o->job.pserver.sparse.max_rows = max_rows;
  o->job.strategy.a_sync = a_sync;
  o->n_servers = 1;
  o->num_trainers = nt;
}

/* A core of o; the caller frees it (fl_ps_core_free). */
static inline fl_ps_core *pt_core(const fl_ps_core_opts *o) {
  fl_ps_core *c = NULL;
  ck_assert_int_eq(fl_ps_core_create(o, &c), FL_OK);
  return c;
}

/* A trainer's registration: trainer of n_trainers (incarnation 1000 +
 * trainer), mode a FLOTILLA__SYNC_MODE__*, as server server_index of
 * n_servers (0 of 1 when n_servers is 0) sees it, with the sparse tables
 * tables[0..n_tables) ("emb" when n_tables is 0), each dim wide. */
typedef struct pt_reg {
  int trainer, n_trainers, mode;
  int server_index, n_servers;
  uint32_t dim;
  const char *const *tables;
  size_t n_tables;
} pt_reg;

#define PT_MAX_TABLES 8

static inline void pt_register(fl_ps_core *c, const pt_reg *g) {
  Flotilla__RegisterRequest r = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__RegisterResponse out = FLOTILLA__REGISTER_RESPONSE__INIT;
  Flotilla__SparseTableSpec s[PT_MAX_TABLES], *sp[PT_MAX_TABLES];
  static const char *const emb[] = {"emb"};
  const char *const *names = g->n_tables ? g->tables : emb;
  const size_t n = g->n_tables ? g->n_tables : 1;
  ck_assert_uint_le(n, PT_MAX_TABLES);
  for (size_t i = 0; i < n; i++) {
    flotilla__sparse_table_spec__init(&s[i]);
    s[i].name = (char *)names[i];
    s[i].dim = g->dim;
    sp[i] = &s[i];
  }
  r.trainer_id = g->trainer;
  r.num_trainers = g->n_trainers;
  r.incarnation = 1000 + (uint64_t)g->trainer;
  r.mode = g->mode;
  r.dense_block_size = 4;
  r.num_servers = g->n_servers ? g->n_servers : 1;
  r.server_index = g->server_index;
  r.n_sparse = n;
  r.sparse = sp;
  ck_assert_int_eq(fl_ps_core_register(c, &r, &out), FL_OK);
}

/* One sparse call of trainer on table (rows dim wide): a push of step
 * (part seq of parts, as sent), or a pull waiting for min_step, read_only
 * or not. */
typedef struct pt_call {
  int trainer;
  const char *table;
  uint32_t dim;
  int64_t step, min_step;
  uint32_t seq, parts;
  int read_only;
} pt_call;

/* PushSparse of the n gradient rows g (n * dim floats) of keys. */
static inline fl_status pt_push_sparse(fl_ps_core *c, const pt_call *k, const uint64_t *keys,
                                       size_t n, const float *g) {
  Flotilla__PushSparseRequest p = FLOTILLA__PUSH_SPARSE_REQUEST__INIT;
  Flotilla__PushSparseResponse pr = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor gt = FLOTILLA__TENSOR__INIT;
  int64_t shape[2] = {(int64_t)n, (int64_t)k->dim};
  gt.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  gt.n_shape = 2;
  gt.shape = shape;
  gt.data.data = (uint8_t *)g;
  gt.data.len = n * k->dim * sizeof(float);
  p.trainer_id = k->trainer;
  p.step = k->step;
  p.table = (char *)k->table;
  p.n_keys = n;
  p.keys = (uint64_t *)keys;
  p.grads = &gt;
  p.seq = k->seq;
  p.parts = k->parts;
  return fl_ps_core_push_sparse(c, &p, &pr);
}

/* PullSparse of the rows of n keys into out (n * dim floats, caller's). */
static inline fl_status pt_pull_sparse(fl_ps_core *c, const pt_call *k, const uint64_t *keys,
                                       size_t n, float *out) {
  Flotilla__PullSparseRequest q = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
  Flotilla__PullSparseResponse r = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
  Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
  int64_t shape[2];
  float *scratch = NULL;
  size_t cap = 0;
  fl_status st;
  q.trainer_id = k->trainer;
  q.table = (char *)k->table;
  q.n_keys = n;
  q.keys = (uint64_t *)keys;
  q.min_step = k->min_step;
  q.read_only = k->read_only;
  st = fl_ps_core_pull_sparse(c, &q, &scratch, &cap, &r, &v, shape);
  if (st == FL_OK && n) memcpy(out, scratch, n * k->dim * sizeof(float));
  free(scratch);
  return st;
}

/* d restarted from dir's newest checkpoint and the deltas after it
 * (fl_ps_core_load_chain), its stderr meanwhile in the file log_path
 * (truncated first); returns the deltas replayed. */
static inline int64_t pt_load_chain(fl_ps_core *d, const char *dir, const char *log_path) {
  fl_ckpt *ck = NULL;
  int64_t step, deltas = -1;
  char path[512];
  int saved = dup(2), fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &ck, &step), FL_OK);
  fl_ckpt_dir_path(dir, step, path, sizeof path);
  dup2(fd, 2);
  ck_assert_int_eq(fl_ps_core_load_chain(d, ck, path, dir, &deltas), FL_OK);
  dup2(saved, 2);
  close(fd);
  close(saved);
  fl_ckpt_free(ck);
  return deltas;
}

static inline int pt_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb;
  (void)flag;
  (void)f;
  return remove(p);
}

/* Remove dir and everything under it (a test's temporary directory). */
static inline void pt_rm_tree(const char *dir) { nftw(dir, pt_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A sparse table with a disk tier: its store in a new temporary directory
 * named from prefix, its memory tier's bytes in hot, at most budget of
 * them. */
typedef struct pt_tiered {
  char dir[64];
  uint64_t budget;
  fl_ps_tier *tier;
  _Atomic uint64_t hot;
  fl_ps_table *t;
} pt_tiered;

/* Open x (caller's storage): the directory, the store, and x->t, a table
 * of options o whose memory tier holds budget bytes; pt_tiered_free frees
 * them all. */
static inline void pt_tiered_open(pt_tiered *x, const char *prefix, fl_ps_table_opts o,
                                  uint64_t budget) {
  char path[96];
  snprintf(x->dir, sizeof x->dir, "/tmp/%s_XXXXXX", prefix);
  ck_assert_ptr_nonnull(mkdtemp(x->dir));
  snprintf(path, sizeof path, "%s/store", x->dir);
  ck_assert_int_eq(fl_ps_tier_open(path, 1 << 20, &x->tier), FL_OK);
  x->hot = 0;
  o.tier = x->tier;
  o.hot_bytes = &x->hot;
  o.hot_budget = x->budget = budget;
  ck_assert_int_eq(fl_ps_table_create(&o, &x->t), FL_OK);
}

/* Free x's table (its memory bytes back to 0), close its store, remove
 * its directory. */
static inline void pt_tiered_free(pt_tiered *x) {
  fl_ps_table_free(x->t);
  ck_assert_uint_eq(x->hot, 0);
  fl_ps_tier_close(x->tier);
  pt_rm_tree(x->dir);
}

#endif
