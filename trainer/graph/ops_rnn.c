/* ops_rnn.c - the recurrent ONNX ops RNN, GRU and LSTM (opsets 13..17),
 * forward and backprop through time, on the CPU with cblas_sgemm.
 *
 * Why one file and one loop for three ops: they differ only in the cell
 * (gate count and the element-wise step), so one row of cells[] names a
 * cell and the shared code runs it.  Per direction the input projection
 * of every step is one GEMM up front (X [T*B, I] times W^T, all gates at
 * once), then each step adds h_prev R^T (one GEMM for all gates, GRU's
 * reset-gated candidate apart) and applies the cell.  The forward keeps,
 * in the node's saved floats, the activated gates and the hidden (and
 * cell) states of every step in time order, so backward walks the steps
 * in reverse with one GEMM per step for dh and then takes dW, dR and dX
 * as one GEMM each over all steps.
 *
 * Layout per direction d of the saved floats (time order t = 0..T-1):
 *   gates [T, B, G*H]   activated gates (ONNX order: LSTM iofc, GRU zrh)
 *   hs    [T+1, B, H]   hidden states; h_prev(t) = hs[t + rev], h(t) = hs[t + 1 - rev]
 *   cs    [T+1, B, H]   LSTM cell states, same indexing
 *   e     [T, B, H]     LSTM: tanh(c(t)); GRU: h_prev R_h^T + Rb_h
 *                       (linear_before_reset 1) or r * h_prev (0)
 * where rev is 1 for a direction that runs from t = T-1 down to 0. */
#include <config.h>

#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "fl_names.h"
#include "ops_internal.h"

/* ---------------------------------------------------------- the cells */

typedef enum { CELL_RNN, CELL_GRU, CELL_LSTM } cell_kind;

/* One recurrent op: its gates and the activations ONNX lists by default. */
typedef struct cell {
  cell_kind kind;
  int gates;
  const char *acts;           /* the defaults, comma-joined */
  const char *relu_acts;      /* another list taken (RNN's Relu), or NULL */
} cell;

static const cell cells[] = {
    [CELL_RNN] = {CELL_RNN, 1, "Tanh", "Relu"},
    [CELL_GRU] = {CELL_GRU, 3, "Sigmoid,Tanh", NULL},
    [CELL_LSTM] = {CELL_LSTM, 4, "Sigmoid,Tanh,Tanh", NULL},
};

/* The direction attribute's values. */
static const struct {
  const char *name;
  int D;
  int rev0;                   /* direction 0 runs back in time */
} directions[] = {{"forward", 1, 0}, {"reverse", 1, 1}, {"bidirectional", 2, 0}};

/* Inputs and outputs by position. */
enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };
enum { OUT_Y, OUT_YH, OUT_YC };

/* What one node computes, from its attributes and input shapes. */
typedef struct rnn_geo {
  const cell *cl;
  int64_t T, B, In, H, D, G; /* G: gates */
  int rev0;
  int lbr;                  /* GRU linear_before_reset */
  int relu;                 /* RNN with Relu */
  const int64_t *lens;      /* sequence_lens [B], NULL when absent or every sequence is whole */
} rnn_geo;

/* Whether step t is one of batch row b's (a row past its length keeps its
 * state and outputs zeros). */
static int live(const rnn_geo *g, int64_t t, size_t b) { return !g->lens || t < g->lens[b]; }

static size_t geo_gh(const rnn_geo *g) { return (size_t)(g->G * g->H); }
static size_t geo_bh(const rnn_geo *g) { return (size_t)(g->B * g->H); }
static int geo_rev(const rnn_geo *g, int64_t d) { return d ? 1 : g->rev0; }

/* Saved floats of one direction (see the layout above). */
static size_t saved_dir(const rnn_geo *g) {
  const size_t tb = (size_t)(g->T * g->B), bh = geo_bh(g);
  size_t s = tb * geo_gh(g) + (size_t)(g->T + 1) * bh;
  if (g->cl->kind == CELL_LSTM) s += (size_t)(g->T + 1) * bh;
  if (g->cl->kind != CELL_RNN) s += tb * (size_t)g->H;
  return s;
}

/* Scratch of one direction's backward: dG [T, B, G*H], GRU's dE [T, B, H],
 * then dh, dc and four [B, H] temporaries. */
static size_t ws_dir(const rnn_geo *g) {
  const size_t tb = (size_t)(g->T * g->B);
  return tb * geo_gh(g) + (g->cl->kind == CELL_GRU ? tb * (size_t)g->H : 0) + 6 * geo_bh(g);
}

/* ------------------------------------------------------- attributes */

/* The activations attribute (a STRINGS attribute, which the importer
 * hands over comma-joined) must list cl's defaults (or RNN's Relu) once,
 * or once per direction. */
static fl_status check_acts(const fl_gnode *n, const cell *cl, int64_t D, int *relu) {
  const char *s;
  FL_TRY(fl_ga_str(n, "activations", NULL, &s));
  *relu = 0;
  if (!s) return FL_OK;
  const char *const lists[2] = {cl->acts, cl->relu_acts};
  for (int k = 0; k < 2 && lists[k]; k++) {
    char twice[64];
    snprintf(twice, sizeof twice, "%s,%s", lists[k], lists[k]);
    if (!strcmp(s, lists[k]) || (D == 2 && !strcmp(s, twice))) {
      *relu = k;
      return FL_OK;
    }
  }
  return fl_gop_fail(n, FL_ENOTSUP,
                     "activations \"%s\" are not supported: only %s%s%s (the same for every "
                     "direction); export the default cell",
                     s, cl->acts, cl->relu_acts ? " or " : "",
                     cl->relu_acts ? cl->relu_acts : "");
}

