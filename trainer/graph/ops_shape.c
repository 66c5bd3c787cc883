/* ops_shape.c - the ops that move data without arithmetic, and the shape
 * domain: Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Concat, Split,
 * Slice, Gather, Expand, Shape, Constant, ConstantOfShape, Range.
 *
 * Most take float or int64 data: on int64 they form the shape subgraphs
 * of exported models (Shape -> Gather -> Unsqueeze -> Concat -> Reshape),
 * which the engine evaluates when it binds shapes.  Inputs that decide an
 * output's shape (Reshape's shape, axes, Slice's starts/ends, Split's
 * split, Expand's shape...) must therefore be known then; a data-dependent
 * one is refused, naming the node.  Backward of the data movers moves the
 * gradient back (Gather scatter-adds into its table in index order). */
#include <config.h>

#include <string.h>

#include "ops_internal.h"

/* Element size of a tensor and its data pointer. */
static size_t esize(const fl_gtensor *t) { return t->dtype == FL_G_I64 ? 8 : 4; }
static void *edata(const fl_gtensor *t) {
  return t->dtype == FL_G_I64 ? (void *)t->idata : (void *)t->data;
}

static fl_status copy_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (x->n && edata(y) != edata(x)) memcpy(edata(y), edata(x), x->n * esize(x));
  return FL_OK;
}

static fl_status copy_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad || x->dtype != FL_G_F32) return FL_OK;
  fl_gput(x->grad, y->grad, x->n, fl_gacc(acc, 0));
  return FL_OK;
}

static fl_status need_data(const fl_gnode *n, const fl_gctx *c) {
  if (!fl_gin(n, c, 0)) return fl_gop_fail(n, FL_EINVAL, "input 0 is required");
  return FL_OK;
}

/* ------------------------------------------------------------- Flatten */

