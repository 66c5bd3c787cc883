/* core_ckpt.c - checkpoints of a pserver's state (write, save, load: every
 * record checked before anything changes) and the sync gate that holds
 * every block at one step so that each shard's checkpoint holds the same
 * step.  The format is fl_ckpt's; the records are
 * listed in docs/DESIGN.md.  Locking: core_internal.h. */
#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

/* -------------------------------------------------------------- the gate */

/* Call the gate hook (no core lock held) when every block stands at the
 * gate's step (called when a block came to stand there). */
void psc_gate_reached(fl_ps_core *c) {
  if (fl_ps_core_at_gate(c) <= 0) return;
  pthread_mutex_lock(&c->cb_mu);
  if (c->on_gate) c->on_gate(c->gate_ctx);
  pthread_mutex_unlock(&c->cb_mu);
}

int fl_ps_core_settled(fl_ps_core *c) { return c->ops->settled(c); }

void fl_ps_core_set_gate_hook(fl_ps_core *c, void (*fn)(void *), void *ctx) {
  pthread_mutex_lock(&c->cb_mu);
  c->on_gate = fn;
  c->gate_ctx = ctx;
  pthread_mutex_unlock(&c->cb_mu);
}

void fl_ps_core_set_gate(fl_ps_core *c, int64_t step) {
  if (!c->ops->gated) return;
  atomic_store(&c->gate, step < 0 ? -1 : step);
  psc_reevaluate(c); /* the steps held at the old gate go on */
}

int64_t fl_ps_core_gate(fl_ps_core *c) { return atomic_load(&c->gate); }

int fl_ps_core_at_gate(fl_ps_core *c) {
  int64_t g = atomic_load(&c->gate);
  int at = c->n_my > 0;
  if (!c->ops->gated || g < 0) return 0;
  for (size_t i = 0; i < c->n_my; i++) {
    pthread_mutex_lock(&c->blocks[i].mu);
    int64_t s = c->blocks[i].step;
    pthread_mutex_unlock(&c->blocks[i].mu);
    if (s > g) return -1;
    if (s != g) at = 0;
  }
  return at;
}

/* ------------------------------------------------------------ checkpoints */

/* The records naming the checkpoint: the run, and for a base or delta of a
 * directory its base's nonce (and a delta's base step and number). */
static fl_status write_ids(fl_ps_core *c, fl_ckpt_writer *w, const psc_ckpt_kind *k) {
  fl_status st;
  if (c->o.run_id[0]) {
    if ((st = fl_ckpt_put(w, "meta/job_hash", FL_CKPT_U64, 0, NULL, &c->o.job_hash)) != FL_OK ||
        (st = fl_ckpt_put_blob(w, "meta/run_id", c->o.run_id, strlen(c->o.run_id))) != FL_OK)
      return st;
  }
  if (k->nonce) FL_TRY(fl_ckpt_put(w, "ps/ckpt_nonce", FL_CKPT_U64, 0, NULL, &k->nonce));
  if (k->delta) {
    FL_TRY(fl_ckpt_put_i64(w, "ps/delta_base", k->base));
    FL_TRY(fl_ckpt_put_i64(w, "ps/delta_seq", k->seq));
  }
  return FL_OK;
}

/* Write the state into w (the caller commits or aborts it); *step gets the
 * step the checkpoint holds, the one fl_ps_core_load will report: sync -
 * the lowest step among the blocks as they were copied (training goes on
 * while they are copied one at a time, so this can be past the server's
 * step when the save began); async/geo - next_step as recorded. */