static fl_status check_refused_attrs(const fl_gnode *n, const cell *cl) {
  int64_t layout, forget;
  FL_TRY(fl_ga_int(n, "layout", 0, &layout));
  if (layout != 0)
    return fl_gop_fail(n, FL_ENOTSUP, "layout %lld is not supported: only layout 0 (X as "
                       "[seq, batch, input]); transpose X before the node",
                       (long long)layout);
  if (fl_gattr_find(n, "clip"))
    return fl_gop_fail(n, FL_ENOTSUP, "attribute clip is not supported: remove the cell "
                       "clipping");
  FL_TRY(fl_ga_int(n, "input_forget", 0, &forget));
  if (cl->kind == CELL_LSTM && forget != 0)
    return fl_gop_fail(n, FL_ENOTSUP, "input_forget %lld is not supported: only 0",
                       (long long)forget);
  return FL_OK;
}

static fl_status parse_attrs(const fl_gnode *n, const cell *cl, rnn_geo *g) {
  int64_t hs, lbr;
  const char *dir;
  FL_TRY(check_refused_attrs(n, cl));
  FL_TRY(fl_ga_int(n, "hidden_size", 0, &hs));
  FL_TRY(fl_ga_int(n, "linear_before_reset", 0, &lbr));
  FL_TRY(fl_ga_str(n, "direction", "forward", &dir));
  if (hs <= 0)
    return fl_gop_fail(n, FL_EINVAL, "hidden_size %lld must be given and positive",
                       (long long)hs);
  if (lbr != 0 && lbr != 1)
    return fl_gop_fail(n, FL_EINVAL, "linear_before_reset %lld must be 0 or 1",
                       (long long)lbr);
  const int d = FL_ROWS_FIND(directions, dir);
  if (d < 0)
    return fl_gop_fail(n, FL_EINVAL, "direction \"%s\" is none of forward, reverse, "
                       "bidirectional", dir);
  g->D = directions[d].D, g->rev0 = directions[d].rev0;
  g->cl = cl;
  g->G = cl->gates;
  g->H = hs;
  g->lbr = (int)lbr;
  return check_acts(n, cl, g->D, &g->relu);
}

/* ----------------------------------------------------------- shapes */

/* Input i, when given, must be F32 of the shape want (rank nd). */
static fl_status need_shape(const fl_gnode *n, const fl_gctx *c, int i, const char *what,
                            int nd, const int64_t *want) {
  const fl_gtensor *t = fl_gin(n, c, i);
  if (!t) return FL_OK;
  FL_TRY(fl_gneed(n, c, i, FL_G_F32));
  int ok = t->ndim == nd;
  for (int d = 0; ok && d < nd; d++) ok = t->shape[d] == want[d];
  if (ok) return FL_OK;
  char sg[160], sw[160];
  return fl_gop_fail(n, FL_EINVAL, "%s (input %d, '%s') is %s, expected %s", what, i, t->name,
                     fl_gshape_str(t->ndim, t->shape, sg, sizeof sg),
                     fl_gshape_str(nd, want, sw, sizeof sw));
}

static fl_status check_inputs(const fl_gnode *n, const fl_gctx *c, rnn_geo *g) {
  const fl_gtensor *x = fl_gin(n, c, IN_X);
  char sx[160];
  if (fl_gin(n, c, IN_P))
    return fl_gop_fail(n, FL_ENOTSUP, "peepholes P (input 7, '%s') are not supported",
                       fl_gin(n, c, IN_P)->name);
  FL_TRY(fl_gneed(n, c, IN_X, FL_G_F32));
  if (x->ndim != 3 || x->shape[0] <= 0 || x->shape[1] <= 0 || x->shape[2] <= 0)
    return fl_gop_fail(n, FL_EINVAL, "X %s must be a non-empty [seq, batch, input]",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  g->T = x->shape[0], g->B = x->shape[1], g->In = x->shape[2];
  const int64_t gh = g->G * g->H, big = g->In > gh ? g->In : gh;
  if (g->T * g->B > INT_MAX / (big > g->H ? big : g->H))
    return fl_gop_fail(n, FL_EINVAL, "X %s with hidden_size %lld exceeds the BLAS limit",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx), (long long)g->H);
  const int64_t w[3] = {g->D, gh, g->In}, r[3] = {g->D, gh, g->H};
  const int64_t b[2] = {g->D, 2 * gh}, h[3] = {g->D, g->B, g->H};
  FL_TRY(fl_gneed(n, c, IN_W, FL_G_F32));
  FL_TRY(fl_gneed(n, c, IN_R, FL_G_F32));
  FL_TRY(need_shape(n, c, IN_W, "W", 3, w));
  FL_TRY(need_shape(n, c, IN_R, "R", 3, r));
  FL_TRY(need_shape(n, c, IN_B, "B", 2, b));
  FL_TRY(need_shape(n, c, IN_H0, "initial_h", 3, h));
  return g->cl->kind == CELL_LSTM ? need_shape(n, c, IN_C0, "initial_c", 3, h) : FL_OK;
}

/* sequence_lens (input 4): int64 [B], each in [0, T]; read when its
 * values are there (always at forward and backward, at bind when known). */
static fl_status check_lens(const fl_gnode *n, const fl_gctx *c, rnn_geo *g, int values) {
  const fl_gtensor *l = fl_gin(n, c, IN_LENS);
  char sl[160];
  g->lens = NULL;
  if (!l) return FL_OK;
  if (l->dtype != FL_G_I64 || l->ndim != 1 || l->shape[0] != g->B)
    return fl_gop_fail(n, FL_EINVAL, "sequence_lens (input 4, '%s') %s must be int64 [%lld]",
                       l->name, fl_gshape_str(l->ndim, l->shape, sl, sizeof sl),
                       (long long)g->B);
  if (!values) return FL_OK;
  int whole = 1;
  for (int64_t b = 0; b < g->B; b++) {
    if (l->idata[b] < 0 || l->idata[b] > g->T)
      return fl_gop_fail(n, FL_EINVAL, "sequence_lens (input 4, '%s') [%lld] is %lld, "
                         "outside [0, %lld] (X's sequence length)", l->name, (long long)b,
                         (long long)l->idata[b], (long long)g->T);
    whole &= l->idata[b] == g->T;
  }
  if (!whole) g->lens = l->idata;
  return FL_OK;
}

