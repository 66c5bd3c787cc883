/* ops_reduce.c - the reductions of the graph engine (ReduceMean, ReduceSum,
 * ReduceMax, ReduceMin, ReduceL2, ReduceProd, ReduceLogSumExp,
 * ReduceSumSquare), ArgMax, CumSum and TopK.
 *
 * The reduced axes come from the "axes" attribute (opsets 13..17 for every
 * reduction but ReduceSum; ReduceMean also up to 17) or the second input
 * (ReduceSum from opset 13), which must then be known when shapes are
 * bound.  ReduceMean and ReduceSum sum over the input in memory order into
 * the kept-dims result (deterministic).  The other reductions gather each
 * output's values into scratch and apply a function of that run of values
 * (sums in double); backward computes the run's gradient there and scatters
 * it back.  Their gradients follow PyTorch's: amax/amin split the gradient
 * evenly among tied extremes, prod's is the product of the other values
 * (right with zeros), norm's is 0 where the norm is 0.
 *
 * ArgMax, CumSum and TopK work along one axis: a line of len values with
 * stride inner, outer lines of them.  ArgMax and TopK's indices are int64
 * outputs computed at run time; TopK keeps its indices (int32) for
 * backward, which scatters the values' gradient into those positions, and
 * orders equal values by index (lower first), as ONNX says (PyTorch's CPU
 * topk has no fixed order for ties). */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_names.h"
#include "ops_internal.h"

/* ------------------------------------------------------------ reductions */

/* What a reduction does with one output's run of n values (contiguous in
 * scratch): fwd gives the output, bwd the run's gradient gv from the
 * output's value y and gradient gy.  NULL for the sums, which take the
 * broadcasting path instead. */
typedef struct red_kind {
  const char *type;
  float (*fwd)(const float *v, size_t n);
  void (*bwd)(const float *v, size_t n, float y, float gy, float *gv);
  int mean;
} red_kind;

static float rk_max(const float *v, size_t n) {
  float m = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    if (isnan(v[i])) return v[i];
    if (v[i] > m) m = v[i];
  }
  return m;
}

static float rk_min(const float *v, size_t n) {
  float m = INFINITY;
  for (size_t i = 0; i < n; i++) {
    if (isnan(v[i])) return v[i];
    if (v[i] < m) m = v[i];
  }
  return m;
}

/* amax / amin: the gradient split evenly among the values equal to y. */
static void rk_extreme_bwd(const float *v, size_t n, float y, float gy, float *gv) {
  size_t ties = 0;
  for (size_t i = 0; i < n; i++) ties += v[i] == y;
  const float g = ties ? gy / (float)ties : 0.0f;
  for (size_t i = 0; i < n; i++) gv[i] = v[i] == y ? g : 0.0f;
}

static float rk_l2(const float *v, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
  return (float)sqrt(s);
}

static void rk_l2_bwd(const float *v, size_t n, float y, float gy, float *gv) {
  const float g = y > 0.0f ? gy / y : 0.0f;
  for (size_t i = 0; i < n; i++) gv[i] = v[i] * g;
}

static float rk_prod(const float *v, size_t n) {
  double p = 1.0;
  for (size_t i = 0; i < n; i++) p *= v[i];
  return (float)p;
}

/* The product of the other values: prefix times suffix (no division, so
 * zeros are right). */
static void rk_prod_bwd(const float *v, size_t n, float y, float gy, float *gv) {
  (void)y;
  double pre = 1.0, suf = 1.0;
  for (size_t i = 0; i < n; i++) {
    gv[i] = (float)pre;
    pre *= v[i];
  }
  for (size_t i = n; i-- > 0;) {
    gv[i] = (float)((double)gy * gv[i] * suf);
    suf *= v[i];
  }
}

static float rk_lse(const float *v, size_t n) {
  const float m = rk_max(v, n);
  if (!isfinite(m)) return m; /* NaN, +inf, or no finite value (-inf) */
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += exp((double)v[i] - m);
  return (float)(m + log(s));
}

static void rk_lse_bwd(const float *v, size_t n, float y, float gy, float *gv) {
  for (size_t i = 0; i < n; i++) gv[i] = isfinite(y) ? gy * expf(v[i] - y) : 0.0f;
}

static float rk_sumsq(const float *v, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
  return (float)s;
}

static void rk_sumsq_bwd(const float *v, size_t n, float y, float gy, float *gv) {
  (void)y;
  for (size_t i = 0; i < n; i++) gv[i] = 2.0f * v[i] * gy;
}

