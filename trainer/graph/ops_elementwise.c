/* ops_elementwise.c - the element-wise ops of the graph engine: the
 * broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow; Add/Sub/Mul/Div
 * also on int64 for shape expressions), the activations (Relu, LeakyRelu,
 * Sigmoid, Tanh, Erf), Neg, Sqrt, Exp, Log, the comparisons (Equal, Less,
 * Greater, Not, Where; booleans as int64 0/1), Identity, Cast and Dropout.
 *
 * Backward reduces a broadcast input's gradient over the broadcast
 * positions in output order, so results are deterministic.  Dropout's mask
 * is a hash of (seed, step, node, element): backward and a recompute
 * regenerate it instead of keeping it. */
#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "ops_internal.h"

/* ------------------------------------------------------ binary, infer */

enum bin_kind { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_POW };

/* The row's variant (Add and its Relu twin: BIN_ADD, 0). */
static enum bin_kind bin_kind_of(const fl_gnode *n) { return (enum bin_kind)n->op->variant; }

/* Add on the gpu (see add_gpu_layout). */
typedef struct add_gpu {
  int big;               /* input index of the full-shape operand */
  int same;              /* both have the output's shape */
  size_t N, C, inner;
} add_gpu;
static fl_status add_gpu_layout(const fl_gnode *n, const fl_gctx *c, add_gpu *g);

static fl_status binary_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  if (!a || !b) return fl_gop_fail(n, FL_EINVAL, "needs two inputs");
  if (a->dtype != b->dtype)
    return fl_gop_fail(n, FL_EINVAL, "inputs %s and %s have different element types", a->name,
                       b->name);
  if (a->dtype == FL_G_I64 && bin_kind_of(n) == BIN_POW)
    return fl_gop_fail(n, FL_EINVAL, "int64 Pow is not supported (float only)");
  int nd;
  int64_t shape[FL_G_MAX_DIMS];
  if (fl_gbroadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shape) != FL_OK) {
    char sa[160], sb[160];
    return fl_gop_fail(n, FL_EINVAL, "shapes %s (%s) and %s (%s) do not broadcast",
                       fl_gshape_str(a->ndim, a->shape, sa, sizeof sa), a->name,
                       fl_gshape_str(b->ndim, b->shape, sb, sizeof sb), b->name);
  }
  fl_gset_out(n, c, 0, a->dtype, nd, shape);
  if (c->stream && bin_kind_of(n) == BIN_ADD) { /* a gpu bind: refuse what it lacks */
    add_gpu g;
    FL_TRY(add_gpu_layout(n, c, &g));
  }
  /* A gpu graph's Add: scratch for a bias gradient that accumulates. */
  *ws = c->stream ? (a->n < b->n ? a->n : b->n) : 0;
  *saved = 0;
  return FL_OK;
}

static void bc_binary(const fl_gnode *n, const fl_gctx *c, fl_gbc *bc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  const int ranks[2] = {a->ndim, b->ndim};
  const int64_t *shapes[2] = {a->shape, b->shape};
  fl_gbc_init(bc, y->ndim, y->shape, 2, ranks, shapes);
}

/* ---------------------------------------------------- binary, forward */

#define BIN_ROWS(T, EXPR)                                                                 \
  do {                                                                                    \
    for (size_t r = 0; r < rows; r++) {                                                   \
      size_t off[4];                                                                      \
      fl_gbc_row(&bc, r, off);                                                            \
      const T *pa = A + off[1], *pb = B + off[2];                                         \
      T *py = Y + off[0];                                                                 \
      if (sa && sb)                                                                       \
        for (size_t i = 0; i < inner; i++) {                                              \
          const T u = pa[i], v = pb[i];                                                   \
          py[i] = (EXPR);                                                                 \
        }                                                                                 \
      else if (sa)                                                                        \
        for (size_t i = 0; i < inner; i++) {                                              \
          const T u = pa[i], v = pb[0];                                                   \
          py[i] = (EXPR);                                                                 \
        }                                                                                 \
      else if (sb)                                                                        \
        for (size_t i = 0; i < inner; i++) {                                              \
          const T u = pa[0], v = pb[i];                                                   \
          py[i] = (EXPR);                                                                 \
        }                                                                                 \
      else                                                                                \
        for (size_t i = 0; i < inner; i++) {                                              \
          const T u = pa[0], v = pb[0];                                                   \
          py[i] = (EXPR);                                                                 \
        }                                                                                 \
    }                                                                                     \
  } while (0)

/* One row of a float Add/Sub/Mul/Div: py[i] = pa[i*sa] op pb[i*sb] (sa, sb
 * 0 or 1: a broadcast operand repeats its one value).  With SSE2 four at a
 * time: the same single IEEE operation per element as the scalar loop. */
static void bin_row_f32(enum bin_kind k, const float *pa, int sa, const float *pb, int sb,
                        float *py, size_t len) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 a0 = _mm_set1_ps(pa[0]), b0 = _mm_set1_ps(pb[0]);
  for (; i + 4 <= len; i += 4) {
    const __m128 u = sa ? _mm_loadu_ps(pa + i) : a0, v = sb ? _mm_loadu_ps(pb + i) : b0;
    __m128 r;
    switch (k) {
    case BIN_ADD: r = _mm_add_ps(u, v); break;
    case BIN_SUB: r = _mm_sub_ps(u, v); break;
    case BIN_MUL: r = _mm_mul_ps(u, v); break;
    default: r = _mm_div_ps(u, v); break;
    }
    _mm_storeu_ps(py + i, r);
  }