/* values: whether sequence_lens' values are to be read (see check_lens). */
static fl_status geometry(const fl_gnode *n, const fl_gctx *c, const cell *cl, rnn_geo *g,
                          int values) {
  FL_TRY(parse_attrs(n, cl, g));
  FL_TRY(check_inputs(n, c, g));
  return check_lens(n, c, g, values);
}

static fl_status cell_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved,
                            const cell *cl) {
  rnn_geo g;
  const fl_gtensor *l = fl_gin(n, c, IN_LENS);
  FL_TRY(geometry(n, c, cl, &g, l && l->known));
  if (c->stream)
    return fl_gop_fail(n, FL_ENOTSUP, "the recurrent ops run on the CPU only: train this "
                       "model with train.device cpu");
  const int64_t y[4] = {g.T, g.D, g.B, g.H};
  fl_gset_out(n, c, OUT_Y, FL_G_F32, 4, y);
  for (int o = OUT_YH; o < n->n_out; o++) fl_gset_out(n, c, o, FL_G_F32, 3, y + 1);
  *ws = (size_t)g.D * ws_dir(&g);
  *saved = (size_t)g.D * saved_dir(&g);
  return FL_OK;
}

/* ---------------------------------------------------------- forward */

/* One direction's weights and saved state. */
typedef struct dir_buf {
  const float *W, *R, *Wb, *Rb; /* Wb, Rb NULL without B */
  float *gates, *hs, *cs, *e;
  int rev;
} dir_buf;

static dir_buf dir_at(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, int64_t d) {
  const fl_gtensor *b = fl_gin(n, c, IN_B);
  const size_t gh = geo_gh(g), tb = (size_t)(g->T * g->B), bh = geo_bh(g);
  dir_buf u = {0};
  u.W = fl_gin(n, c, IN_W)->data + (size_t)d * gh * (size_t)g->In;
  u.R = fl_gin(n, c, IN_R)->data + (size_t)d * gh * (size_t)g->H;
  if (b) u.Wb = b->data + (size_t)d * 2 * gh, u.Rb = u.Wb + gh;
  u.gates = n->saved + (size_t)d * saved_dir(g);
  u.hs = u.gates + tb * gh;
  float *next = u.hs + (size_t)(g->T + 1) * bh;
  if (g->cl->kind == CELL_LSTM) u.cs = next, next += (size_t)(g->T + 1) * bh;
  if (g->cl->kind != CELL_RNN) u.e = next;
  u.rev = geo_rev(g, d);
  return u;
}

/* ------------------------------------------------ vector activations */

/* The gates' sigmoid and tanh dominate a step after its GEMM, and libm's
 * are scalar: these run four lanes at once on GCC's vector extensions
 * (SSE2, the x86-64 baseline), exp by the usual split x = n ln2 + r with a
 * degree-6 polynomial for e^r (relative error ~1e-7). */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
#define V_INLINE static inline __attribute__((always_inline))

static v4f v_splat(float a) { return (v4f){a, a, a, a}; }

/* a where m is set, else b (m: all-ones or all-zeros lanes). */
static v4f v_pick(v4i m, v4f a, v4f b) { return (v4f)(((v4i)a & m) | ((v4i)b & ~m)); }

V_INLINE v4f v_exp(v4f x) {
  x = v_pick(x > v_splat(88.0f), v_splat(88.0f), x);
  x = v_pick(x < v_splat(-87.0f), v_splat(-87.0f), x);
  const v4f fx = x * v_splat(1.44269504088896341f) + v_splat(0.5f);
  v4i n = __builtin_convertvector(fx, v4i);
  n += (v4i)(__builtin_convertvector(n, v4f) > fx); /* floor: -1 where truncation rounded up */
  const v4f fn = __builtin_convertvector(n, v4f);
  const v4f r = x - fn * v_splat(0.693359375f) - fn * v_splat(-2.12194440e-4f);
  v4f p = v_splat(1.9875691500e-4f);
  p = p * r + v_splat(1.3981999507e-3f);
  p = p * r + v_splat(8.3334519073e-3f);
  p = p * r + v_splat(4.1665795894e-2f);
  p = p * r + v_splat(1.6666665459e-1f);
  p = p * r + v_splat(5.0000001201e-1f);
  p = p * r * r + r + v_splat(1.0f);
  return p * (v4f)((n + 127) << 23);
}

static v4f v_sigmoid(v4f x) { return v_splat(1.0f) / (v_splat(1.0f) + v_exp(-x)); }

/* tanh x = 1 - 2 / (1 + e^2x) (absolute error ~1e-7 near 0). */
static v4f v_tanh(v4f x) {
  return v_splat(1.0f) - v_splat(2.0f) / (v_splat(1.0f) + v_exp(x + x));
}

static v4f ld4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

/* x[0..n) = F(x) in place, the tail through a padded vector so every
 * element gets the same arithmetic (a macro: F inlined). */
