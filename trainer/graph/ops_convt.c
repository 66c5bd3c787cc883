/* ops_convt.c - ConvTranspose (ONNX ConvTranspose-11, the definition of
 * opsets 13 to 17) over [N, C, H, W] images or [N, C, L] sequences, on the
 * CPU: what PyTorch's nn.ConvTranspose1d/2d export (U-Net decoders,
 * learned upsampling).
 *
 * A transposed convolution is the adjoint of a convolution: its forward
 * is a convolution's input gradient, its input gradient a convolution's
 * forward.  So it takes the conv's column helpers (fl_gim2col and
 * fl_gcol2im_add, ops_conv.c) with the geometry seen from that
 * convolution, whose input is this op's output Y and whose output is this
 * op's input X.  Per image and group, with the weight [C, O/group, kh, kw]
 * as ONNX and PyTorch lay it out:
 *   forward   col = W_g^T . X_g, then Y_g += col2im(col), then the bias;
 *   backward  col = im2col(dY_g), dX_g (+)= W_g . col, dW_g (+)= X_g . col^T;
 * dB sums dY.  No CUDA twin: a gpu graph holding one is refused at create. */
#include <config.h>

#include <cblas.h>
#include <string.h>

#include "ops_internal.h"

/* Attribute values larger than this are refused (the output sizes they
 * give stay far from int64 overflow). */
#define CONVT_MAX_ATTR ((int64_t)1 << 20)

typedef struct convt_p {
  fl_gwin g;        /* the adjoint conv's: input Y [O, H, W], output X's [oh, ow] plane */
  int64_t C, O;     /* X's channels, Y's channels */
  int64_t group, Cg, Og;
} convt_p;

/* INTS attribute name into out[0..want) (out holds 4), each in
 * [0, CONVT_MAX_ATTR]: def everywhere when absent. */
static fl_status convt_ints(const fl_gnode *n, const char *name, int want, int64_t def,
                            int64_t *out) {
  int cnt;
  FL_TRY(fl_ga_ints(n, name, out, 4, &cnt));
  if (cnt < 0) {
    for (int i = 0; i < want; i++) out[i] = def;
    return FL_OK;
  }
  if (cnt != want)
    return fl_gop_fail(n, FL_EINVAL, "%s has %d values; it needs %d for this input's rank",
                       name, cnt, want);
  for (int i = 0; i < want; i++)
    if (out[i] < 0 || out[i] > CONVT_MAX_ATTR)
      return fl_gop_fail(n, FL_EINVAL, "%s[%d] is %lld; it must be in [0, 2^20]", name, i,
                         (long long)out[i]);
  return FL_OK;
}

/* The modes taken: auto_pad NOTSET (explicit pads) and no output_shape. */
static fl_status convt_modes(const fl_gnode *n) {
  const char *ap;
  FL_TRY(fl_ga_str(n, "auto_pad", "NOTSET", &ap));
  if (strcmp(ap, "NOTSET") != 0)
    return fl_gop_fail(n, FL_ENOTSUP, "auto_pad %s is not supported (NOTSET only: give pads, "
                       "as torch.onnx exports them)", ap);
  if (fl_gattr_find(n, "output_shape"))
    return fl_gop_fail(n, FL_ENOTSUP, "output_shape is not supported; give pads and "
                       "output_padding instead (as torch.onnx exports them)");
  return FL_OK;
}

/* One spatial axis: X's size in, kernel k; Y's size into *out.  Y's size
 * is s*(in-1) + op + (k-1)*d + 1 - pads at both ends. */
static fl_status convt_axis(const fl_gnode *n, int a, int64_t in, int64_t k, int64_t s,
                            int64_t d, int64_t p0, int64_t p1, int64_t op, int64_t *out) {
  if (k < 1 || s < 1 || d < 1)
    return fl_gop_fail(n, FL_EINVAL, "spatial dim %d: kernel, strides and dilations must be "
                       ">= 1", a);
  *out = s * (in - 1) + op + (k - 1) * d + 1 - p0 - p1;
  if (*out < 1)
    return fl_gop_fail(n, FL_EINVAL, "spatial dim %d: the pads (%lld, %lld) leave no output "
                       "of the input's %lld positions", a, (long long)p0, (long long)p1,
                       (long long)in);
  return FL_OK;
}