#endif
  for (; i < len; i++) {
    const float u = pa[sa ? i : 0], v = pb[sb ? i : 0];
    switch (k) {
    case BIN_ADD: py[i] = u + v; break;
    case BIN_SUB: py[i] = u - v; break;
    case BIN_MUL: py[i] = u * v; break;
    default: py[i] = u / v; break;
    }
  }
}

static fl_status binary_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gbc bc;
  bc_binary(n, c, &bc);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  const int sa = bc.nd && bc.st[1][bc.nd - 1], sb = bc.nd && bc.st[2][bc.nd - 1];
  const enum bin_kind k = bin_kind_of(n);
  if (a->dtype == FL_G_I64) {
    const int64_t *A = a->idata, *B = b->idata;
    int64_t *Y = y->idata;
    if (k == BIN_DIV) /* refuse a zero divisor before writing anything */
      for (size_t i = 0; i < b->n; i++)
        if (B[i] == 0) return fl_gop_fail(n, FL_EINVAL, "int64 division by zero");
    switch (k) {
    case BIN_ADD: BIN_ROWS(int64_t, u + v); break;
    case BIN_SUB: BIN_ROWS(int64_t, u - v); break;
    case BIN_MUL: BIN_ROWS(int64_t, u * v); break;
    default: BIN_ROWS(int64_t, u / v); break;
    }
    return FL_OK;
  }
  const float *A = a->data, *B = b->data;
  float *Y = y->data;
  if (k == BIN_POW) {
    BIN_ROWS(float, powf(u, v));
    return FL_OK;
  }
  for (size_t r = 0; r < rows; r++) {
    size_t off[4];
    fl_gbc_row(&bc, r, off);
    bin_row_f32(k, A + off[1], sa, B + off[2], sb, Y + off[0], inner);
  }
  return FL_OK;
}

/* --------------------------------------------------- binary, backward */

/* dst (operand k's shape) = (accum ? dst : 0) + sum over broadcast of
 * EXPR, where g, u (= a), v (= b) and o (= y) are the output position's
 * values. */
#define BIN_GRAD(EXPR)                                                                    \
  do {                                                                                    \
    if (!accum) memset(dst, 0, dst_n * sizeof *dst);                                      \
    for (size_t r = 0; r < rows; r++) {                                                   \
      size_t off[4];                                                                      \
      fl_gbc_row(&bc, r, off);                                                            \
      const float *pg = G + off[0], *pa = A + off[1], *pb = B + off[2];                   \
      const float *po = Y ? Y + off[0] : NULL;                                            \
      float *pd = dst + off[k];                                                           \
      for (size_t i = 0; i < inner; i++) {                                                \
        const float g = pg[i], u = pa[i * sa], v = pb[i * sb];                            \
        const float o = po ? po[i] : 0.0f;                                                \
        (void)u, (void)v, (void)o;                                                        \
        pd[i * sd] += (EXPR);                                                             \
      }                                                                                   \
    }                                                                                     \
  } while (0)

/* d[i] += s[i], i < len; with SSE2 four at a time (the scalar adds' bits,
 * so the same as fl_gbc_reduce's row loop). */
static void add_row_f32(float *d, const float *s, size_t len) {
  size_t i = 0;
#ifdef __SSE2__
  for (; i + 4 <= len; i += 4)
    _mm_storeu_ps(d + i, _mm_add_ps(_mm_loadu_ps(d + i), _mm_loadu_ps(s + i)));
#endif
  for (; i < len; i++) d[i] += s[i];
}

/* One row of Mul's (div 0) or Div's first operand's (div 1) gradient:
 * pd[i] = (add ? pd[i] : 0) + pg[i] op pv[i*sv] (sv 0 or 1), four at a
 * time with SSE2 (the scalar expression's one multiply or divide, then the
 * add).  !add stores the term itself: +0 + t is t but for t = -0. */
static void bin_grad_row(float *pd, const float *pg, const float *pv, size_t sv, int div,
                         int add, size_t len) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 v0 = _mm_set1_ps(pv[0]);
  for (; i + 4 <= len; i += 4) {
    const __m128 g = _mm_loadu_ps(pg + i), v = sv ? _mm_loadu_ps(pv + i) : v0;
    const __m128 t = div ? _mm_div_ps(g, v) : _mm_mul_ps(g, v);
    _mm_storeu_ps(pd + i, add ? _mm_add_ps(_mm_loadu_ps(pd + i), t) : t);
  }
#endif
  for (; i < len; i++) {
    const float t = div ? pg[i] / pv[i * sv] : pg[i] * pv[i * sv];
    pd[i] = add ? pd[i] + t : t;
  }
}

