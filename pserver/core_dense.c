/* core_dense.c - the dense blocks' RPCs: push (checked whole before any
 * block changes, then applied block by block under each block's lock by
 * the mode's rule, core_modes.c), pull (whether it may be answered, and
 * the answer packed under the blocks' locks), and the checks and
 * conversions of the tensors a request carries.  Locking:
 * core_internal.h. */
#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

/* ---------------------------------------------------------------- tensors */

static size_t dtype_size(int dt) {
  return dt == FLOTILLA__DTYPE__DTYPE_FP32 ? 4
         : dt == FLOTILLA__DTYPE__DTYPE_FP16 || dt == FLOTILLA__DTYPE__DTYPE_BF16 ? 2 : 0;
}

/* 1 when every element of the raw tensor bytes is finite. */
static int all_finite(int dt, const uint8_t *p, size_t n) {
  if (dt == FLOTILLA__DTYPE__DTYPE_FP32) {
    uint32_t bad_bits = 0;
    if (((uintptr_t)p & 3u) == 0) { /* the usual case: one vectorized pass */
      const uint32_t *w = (const uint32_t *)(const void *)p;
      for (size_t i = 0; i < n; i++) bad_bits |= (uint32_t)((w[i] & 0x7f800000u) == 0x7f800000u);
      return !bad_bits;
    }
    for (size_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      bad_bits |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad_bits;
  } else {
    uint16_t mask = dt == FLOTILLA__DTYPE__DTYPE_FP16 ? 0x7c00u : 0x7f80u;
    uint32_t bad_bits = 0;
    for (size_t i = 0; i < n; i++) {
      uint16_t u;
      memcpy(&u, p + 2 * i, 2);
      bad_bits |= (uint32_t)((u & mask) == mask);
    }
    return !bad_bits;
  }
}

/* Check one tensor: dtype known, shape exactly dims, bytes matching, all
 * finite.  Returns a message or NULL. */
const char *psc_check_tensor(const Flotilla__Tensor *x, int nd, const int64_t *dims) {
  size_t es, n = 1;
  if (!x) return "tensor missing";
  es = dtype_size(x->dtype);
  if (!es) return "unknown dtype";
  if ((int)x->n_shape != nd) return "wrong number of dimensions";
  for (int i = 0; i < nd; i++) {
    if (x->shape[i] != dims[i]) return "wrong shape";
    n *= (size_t)dims[i];
  }
  if (x->data.len != n * es) return "data length does not match dtype and shape";
  if (n && !x->data.data) return "data missing";
  if (!all_finite(x->dtype, x->data.data, n)) return "non-finite value";
  return NULL;
}

/* The tensor's values as floats: its own bytes when fp32 and aligned, else
 * converted (or copied) into dst, which holds n floats and does not overlap
 * the tensor. */
const float *psc_as_f32(const Flotilla__Tensor *x, size_t n, float *dst) {
  uint16_t tmp[1024];
  if (x->dtype == FLOTILLA__DTYPE__DTYPE_FP32) {
    if (((uintptr_t)x->data.data & 3u) == 0) return (const float *)(const void *)x->data.data;
    memcpy(dst, x->data.data, n * sizeof(float));
    return dst;
  }
  for (size_t off = 0; off < n; off += 1024) {
    size_t k = n - off < 1024 ? n - off : 1024;
    memcpy(tmp, x->data.data + 2 * off, 2 * k); /* any alignment */
    if (x->dtype == FLOTILLA__DTYPE__DTYPE_FP16) fl_cast_f16_to_f32(tmp, dst + off, k);
    else fl_cast_bf16_to_f32(tmp, dst + off, k);
  }
  return dst;
}

/* The highest step a gradient or delta push to b may carry (the step
 * window, see fl_ps.h); *at gets the step b is at (sync: the step it waits
 * for; async/geo: one past the highest step pushed).  The mode's hook may
 * take b->mu (sync does).  The limit never shrinks, so a push checked
 * against it stays acceptable. */
static int64_t push_limit(fl_ps_core *c, ps_block *b, int64_t *at) {
  int64_t lim, h = atomic_load(&c->horizon) + 1; /* the step after the last one declared */
  lim = c->ops->push_limit(c, b, at);
  return lim > h ? lim : h;
}

/* ------------------------------------------------------------------ push */

/* The request's head: the trainer live, a layout, a kind this mode takes,
 * a step, a block count.  No lock held (psc_enter takes c->mu). */
static fl_status push_check_head(fl_ps_core *c, const Flotilla__PushDenseRequest *req) {
  int t = req->trainer_id, kind = req->kind;
  fl_ps_layout *l = atomic_load(&c->layout);
  fl_status st;

  if ((st = psc_enter(c, t)) != FL_OK) return st;
  if (!l) return psc_bad(c, "push from trainer %d before any dense layout", t);
  if (kind != FLOTILLA__PUSH_KIND__PUSH_GRAD && kind != FLOTILLA__PUSH_KIND__PUSH_DELTA &&
      kind != FLOTILLA__PUSH_KIND__PUSH_INIT)
    return psc_bad(c, "push from trainer %d: unknown kind %d", t, kind);
  if (kind != FLOTILLA__PUSH_KIND__PUSH_INIT && kind != c->ops->push_kind)
    return psc_bad(c, "push from trainer %d: %s push in %s mode", t,
                   kind == FLOTILLA__PUSH_KIND__PUSH_GRAD ? "gradient" : "delta",
                   fl_ps_mode_name(c->ops->mode));
  if (req->step < 0) return psc_bad(c, "push from trainer %d: negative step", t);
  if (req->n_blocks == 0 || req->n_blocks > c->n_my)
    return psc_bad(c, "push from trainer %d: %zu blocks (this server holds %zu)", t, req->n_blocks,
                   c->n_my);
  return FL_OK;
}

/* Every block of req: on this server, its tensor well formed, not twice,
 * its step within the window; *scratch_n gets the most floats one block
 * needs converted.  Nothing changes; takes each block's lock in turn (the
 * step window). */
static fl_status push_check_blocks(fl_ps_core *c, const Flotilla__PushDenseRequest *req,
                                   size_t *scratch_n) {
  int t = req->trainer_id, kind = req->kind;

  for (size_t i = 0; i < req->n_blocks; i++) {
    const Flotilla__DenseBlock *db = req->blocks[i];
    ps_block *b = db ? psc_block_of(c, db->block) : NULL;
    const char *why;
    int64_t dim;
    if (!b) return psc_bad(c, "push from trainer %d: block %u is not on this server", t,
                           db ? db->block : 0);
    dim = (int64_t)b->n;
    if ((why = psc_check_tensor(db->value, 1, &dim)) != NULL)
      return psc_bad(c, "push from trainer %d, block %u (%s, %" PRIu64 " floats): %s", t, db->block,
                     b->name, b->n, why);
    for (size_t j = 0; j < i; j++)
      if (req->blocks[j]->block == db->block)
        return psc_bad(c, "push from trainer %d: block %u twice", t, db->block);
    if (kind != FLOTILLA__PUSH_KIND__PUSH_INIT) {
      /* Below FL_PS_MAX_STEP too: the block's step and the horizon are. */
      int64_t at, limit = push_limit(c, b, &at);
      if (req->step > limit)
        return psc_bad(c, "push from trainer %d: step %" PRId64 " is ahead of the step window of "
                       "block %u (%s), which is at step %" PRId64 " and takes steps up to %" PRId64
                       " (register declaring the step to go further)",
                       t, req->step, db->block, b->name, at, limit);
    }
    if (db->value->dtype != FLOTILLA__DTYPE__DTYPE_FP32 && b->n > *scratch_n) *scratch_n = b->n;
    else if (((uintptr_t)db->value->data.data & 3u) && b->n > *scratch_n) *scratch_n = b->n;
  }
  return FL_OK;
}

/* An init push: b's value (and its optimizer state) set once; 1 when it
 * had one already (a duplicate).  b->mu held. */
static int push_init(fl_ps_core *c, ps_block *b, const Flotilla__DenseBlock *db) {
  int dup = 0;
  if (b->initialized) {
    dup = 1;
  } else {
    const float *v = psc_as_f32(db->value, b->n, b->value);
    if (v != b->value) memcpy(b->value, v, b->n * sizeof(float));
    if (b->s1 || b->s2) {
      fl_optim_tensor x = {b->name, b->value, NULL, b->s1, b->s2, b->n};
      fl_optim_init_state(&c->dense_hp, &x, 1);
    }
    b->initialized = 1;
  }
  return dup;
}

fl_status fl_ps_core_push_dense(fl_ps_core *c, const Flotilla__PushDenseRequest *req,
                                Flotilla__PushDenseResponse *resp) {
  int t = req->trainer_id, kind = req->kind, progress = 0, at_gate = 0;
  float *scratch = NULL;
  size_t scratch_n = 0;
  fl_status st;

  if ((st = push_check_head(c, req)) != FL_OK) return st;
  /* Everything is checked before anything changes. */
  if ((st = push_check_blocks(c, req, &scratch_n)) != FL_OK) return st;
  if (scratch_n && c->ops->uses_scratch) {
    scratch = malloc(scratch_n * sizeof(float));
    if (!scratch) return FL_ERR(FL_ENOMEM, "pserver: out of memory converting a push");
  }
  atomic_fetch_add(&c->pushes, 1);
  for (size_t i = 0; i < req->n_blocks; i++) {
    const Flotilla__DenseBlock *db = req->blocks[i];
    ps_block *b = psc_block_of(c, db->block);
    int dup = 0;

    pthread_mutex_lock(&b->mu);
    if (kind == FLOTILLA__PUSH_KIND__PUSH_INIT)
      dup = push_init(c, b, db);
    else if (!b->initialized)
      st = FL_ESTATE; /* pushed before anyone set its value: register again */
    else
      st = c->ops->apply(c, b, t, req->step, db->value, scratch, &dup, &progress, &at_gate);
    pthread_mutex_unlock(&b->mu);
    if (st != FL_OK) break;
    if (dup) {
      resp->duplicates++;
      atomic_fetch_add(&c->duplicates, 1);
    } else {
      resp->accepted++;
    }
  }
  free(scratch);
  if (at_gate) psc_gate_reached(c);
  if (kind != FLOTILLA__PUSH_KIND__PUSH_INIT) c->ops->pushed(c, req->step);
  if (progress) psc_notify(c);
  return st;
}

/* ------------------------------------------------------------------ pull */

fl_status fl_ps_core_pull_check(fl_ps_core *c, int32_t t, int64_t min_step, const uint32_t *ids,
                                size_t n) {
  fl_status st = FL_OK;
  int ready = 1;
  if (t != FL_PS_OBSERVER && (st = psc_enter(c, t)) != FL_OK) return st;
  if (!atomic_load(&c->layout))
    return psc_bad(c, "pull from trainer %d before any dense layout", t);
  if (n == 0 || n > c->n_my)
    return psc_bad(c, "pull from trainer %d: %zu blocks (this server holds %zu)", t, n, c->n_my);
  for (size_t i = 0; i < n; i++) {
    if (!psc_block_of(c, ids[i]))
      return psc_bad(c, "pull from trainer %d: block %u is not on this server", t, ids[i]);
    for (size_t j = 0; j < i; j++)
      if (ids[j] == ids[i]) return psc_bad(c, "pull from trainer %d: block %u twice", t, ids[i]);
  }
  for (size_t i = 0; i < n; i++) {
    ps_block *b = psc_block_of(c, ids[i]);
    pthread_mutex_lock(&b->mu);
    if (!b->initialized) st = FL_ESTATE;
    else if (!c->ops->pull_ready(c, b, t, min_step)) ready = 0;
    pthread_mutex_unlock(&b->mu);
  }
  if (st != FL_OK) return st;
  return ready ? FL_OK : FL_EAGAIN;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

fl_status fl_ps_core_pull_pack(fl_ps_core *c, int64_t min_step, const uint32_t *ids, size_t n,
                               fl_rpc_outbuf *ob, grpc_byte_buffer **out) {
  Flotilla__PullDenseResponse resp = FLOTILLA__PULL_DENSE_RESPONSE__INIT;
  Flotilla__DenseBlock *dbs = calloc(n, sizeof *dbs);
  Flotilla__DenseBlock **dbp = calloc(n, sizeof *dbp);
  Flotilla__Tensor *ts = calloc(n, sizeof *ts);
  int64_t *shapes = calloc(n, sizeof *shapes);
  uint32_t *order = malloc(n * sizeof *order);
  int64_t step = INT64_MAX;
  fl_status st;

  if (!dbs || !dbp || !ts || !shapes || !order) {
    st = FL_ERR(FL_ENOMEM, "pserver: out of memory answering a pull of %zu blocks", n);
    goto done;
  }
  memcpy(order, ids, n * sizeof *order);
  qsort(order, n, sizeof *order, cmp_u32);
  for (size_t i = 0; i < n; i++) pthread_mutex_lock(&psc_block_of(c, order[i])->mu);
  for (size_t i = 0; i < n; i++) {
    ps_block *b = psc_block_of(c, ids[i]);
    flotilla__dense_block__init(&dbs[i]);
    flotilla__tensor__init(&ts[i]);
    shapes[i] = (int64_t)b->n;
    ts[i].dtype = FLOTILLA__DTYPE__DTYPE_FP32;
    ts[i].n_shape = 1;
    ts[i].shape = &shapes[i];
    ts[i].data.data = (uint8_t *)b->value;
    ts[i].data.len = b->n * sizeof(float);
    dbs[i].block = ids[i];
    dbs[i].value = &ts[i];
    dbp[i] = &dbs[i];
    if (b->step < step) step = b->step;
    if (min_step < 0 && b->step == -min_step && b->prev_step == -min_step - 1) {
      ts[i].data.data = (uint8_t *)b->prev; /* as of the step asked for */
      step = -min_step - 1;
    }
  }
  resp.n_blocks = n;
  resp.blocks = dbp;
  resp.step = step;
  st = fl_rpc_pack(ob, &resp.base, out);
  for (size_t i = n; i-- > 0;) pthread_mutex_unlock(&psc_block_of(c, order[i])->mu);
  if (st == FL_OK) {
    atomic_fetch_add(&c->pulls, 1);
  }
done:
  free(dbs);
  free(dbp);
  free(ts);
  free(shapes);
  free(order);
  return st;
}

