/* ops_sparse.c - Flotilla's own sparse op (domain "flotilla", not ONNX):
 * EmbeddingBagSum pools rows pulled from a sparse table into per-sample
 * groups, by a feed of (sample, slot, row, value) entries that the caller
 * hands the node each step (fl_graph_model_set_sparse_feed).
 *
 *   input 0  rows [R, D] float (a rows input: the batch's pulled rows)
 *   mode "slots" (default), num_slots S >= 1: output [batch, S*D],
 *            out[i, s*D + d] += v * rows[r, d] per entry (i, s, r, v);
 *            entries of slot >= S are skipped
 *   mode "all": output [batch, D], every entry summed into one group
 *            (the slot is ignored): out[i, d] += v * rows[r, d]
 *   backward: drows[r, d] += v * dout[i, group*D + d]; the feed gets none.
 * Entries are summed in feed order, so results are deterministic, and a
 * row named by several entries gets the sum of their gradients: what a
 * sparse table's push wants.  Why an op: with it the CTR model's wide and
 * deep parts are one graph whose backward the engine derives.  No CUDA
 * twin: a graph holding it runs on the cpu. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_names.h"
#include "ops_internal.h"

/* The attribute mode's names, indexed by the node's "all" flag, then NULL. */
static const char *const k_pool_modes[] = {"slots", "all", NULL};

/* The node's groups: S slots, or one group (mode "all", *all = 1). */
static fl_status pool_groups(const fl_gnode *n, int64_t *groups, int *all) {
  const char *mode;
  int64_t s;
  FL_TRY(fl_ga_str(n, "mode", k_pool_modes[0], &mode));
  FL_TRY(fl_ga_int(n, "num_slots", 0, &s));
  *all = fl_names_find(k_pool_modes, mode);
  if (*all < 0)
    return fl_gop_fail(n, FL_EINVAL, "mode '%s' (it takes %s or %s)", mode, k_pool_modes[0],
                       k_pool_modes[1]);
  if (*all && fl_gattr_find(n, "num_slots"))
    return fl_gop_fail(n, FL_EINVAL, "num_slots with mode all (every entry is one group)");
  if (!*all && s < 1)
    return fl_gop_fail(n, FL_EINVAL, "num_slots %lld (mode slots needs at least 1)",
                       (long long)s);
  *groups = *all ? 1 : s;
  return FL_OK;
}

static fl_status pool_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  char buf[64];
  if (x->ndim != 2)
    return fl_gop_fail(n, FL_EINVAL, "rows %s of shape %s (it takes [rows, width])", x->name,
                       fl_gshape_str(x->ndim, x->shape, buf, sizeof buf));
  int64_t groups;
  int all;
  FL_TRY(pool_groups(n, &groups, &all));
  const int64_t ys[2] = {(int64_t)c->batch, groups * x->shape[1]};
  fl_gset_out(n, c, 0, FL_G_F32, 2, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* The feed, each entry checked against the bound batch and the rows. */
static fl_status pool_feed(const fl_gnode *n, const fl_gctx *c, const fl_graph_sparse_feed **f) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!n->fed)
    return fl_gop_fail(n, FL_ESTATE, "no sparse feed was set (fl_graph_model_set_sparse_feed)");
  for (size_t k = 0; k < n->feed.n; k++) {
    const fl_graph_sparse_entry *e = &n->feed.e[k];
    if ((size_t)e->sample >= c->batch || (int64_t)e->row >= x->shape[0])
      return fl_gop_fail(n, FL_EINVAL, "feed entry %zu names sample %u and row %u; the batch "
                         "has %zu samples and %s %lld rows", k, e->sample, e->row, c->batch,
                         x->name, (long long)x->shape[0]);
  }
  *f = &n->feed;
  return FL_OK;
}

/* The output offset of entry e's group, or -1 when it is skipped. */
static int64_t pool_at(const fl_graph_sparse_entry *e, int64_t groups, int all, int64_t D) {
  if (all) return (int64_t)e->sample * D;
  if ((int64_t)e->slot >= groups) return -1;
  return ((int64_t)e->sample * groups + e->slot) * D;
}

/* What forward and backward both read: the groups, mode all, this step's
 * feed and the rows' width. */