static fl_status binary_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  if (y->dtype != FL_G_F32) return FL_OK;
  const enum bin_kind kind = bin_kind_of(n);
  fl_gbc bc;
  bc_binary(n, c, &bc);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  const size_t sa = bc.nd ? (size_t)bc.st[1][bc.nd - 1] : 0;
  const size_t sb = bc.nd ? (size_t)bc.st[2][bc.nd - 1] : 0;
  const float *G = y->grad, *A = a->data, *B = b->data;
  const float *Y = (kind == BIN_POW) ? y->data : NULL;
  for (int k = 1; k <= 2; k++) {
    const fl_gtensor *in = k == 1 ? a : b;
    float *dst = in->grad;
    if (!dst) continue;
    const int accum = fl_gacc(acc, k - 1);
    const size_t dst_n = in->n, sd = bc.nd ? (size_t)bc.st[k][bc.nd - 1] : 0;
    const int same = in->n == y->n;
    switch (kind) {
    case BIN_ADD:
    case BIN_SUB: {
      const float s = (kind == BIN_SUB && k == 2) ? -1.0f : 1.0f;
      if (same && s == 1.0f) {
        fl_gput(dst, G, dst_n, accum);
      } else if (s == 1.0f && sd == 1) { /* a bias: rows added in output order */
        if (!accum) memset(dst, 0, dst_n * sizeof *dst);
        for (size_t r = 0; r < rows; r++) {
          size_t off[4];
          fl_gbc_row(&bc, r, off);
          add_row_f32(dst + off[k], G + off[0], inner);
        }
      } else {
        fl_gbc_reduce(&bc, k, G, s, dst, dst_n, accum);
      }
      break;
    }
    case BIN_MUL:
    case BIN_DIV:
      if (sd == 1 && (kind == BIN_MUL || k == 1)) { /* dst contiguous in its rows */
        const size_t so = k == 1 ? sb : sa;       /* the other operand's stride */
        const float *O = k == 1 ? B : A;
        if (!accum && !same) memset(dst, 0, dst_n * sizeof *dst);
        for (size_t r = 0; r < rows; r++) {
          size_t off[4];
          fl_gbc_row(&bc, r, off);
          bin_grad_row(dst + off[k], G + off[0], O + off[3 - k], so, kind == BIN_DIV,
                       accum || !same, inner);
        }
      } else if (kind == BIN_MUL) {
        if (k == 1)
          BIN_GRAD(g * v);
        else
          BIN_GRAD(g * u);
      } else if (k == 1)
        BIN_GRAD(g / v);
      else
        BIN_GRAD(-g * (u / v) / v);
      break;
    case BIN_POW:
      /* d/du u^v = v u^(v-1); d/dv u^v = u^v ln u, taken as 0 where u <= 0
       * (no real logarithm; the exponent's gradient there is undefined). */
      if (k == 1)
        BIN_GRAD(g * v * powf(u, v - 1.0f));
      else
        BIN_GRAD(u > 0.0f ? g * o * logf(u) : 0.0f);
      break;
    }
  }
  return FL_OK;
}

/* Add on the gpu: two tensors of the output's shape, or one of them and a
 * bias: a tensor that, aligned to the output, equals it on a run of
 * consecutive dims [d0, d1) and is 1 elsewhere (Linear's [C] on [N, C] or
 * [B, T, C], a conv bias [1, C, 1, 1] on [N, C, H, W]); then y[n, c, s] =
 * big[n, c, s] + bias[c] with n over dims before d0 and s after d1. */
static fl_status add_gpu_layout(const fl_gnode *n, const fl_gctx *c, add_gpu *g) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  if (a->dtype != FL_G_F32)
    return fl_gop_fail(n, FL_ENOTSUP, "int64 data on the gpu is not supported");
  g->same = a->n == y->n && b->n == y->n;
  g->big = a->n == y->n ? 0 : 1;
  if (g->same) return FL_OK;
  const fl_gtensor *big = g->big ? b : a, *sm = g->big ? a : b;
  int ok = big->n == y->n && big->ndim == y->ndim && sm->ndim <= y->ndim;
  int64_t ss[FL_G_MAX_DIMS];
  int d0 = -1, d1 = -1;
  for (int d = 0; ok && d < y->ndim; d++) {
    const int sd = d - (y->ndim - sm->ndim);
    ss[d] = sd >= 0 ? sm->shape[sd] : 1;
    if (ss[d] != 1) {
      if (d0 < 0) d0 = d;
      ok = d1 < 0 || d1 == d; /* one run of kept dims */
      d1 = d + 1;
    }
  }
  if (ok && d0 >= 0)
    for (int d = d0; d < d1; d++) ok = ok && ss[d] == y->shape[d];
  if (!ok)
    return fl_gop_fail(n, FL_ENOTSUP,
                       "on the gpu Add takes two tensors of one shape or a tensor and a bias "
                       "broadcast along leading and trailing dims");
  if (d0 < 0) d0 = d1 = y->ndim; /* a scalar: one channel */
  g->N = fl_gnumel(d0, y->shape);
  g->C = fl_gnumel(d1 - d0, y->shape + d0);
  g->inner = fl_gnumel(y->ndim - d1, y->shape + d1);
  return FL_OK;
}

static fl_status add_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  add_gpu g;
  FL_TRY(add_gpu_layout(n, c, &g));
  if (y->n == 0) return FL_OK;
  const fl_gtensor *big = g.big ? b : a, *sm = g.big ? a : b;
  FL_TRY(fl_gcu_put(n, c, y->data, big->data, y->n, 0));
  if (g.same) return fl_gcu_put(n, c, y->data, sm->data, y->n, 1);
  return fl_gkernel(n, fl_bias_forward_cuda(y->data, sm->data, g.N, g.C, g.inner, c->stream),
                    "bias");
}

static fl_status add_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *y = fl_gout(n, c, 0);
  add_gpu g;
  FL_TRY(add_gpu_layout(n, c, &g));
  if (y->n == 0) return FL_OK;
  for (int i = 0; i < 2; i++) {
    const fl_gtensor *t = fl_gin(n, c, i);
    if (!t->grad) continue;
    const int ai = fl_gacc(acc, i);
    if (g.same || i == g.big) {
      FL_TRY(fl_gcu_put(n, c, t->grad, y->grad, y->n, ai));
      continue;
    }
    if (ai) FL_TRY(fl_gcu_need_ws(n, g.C));
    float *k = ai ? n->ws : t->grad;
    FL_TRY(fl_gkernel(n, fl_bias_backward_cuda(y->grad, k, g.N, g.C, g.inner, c->stream),
                      "bias backward"));
    if (ai) FL_TRY(fl_gcu_put(n, c, t->grad, k, g.C, 1));
  }
  return FL_OK;
}