static fl_status flatten_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t axis;
  FL_TRY(fl_ga_int(n, "axis", 1, &axis));
  if (axis < -(int64_t)x->ndim || axis > x->ndim)
    return fl_gop_fail(n, FL_EINVAL, "axis %lld is out of range for rank %d", (long long)axis,
                       x->ndim);
  const int a = (int)(axis < 0 ? axis + x->ndim : axis);
  const int64_t ys[2] = {(int64_t)fl_gnumel(a, x->shape),
                         (int64_t)fl_gnumel(x->ndim - a, x->shape + a)};
  fl_gset_out(n, c, 0, x->dtype, 2, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* ------------------------------------------------------------- Reshape */

static fl_status reshape_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  const int64_t *v;
  size_t cnt;
  int64_t allowzero;
  FL_TRY(fl_gknown_i64(n, c, 1, "shape", &v, &cnt));
  FL_TRY(fl_ga_int(n, "allowzero", 0, &allowzero));
  if (cnt > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "shape has %zu dims", cnt);
  int64_t ys[FL_G_MAX_DIMS];
  int neg = -1;
  size_t known = 1;
  for (size_t d = 0; d < cnt; d++) {
    ys[d] = v[d];
    if (v[d] == 0 && !allowzero) {
      if ((int)d >= x->ndim)
        return fl_gop_fail(n, FL_EINVAL, "shape[%zu] = 0 copies a dim the input lacks", d);
      ys[d] = x->shape[d];
    } else if (v[d] == -1) {
      if (neg >= 0) return fl_gop_fail(n, FL_EINVAL, "shape has more than one -1");
      neg = (int)d;
      continue;
    } else if (v[d] < 0) {
      return fl_gop_fail(n, FL_EINVAL, "shape[%zu] = %lld is invalid", d, (long long)v[d]);
    }
    known *= (size_t)ys[d];
  }
  char sx[160], sy[160];
  if (neg >= 0) {
    if (known == 0 || x->n % known)
      return fl_gop_fail(n, FL_EINVAL, "input %s cannot take shape %s",
                         fl_gshape_str(x->ndim, x->shape, sx, sizeof sx),
                         fl_gshape_str((int)cnt, v, sy, sizeof sy));
    ys[neg] = (int64_t)(x->n / known);
  } else if (known != x->n) {
    return fl_gop_fail(n, FL_EINVAL, "input %s (%zu values) cannot take shape %s",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx), x->n,
                       fl_gshape_str((int)cnt, v, sy, sizeof sy));
  }
  fl_gset_out(n, c, 0, x->dtype, (int)cnt, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* ----------------------------------------------------- Squeeze, Unsqueeze */

/* Axes from input 1 (opset 13) or the "axes" attribute (older); *na = -1
 * when neither gives any. */
static fl_status axes_of(const fl_gnode *n, const fl_gctx *c, int64_t *av, int *na) {
  FL_TRY(fl_ga_ints(n, "axes", av, FL_G_MAX_DIMS, na));
  if (fl_gin(n, c, 1)) {
    if (*na >= 0)
      return fl_gop_fail(n, FL_EINVAL, "axes given both as an attribute and as an input");
    const int64_t *v;
    size_t cnt;
    FL_TRY(fl_gknown_i64(n, c, 1, "axes", &v, &cnt));
    if (cnt > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "too many axes (%zu)", cnt);
    if (cnt) memcpy(av, v, cnt * sizeof *av);
    *na = (int)cnt;
  }
  return FL_OK;
}

static fl_status squeeze_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t av[FL_G_MAX_DIMS];
  int na, drop[FL_G_MAX_DIMS] = {0};
  FL_TRY(axes_of(n, c, av, &na));
  if (na < 0) {
    for (int d = 0; d < x->ndim; d++) drop[d] = x->shape[d] == 1;
  } else {
    for (int i = 0; i < na; i++) {
      int a;
      FL_TRY(fl_gaxis(n, av[i], x->ndim, "axis", &a));
      if (x->shape[a] != 1)
        return fl_gop_fail(n, FL_EINVAL, "axis %d has size %lld, not 1", a,
                           (long long)x->shape[a]);
      drop[a] = 1;
    }
  }
  int64_t ys[FL_G_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < x->ndim; d++)
    if (!drop[d]) ys[nd++] = x->shape[d];
  fl_gset_out(n, c, 0, x->dtype, nd, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status unsqueeze_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t av[FL_G_MAX_DIMS];
  int na, ins[FL_G_MAX_DIMS] = {0};
  FL_TRY(axes_of(n, c, av, &na));
  if (na <= 0) return fl_gop_fail(n, FL_EINVAL, "axes are required");
  const int r = x->ndim + na;
  if (r > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "rank %d exceeds %d", r, FL_G_MAX_DIMS);
  for (int i = 0; i < na; i++) {
    int a;
    FL_TRY(fl_gaxis(n, av[i], r, "axis", &a));
    if (ins[a]) return fl_gop_fail(n, FL_EINVAL, "axis %d is given twice", a);
    ins[a] = 1;
  }
  int64_t ys[FL_G_MAX_DIMS];
  for (int d = 0, k = 0; d < r; d++) ys[d] = ins[d] ? 1 : x->shape[k++];
  fl_gset_out(n, c, 0, x->dtype, r, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* ----------------------------------------------------------- Transpose */

static fl_status perm_of(const fl_gnode *n, int r, int *perm) {
  int64_t pv[FL_G_MAX_DIMS];
  int np, seen[FL_G_MAX_DIMS] = {0};
  FL_TRY(fl_ga_ints(n, "perm", pv, FL_G_MAX_DIMS, &np));
  if (np < 0) {
    for (int d = 0; d < r; d++) perm[d] = r - 1 - d;
    return FL_OK;
  }
  if (np != r) return fl_gop_fail(n, FL_EINVAL, "perm has %d entries for rank %d", np, r);
  for (int d = 0; d < r; d++) {
    if (pv[d] < 0 || pv[d] >= r || seen[pv[d]])
      return fl_gop_fail(n, FL_EINVAL, "perm is not a permutation of 0..%d", r - 1);
    seen[pv[d]] = 1;
    perm[d] = (int)pv[d];
  }
  return FL_OK;
}

static fl_status transpose_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int perm[FL_G_MAX_DIMS];
  FL_TRY(perm_of(n, x->ndim, perm));
  int64_t ys[FL_G_MAX_DIMS];
  for (int d = 0; d < x->ndim; d++) ys[d] = x->shape[perm[d]];
  fl_gset_out(n, c, 0, x->dtype, x->ndim, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Walk the output of a transpose in order, a row (the last output dim) at
 * a time: for output element i, src is its input offset.  Forward: y[i] =
 * x[src]; backward: dx[src] (+)= dy[i].  A row whose input is contiguous
 * (the permutation keeps the last dim) runs CONTIG once with i and src at
 * its start (a copy or an add of inner elements). */
#define TRANSPOSE_WALK(BODY, CONTIG)                                                              \
  do {                                                                                    \
    int64_t xs[FL_G_MAX_DIMS], st[FL_G_MAX_DIMS], idx[FL_G_MAX_DIMS] = {0};               \
    int64_t s = 1;                                                                        \
    for (int d = r - 1; d >= 0; d--) xs[d] = s, s *= x->shape[d];                         \
    for (int d = 0; d < r; d++) st[d] = xs[perm[d]];                                      \
    const size_t inner = r ? (size_t)y->shape[r - 1] : 1;                                 \
    const size_t istep = r ? (size_t)st[r - 1] : 0;                                       \
    size_t base = 0;                                                                      \
    for (size_t row = 0; inner && row < total / inner; row++) {                           \
      if (istep == 1) { /* the last dim stays last: a contiguous run */                   \
        const size_t i = row * inner, src = base;                                         \
        CONTIG;                                                                           \
      } else {                                                                            \
        for (size_t k = 0, i = row * inner, src = base; k < inner; k++, i++, src += istep) \
          BODY;                                                                           \
      }                                                                                   \
      for (int d = r - 2; d >= 0; d--) {                                                  \
        base += (size_t)st[d];                                                            \
        if (++idx[d] < y->shape[d]) break;                                                \
        base -= (size_t)(st[d] * y->shape[d]);                                            \
        idx[d] = 0;                                                                       \
      }                                                                                   \
    }                                                                                     \
  } while (0)

static fl_status transpose_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  int perm[FL_G_MAX_DIMS];
  FL_TRY(perm_of(n, x->ndim, perm));
  const int r = x->ndim;
  const size_t total = y->n;
  if (x->dtype == FL_G_I64)
    TRANSPOSE_WALK(y->idata[i] = x->idata[src],
                   memcpy(y->idata + i, x->idata + src, inner * sizeof *y->idata));
  else
    TRANSPOSE_WALK(y->data[i] = x->data[src],
                   memcpy(y->data + i, x->data + src, inner * sizeof *y->data));
  return FL_OK;
}

static fl_status transpose_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  int perm[FL_G_MAX_DIMS];
  FL_TRY(perm_of(n, x->ndim, perm));
  const int r = x->ndim;
  const size_t total = y->n;
  float *dx = x->grad;
  const float *g = y->grad;
  if (fl_gacc(acc, 0))
    TRANSPOSE_WALK(dx[src] += g[i], fl_gput(dx + src, g + i, inner, 1));
  else
    TRANSPOSE_WALK(dx[src] = g[i], memcpy(dx + src, g + i, inner * sizeof *dx));
  return FL_OK;
}

/* -------------------------------------------------------------- Concat */

static fl_status concat_axis(const fl_gnode *n, const fl_gctx *c, int *axis) {
  const fl_gtensor *x0 = fl_gin(n, c, 0);
  int64_t a;
  FL_TRY(fl_ga_int(n, "axis", INT64_MIN, &a));
  if (a == INT64_MIN) return fl_gop_fail(n, FL_EINVAL, "attribute axis is required");
  return fl_gaxis(n, a, x0->ndim, "axis", axis);
}

static fl_status concat_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x0 = fl_gin(n, c, 0);
  int axis;
  FL_TRY(concat_axis(n, c, &axis));
  int64_t ys[FL_G_MAX_DIMS];
  memcpy(ys, x0->shape, (size_t)x0->ndim * sizeof *ys);
  ys[axis] = 0;
  char sa[160], sb[160];
  for (int i = 0; i < n->n_in; i++) {
    const fl_gtensor *t = fl_gin(n, c, i);
    if (!t) return fl_gop_fail(n, FL_EINVAL, "input %d is missing", i);
    int ok = t->dtype == x0->dtype && t->ndim == x0->ndim;
    for (int d = 0; ok && d < t->ndim; d++) ok = d == axis || t->shape[d] == x0->shape[d];
    if (!ok)
      return fl_gop_fail(n, FL_EINVAL, "input %d %s %s does not fit input 0 %s on axis %d", i,
                         t->name, fl_gshape_str(t->ndim, t->shape, sa, sizeof sa),
                         fl_gshape_str(x0->ndim, x0->shape, sb, sizeof sb), axis);
    ys[axis] += t->shape[axis];
  }
  fl_gset_out(n, c, 0, x0->dtype, x0->ndim, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Copy nbytes: a block of at most 64 bytes, whole 4-byte elements, in
 * fixed-size moves the compiler inlines (a concat of many small blocks,
 * such as embedding rows, would otherwise be a library call each). */
static void copy_block(char *d, const char *s, size_t nbytes) {
  size_t k = 0;
  if (nbytes > 64 || nbytes % 4) {
    memcpy(d, s, nbytes);
    return;
  }
  for (; k + 16 <= nbytes; k += 16) memcpy(d + k, s + k, 16);
  for (; k < nbytes; k += 4) memcpy(d + k, s + k, 4);
}

/* Blocks: outer = prod(dims before axis), each input contributes a block
 * of shape[axis]*inner per outer index. */
static fl_status concat_forward(fl_gnode *n, fl_gctx *c) {
  fl_gtensor *y = fl_gout(n, c, 0);
  int axis;
  FL_TRY(concat_axis(n, c, &axis));
  const size_t es = esize(y), outer = fl_gnumel(axis, y->shape);
  const size_t inner = fl_gnumel(y->ndim - axis - 1, y->shape + axis + 1);
  const size_t yrow = (size_t)y->shape[axis] * inner * es;
  char *yd = edata(y);
  size_t at = 0;
  for (int i = 0; i < n->n_in; i++) {
    const fl_gtensor *t = fl_gin(n, c, i);
    const size_t blk = (size_t)t->shape[axis] * inner * es;
    const char *td = edata(t);
    for (size_t o = 0; o < outer && blk; o++) copy_block(yd + o * yrow + at, td + o * blk, blk);
    at += blk;
  }
  return FL_OK;
}

static fl_status concat_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *y = fl_gout(n, c, 0);
  int axis;
  FL_TRY(concat_axis(n, c, &axis));
  const size_t outer = fl_gnumel(axis, y->shape);
  const size_t inner = fl_gnumel(y->ndim - axis - 1, y->shape + axis + 1);
  const size_t yrow = (size_t)y->shape[axis] * inner;
  size_t at = 0;
  for (int i = 0; i < n->n_in; i++) {
    const fl_gtensor *t = fl_gin(n, c, i);
    const size_t blk = (size_t)t->shape[axis] * inner;
    if (t->grad && !fl_gacc(acc, i))
      for (size_t o = 0; o < outer; o++)
        copy_block((char *)(t->grad + o * blk), (const char *)(y->grad + o * yrow + at),
                   blk * sizeof *t->grad);
    else if (t->grad)
      for (size_t o = 0; o < outer; o++)
        fl_gput(t->grad + o * blk, y->grad + o * yrow + at, blk, 1);
    at += blk;
  }
  return FL_OK;
}

/* --------------------------------------------------------------- Split */

static fl_status split_sizes(const fl_gnode *n, const fl_gctx *c, int *axis, int64_t *sz) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t a, num;
  FL_TRY(fl_ga_int(n, "axis", 0, &a));
  FL_TRY(fl_ga_int(n, "num_outputs", 0, &num));
  FL_TRY(fl_gaxis(n, a, x->ndim, "axis", axis));
  const int64_t dim = x->shape[*axis];
  int64_t av[FL_G_MAX_DIMS];
  int na;
  FL_TRY(fl_ga_ints(n, "split", av, FL_G_MAX_DIMS, &na));
  if (num && num != n->n_out)
    return fl_gop_fail(n, FL_EINVAL, "num_outputs %lld but %d outputs", (long long)num,
                       n->n_out);
  const int64_t *v = av;
  size_t cnt = na < 0 ? 0 : (size_t)na;
  if (fl_gin(n, c, 1)) {
    if (na >= 0)
      return fl_gop_fail(n, FL_EINVAL, "split given both as an attribute and as an input");
    FL_TRY(fl_gknown_i64(n, c, 1, "split", &v, &cnt));
    na = (int)cnt;
  }
  if (na < 0) { /* equal parts (the last one smaller, as opset 18 allows) */
    const int64_t part = (dim + n->n_out - 1) / n->n_out;
    int64_t left = dim;
    for (int o = 0; o < n->n_out; o++) {
      sz[o] = left < part ? left : part;
      left -= sz[o];
    }
    return FL_OK;
  }
  if (cnt != (size_t)n->n_out)
    return fl_gop_fail(n, FL_EINVAL, "split has %zu sizes for %d outputs", cnt, n->n_out);
  int64_t sum = 0;
  for (int o = 0; o < n->n_out; o++) {
    if (v[o] < 0) return fl_gop_fail(n, FL_EINVAL, "split size %lld < 0", (long long)v[o]);
    sz[o] = v[o];
    sum += v[o];
  }
  if (sum != dim)
    return fl_gop_fail(n, FL_EINVAL, "split sizes add up to %lld, the axis has %lld",
                       (long long)sum, (long long)dim);
  return FL_OK;
}

#define MAX_SPLIT 64

static fl_status split_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int axis;
  int64_t sz[MAX_SPLIT];
  FL_TRY(split_sizes(n, c, &axis, sz));
  int64_t ys[FL_G_MAX_DIMS];
  memcpy(ys, x->shape, (size_t)x->ndim * sizeof *ys);
  for (int o = 0; o < n->n_out; o++) {
    ys[axis] = sz[o];
    fl_gset_out(n, c, o, x->dtype, x->ndim, ys);
  }
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status split_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int axis;
  int64_t sz[MAX_SPLIT];
  FL_TRY(split_sizes(n, c, &axis, sz));
  const size_t es = esize(x), outer = fl_gnumel(axis, x->shape);
  const size_t inner = fl_gnumel(x->ndim - axis - 1, x->shape + axis + 1);
  const size_t xrow = (size_t)x->shape[axis] * inner * es;
  const char *xd = edata(x);
  size_t at = 0;
  for (int o = 0; o < n->n_out; o++) {
    fl_gtensor *y = fl_gout(n, c, o);
    const size_t blk = (size_t)sz[o] * inner * es;
    char *yd = edata(y);
    for (size_t r = 0; r < outer && blk; r++) memcpy(yd + r * blk, xd + r * xrow + at, blk);
    at += blk;
  }
  return FL_OK;
}

