/* ops_resize.c - the ops that change a tensor's extent by reading, for
 * each output element, input elements chosen dimension by dimension: Pad
 * (constant, reflect, edge; negative pads crop), Tile, and Resize (nearest
 * on any dims, linear on the last one or two).
 *
 * Pad, Tile and nearest Resize are one gather: along every dim d an index
 * map sends output index o to an input index, or to -1 (Pad's constant),
 * so y takes x at the mapped position and backward scatter-adds dy there
 * in output order (deterministic: Tile's copies and Resize's repeats sum
 * in that order).  The maps are int32 in the node's scratch, one entry per
 * output index of each dim, rebuilt from the shapes at every call.  Linear
 * Resize interpolates the last two dims (a 1-D resize is the case of an H
 * of 1) between two neighbours per dim with one weight each.
 *
 * What decides the output's shape (pads, repeats, sizes, scales) must be
 * known at bind: int64 inputs from the shape domain, Resize's float scales
 * a constant.  Resize's coordinate modes follow the ONNX definitions,
 * which are what PyTorch's F.interpolate computes for the modes it
 * exports (asymmetric nearest, half_pixel / align_corners linear). */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fl_names.h"
#include "ops_internal.h"

/* A name's row in a table of the string attribute's values, or the list of
 * the accepted ones in a logged refusal. */
typedef struct named {
  const char *name;
  int value;
} named;

static fl_status pick(const fl_gnode *n, const char *attr, const char *def, const named *rows,
                      size_t count, int *out) {
  const char *s;
  FL_TRY(fl_ga_str(n, attr, def, &s));
  const int hit = fl_rows_find(rows, count, sizeof *rows, s);
  if (hit >= 0) return *out = rows[hit].value, FL_OK;
  char list[256];
  size_t at = 0;
  list[0] = '\0';
  for (size_t i = 0; i < count; i++) {
    const int w = snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", rows[i].name);
    if (w > 0 && (size_t)w < sizeof list - at) at += (size_t)w;
  }
  return fl_gop_fail(n, FL_ENOTSUP, "%s \"%s\" is not supported (takes: %s)", attr, s, list);
}

/* ----------------------------------------------------------- index maps */

typedef struct imap {
  int r;
  int64_t xst[FL_G_MAX_DIMS];   /* input strides */
  int64_t ys[FL_G_MAX_DIMS];    /* output shape */
  int32_t *map[FL_G_MAX_DIMS];  /* map[d][o]: input index along d, -1 for the constant */
} imap;

/* Scratch floats the maps of an output shape take. */
static size_t imap_floats(int r, const int64_t *ys) {
  size_t s = 0;
  for (int d = 0; d < r; d++) s += (size_t)ys[d];
  return s;
}

/* Set m up for input shape xs and output shape ys, its maps in ws
 * (imap_floats entries); the caller fills them. */
static void imap_init(imap *m, int r, const int64_t *xs, const int64_t *ys, float *ws) {
  int32_t *p = (int32_t *)(void *)ws;
  int64_t s = 1;
  m->r = r;
  for (int d = r - 1; d >= 0; d--) m->xst[d] = s, s *= xs[d];
  for (int d = 0; d < r; d++) {
    m->ys[d] = ys[d];
    m->map[d] = p;
    p += ys[d];
  }
}

/* The input offset of the row (all dims but the last) at idx; -1 when a
 * dim maps to the constant. */
static int64_t imap_base(const imap *m, const int64_t *idx) {
  int64_t base = 0;
  for (int d = 0; d < m->r - 1; d++) {
    const int32_t j = m->map[d][idx[d]];
    if (j < 0) return -1;
    base += j * m->xst[d];
  }
  return base;
}

static void imap_next(const imap *m, int64_t *idx) {
  for (int d = m->r - 2; d >= 0; d--) {
    if (++idx[d] < m->ys[d]) return;
    idx[d] = 0;
  }
}

/* y = x gathered through the maps, cv where one maps to the constant. */
static void imap_gather(const imap *m, const float *x, float *y, size_t yn, float cv) {
  if (m->r == 0) {
    y[0] = x[0];
    return;
  }
  const int64_t inner = m->ys[m->r - 1];
  const int32_t *mi = m->map[m->r - 1];
  int64_t idx[FL_G_MAX_DIMS] = {0};
  for (size_t row = 0; inner && row < yn / (size_t)inner; row++, y += inner) {
    const int64_t base = imap_base(m, idx);
    for (int64_t k = 0; k < inner; k++) y[k] = (base < 0 || mi[k] < 0) ? cv : x[base + mi[k]];
    imap_next(m, idx);
  }
}