static const red_kind red_kinds[] = {
    {"ReduceMean", NULL, NULL, 1},
    {"ReduceSum", NULL, NULL, 0},
    {"ReduceMax", rk_max, rk_extreme_bwd, 0},
    {"ReduceMin", rk_min, rk_extreme_bwd, 0},
    {"ReduceL2", rk_l2, rk_l2_bwd, 0},
    {"ReduceProd", rk_prod, rk_prod_bwd, 0},
    {"ReduceLogSumExp", rk_lse, rk_lse_bwd, 0},
    {"ReduceSumSquare", rk_sumsq, rk_sumsq_bwd, 0},
};

/* The node's row of red_kinds (every reduction of fl_gops_reduce has one;
 * the sum's row otherwise). */
static const red_kind *red_kind_of(const fl_gnode *n) {
  const int i = FL_ROWS_FIND(red_kinds, n->op->type);
  return &red_kinds[i < 0 ? 1 : i];
}

typedef struct red_p {
  int keep[FL_G_MAX_DIMS];    /* 1 = the axis is reduced */
  int keepdims;
  int64_t kshape[FL_G_MAX_DIMS]; /* the result with reduced dims as 1 */
  size_t count;               /* values reduced into each output */
  const red_kind *kind;
} red_p;

/* The axes as given: input 1 (ReduceSum) or the attribute; *na = -1 when
 * neither. */
static fl_status red_axes(const fl_gnode *n, const fl_gctx *c, int64_t *av, int *na) {
  FL_TRY(fl_ga_ints(n, "axes", av, FL_G_MAX_DIMS, na));
  if (!fl_gin(n, c, 1)) return FL_OK;
  if (*na >= 0) return fl_gop_fail(n, FL_EINVAL, "axes given both as an attribute and as an input");
  const int64_t *v;
  size_t cnt;
  FL_TRY(fl_gknown_i64(n, c, 1, "axes", &v, &cnt));
  if (cnt > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "too many axes (%zu)", cnt);
  if (cnt) memcpy(av, v, cnt * sizeof *av);
  *na = (int)cnt;
  return FL_OK;
}

static fl_status red_params(const fl_gnode *n, const fl_gctx *c, red_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t kd, noop, av[FL_G_MAX_DIMS];
  int na;
  FL_TRY(fl_ga_int(n, "keepdims", 1, &kd));
  FL_TRY(fl_ga_int(n, "noop_with_empty_axes", 0, &noop));
  FL_TRY(red_axes(n, c, av, &na));
  p->kind = red_kind_of(n);
  p->keepdims = kd != 0;
  for (int d = 0; d < x->ndim; d++) p->keep[d] = 0;
  if (na <= 0) {
    /* No axes: all of them, or none with noop_with_empty_axes. */
    for (int d = 0; d < x->ndim; d++) p->keep[d] = !noop;
  } else {
    for (int i = 0; i < na; i++) {
      int a;
      FL_TRY(fl_gaxis(n, av[i], x->ndim, "axis", &a));
      if (p->keep[a]) return fl_gop_fail(n, FL_EINVAL, "axis %d is given twice", a);
      p->keep[a] = 1;
    }
  }
  p->count = 1;
  for (int d = 0; d < x->ndim; d++) {
    p->kshape[d] = p->keep[d] ? 1 : x->shape[d];
    if (p->keep[d]) p->count *= (size_t)x->shape[d];
  }
  return FL_OK;
}

static fl_status red_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  red_p p;
  FL_TRY(red_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t ys[FL_G_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < x->ndim; d++)
    if (p.keepdims || !p.keep[d]) ys[nd++] = p.kshape[d];
  fl_gset_out(n, c, 0, FL_G_F32, nd, ys);
  *ws = p.kind->fwd ? 2 * p.count : 0; /* a run of values and its gradient */
  *saved = 0;
  return FL_OK;
}

/* ReduceMean and ReduceSum: the broadcasting iterator's sums. */

static void red_bc(const fl_gtensor *x, const red_p *p, fl_gbc *bc) {
  const int ranks[1] = {x->ndim};
  const int64_t *shapes[1] = {p->kshape};
  fl_gbc_init(bc, x->ndim, x->shape, 1, ranks, shapes);
}