/* The geometry from X's spatial sizes and the attributes (sp axes). */
static fl_status convt_geom(const fl_gnode *n, int sp, const int64_t *in, const int64_t *ks,
                            fl_gwin *g) {
  int64_t st[4], dl[4], pd[4], op[4], kv[4], out[2]; /* fl_ga_ints reads up to 4 */
  FL_TRY(convt_ints(n, "strides", sp, 1, st));
  FL_TRY(convt_ints(n, "dilations", sp, 1, dl));
  FL_TRY(convt_ints(n, "pads", 2 * sp, 0, pd));
  FL_TRY(convt_ints(n, "output_padding", sp, 0, op));
  FL_TRY(convt_ints(n, "kernel_shape", sp, -1, kv));
  for (int a = 0; a < sp; a++) {
    if (kv[a] >= 0 && kv[a] != ks[a])
      return fl_gop_fail(n, FL_EINVAL, "kernel_shape does not match the weight's shape");
    FL_TRY(convt_axis(n, a, in[a], ks[a], st[a], dl[a], pd[a], pd[a + sp], op[a], &out[a]));
  }
  /* Axis sp-1 is the width; a 1-D input is an image of height 1.  pb and
   * pr are the end pads for which the convolution of Y gives X's size
   * (the column helpers read only the begin pads). */
  const int d1 = sp == 1;
  g->kw = ks[sp - 1], g->sw = st[sp - 1], g->dw = dl[sp - 1];
  g->pl = pd[sp - 1], g->pr = pd[2 * sp - 1] - op[sp - 1];
  g->W = out[sp - 1], g->ow = in[sp - 1];
  g->kh = d1 ? 1 : ks[0], g->sh = d1 ? 1 : st[0], g->dh = d1 ? 1 : dl[0];
  g->pt = d1 ? 0 : pd[0], g->pb = d1 ? 0 : pd[2] - op[0];
  g->H = d1 ? 1 : out[0], g->oh = d1 ? 1 : in[0];
  g->one_d = d1;
  return FL_OK;
}

static fl_status convt_params(const fl_gnode *n, const fl_gctx *c, convt_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  char sx[160], sw[160];
  if (x->ndim != 3 && x->ndim != 4)
    return fl_gop_fail(n, FL_ENOTSUP, "input %s %s must be [N,C,H,W] or [N,C,L] (2-D or 1-D "
                       "only)", x->name, fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  FL_TRY(convt_modes(n));
  FL_TRY(fl_ga_int(n, "group", 1, &p->group));
  p->C = x->shape[1];
  if (w->ndim != x->ndim || p->group < 1 || p->C < 1 || w->shape[0] != p->C ||
      p->C % p->group || w->shape[1] < 1)
    return fl_gop_fail(n, FL_EINVAL, "input %s and weight %s do not fit group=%lld (the "
                       "weight is [C, O/group, kernel...])",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx),
                       fl_gshape_str(w->ndim, w->shape, sw, sizeof sw), (long long)p->group);
  p->Cg = p->C / p->group;
  p->Og = w->shape[1];
  p->O = p->Og * p->group;
  if (b && (b->dtype != FL_G_F32 || b->ndim != 1 || b->shape[0] != p->O))
    return fl_gop_fail(n, FL_EINVAL, "bias %s must be float [%lld]", b->name, (long long)p->O);
  FL_TRY(convt_geom(n, x->ndim - 2, x->shape + 2, w->shape + 2, &p->g));
  p->g.N = x->shape[0];
  p->g.C = p->O;
  const fl_gwin *g = &p->g;
  if (p->Og * g->kh * g->kw > INT32_MAX || g->oh * g->ow > INT32_MAX || p->Cg > INT32_MAX)
    return fl_gop_fail(n, FL_EINVAL, "input %s or weight %s too large for one GEMM",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx),
                       fl_gshape_str(w->ndim, w->shape, sw, sizeof sw));
  return FL_OK;
}

static fl_status convt_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  convt_p p;
  FL_TRY(convt_params(n, c, &p));
  const fl_gwin *g = &p.g;
  int64_t ys[4] = {g->N, p.O, g->H, g->W};
  if (g->one_d) ys[2] = g->W;
  fl_gset_out(n, c, 0, FL_G_F32, g->one_d ? 3 : 4, ys);
  *ws = (size_t)(p.Og * g->kh * g->kw * g->oh * g->ow); /* one image and group's columns */
  *saved = 0;
  return FL_OK;
}