/* dx (+)= dy scattered back through the maps, in output order. */
static void imap_scatter(const imap *m, const float *dy, size_t yn, float *dx, size_t xn,
                         int acc) {
  if (!acc) memset(dx, 0, xn * sizeof *dx);
  if (m->r == 0) {
    dx[0] += dy[0];
    return;
  }
  const int64_t inner = m->ys[m->r - 1];
  const int32_t *mi = m->map[m->r - 1];
  int64_t idx[FL_G_MAX_DIMS] = {0};
  for (size_t row = 0; inner && row < yn / (size_t)inner; row++, dy += inner) {
    const int64_t base = imap_base(m, idx);
    for (int64_t k = 0; base >= 0 && k < inner; k++)
      if (mi[k] >= 0) dx[base + mi[k]] += dy[k];
    imap_next(m, idx);
  }
}

/* Output dims must fit the int32 maps. */
static fl_status imap_dims(const fl_gnode *n, int r, const int64_t *ys) {
  for (int d = 0; d < r; d++)
    if (ys[d] > INT32_MAX)
      return fl_gop_fail(n, FL_EINVAL, "output dim %d of size %lld is too large", d,
                         (long long)ys[d]);
  return FL_OK;
}

/* ----------------------------------------------------------------- Pad */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE };
static const named pad_modes[] = {
    {"constant", PAD_CONSTANT}, {"reflect", PAD_REFLECT}, {"edge", PAD_EDGE}};

typedef struct pad_p {
  int mode;
  int64_t begin[FL_G_MAX_DIMS];
  int64_t ys[FL_G_MAX_DIMS];
} pad_p;

static fl_status pad_params(const fl_gnode *n, const fl_gctx *c, pad_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0), *cv = fl_gin(n, c, 2);
  const int r = x->ndim;
  FL_TRY(pick(n, "mode", "constant", pad_modes, sizeof pad_modes / sizeof pad_modes[0],
              &p->mode));
  const int64_t *v;
  size_t cnt;
  FL_TRY(fl_gknown_i64(n, c, 1, "pads", &v, &cnt));
  if (cnt != 2 * (size_t)r)
    return fl_gop_fail(n, FL_EINVAL, "pads has %zu values, want 2 x rank = %d", cnt, 2 * r);
  for (int d = 0; d < r; d++) {
    p->begin[d] = v[d];
    p->ys[d] = x->shape[d] + v[d] + v[d + r];
    if (p->ys[d] < 0)
      return fl_gop_fail(n, FL_EINVAL, "pads %lld and %lld crop more than dim %d's %lld",
                         (long long)v[d], (long long)v[d + r], d, (long long)x->shape[d]);
    if (p->mode != PAD_CONSTANT && x->shape[d] == 0 && p->ys[d] > 0)
      return fl_gop_fail(n, FL_EINVAL, "mode %s cannot pad dim %d, which is empty",
                         pad_modes[p->mode].name, d);
  }
  if (cv && (cv->dtype != FL_G_F32 || cv->n > 1))
    return fl_gop_fail(n, FL_EINVAL, "constant_value %s must be one float", cv->name);
  return imap_dims(n, r, p->ys);
}

/* Input index along a dim of xd for output index o, -1 for the constant. */
static int32_t pad_src(int mode, int64_t o, int64_t begin, int64_t xd) {
  int64_t i = o - begin;
  if (i >= 0 && i < xd) return (int32_t)i;
  if (mode == PAD_CONSTANT) return -1;
  if (mode == PAD_EDGE || xd == 1) return (int32_t)(i < 0 ? 0 : xd - 1);
  const int64_t period = 2 * (xd - 1); /* reflect: the edge itself is not repeated */
  i %= period;
  if (i < 0) i += period;
  return (int32_t)(i < xd ? i : period - i);
}

static fl_status pad_map(fl_gnode *n, fl_gctx *c, imap *m) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  pad_p p;
  FL_TRY(pad_params(n, c, &p));
  imap_init(m, x->ndim, x->shape, p.ys, n->ws);
  for (int d = 0; d < x->ndim; d++)
    for (int64_t o = 0; o < p.ys[d]; o++)
      m->map[d][o] = pad_src(p.mode, o, p.begin[d], x->shape[d]);
  return FL_OK;
}