/* ---------------------------------------------------------- Add + Relu */

/* Add followed by a Relu that alone reads its sum, as one node: the
 * rewrite of graph_fuse.c gives the Add node this op, which keeps the type
 * "Add" (messages name the node and ONNX type; the export writes the
 * imported graph's own nodes).  y = relu(a + b) in one pass when a and b
 * have y's shape (the separate ops' bits: one add, then y > 0 ? y : +0),
 * else Add's rows then Relu in place.  Backward turns dy into the
 * pre-activation gradient in place (an output grad is the op's scratch,
 * docs/DESIGN.md section 9), then runs Add's.  No CUDA twins: the rewrite leaves gpu
 * graphs alone. */
static fl_status add_relu_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(binary_infer(n, c, ws, saved));
  if (fl_gout(n, c, 0)->dtype != FL_G_F32)
    return fl_gop_fail(n, FL_EINVAL, "Add followed by Relu takes float tensors");
  return FL_OK;
}

/* y[i] = relu(a[i] + b[i]), i < len; SSE2 as relu_inplace of fl_layers. */
static void add_relu_row(const float *a, const float *b, float *y, size_t len) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= len; i += 4) {
    const __m128 v = _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
    _mm_storeu_ps(y + i, _mm_and_ps(_mm_cmpgt_ps(v, zero), v));
  }
#endif
  for (; i < len; i++) {
    const float v = a[i] + b[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

static fl_status add_relu_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (y->n == 0) return FL_OK;
  if (a->n == y->n && b->n == y->n) {
    add_relu_row(a->data, b->data, y->data, y->n);
    return FL_OK;
  }
  FL_TRY(binary_forward(n, c));
  return fl_gkernel(n, fl_act_forward(FL_ACT_RELU, y->data, y->data, y->n), "relu");
}

/* d[i] = t or d[i] += t (add), t = y[i] > 0 ? g[i] : +0, for each of d0
 * and d1 that is set, in that order (d0 == d1 is fine): Relu's gradient
 * then Add's copies, in one pass. */
static void add_relu_grad(const float *y, const float *g, float *d0, int add0, float *d1,
                          int add1, size_t len) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= len; i += 4) {
    const __m128 t = _mm_and_ps(_mm_cmpgt_ps(_mm_loadu_ps(y + i), zero), _mm_loadu_ps(g + i));
    if (d0) _mm_storeu_ps(d0 + i, add0 ? _mm_add_ps(_mm_loadu_ps(d0 + i), t) : t);
    if (d1) _mm_storeu_ps(d1 + i, add1 ? _mm_add_ps(_mm_loadu_ps(d1 + i), t) : t);
  }
#endif
  for (; i < len; i++) {
    const float t = y[i] > 0.0f ? g[i] : 0.0f;
    if (d0) d0[i] = add0 ? d0[i] + t : t;
    if (d1) d1[i] = add1 ? d1[i] + t : t;
  }
}

static fl_status add_relu_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  if (y->n == 0) return FL_OK;
  if (a->n == y->n && b->n == y->n) {
    add_relu_grad(y->data, y->grad, a->grad, fl_gacc(acc, 0), b->grad, fl_gacc(acc, 1), y->n);
    return FL_OK;
  }
  FL_TRY(fl_gkernel(n, fl_act_backward(FL_ACT_RELU, y->data, y->grad, y->grad, y->n),
                    "relu backward"));
  return binary_backward(n, c, acc);
}

static const char *const add_relu_attrs[] = {NULL};
const fl_gop fl_gop_add_relu = {.type = "Add", .paddle = "elementwise_add", .min_in = 2,
                                .max_in = 2, .min_out = 1, .max_out = 1, .variant = BIN_ADD,
                                .attrs = add_relu_attrs, .infer = add_relu_infer,
                                .forward = add_relu_forward, .backward = add_relu_backward,
                                .save_out = 1};

/* -------------------------------------------------------------- unary */

enum un_kind { UN_RELU, UN_LEAKY, UN_SIGMOID, UN_TANH, UN_ERF, UN_NEG, UN_SQRT, UN_EXP, UN_LOG };

/* The op's kind: its table row's variant (set below for every unary row). */
static enum un_kind un_kind_of(const fl_gnode *n) { return (enum un_kind)n->op->variant; }

