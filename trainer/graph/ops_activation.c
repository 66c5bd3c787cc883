/* ops_activation.c - the activations and element-wise ops that PyTorch
 * exports beyond the basic arithmetic of ops_elementwise.c: the unary
 * activations (HardSwish, HardSigmoid, Elu, Selu, Celu, Softplus, Softsign,
 * Mish, Abs, Reciprocal) and the piecewise-constant Sign, Floor, Ceil,
 * Round; Clip; PRelu; the variadic Max and Min; Mod; and the logical And,
 * Or, Xor on the engine's int64 0/1 booleans.
 *
 * Why a family of its own: each op here is a pointwise rule, and the
 * rules (values and gradients at the kinks) follow PyTorch 1.13's
 * autograd for the modules that export to them, so a model trained here
 * matches its PyTorch twin; those rules are written in one place.  The
 * broadcasting iterator is ops_internal.h's (fl_gbc), shared with
 * ops_elementwise.c; a broadcast input's gradient is summed in output
 * order, so results are deterministic. */
#include <math.h>
#include <string.h>

#include "ops_internal.h"

/* ---------------------------------------------------------- helpers */

/* Operand k's element stride along the iterator's innermost merged dim. */
static size_t bc_st(const fl_gbc *b, int k) {
  return b->nd ? (size_t)b->st[k][b->nd - 1] : 0;
}

/* The iterator of output y over the two operands a and b. */
static void bc2(fl_gbc *bc, const fl_gtensor *y, const fl_gtensor *a, const fl_gtensor *b) {
  const int ranks[2] = {a->ndim, b->ndim};
  const int64_t *shapes[2] = {a->shape, b->shape};
  fl_gbc_init(bc, y->ndim, y->shape, 2, ranks, shapes);
}

/* The broadcast shape of a and b into (nd, shape); logged when they do not
 * broadcast. */
static fl_status bc2_shape(const fl_gnode *n, const fl_gtensor *a, const fl_gtensor *b, int *nd,
                           int64_t *shape) {
  if (fl_gbroadcast_shape(a->ndim, a->shape, b->ndim, b->shape, nd, shape) == FL_OK)
    return FL_OK;
  char sa[160], sb[160];
  return fl_gop_fail(n, FL_EINVAL, "shapes %s (%s) and %s (%s) do not broadcast",
                     fl_gshape_str(a->ndim, a->shape, sa, sizeof sa), a->name,
                     fl_gshape_str(b->ndim, b->shape, sb, sizeof sb), b->name);
}

/* Every row r of iterator bc, with off[] its operands' offsets and the
 * innermost length `inner` in scope: the body (the macro's last
 * arguments) runs once per row. */
#define BC_ROWS(bc, ...)                                                                  \
  do {                                                                                    \
    const size_t inner = fl_gbc_inner(&(bc)), rows = inner ? (bc).n / inner : 0;          \
    for (size_t r = 0; r < rows; r++) {                                                   \
      size_t off[4];                                                                      \
      fl_gbc_row(&(bc), r, off);                                                          \
      __VA_ARGS__                                                                         \
    }                                                                                     \
  } while (0)

/* dst (+)= (accum) v, for one element of a gradient. */
static inline void put1(float *dst, float v, int accum) { *dst = accum ? *dst + v : v; }

/* ------------------------------------------------------------- unary */

/* An activation's float attributes: up to two, read into a and b. */
typedef struct act_p {
  float a, b;
} act_p;

typedef void (*un_fwd_fn)(const float *x, float *y, size_t n, const act_p *p);
typedef void (*un_bwd_fn)(const float *x, const float *y, const float *g, float *dx, size_t n,
                          int accum, const act_p *p);

/* One unary op: its attributes (NULL-terminated, also the fl_gop's list)
 * with their defaults, its loops (bwd NULL: the gradient is zero), and
 * whether its first attribute must be nonzero (a divisor). */
typedef struct un_spec {
  const char *const attrs[3];
  float def[2];
  un_fwd_fn fwd;
  un_bwd_fn bwd;
  int a_nonzero;
} un_spec;