typedef struct pool_p {
  int64_t groups, D;
  int all;
  const fl_graph_sparse_feed *f;
} pool_p;

static fl_status pool_plan(const fl_gnode *n, const fl_gctx *c, pool_p *p) {
  FL_TRY(pool_groups(n, &p->groups, &p->all));
  FL_TRY(pool_feed(n, c, &p->f));
  p->D = fl_gin(n, c, 0)->shape[1];
  return FL_OK;
}

static fl_status pool_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  pool_p p;
  FL_TRY(pool_plan(n, c, &p));
  const fl_graph_sparse_feed *f = p.f;
  const int64_t D = p.D;
  memset(y->data, 0, y->n * sizeof *y->data);
  for (size_t k = 0; k < f->n; k++) {
    const fl_graph_sparse_entry *e = &f->e[k];
    const int64_t at = pool_at(e, p.groups, p.all, D);
    if (at < 0) continue;
    const float *r = x->data + (size_t)e->row * (size_t)D;
    float *o = y->data + at;
    for (int64_t d = 0; d < D; d++) o[d] += e->value * r[d];
  }
  return FL_OK;
}

static fl_status pool_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  pool_p p;
  FL_TRY(pool_plan(n, c, &p));
  const fl_graph_sparse_feed *f = p.f;
  const int64_t D = p.D;
  if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
  for (size_t k = 0; k < f->n; k++) {
    const fl_graph_sparse_entry *e = &f->e[k];
    const int64_t at = pool_at(e, p.groups, p.all, D);
    if (at < 0) continue;
    float *g = x->grad + (size_t)e->row * (size_t)D;
    const float *dy = y->grad + at;
    for (int64_t d = 0; d < D; d++) g[d] += e->value * dy[d];
  }
  return FL_OK;
}

/* ------------------------------------------------------ SparseRowIndex */

#define SIGN_BIT 0x8000000000000000ULL /* flipped: int64 order as unsigned */

/* ids[0..n) ascending by a byte-wise LSD radix sort through tmp (n values),
 * skipping the bytes all ids share (ids modulo a vocabulary differ in two
 * or three of eight).  pos (n values, or NULL) moves along with the ids
 * through ptmp (stable: equal ids keep their order). */
static void radix_sort(int64_t *ids, int64_t *tmp, int64_t *pos, int64_t *ptmp, size_t n) {
  uint64_t any = 0, all = ~0ULL;
  for (size_t i = 0; i < n; i++) {
    const uint64_t k = (uint64_t)ids[i] ^ SIGN_BIT;
    any |= k;
    all &= k;
  }
  int64_t *src = ids, *dst = tmp, *ps = pos, *pd = ptmp;
  for (unsigned b = 0; b < 64; b += 8) {
    if (!(((any ^ all) >> b) & 0xffu)) continue;
    size_t at[257] = {0};
    for (size_t i = 0; i < n; i++) at[((((uint64_t)src[i] ^ SIGN_BIT) >> b) & 0xffu) + 1]++;
    for (size_t j = 1; j < 257; j++) at[j] += at[j - 1];
    for (size_t i = 0; i < n; i++) {
      const size_t j = at[(((uint64_t)src[i] ^ SIGN_BIT) >> b) & 0xffu]++;
      dst[j] = src[i];
      if (ps) pd[j] = ps[i];
    }
    int64_t *w = src, *pw = ps;
    src = dst;
    dst = w;
    ps = pd;
    pd = pw;
  }
  if (src != ids) memcpy(ids, src, n * sizeof *ids);
  if (pos && ps != pos) memcpy(pos, ps, n * sizeof *pos);
}

/* The sorted ids u[0..n) (pos[i]: where u[i] was) to ranks: y[pos[i]] the
 * rank of u[i] among the distinct ids; returns how many distinct ids.
 * Keeps them in u[0..distinct) when keep. */
static size_t ranks_of(int64_t *u, const int64_t *pos, size_t n, int64_t *y, int keep) {
  size_t nu = 0; /* the distinct ids so far: the rank of the next new one */
  int64_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    if (!i || u[i] != prev) {
      prev = u[i];
      if (keep) u[nu] = prev;
      nu++;
    }
    y[pos[i]] = (int64_t)nu - 1;
  }
  return nu;
}

