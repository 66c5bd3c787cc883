/* ops_embbag.c - EmbeddingBag, Flotilla's own op (domain "flotilla"): rows
 * of a weight table picked by int64 indices and pooled per bag, what
 * PyTorch's nn.EmbeddingBag computes.  The ONNX importer builds it from
 * the Loop PyTorch exports for nn.EmbeddingBag (onnx_embbag.c); models may
 * build it directly, with indices from an int64 graph input.
 *
 *   input 0  weight [N, D] float
 *   input 1  indices int64: [B, L] (B fixed bags of L) or [L] (with offsets)
 *   input 2  offsets int64 [K] (1-D indices only): bag b is
 *            indices[offsets[b] .. offsets[b+1]), the last bag ends at L;
 *            include_last_offset 1: K - 1 bags, the last ends at offsets[K-1]
 *   input 3  per_sample_weights float, as many as indices (mode sum only)
 *   output   [bags, D]; mode sum | mean | max; an empty bag gives 0.
 * Backward: the weight's gradient is a scatter-add into the rows named,
 * bag by bag and entry by entry (deterministic; a row named twice gets
 * both contributions), what a sparse table's push wants; max sends each
 * element's gradient to the first entry holding the maximum.  The
 * per-sample weights get dot(weight row, output gradient).  Offsets must
 * start at 0, never decrease and stay within L; indices within [0, N)
 * (checked when the op runs).  No CUDA twin: a graph holding it runs on
 * the cpu. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_names.h"
#include "ops_internal.h"

typedef enum { EB_SUM, EB_MEAN, EB_MAX } eb_mode;

static const struct {
  const char *name;
  eb_mode mode;
} eb_modes[] = {{"sum", EB_SUM}, {"mean", EB_MEAN}, {"max", EB_MAX}};

/* One call's view of the node's inputs. */
typedef struct eb {
  eb_mode mode;
  int last;            /* include_last_offset */
  const float *w;      /* [N, D] */
  int64_t N, D;
  const int64_t *idx;  /* L entries */
  int64_t L;
  const int64_t *off;  /* NULL: fixed bags of `fixed` entries */
  int64_t n_off, fixed, bags;
  const float *psw;    /* NULL or L entries */
} eb;

/* The node's attributes, read once at infer (its state): forward and
 * backward run every step. */
typedef struct eb_state {
  eb_mode mode;
  int last;
} eb_state;

static void eb_free_state(fl_gnode *n) {
  free(n->state);
  n->state = NULL;
}

static fl_status eb_attrs(const fl_gnode *n, eb_mode *mode, int *last) {
  const char *s;
  int64_t l;
  FL_TRY(fl_ga_str(n, "mode", "sum", &s));
  FL_TRY(fl_ga_int(n, "include_last_offset", 0, &l));
  if (l != 0 && l != 1)
    return fl_gop_fail(n, FL_EINVAL, "include_last_offset %lld (it takes 0 or 1)", (long long)l);
  *last = (int)l;
  const int i = FL_ROWS_FIND(eb_modes, s);
  if (i < 0) return fl_gop_fail(n, FL_ENOTSUP, "mode '%s' is not supported (sum, mean or max)", s);
  *mode = eb_modes[i].mode;
  return FL_OK;
}

/* The offsets and per-sample weights, checked against the indices. */
static fl_status eb_infer_extras(const fl_gnode *n, const fl_gctx *c, const eb *e) {
  const fl_gtensor *x = fl_gin(n, c, 1), *o = fl_gin(n, c, 2), *p = fl_gin(n, c, 3);
  char buf[64];
  if (x->ndim == 2 && (o || e->last))
    return fl_gop_fail(n, FL_EINVAL, "2-D indices %s make fixed bags of %lld: give no offsets "
                       "and no include_last_offset, or flatten the indices", x->name,
                       (long long)x->shape[1]);
  if (x->ndim == 1 && !o)
    return fl_gop_fail(n, FL_EINVAL, "1-D indices %s need offsets (input 2)", x->name);
  if (o && o->dtype != FL_G_I64)
    return fl_gop_fail(n, FL_EINVAL, "offsets %s must be int64", o->name);
  if (o && (o->ndim != 1 || (e->last && o->shape[0] < 1)))
    return fl_gop_fail(n, FL_EINVAL, "offsets %s of shape %s: a 1-D list%s", o->name,
                       fl_gshape_str(o->ndim, o->shape, buf, sizeof buf),
                       e->last ? " of at least one entry (include_last_offset 1)" : "");
  if (p && p->dtype != FL_G_F32)
    return fl_gop_fail(n, FL_EINVAL, "per_sample_weights %s must be float", p->name);
  if (p && p->n != x->n)
    return fl_gop_fail(n, FL_EINVAL, "per_sample_weights %s has %zu entries, the indices %s "
                       "%zu: one weight per index", p->name, p->n, x->name, x->n);
  if (p && e->mode != EB_SUM)
    return fl_gop_fail(n, FL_ENOTSUP, "per_sample_weights with mode %s: PyTorch takes them "
                       "with mode sum only", eb_modes[e->mode].name);
  return FL_OK;
}