/* The loops of one unary op: y[i] = FX, dx[i] (+)= g[i] * DX, where FX
 * and DX are written with x[i], y[i], p->a and p->b (DX reads only what
 * the op's row saves); UN_FWD alone for the ops of zero gradient. */
#define UN_FWD(NAME, FX)                                                                  \
  static void NAME##_fwd(const float *x, float *y, size_t n, const act_p *p) {            \
    (void)p;                                                                              \
    for (size_t i = 0; i < n; i++) y[i] = (FX);                                           \
  }
#define UN_LOOPS(NAME, FX, DX)                                                            \
  UN_FWD(NAME, FX)                                                                        \
  static void NAME##_bwd(const float *x, const float *y, const float *g, float *dx,       \
                         size_t n, int accum, const act_p *p) {                           \
    (void)x, (void)y, (void)p;                                                            \
    for (size_t i = 0; i < n; i++) put1(&dx[i], g[i] * (DX), accum);                      \
  }

/* Clamp t to [0, 1], NaN kept (HardSigmoid). */
static inline float unit_clamp(float t) { return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t; }

/* PyTorch's softplus with its default threshold 20 (beta 1): x itself
 * above it, where log1p(exp(x)) rounds to x anyway. */
static inline float softplus1(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static inline float softplus1_d(float x) {
  if (x > 20.0f) return 1.0f;
  const float z = expf(x);
  return z / (z + 1.0f);
}

/* d/dx x tanh(softplus(x)), as PyTorch's mish_backward writes it. */
static inline float mish_d(float x) {
  const float s = 1.0f / (1.0f + expf(-x)), t = tanhf(log1pf(expf(x)));
  return t + x * s * (1.0f - t * t);
}

/* PyTorch's rules at the kinks: HardSwish's slope is x/3 + 1/2 on
 * [-3, 3] (both ends), HardSigmoid's is alpha strictly inside (0, 1); Elu,
 * Selu and Celu take the exponential branch at 0; Abs has slope 0 at 0. */
UN_LOOPS(hswish, x[i] * fminf(fmaxf(x[i] + 3.0f, 0.0f), 6.0f) / 6.0f,
         x[i] < -3.0f ? 0.0f : x[i] <= 3.0f ? x[i] / 3.0f + 0.5f : 1.0f)
UN_LOOPS(hsig, unit_clamp(p->a * x[i] + p->b),
         (p->a * x[i] + p->b > 0.0f && p->a * x[i] + p->b < 1.0f) ? p->a : 0.0f)
UN_LOOPS(elu, x[i] > 0.0f ? x[i] : p->a * expm1f(x[i]),
         x[i] > 0.0f ? 1.0f : p->a * expf(x[i]))
UN_LOOPS(selu, x[i] > 0.0f ? p->b * x[i] : p->b * p->a * expm1f(x[i]),
         x[i] > 0.0f ? p->b : p->b * p->a * expf(x[i]))
UN_LOOPS(celu, x[i] > 0.0f ? x[i] : p->a * expm1f(x[i] * (1.0f / p->a)),
         x[i] > 0.0f ? 1.0f : expf(x[i] * (1.0f / p->a)))
UN_LOOPS(softplus, softplus1(x[i]), softplus1_d(x[i]))
UN_LOOPS(softsign, x[i] / (1.0f + fabsf(x[i])),
         1.0f / ((1.0f + fabsf(x[i])) * (1.0f + fabsf(x[i]))))
UN_LOOPS(mish, x[i] * tanhf(log1pf(expf(x[i]))), mish_d(x[i]))
UN_LOOPS(abs, fabsf(x[i]), x[i] > 0.0f ? 1.0f : x[i] < 0.0f ? -1.0f : 0.0f)
UN_LOOPS(recip, 1.0f / x[i], -(y[i] * y[i]))
UN_FWD(sign, x[i] > 0.0f ? 1.0f : x[i] < 0.0f ? -1.0f : 0.0f)
UN_FWD(floor, floorf(x[i]))
UN_FWD(ceil, ceilf(x[i]))
UN_FWD(round, nearbyintf(x[i])) /* half to even, as ONNX and torch.round */

/* ONNX's defaults; Selu's are float32's nearest to its constants. */
static const un_spec hswish_spec = {.attrs = {NULL}, .fwd = hswish_fwd, .bwd = hswish_bwd};
static const un_spec hsig_spec = {.attrs = {"alpha", "beta", NULL}, .def = {0.2f, 0.5f},
                                  .fwd = hsig_fwd, .bwd = hsig_bwd};
static const un_spec elu_spec = {.attrs = {"alpha", NULL}, .def = {1.0f, 0},
                                 .fwd = elu_fwd, .bwd = elu_bwd};
static const un_spec selu_spec = {.attrs = {"alpha", "gamma", NULL},
                                  .def = {1.67326319217681884765625f, 1.05070102214813232421875f},
                                  .fwd = selu_fwd, .bwd = selu_bwd};
static const un_spec celu_spec = {.attrs = {"alpha", NULL}, .def = {1.0f, 0},
                                  .fwd = celu_fwd, .bwd = celu_bwd, .a_nonzero = 1};
static const un_spec softplus_spec = {.attrs = {NULL}, .fwd = softplus_fwd, .bwd = softplus_bwd};
static const un_spec softsign_spec = {.attrs = {NULL}, .fwd = softsign_fwd, .bwd = softsign_bwd};
static const un_spec mish_spec = {.attrs = {NULL}, .fwd = mish_fwd, .bwd = mish_bwd};
static const un_spec abs_spec = {.attrs = {NULL}, .fwd = abs_fwd, .bwd = abs_bwd};
static const un_spec recip_spec = {.attrs = {NULL}, .fwd = recip_fwd, .bwd = recip_bwd};
static const un_spec sign_spec = {.attrs = {NULL}, .fwd = sign_fwd};
static const un_spec floor_spec = {.attrs = {NULL}, .fwd = floor_fwd};
static const un_spec ceil_spec = {.attrs = {NULL}, .fwd = ceil_fwd};
static const un_spec round_spec = {.attrs = {NULL}, .fwd = round_fwd};

static fl_status un_params(const fl_gnode *n, const un_spec *s, act_p *p) {
  float v[2] = {s->def[0], s->def[1]};
  for (int k = 0; k < 2 && s->attrs[k]; k++) FL_TRY(fl_ga_float(n, s->attrs[k], s->def[k], &v[k]));
  p->a = v[0];
  p->b = v[1];
  return FL_OK;
}

static fl_status un_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved,
                          const un_spec *s) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  act_p p;
  FL_TRY(un_params(n, s, &p));
  if (s->a_nonzero && p.a == 0.0f)
    return fl_gop_fail(n, FL_EINVAL, "%s 0: %s divides by it; give a nonzero %s", s->attrs[0],
                       n->op->type, s->attrs[0]);
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status un_forward(fl_gnode *n, fl_gctx *c, const un_spec *s) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  act_p p;
  FL_TRY(un_params(n, s, &p));
  s->fwd(x->data, fl_gout(n, c, 0)->data, x->n, &p);
  return FL_OK;
}