static fl_status unary_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!x) return fl_gop_fail(n, FL_EINVAL, "input 0 is required");
  if (x->dtype == FL_G_I64 && un_kind_of(n) != UN_NEG)
    return fl_gop_fail(n, FL_EINVAL, "input %s is int64; %s takes float only", x->name,
                       n->op->type);
  if (un_kind_of(n) == UN_LEAKY) {
    float alpha;
    FL_TRY(fl_ga_float(n, "alpha", 0.01f, &alpha));
  }
  fl_gset_out(n, c, 0, x->dtype, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status unary_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *xt = fl_gin(n, c, 0);
  fl_gtensor *yt = fl_gout(n, c, 0);
  const size_t N = xt->n;
  if (xt->dtype == FL_G_I64) { /* Neg */
    for (size_t i = 0; i < N; i++) yt->idata[i] = -xt->idata[i];
    return FL_OK;
  }
  const float *x = xt->data;
  float *y = yt->data;
  if (N == 0) return FL_OK;
  switch (un_kind_of(n)) {
  case UN_RELU: return fl_act_forward(FL_ACT_RELU, x, y, N);
  case UN_TANH: return fl_act_forward(FL_ACT_TANH, x, y, N);
  case UN_LEAKY: {
    float alpha;
    FL_TRY(fl_ga_float(n, "alpha", 0.01f, &alpha));
    for (size_t i = 0; i < N; i++) y[i] = x[i] >= 0.0f ? x[i] : alpha * x[i];
    break;
  }
  case UN_SIGMOID:
    for (size_t i = 0; i < N; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
    break;
  case UN_ERF:
    for (size_t i = 0; i < N; i++) y[i] = erff(x[i]);
    break;
  case UN_NEG:
    for (size_t i = 0; i < N; i++) y[i] = -x[i];
    break;
  case UN_SQRT:
    for (size_t i = 0; i < N; i++) y[i] = sqrtf(x[i]);
    break;
  case UN_EXP:
    for (size_t i = 0; i < N; i++) y[i] = expf(x[i]);
    break;
  case UN_LOG:
    for (size_t i = 0; i < N; i++) y[i] = logf(x[i]);
    break;
  }
  return FL_OK;
}

#define UN_GRAD(EXPR)                                                                     \
  do {                                                                                    \
    if (accum)                                                                            \
      for (size_t i = 0; i < N; i++) dx[i] += (EXPR);                                     \
    else                                                                                  \
      for (size_t i = 0; i < N; i++) dx[i] = (EXPR);                                      \
  } while (0)

/* dx (+)= g where y > 0, else +0 (Relu's gradient); dx may be g.  With
 * SSE2, four at a time: the mask of y > 0 (false for NaN) ANDed with g is
 * the scalar select's bits, and the add is the same single add. */
static void relu_grad(const float *y, const float *g, float *dx, size_t N, int accum) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= N; i += 4) {
    const __m128 t = _mm_and_ps(_mm_cmpgt_ps(_mm_loadu_ps(y + i), zero), _mm_loadu_ps(g + i));
    _mm_storeu_ps(dx + i, accum ? _mm_add_ps(_mm_loadu_ps(dx + i), t) : t);
  }
#endif
  for (; i < N; i++) {
    const float t = y[i] > 0.0f ? g[i] : 0.0f;
    dx[i] = accum ? dx[i] + t : t;
  }
}

static fl_status unary_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *xt = fl_gin(n, c, 0), *yt = fl_gout(n, c, 0);
  float *dx = xt->grad;
  if (!dx || xt->dtype != FL_G_F32) return FL_OK;
  const float *x = xt->data, *y = yt->data, *g = yt->grad;
  const size_t N = xt->n;
  const int accum = fl_gacc(acc, 0);
  switch (un_kind_of(n)) {
  case UN_RELU: relu_grad(y, g, dx, N, accum); break;
  case UN_TANH: UN_GRAD(g[i] * (1.0f - y[i] * y[i])); break;
  case UN_LEAKY: {
    float alpha;
    FL_TRY(fl_ga_float(n, "alpha", 0.01f, &alpha));
    UN_GRAD(x[i] >= 0.0f ? g[i] : alpha * g[i]);
    break;
  }
  case UN_SIGMOID: UN_GRAD(g[i] * y[i] * (1.0f - y[i])); break;
  case UN_ERF: {
    const float k = 1.1283791670955126f; /* 2 / sqrt(pi) */
    UN_GRAD(g[i] * k * expf(-x[i] * x[i]));
    break;
  }
  case UN_NEG: UN_GRAD(-g[i]); break;
  case UN_SQRT: UN_GRAD(g[i] * 0.5f / y[i]); break;
  case UN_EXP: UN_GRAD(g[i] * y[i]); break;
  case UN_LOG: UN_GRAD(g[i] / x[i]); break;
  }
  return FL_OK;
}

/* Relu and Tanh on the gpu: the activation kernels. */
static fl_status act_of(const fl_gnode *n, fl_act *act) {
  const enum un_kind k = un_kind_of(n);
  if (k != UN_RELU && k != UN_TANH)
    return fl_gop_fail(n, FL_ENOTSUP, "no gpu kernel for %s", n->op->type);
  *act = k == UN_RELU ? FL_ACT_RELU : FL_ACT_TANH;
  return FL_OK;
}

static fl_status act_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_act act = FL_ACT_NONE;
  FL_TRY(act_of(n, &act));
  if (x->dtype != FL_G_F32)
    return fl_gop_fail(n, FL_ENOTSUP, "int64 data on the gpu is not supported");
  if (x->n == 0) return FL_OK;
  return fl_gkernel(n, fl_act_forward_cuda(act, x->data, y->data, x->n, c->stream),
                    "activation");
}

static fl_status act_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad || x->n == 0) return FL_OK;
  fl_act act = FL_ACT_NONE;
  FL_TRY(act_of(n, &act));
  /* Accumulating: the output grad (scratch) becomes dx's addend. */
  const int ax = fl_gacc(acc, 0);
  float *k = ax ? y->grad : x->grad;
  FL_TRY(fl_gkernel(n, fl_act_backward_cuda(act, y->data, y->grad, k, x->n, c->stream),
                    "activation backward"));
  return ax ? fl_gcu_put(n, c, x->grad, k, x->n, 1) : FL_OK;
}

/* ------------------------------------------ comparisons, Not, Where */

/* Booleans are int64 0/1 here (the engine has no bool type): Equal, Less
 * and Greater compare two float or two int64 tensors with broadcasting;
 * Not negates; Where selects with a broadcast condition (nonzero = true). */
enum cmp_kind { CMP_EQ, CMP_LT, CMP_GT };

static enum cmp_kind cmp_kind_of(const fl_gnode *n) { return (enum cmp_kind)n->op->variant; }