#define MAP_V(x, n, F)                                                                        \
  do {                                                                                        \
    size_t i_ = 0;                                                                            \
    for (; i_ + 4 <= (n); i_ += 4) st4((x) + i_, F(ld4((x) + i_)));                           \
    if (i_ < (n)) {                                                                           \
      v4f v_ = v_splat(0.0f);                                                                 \
      memcpy(&v_, (x) + i_, ((n)-i_) * sizeof *(x));                                          \
      v_ = F(v_);                                                                             \
      memcpy((x) + i_, &v_, ((n)-i_) * sizeof *(x));                                          \
    }                                                                                         \
  } while (0)

static void sigmoid_n(float *x, size_t n) { MAP_V(x, n, v_sigmoid); }
static void tanh_n(float *x, size_t n) { MAP_V(x, n, v_tanh); }

/* gates = X W^T + the biases added outside the recurrence (all of Wb and
 * Rb but GRU's Rb_h with linear_before_reset, which is inside r * (...)). */
static void project_inputs(const rnn_geo *g, const float *x, const dir_buf *u) {
  const int tb = (int)(g->T * g->B), gh = (int)geo_gh(g);
  if (u->Wb) { /* every row starts as the bias, the GEMM adds onto it */
    const int rb_end = (g->cl->kind == CELL_GRU && g->lbr) ? 2 * (int)g->H : gh;
    for (int j = 0; j < gh; j++) u->gates[j] = u->Wb[j] + (j < rb_end ? u->Rb[j] : 0.0f);
    for (int r = 1; r < tb; r++)
      memcpy(u->gates + (size_t)r * (size_t)gh, u->gates, (size_t)gh * sizeof *u->gates);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tb, gh, (int)g->In, 1.0f, x, (int)g->In,
              u->W, (int)g->In, u->Wb ? 1.0f : 0.0f, u->gates, gh);
}

/* gt [B, gates*H] (ld ldg) += hp [B, H] R[0:gates*H]^T. */
static void add_recurrent(const rnn_geo *g, const float *hp, const float *R, int gates,
                          float *gt, int ldg) {
  const int H = (int)g->H;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->B, gates * H, H, 1.0f, hp, H, R,
              H, 1.0f, gt, ldg);
}

static void step_rnn(const rnn_geo *g, const dir_buf *u, int64_t t) {
  const size_t bh = geo_bh(g);
  float *gt = u->gates + (size_t)t * bh;
  const float *hp = u->hs + (size_t)(t + u->rev) * bh;
  float *h = u->hs + (size_t)(t + 1 - u->rev) * bh;
  add_recurrent(g, hp, u->R, 1, gt, (int)g->H);
  if (g->relu)
    for (size_t i = 0; i < bh; i++) h[i] = gt[i] = gt[i] > 0.0f ? gt[i] : 0.0f;
  else {
    tanh_n(gt, bh);
    memcpy(h, gt, bh * sizeof *h);
  }
}

static void step_lstm(const rnn_geo *g, const dir_buf *u, int64_t t) {
  const size_t H = (size_t)g->H, bh = geo_bh(g), gh = 4 * H;
  float *gt = u->gates + (size_t)t * (size_t)g->B * gh;
  const size_t prev = (size_t)(t + u->rev) * bh, cur = (size_t)(t + 1 - u->rev) * bh;
  add_recurrent(g, u->hs + prev, u->R, 4, gt, (int)gh);
  float *tc = u->e + (size_t)t * bh;
  for (size_t b = 0; b < (size_t)g->B; b++) {
    float *gi = gt + b * gh, *go = gi + H, *gf = go + H, *gc = gf + H;
    const float *cp = u->cs + prev + b * H;
    float *c = u->cs + cur + b * H, *h = u->hs + cur + b * H, *tcb = tc + b * H;
    sigmoid_n(gi, 3 * H); /* i, o, f */
    tanh_n(gc, H);
    size_t j = 0;
    for (; j + 4 <= H; j += 4) {
      const v4f cv = ld4(gf + j) * ld4(cp + j) + ld4(gi + j) * ld4(gc + j);
      st4(c + j, cv);
      st4(tcb + j, cv);
    }
    for (; j < H; j++) tcb[j] = c[j] = gf[j] * cp[j] + gi[j] * gc[j];
    tanh_n(tcb, H);
    for (j = 0; j + 4 <= H; j += 4) st4(h + j, ld4(go + j) * ld4(tcb + j));
    for (; j < H; j++) h[j] = go[j] * tcb[j];
  }
}

/* The GRU's candidate pre-activation gets r * (h_prev Rh^T + Rb_h) with
 * linear_before_reset, else (r * h_prev) Rh^T (Rb_h is in the gates). */
static void gru_candidate(const rnn_geo *g, const dir_buf *u, const float *hp, float *gt,
                          float *e) {
  const size_t H = (size_t)g->H, gh = 3 * H;
  const float *Rh = u->R + 2 * H * H;
  if (g->lbr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->B, (int)H, (int)H, 1.0f, hp,
                (int)H, Rh, (int)H, 0.0f, e, (int)H);
    for (size_t b = 0; b < (size_t)g->B; b++)
      for (size_t j = 0; j < H; j++) {
        if (u->Rb) e[b * H + j] += u->Rb[2 * H + j];
        gt[b * gh + 2 * H + j] += gt[b * gh + H + j] * e[b * H + j];
      }
    return;
  }
  for (size_t b = 0; b < (size_t)g->B; b++)
    for (size_t j = 0; j < H; j++) e[b * H + j] = gt[b * gh + H + j] * hp[b * H + j];
  add_recurrent(g, e, Rh, 1, gt + 2 * H, (int)gh);
}