static fl_status un_backward(fl_gnode *n, fl_gctx *c, unsigned acc, const un_spec *s) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  const int accum = fl_gacc(acc, 0);
  if (!s->bwd) { /* piecewise constant: PyTorch's gradient is zero */
    if (!accum) memset(x->grad, 0, x->n * sizeof *x->grad);
    return FL_OK;
  }
  act_p p;
  FL_TRY(un_params(n, s, &p));
  s->bwd(x->data, y->data, y->grad, x->grad, x->n, accum, &p);
  return FL_OK;
}

/* The fl_gop entry points of the unary op NAME. */
#define UN_OP(NAME)                                                                       \
  static fl_status NAME##_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {     \
    return un_infer(n, c, ws, saved, &NAME##_spec);                                       \
  }                                                                                       \
  static fl_status NAME##_forward(fl_gnode *n, fl_gctx *c) {                              \
    return un_forward(n, c, &NAME##_spec);                                                \
  }                                                                                       \
  static fl_status NAME##_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {               \
    return un_backward(n, c, acc, &NAME##_spec);                                          \
  }
UN_OP(hswish)
UN_OP(hsig)
UN_OP(elu)
UN_OP(selu)
UN_OP(celu)
UN_OP(softplus)
UN_OP(softsign)
UN_OP(mish)
UN_OP(abs)
UN_OP(recip)
UN_OP(sign)
UN_OP(floor)
UN_OP(ceil)
UN_OP(round)

