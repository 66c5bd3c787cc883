/* fuzz_ps.h - what the pserver core's harnesses (fuzz_ps_core.c and
 * fuzz_ps_ckpt.c) share: a core, server 0 of 2, with small limits, and
 * the registration of its two trainers with a model of two dense
 * parameters (10 and 3 floats) and the sparse table "emb" of dim 3.
 * Header-only; include it after fuzz.h. */
#ifndef FL_FUZZ_PS_H
#define FL_FUZZ_PS_H

#include <string.h>

#include "fl_ps.h"

/* A core (the caller frees it) of server 0 of 2 for 2 trainers in mode,
 * dense blocks of block floats, 8 rows a table, 64 keys a call. */
static inline fl_ps_core *fuzz_ps_core_new(fl_ps_mode mode, size_t block) {
  fl_ps_core_opts o;
  fl_ps_core *c = NULL;
  memset(&o, 0, sizeof o);
  fl_job_defaults(&o.job);
  o.job.pserver.dense_block_size = block;
  o.job.pserver.sparse.max_rows = 8;
  o.job.strategy.a_sync = mode != FL_PS_SYNC;
  o.job.strategy.a_sync_configs.k_steps = mode == FL_PS_GEO ? 4 : 0;
  o.n_servers = 2;
  o.num_trainers = 2;
  o.max_sparse_keys = 64;
  FUZZ_CHECK(fl_ps_core_create(&o, &c) == FL_OK, "core_create");
  return c;
}

/* Trainer t of 2 (process 100 + t) registers the model in mode with dense
 * blocks of block floats, announcing total_steps; the core's answer. */
static inline fl_status fuzz_ps_register(fl_ps_core *c, int t, fl_ps_mode mode, size_t block,
                                         int64_t total_steps) {
  Flotilla__DenseParamSpec w = FLOTILLA__DENSE_PARAM_SPEC__INIT;
  Flotilla__DenseParamSpec b = FLOTILLA__DENSE_PARAM_SPEC__INIT;
  Flotilla__DenseParamSpec *dense[2] = {&w, &b};
  Flotilla__SparseTableSpec emb = FLOTILLA__SPARSE_TABLE_SPEC__INIT, *sparse[1] = {&emb};
  Flotilla__RegisterRequest q = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__RegisterResponse r = FLOTILLA__REGISTER_RESPONSE__INIT;
  w.name = "fc.weight";
  w.numel = 10;
  b.name = "fc.bias";
  b.numel = 3;
  emb.name = "emb";
  emb.dim = 3;
  q.trainer_id = t;
  q.num_trainers = 2;
  q.incarnation = 100 + (uint64_t)t;
  q.mode = (Flotilla__SyncMode)mode;
  q.dense_block_size = block;
  q.num_servers = 2;
  q.n_dense = 2;
  q.dense = dense;
  q.n_sparse = 1;
  q.sparse = sparse;
  q.total_steps = total_steps;
  return fl_ps_core_register(c, &q, &r);
}

#endif