static fl_status split_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!x->grad) return FL_OK;
  int axis;
  int64_t sz[MAX_SPLIT];
  FL_TRY(split_sizes(n, c, &axis, sz));
  const size_t outer = fl_gnumel(axis, x->shape);
  const size_t inner = fl_gnumel(x->ndim - axis - 1, x->shape + axis + 1);
  const size_t xrow = (size_t)x->shape[axis] * inner;
  const int ax = fl_gacc(acc, 0);
  size_t at = 0;
  for (int o = 0; o < n->n_out; o++) {
    const fl_gtensor *y = fl_gout(n, c, o);
    const size_t blk = (size_t)sz[o] * inner;
    for (size_t r = 0; r < outer && blk; r++) {
      float *d = x->grad + r * xrow + at;
      if (y->grad)
        fl_gput(d, y->grad + r * blk, blk, ax);
      else if (!ax) /* an output nobody reads: no gradient from it */
        memset(d, 0, blk * sizeof *d);
    }
    at += blk;
  }
  return FL_OK;
}

/* --------------------------------------------------------------- Slice */

typedef struct slice_p {
  int64_t start[FL_G_MAX_DIMS], step[FL_G_MAX_DIMS], len[FL_G_MAX_DIMS];
} slice_p;

static fl_status slice_params(const fl_gnode *n, const fl_gctx *c, slice_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  const int64_t *st, *en, *ax = NULL, *sp = NULL;
  size_t ns, ne, na = 0, nsp = 0;
  FL_TRY(fl_gknown_i64(n, c, 1, "starts", &st, &ns));
  FL_TRY(fl_gknown_i64(n, c, 2, "ends", &en, &ne));
  if (fl_gin(n, c, 3)) FL_TRY(fl_gknown_i64(n, c, 3, "axes", &ax, &na));
  if (fl_gin(n, c, 4)) FL_TRY(fl_gknown_i64(n, c, 4, "steps", &sp, &nsp));
  if (ne != ns || (ax && na != ns) || (sp && nsp != ns) || ns > (size_t)x->ndim)
    return fl_gop_fail(n, FL_EINVAL, "starts, ends, axes and steps need the same count <= %d",
                       x->ndim);
  int seen[FL_G_MAX_DIMS] = {0};
  for (int d = 0; d < x->ndim; d++) p->start[d] = 0, p->step[d] = 1, p->len[d] = x->shape[d];
  for (size_t i = 0; i < ns; i++) {
    int a = (int)i;
    if (ax) FL_TRY(fl_gaxis(n, ax[i], x->ndim, "axis", &a));
    if (seen[a]) return fl_gop_fail(n, FL_EINVAL, "axis %d is sliced twice", a);
    seen[a] = 1;
    const int64_t dim = x->shape[a], s = sp ? sp[i] : 1;
    if (s == 0) return fl_gop_fail(n, FL_EINVAL, "step 0 on axis %d", a);
    int64_t b = st[i], e = en[i];
    if (b < 0) b += dim;
    if (e < 0 && e > INT64_MIN / 2) e += dim;
    if (s > 0) {
      b = b < 0 ? 0 : b > dim ? dim : b;
      e = e < 0 ? 0 : e > dim ? dim : e;
      p->len[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      p->len[a] = b > e ? (b - e + (-s) - 1) / (-s) : 0;
    }
    p->start[a] = b;
    p->step[a] = s;
  }
  return FL_OK;
}

static fl_status slice_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  const fl_gtensor *x = fl_gin(n, c, 0);
  slice_p p;
  FL_TRY(slice_params(n, c, &p));
  fl_gset_out(n, c, 0, x->dtype, x->ndim, p.len);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Walk the slice's output in order with the input offset src. */
#define SLICE_WALK(BODY)                                                                  \
  do {                                                                                    \
    int64_t xs[FL_G_MAX_DIMS], idx[FL_G_MAX_DIMS] = {0};                                  \
    int64_t s = 1, base = 0;                                                              \
    for (int d = r - 1; d >= 0; d--) xs[d] = s, s *= x->shape[d];                         \
    for (int d = 0; d < r; d++) base += p.start[d] * xs[d];                               \
    int64_t src = base;                                                                   \
    for (size_t i = 0; i < total; i++) {                                                  \
      BODY;                                                                               \
      for (int d = r - 1; d >= 0; d--) {                                                  \
        src += p.step[d] * xs[d];                                                         \
        if (++idx[d] < p.len[d]) break;                                                   \
        src -= p.step[d] * xs[d] * p.len[d];                                              \
        idx[d] = 0;                                                                       \
      }                                                                                   \
    }                                                                                     \
  } while (0)

static fl_status slice_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  slice_p p;
  FL_TRY(slice_params(n, c, &p));
  const int r = x->ndim;
  const size_t total = y->n;
  if (x->dtype == FL_G_I64)
    SLICE_WALK(y->idata[i] = x->idata[src]);
  else
    SLICE_WALK(y->data[i] = x->data[src]);
  return FL_OK;
}