fl_status psc_write_state(fl_ps_core *c, fl_ckpt_writer *w, const psc_ckpt_kind *k,
                          int64_t *step) {
  fl_ps_layout *l = atomic_load(&c->layout);
  char name[FL_CKPT_NAME_MAX];
  fl_status st;
  int64_t next = atomic_load(&c->next_step), low = INT64_MAX;

#define I64(key, v)                                                          \
  if ((st = fl_ckpt_put_i64(w, key, v)) != FL_OK) return st
  FL_TRY(write_ids(c, w, k));
  I64("ps/mode", (int64_t)c->ops->mode);
  I64("ps/server_index", c->o.server_index);
  I64("ps/n_servers", c->o.n_servers);
  I64("ps/num_trainers", c->nt);
  I64("ps/block_size", (int64_t)c->o.job.pserver.dense_block_size);
  I64("ps/next_step", next);
  if (l) {
    int64_t shp = (int64_t)l->n_params;
    size_t blen = 0, off = 0;
    char *blob;
    for (size_t p = 0; p < l->n_params; p++) blen += strlen(c->names[p]) + 1;
    blob = malloc(blen);
    if (!blob) return FL_ERR(FL_ENOMEM, "checkpoint: out of memory");
    for (size_t p = 0; p < l->n_params; p++) {
      size_t n = strlen(c->names[p]) + 1;
      memcpy(blob + off, c->names[p], n);
      off += n;
    }
    st = fl_ckpt_put(w, "dense/numel", FL_CKPT_U64, 1, &shp, l->numel);
    if (st == FL_OK) st = fl_ckpt_put_blob(w, "dense/names", blob, blen);
    free(blob);
    if (st != FL_OK) return st;
  }
  for (size_t i = 0; i < c->n_my; i++) {
    ps_block *b = &c->blocks[i];
    int64_t shp = (int64_t)b->n, four = 4, ntr = c->nt;
    int64_t meta[4];
    pthread_mutex_lock(&b->mu);
    meta[0] = b->step;
    meta[1] = b->updates;
    meta[2] = b->initialized;
    meta[3] = 0;
    if (b->step < low) low = b->step;
#define PUT(suffix, dt, s, data)                                             \
  if (st == FL_OK) {                                                         \
    snprintf(name, sizeof name, "dense/%u/%s", b->id, suffix);               \
    st = fl_ckpt_put(w, name, dt, 1, s, data);                               \
  }
    st = FL_OK;
    PUT("meta", FL_CKPT_I64, &four, meta);
    PUT("last", FL_CKPT_I64, &ntr, b->last);
    PUT("value", FL_CKPT_F32, &shp, b->value);
    if (b->s1) PUT("state1", FL_CKPT_F32, &shp, b->s1);
    if (b->s2) PUT("state2", FL_CKPT_F32, &shp, b->s2);
#undef PUT
    pthread_mutex_unlock(&b->mu);
    if (st != FL_OK) return st;
  }
  if ((st = psc_save_tables(c, w, k)) != FL_OK) return st;
  *step = c->ops->ckpt_step(c, next, low);
  I64("ps/step", *step);
#undef I64
  return FL_OK;
}

fl_status fl_ps_core_save(fl_ps_core *c, const char *path) {
  fl_ckpt_writer *w = NULL;
  psc_ckpt_kind plain;
  int64_t step;
  fl_status st;

  memset(&plain, 0, sizeof plain);
  FL_TRY(fl_ckpt_writer_open(path, &w));
  if ((st = psc_write_state(c, w, &plain, &step)) != FL_OK) {
    fl_ckpt_writer_abort(w);
    return st;
  }
  if ((st = psc_tier_place(c, path)) != FL_OK) {
    fl_ckpt_writer_abort(w);
    return st;
  }
  st = fl_ckpt_writer_commit(w);
  psc_tier_prune(c);
  if (st == FL_OK) atomic_fetch_add(&c->checkpoints, 1);
  return st;
}