static fl_status cmp_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  if (!a || !b) return fl_gop_fail(n, FL_EINVAL, "needs two inputs");
  if (a->dtype != b->dtype)
    return fl_gop_fail(n, FL_EINVAL, "inputs %s and %s have different element types", a->name,
                       b->name);
  int nd;
  int64_t shape[FL_G_MAX_DIMS];
  if (fl_gbroadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shape) != FL_OK) {
    char sa[160], sb[160];
    return fl_gop_fail(n, FL_EINVAL, "shapes %s and %s do not broadcast",
                       fl_gshape_str(a->ndim, a->shape, sa, sizeof sa),
                       fl_gshape_str(b->ndim, b->shape, sb, sizeof sb));
  }
  fl_gset_out(n, c, 0, FL_G_I64, nd, shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

#define CMP_ROWS(T, A, B)                                                                  \
  do {                                                                                     \
    for (size_t r = 0; r < rows; r++) {                                                    \
      size_t off[4];                                                                       \
      fl_gbc_row(&bc, r, off);                                                             \
      for (size_t i = 0; i < inner; i++) {                                                 \
        const T u = (A)[off[1] + i * sa], v = (B)[off[2] + i * sb];                        \
        Y[off[0] + i] = k == CMP_EQ ? u == v : k == CMP_LT ? u < v : u > v;                \
      }                                                                                    \
    }                                                                                      \
  } while (0)

static fl_status cmp_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gbc bc;
  const int ranks[2] = {a->ndim, b->ndim};
  const int64_t *shapes[2] = {a->shape, b->shape};
  fl_gbc_init(&bc, y->ndim, y->shape, 2, ranks, shapes);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  const size_t sa = bc.nd ? (size_t)bc.st[1][bc.nd - 1] : 0;
  const size_t sb = bc.nd ? (size_t)bc.st[2][bc.nd - 1] : 0;
  const enum cmp_kind k = cmp_kind_of(n);
  int64_t *Y = y->idata;
  if (a->dtype == FL_G_I64)
    CMP_ROWS(int64_t, a->idata, b->idata);
  else
    CMP_ROWS(float, a->data, b->data);
  return FL_OK;
}

static fl_status not_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_I64));
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_I64, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status not_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  for (size_t i = 0; i < x->n; i++) y->idata[i] = x->idata[i] == 0;
  return FL_OK;
}

static fl_status where_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_I64));
  const fl_gtensor *k = fl_gin(n, c, 0), *x = fl_gin(n, c, 1), *yv = fl_gin(n, c, 2);
  if (!x || !yv) return fl_gop_fail(n, FL_EINVAL, "needs three inputs");
  if (x->dtype != yv->dtype)
    return fl_gop_fail(n, FL_EINVAL, "X %s and Y %s have different element types", x->name,
                       yv->name);
  int nd;
  int64_t shape[FL_G_MAX_DIMS];
  char s1[160], s2[160], s3[160];
  if (fl_gbroadcast_shape(k->ndim, k->shape, x->ndim, x->shape, &nd, shape) != FL_OK ||
      fl_gbroadcast_shape(nd, shape, yv->ndim, yv->shape, &nd, shape) != FL_OK)
    return fl_gop_fail(n, FL_EINVAL, "condition %s, X %s and Y %s do not broadcast",
                       fl_gshape_str(k->ndim, k->shape, s1, sizeof s1),
                       fl_gshape_str(x->ndim, x->shape, s2, sizeof s2),
                       fl_gshape_str(yv->ndim, yv->shape, s3, sizeof s3));
  fl_gset_out(n, c, 0, x->dtype, nd, shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static void where_bc(const fl_gnode *n, const fl_gctx *c, fl_gbc *bc) {
  const fl_gtensor *k = fl_gin(n, c, 0), *x = fl_gin(n, c, 1), *yv = fl_gin(n, c, 2);
  const fl_gtensor *o = fl_gout(n, c, 0);
  const int ranks[3] = {k->ndim, x->ndim, yv->ndim};
  const int64_t *shapes[3] = {k->shape, x->shape, yv->shape};
  fl_gbc_init(bc, o->ndim, o->shape, 3, ranks, shapes);
}

static fl_status where_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *k = fl_gin(n, c, 0), *x = fl_gin(n, c, 1), *yv = fl_gin(n, c, 2);
  fl_gtensor *o = fl_gout(n, c, 0);
  fl_gbc bc;
  where_bc(n, c, &bc);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  size_t st[4];
  for (int q = 1; q <= 3; q++) st[q] = bc.nd ? (size_t)bc.st[q][bc.nd - 1] : 0;
  for (size_t r = 0; r < rows; r++) {
    size_t off[4];
    fl_gbc_row(&bc, r, off);
    for (size_t i = 0; i < inner; i++) {
      const int pick = k->idata[off[1] + i * st[1]] != 0;
      const size_t src = pick ? off[2] + i * st[2] : off[3] + i * st[3];
      if (o->dtype == FL_G_I64)
        o->idata[off[0] + i] = (pick ? x : yv)->idata[src];
      else
        o->data[off[0] + i] = (pick ? x : yv)->data[src];
    }
  }
  return FL_OK;
}

static fl_status where_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *k = fl_gin(n, c, 0), *o = fl_gout(n, c, 0);
  if (o->dtype != FL_G_F32) return FL_OK;
  fl_gbc bc;
  where_bc(n, c, &bc);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  size_t st[4];
  for (int q = 1; q <= 3; q++) st[q] = bc.nd ? (size_t)bc.st[q][bc.nd - 1] : 0;
  for (int q = 2; q <= 3; q++) { /* X gets the gradient where true, Y where false */
    const fl_gtensor *t = fl_gin(n, c, q - 1);
    if (!t->grad) continue;
    if (!fl_gacc(acc, q - 1)) memset(t->grad, 0, t->n * sizeof *t->grad);
    for (size_t r = 0; r < rows; r++) {
      size_t off[4];
      fl_gbc_row(&bc, r, off);
      for (size_t i = 0; i < inner; i++) {
        const int pick = k->idata[off[1] + i * st[1]] != 0;
        if (pick == (q == 2)) t->grad[off[q] + i * st[q]] += o->grad[off[0] + i];
      }
    }
  }
  return FL_OK;
}