static fl_status slice_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  slice_p p;
  FL_TRY(slice_params(n, c, &p));
  if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
  const int r = x->ndim;
  const size_t total = y->n;
  float *dx = x->grad;
  const float *g = y->grad;
  SLICE_WALK(dx[src] += g[i]);
  return FL_OK;
}

/* -------------------------------------------------------------- Gather */

static fl_status gather_axis(const fl_gnode *n, const fl_gctx *c, int *axis) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t a;
  FL_TRY(fl_ga_int(n, "axis", 0, &a));
  if (x->ndim == 0) return fl_gop_fail(n, FL_EINVAL, "data %s is a scalar", x->name);
  return fl_gaxis(n, a, x->ndim, "axis", axis);
}

static fl_status gather_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  FL_TRY(fl_gneed(n, c, 1, FL_G_I64));
  const fl_gtensor *x = fl_gin(n, c, 0), *ix = fl_gin(n, c, 1);
  int axis;
  FL_TRY(gather_axis(n, c, &axis));
  const int r = x->ndim - 1 + ix->ndim;
  if (r > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "rank %d exceeds %d", r, FL_G_MAX_DIMS);
  int64_t ys[FL_G_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < axis; d++) ys[k++] = x->shape[d];
  for (int d = 0; d < ix->ndim; d++) ys[k++] = ix->shape[d];
  for (int d = axis + 1; d < x->ndim; d++) ys[k++] = x->shape[d];
  fl_gset_out(n, c, 0, x->dtype, r, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Positions taken at a time: the indices' positions on the axis are made
 * (and checked) once per chunk of indices, not once per element moved. */
#define GATHER_CHUNK 512

/* Indices ix[j0 .. j0 + k) as positions on the axis of dim into p (negative
 * counts from the end); out of range is FL_EINVAL, logged. */
static fl_status gather_positions(const fl_gnode *n, const fl_gtensor *ix, int64_t dim,
                                  size_t j0, size_t k, size_t *p) {
  for (size_t j = 0; j < k; j++) {
    const int64_t v = ix->idata[j0 + j];
    if (v < -dim || v >= dim)
      return fl_gop_fail(n, FL_EINVAL, "index %lld (element %zu) is outside [-%lld, %lld)",
                         (long long)v, j0 + j, (long long)dim, (long long)dim);
    p[j] = (size_t)(v < 0 ? v + dim : v);
  }
  return FL_OK;
}

/* One chunk of single elements (inner 1): y[o, j0 + j] = x[o, p[j]], each
 * element moved as it is. */
#define GATHER_ELEMS(T, X, Y)                                              \
  for (size_t o = 0; o < outer; o++) {                                     \
    const T *xo = (X) + o * (size_t)dim;                                   \
    T *yo = (Y) + o * ni + j0;                                             \
    for (size_t j = 0; j < k; j++) yo[j] = xo[p[j]];                       \
  }

static fl_status gather_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *ix = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  int axis;
  size_t p[GATHER_CHUNK];
  FL_TRY(gather_axis(n, c, &axis));
  const int64_t dim = x->shape[axis];
  const size_t outer = fl_gnumel(axis, x->shape), ni = ix->n;
  const size_t inner = fl_gnumel(x->ndim - axis - 1, x->shape + axis + 1), es = esize(x);
  for (size_t j0 = 0; ni > GATHER_CHUNK && j0 < ni; j0 += GATHER_CHUNK) { /* all checked */
    const size_t k = ni - j0 < GATHER_CHUNK ? ni - j0 : GATHER_CHUNK; /* before a write */
    FL_TRY(gather_positions(n, ix, dim, j0, k, p));
  }
  const char *xd = edata(x);
  char *yd = edata(y);
  for (size_t j0 = 0; j0 < ni; j0 += GATHER_CHUNK) {
    const size_t k = ni - j0 < GATHER_CHUNK ? ni - j0 : GATHER_CHUNK;
    FL_TRY(gather_positions(n, ix, dim, j0, k, p));
    if (inner == 1 && x->dtype == FL_G_I64) { /* single elements (index_select of columns) */
      GATHER_ELEMS(int64_t, x->idata, y->idata)
    } else if (inner == 1) {
      GATHER_ELEMS(float, x->data, y->data)
    } else {
      for (size_t o = 0; o < outer; o++)
        for (size_t j = 0; j < k; j++)
          memcpy(yd + ((o * ni + j0 + j) * inner) * es,
                 xd + ((o * (size_t)dim + p[j]) * inner) * es, inner * es);
    }
  }
  return FL_OK;
}