size_t fl_graph_unique_ids(int64_t *ids, int64_t *rank, int64_t *tmp, size_t n) {
  int64_t *pos = tmp + n;
  for (size_t i = 0; i < n; i++) pos[i] = (int64_t)i;
  radix_sort(ids, tmp, pos, pos + n, n);
  return ranks_of(ids, pos, n, rank, 1);
}

/* Ids [any shape] -> their positions among the sorted distinct ids, the
 * order the model pulls a sparse table's rows in (fl_graph_unique_ids). */
static fl_status rowidx_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_I64));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t cap;
  FL_TRY(fl_ga_int(n, "capacity", 0, &cap));
  if (cap < 1) return fl_gop_fail(n, FL_EINVAL, "capacity %lld must be > 0", (long long)cap);
  fl_gset_out(n, c, 0, FL_G_I64, x->ndim, x->shape);
  /* a sorted copy of the ids, their positions and the sort's scratch for
   * both, int64 */
  *ws = 8 * (x->n ? x->n : 1);
  *saved = 0;
  return FL_OK;
}

/* Whether the ranks handed to node n (fl_graph_model_set_ranks) are those
 * of its ids x: distinct ids ascending, each rank naming one equal to its
 * id, every one named (marks: nu bytes of scratch). */
static int given_ranks(const fl_gnode *n, const fl_gtensor *x, unsigned char *marks) {
  const size_t nu = n->n_uniq;
  if (!n->rank || !n->uniq || n->n_rank != x->n || nu > x->n) return 0;
  for (size_t j = 1; j < nu; j++)
    if (n->uniq[j - 1] >= n->uniq[j]) return 0;
  memset(marks, 0, nu);
  for (size_t i = 0; i < x->n; i++) {
    const int64_t r = n->rank[i];
    if (r < 0 || (size_t)r >= nu || n->uniq[r] != x->idata[i]) return 0;
    marks[r] = 1;
  }
  return !memchr(marks, 0, nu);
}

static fl_status rowidx_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  int64_t cap, *u = (int64_t *)(void *)n->ws, *pos = u + 2 * x->n;
  size_t nu;
  FL_TRY(fl_ga_int(n, "capacity", 0, &cap));
  if (given_ranks(n, x, (unsigned char *)u)) { /* sorted before the step */
    nu = n->n_uniq;
    if (x->n) memcpy(y->idata, n->rank, x->n * sizeof *y->idata);
  } else {
    if (x->n) memcpy(u, x->idata, x->n * sizeof *u);
    for (size_t i = 0; i < x->n; i++) pos[i] = (int64_t)i;
    radix_sort(u, u + x->n, pos, pos + x->n, x->n);
    nu = ranks_of(u, pos, x->n, y->idata, 0);
  }
  n->uniq = n->rank = NULL; /* the next forward's ids are another batch's */
  if (nu > (size_t)cap)
    return fl_gop_fail(n, FL_EINVAL, "%zu distinct ids in the batch, over the %lld rows the "
                       "sparse table's rows input holds", nu, (long long)cap);
  return FL_OK;
}

static const char *const rowidx_attrs[] = {"capacity", NULL};

static const char *const pool_attrs[] = {"mode", "num_slots", NULL};

const fl_gop fl_gops_sparse[] = {
    {.type = "EmbeddingBagSum", .domain = "flotilla", .sparse_feed = 1, .min_in = 1,
     .max_in = 1, .min_out = 1, .max_out = 1, .attrs = pool_attrs, .infer = pool_infer,
     .forward = pool_forward, .backward = pool_backward,
     .doc = "the CTR model's pooling of pulled rows by a per-step sparse feed (mode slots "
            "or all); never read from a file"},
    {.type = "SparseRowIndex", .domain = "flotilla", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = rowidx_attrs, .infer = rowidx_infer, .forward = rowidx_forward,
     .nodiff_in = 1u, .traits = FL_GOP_NO_FOLD | FL_GOP_ROW_INDEX,
     .doc = "a sparse table's ids to the positions of their rows among the batch's sorted "
            "distinct ids (attribute capacity: the rows pulled at most); never read from a file"},
};
const size_t fl_gops_sparse_n = sizeof fl_gops_sparse / sizeof fl_gops_sparse[0];