static fl_status pad_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  pad_p p;
  FL_TRY(pad_params(n, c, &p));
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, p.ys);
  *ws = imap_floats(x->ndim, p.ys);
  *saved = 0;
  return FL_OK;
}

static fl_status pad_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *cv = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (y->n == 0) return FL_OK;
  imap m;
  FL_TRY(pad_map(n, c, &m));
  imap_gather(&m, x->data, y->data, y->n, cv && cv->n ? cv->data[0] : 0.0f);
  return FL_OK;
}

/* The map a node's op builds for its bound shapes (pad_map, tile_map). */
typedef fl_status (*imap_make)(fl_gnode *n, fl_gctx *c, imap *m);

/* Backward of an op that only moves elements: the output's gradient
 * scattered back through the node's map (an empty output passes zeros). */
static fl_status imap_backward(fl_gnode *n, fl_gctx *c, unsigned acc, imap_make make) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  if (y->n == 0) {
    if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
    return FL_OK;
  }
  imap m;
  FL_TRY(make(n, c, &m));
  imap_scatter(&m, y->grad, y->n, x->grad, x->n, fl_gacc(acc, 0));
  return FL_OK;
}

static fl_status pad_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  return imap_backward(n, c, acc, pad_map);
}

/* ---------------------------------------------------------------- Tile */

static fl_status tile_shape(const fl_gnode *n, const fl_gctx *c, int64_t *ys) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  const int64_t *v;
  size_t cnt;
  FL_TRY(fl_gknown_i64(n, c, 1, "repeats", &v, &cnt));
  if (cnt != (size_t)x->ndim)
    return fl_gop_fail(n, FL_EINVAL, "repeats has %zu values for rank %d", cnt, x->ndim);
  for (int d = 0; d < x->ndim; d++) {
    if (v[d] < 0)
      return fl_gop_fail(n, FL_EINVAL, "repeats[%d] = %lld is negative", d, (long long)v[d]);
    if (v[d] && x->shape[d] > INT64_MAX / v[d])
      return fl_gop_fail(n, FL_EINVAL, "repeats[%d] = %lld overflows", d, (long long)v[d]);
    ys[d] = x->shape[d] * v[d];
  }
  return imap_dims(n, x->ndim, ys);
}

static fl_status tile_map(fl_gnode *n, fl_gctx *c, imap *m) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t ys[FL_G_MAX_DIMS];
  FL_TRY(tile_shape(n, c, ys));
  imap_init(m, x->ndim, x->shape, ys, n->ws);
  for (int d = 0; d < x->ndim; d++)
    for (int64_t o = 0; o < ys[d]; o++) m->map[d][o] = (int32_t)(o % x->shape[d]);
  return FL_OK;
}

static fl_status tile_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t ys[FL_G_MAX_DIMS];
  FL_TRY(tile_shape(n, c, ys));
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, ys);
  *ws = imap_floats(x->ndim, ys);
  *saved = 0;
  return FL_OK;
}

static fl_status tile_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (y->n == 0) return FL_OK;
  imap m;
  FL_TRY(tile_map(n, c, &m));
  imap_gather(&m, x->data, y->data, y->n, 0.0f);
  return FL_OK;
}

static fl_status tile_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  return imap_backward(n, c, acc, tile_map);
}

/* -------------------------------------------------------------- Resize */

enum { RZ_NEAREST, RZ_LINEAR };
static const named rz_modes[] = {{"nearest", RZ_NEAREST}, {"linear", RZ_LINEAR}};

enum { CT_HALF_PIXEL, CT_PYTORCH_HALF_PIXEL, CT_ALIGN_CORNERS, CT_ASYMMETRIC, CT_TF_HALF_NN };
static const named rz_coords[] = {{"half_pixel", CT_HALF_PIXEL},
                                  {"pytorch_half_pixel", CT_PYTORCH_HALF_PIXEL},
                                  {"align_corners", CT_ALIGN_CORNERS},
                                  {"asymmetric", CT_ASYMMETRIC},
                                  {"tf_half_pixel_for_nn", CT_TF_HALF_NN}};

enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL };
static const named rz_nearest[] = {{"round_prefer_floor", NM_ROUND_PREFER_FLOOR},
                                   {"round_prefer_ceil", NM_ROUND_PREFER_CEIL},
                                   {"floor", NM_FLOOR},
                                   {"ceil", NM_CEIL}};

#define N_OF(a) (sizeof(a) / sizeof(a)[0])

typedef struct rz_p {
  int mode, coord, nearest;
  float scale[FL_G_MAX_DIMS];   /* output / input along each dim */
  int64_t ys[FL_G_MAX_DIMS];
} rz_p;

/* Output shape and scales from the scales input (a constant). */
static fl_status rz_from_scales(const fl_gnode *n, const fl_gtensor *x, const fl_gtensor *s,
                                rz_p *p) {
  if (s->dtype != FL_G_F32 || s->kind != FL_GT_CONST || !s->data)
    return fl_gop_fail(n, FL_EINVAL,
                       "scales input %s must be a float constant (an initializer or a Constant); "
                       "a computed one is not supported (export with constant folding, or "
                       "give sizes)", s->name);
  if (s->n != (size_t)x->ndim)
    return fl_gop_fail(n, FL_EINVAL, "scales %s has %zu values for rank %d", s->name, s->n,
                       x->ndim);
  for (int d = 0; d < x->ndim; d++) {
    if (!(s->data[d] > 0.0f))
      return fl_gop_fail(n, FL_EINVAL, "scales[%d] = %g must be positive", d,
                         (double)s->data[d]);
    p->scale[d] = s->data[d];
    p->ys[d] = (int64_t)floorf((float)x->shape[d] * s->data[d]);
  }
  return FL_OK;
}

/* Output shape and scales from the sizes input (known at bind). */
static fl_status rz_from_sizes(const fl_gnode *n, const fl_gctx *c, const fl_gtensor *x,
                               rz_p *p) {
  const int64_t *v;
  size_t cnt;
  FL_TRY(fl_gknown_i64(n, c, 3, "sizes", &v, &cnt));
  if (cnt != (size_t)x->ndim)
    return fl_gop_fail(n, FL_EINVAL, "sizes has %zu values for rank %d", cnt, x->ndim);
  for (int d = 0; d < x->ndim; d++) {
    if (v[d] < 0 || (x->shape[d] == 0 && v[d] > 0))
      return fl_gop_fail(n, FL_EINVAL, "sizes[%d] = %lld does not fit input dim %lld", d,
                         (long long)v[d], (long long)x->shape[d]);
    p->ys[d] = v[d];
    p->scale[d] = x->shape[d] ? (float)v[d] / (float)x->shape[d] : 1.0f;
  }
  return FL_OK;
}

/* Linear interpolates the last two dims: the others must stay. */
static fl_status rz_linear_dims(const fl_gnode *n, const fl_gtensor *x, const rz_p *p) {
  for (int d = 0; d + 2 < x->ndim; d++)
    if (p->ys[d] != x->shape[d] || p->scale[d] != 1.0f)
      return fl_gop_fail(n, FL_ENOTSUP,
                         "mode linear resizes the last two dims only (dim %d of rank %d "
                         "changes: scale %g)", d, x->ndim, (double)p->scale[d]);
  if (x->ndim == 0) return fl_gop_fail(n, FL_EINVAL, "mode linear needs rank >= 1");
  return FL_OK;
}

static fl_status rz_params(const fl_gnode *n, const fl_gctx *c, rz_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 2), *sz = fl_gin(n, c, 3);
  FL_TRY(pick(n, "mode", "nearest", rz_modes, N_OF(rz_modes), &p->mode));
  FL_TRY(pick(n, "coordinate_transformation_mode", "half_pixel", rz_coords, N_OF(rz_coords),
              &p->coord));
  FL_TRY(pick(n, "nearest_mode", "round_prefer_floor", rz_nearest, N_OF(rz_nearest),
              &p->nearest));
  const int has_s = s && s->n > 0, has_sz = sz && sz->n > 0;
  if (has_s == has_sz)
    return fl_gop_fail(n, FL_EINVAL, "give exactly one of scales (input 2) and sizes (input 3)");
  if (has_s)
    FL_TRY(rz_from_scales(n, x, s, p));
  else
    FL_TRY(rz_from_sizes(n, c, x, p));
  if (p->mode == RZ_LINEAR) FL_TRY(rz_linear_dims(n, x, p));
  return imap_dims(n, x->ndim, p->ys);
}