static fl_status gather_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *ix = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  if (!x->grad || x->dtype != FL_G_F32) return FL_OK;
  int axis;
  size_t p[GATHER_CHUNK];
  FL_TRY(gather_axis(n, c, &axis));
  const int64_t dim = x->shape[axis];
  const size_t outer = fl_gnumel(axis, x->shape), ni = ix->n;
  const size_t inner = fl_gnumel(x->ndim - axis - 1, x->shape + axis + 1);
  if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
  /* Scatter-add in index order: repeated indices add up deterministically
   * (chunk after chunk of indices, for each outer in order: one index's
   * contributions come in the same order as one pass over all). */
  for (size_t j0 = 0; j0 < ni; j0 += GATHER_CHUNK) {
    const size_t k = ni - j0 < GATHER_CHUNK ? ni - j0 : GATHER_CHUNK;
    FL_TRY(gather_positions(n, ix, dim, j0, k, p));
    for (size_t o = 0; o < outer; o++) {
      float *d = x->grad + o * (size_t)dim * inner;
      const float *g = y->grad + (o * ni + j0) * inner;
      if (inner == 1) /* single elements (the forward's GATHER_ELEMS) */
        for (size_t j = 0; j < k; j++) d[p[j]] += g[j];
      else
        for (size_t j = 0; j < k; j++)
          for (size_t e = 0; e < inner; e++) d[p[j] * inner + e] += g[j * inner + e];
    }
  }
  return FL_OK;
}

