/* core_sparse.c - the sparse tables' RPCs: the keys checked (their table,
 * their count, that they belong to this server), pulls (held until the
 * step asked for was applied, by the mode's sparse_ready; read-only pulls
 * change nothing), and pushes with their per-trainer dedup by step and
 * part, then taken by the mode's sparse_push (core_modes.c); initial rows
 * (InitSparse: created when absent, so repeating it changes nothing) and
 * the paged listing of a table for export (DumpSparse, read-only).  The
 * tables themselves are sparse.c, their rows in lock stripes
 * (core_stripes.c): the table's lock is held for the dedup and the
 * readiness check only (core_internal.h). */
#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"

static fl_status check_keys(fl_ps_core *c, int t, const char *what, const char *table,
                            const uint64_t *keys, size_t n, ps_table **pt) {
  *pt = table ? psc_table_of(c, table) : NULL;
  if (!*pt)
    return psc_bad(c, "%s from trainer %d: unknown table '%s'", what, t, table ? table : "");
  if (n > c->o.max_sparse_keys)
    return psc_bad(c, "%s from trainer %d: %zu keys (at most %zu per call)", what, t, n,
                   c->o.max_sparse_keys);
  if (n && !keys) return psc_bad(c, "%s from trainer %d: keys missing", what, t);
  for (size_t i = 0; i < n; i++)
    if (fl_ps_key_server(keys[i], c->o.n_servers) != c->o.server_index)
      return psc_bad(c, "%s from trainer %d: key %" PRIu64 " of table %s belongs to server %d",
                     what, t, keys[i], table, fl_ps_key_server(keys[i], c->o.n_servers));
  return FL_OK;
}

fl_status fl_ps_core_pull_sparse(fl_ps_core *c, const Flotilla__PullSparseRequest *req,
                                 float **scratch, size_t *cap, Flotilla__PullSparseResponse *resp,
                                 Flotilla__Tensor *values, int64_t shape[2]) {
  ps_table *pt;
  size_t need, dim;
  int ready;
  fl_status st;

  if ((st = psc_enter(c, req->trainer_id)) != FL_OK) return st;
  FL_TRY(check_keys(c, req->trainer_id, "sparse pull", req->table, req->keys, req->n_keys, &pt));
  dim = fl_ps_table_dim(pt->t);
  need = req->n_keys * dim;
  if (need > *cap) {
    float *ns = realloc(*scratch, need * sizeof(float));
    if (!ns) return FL_ERR(FL_ENOMEM, "pserver: out of memory for %zu sparse rows", req->n_keys);
    *scratch = ns;
    *cap = need;
  }
  pthread_mutex_lock(&pt->mu);
  ready = c->ops->sparse_ready(pt, req->trainer_id, req->min_step);
  pthread_mutex_unlock(&pt->mu);
  st = ready ? psc_stripes_pull(pt, req->keys, req->n_keys, *scratch, req->read_only) : FL_EAGAIN;
  if (st != FL_OK) return st;
  if (!req->read_only) atomic_fetch_add(&c->pulls, 1);
  shape[0] = (int64_t)req->n_keys;
  shape[1] = (int64_t)dim;
  values->dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  values->n_shape = 2;
  values->shape = shape;
  values->data.data = (uint8_t *)*scratch;
  values->data.len = need * sizeof(float);
  resp->values = values;
  return FL_OK;
}

fl_status fl_ps_core_sparse_ready(fl_ps_core *c, int32_t t, const char *table, int64_t min_step) {
  ps_table *pt;
  int ready;
  fl_status st;
  if ((st = psc_enter(c, t)) != FL_OK) return st;
  FL_TRY(check_keys(c, t, "sparse pull", table, NULL, 0, &pt));
  pthread_mutex_lock(&pt->mu);
  ready = c->ops->sparse_ready(pt, t, min_step);
  pthread_mutex_unlock(&pt->mu);
  return ready ? FL_OK : FL_EAGAIN;
}

fl_status fl_ps_core_push_sparse(fl_ps_core *c, const Flotilla__PushSparseRequest *req,
                                 Flotilla__PushSparseResponse *resp) {
  int t = req->trainer_id;
  ps_table *pt;
  int64_t dims[2];
  const char *why;
  float *conv = NULL;
  const float *g;
  fl_status st;
  int dup, progress = 0;

  if ((st = psc_enter(c, t)) != FL_OK) return st;
  FL_TRY(check_keys(c, t, "sparse push", req->table, req->keys, req->n_keys, &pt));
  dims[0] = (int64_t)req->n_keys;
  dims[1] = (int64_t)fl_ps_table_dim(pt->t);
  if ((why = psc_check_tensor(req->grads, 2, dims)) != NULL)
    return psc_bad(c, "sparse push from trainer %d, table %s, %zu keys: %s", t, req->table,
                   req->n_keys, why);
  if (req->step < 0 || req->step >= FL_PS_MAX_STEP || req->seq >= MAX_SEQ ||
      req->parts > MAX_SEQ || (req->parts && req->seq >= req->parts))
    return psc_bad(c, "sparse push from trainer %d: step %lld / part %u of %u out of range "
                   "(parts at most %d, part below parts)", t, (long long)req->step, req->seq,
                   req->parts, MAX_SEQ);
  if (req->grads->dtype != FLOTILLA__DTYPE__DTYPE_FP32 ||
      ((uintptr_t)req->grads->data.data & 3u)) {
    conv = malloc((req->n_keys * (size_t)dims[1] + 1) * sizeof(float));
    if (!conv) return FL_ERR(FL_ENOMEM, "pserver: out of memory converting a sparse push");
  }
  g = req->n_keys ? psc_as_f32(req->grads, req->n_keys * (size_t)dims[1], conv) : NULL;
  pthread_mutex_lock(&pt->mu);
  dup = req->step < pt->cur_step[t] ||
        (req->step == pt->cur_step[t] && ((pt->seqmask[t] >> req->seq) & 1u));
  if (!dup) {
    if (req->step > pt->cur_step[t]) {
      pt->cur_step[t] = req->step;
      pt->seqmask[t] = 0;
    }
    pt->seqmask[t] |= 1ULL << req->seq;
  }
  pthread_mutex_unlock(&pt->mu);
  if (!dup)
    st = c->ops->sparse_push(c, pt, t, req->step, req->seq, req->parts, req->keys, req->n_keys,
                             g, &dup, &progress);
  free(conv);
  if (progress) psc_reevaluate(c); /* dense blocks may wait for these rows */
  if (st != FL_OK) return st;
  atomic_fetch_add(&c->pushes, 1);
  if (dup) atomic_fetch_add(&c->duplicates, 1);
  resp->accepted = dup ? 0 : (int32_t)req->n_keys;
  return FL_OK;
}