/* The input coordinate of output index o along a dim (ONNX's formulas). */
static float rz_coord(int coord, float o, float scale, int64_t in, int64_t out) {
  switch (coord) {
  case CT_PYTORCH_HALF_PIXEL: return out > 1 ? (o + 0.5f) / scale - 0.5f : 0.0f;
  case CT_ALIGN_CORNERS:
    return out == 1 ? 0.0f : (float)(in - 1) / (float)(out - 1) * o;
  case CT_ASYMMETRIC: return o / scale;
  case CT_TF_HALF_NN: return (o + 0.5f) / scale;
  default: return (o + 0.5f) / scale - 0.5f; /* half_pixel */
  }
}

static int64_t rz_round(int mode, float v) {
  const float f = floorf(v);
  switch (mode) {
  case NM_FLOOR: return (int64_t)f;
  case NM_CEIL: return (int64_t)ceilf(v);
  case NM_ROUND_PREFER_CEIL: return (int64_t)(v - f == 0.5f ? f + 1.0f : roundf(v));
  default: return (int64_t)(v - f == 0.5f ? f : roundf(v));
  }
}

static fl_status rz_nearest_map(fl_gnode *n, fl_gctx *c, const rz_p *p, imap *m) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  imap_init(m, x->ndim, x->shape, p->ys, n->ws);
  for (int d = 0; d < x->ndim; d++)
    for (int64_t o = 0; o < p->ys[d]; o++) {
      const float v = rz_coord(p->coord, (float)o, p->scale[d], x->shape[d], p->ys[d]);
      const int64_t i = rz_round(p->nearest, v);
      m->map[d][o] = (int32_t)(i < 0 ? 0 : i >= x->shape[d] ? x->shape[d] - 1 : i);
    }
  return FL_OK;
}

/* Linear along one dim: neighbours i0, i1 and the weight l of i1. */
typedef struct lin1 {
  int64_t in, out;
  int32_t *i0, *i1;
  float *l;
} lin1;

/* The geometry of a linear resize as [outer, H, W] -> [outer, OH, OW],
 * its tables in ws (3 * (OH + OW) floats). */
typedef struct lin2 {
  size_t outer;
  lin1 h, w;
} lin2;

static void lin_table(const rz_p *p, int d, lin1 *t) {
  for (int64_t o = 0; o < t->out; o++) {
    float v = d < 0 ? 0.0f : rz_coord(p->coord, (float)o, p->scale[d], t->in, t->out);
    v = v < 0.0f ? 0.0f : v > (float)(t->in - 1) ? (float)(t->in - 1) : v;
    const int64_t a = (int64_t)v;
    t->i0[o] = (int32_t)a;
    t->i1[o] = (int32_t)(a + 1 < t->in ? a + 1 : a);
    t->l[o] = v - (float)a;
  }
}

static void lin_geometry(const fl_gtensor *x, const rz_p *p, float *ws, lin2 *g) {
  const int r = x->ndim;
  g->outer = r > 2 ? fl_gnumel(r - 2, x->shape) : 1;
  g->h.in = r >= 2 ? x->shape[r - 2] : 1;
  g->h.out = r >= 2 ? p->ys[r - 2] : 1;
  g->w.in = x->shape[r - 1];
  g->w.out = p->ys[r - 1];
  lin1 *t[2] = {&g->h, &g->w};
  for (int k = 0; k < 2; k++) {
    t[k]->i0 = (int32_t *)(void *)ws;
    t[k]->i1 = t[k]->i0 + t[k]->out;
    t[k]->l = ws + 2 * t[k]->out;
    ws += 3 * t[k]->out;
  }
  lin_table(p, r >= 2 ? r - 2 : -1, &g->h);
  lin_table(p, r - 1, &g->w);
}

static void lin_forward(const lin2 *g, const float *x, float *y) {
  const size_t xs = (size_t)(g->h.in * g->w.in);
  for (size_t o = 0; o < g->outer; o++, x += xs)
    for (int64_t i = 0; i < g->h.out; i++) {
      const float *r0 = x + g->h.i0[i] * g->w.in, *r1 = x + g->h.i1[i] * g->w.in;
      const float b = g->h.l[i], a = 1.0f - b;
      for (int64_t j = 0; j < g->w.out; j++, y++) {
        const int32_t j0 = g->w.i0[j], j1 = g->w.i1[j];
        const float lw = g->w.l[j], kw = 1.0f - lw;
        *y = a * (kw * r0[j0] + lw * r0[j1]) + b * (kw * r1[j0] + lw * r1[j1]);
      }
    }
}