/* -------------------------------------------------------------- Expand */

static fl_status expand_shape(const fl_gnode *n, const fl_gctx *c, int *nd, int64_t *ys) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  const int64_t *v;
  size_t cnt;
  FL_TRY(fl_gknown_i64(n, c, 1, "shape", &v, &cnt));
  char sx[160], sv[160];
  if (cnt > FL_G_MAX_DIMS ||
      fl_gbroadcast_shape(x->ndim, x->shape, (int)cnt, v, nd, ys) != FL_OK)
    return fl_gop_fail(n, FL_EINVAL, "input %s does not expand to %s",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx),
                       fl_gshape_str((int)(cnt > FL_G_MAX_DIMS ? 0 : cnt), v, sv, sizeof sv));
  return FL_OK;
}

static fl_status expand_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  int nd;
  int64_t ys[FL_G_MAX_DIMS];
  FL_TRY(expand_shape(n, c, &nd, ys));
  fl_gset_out(n, c, 0, fl_gin(n, c, 0)->dtype, nd, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static void expand_bc(const fl_gtensor *x, const fl_gtensor *y, fl_gbc *bc) {
  const int ranks[1] = {x->ndim};
  const int64_t *shapes[1] = {x->shape};
  fl_gbc_init(bc, y->ndim, y->shape, 1, ranks, shapes);
}

static fl_status expand_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gbc bc;
  expand_bc(x, y, &bc);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  const size_t s1 = bc.nd ? (size_t)bc.st[1][bc.nd - 1] : 0;
  for (size_t r = 0; r < rows; r++) {
    size_t off[4];
    fl_gbc_row(&bc, r, off);
    for (size_t i = 0; i < inner; i++) {
      if (x->dtype == FL_G_I64)
        y->idata[off[0] + i] = x->idata[off[1] + i * s1];
      else
        y->data[off[0] + i] = x->data[off[1] + i * s1];
    }
  }
  return FL_OK;
}

static fl_status expand_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  fl_gbc bc;
  expand_bc(x, y, &bc);
  fl_gbc_reduce(&bc, 1, y->grad, 1.0f, x->grad, x->n, fl_gacc(acc, 0));
  return FL_OK;
}

/* --------------------------------------------------------------- Shape */

static fl_status shape_range(const fl_gnode *n, const fl_gctx *c, int *b, int *e) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t s, en;
  FL_TRY(fl_ga_int(n, "start", 0, &s));
  FL_TRY(fl_ga_int(n, "end", INT64_MAX, &en));
  const int64_t r = x->ndim;
  if (s < 0) s += r;
  if (en < 0) en += r;
  s = s < 0 ? 0 : s > r ? r : s;
  en = en < 0 ? 0 : en > r ? r : en;
  *b = (int)s;
  *e = (int)(en > s ? en : s);
  return FL_OK;
}

static fl_status shape_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(need_data(n, c));
  int b, e;
  FL_TRY(shape_range(n, c, &b, &e));
  const int64_t len = e - b;
  fl_gset_out(n, c, 0, FL_G_I64, 1, &len);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status shape_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  int b, e;
  FL_TRY(shape_range(n, c, &b, &e));
  for (int d = b; d < e; d++) y->idata[d - b] = x->shape[d];
  return FL_OK;
}

/* ------------------------------------------------ Constant, ConstantOfShape */

/* The value of a Constant: exactly one of value (a float, int, floats or
 * ints attribute; "flotilla_dims" gives a tensor's shape when the builder
 * flattened one), value_float, value_floats, value_int, value_ints. */