static void step_gru(const rnn_geo *g, const dir_buf *u, int64_t t) {
  const size_t H = (size_t)g->H, bh = geo_bh(g), gh = 3 * H;
  float *gt = u->gates + (size_t)t * (size_t)g->B * gh, *e = u->e + (size_t)t * bh;
  const float *hp = u->hs + (size_t)(t + u->rev) * bh;
  float *h = u->hs + (size_t)(t + 1 - u->rev) * bh;
  add_recurrent(g, hp, u->R, 2, gt, (int)gh);
  for (size_t b = 0; b < (size_t)g->B; b++)
    sigmoid_n(gt + b * gh, 2 * H);
  gru_candidate(g, u, hp, gt, e);
  for (size_t b = 0; b < (size_t)g->B; b++) {
    const float *z = gt + b * gh;
    float *hh = gt + b * gh + 2 * H;
    tanh_n(hh, H);
    for (size_t j = 0; j < H; j++) {
      h[b * H + j] = (1.0f - z[j]) * hh[j] + z[j] * hp[b * H + j];
    }
  }
}

/* The initial state d of input i (zeros when absent) into slot. */
static void initial_state(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, int i,
                          int64_t d, float *slot) {
  const fl_gtensor *t = fl_gin(n, c, i);
  const size_t bh = geo_bh(g);
  if (t)
    memcpy(slot, t->data + (size_t)d * bh, bh * sizeof *slot);
  else
    memset(slot, 0, bh * sizeof *slot);
}

/* Rows past their sequence keep the state they had before step t. */
static void hold_state(const rnn_geo *g, const dir_buf *u, int64_t t) {
  const size_t H = (size_t)g->H, bh = geo_bh(g);
  const size_t prev = (size_t)(t + u->rev) * bh, cur = (size_t)(t + 1 - u->rev) * bh;
  for (size_t b = 0; b < (size_t)g->B; b++) {
    if (live(g, t, b)) continue;
    memcpy(u->hs + cur + b * H, u->hs + prev + b * H, H * sizeof(float));
    if (u->cs) memcpy(u->cs + cur + b * H, u->cs + prev + b * H, H * sizeof(float));
  }
}

static void forward_dir(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, int64_t d) {
  const dir_buf u = dir_at(n, c, g, d);
  const size_t first = (size_t)(u.rev ? g->T : 0) * geo_bh(g);
  project_inputs(g, fl_gin(n, c, IN_X)->data, &u);
  initial_state(n, c, g, IN_H0, d, u.hs + first);
  if (u.cs) initial_state(n, c, g, IN_C0, d, u.cs + first);
  for (int64_t k = 0; k < g->T; k++) {
    const int64_t t = u.rev ? g->T - 1 - k : k;
    if (g->cl->kind == CELL_LSTM)
      step_lstm(g, &u, t);
    else if (g->cl->kind == CELL_GRU)
      step_gru(g, &u, t);
    else
      step_rnn(g, &u, t);
    if (g->lens) hold_state(g, &u, t);
  }
}

/* Y [T, D, B, H], Y_h and Y_c [D, B, H] from the saved states. */
static void write_outputs(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, int64_t d) {
  const dir_buf u = dir_at(n, c, g, d);
  const size_t bh = geo_bh(g), last = (size_t)(u.rev ? 0 : g->T) * bh;
  const fl_gtensor *y = fl_gout(n, c, OUT_Y), *yh = fl_gout(n, c, OUT_YH);
  const fl_gtensor *yc = fl_gout(n, c, OUT_YC);
  for (int64_t t = 0; y && t < g->T; t++) {
    float *yt = y->data + (size_t)(t * g->D + d) * bh;
    memcpy(yt, u.hs + (size_t)(t + 1 - u.rev) * bh, bh * sizeof(float));
    for (size_t b = 0; g->lens && b < (size_t)g->B; b++)
      if (!live(g, t, b)) memset(yt + b * (size_t)g->H, 0, (size_t)g->H * sizeof(float));
  }
  if (yh) memcpy(yh->data + (size_t)d * bh, u.hs + last, bh * sizeof(float));
  if (yc) memcpy(yc->data + (size_t)d * bh, u.cs + last, bh * sizeof(float));
}

static fl_status cell_forward(fl_gnode *n, fl_gctx *c, const cell *cl) {
  rnn_geo g;
  FL_TRY(geometry(n, c, cl, &g, 1));
  for (int64_t d = 0; d < g.D; d++) {
    forward_dir(n, c, &g, d);
    write_outputs(n, c, &g, d);
  }
  return FL_OK;
}

/* --------------------------------------------------------- backward */

/* One direction's backward scratch (ws_dir floats). */
typedef struct dir_grad {
  float *dg;     /* [T, B, G*H]: d loss / d gate pre-activations */
  float *de;     /* GRU [T, B, H]: d loss / d (what e holds, as R_h sees it) */
  float *dh, *dc; /* [B, H]: the state gradients carried back */
  float *tmp, *tmp2;
  float *hold_h, *hold_c; /* [B, H]: dh, dc of the rows past their sequence */
} dir_grad;

static dir_grad grad_at(const fl_gnode *n, const rnn_geo *g, int64_t d) {
  const size_t tb = (size_t)(g->T * g->B), bh = geo_bh(g);
  dir_grad v;
  v.dg = n->ws + (size_t)d * ws_dir(g);
  v.de = v.dg + tb * geo_gh(g);
  v.dh = v.de + (g->cl->kind == CELL_GRU ? tb * (size_t)g->H : 0);
  v.dc = v.dh + bh;
  v.tmp = v.dc + bh;
  v.tmp2 = v.tmp + bh;
  v.hold_h = v.tmp2 + bh;
  v.hold_c = v.hold_h + bh;
  return v;
}

/* dh (+)= the output gradients of h(t) for direction d. */
static void add_dy(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, int64_t d, int64_t t,
                   float *dh) {
  const fl_gtensor *y = fl_gout(n, c, OUT_Y);
  const size_t bh = geo_bh(g);
  if (!y || !y->grad) return;
  const float *dy = y->grad + (size_t)(t * g->D + d) * bh;
  const size_t H = (size_t)g->H;
  for (size_t b = 0; b < (size_t)g->B; b++) {
    if (!live(g, t, b)) continue; /* Y is 0 there */
    for (size_t j = 0; j < H; j++) dh[b * H + j] += dy[b * H + j];
  }
}