/* ---------------------------------------------------- Identity, Cast */

static fl_status identity_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!x) return fl_gop_fail(n, FL_EINVAL, "input 0 is required");
  fl_gset_out(n, c, 0, x->dtype, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status identity_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (x->dtype == FL_G_I64) {
    if (x->n && y->idata != x->idata) memcpy(y->idata, x->idata, x->n * sizeof *y->idata);
  } else if (x->n && y->data != x->data) {
    memcpy(y->data, x->data, x->n * sizeof *y->data);
  }
  return FL_OK;
}

/* Backward of the ops whose input grad is the output grad unchanged
 * (Identity, a float-to-float Cast; also Reshape-like ops in
 * ops_shape.c). */
static fl_status pass_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad || x->dtype != FL_G_F32 || y->dtype != FL_G_F32) return FL_OK;
  fl_gput(x->grad, y->grad, x->n, fl_gacc(acc, 0));
  return FL_OK;
}

/* ONNX's BOOL element type: a cast to it yields the engine's int64 0/1. */
enum { CAST_BOOL = 9 };

static fl_status cast_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!x) return fl_gop_fail(n, FL_EINVAL, "input 0 is required");
  int64_t to;
  FL_TRY(fl_ga_int(n, "to", -1, &to));
  if (to != FL_G_F32 && to != FL_G_I64 && to != CAST_BOOL)
    return fl_gop_fail(n, FL_EINVAL,
                       "cast to element type %lld is not supported (1 = float, 7 = int64, "
                       "9 = bool)", (long long)to);
  fl_gset_out(n, c, 0, to == CAST_BOOL ? FL_G_I64 : (fl_gdtype)to, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status cast_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  int64_t to;
  FL_TRY(fl_ga_int(n, "to", -1, &to));
  if (to == CAST_BOOL) { /* nonzero (NaN included) is true */
    for (size_t i = 0; i < x->n; i++)
      y->idata[i] = x->dtype == FL_G_I64 ? x->idata[i] != 0 : x->data[i] != 0.0f;
    return FL_OK;
  }
  if (x->dtype == y->dtype) return identity_forward(n, c);
  if (y->dtype == FL_G_F32) {
    for (size_t i = 0; i < x->n; i++) y->data[i] = (float)x->idata[i];
    return FL_OK;
  }
  /* float to int64 truncates toward zero; a value outside int64 (or NaN)
   * has no conversion. */
  for (size_t i = 0; i < x->n; i++) {
    const float v = x->data[i];
    if (!(v > -9.2233720e18f && v < 9.2233720e18f))
      return fl_gop_fail(n, FL_EINVAL, "element %zu (%g) does not convert to int64", i,
                         (double)v);
    y->idata[i] = (int64_t)v;
  }
  return FL_OK;
}

/* ------------------------------------------------------------- Dropout */

/* The dropout ratio: input 1 (opset 12+, a float scalar) or attribute
 * "ratio" (older exports), default 0.5. */
static fl_status dropout_ratio(const fl_gnode *n, const fl_gctx *c, float *p) {
  const fl_gtensor *r = fl_gin(n, c, 1);
  if (r) {
    if (r->dtype != FL_G_F32 || r->n != 1 || !r->data)
      return fl_gop_fail(n, FL_EINVAL, "ratio input %s must be a float scalar", r->name);
    *p = r->data[0];
  } else {
    FL_TRY(fl_ga_float(n, "ratio", 0.5f, p));
  }
  if (!(*p >= 0.0f && *p < 1.0f))
    return fl_gop_fail(n, FL_EINVAL, "ratio %g is outside [0, 1)", (double)*p);
  return FL_OK;
}

static fl_status dropout_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0), *r = fl_gin(n, c, 1);
  if (r && (r->dtype != FL_G_F32 || r->n != 1))
    return fl_gop_fail(n, FL_EINVAL, "ratio input %s must be a float scalar", r->name);
  if (!r) {
    float p;
    FL_TRY(dropout_ratio(n, c, &p));
  }
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  if (n->n_out > 1) fl_gset_out(n, c, 1, FL_G_I64, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Keep element i?  A splitmix64-style hash of (seed, step, node, i) mapped
 * to [0, 1) with 24 bits, compared with the ratio: the same mask every
 * time the same step runs the node (backward, recompute). */
static int dropout_keep(const fl_gctx *c, size_t i, float p) {
  uint64_t z = c->seed ^ 0x6a09e667f3bcc909ull;
  const uint64_t parts[3] = {c->step, (uint64_t)c->node_index, (uint64_t)i};
  for (int k = 0; k < 3; k++) {
    z += parts[k] + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
  }
  return (float)(z >> 40) * 0x1p-24f >= p;
}

static fl_status dropout_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *xt = fl_gin(n, c, 0);
  fl_gtensor *yt = fl_gout(n, c, 0), *mt = fl_gout(n, c, 1);
  float p;
  FL_TRY(dropout_ratio(n, c, &p));
  const size_t N = xt->n;
  if (!c->training || p == 0.0f) {
    if (yt->data != xt->data && N) memcpy(yt->data, xt->data, N * sizeof *yt->data);
    if (mt)
      for (size_t i = 0; i < N; i++) mt->idata[i] = 1;
    return FL_OK;
  }
  const float scale = 1.0f / (1.0f - p);
  for (size_t i = 0; i < N; i++) {
    const int keep = dropout_keep(c, i, p);
    yt->data[i] = keep ? xt->data[i] * scale : 0.0f;
    if (mt) mt->idata[i] = keep;
  }
  return FL_OK;
}