static fl_status constant_value(const fl_gnode *n, const fl_gattr **va, int *nd, int64_t *dims) {
  static const char *const names[] = {"value", "value_float", "value_floats", "value_int",
                                      "value_ints"};
  const fl_gattr *found = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const fl_gattr *a = fl_gattr_find(n, names[i]);
    if (!a) continue;
    if (found) return fl_gop_fail(n, FL_EINVAL, "more than one value attribute");
    found = a;
  }
  if (!found)
    return fl_gop_fail(n, FL_EINVAL,
                       "needs one of value, value_float, value_floats, value_int, value_ints");
  const int scalar = found->kind == FL_GA_INT || found->kind == FL_GA_FLOAT;
  if (found->kind == FL_GA_STRING)
    return fl_gop_fail(n, FL_EINVAL, "string constants are not supported");
  const size_t count = scalar ? 1 : found->n;
  *nd = scalar ? 0 : 1;
  dims[0] = (int64_t)count;
  int cnt;
  FL_TRY(fl_ga_ints(n, "flotilla_dims", dims, FL_G_MAX_DIMS, &cnt));
  if (cnt >= 0) {
    if (fl_gnumel(cnt, dims) != count)
      return fl_gop_fail(n, FL_EINVAL, "flotilla_dims do not match the %zu values", count);
    *nd = cnt;
  }
  *va = found;
  return FL_OK;
}

static fl_status constant_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gattr *a;
  int nd;
  int64_t dims[FL_G_MAX_DIMS];
  FL_TRY(constant_value(n, &a, &nd, dims));
  const fl_gdtype dt = (a->kind == FL_GA_INT || a->kind == FL_GA_INTS) ? FL_G_I64 : FL_G_F32;
  fl_gset_out(n, c, 0, dt, nd, dims);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status constant_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gattr *a;
  int nd;
  int64_t dims[FL_G_MAX_DIMS];
  FL_TRY(constant_value(n, &a, &nd, dims));
  fl_gtensor *y = fl_gout(n, c, 0);
  switch (a->kind) {
  case FL_GA_INT: y->idata[0] = a->i; break;
  case FL_GA_FLOAT: y->data[0] = a->f; break;
  case FL_GA_INTS:
    if (a->n) memcpy(y->idata, a->ints, a->n * sizeof *y->idata);
    break;
  case FL_GA_FLOATS:
    if (a->n) memcpy(y->data, a->floats, a->n * sizeof *y->data);
    break;
  case FL_GA_STRING: break;
  }
  return FL_OK;
}

static fl_status cos_value(const fl_gnode *n, fl_gdtype *dt, float *f, int64_t *i) {
  const fl_gattr *a = fl_gattr_find(n, "value");
  *dt = FL_G_F32;
  *f = 0.0f;
  *i = 0;
  if (!a) return FL_OK;
  switch (a->kind) {
  case FL_GA_FLOAT: *f = a->f; return FL_OK;
  case FL_GA_INT: *dt = FL_G_I64, *i = a->i; return FL_OK;
  case FL_GA_FLOATS:
    if (a->n == 1) return *f = a->floats[0], FL_OK;
    break;
  case FL_GA_INTS:
    if (a->n == 1) return *dt = FL_G_I64, *i = a->ints[0], FL_OK;
    break;
  case FL_GA_STRING: break;
  }
  return fl_gop_fail(n, FL_EINVAL, "value must be one float or one int");
}

static fl_status cos_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const int64_t *v;
  size_t cnt;
  FL_TRY(fl_gknown_i64(n, c, 0, "shape", &v, &cnt));
  if (cnt > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "shape has %zu dims", cnt);
  for (size_t d = 0; d < cnt; d++)
    if (v[d] < 0) return fl_gop_fail(n, FL_EINVAL, "shape[%zu] = %lld < 0", d, (long long)v[d]);
  fl_gdtype dt;
  float f;
  int64_t i;
  FL_TRY(cos_value(n, &dt, &f, &i));
  fl_gset_out(n, c, 0, dt, (int)cnt, v);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status cos_forward(fl_gnode *n, fl_gctx *c) {
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gdtype dt;
  float f;
  int64_t i;
  FL_TRY(cos_value(n, &dt, &f, &i));
  for (size_t k = 0; k < y->n; k++) {
    if (dt == FL_G_I64)
      y->idata[k] = i;
    else
      y->data[k] = f;
  }
  return FL_OK;
}

/* --------------------------------------------------------------- Range */

static fl_status range_params(const fl_gnode *n, const fl_gctx *c, int64_t *v0, int64_t *dv,
                              int64_t *len) {
  int64_t s[3];
  static const char *const what[] = {"start", "limit", "delta"};
  for (int k = 0; k < 3; k++) {
    const int64_t *v;
    size_t cnt;
    FL_TRY(fl_gknown_i64(n, c, k, what[k], &v, &cnt));
    if (cnt != 1) return fl_gop_fail(n, FL_EINVAL, "%s must be a scalar", what[k]);
    s[k] = v[0];
  }
  if (s[2] == 0) return fl_gop_fail(n, FL_EINVAL, "delta is 0");
  const int64_t span = s[1] - s[0];
  int64_t l = s[2] > 0 ? (span + s[2] - 1) / s[2] : (span + s[2] + 1) / s[2];
  *len = l > 0 ? l : 0;
  *v0 = s[0];
  *dv = s[2];
  return FL_OK;
}