/* dh_prev = dg_t [B, G*H] R [G*H, H] (+ dh_prev when add). */
static void back_recurrent(const rnn_geo *g, const float *dgt, int ldg, const float *R,
                           int gates, float *dh, int add) {
  const int H = (int)g->H;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->B, H, gates * H, 1.0f, dgt,
              ldg, R, H, add ? 1.0f : 0.0f, dh, H);
}

static void back_rnn(const rnn_geo *g, const dir_buf *u, const dir_grad *v, int64_t t) {
  const size_t bh = geo_bh(g);
  const float *h = u->gates + (size_t)t * bh;
  float *dg = v->dg + (size_t)t * bh;
  if (g->relu)
    for (size_t i = 0; i < bh; i++) dg[i] = h[i] > 0.0f ? v->dh[i] : 0.0f;
  else
    for (size_t i = 0; i < bh; i++) dg[i] = v->dh[i] * (1.0f - h[i] * h[i]);
  back_recurrent(g, dg, (int)g->H, u->R, 1, v->dh, 0);
}

/* The first k of v's four lanes from p / into p. */
V_INLINE v4f ldn(const float *p, size_t k) {
  v4f v = v_splat(0.0f);
  memcpy(&v, p, k * sizeof *p);
  return v;
}
V_INLINE void stn(float *p, v4f v, size_t k) { memcpy(p, &v, k * sizeof *p); }

/* Four (k) units of one LSTM step's backward: gates at g (i, o, f, c at
 * strides of H), c_prev, tanh(c), dh; gate gradients into d, and dc
 * carried back in place. */
V_INLINE void lstm_lanes(const float *g, size_t H, const float *cp, const float *tcb,
                       const float *dhp, float *d, float *dcp, size_t k) {
  const v4f one = v_splat(1.0f), i = ldn(g, k), o = ldn(g + H, k), f = ldn(g + 2 * H, k);
  const v4f cc = ldn(g + 3 * H, k), tc = ldn(tcb, k), dh = ldn(dhp, k);
  const v4f dct = ldn(dcp, k) + dh * o * (one - tc * tc);
  stn(d, dct * cc * i * (one - i), k);
  stn(d + H, dh * tc * o * (one - o), k);
  stn(d + 2 * H, dct * ldn(cp, k) * f * (one - f), k);
  stn(d + 3 * H, dct * i * (one - cc * cc), k);
  stn(dcp, dct * f, k);
}

static void back_lstm(const rnn_geo *g, const dir_buf *u, const dir_grad *v, int64_t t) {
  const size_t H = (size_t)g->H, bh = geo_bh(g), gh = 4 * H;
  const float *gt = u->gates + (size_t)t * (size_t)g->B * gh;
  float *dgt = v->dg + (size_t)t * (size_t)g->B * gh;
  const size_t prev = (size_t)(t + u->rev) * bh;
  for (size_t b = 0; b < (size_t)g->B; b++) {
    const float *gi = gt + b * gh, *cp = u->cs + prev + b * H;
    const float *tcb = u->e + (size_t)t * bh + b * H, *dh = v->dh + b * H;
    float *di = dgt + b * gh, *dc = v->dc + b * H;
    size_t j = 0;
    for (; j + 4 <= H; j += 4) lstm_lanes(gi + j, H, cp + j, tcb + j, dh + j, di + j, dc + j, 4);
    if (j < H) lstm_lanes(gi + j, H, cp + j, tcb + j, dh + j, di + j, dc + j, H - j);
  }
  back_recurrent(g, dgt, (int)gh, u->R, 4, v->dh, 0);
}

/* GRU: the candidate's and update gate's gradients (dz, dhh into dg),
 * dE, and the part of dh_prev that does not go through R into tmp. */
static void back_gru_gates(const rnn_geo *g, const dir_buf *u, const dir_grad *v, int64_t t) {
  const size_t H = (size_t)g->H, bh = geo_bh(g), gh = 3 * H;
  const float *gt = u->gates + (size_t)t * (size_t)g->B * gh, *e = u->e + (size_t)t * bh;
  const float *hp = u->hs + (size_t)(t + u->rev) * bh;
  float *dgt = v->dg + (size_t)t * (size_t)g->B * gh, *de = v->de + (size_t)t * bh;
  for (size_t b = 0; b < (size_t)g->B; b++)
    for (size_t j = 0; j < H; j++) {
      const size_t k = b * H + j, r = b * gh + j;
      const float z = gt[r], rg = gt[r + H], hh = gt[r + 2 * H], dh = v->dh[k];
      const float dhh = dh * (1.0f - z) * (1.0f - hh * hh);
      dgt[r] = dh * (hp[k] - hh) * z * (1.0f - z);
      dgt[r + 2 * H] = dhh;
      de[k] = g->lbr ? dhh * rg : dhh;
      if (g->lbr) dgt[r + H] = dhh * e[k] * rg * (1.0f - rg);
      v->tmp[k] = dh * z;
    }
}