/* -------------------------------------------------------------- Clip */

/* Clip(x, min, max): min and max optional float scalars (absent: no
 * bound), read at run time.  y = min(max(x, lo), hi), NaN kept; the
 * gradient passes where lo <= x <= hi, both ends included, as torch.clamp's
 * (ReLU6 and Hardtanh, which export to Clip too, exclude the ends in
 * PyTorch; an input exactly on a bound is where they differ). */
static fl_status clip_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  for (int k = 1; k <= 2; k++) {
    const fl_gtensor *b = fl_gin(n, c, k);
    if (b && (b->dtype != FL_G_F32 || b->n != 1))
      return fl_gop_fail(n, FL_EINVAL, "%s input %s must be a float scalar",
                         k == 1 ? "min" : "max", b->name);
  }
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static void clip_bounds(const fl_gnode *n, const fl_gctx *c, float *lo, float *hi) {
  const fl_gtensor *a = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  *lo = a ? a->data[0] : -INFINITY;
  *hi = b ? b->data[0] : INFINITY;
}

static fl_status clip_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *xt = fl_gin(n, c, 0);
  float *y = fl_gout(n, c, 0)->data, lo, hi;
  clip_bounds(n, c, &lo, &hi);
  for (size_t i = 0; i < xt->n; i++) {
    const float v = xt->data[i] < lo ? lo : xt->data[i];
    y[i] = v > hi ? hi : v;
  }
  return FL_OK;
}

static fl_status clip_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *xt = fl_gin(n, c, 0);
  if (!xt->grad) return FL_OK;
  const float *x = xt->data, *g = fl_gout(n, c, 0)->grad;
  float lo, hi;
  clip_bounds(n, c, &lo, &hi);
  const int accum = fl_gacc(acc, 0);
  for (size_t i = 0; i < xt->n; i++)
    put1(&xt->grad[i], (x[i] >= lo && x[i] <= hi) ? g[i] : 0.0f, accum);
  return FL_OK;
}

/* ------------------------------------------------------------- PRelu */

/* PRelu(x, slope): slope broadcasts to x one way (ONNX's unidirectional
 * broadcasting).  y = x for x > 0, slope * x otherwise; dx = g or
 * slope * g likewise (slope * g at 0, as PyTorch), dslope = sum of g * x
 * where x <= 0 over the positions slope was broadcast to (ws holds the
 * terms, then they are summed in output order). */
static fl_status prelu_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1);
  int nd;
  int64_t shape[FL_G_MAX_DIMS];
  FL_TRY(bc2_shape(n, x, s, &nd, shape));
  if (nd != x->ndim || fl_gnumel(nd, shape) != x->n) {
    char sx[160], ss[160];
    return fl_gop_fail(n, FL_EINVAL, "slope %s %s does not broadcast to X %s (one way only)",
                       s->name, fl_gshape_str(s->ndim, s->shape, ss, sizeof ss),
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  }
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = x->n;
  *saved = 0;
  return FL_OK;
}

static fl_status prelu_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gbc bc;
  bc2(&bc, y, x, s);
  const size_t ss = bc_st(&bc, 2);
  BC_ROWS(bc, {
    const float *px = x->data + off[1], *ps = s->data + off[2];
    float *py = y->data + off[0];
    for (size_t i = 0; i < inner; i++) py[i] = px[i] > 0.0f ? px[i] : ps[i * ss] * px[i];
  });
  return FL_OK;
}