static fl_status range_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  int64_t v0, dv, len;
  FL_TRY(range_params(n, c, &v0, &dv, &len));
  fl_gset_out(n, c, 0, FL_G_I64, 1, &len);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status range_forward(fl_gnode *n, fl_gctx *c) {
  int64_t v0, dv, len;
  FL_TRY(range_params(n, c, &v0, &dv, &len));
  fl_gtensor *y = fl_gout(n, c, 0);
  for (int64_t k = 0; k < len; k++) y->idata[k] = v0 + k * dv;
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const no_attrs[] = {NULL};
static const char *const axis_attrs[] = {"axis", NULL};
static const char *const reshape_attrs[] = {"allowzero", NULL};
static const char *const axes_attrs[] = {"axes", NULL};
static const char *const perm_attrs[] = {"perm", NULL};
static const char *const split_attrs[] = {"axis", "split", "num_outputs", NULL};
static const char *const shape_attrs[] = {"start", "end", NULL};
static const char *const const_attrs[] = {"value",     "value_float", "value_floats",
                                          "value_int", "value_ints",  "flotilla_dims", NULL};
static const char *const cos_attrs[] = {"value", NULL};

const fl_gop fl_gops_shape[] = {
    {.type = "Flatten", .paddle = "flatten", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = axis_attrs, .infer = flatten_infer, .forward = copy_forward,
     .backward = copy_backward, .traits = FL_GOP_VIEW,
     .forward_cuda = fl_gcu_copy_forward, .backward_cuda = fl_gcu_copy_backward,
     .doc = "axis, negative too"},
    {.type = "Reshape", .paddle = "reshape2", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = reshape_attrs, .infer = reshape_infer, .forward = copy_forward,
     .backward = copy_backward, .traits = FL_GOP_VIEW,
     .forward_cuda = fl_gcu_copy_forward, .backward_cuda = fl_gcu_copy_backward,
     .nodiff_in = 2,
     .doc = "shape known at bind (0 copies a dim, -1 infers one), allowzero"},
    {.type = "Squeeze", .paddle = "squeeze2", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = axes_attrs, .infer = squeeze_infer, .forward = copy_forward,
     .backward = copy_backward, .traits = FL_GOP_VIEW,
     .forward_cuda = fl_gcu_copy_forward, .backward_cuda = fl_gcu_copy_backward,
     .nodiff_in = 2,
     .doc = "axes as an input known at bind, or all size-1 dims"},
    {.type = "Unsqueeze", .paddle = "unsqueeze2", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = axes_attrs, .infer = unsqueeze_infer, .forward = copy_forward,
     .backward = copy_backward, .traits = FL_GOP_VIEW,
     .forward_cuda = fl_gcu_copy_forward, .backward_cuda = fl_gcu_copy_backward,
     .nodiff_in = 2,
     .doc = "axes as an input known at bind"},
    {.type = "Transpose", .paddle = "transpose2", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = perm_attrs, .infer = transpose_infer, .forward = transpose_forward,
     .backward = transpose_backward,
     .doc = "perm (default: reversed dims)"},
    {.type = "Concat", .paddle = "concat", .min_in = 1, .max_in = 64, .min_out = 1,
     .max_out = 1, .attrs = axis_attrs, .infer = concat_infer, .forward = concat_forward,
     .backward = concat_backward,
     .doc = "float or int64, any axis"},
    {.type = "Split", .paddle = "split", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = MAX_SPLIT, .attrs = split_attrs, .infer = split_infer,
     .forward = split_forward, .backward = split_backward, .nodiff_in = 2,
     .doc = "split as an input known at bind or equal parts (num_outputs)"},
    {.type = "Slice", .paddle = "slice", .min_in = 3, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = slice_infer, .forward = slice_forward,
     .backward = slice_backward, .nodiff_in = 0x1e,
     .doc = "starts, ends, axes, steps known at bind; negative steps"},
    {.type = "Gather", .paddle = "gather", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = axis_attrs, .infer = gather_infer, .forward = gather_forward,
     .backward = gather_backward, .save_in = 2, .nodiff_in = 2, .traits = FL_GOP_ROW_READER,
     .doc = "any axis; int64 indices known at bind or computed from data (negative counted "
            "from the end); gradient scatter-added into the data"},
    {.type = "Expand", .paddle = "expand_v2", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = expand_infer, .forward = expand_forward,
     .backward = expand_backward, .nodiff_in = 2,
     .doc = "shape known at bind, numpy broadcasting; gradient summed over the broadcast "
            "dims"},
    {.type = "Shape", .paddle = "shape", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = shape_attrs, .infer = shape_infer, .forward = shape_forward, .nodiff_in = 1,
     .traits = FL_GOP_SHAPE_ONLY,
     .doc = "start, end; reads only the shape, so known at bind"},
    {.type = "Constant", .paddle = NULL, .min_in = 0, .max_in = 0, .min_out = 1, .max_out = 1,
     .attrs = const_attrs, .infer = constant_infer, .forward = constant_forward,
     .traits = FL_GOP_IMPORT_FOLD,
     .doc = "value (float, int64, int32 or bool tensor), value_float(s), value_int(s); "
            "folded into a constant by the importer"},
    {.type = "ConstantOfShape", .paddle = "fill_constant", .min_in = 1, .max_in = 1,
     .min_out = 1, .max_out = 1, .attrs = cos_attrs, .infer = cos_infer,
     .forward = cos_forward, .nodiff_in = 1, .traits = FL_GOP_TENSOR_VALUE,
     .doc = "shape known at bind; value a one-element float or int64 tensor"},
    {.type = "Range", .paddle = "range", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = range_infer, .forward = range_forward, .nodiff_in = 7,
     .doc = "int64 start, limit, delta known at bind"},
};
const size_t fl_gops_shape_n = sizeof fl_gops_shape / sizeof fl_gops_shape[0];