static fl_status get_i64(const fl_ckpt *ck, const char *file, const char *key, int64_t *v) {
  if (fl_ckpt_get_i64(ck, key, v) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint %s: record %s missing", file, key);
  return FL_OK;
}

/* Find a 1-d record of dtype and n elements. */
static fl_status rec1(const fl_ckpt *ck, const char *file, const char *key, fl_ckpt_dtype dt,
                      int64_t n, fl_ckpt_record *r) {
  if (fl_ckpt_find(ck, key, r) != FL_OK || r->dtype != dt || r->ndim != 1 || r->shape[0] != n)
    return FL_ERR(FL_ECORRUPT, "checkpoint %s: record %s missing or of the wrong shape", file, key);
  return FL_OK;
}

int fl_ps_ckpt_table_of(const char *record, char *out, size_t cap) {
  const char *slash;
  size_t len;
  if (strncmp(record, "sparse/", 7) != 0) return 0;
  slash = strrchr(record, '/');
  if (!slash || strcmp(slash, "/dim") != 0) return 0;
  len = (size_t)(slash - (record + 7));
  if (len == 0 || len >= cap || memchr(record + 7, '/', len)) return -1;
  memcpy(out, record + 7, len);
  out[len] = '\0';
  return 1;
}

/* What fl_ps_core_load reads from a checkpoint before it takes it over. */
typedef struct load_ctx {
  const fl_ckpt *ck;
  const char *file;
  int64_t next;      /* ps/next_step */
  uint64_t *numel;   /* the dense layout it holds: np parameters */
  char **names;
  size_t np, new_tables;
  fl_ps_layout *l;   /* this server's layout, if any */
  fl_ps_layout *tl;  /* else the checkpoint's, built to check its blocks */
  int delta;         /* a delta checkpoint: its tables apply onto the rows held */
} load_ctx;

/* The checkpoint is of this job: mode, server, cluster, block size. */
static fl_status load_head(fl_ps_core *c, load_ctx *x) {
  int64_t mode, idx, ns, ntr, bs;

  FL_TRY(get_i64(x->ck, x->file, "ps/mode", &mode));
  FL_TRY(get_i64(x->ck, x->file, "ps/server_index", &idx));
  FL_TRY(get_i64(x->ck, x->file, "ps/n_servers", &ns));
  FL_TRY(get_i64(x->ck, x->file, "ps/num_trainers", &ntr));
  FL_TRY(get_i64(x->ck, x->file, "ps/block_size", &bs));
  FL_TRY(get_i64(x->ck, x->file, "ps/next_step", &x->next));
  x->delta = fl_ckpt_get_i64(x->ck, "ps/delta_seq", &bs) == FL_OK;
  FL_TRY(get_i64(x->ck, x->file, "ps/block_size", &bs));
  if (mode != (int64_t)c->ops->mode || idx != c->o.server_index || ns != c->o.n_servers ||
      ntr != c->nt || bs != (int64_t)c->o.job.pserver.dense_block_size || x->next < 0)
    return FL_ERR(FL_EINVAL,
                  "checkpoint %s belongs to another job (mode %lld, server %lld of %lld, %lld "
                  "trainers, block size %lld)",
                  x->file, (long long)mode, (long long)idx, (long long)ns, (long long)ntr,
                  (long long)bs);
  return FL_OK;
}

/* The dense layout records, into x->numel and x->names. */
static fl_status load_names(fl_ps_core *c, load_ctx *x) {
  fl_ckpt_record rn, rnames;
  fl_status st;

  (void)c; /* the same signature as the other steps */
  if (fl_ckpt_find(x->ck, "dense/numel", &rn) == FL_OK) {
    const char *p;
    if (rn.dtype != FL_CKPT_U64 || rn.ndim != 1 || rn.shape[0] < 1 ||
        rn.shape[0] > FL_PS_MAX_BLOCKS || fl_ckpt_find(x->ck, "dense/names", &rnames) != FL_OK ||
        rnames.dtype != FL_CKPT_U8)
      return FL_ERR(FL_ECORRUPT, "checkpoint %s: dense layout records malformed", x->file);
    x->np = (size_t)rn.shape[0];
    x->numel = malloc(x->np * sizeof *x->numel);
    x->names = calloc(x->np, sizeof *x->names);
    if (!x->numel || !x->names) {
      st = FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", x->file);
      return st;
    }
    memcpy(x->numel, rn.data, x->np * sizeof *x->numel);
    p = rnames.data;
    for (size_t i = 0; i < x->np; i++) {
      size_t left = rnames.nbytes - (size_t)(p - (const char *)rnames.data);
      size_t k = strnlen(p, left);
      if (k == left || k == 0 || k >= PARAM_NAME_MAX || x->numel[i] == 0 ||
          x->numel[i] > MAX_NUMEL) {
        st = FL_ERR(FL_ECORRUPT, "checkpoint %s: dense layout records malformed", x->file);
        return st;
      }
      if (!(x->names[i] = strdup(p))) {
        st = FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", x->file);
        return st;
      }
      p += k + 1;
    }
  }
  return FL_OK;
}

/* The layout held matches this server's, or there is none yet (then the
 * checkpoint's is built, x->tl).  Takes c->mu. */
static fl_status load_check_layout(fl_ps_core *c, load_ctx *x) {
  fl_status st;

  pthread_mutex_lock(&c->mu);
  x->l = atomic_load(&c->layout);
  pthread_mutex_unlock(&c->mu);
  if (x->np && x->l) {
    int same = x->l->n_params == x->np;
    for (size_t i = 0; same && i < x->np; i++)
      same = x->l->numel[i] == x->numel[i] && !strcmp(c->names[i], x->names[i]);
    if (!same) {
      st = FL_ERR(FL_EINVAL, "checkpoint %s: dense layout differs from this job's", x->file);
      return st;
    }
  } else if (x->np) {
    if ((st = fl_ps_layout_build(x->numel, x->np, c->o.job.pserver.dense_block_size,
                                 c->o.n_servers, &x->tl)) != FL_OK)
      return st;
  }
  if (!x->np && x->l) {
    st = FL_ERR(FL_EINVAL,
                "checkpoint %s: holds no dense parameters, but this server already has them",
                x->file);
    return st;
  }
  return FL_OK;
}

/* Every block of this server is there, of the right shapes. */
static fl_status load_check_blocks(fl_ps_core *c, load_ctx *x) {
  int nstate_dense = fl_optim_state_count(c->dense_hp.kind);
  const fl_ps_layout *use;
  char name[FL_CKPT_NAME_MAX];
  fl_ckpt_record r;
  fl_status st;

  use = x->np ? (x->l ? x->l : x->tl) : NULL;
  for (size_t b = 0; use && b < use->n_blocks; b++) {
    int64_t n = (int64_t)use->blocks[b].n;
    if (use->blocks[b].server != c->o.server_index) continue;
#define CHECK(suffix, dt, cnt)                                               \
  snprintf(name, sizeof name, "dense/%zu/%s", b, suffix);                    \
  if ((st = rec1(x->ck, x->file, name, dt, cnt, &r)) != FL_OK) return st
    CHECK("meta", FL_CKPT_I64, 4);
    CHECK("last", FL_CKPT_I64, c->nt);
    CHECK("value", FL_CKPT_F32, n);
    if (nstate_dense >= 1) { CHECK("state1", FL_CKPT_F32, n); }
    if (nstate_dense >= 2) { CHECK("state2", FL_CKPT_F32, n); }
#undef CHECK
  }
  return FL_OK;
}

/* Every sparse table verifies, of the dim held here; x->new_tables counts
 * those to add. */
static fl_status load_check_sparse(fl_ps_core *c, load_ctx *x) {
  char name[FL_CKPT_NAME_MAX];
  fl_status st;

  for (size_t i = 0; i < fl_ckpt_count(x->ck); i++) {
    fl_ckpt_record rd;
    char tname[128];
    ps_table *pt;
    int64_t dim;
    int kind;
    fl_optim_hparams hp;
    float lr;
    if (fl_ckpt_record_at(x->ck, i, &rd) != FL_OK) continue;
    kind = fl_ps_ckpt_table_of(rd.name, tname, sizeof tname);
    if (kind == 0) continue;
    if (kind < 0 || rd.dtype != FL_CKPT_I64 || rd.ndim != 0) {
      st = FL_ERR(FL_ECORRUPT, "checkpoint %s: bad sparse record %s", x->file, rd.name);
      return st;
    }
    dim = *(const int64_t *)rd.data;
    if (dim < 1 || dim > 65536) {
      st = FL_ERR(FL_ECORRUPT, "checkpoint %s: table %s has dim %lld", x->file, tname,
                  (long long)dim);
      return st;
    }
    pt = psc_table_of(c, tname);
    if (pt && (int64_t)fl_ps_table_dim(pt->t) != dim) {
      st = FL_ERR(FL_EINVAL, "checkpoint %s: table %s has another dim here", x->file, tname);
      return st;
    }
    if (!pt) x->new_tables++;
    psc_table_optim(c, tname, &hp, &lr);
    snprintf(name, sizeof name, "sparse/%s/", tname);
    if ((st = fl_ps_table_verify(x->ck, name, (uint32_t)dim, pt ? fl_ps_table_kind(pt->t) : hp.kind,
                                 NULL)) != FL_OK)
      return st;
  }
  if (atomic_load(&c->n_tables) + x->new_tables > MAX_TABLES) {
    st = FL_ERR(FL_EINVAL, "checkpoint %s: more than %d sparse tables", x->file, MAX_TABLES);
    return st;
  }
  return FL_OK;
}

/* The checkpoint's layout becomes this server's when it has none (under
 * c->mu); its names go to the core. */
static fl_status load_take_layout(fl_ps_core *c, load_ctx *x) {
  fl_status st = FL_OK;

  if (x->np && !x->l) {
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->layout)) {
      st = psc_make_layout(c, x->numel, x->names, x->np);
      if (st == FL_OK) x->names = NULL; /* the core owns them now */
      if (st == FL_OK)
        snprintf(c->layout_from, sizeof c->layout_from, "the checkpoint %s", x->file);
    }
    pthread_mutex_unlock(&c->mu);
    if (st != FL_OK) return st;
  }
  return FL_OK;
}