static void back_gru(const rnn_geo *g, const dir_buf *u, const dir_grad *v, int64_t t) {
  const size_t H = (size_t)g->H, bh = geo_bh(g), gh = 3 * H;
  const float *gt = u->gates + (size_t)t * (size_t)g->B * gh;
  const float *hp = u->hs + (size_t)(t + u->rev) * bh;
  float *dgt = v->dg + (size_t)t * (size_t)g->B * gh, *de = v->de + (size_t)t * bh;
  const float *Rh = u->R + 2 * H * H;
  back_gru_gates(g, u, v, t);
  if (g->lbr) {
    back_recurrent(g, de, (int)H, Rh, 1, v->tmp, 1);
  } else { /* d (r * h_prev) = dhh Rh: to r and to h_prev */
    back_recurrent(g, de, (int)H, Rh, 1, v->tmp2, 0);
    for (size_t b = 0; b < (size_t)g->B; b++)
      for (size_t j = 0; j < H; j++) {
        const size_t k = b * H + j, r = b * gh + j;
        const float rg = gt[r + H];
        dgt[r + H] = v->tmp2[k] * hp[k] * rg * (1.0f - rg);
        v->tmp[k] += v->tmp2[k] * rg;
      }
  }
  memcpy(v->dh, v->tmp, bh * sizeof *v->dh);
  back_recurrent(g, dgt, (int)gh, u->R, 2, v->dh, 1);
}

/* Rows past their sequence at step t: their dh and dc pass step t
 * unchanged and its gate gradients are zero.  put 0 keeps the carried
 * gradients aside (before the step's backward), put 1 puts them back. */
static void hold_grads(const rnn_geo *g, const dir_grad *v, int64_t t, int put) {
  const size_t H = (size_t)g->H, gh = geo_gh(g);
  for (size_t b = 0; b < (size_t)g->B; b++) {
    if (live(g, t, b)) continue;
    const size_t k = b * H;
    memcpy(put ? v->dh + k : v->hold_h + k, put ? v->hold_h + k : v->dh + k, H * sizeof(float));
    memcpy(put ? v->dc + k : v->hold_c + k, put ? v->hold_c + k : v->dc + k, H * sizeof(float));
    if (!put) continue;
    memset(v->dg + ((size_t)t * (size_t)g->B + b) * gh, 0, gh * sizeof(float));
    if (g->cl->kind == CELL_GRU)
      memset(v->de + ((size_t)t * (size_t)g->B + b) * H, 0, H * sizeof(float));
  }
}

/* Backprop through time of direction d: dg (and de) for every step, and
 * the initial states' gradients left in dh and dc. */
static void backward_dir(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, int64_t d) {
  const dir_buf u = dir_at(n, c, g, d);
  const dir_grad v = grad_at(n, g, d);
  const size_t bh = geo_bh(g);
  const fl_gtensor *yh = fl_gout(n, c, OUT_YH), *yc = fl_gout(n, c, OUT_YC);
  if (yh && yh->grad)
    memcpy(v.dh, yh->grad + (size_t)d * bh, bh * sizeof(float));
  else
    memset(v.dh, 0, bh * sizeof(float));
  if (yc && yc->grad)
    memcpy(v.dc, yc->grad + (size_t)d * bh, bh * sizeof(float));
  else
    memset(v.dc, 0, bh * sizeof(float));
  for (int64_t k = 0; k < g->T; k++) {
    const int64_t t = u.rev ? k : g->T - 1 - k;
    add_dy(n, c, g, d, t, v.dh);
    if (g->lens) hold_grads(g, &v, t, 0);
    if (g->cl->kind == CELL_LSTM)
      back_lstm(g, &u, &v, t);
    else if (g->cl->kind == CELL_GRU)
      back_gru(g, &u, &v, t);
    else
      back_rnn(g, &u, &v, t);
    if (g->lens) hold_grads(g, &v, t, 1);
  }
}

/* dst[j] (+)= sum over rows of m [rows, cols] (ld) at column j. */
static void col_sums(const float *m, size_t rows, size_t cols, size_t ld, float *dst, int acc) {
  if (!acc) memset(dst, 0, cols * sizeof *dst);
  for (size_t r = 0; r < rows; r++) {
    const float *row = m + r * ld;
    size_t j = 0;
    for (; j + 4 <= cols; j += 4) st4(dst + j, ld4(dst + j) + ld4(row + j));
    for (; j < cols; j++) dst[j] += row[j];
  }
}

/* d B[d] = [d Wb, d Rb]: the gate gradients summed over steps and batch
 * (GRU's Rb_h takes dE, which is its own with linear_before_reset and the
 * candidate's otherwise). */
static void grad_bias(const rnn_geo *g, const dir_grad *v, float *db, int acc) {
  const size_t tb = (size_t)(g->T * g->B), gh = geo_gh(g), H = (size_t)g->H;
  col_sums(v->dg, tb, gh, gh, db, acc);
  if (g->cl->kind != CELL_GRU) { /* d Rb = d Wb */
    if (acc)
      col_sums(v->dg, tb, gh, gh, db + gh, acc);
    else
      memcpy(db + gh, db, gh * sizeof *db);
    return;
  }
  col_sums(v->dg, tb, 2 * H, gh, db + gh, acc);
  col_sums(v->de, tb, H, H, db + gh + 2 * H, acc);
}

/* d R[d] = dg^T h_prev over all steps (GRU: the candidate rows from dE
 * and what R_h multiplied: h_prev or r * h_prev). */
static void grad_rec(const rnn_geo *g, const dir_buf *u, const dir_grad *v, float *dr, int acc) {
  const int tb = (int)(g->T * g->B), gh = (int)geo_gh(g), H = (int)g->H;
  const float *hprev = u->hs + (size_t)u->rev * geo_bh(g), beta = acc ? 1.0f : 0.0f;
  const int rows = g->cl->kind == CELL_GRU ? 2 * H : gh;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, H, tb, 1.0f, v->dg, gh, hprev, H,
              beta, dr, H);
  if (g->cl->kind == CELL_GRU)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, H, tb, 1.0f, v->de, H,
                g->lbr ? hprev : u->e, H, beta, dr + (size_t)2 * (size_t)H * (size_t)H, H);
}