static fl_status prelu_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  fl_gbc bc;
  bc2(&bc, y, x, s);
  const size_t ss = bc_st(&bc, 2);
  const float *G = y->grad;
  if (x->grad) {
    const int ax = fl_gacc(acc, 0);
    BC_ROWS(bc, {
      const float *px = x->data + off[1], *ps = s->data + off[2], *pg = G + off[0];
      for (size_t i = 0; i < inner; i++)
        put1(&x->grad[off[1] + i], px[i] > 0.0f ? pg[i] : ps[i * ss] * pg[i], ax);
    });
  }
  if (s->grad) {
    for (size_t i = 0; i < x->n; i++) n->ws[i] = x->data[i] > 0.0f ? 0.0f : G[i] * x->data[i];
    fl_gbc_reduce(&bc, 2, n->ws, 1.0f, s->grad, s->n, fl_gacc(acc, 1));
  }
  return FL_OK;
}

/* ------------------------------------------------------ Max and Min */

/* Max/Min over one or more inputs of one element type (float, or int64 in
 * the shape domain), broadcast together.  The gradient goes to the inputs
 * equal to the output, split evenly among them: torch.maximum/minimum give
 * each of two tied inputs half; ws counts the ties per output element. */
static fl_status mm_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *a = fl_gin(n, c, 0);
  if (!a) return fl_gop_fail(n, FL_EINVAL, "input 0 is required");
  int nd = a->ndim;
  int64_t shape[FL_G_MAX_DIMS];
  memcpy(shape, a->shape, (size_t)nd * sizeof *shape);
  for (int k = 1; k < n->n_in; k++) {
    const fl_gtensor *b = fl_gin(n, c, k);
    if (!b) return fl_gop_fail(n, FL_EINVAL, "input %d is omitted; every input is required", k);
    if (b->dtype != a->dtype)
      return fl_gop_fail(n, FL_EINVAL, "inputs %s and %s have different element types", a->name,
                         b->name);
    char sa[160], sb[160];
    if (fl_gbroadcast_shape(nd, shape, b->ndim, b->shape, &nd, shape) != FL_OK)
      return fl_gop_fail(n, FL_EINVAL, "input %s %s does not broadcast with %s, the shape of "
                         "the inputs before it", b->name,
                         fl_gshape_str(b->ndim, b->shape, sb, sizeof sb),
                         fl_gshape_str(nd, shape, sa, sizeof sa));
  }
  fl_gset_out(n, c, 0, a->dtype, nd, shape);
  *ws = a->dtype == FL_G_F32 ? fl_gout(n, c, 0)->n : 0;
  *saved = 0;
  return FL_OK;
}

/* The running pick of u (so far) and v (this input): NaN wins, as in
 * torch.maximum/minimum. */
static inline float mm_f(float u, float v, int ismax) {
  return (isnan(u) || (ismax ? u > v : u < v)) ? u : v;
}
static inline int64_t mm_i(int64_t u, int64_t v, int ismax) {
  return (ismax ? u > v : u < v) ? u : v;
}

/* y = input 0 broadcast (k 0), else y = PICK(y, input k) elementwise. */
#define MM_STEP(T, Y, X, PICK)                                                            \
  do {                                                                                    \
    fl_gbc bc;                                                                            \
    bc2(&bc, y, y, in);                                                                   \
    const size_t sx = bc_st(&bc, 2);                                                      \
    BC_ROWS(bc, {                                                                         \
      T *py = (Y) + off[0];                                                               \
      const T *px = (X) + off[2];                                                         \
      if (k == 0)                                                                         \
        for (size_t i = 0; i < inner; i++) py[i] = px[i * sx];                            \
      else                                                                                \
        for (size_t i = 0; i < inner; i++) py[i] = PICK(py[i], px[i * sx], ismax);        \
    });                                                                                   \
  } while (0)