static fl_status sum_forward(fl_gnode *n, fl_gctx *c, const red_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gbc bc;
  red_bc(x, p, &bc);
  fl_gbc_reduce(&bc, 1, x->data, 1.0f, y->data, y->n, 0);
  if (p->kind->mean) {
    if (p->count == 0) {
      for (size_t i = 0; i < y->n; i++) y->data[i] = NAN;
    } else {
      const float inv = 1.0f / (float)p->count;
      for (size_t i = 0; i < y->n; i++) y->data[i] *= inv;
    }
  }
  return FL_OK;
}

static fl_status sum_backward(fl_gnode *n, fl_gctx *c, const red_p *p, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  fl_gbc bc;
  red_bc(x, p, &bc);
  const float scale = p->kind->mean && p->count ? 1.0f / (float)p->count : 1.0f;
  const int ax = fl_gacc(acc, 0);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  const size_t s1 = bc.nd ? (size_t)bc.st[1][bc.nd - 1] : 0;
  for (size_t r = 0; r < rows; r++) {
    size_t off[4];
    fl_gbc_row(&bc, r, off);
    float *dr = x->grad + off[0];
    const float *gr = y->grad + off[1];
    for (size_t i = 0; i < inner; i++) {
      const float v = gr[i * s1] * scale;
      dr[i] = ax ? dr[i] + v : v;
    }
  }
  return FL_OK;
}

/* The other reductions: each output's run of values, gathered in the
 * input's order of the reduced dims. */
typedef struct red_it {
  int nk, nr;                           /* kept and reduced dims */
  int64_t ks[FL_G_MAX_DIMS], kst[FL_G_MAX_DIMS]; /* kept dims: sizes, strides in x */
  int64_t rs[FL_G_MAX_DIMS], rst[FL_G_MAX_DIMS]; /* reduced dims: the same */
} red_it;

static void red_it_init(const fl_gtensor *x, const red_p *p, red_it *it) {
  int64_t stride[FL_G_MAX_DIMS], st = 1;
  for (int d = x->ndim - 1; d >= 0; d--) {
    stride[d] = st;
    st *= x->shape[d];
  }
  it->nk = it->nr = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (p->keep[d]) {
      it->rs[it->nr] = x->shape[d];
      it->rst[it->nr++] = stride[d];
    } else {
      it->ks[it->nk] = x->shape[d];
      it->kst[it->nk++] = stride[d];
    }
  }
}

/* The offset in x of output o's first value. */
static size_t red_base(const red_it *it, size_t o) {
  size_t off = 0;
  for (int d = it->nk - 1; d >= 0; d--) {
    off += (o % (size_t)it->ks[d]) * (size_t)it->kst[d];
    o /= (size_t)it->ks[d];
  }
  return off;
}

/* The offset of the run's next value after off (idx: the run's position,
 * all zeros at its start). */
static size_t red_next(const red_it *it, int64_t *idx, size_t off) {
  for (int d = it->nr - 1; d >= 0; d--) {
    off += (size_t)it->rst[d];
    if (++idx[d] < it->rs[d]) return off;
    off -= (size_t)(it->rs[d] * it->rst[d]);
    idx[d] = 0;
  }
  return off;
}

static void red_gather(const red_it *it, const float *x, size_t o, size_t count, float *v) {
  int64_t idx[FL_G_MAX_DIMS] = {0};
  size_t off = red_base(it, o);
  for (size_t i = 0; i < count; i++) {
    v[i] = x[off];
    off = red_next(it, idx, off);
  }
}

static void red_scatter(const red_it *it, const float *g, size_t o, size_t count, float *dx,
                        int add) {
  int64_t idx[FL_G_MAX_DIMS] = {0};
  size_t off = red_base(it, o);
  for (size_t i = 0; i < count; i++) {
    dx[off] = add ? dx[off] + g[i] : g[i];
    off = red_next(it, idx, off);
  }
}

static fl_status red_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  red_p p;
  FL_TRY(red_params(n, c, &p));
  if (!p.kind->fwd) return sum_forward(n, c, &p);
  red_it it;
  red_it_init(x, &p, &it);
  for (size_t o = 0; o < y->n; o++) {
    red_gather(&it, x->data, o, p.count, n->ws);
    y->data[o] = p.kind->fwd(n->ws, p.count);
  }
  return FL_OK;
}

static fl_status red_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  red_p p;
  FL_TRY(red_params(n, c, &p));
  if (!p.kind->fwd) return sum_backward(n, c, &p, acc);
  red_it it;
  red_it_init(x, &p, &it);
  float *v = n->ws, *gv = n->ws + p.count;
  for (size_t o = 0; o < y->n; o++) {
    red_gather(&it, x->data, o, p.count, v);
    p.kind->bwd(v, p.count, p.kind->fwd(v, p.count), y->grad[o], gv);
    red_scatter(&it, gv, o, p.count, x->grad, fl_gacc(acc, 0));
  }
  return FL_OK;
}