/* The inputs' gradients, in input order, from every direction's dg. */
static void grad_inputs(const fl_gnode *n, const fl_gctx *c, const rnn_geo *g, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, IN_X);
  const int tb = (int)(g->T * g->B), gh = (int)geo_gh(g), ni = (int)g->In;
  const size_t bh = geo_bh(g);
  float *dx = x->grad, *dw = fl_gin_grad(n, c, IN_W), *dr = fl_gin_grad(n, c, IN_R);
  float *db = fl_gin_grad(n, c, IN_B), *dh0 = fl_gin_grad(n, c, IN_H0);
  float *dc0 = fl_gin_grad(n, c, IN_C0);
  for (int64_t d = 0; dx && d < g->D; d++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tb, ni, gh, 1.0f, grad_at(n, g, d).dg,
                gh, dir_at(n, c, g, d).W, ni, (d || fl_gacc(acc, IN_X)) ? 1.0f : 0.0f, dx, ni);
  for (int64_t d = 0; dw && d < g->D; d++)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, gh, ni, tb, 1.0f, grad_at(n, g, d).dg,
                gh, x->data, ni, fl_gacc(acc, IN_W) ? 1.0f : 0.0f, dw + (size_t)(d * gh * ni), ni);
  for (int64_t d = 0; dr && d < g->D; d++) {
    const dir_buf u = dir_at(n, c, g, d);
    const dir_grad v = grad_at(n, g, d);
    grad_rec(g, &u, &v, dr + (size_t)d * (size_t)gh * (size_t)g->H, fl_gacc(acc, IN_R));
  }
  for (int64_t d = 0; db && d < g->D; d++) {
    const dir_grad v = grad_at(n, g, d);
    grad_bias(g, &v, db + (size_t)(d * 2 * gh), fl_gacc(acc, IN_B));
  }
  for (int64_t d = 0; dh0 && d < g->D; d++)
    fl_gput(dh0 + (size_t)d * bh, grad_at(n, g, d).dh, bh, fl_gacc(acc, IN_H0));
  for (int64_t d = 0; dc0 && d < g->D; d++)
    fl_gput(dc0 + (size_t)d * bh, grad_at(n, g, d).dc, bh, fl_gacc(acc, IN_C0));
}

static fl_status cell_backward(fl_gnode *n, fl_gctx *c, unsigned acc, const cell *cl) {
  rnn_geo g;
  FL_TRY(geometry(n, c, cl, &g, 1));
  for (int64_t d = 0; d < g.D; d++) backward_dir(n, c, &g, d);
  grad_inputs(n, c, &g, acc);
  return FL_OK;
}

/* ------------------------------------------------------------- table */

#define CELL_OPS(name, kind)                                                                  \
  static fl_status name##_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {        \
    return cell_infer(n, c, ws, saved, &cells[kind]);                                         \
  }                                                                                           \
  static fl_status name##_forward(fl_gnode *n, fl_gctx *c) {                                  \
    return cell_forward(n, c, &cells[kind]);                                                  \
  }                                                                                           \
  static fl_status name##_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {                   \
    return cell_backward(n, c, acc, &cells[kind]);                                            \
  }
CELL_OPS(rnn, CELL_RNN)
CELL_OPS(gru, CELL_GRU)
CELL_OPS(lstm, CELL_LSTM)

static const char *const rnn_attrs[] = {"activations", "clip", "direction", "hidden_size",
                                        "layout", NULL};
static const char *const gru_attrs[] = {"activations", "clip", "direction", "hidden_size",
                                        "layout", "linear_before_reset", NULL};
static const char *const lstm_attrs[] = {"activations", "clip", "direction", "hidden_size",
                                         "input_forget", "layout", NULL};

/* Backward reads X, W, R and sequence_lens (the states it needs are in
 * saved). */
#define RNN_SAVE_IN ((1u << IN_X) | (1u << IN_W) | (1u << IN_R) | (1u << IN_LENS))

/* The family's rows, listed by ops_registry.c's families[]: static data,
 * nobody's to free. */
const fl_gop fl_gops_rnn[] = {
    {.type = "RNN", .min_in = 3, .max_in = 6, .min_out = 1, .max_out = 2, .attrs = rnn_attrs,
     .infer = rnn_infer, .forward = rnn_forward, .backward = rnn_backward,
     .save_in = RNN_SAVE_IN, .nodiff_in = 1u << IN_LENS,
     .doc = "direction forward/reverse/bidirectional, sequence_lens, initial_h, activations "
            "Tanh or Relu; refused: layout 1, clip, other activations"},
    {.type = "GRU", .min_in = 3, .max_in = 6, .min_out = 1, .max_out = 2, .attrs = gru_attrs,
     .infer = gru_infer, .forward = gru_forward, .backward = gru_backward,
     .save_in = RNN_SAVE_IN, .nodiff_in = 1u << IN_LENS,
     .doc = "direction forward/reverse/bidirectional, sequence_lens, initial_h, "
            "linear_before_reset 0 and 1; refused: layout 1, clip, activations other than "
            "Sigmoid,Tanh"},
    {.type = "LSTM", .min_in = 3, .max_in = 8, .min_out = 1, .max_out = 3, .attrs = lstm_attrs,
     .infer = lstm_infer, .forward = lstm_forward, .backward = lstm_backward,
     .save_in = RNN_SAVE_IN, .nodiff_in = (1u << IN_LENS) | (1u << IN_P),
     .doc = "direction forward/reverse/bidirectional, sequence_lens, initial_h/initial_c; "
            "refused: peepholes P, layout 1, clip, input_forget 1, activations other than "
            "Sigmoid,Tanh,Tanh"},
};
const size_t fl_gops_rnn_n = sizeof fl_gops_rnn / sizeof fl_gops_rnn[0];