static fl_status mm_forward(fl_gnode *n, fl_gctx *c, int ismax) {
  fl_gtensor *y = fl_gout(n, c, 0);
  for (int k = 0; k < n->n_in; k++) {
    const fl_gtensor *in = fl_gin(n, c, k);
    if (y->dtype == FL_G_I64)
      MM_STEP(int64_t, y->idata, in->idata, mm_i);
    else
      MM_STEP(float, y->data, in->data, mm_f);
  }
  return FL_OK;
}

/* Run the body (the macro's arguments) at every (output element o, input k element j) pair where
 * input k equals the output; py, pg, pcnt, px and i in scope. */
#define MM_TIES(...)                                                                     \
  do {                                                                                    \
    fl_gbc bc;                                                                            \
    bc2(&bc, y, y, in);                                                                   \
    const size_t sx = bc_st(&bc, 2);                                                      \
    BC_ROWS(bc, {                                                                         \
      const float *py = y->data + off[0], *px = in->data + off[2];                        \
      for (size_t i = 0; i < inner; i++)                                                  \
        if (px[i * sx] == py[i]) {                                                        \
          __VA_ARGS__                                                                     \
        }                                                                                 \
    });                                                                                   \
  } while (0)

static fl_status mm_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *y = fl_gout(n, c, 0);
  if (y->dtype != FL_G_F32) return FL_OK;
  float *cnt = n->ws;
  memset(cnt, 0, y->n * sizeof *cnt);
  for (int k = 0; k < n->n_in; k++) {
    const fl_gtensor *in = fl_gin(n, c, k);
    MM_TIES({ cnt[off[0] + i] += 1.0f; });
  }
  for (int k = 0; k < n->n_in; k++) {
    const fl_gtensor *in = fl_gin(n, c, k);
    if (!in->grad) continue;
    if (!fl_gacc(acc, k)) memset(in->grad, 0, in->n * sizeof *in->grad);
    MM_TIES({
      const float g = y->grad[off[0] + i];
      in->grad[off[2] + i * sx] += cnt[off[0] + i] == 1.0f ? g : g / cnt[off[0] + i];
    });
  }
  return FL_OK;
}

static fl_status max_forward(fl_gnode *n, fl_gctx *c) { return mm_forward(n, c, 1); }
static fl_status min_forward(fl_gnode *n, fl_gctx *c) { return mm_forward(n, c, 0); }

/* --------------------------------------------------------------- Mod */

/* Mod(a, b), broadcast.  fmod 1: C's fmod (the sign of a, torch.fmod);
 * fmod 0: the sign of b (Python's %, torch.remainder).  Float or int64
 * (shape domain; a zero divisor is refused).  Float gradients, as
 * PyTorch's: da = g, db = -g * trunc(a / b) (fmod 1) or -g * floor(a / b)
 * (fmod 0), summed over broadcast positions (ws holds db's terms). */
static fl_status mod_fmod(const fl_gnode *n, int *fm) {
  int64_t v;
  FL_TRY(fl_ga_int(n, "fmod", 0, &v));
  if (v != 0 && v != 1)
    return fl_gop_fail(n, FL_EINVAL, "fmod %lld: must be 0 or 1", (long long)v);
  *fm = (int)v;
  return FL_OK;
}

static fl_status mod_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  if (!a || !b) return fl_gop_fail(n, FL_EINVAL, "needs two inputs");
  if (a->dtype != b->dtype)
    return fl_gop_fail(n, FL_EINVAL, "inputs %s and %s have different element types", a->name,
                       b->name);
  int fm = 0, nd;
  FL_TRY(mod_fmod(n, &fm));
  int64_t shape[FL_G_MAX_DIMS];
  FL_TRY(bc2_shape(n, a, b, &nd, shape));
  fl_gset_out(n, c, 0, a->dtype, nd, shape);
  *ws = a->dtype == FL_G_F32 ? fl_gout(n, c, 0)->n : 0;
  *saved = 0;
  return FL_OK;
}