fl_status fl_ps_core_init_sparse(fl_ps_core *c, const Flotilla__InitSparseRequest *req,
                                 Flotilla__InitSparseResponse *resp) {
  int t = req->trainer_id;
  ps_table *pt;
  int64_t dims[2];
  const char *why;
  float *conv = NULL;
  size_t created = 0;
  fl_status st;

  if ((st = psc_enter(c, t)) != FL_OK) return st;
  FL_TRY(check_keys(c, t, "sparse init", req->table, req->keys, req->n_keys, &pt));
  dims[0] = (int64_t)req->n_keys;
  dims[1] = (int64_t)fl_ps_table_dim(pt->t);
  if ((why = psc_check_tensor(req->values, 2, dims)) != NULL)
    return psc_bad(c, "sparse init from trainer %d, table %s, %zu keys of dim %lld: values %s "
                   "(they must be [%zu, %lld], finite)", t, req->table, req->n_keys,
                   (long long)dims[1], why, req->n_keys, (long long)dims[1]);
  if (req->values->dtype != FLOTILLA__DTYPE__DTYPE_FP32 ||
      ((uintptr_t)req->values->data.data & 3u)) {
    conv = malloc((req->n_keys * (size_t)dims[1] + 1) * sizeof(float));
    if (!conv) return FL_ERR(FL_ENOMEM, "pserver: out of memory converting a sparse init");
  }
  if (req->n_keys) {
    const float *v = psc_as_f32(req->values, req->n_keys * (size_t)dims[1], conv);
    st = psc_stripes_init(pt, req->keys, req->n_keys, v, &created);
  }
  free(conv);
  if (st != FL_OK) return st;
  atomic_fetch_add(&c->sparse_init_rows, created);
  resp->created = (int32_t)created;
  return FL_OK;
}

/* Room in buf for page keys and page*dim floats. */
static fl_status dump_room(fl_ps_dump_buf *buf, size_t page, size_t dim) {
  if (page > buf->kcap) {
    uint64_t *nk = realloc(buf->keys, page * sizeof *nk);
    if (!nk) return FL_ERR(FL_ENOMEM, "pserver: out of memory for a page of %zu sparse rows", page);
    buf->keys = nk;
    buf->kcap = page;
  }
  if (page * dim > buf->vcap) {
    float *nv = realloc(buf->vals, page * dim * sizeof *nv);
    if (!nv) return FL_ERR(FL_ENOMEM, "pserver: out of memory for a page of %zu sparse rows", page);
    buf->vals = nv;
    buf->vcap = page * dim;
  }
  return FL_OK;
}

fl_status fl_ps_core_dump_sparse(fl_ps_core *c, const Flotilla__DumpSparseRequest *req,
                                 fl_ps_dump_buf *buf, Flotilla__DumpSparseResponse *resp,
                                 Flotilla__Tensor *values, int64_t shape[2]) {
  int t = req->trainer_id, more = 0;
  ps_table *pt;
  size_t dim, page, rows, n = 0;
  fl_status st = FL_OK;

  if (t != FL_PS_OBSERVER && (st = psc_enter(c, t)) != FL_OK) return st;
  FL_TRY(check_keys(c, t, "sparse dump", req->table, NULL, 0, &pt));
  dim = fl_ps_table_dim(pt->t);
  page = FL_PS_DUMP_MAX_FLOATS / dim;
  if (page > c->o.max_sparse_keys) page = c->o.max_sparse_keys;
  if (req->max_rows && req->max_rows < page) page = req->max_rows;
  rows = psc_stripes_rows(pt);
  /* Rows added meanwhile show as `more`. */
  if (page > rows) page = rows ? rows : 1;
  FL_TRY(dump_room(buf, page, dim));
  st = psc_stripes_dump(pt, req->has_after, req->after_key, page, buf->keys, buf->vals, &n, &more);
  if (st != FL_OK) return st;
  shape[0] = (int64_t)n;
  shape[1] = (int64_t)dim;
  values->dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  values->n_shape = 2;
  values->shape = shape;
  values->data.data = (uint8_t *)buf->vals;
  values->data.len = n * dim * sizeof(float);
  resp->n_keys = n;
  resp->keys = buf->keys;
  resp->values = values;
  resp->more = more;
  return FL_OK;
}