/* ------------------------------------------------- one axis: the lines */

/* outer lines of len values, stride inner, along axis. */
typedef struct ax_line {
  int axis;
  size_t outer, len, inner;
} ax_line;

static fl_status line_of(const fl_gnode *n, const fl_gtensor *x, int64_t axis, ax_line *l) {
  FL_TRY(fl_gaxis(n, axis, x->ndim, "axis", &l->axis));
  l->outer = fl_gnumel(l->axis, x->shape);
  l->len = (size_t)x->shape[l->axis];
  l->inner = fl_gnumel(x->ndim - l->axis - 1, x->shape + l->axis + 1);
  return FL_OK;
}

/* ---------------------------------------------------------------- ArgMax */

typedef struct am_p {
  ax_line l;
  int keepdims, last;
} am_p;

static fl_status am_params(const fl_gnode *n, const fl_gctx *c, am_p *p) {
  int64_t axis, kd, last;
  FL_TRY(fl_ga_int(n, "axis", 0, &axis));
  FL_TRY(fl_ga_int(n, "keepdims", 1, &kd));
  FL_TRY(fl_ga_int(n, "select_last_index", 0, &last));
  FL_TRY(line_of(n, fl_gin(n, c, 0), axis, &p->l));
  p->keepdims = kd != 0;
  p->last = last != 0;
  return FL_OK;
}

static fl_status am_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  am_p p;
  FL_TRY(am_params(n, c, &p));
  char sx[160];
  if (p.l.len == 0)
    return fl_gop_fail(n, FL_EINVAL, "axis %d of input %s %s is empty: no index to return",
                       p.l.axis, x->name, fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  int64_t ys[FL_G_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < x->ndim; d++)
    if (d != p.l.axis) ys[nd++] = x->shape[d];
    else if (p.keepdims) ys[nd++] = 1;
  fl_gset_out(n, c, 0, FL_G_I64, nd, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* v beats the best so far: a NaN is the largest value (as PyTorch's
 * argmax), the first NaN stays; ties keep the first index, or the last
 * with select_last_index. */
static int am_beats(float v, float best, int last) {
  if (isnan(best)) return 0;
  if (isnan(v)) return 1;
  return last ? v >= best : v > best;
}

static fl_status am_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  am_p p;
  FL_TRY(am_params(n, c, &p));
  const ax_line *l = &p.l;
  for (size_t o = 0; o < l->outer; o++)
    for (size_t i = 0; i < l->inner; i++) {
      const float *xv = x->data + o * l->len * l->inner + i;
      size_t best = 0;
      for (size_t k = 1; k < l->len; k++)
        if (am_beats(xv[k * l->inner], xv[best * l->inner], p.last)) best = k;
      y->idata[o * l->inner + i] = (int64_t)best;
    }
  return FL_OK;
}

/* ---------------------------------------------------------------- CumSum */

typedef struct cs_p {
  ax_line l;
  int exclusive, reverse;
} cs_p;

static fl_status cs_params(const fl_gnode *n, const fl_gctx *c, cs_p *p) {
  const int64_t *a;
  size_t cnt;
  int64_t ex, rev;
  FL_TRY(fl_ga_int(n, "exclusive", 0, &ex));
  FL_TRY(fl_ga_int(n, "reverse", 0, &rev));
  FL_TRY(fl_gknown_i64(n, c, 1, "axis", &a, &cnt));
  if (cnt != 1)
    return fl_gop_fail(n, FL_EINVAL, "axis input %s has %zu values; it takes one",
                       fl_gin(n, c, 1)->name, cnt);
  FL_TRY(line_of(n, fl_gin(n, c, 0), a[0], &p->l));
  p->exclusive = ex != 0;
  p->reverse = rev != 0;
  return FL_OK;
}

static fl_status cs_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  cs_p p;
  FL_TRY(cs_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* y (+)= the running sums of x along every line, in double: each position
 * takes the values before it (exclusive) or up to it, counting from the
 * line's end when rev. */
static void cs_run(const ax_line *l, const float *x, float *y, int excl, int rev, int add) {
  for (size_t o = 0; o < l->outer; o++)
    for (size_t i = 0; i < l->inner; i++) {
      const size_t base = o * l->len * l->inner + i;
      double s = 0.0;
      for (size_t j = 0; j < l->len; j++) {
        const size_t k = base + (rev ? l->len - 1 - j : j) * l->inner;
        const double v = x[k];
        if (!excl) s += v;
        y[k] = add ? y[k] + (float)s : (float)s;
        if (excl) s += v;
      }
    }
}

static fl_status cs_forward(fl_gnode *n, fl_gctx *c) {
  cs_p p;
  FL_TRY(cs_params(n, c, &p));
  cs_run(&p.l, fl_gin(n, c, 0)->data, fl_gout(n, c, 0)->data, p.exclusive, p.reverse, 0);
  return FL_OK;
}

/* The adjoint of a running sum is the running sum the other way. */
static fl_status cs_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!x->grad) return FL_OK;
  cs_p p;
  FL_TRY(cs_params(n, c, &p));
  cs_run(&p.l, fl_gout(n, c, 0)->grad, x->grad, p.exclusive, !p.reverse, fl_gacc(acc, 0));
  return FL_OK;
}