/* r = a mod b by C's % or fmod, then moved to b's sign for fmod 0. */
#define MOD_ROWS(T, A, B, Y, REM)                                                         \
  BC_ROWS(bc, {                                                                           \
    for (size_t i = 0; i < inner; i++) {                                                  \
      const T u = (A)[off[1] + i * sa], v = (B)[off[2] + i * sb];                         \
      T rem = (REM);                                                                      \
      if (!fm && rem != 0 && ((rem < 0) != (v < 0))) rem += v;                            \
      (Y)[off[0] + i] = rem;                                                              \
    }                                                                                     \
  })

static fl_status mod_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  int fm = 0;
  FL_TRY(mod_fmod(n, &fm));
  fl_gbc bc;
  bc2(&bc, y, a, b);
  const size_t sa = bc_st(&bc, 1), sb = bc_st(&bc, 2);
  if (a->dtype == FL_G_F32) {
    MOD_ROWS(float, a->data, b->data, y->data, fmodf(u, v));
    return FL_OK;
  }
  for (size_t i = 0; i < b->n; i++) /* refuse a zero divisor before writing anything */
    if (b->idata[i] == 0) return fl_gop_fail(n, FL_EINVAL, "int64 modulo by zero");
  MOD_ROWS(int64_t, a->idata, b->idata, y->idata, v == -1 ? 0 : u % v);
  return FL_OK;
}

static fl_status mod_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  if (y->dtype != FL_G_F32) return FL_OK;
  int fm = 0;
  FL_TRY(mod_fmod(n, &fm));
  fl_gbc bc;
  bc2(&bc, y, a, b);
  const size_t sa = bc_st(&bc, 1), sb = bc_st(&bc, 2);
  if (a->grad) fl_gbc_reduce(&bc, 1, y->grad, 1.0f, a->grad, a->n, fl_gacc(acc, 0));
  if (!b->grad) return FL_OK;
  BC_ROWS(bc, {
    for (size_t i = 0; i < inner; i++) {
      const float q = a->data[off[1] + i * sa] / b->data[off[2] + i * sb];
      n->ws[off[0] + i] = -y->grad[off[0] + i] * (fm ? truncf(q) : floorf(q));
    }
  });
  fl_gbc_reduce(&bc, 2, n->ws, 1.0f, b->grad, b->n, fl_gacc(acc, 1));
  return FL_OK;
}

/* ------------------------------------------------- And, Or, Xor */

/* Booleans are int64 0/1 (nonzero is true); broadcast; no gradient. */
enum logic_kind { LOGIC_AND, LOGIC_OR, LOGIC_XOR };

static fl_status logic_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_I64));
  FL_TRY(fl_gneed(n, c, 1, FL_G_I64));
  int nd;
  int64_t shape[FL_G_MAX_DIMS];
  FL_TRY(bc2_shape(n, fl_gin(n, c, 0), fl_gin(n, c, 1), &nd, shape));
  fl_gset_out(n, c, 0, FL_G_I64, nd, shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status logic_forward(fl_gnode *n, fl_gctx *c, enum logic_kind k) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_gbc bc;
  bc2(&bc, y, a, b);
  const size_t sa = bc_st(&bc, 1), sb = bc_st(&bc, 2);
  BC_ROWS(bc, {
    for (size_t i = 0; i < inner; i++) {
      const int u = a->idata[off[1] + i * sa] != 0, v = b->idata[off[2] + i * sb] != 0;
      y->idata[off[0] + i] = k == LOGIC_AND ? (u && v) : k == LOGIC_OR ? (u || v) : u != v;
    }
  });
  return FL_OK;
}

static fl_status and_forward(fl_gnode *n, fl_gctx *c) { return logic_forward(n, c, LOGIC_AND); }
static fl_status or_forward(fl_gnode *n, fl_gctx *c) { return logic_forward(n, c, LOGIC_OR); }
static fl_status xor_forward(fl_gnode *n, fl_gctx *c) { return logic_forward(n, c, LOGIC_XOR); }

/* --------------------------------------------------------------- table */

static const char *const no_attrs[] = {NULL};
static const char *const mod_attrs[] = {"fmod", NULL};