static fl_status dropout_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *xt = fl_gin(n, c, 0), *yt = fl_gout(n, c, 0);
  float *dx = xt->grad;
  if (!dx) return FL_OK;
  float p;
  FL_TRY(dropout_ratio(n, c, &p));
  const int accum = fl_gacc(acc, 0);
  const size_t N = xt->n;
  const float *g = yt->grad;
  if (!c->training || p == 0.0f) {
    fl_gput(dx, g, N, accum);
    return FL_OK;
  }
  const float scale = 1.0f / (1.0f - p);
  UN_GRAD(dropout_keep(c, i, p) ? g[i] * scale : 0.0f);
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const no_attrs[] = {NULL};
static const char *const leaky_attrs[] = {"alpha", NULL};
static const char *const cast_attrs[] = {"to", NULL};
static const char *const dropout_attrs[] = {"ratio", "seed", NULL};

#define BINARY(T, P, SAVE, K)                                                             \
  {.type = T, .paddle = P, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,          \
   .attrs = no_attrs, .infer = binary_infer, .forward = binary_forward,                   \
   .backward = binary_backward, .save_in = SAVE, .save_out = 0, .variant = K}
#define UNARY(T, P, SIN, SOUT, ATTRS, K)                                                  \
  {.type = T, .paddle = P, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,          \
   .attrs = ATTRS, .infer = unary_infer, .forward = unary_forward,                        \
   .backward = unary_backward, .save_in = SIN, .save_out = SOUT, .variant = K}

const fl_gop fl_gops_elementwise[] = {
    {.type = "Add", .paddle = "elementwise_add", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = binary_infer, .forward = binary_forward,
     .backward = binary_backward, .forward_cuda = add_forward_cuda,
     .backward_cuda = add_backward_cuda, .with_relu = &fl_gop_add_relu, .variant = BIN_ADD},
    BINARY("Sub", "elementwise_sub", 0, BIN_SUB),
    BINARY("Mul", "elementwise_mul", 3, BIN_MUL),
    BINARY("Div", "elementwise_div", 3, BIN_DIV),
    {.type = "Pow", .paddle = "elementwise_pow", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = binary_infer, .forward = binary_forward,
     .backward = binary_backward, .save_in = 3, .save_out = 1, .variant = BIN_POW},
    {.type = "Relu", .paddle = "relu", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = unary_infer, .forward = unary_forward,
     .backward = unary_backward, .save_out = 1, .forward_cuda = act_forward_cuda,
     .backward_cuda = act_backward_cuda, .act = FL_ACT_RELU, .variant = UN_RELU},
    UNARY("LeakyRelu", "leaky_relu", 1, 0, leaky_attrs, UN_LEAKY),
    UNARY("Sigmoid", "sigmoid", 0, 1, no_attrs, UN_SIGMOID),
    {.type = "Tanh", .paddle = "tanh", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = unary_infer, .forward = unary_forward,
     .backward = unary_backward, .save_out = 1, .forward_cuda = act_forward_cuda,
     .backward_cuda = act_backward_cuda, .act = FL_ACT_TANH, .variant = UN_TANH},
    UNARY("Erf", "erf", 1, 0, no_attrs, UN_ERF),
    UNARY("Neg", NULL, 0, 0, no_attrs, UN_NEG),
    UNARY("Sqrt", "sqrt", 0, 1, no_attrs, UN_SQRT),
    UNARY("Exp", "exp", 0, 1, no_attrs, UN_EXP),
    UNARY("Log", "log", 1, 0, no_attrs, UN_LOG),
    {.type = "Equal", .paddle = "equal", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = cmp_infer, .forward = cmp_forward,
     .nodiff_in = 3, .variant = CMP_EQ},
    {.type = "Less", .paddle = "less_than", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = cmp_infer, .forward = cmp_forward,
     .nodiff_in = 3, .variant = CMP_LT},
    {.type = "Greater", .paddle = "greater_than", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = cmp_infer, .forward = cmp_forward,
     .nodiff_in = 3, .variant = CMP_GT},
    {.type = "Not", .paddle = "logical_not", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = not_infer, .forward = not_forward,
     .nodiff_in = 1},
    {.type = "Where", .paddle = "where", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = no_attrs, .infer = where_infer, .forward = where_forward,
     .backward = where_backward, .save_in = 1, .nodiff_in = 1},
    {.type = "Identity", .paddle = "share_data", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = identity_infer, .forward = identity_forward,
     .backward = pass_backward},
    {.type = "Cast", .paddle = "cast", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = cast_attrs, .infer = cast_infer, .forward = cast_forward, .traits = FL_GOP_CAST,
     .backward = pass_backward,
     .doc = "to 1 (float), 7 (int64) or 9 (bool: int64 0/1, nonzero is 1); others refused"},
    {.type = "Dropout", .paddle = "dropout", .min_in = 1, .max_in = 3, .min_out = 1,
     .max_out = 2, .attrs = dropout_attrs, .infer = dropout_infer, .forward = dropout_forward,
     .backward = dropout_backward, .nodiff_in = 6, .traits = FL_GOP_NO_FOLD},
};
const size_t fl_gops_elementwise_n = sizeof fl_gops_elementwise / sizeof fl_gops_elementwise[0];