/* ------------------------------------------------------------------ TopK */

typedef struct tk_p {
  ax_line l;
  size_t k;
  int largest;
} tk_p;

/* One value of a line and its index, sorted in scratch. */
typedef struct tk_pair {
  float v;
  int32_t i;
} tk_pair;

static fl_status tk_params(const fl_gnode *n, const fl_gctx *c, tk_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t axis, largest, sorted;
  const int64_t *kv;
  size_t cnt;
  FL_TRY(fl_ga_int(n, "axis", -1, &axis));
  FL_TRY(fl_ga_int(n, "largest", 1, &largest));
  FL_TRY(fl_ga_int(n, "sorted", 1, &sorted)); /* the values come sorted either way */
  FL_TRY(fl_gknown_i64(n, c, 1, "K", &kv, &cnt));
  if (cnt != 1)
    return fl_gop_fail(n, FL_EINVAL, "K input %s has %zu values; it takes one",
                       fl_gin(n, c, 1)->name, cnt);
  FL_TRY(line_of(n, x, axis, &p->l));
  if (p->l.len > INT32_MAX)
    return fl_gop_fail(n, FL_ENOTSUP, "axis %d has %zu values; at most %d are supported",
                       p->l.axis, p->l.len, INT32_MAX);
  if (kv[0] < 0 || (uint64_t)kv[0] > p->l.len)
    return fl_gop_fail(n, FL_EINVAL, "K %lld is outside [0, %zu], the length of axis %d",
                       (long long)kv[0], p->l.len, p->l.axis);
  p->k = (size_t)kv[0];
  p->largest = largest != 0;
  return FL_OK;
}

static fl_status tk_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  tk_p p;
  FL_TRY(tk_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t ys[FL_G_MAX_DIMS];
  memcpy(ys, x->shape, (size_t)x->ndim * sizeof *ys);
  ys[p.l.axis] = (int64_t)p.k;
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, ys);
  if (n->n_out > 1) fl_gset_out(n, c, 1, FL_G_I64, x->ndim, ys);
  *ws = p.l.len * (sizeof(tk_pair) / sizeof(float)); /* one line's pairs */
  *saved = fl_gnumel(x->ndim, ys);                    /* the indices, int32 */
  return FL_OK;
}

/* a before b (< 0) in descending order (desc) or ascending: NaN is the
 * largest value (as PyTorch's topk), equal values by index. */
static int tk_order(const tk_pair *a, const tk_pair *b, int desc) {
  const int an = isnan(a->v), bn = isnan(b->v);
  int o = an || bn ? an - bn : (a->v > b->v) - (a->v < b->v);
  if (desc) o = -o;
  return o ? o : (a->i > b->i) - (a->i < b->i);
}
static int tk_desc(const void *a, const void *b) { return tk_order(a, b, 1); }
static int tk_asc(const void *a, const void *b) { return tk_order(a, b, 0); }