/* The blocks' values, optimizer state and steps (each under its lock). */
static void load_blocks(fl_ps_core *c, load_ctx *x) {
  char name[FL_CKPT_NAME_MAX];
  fl_ckpt_record r;

  for (size_t i = 0; i < c->n_my; i++) {
    ps_block *b = &c->blocks[i];
    const int64_t *meta;
    pthread_mutex_lock(&b->mu);
#define COPY(suffix, dst, bytes)                                             \
  snprintf(name, sizeof name, "dense/%u/%s", b->id, suffix);                 \
  fl_ckpt_find(x->ck, name, &r);                                             \
  memcpy(dst, r.data, bytes)
    COPY("value", b->value, b->n * sizeof(float));
    if (b->s1) { COPY("state1", b->s1, b->n * sizeof(float)); }
    if (b->s2) { COPY("state2", b->s2, b->n * sizeof(float)); }
    COPY("last", b->last, (size_t)c->nt * sizeof(int64_t));
#undef COPY
    snprintf(name, sizeof name, "dense/%u/meta", b->id);
    fl_ckpt_find(x->ck, name, &r);
    meta = r.data;
    b->step = meta[0];
    b->prev_step = -1;
    b->updates = meta[1];
    b->initialized = meta[2] != 0;
    b->n_pend = 0;
    memset(b->have, 0, (size_t)c->nt);
    pthread_mutex_unlock(&b->mu);
  }
  atomic_store(&c->next_step, x->next);
}