/* A unary op row: NAME's entry points and attributes; SIN/SOUT: whether
 * backward reads x / y; OPSET_MIN: the first opset with the op (0: all). */
#define UN_ROW(T, NAME, SIN, SOUT, OPSET_MIN, DOC)                                        \
  {.type = T, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,                       \
   .attrs = NAME##_spec.attrs, .infer = NAME##_infer, .forward = NAME##_forward,          \
   .backward = NAME##_backward, .save_in = SIN, .save_out = SOUT,                         \
   .opset_min = OPSET_MIN, .doc = DOC}
#define LOGIC_ROW(T, NAME)                                                                \
  {.type = T, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = no_attrs,    \
   .infer = logic_infer, .forward = NAME##_forward, .nodiff_in = 3,                       \
   .doc = "int64 0/1 booleans (nonzero is true), broadcast; no gradient"}
#define MM_ROW(T, FWD, DOC)                                                               \
  {.type = T, .min_in = 1, .max_in = 32, .min_out = 1, .max_out = 1, .attrs = no_attrs,   \
   .infer = mm_infer, .forward = FWD, .backward = mm_backward, .save_in = 0xffffffffu,    \
   .save_out = 1, .doc = DOC}

const fl_gop fl_gops_activation[] = {
    UN_ROW("HardSwish", hswish, 1, 0, 14, "float; gradient x/3 + 1/2 on [-3, 3] as PyTorch's"),
    UN_ROW("HardSigmoid", hsig, 1, 0, 0, "float; gradient alpha strictly inside (0, 1)"),
    UN_ROW("Elu", elu, 1, 0, 0, "float; gradient alpha at 0 (the exponential side, as PyTorch)"),
    UN_ROW("Selu", selu, 1, 0, 0, "float"),
    UN_ROW("Celu", celu, 1, 0, 0, "float; alpha 0 refused"),
    UN_ROW("Softplus", softplus, 1, 0, 0, "float; x itself above 20, as PyTorch's threshold"),
    UN_ROW("Softsign", softsign, 1, 0, 0, "float"),
    UN_ROW("Mish", mish, 1, 0, 18,
           "float (an opset 18 op: PyTorch exports Softplus, Tanh and Mul before it)"),
    UN_ROW("Abs", abs, 1, 0, 0, "float; gradient sign(x), 0 at 0"),
    UN_ROW("Reciprocal", recip, 0, 1, 0, "float"),
    UN_ROW("Sign", sign, 0, 0, 0, "float; zero gradient"),
    UN_ROW("Floor", floor, 0, 0, 0, "float; zero gradient"),
    UN_ROW("Ceil", ceil, 0, 0, 0, "float; zero gradient"),
    UN_ROW("Round", round, 0, 0, 0, "float, half to even; zero gradient"),
    {.type = "Clip", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = clip_infer, .forward = clip_forward, .backward = clip_backward, .save_in = 7,
     .nodiff_in = 6,
     .doc = "float; min, max as optional float scalar inputs (no gradient to them); gradient "
            "where min <= x <= max (torch.clamp's)"},
    {.type = "PRelu", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = no_attrs,
     .infer = prelu_infer, .forward = prelu_forward, .backward = prelu_backward, .save_in = 3,
     .doc = "float; slope broadcast one way to X; gradient to X and slope"},
    MM_ROW("Max", max_forward, "broadcast; float or int64; ties split the gradient evenly"),
    MM_ROW("Min", min_forward, "broadcast; float or int64; ties split the gradient evenly"),
    {.type = "Mod", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .attrs = mod_attrs,
     .infer = mod_infer, .forward = mod_forward, .backward = mod_backward, .save_in = 3,
     .doc = "fmod 0 (sign of the divisor) or 1 (C fmod); float or int64 (zero divisor "
            "refused), broadcast; float gradient to both"},
    LOGIC_ROW("And", and),
    LOGIC_ROW("Or", or),
    LOGIC_ROW("Xor", xor),
};
const size_t fl_gops_activation_n = sizeof fl_gops_activation / sizeof fl_gops_activation[0];