static fl_status convt_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  convt_p p;
  FL_TRY(convt_params(n, c, &p));
  if (y->n == 0) return FL_OK;
  const fl_gwin *g = &p.g;
  const int64_t hw = g->oh * g->ow, okk = p.Og * g->kh * g->kw, yhw = g->H * g->W;
  memset(y->data, 0, y->n * sizeof *y->data);
  for (int64_t in = 0; in < g->N; in++)
    for (int64_t gr = 0; gr < p.group; gr++) {
      const float *xg = x->data + (in * p.C + gr * p.Cg) * hw;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)okk, (int)hw, (int)p.Cg, 1.0f,
                  w->data + gr * p.Cg * okk, (int)okk, xg, (int)hw, 0.0f, n->ws, (int)hw);
      fl_gcol2im_add(g, p.Og, n->ws, hw, y->data + (in * p.O + gr * p.Og) * yhw);
    }
  for (int64_t k = 0; b && k < g->N * p.O; k++) {
    const float bv = b->data[k % p.O];
    float *r = y->data + k * yhw;
    for (int64_t s = 0; s < yhw; s++) r[s] += bv;
  }
  return FL_OK;
}

/* dB (+)= dY summed per channel: per image and channel a float sum, added
 * in image order. */
static void convt_db(const convt_p *p, const float *dy, float *db, int ab) {
  const int64_t yhw = p->g.H * p->g.W;
  if (!ab) memset(db, 0, (size_t)p->O * sizeof *db);
  for (int64_t in = 0; in < p->g.N; in++)
    for (int64_t o = 0; o < p->O; o++) {
      const float *r = dy + (in * p->O + o) * yhw;
      float s = 0.0f;
      for (int64_t k = 0; k < yhw; k++) s += r[k];
      db[o] += s;
    }
}

static fl_status convt_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  convt_p p;
  FL_TRY(convt_params(n, c, &p));
  float *dx = x->grad, *dw = w->grad, *db = b ? b->grad : NULL;
  const int ax = fl_gacc(acc, 0), aw = fl_gacc(acc, 1), ab = fl_gacc(acc, 2);
  if (db) convt_db(&p, y->grad, db, ab);
  if (dw && !aw && p.g.N == 0) memset(dw, 0, w->n * sizeof *dw);
  if (!dx && !dw) return FL_OK;
  const fl_gwin *g = &p.g;
  const int64_t hw = g->oh * g->ow, okk = p.Og * g->kh * g->kw, yhw = g->H * g->W;
  for (int64_t in = 0; in < g->N; in++)
    for (int64_t gr = 0; gr < p.group; gr++) {
      const int64_t xo = (in * p.C + gr * p.Cg) * hw, wo = gr * p.Cg * okk;
      fl_gim2col(g, p.Og, y->grad + (in * p.O + gr * p.Og) * yhw, n->ws, hw);
      if (dx) /* dX_g [Cg, hw] (+)= W_g [Cg, okk] . col [okk, hw] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p.Cg, (int)hw, (int)okk,
                    1.0f, w->data + wo, (int)okk, n->ws, (int)hw, ax ? 1.0f : 0.0f, dx + xo,
                    (int)hw);
      if (dw) /* dW_g [Cg, okk] (+)= X_g [Cg, hw] . col^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p.Cg, (int)okk, (int)hw,
                    1.0f, x->data + xo, (int)hw, n->ws, (int)hw, aw || in > 0 ? 1.0f : 0.0f,
                    dw + wo, (int)okk);
    }
  return FL_OK;
}

static const char *const convt_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                          "output_padding", "output_shape", "pads", "strides",
                                          NULL};

const fl_gop fl_gops_convt[] = {
    {.type = "ConvTranspose", .paddle = "conv2d_transpose", .min_in = 2, .max_in = 3,
     .min_out = 1, .max_out = 1, .attrs = convt_attrs, .infer = convt_infer,
     .forward = convt_forward, .backward = convt_backward, .save_in = 3,
     .doc = "1-D and 2-D, CPU only: strides, pads, dilations, group, output_padding, "
            "kernel_shape, bias; auto_pad other than NOTSET and output_shape are refused "
            "(give pads and output_padding, as torch.onnx exports them)"},
};
const size_t fl_gops_convt_n = sizeof fl_gops_convt / sizeof fl_gops_convt[0];