/* The sparse tables, added where missing (c->mu), loaded under their
 * locks. */
static fl_status load_sparse(fl_ps_core *c, load_ctx *x) {
  char name[FL_CKPT_NAME_MAX];
  fl_status st = FL_OK;

  for (size_t i = 0; i < fl_ckpt_count(x->ck); i++) {
    fl_ckpt_record rd;
    char tname[128];
    ps_table *pt;
    if (fl_ckpt_record_at(x->ck, i, &rd) != FL_OK ||
        fl_ps_ckpt_table_of(rd.name, tname, sizeof tname) != 1)
      continue;
    pthread_mutex_lock(&c->mu);
    pt = psc_table_of(c, tname);
    if (!pt) st = psc_add_table(c, tname, (uint32_t) * (const int64_t *)rd.data);
    pt = psc_table_of(c, tname);
    pthread_mutex_unlock(&c->mu);
    if (st != FL_OK) return st;
    snprintf(name, sizeof name, "sparse/%s/", tname);
    st = x->delta ? psc_stripes_apply_delta(pt, x->ck, name) : psc_stripes_load(pt, x->ck, name);
    int64_t tstep;
    snprintf(name, sizeof name, "sparse/%s/step", tname);
    if (st == FL_OK && fl_ckpt_get_i64(x->ck, name, &tstep) == FL_OK && tstep >= 0) {
      pthread_mutex_lock(&pt->mu);
      pt->step = tstep; /* older checkpoints have none: the table takes any step */
      pthread_mutex_unlock(&pt->mu);
    }
    if (st != FL_OK) return st;
  }
  return FL_OK;
}

fl_status psc_load_rows(fl_ps_core *c, const fl_ckpt *ck, const char *file) {
  load_ctx x;
  fl_status st;

  memset(&x, 0, sizeof x);
  x.ck = ck;
  x.file = file;
  FL_TRY(load_head(c, &x));
  /* Phase 1: check everything; nothing changes yet. */
  if ((st = load_names(c, &x)) != FL_OK || (st = load_check_layout(c, &x)) != FL_OK ||
      (st = load_check_blocks(c, &x)) != FL_OK || (st = load_check_sparse(c, &x)) != FL_OK ||
      (st = psc_tier_check_load(c, file)) != FL_OK)
    goto out;
  /* Phase 2: take it over. */
  if ((st = load_take_layout(c, &x)) != FL_OK) goto out;
  load_blocks(c, &x);
  c->have_base = 0; /* the next directory checkpoint is a base */
  if ((st = load_sparse(c, &x)) != FL_OK) goto out;
  /* Everyone registers again (their view of this server is gone). */
  pthread_mutex_lock(&c->mu);
  for (int t = 0; t < c->nt; t++)
    if (c->tr[t].state == T_LIVE) c->tr[t].state = T_UNKNOWN;
  c->start = fl_ps_now();
  pthread_mutex_unlock(&c->mu);
  FL_LOGI("loaded checkpoint %s: step %lld", file, (long long)fl_ps_core_step(c));
out:
  fl_ps_layout_free(x.tl);
  free(x.numel);
  psc_free_names(x.names, x.np);
  return st;
}

fl_status fl_ps_core_load(fl_ps_core *c, const fl_ckpt *ck, const char *file) {
  FL_TRY(psc_load_rows(c, ck, file));
  return psc_tier_load(c, file);
}