static fl_status eb_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  eb e = {.mode = EB_SUM};
  char buf[64];
  FL_TRY(eb_attrs(n, &e.mode, &e.last));
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_I64));
  const fl_gtensor *w = fl_gin(n, c, 0), *x = fl_gin(n, c, 1), *o = fl_gin(n, c, 2);
  if (w->ndim != 2)
    return fl_gop_fail(n, FL_EINVAL, "weight %s of shape %s (it takes [rows, width])", w->name,
                       fl_gshape_str(w->ndim, w->shape, buf, sizeof buf));
  if (x->ndim != 1 && x->ndim != 2)
    return fl_gop_fail(n, FL_EINVAL, "indices %s of shape %s (it takes [bags, per bag] or "
                       "[entries] with offsets)", x->name,
                       fl_gshape_str(x->ndim, x->shape, buf, sizeof buf));
  FL_TRY(eb_infer_extras(n, c, &e));
  if (!n->state && !(n->state = malloc(sizeof(eb_state))))
    return fl_gop_fail(n, FL_ENOMEM, "no memory for the node's attributes");
  *(eb_state *)n->state = (eb_state){e.mode, e.last};
  const int64_t ys[2] = {x->ndim == 2 ? x->shape[0] : o->shape[0] - e.last, w->shape[1]};
  fl_gset_out(n, c, 0, FL_G_F32, 2, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* The inputs' values, after infer accepted their shapes. */
static void eb_view(const fl_gnode *n, const fl_gctx *c, eb *e) {
  const fl_gtensor *w = fl_gin(n, c, 0), *x = fl_gin(n, c, 1), *o = fl_gin(n, c, 2),
                   *p = fl_gin(n, c, 3);
  e->w = w->data;
  e->N = w->shape[0];
  e->D = w->shape[1];
  e->idx = x->idata;
  e->L = (int64_t)x->n;
  e->off = o ? o->idata : NULL;
  e->n_off = o ? (int64_t)o->n : 0;
  e->fixed = x->ndim == 2 ? x->shape[1] : 0;
  e->bags = x->ndim == 2 ? x->shape[0] : e->n_off - e->last;
  e->psw = p ? p->data : NULL;
}

/* The values the op indexes with: offsets and indices in range. */
static fl_status eb_check(const fl_gnode *n, const fl_gctx *c, eb *e) {
  const eb_state *st = n->state; /* infer's */
  e->mode = st->mode;
  e->last = st->last;
  eb_view(n, c, e);
  for (int64_t k = 0; k < e->n_off; k++) {
    const int64_t lo = k ? e->off[k - 1] : 0;
    if (e->off[k] < lo || e->off[k] > e->L || (k == 0 && e->off[0] != 0))
      return fl_gop_fail(n, FL_EINVAL, "offsets[%lld] = %lld: offsets start at 0, never "
                         "decrease and stay within the %lld indices", (long long)k,
                         (long long)e->off[k], (long long)e->L);
  }
  for (int64_t j = 0; j < e->L; j++)
    if (e->idx[j] < 0 || e->idx[j] >= e->N)
      return fl_gop_fail(n, FL_EINVAL, "indices[%lld] = %lld is outside the weight's %lld rows",
                         (long long)j, (long long)e->idx[j], (long long)e->N);
  return FL_OK;
}

/* Bag b's entries [*lo, *hi). */
static void eb_bag(const eb *e, int64_t b, int64_t *lo, int64_t *hi) {
  if (!e->off) {
    *lo = b * e->fixed;
    *hi = *lo + e->fixed;
    return;
  }
  *lo = e->off[b];
  *hi = b + 1 < e->n_off ? e->off[b + 1] : e->L;
}

/* The weight of entry j in a bag of cnt entries (sum and mean). */
static float eb_scale(const eb *e, int64_t j, int64_t cnt) {
  if (e->psw) return e->psw[j];
  return e->mode == EB_MEAN ? 1.0f / (float)cnt : 1.0f;
}

/* The entry in [lo, hi) holding the first maximum of column d. */
static int64_t eb_argmax(const eb *e, int64_t lo, int64_t hi, int64_t d) {
  int64_t at = lo;
  for (int64_t j = lo + 1; j < hi; j++)
    if (e->w[e->idx[j] * e->D + d] > e->w[e->idx[at] * e->D + d]) at = j;
  return at;
}

static void eb_pool(const eb *e, int64_t lo, int64_t hi, float *y) {
  const int64_t D = e->D;
  if (hi == lo) {
    memset(y, 0, (size_t)D * sizeof *y);
    return;
  }
  if (e->mode == EB_MAX) {
    for (int64_t d = 0; d < D; d++) y[d] = e->w[e->idx[eb_argmax(e, lo, hi, d)] * D + d];
    return;
  }
  if (e->mode == EB_SUM && !e->psw) { /* weights of 1: the rows added, from 0 as below */
    const float *r = e->w + e->idx[lo] * D;
    for (int64_t d = 0; d < D; d++) y[d] = 0.0f + r[d];
    for (int64_t j = lo + 1; j < hi; j++) {
      r = e->w + e->idx[j] * D;
      for (int64_t d = 0; d < D; d++) y[d] += r[d];
    }
    return;
  }
  memset(y, 0, (size_t)D * sizeof *y);
  for (int64_t j = lo; j < hi; j++) {
    const float s = eb_scale(e, j, hi - lo), *r = e->w + e->idx[j] * D;
    for (int64_t d = 0; d < D; d++) y[d] += s * r[d];
  }
}

static fl_status eb_forward(fl_gnode *n, fl_gctx *c) {
  eb e;
  FL_TRY(eb_check(n, c, &e));
  float *y = fl_gout(n, c, 0)->data;
  for (int64_t b = 0; b < e.bags; b++) {
    int64_t lo, hi;
    eb_bag(&e, b, &lo, &hi);
    eb_pool(&e, lo, hi, y + b * e.D);
  }
  return FL_OK;
}

/* Bag [lo, hi)'s share of the weight's gradient, dy its output gradient. */
static void eb_scatter(const eb *e, int64_t lo, int64_t hi, const float *dy, float *dw) {
  const int64_t D = e->D;
  if (e->mode == EB_MAX) {
    if (hi > lo)
      for (int64_t d = 0; d < D; d++) dw[e->idx[eb_argmax(e, lo, hi, d)] * D + d] += dy[d];
    return;
  }
  for (int64_t j = lo; j < hi; j++) {
    const float s = eb_scale(e, j, hi - lo);
    float *g = dw + e->idx[j] * D;
    for (int64_t d = 0; d < D; d++) g[d] += s * dy[d];
  }
}

/* dpsw[j] (+)= dot(weight row of entry j, dy of its bag). */
static void eb_psw_grad(const eb *e, int64_t lo, int64_t hi, const float *dy, float *dp,
                        int acc) {
  for (int64_t j = lo; j < hi; j++) {
    const float *r = e->w + e->idx[j] * e->D;
    float s = 0.0f;
    for (int64_t d = 0; d < e->D; d++) s += r[d] * dy[d];
    dp[j] = acc ? dp[j] + s : s;
  }
}

static fl_status eb_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  float *dw = fl_gin_grad(n, c, 0), *dp = fl_gin_grad(n, c, 3);
  if (!dw && !dp) return FL_OK;
  eb e;
  FL_TRY(eb_check(n, c, &e));
  const float *dy = fl_gout(n, c, 0)->grad;
  if (dw && !fl_gacc(acc, 0)) memset(dw, 0, (size_t)(e.N * e.D) * sizeof *dw);
  for (int64_t b = 0; b < e.bags; b++) {
    int64_t lo, hi;
    eb_bag(&e, b, &lo, &hi);
    if (dw) eb_scatter(&e, lo, hi, dy + b * e.D, dw);
    if (dp) eb_psw_grad(&e, lo, hi, dy + b * e.D, dp, fl_gacc(acc, 3));
  }
  /* entries of no bag (past include_last_offset's end) get none */
  if (dp && !fl_gacc(acc, 3) && e.off && e.last) {
    const int64_t end = e.off[e.n_off - 1];
    memset(dp + end, 0, (size_t)(e.L - end) * sizeof *dp);
  }
  return FL_OK;
}

static const char *const eb_attr_names[] = {"mode", "include_last_offset", NULL};

const fl_gop fl_gops_embbag[] = {
    {.type = "EmbeddingBag", .domain = "flotilla", .min_in = 2, .max_in = 4, .min_out = 1,
     .max_out = 1, .attrs = eb_attr_names, .infer = eb_infer, .forward = eb_forward,
     .backward = eb_backward, .free_state = eb_free_state, .save_in = 0xfu,
     .nodiff_in = 0x6u, .traits = FL_GOP_ROW_READER,
     .doc = "PyTorch's nn.EmbeddingBag as exported (a Loop over the bags, rewritten on import): "
            "mode sum, mean or max; 2-D indices (fixed bags) or 1-D indices with offsets "
            "(include_last_offset too); per_sample_weights with mode sum; empty bags give 0; "
            "padding_idx does not export from PyTorch 1.13; no CUDA twin"},
};
const size_t fl_gops_embbag_n = sizeof fl_gops_embbag / sizeof fl_gops_embbag[0];