static fl_status tk_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *yv = fl_gout(n, c, 0), *yi = fl_gout(n, c, 1);
  tk_p p;
  FL_TRY(tk_params(n, c, &p));
  const ax_line *l = &p.l;
  tk_pair *pr = (tk_pair *)(void *)n->ws;
  int32_t *keep = (int32_t *)(void *)n->saved;
  for (size_t o = 0; o < l->outer; o++)
    for (size_t i = 0; i < l->inner; i++) {
      const float *xv = x->data + o * l->len * l->inner + i;
      for (size_t j = 0; j < l->len; j++) pr[j] = (tk_pair){xv[j * l->inner], (int32_t)j};
      qsort(pr, l->len, sizeof *pr, p.largest ? tk_desc : tk_asc);
      for (size_t j = 0; j < p.k; j++) {
        const size_t q = (o * p.k + j) * l->inner + i;
        yv->data[q] = pr[j].v;
        if (yi) yi->idata[q] = pr[j].i;
        if (keep) keep[q] = pr[j].i;
      }
    }
  return FL_OK;
}

/* The values' gradient goes to the positions they came from; the rest
 * gets 0. */
static fl_status tk_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *yv = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  tk_p p;
  FL_TRY(tk_params(n, c, &p));
  const ax_line *l = &p.l;
  const int32_t *keep = (const int32_t *)(const void *)n->saved;
  if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
  for (size_t o = 0; o < l->outer; o++)
    for (size_t i = 0; i < l->inner; i++)
      for (size_t j = 0; j < p.k; j++) {
        const size_t q = (o * p.k + j) * l->inner + i;
        x->grad[(o * l->len + (size_t)keep[q]) * l->inner + i] += yv->grad[q];
      }
  return FL_OK;
}

/* ----------------------------------------------------------------- table */

static const char *const mean_attrs[] = {"axes", "keepdims", "noop_with_empty_axes", NULL};
static const char *const sum_attrs[] = {"keepdims", "noop_with_empty_axes", NULL};
static const char *const am_attrs[] = {"axis", "keepdims", "select_last_index", NULL};
static const char *const cs_attrs[] = {"exclusive", "reverse", NULL};
static const char *const tk_attrs[] = {"axis", "largest", "sorted", NULL};

/* The reductions of one function of the run (axes as an attribute). */
#define FL_RED_ROW(name, paddle_name, what)                                                     \
  {.type = name, .paddle = paddle_name, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, \
   .attrs = mean_attrs, .infer = red_infer, .forward = red_forward,                           \
   .backward = red_backward, .save_in = 1,                                                    \
   .doc = "axes only as an attribute (opsets 13..17); " what}

const fl_gop fl_gops_reduce[] = {
    {.type = "ReduceMean", .paddle = "reduce_mean", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = mean_attrs, .infer = red_infer, .forward = red_forward,
     .backward = red_backward, .nodiff_in = 2,
     .doc = "axes as an attribute (opsets 13..17), keepdims, noop_with_empty_axes, negative "
            "axes"},
    {.type = "ReduceSum", .paddle = "reduce_sum", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = sum_attrs, .infer = red_infer, .forward = red_forward,
     .backward = red_backward, .nodiff_in = 2,
     .doc = "axes as an input known at bind (opset 13 on), keepdims, noop_with_empty_axes"},
    FL_RED_ROW("ReduceMax", "reduce_max", "the gradient split among tied maxima (as amax)"),
    FL_RED_ROW("ReduceMin", "reduce_min", "the gradient split among tied minima (as amin)"),
    FL_RED_ROW("ReduceL2", NULL, "gradient 0 where the norm is 0"),
    FL_RED_ROW("ReduceProd", "reduce_prod", "the gradient is the product of the others (zeros "
               "taken)"),
    FL_RED_ROW("ReduceLogSumExp", NULL, "max-shifted, summed in double"),
    FL_RED_ROW("ReduceSumSquare", NULL, "summed in double"),
    {.type = "ArgMax", .paddle = "arg_max", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = am_attrs, .infer = am_infer, .forward = am_forward,
     .nodiff_in = 1,
     .doc = "axis, keepdims, select_last_index; int64 output, computed at run time (CPU); no "
            "gradient; an empty axis refused"},
    {.type = "CumSum", .paddle = "cumsum", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = cs_attrs, .infer = cs_infer, .forward = cs_forward,
     .backward = cs_backward, .nodiff_in = 2,
     .doc = "axis input known at bind, exclusive, reverse; summed in double"},
    {.type = "TopK", .paddle = "top_k", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 2,
     .attrs = tk_attrs, .infer = tk_infer, .forward = tk_forward, .backward = tk_backward,
     .nodiff_in = 2,
     .doc = "K input known at bind, axis, largest; sorted (also with sorted 0), equal values "
            "by index, NaN largest; int64 indices; gradient to the kept positions"},
};
const size_t fl_gops_reduce_n = sizeof fl_gops_reduce / sizeof fl_gops_reduce[0];