static void lin_backward(const lin2 *g, const float *dy, float *dx) {
  const size_t xs = (size_t)(g->h.in * g->w.in);
  for (size_t o = 0; o < g->outer; o++, dx += xs)
    for (int64_t i = 0; i < g->h.out; i++) {
      float *r0 = dx + g->h.i0[i] * g->w.in, *r1 = dx + g->h.i1[i] * g->w.in;
      const float b = g->h.l[i], a = 1.0f - b;
      for (int64_t j = 0; j < g->w.out; j++, dy++) {
        const int32_t j0 = g->w.i0[j], j1 = g->w.i1[j];
        const float lw = g->w.l[j], kw = 1.0f - lw, ga = a * *dy, gb = b * *dy;
        r0[j0] += kw * ga;
        r0[j1] += lw * ga;
        r1[j0] += kw * gb;
        r1[j1] += lw * gb;
      }
    }
}

static fl_status resize_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  rz_p p;
  FL_TRY(rz_params(n, c, &p));
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, p.ys);
  const int r = x->ndim;
  *ws = p.mode == RZ_LINEAR ? 3 * (size_t)(p.ys[r - 1] + (r >= 2 ? p.ys[r - 2] : 1))
                            : imap_floats(r, p.ys);
  *saved = 0;
  return FL_OK;
}

static fl_status resize_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (y->n == 0) return FL_OK;
  rz_p p;
  FL_TRY(rz_params(n, c, &p));
  if (p.mode == RZ_LINEAR) {
    lin2 g;
    lin_geometry(x, &p, n->ws, &g);
    lin_forward(&g, x->data, y->data);
    return FL_OK;
  }
  imap m;
  FL_TRY(rz_nearest_map(n, c, &p, &m));
  imap_gather(&m, x->data, y->data, y->n, 0.0f);
  return FL_OK;
}

static fl_status resize_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  if (y->n == 0) {
    if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
    return FL_OK;
  }
  rz_p p;
  FL_TRY(rz_params(n, c, &p));
  if (p.mode == RZ_LINEAR) {
    lin2 g;
    lin_geometry(x, &p, n->ws, &g);
    if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
    lin_backward(&g, y->grad, x->grad);
    return FL_OK;
  }
  imap m;
  FL_TRY(rz_nearest_map(n, c, &p, &m));
  imap_scatter(&m, y->grad, y->n, x->grad, x->n, fl_gacc(acc, 0));
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const no_attrs[] = {NULL};
static const char *const pad_attrs[] = {"mode", NULL};
static const char *const resize_attrs[] = {"mode", "coordinate_transformation_mode",
                                           "nearest_mode", "cubic_coeff_a", "exclude_outside",
                                           "extrapolation_value", NULL};

const fl_gop fl_gops_resize[] = {
    {.type = "Pad", .paddle = "pad3d", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = pad_attrs, .infer = pad_infer, .forward = pad_forward, .backward = pad_backward,
     .nodiff_in = 6,
     .doc = "float data; pads (int64, known at bind; negative pads crop) and constant_value as "
            "inputs; mode constant, reflect or edge (wrap and the axes input refused)"},
    {.type = "Tile", .paddle = "tile", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = tile_infer, .forward = tile_forward,
     .backward = tile_backward, .nodiff_in = 2,
     .doc = "float data; repeats (int64) known at bind; the gradient sums the copies"},
    {.type = "Resize", .paddle = NULL, .min_in = 1, .max_in = 4, .min_out = 1,
     .max_out = 1, .attrs = resize_attrs, .infer = resize_infer, .forward = resize_forward,
     .backward = resize_backward, .nodiff_in = 0xe,
     .doc = "mode nearest (any dims; nearest_mode floor, ceil, round_prefer_floor/ceil) or "
            "linear (the last one or two dims); coordinate modes half_pixel, "
            "pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn; scales (a "
            "constant) or sizes; cubic and tf_crop_and_resize refused"},
};
const size_t fl_gops_resize_n = sizeof fl_gops_resize / sizeof fl_gops_resize[0];
