/* ops_conv.c - the convolution and pooling ops of the graph engine: Conv,
 * MaxPool, AveragePool and GlobalAveragePool over NCHW images (a 1-D
 * [N, C, L] input is taken as an image of height 1).
 *
 * Conv on the CPU is im2col + GEMM in this file.  With one group it works
 * on chunks of several images at once (conv_chunk): the chunk's columns sit
 * side by side in one column matrix, so each GEMM is wide (about CONV_COLS
 * output positions) even for small late-stage images, dW is one GEMM per
 * chunk over all its positions, and a gradient that accumulates is
 * accumulated in place (GEMM beta, col2im adds).  A 1x1 stride-1 unpadded
 * conv takes the image as its column matrix; a stride-1 conv whose output
 * is as large as its input takes dx as a convolution of dz with the
 * flipped kernel (conv_dx_as_conv).  A 3x3 stride-1 conv padded by 1
 * with at least 8 channels each way goes by Winograd F(2x2, 3x3) instead
 * in forward, dx and dW (conv_wino, ops_conv_wino.c).  Groups go one
 * image and one group at a time.  MaxPool takes the kernels of
 * fl_layers.h (the window max with its argmax) when the geometry is
 * theirs: no padding and floor rounding.  The CUDA twins are the kernels' (cuDNN) in the kernels'
 * geometry: one group, no dilation, symmetric padding (Conv).  Everything
 * else ONNX allows with auto_pad NOTSET or VALID (dilations, asymmetric
 * pads, ceil_mode, count_include_pad) goes through this file's window
 * loops. */
#include <config.h>

#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "fl_device.h"
#include "ops_internal.h"

/* Window geometry of one 2-D conv or pool (ops_internal.h). */
typedef fl_gwin win2d;

/* Read kernel_shape (or kernel, from a weight), strides, dilations, pads,
 * auto_pad and ceil_mode for input x into g; check everything. */
static fl_status win_parse(const fl_gnode *n, const fl_gtensor *x, const int64_t *kernel,
                           int allow_ceil, int allow_dil, win2d *g) {
  char sx[160];
  if (x->ndim != 3 && x->ndim != 4)
    return fl_gop_fail(n, FL_EINVAL, "input %s %s must be [N,C,H,W] or [N,C,L] (2-D or 1-D)",
                       x->name, fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  const int sp = x->ndim - 2;
  g->one_d = sp == 1;
  g->N = x->shape[0];
  g->C = x->shape[1];
  g->H = sp == 2 ? x->shape[2] : 1;
  g->W = x->shape[x->ndim - 1];
  int64_t ks[2], st[2] = {1, 1}, dl[2] = {1, 1}, pd[4] = {0, 0, 0, 0}, v[4];
  int cnt;
  FL_TRY(fl_ga_ints(n, "kernel_shape", v, 2, &cnt));
  if (cnt >= 0 && cnt != sp)
    return fl_gop_fail(n, FL_EINVAL, "kernel_shape has %d values for %d spatial dims", cnt, sp);
  if (kernel) {
    for (int i = 0; i < sp; i++) {
      ks[i] = kernel[i];
      if (cnt == sp && v[i] != kernel[i])
        return fl_gop_fail(n, FL_EINVAL, "kernel_shape does not match the weight's shape");
    }
  } else {
    if (cnt != sp) return fl_gop_fail(n, FL_EINVAL, "kernel_shape is required");
    memcpy(ks, v, (size_t)sp * sizeof *ks);
  }
  FL_TRY(fl_ga_ints(n, "strides", v, 2, &cnt));
  if (cnt >= 0) {
    if (cnt != sp) return fl_gop_fail(n, FL_EINVAL, "strides needs %d values", sp);
    memcpy(st, v, (size_t)sp * sizeof *st);
  }
  if (allow_dil) {
    FL_TRY(fl_ga_ints(n, "dilations", v, 2, &cnt));
    if (cnt >= 0) {
      if (cnt != sp) return fl_gop_fail(n, FL_EINVAL, "dilations needs %d values", sp);
      memcpy(dl, v, (size_t)sp * sizeof *dl);
    }
  }
  FL_TRY(fl_ga_ints(n, "pads", v, 4, &cnt));
  if (cnt >= 0) {
    if (cnt != 2 * sp) return fl_gop_fail(n, FL_EINVAL, "pads needs %d values", 2 * sp);
    memcpy(pd, v, (size_t)cnt * sizeof *pd);
  }
  const char *ap;
  FL_TRY(fl_ga_str(n, "auto_pad", "NOTSET", &ap));
  if (strcmp(ap, "VALID") == 0) {
    if (cnt > 0)
      for (int i = 0; i < 2 * sp; i++)
        if (pd[i]) return fl_gop_fail(n, FL_EINVAL, "auto_pad VALID with non-zero pads");
  } else if (strcmp(ap, "NOTSET") != 0) {
    return fl_gop_fail(n, FL_EINVAL, "auto_pad %s is not supported (NOTSET, VALID; give pads)",
                       ap);
  }
  int64_t cm = 0;
  if (allow_ceil) FL_TRY(fl_ga_int(n, "ceil_mode", 0, &cm));
  if (cm != 0 && cm != 1) return fl_gop_fail(n, FL_EINVAL, "ceil_mode must be 0 or 1");
  g->ceil_mode = (int)cm;
  if (sp == 1) {
    g->kh = 1, g->kw = ks[0], g->sh = 1, g->sw = st[0], g->dh = 1, g->dw = dl[0];
    g->pt = 0, g->pb = 0, g->pl = pd[0], g->pr = pd[1];
  } else {
    g->kh = ks[0], g->kw = ks[1], g->sh = st[0], g->sw = st[1], g->dh = dl[0], g->dw = dl[1];
    g->pt = pd[0], g->pl = pd[1], g->pb = pd[2], g->pr = pd[3];
  }
  if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 ||
      g->pt < 0 || g->pl < 0 || g->pb < 0 || g->pr < 0)
    return fl_gop_fail(n, FL_EINVAL,
                       "kernel, strides and dilations must be >= 1 and pads >= 0");
  const int64_t eh = (g->kh - 1) * g->dh + 1, ew = (g->kw - 1) * g->dw + 1;
  const int64_t spanh = g->H + g->pt + g->pb - eh, spanw = g->W + g->pl + g->pr - ew;
  if (spanh < 0 || spanw < 0)
    return fl_gop_fail(n, FL_EINVAL, "window %lldx%lld is larger than the padded input %s",
                       (long long)eh, (long long)ew,
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  if (g->ceil_mode) {
    g->oh = (spanh + g->sh - 1) / g->sh + 1;
    g->ow = (spanw + g->sw - 1) / g->sw + 1;
    /* The last window must start inside the input or its top/left pad. */
    if ((g->oh - 1) * g->sh >= g->H + g->pt) g->oh--;
    if ((g->ow - 1) * g->sw >= g->W + g->pl) g->ow--;
  } else {
    g->oh = spanh / g->sh + 1;
    g->ow = spanw / g->sw + 1;
  }
  return FL_OK;
}

static void win_out_shape(const win2d *g, int64_t C, int64_t *ys, int *nd) {
  ys[0] = g->N;
  ys[1] = C;
  if (g->one_d) {
    ys[2] = g->ow;
    *nd = 3;
  } else {
    ys[2] = g->oh;
    ys[3] = g->ow;
    *nd = 4;
  }
}

/* ---------------------------------------------------------------- Conv */

typedef struct conv_p {
  win2d g;
  int64_t O, group, Cg, Og;
  fl_act act;
  int fast;           /* the CUDA twins (fl_conv2d_*_cuda) apply */
} conv_p;

static fl_status conv_params(const fl_gnode *n, const fl_gctx *c, conv_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  char sx[160], sw[160];
  if (w->ndim != x->ndim)
    return fl_gop_fail(n, FL_EINVAL, "weight %s %s must have the input's rank %d", w->name,
                       fl_gshape_str(w->ndim, w->shape, sw, sizeof sw), x->ndim);
  FL_TRY(win_parse(n, x, w->shape + 2, 0, 1, &p->g));
  FL_TRY(fl_ga_int(n, "group", 1, &p->group));
  FL_TRY(fl_ga_act(n, &p->act));
  p->O = w->shape[0];
  if (p->group < 1 || p->g.C % p->group || p->O % p->group ||
      w->shape[1] * p->group != p->g.C)
    return fl_gop_fail(n, FL_EINVAL, "input %s and weight %s do not fit group=%lld",
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx),
                       fl_gshape_str(w->ndim, w->shape, sw, sizeof sw), (long long)p->group);
  p->Cg = p->g.C / p->group;
  p->Og = p->O / p->group;
  if (b && (b->dtype != FL_G_F32 || b->ndim != 1 || b->shape[0] != p->O))
    return fl_gop_fail(n, FL_EINVAL, "bias %s must be float [%lld]", b->name, (long long)p->O);
  const win2d *g = &p->g;
  p->fast = p->group == 1 && g->dh == 1 && g->dw == 1 && g->pt == g->pb && g->pl == g->pr &&
            g->N > 0 && g->C > 0 && p->O > 0;
  return FL_OK;
}

static fl_conv2d_desc conv_desc(const conv_p *p) {
  fl_conv2d_desc d = {
      .batch = (size_t)p->g.N, .in_c = (size_t)p->g.C, .in_h = (size_t)p->g.H,
      .in_w = (size_t)p->g.W, .out_c = (size_t)p->O, .k_h = (size_t)p->g.kh,
      .k_w = (size_t)p->g.kw, .stride_h = (size_t)p->g.sh, .stride_w = (size_t)p->g.sw,
      .pad_h = (size_t)p->g.pt, .pad_w = (size_t)p->g.pl};
  return d;
}

/* A one-group CPU conv takes images in chunks of conv_chunk(p): as many as
 * fit CONV_COLS output positions per GEMM (at least one; an image that
 * alone fills more than half of it goes alone, straight into y without
 * the chunk's copies), fewer when the column matrix would pass
 * CONV_COL_FLOATS (it should stay in cache). */
#define CONV_COLS 1024
#define CONV_COL_FLOATS ((int64_t)1 << 19)

/* 1x1, stride 1, no padding: the image is its own column matrix. */
static int conv_pointwise(const conv_p *p) {
  const win2d *g = &p->g;
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && !g->pt && !g->pl && !g->pb &&
         !g->pr;
}

/* Images per chunk of the one-group path (1 for a pointwise conv, which
 * needs no column matrix). */
static int64_t conv_chunk(const conv_p *p) {
  const int64_t ohw = p->g.oh * p->g.ow, ckk = p->Cg * p->g.kh * p->g.kw;
  if (conv_pointwise(p) || ohw == 0) return 1;
  int64_t b = CONV_COLS / ohw;
  if (b * ohw * ckk > CONV_COL_FLOATS) b = CONV_COL_FLOATS / (ohw * ckk);
  if (b > p->g.N) b = p->g.N;
  return b < 1 ? 1 : b;
}

/* Whether backward takes dx as a convolution of dz (conv_dx_chunk): one
 * group, stride and dilation 1, an output as large as the input (so the
 * pads fit the flipped kernel) and no more output channels than input
 * ones (its columns fit the forward's), not pointwise.  Why: the usual
 * dcol = W^T . dz is a GEMM of inner size O that writes the whole column
 * matrix, which col2im then reads back and adds up; as a convolution the
 * columns are written by a copy (im2col of dz) and the GEMM's inner size
 * is O*kh*kw. */
static int conv_dx_as_conv(const conv_p *p) {
  const win2d *g = &p->g;
  return p->group == 1 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->oh == g->H && g->ow == g->W && p->O <= g->C && !conv_pointwise(p);
}

/* Whether the conv goes by Winograd F(2x2, 3x3) (ops_conv_wino.c) in
 * forward, dx and dW: one group, 3x3, stride and dilation 1, pad 1 on
 * every side, and at least CONV_WINO_MIN channels in and out.  With few
 * channels the transforms cost more than the products they save: the
 * ResNet stem (1 -> 16 channels, 28x28, batch 128) took 1.6 ms a forward
 * by Winograd against 0.5 ms by im2col + GEMM. */
#define CONV_WINO_MIN 8

static int conv_wino(const conv_p *p) {
  const win2d *g = &p->g;
  return p->group == 1 && g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
         g->dw == 1 && g->pt == 1 && g->pl == 1 && g->pb == 1 && g->pr == 1 &&
         g->C >= CONV_WINO_MIN && p->O >= CONV_WINO_MIN;
}

/* The Winograd geometry of the conv (forward, dW) or, flipped, of its dx. */
static fl_wino conv_wino_geom(const conv_p *p, int flipped) {
  fl_wino w = {.N = p->g.N, .Cin = flipped ? p->O : p->g.C, .Cout = flipped ? p->g.C : p->O,
               .H = p->g.H, .W = p->g.W};
  return w;
}

/* CPU scratch: with conv_wino, fl_wino_ws (the same for the flipped
 * geometry) then the flipped weight [C, O*3*3].  Else the column matrix
 * of a chunk (or of one image and group), then, with chunks of several
 * images, their output (forward) or output gradient (backward) gathered
 * as one [O, chunk*ohw] matrix (with conv_dx_as_conv, [C, chunk*ohw]:
 * dx's chunk), then with conv_dx_as_conv the flipped weight
 * [C, O*kh*kw] at the end. */
static size_t conv_cpu_ws(const conv_p *p) {
  if (conv_wino(p)) {
    const fl_wino w = conv_wino_geom(p, 0);
    return fl_wino_ws(&w) + (size_t)(9 * p->g.C * p->O);
  }
  const int64_t ohw = p->g.oh * p->g.ow, ckk = p->Cg * p->g.kh * p->g.kw;
  if (p->group != 1) return (size_t)(ckk * ohw);
  const int64_t b = conv_chunk(p), dxc = conv_dx_as_conv(p);
  const int64_t rows = dxc && p->g.C > p->O ? p->g.C : p->O;
  return (size_t)((conv_pointwise(p) ? 0 : ckk * b * ohw) + (b > 1 ? rows * b * ohw : 0) +
                  (dxc ? p->g.C * p->O * p->g.kh * p->g.kw : 0));
}

/* Device scratch of a gpu conv: the gradients that accumulate (dx, dw, db
 * in that order), then the kernels' workspace (cuDNN's, rounded up to
 * floats).  The engine's scratch itself comes from fl_cuda_malloc.
 * *need: all of it; *acc_floats (may be NULL): the first part. */
static fl_status conv_gpu_ws(const fl_gnode *n, const fl_gctx *c, const conv_p *p, size_t *need,
                             size_t *acc_floats) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1);
  const fl_conv2d_desc d = conv_desc(p);
  size_t bytes = 0;
  FL_TRY(fl_gkernel(n, fl_conv2d_workspace_bytes_cuda(&d, &bytes), "conv2d workspace"));
  /* The kernels' part starts 256 bytes aligned (cuDNN's workspace). */
  const size_t acc = (x->n + w->n + (size_t)p->O + 63) / 64 * 64;
  if (acc_floats) *acc_floats = acc;
  *need = acc + (bytes + sizeof(float) - 1) / sizeof(float);
  return FL_OK;
}

static fl_status conv_gpu_params(const fl_gnode *n, const fl_gctx *c, conv_p *p);
static fl_status maxpool_gpu_desc(const fl_gnode *n, const fl_gctx *c, fl_pool2d_desc *d);

static fl_status conv_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  conv_p p;
  FL_TRY(conv_params(n, c, &p));
  int64_t ys[4];
  int nd;
  win_out_shape(&p.g, p.O, ys, &nd);
  fl_gset_out(n, c, 0, FL_G_F32, nd, ys);
  *ws = conv_cpu_ws(&p);
  if (c->stream) { /* a gpu bind: refuse what it lacks; conv_gpu_ws's layout */
    FL_TRY(conv_gpu_params(n, c, &p));
    size_t need;
    FL_TRY(conv_gpu_ws(n, c, &p, &need, NULL));
    if (need > *ws) *ws = need;
  }
  *saved = 0;
  return FL_OK;
}

/* The outputs o in [*lo, *hi) (of n_out along one axis) whose input
 * o*stride + off lies inside [0, n_in): kernel tap k's window along that
 * axis, off = k*dilation - pad_begin. */
static void win_axis(int64_t off, int64_t stride, int64_t n_in, int64_t n_out, int64_t *lo,
                     int64_t *hi) {
  int64_t a = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t b = n_in - off <= 0 ? 0 : (n_in - off + stride - 1) / stride;
  if (b > n_out) b = n_out;
  if (a > b) a = b;
  *lo = a;
  *hi = b;
}

/* Stride 1 and an output as wide as the input: one kernel position's
 * column row is the input plane shifted by a constant, so its valid rows
 * are one contiguous range of both (the pad columns inside it wrap to the
 * neighbouring input row and are fixed up separately). */
static int win_plane(const win2d *g) { return g->sh == 1 && g->sw == 1 && g->ow == g->W; }

/* d[k] = s[2k], k < len, four at a time with SSE2 (the vector loads stop
 * before reading past s[2*len - 2]). */
static void gather2(float *restrict d, const float *restrict s, int64_t len) {
  int64_t k = 0;
#ifdef __SSE2__
  for (; k + 4 < len; k += 4)
    _mm_storeu_ps(d + k, _mm_shuffle_ps(_mm_loadu_ps(s + 2 * k), _mm_loadu_ps(s + 2 * k + 4),
                                        _MM_SHUFFLE(2, 0, 2, 0)));
#endif
  for (; k < len; k++) d[k] = s[2 * k];
}

/* p[0..n) = +0: a single store for the one pad column of a 3x3 window
 * (gcc makes the plain loop a memset call, which costs more than the row's
 * copy for small images), memset for more, nothing for n <= 0. */
static inline void zero_few(float *p, int64_t n) {
  if (n == 1)
    p[0] = 0.0f;
  else if (n > 1)
    memset(p, 0, (size_t)n * sizeof *p);
}

/* Kernel position (i, j)'s part of every channel's column row: the
 * output columns [lo, hi) and rows [oy0, oy1) that read inside the image
 * (win_axis for each axis; no rows when no column is inside), and the input
 * column offset off (ix = ox*sw + off).  The same for every channel, so
 * im2col and col2im_add work it out once per position. */
typedef struct win_span {
  int64_t i, off, lo, hi, oy0, oy1;
} win_span;

static win_span win_span_of(const win2d *g, int64_t i, int64_t j) {
  win_span s = {.i = i, .off = j * g->dw - g->pl};
  win_axis(s.off, g->sw, g->W, g->ow, &s.lo, &s.hi);
  win_axis(i * g->dh - g->pt, g->sh, g->H, g->oh, &s.oy0, &s.oy1);
  if (s.hi <= s.lo) s.oy1 = s.oy0;
  return s;
}

/* One column row of channel xc (plane: win_plane(g)), zeros outside. */
static void im2col_row(const win2d *g, const win_span *s, int plane, const float *xc,
                       float *row) {
  const int64_t lo = s->lo, hi = s->hi, oy0 = s->oy0, oy1 = s->oy1, off = s->off;
  zero_few(row, oy0 * g->ow);
  zero_few(row + oy1 * g->ow, (g->oh - oy1) * g->ow);
  if (oy1 == oy0) return;
  if (plane) { /* rows oy0..oy1-1 in one copy, then the pad columns */
    const int64_t d0 = oy0 * g->ow + lo, d1 = (oy1 - 1) * g->ow + hi;
    memcpy(row + d0, xc + d0 + (s->i * g->dh - g->pt) * g->W + off,
           (size_t)(d1 - d0) * sizeof *row);
    for (int64_t oy = oy0; (lo > 0 || hi < g->ow) && oy < oy1; oy++) {
      float *r = row + oy * g->ow;
      zero_few(r, lo);
      zero_few(r + hi, g->ow - hi);
    }
    return;
  }
  for (int64_t oy = oy0; oy < oy1; oy++) {
    const float *xr = xc + (oy * g->sh - g->pt + s->i * g->dh) * g->W;
    float *r = row + oy * g->ow;
    zero_few(r, lo);
    if (g->sw == 1) {
      memcpy(r + lo, xr + lo + off, (size_t)(hi - lo) * sizeof *r);
    } else if (g->sw == 2) {
      gather2(r + lo, xr + 2 * lo + off, hi - lo);
    } else {
      for (int64_t ox = lo; ox < hi; ox++) r[ox] = xr[ox * g->sw + off];
    }
    zero_few(r + hi, g->ow - hi);
  }
}

/* col[(c*kh + i)*kw + j][oy*ow + ox] = x[c][oy*sh - pt + i*dh][ox*sw - pl + j*dw]
 * (0 outside the image); col's rows are ld floats apart (ld >= oh*ow: an
 * image's columns within a chunk's column matrix). */
static void im2col(const win2d *g, int64_t Cg, const float *x, float *col, int64_t ld) {
  const int plane = win_plane(g);
  for (int64_t i = 0; i < g->kh; i++)
    for (int64_t j = 0; j < g->kw; j++) {
      const win_span sp = win_span_of(g, i, j);
      for (int64_t ch = 0; ch < Cg; ch++)
        im2col_row(g, &sp, plane, x + ch * g->H * g->W, col + ((ch * g->kh + i) * g->kw + j) * ld);
    }
}

/* im2col for the other op files (ops_internal.h); the caller owns every buffer. */
void fl_gim2col(const fl_gwin *g, int64_t Cg, const float *x, float *col, int64_t ld) {
  im2col(g, Cg, x, col, ld);
}

/* d[k] += s[k], k < len, four at a time with SSE2 (the scalar sums' bits). */
static void add_row(float *restrict d, const float *restrict s, int64_t len) {
  int64_t k = 0;
#ifdef __SSE2__
  for (; k + 4 <= len; k += 4)
    _mm_storeu_ps(d + k, _mm_add_ps(_mm_loadu_ps(d + k), _mm_loadu_ps(s + k)));
#endif
  for (; k < len; k++) d[k] += s[k];
}

/* d[2k] += s[k], k < len; with SSE2 four at a time, adding +0 to the odd
 * elements between (no value changes but a -0's sign); the vector loads
 * stop before reaching past d[2*len - 2]. */
static void scatter2_add(float *restrict d, const float *restrict s, int64_t len) {
  int64_t k = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; k + 4 < len; k += 4) {
    const __m128 v = _mm_loadu_ps(s + k);
    _mm_storeu_ps(d + 2 * k, _mm_add_ps(_mm_loadu_ps(d + 2 * k), _mm_unpacklo_ps(v, zero)));
    _mm_storeu_ps(d + 2 * k + 4,
                  _mm_add_ps(_mm_loadu_ps(d + 2 * k + 4), _mm_unpackhi_ps(v, zero)));
  }
#endif
  for (; k < len; k++) d[2 * k] += s[k];
}

/* col2im_add's part of one column row of channel xc. */
static void col2im_row(const win2d *g, const win_span *s, int plane, float *row, float *xc) {
  const int64_t lo = s->lo, hi = s->hi, oy0 = s->oy0, oy1 = s->oy1, off = s->off;
  if (oy1 == oy0) return;
  if (plane) {
    for (int64_t oy = oy0; (lo > 0 || hi < g->ow) && oy < oy1; oy++) {
      float *r = row + oy * g->ow;
      zero_few(r, lo);
      zero_few(r + hi, g->ow - hi);
    }
    const int64_t d0 = oy0 * g->ow + lo, d1 = (oy1 - 1) * g->ow + hi;
    add_row(xc + d0 + (s->i * g->dh - g->pt) * g->W + off, row + d0, d1 - d0);
    return;
  }
  for (int64_t oy = oy0; oy < oy1; oy++) {
    const float *r = row + oy * g->ow;
    float *xr = xc + (oy * g->sh - g->pt + s->i * g->dh) * g->W;
    if (g->sw == 1) {
      add_row(xr + lo + off, r + lo, hi - lo);
    } else if (g->sw == 2) {
      scatter2_add(xr + 2 * lo + off, r + lo, hi - lo);
    } else {
      for (int64_t ox = lo; ox < hi; ox++) xr[ox * g->sw + off] += r[ox];
    }
  }
}

/* dx += the adjoint of im2col applied to col (rows ld floats apart; each
 * dx element gets its terms in the same order as an element-by-element
 * scatter).  In win_plane geometry col's entries that stand for padding
 * are set to 0 first and added with their row's contiguous range (a +0
 * on the wrapped-to element, which changes no value but a -0's sign).
 * Positions outer, channels inner: a dx element still gets its terms in
 * kernel-position order (a channel's rows touch its own plane only). */
static void col2im_add(const win2d *g, int64_t Cg, float *col, int64_t ld, float *dx) {
  const int plane = win_plane(g);
  for (int64_t i = 0; i < g->kh; i++)
    for (int64_t j = 0; j < g->kw; j++) {
      const win_span sp = win_span_of(g, i, j);
      for (int64_t ch = 0; ch < Cg; ch++)
        col2im_row(g, &sp, plane, col + ((ch * g->kh + i) * g->kw + j) * ld,
                   dx + ch * g->H * g->W);
    }
}

/* col2im_add for the other op files (ops_internal.h); the caller owns every
 * buffer. */
void fl_gcol2im_add(const fl_gwin *g, int64_t Cg, float *col, int64_t ld, float *dx) {
  col2im_add(g, Cg, col, ld, dx);
}

/* One-group forward of images [i0, i0+nb) (a chunk): their column matrix
 * [ckk, nb*ohw] in ws, one GEMM, and with nb > 1 the [O, nb*ohw] result
 * (in ws after the columns) put back image by image with the bias. */
static void conv_forward_chunk(const conv_p *p, const float *x, const float *w, const float *b,
                               float *y, int64_t i0, int64_t nb, float *ws) {
  const win2d *g = &p->g;
  const int64_t ohw = g->oh * g->ow, ckk = p->Cg * g->kh * g->kw, cols = nb * ohw;
  const int64_t in_img = g->C * g->H * g->W, out_img = p->O * ohw;
  const float *col = x + i0 * in_img; /* pointwise: nb == 1, the image */
  float *out = ws;
  if (!conv_pointwise(p)) {
    for (int64_t k = 0; k < nb; k++) im2col(g, g->C, x + (i0 + k) * in_img, ws + k * ohw, cols);
    col = ws;
    out = ws + ckk * cols;
  }
  if (nb == 1) out = y + i0 * out_img;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->O, (int)cols, (int)ckk, 1.0f, w,
              (int)ckk, col, (int)cols, 0.0f, out, (int)cols);
  for (int64_t k = 0; k < nb; k++)
    for (int64_t o = 0; o < p->O; o++) {
      float *r = y + (i0 + k) * out_img + o * ohw;
      const float *t = out + o * cols + k * ohw;
      const float bv = b ? b[o] : 0.0f;
      if (nb > 1 && b)
        for (int64_t s = 0; s < ohw; s++) r[s] = t[s] + bv;
      else if (nb > 1)
        memcpy(r, t, (size_t)ohw * sizeof *r);
      else if (b)
        for (int64_t s = 0; s < ohw; s++) r[s] += bv;
    }
}

static fl_status conv_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  conv_p p;
  FL_TRY(conv_params(n, c, &p));
  if (y->n == 0) return FL_OK;
  const win2d *g = &p.g;
  const int64_t ohw = g->oh * g->ow, ckk = p.Cg * g->kh * g->kw;
  if (conv_wino(&p)) {
    const fl_wino wg = conv_wino_geom(&p, 0);
    fl_wino_forward(&wg, w->data, b ? b->data : NULL, x->data, y->data, 0, n->ws);
  } else if (p.group == 1 && ckk > 0) {
    const int64_t chunk = conv_chunk(&p);
    for (int64_t i0 = 0; i0 < g->N; i0 += chunk)
      conv_forward_chunk(&p, x->data, w->data, b ? b->data : NULL, y->data, i0,
                         g->N - i0 < chunk ? g->N - i0 : chunk, n->ws);
  } else {
    for (int64_t in = 0; in < g->N; in++)
      for (int64_t gr = 0; gr < p.group; gr++) {
        const float *xg = x->data + (in * g->C + gr * p.Cg) * g->H * g->W;
        float *yg = y->data + (in * p.O + gr * p.Og) * ohw;
        const float *wg = w->data + gr * p.Og * ckk;
        if (ckk > 0) {
          im2col(g, p.Cg, xg, n->ws, ohw);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p.Og, (int)ohw, (int)ckk,
                      1.0f, wg, (int)ckk, n->ws, (int)ohw, 0.0f, yg, (int)ohw);
        } else {
          memset(yg, 0, (size_t)(p.Og * ohw) * sizeof *yg);
        }
        if (b)
          for (int64_t o = 0; o < p.Og; o++) {
            const float bv = b->data[gr * p.Og + o];
            float *r = yg + o * ohw;
            for (int64_t s = 0; s < ohw; s++) r[s] += bv;
          }
      }
  }
  if (p.act != FL_ACT_NONE) return fl_act_forward(p.act, y->data, y->data, y->n);
  return FL_OK;
}

/* dx as a convolution (conv_dx_as_conv): the geometry of dz's windows,
 * dz [N, O, oh, ow] as the input, pads the flipped kernel's, dx's size
 * out. */
static win2d conv_dx_geom(const conv_p *p) {
  win2d t = p->g;
  t.C = p->O;
  t.H = p->g.oh;
  t.W = p->g.ow;
  t.pt = t.kh - 1 - p->g.pt;
  t.pb = t.kh - 1 - p->g.pb;
  t.pl = t.kw - 1 - p->g.pl;
  t.pr = t.kw - 1 - p->g.pr;
  t.oh = p->g.H;
  t.ow = p->g.W;
  return t;
}

/* wt[c][(o*kh + i)*kw + j] = w[o][c][kh-1-i][kw-1-j]: the weight of
 * conv_dx_geom, [C, O*kh*kw]. */
static void conv_flip_w(const conv_p *p, const float *w, float *wt) {
  const int64_t kh = p->g.kh, kw = p->g.kw, C = p->g.C, O = p->O;
  for (int64_t o = 0; o < O; o++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++)
          wt[((c * O + o) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)] =
              w[((o * C + c) * kh + i) * kw + j];
}

/* dx (+)= the convolution of dz's images [i0, i0+nb) with wt (conv_flip_w):
 * their dz columns [O*kh*kw, nb*hw] in ws, one GEMM into dx itself for one
 * image, else into ws after the columns, added back image by image. */
static void conv_dx_chunk(const conv_p *p, const float *wt, const float *dz, float *dx,
                          int64_t i0, int64_t nb, float *ws) {
  const win2d t = conv_dx_geom(p);
  const int64_t hw = t.oh * t.ow, okk = p->O * t.kh * t.kw, cols = nb * hw;
  const int64_t in_img = p->g.C * hw, out_img = p->O * hw;
  for (int64_t k = 0; k < nb; k++) im2col(&t, p->O, dz + (i0 + k) * out_img, ws + k * hw, cols);
  float *out = nb > 1 ? ws + p->g.C * t.kh * t.kw * cols : dx + i0 * in_img;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->g.C, (int)cols, (int)okk, 1.0f,
              wt, (int)okk, ws, (int)cols, nb > 1 ? 0.0f : 1.0f, out, (int)cols);
  for (int64_t k = 0; nb > 1 && k < nb; k++)
    for (int64_t c = 0; c < p->g.C; c++)
      add_row(dx + (i0 + k) * in_img + c * hw, out + c * cols + k * hw, hw);
}

/* One-group backward of images [i0, i0+nb) (a chunk), dz already through
 * the activation: their output gradient as one [O, nb*ohw] matrix (dz
 * itself for one image, else gathered into ws after the columns),
 * dW (+)= dZ . col^T over all the chunk's positions (beta 0 only for the
 * first chunk of a dW that does not accumulate), then dcol = W^T . dZ
 * added back into dx (zeroed by the caller unless it accumulates; a
 * pointwise conv's dcol is dx itself, beta 1), or with wt (the flipped
 * weight, conv_dx_as_conv) dx by conv_dx_chunk. */
static void conv_backward_chunk(const conv_p *p, const float *x, const float *w, const float *dz,
                                float *dx, float *dw, int dw_beta, int64_t i0, int64_t nb,
                                float *ws, const float *wt) {
  const win2d *g = &p->g;
  const int64_t ohw = g->oh * g->ow, ckk = p->Cg * g->kh * g->kw, cols = nb * ohw;
  const int64_t in_img = g->C * g->H * g->W, out_img = p->O * ohw;
  const int pw = conv_pointwise(p);
  const float *dzm = dz + i0 * out_img;
  if (nb > 1) {
    float *t = ws + ckk * cols; /* nb > 1: not pointwise */
    for (int64_t k = 0; k < nb; k++)
      for (int64_t o = 0; o < p->O; o++)
        memcpy(t + o * cols + k * ohw, dz + (i0 + k) * out_img + o * ohw,
               (size_t)ohw * sizeof *t);
    dzm = t;
  }
  if (dw) {
    const float *col = x + i0 * in_img;
    if (!pw) {
      for (int64_t k = 0; k < nb; k++)
        im2col(g, g->C, x + (i0 + k) * in_img, ws + k * ohw, cols);
      col = ws;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p->O, (int)ckk, (int)cols, 1.0f,
                dzm, (int)cols, col, (int)cols, dw_beta ? 1.0f : 0.0f, dw, (int)ckk);
  }
  if (dx && wt) {
    conv_dx_chunk(p, wt, dz, dx, i0, nb, ws);
  } else if (dx) {
    if (pw) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)cols, (int)p->O, 1.0f,
                  w, (int)ckk, dzm, (int)cols, 1.0f, dx + i0 * in_img, (int)cols);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)cols, (int)p->O, 1.0f, w,
                (int)ckk, dzm, (int)cols, 0.0f, ws, (int)cols);
    for (int64_t k = 0; k < nb; k++)
      col2im_add(g, g->C, ws + k * ohw, cols, dx + (i0 + k) * in_img);
  }
}

/* conv_wino's backward, dz already through the activation: dW (+)= by
 * fl_wino_dw, dx (+)= the Winograd forward of dz with the flipped weight
 * (kept at the end of ws, after fl_wino_ws's part). */
static void conv_backward_wino(const conv_p *p, const float *x, const float *w, const float *dz,
                               float *dx, int ax, float *dw, int aw, float *ws) {
  if (dw) {
    const fl_wino wg = conv_wino_geom(p, 0);
    fl_wino_dw(&wg, x, dz, dw, aw, ws);
  }
  if (dx) {
    const fl_wino wg = conv_wino_geom(p, 1);
    float *wt = ws + fl_wino_ws(&wg);
    conv_flip_w(p, w, wt);
    fl_wino_forward(&wg, wt, NULL, dz, dx, ax, ws);
  }
}

static fl_status conv_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  conv_p p;
  FL_TRY(conv_params(n, c, &p));
  float *dx = x->grad, *dw = w->grad, *db = b ? b->grad : NULL;
  const int ax = fl_gacc(acc, 0), aw = fl_gacc(acc, 1), ab = fl_gacc(acc, 2);
  if (y->n == 0) {
    if (dx && !ax) memset(dx, 0, x->n * sizeof *dx);
    if (dw && !aw) memset(dw, 0, w->n * sizeof *dw);
    if (db && !ab) memset(db, 0, b->n * sizeof *db);
    return FL_OK;
  }
  float *dz = y->grad;
  if (p.act != FL_ACT_NONE) FL_TRY(fl_act_backward(p.act, y->data, dz, dz, y->n));
  const win2d *g = &p.g;
  const int64_t ohw = g->oh * g->ow, ckk = p.Cg * g->kh * g->kw;
  const int wino = conv_wino(&p);
  if (dx && !ax && !wino) memset(dx, 0, x->n * sizeof *dx);
  if (db) { /* per image and channel a float sum, added in image order */
    if (!ab) memset(db, 0, b->n * sizeof *db);
    for (int64_t in = 0; in < g->N; in++)
      for (int64_t o = 0; o < p.O; o++) {
        const float *r = dz + (in * p.O + o) * ohw;
        float s = 0.0f;
        for (int64_t k = 0; k < ohw; k++) s += r[k];
        db[o] += s;
      }
  }
  if (wino) {
    conv_backward_wino(&p, x->data, w->data, dz, dx, ax, dw, aw, n->ws);
    return FL_OK;
  }
  if (p.group == 1 && ckk > 0) {
    const int64_t chunk = conv_chunk(&p);
    float *wt = NULL;
    if (dx && conv_dx_as_conv(&p)) { /* the flipped weight: the end of ws */
      wt = n->ws + conv_cpu_ws(&p) - (size_t)(g->C * p.O * g->kh * g->kw);
      conv_flip_w(&p, w->data, wt);
    }
    for (int64_t i0 = 0; i0 < g->N; i0 += chunk)
      conv_backward_chunk(&p, x->data, w->data, dz, dx, dw, aw || i0 > 0, i0,
                          g->N - i0 < chunk ? g->N - i0 : chunk, n->ws, wt);
    return FL_OK;
  }
  if (dw && !aw) memset(dw, 0, w->n * sizeof *dw);
  if (ckk == 0) return FL_OK;
  for (int64_t in = 0; in < g->N; in++)
    for (int64_t gr = 0; gr < p.group; gr++) {
      const float *xg = x->data + (in * g->C + gr * p.Cg) * g->H * g->W;
      const float *zg = dz + (in * p.O + gr * p.Og) * ohw;
      const float *wg = w->data + gr * p.Og * ckk;
      if (dw) { /* dW_g[Og, ckk] += dz_g . col^T */
        im2col(g, p.Cg, xg, n->ws, ohw);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p.Og, (int)ckk, (int)ohw,
                    1.0f, zg, (int)ohw, n->ws, (int)ohw, 1.0f, dw + gr * p.Og * ckk, (int)ckk);
      }
      if (dx) { /* dcol = W_g^T . dz_g, then scattered back */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)ohw, (int)p.Og,
                    1.0f, wg, (int)ckk, zg, (int)ohw, 0.0f, n->ws, (int)ohw);
        col2im_add(g, p.Cg, n->ws, ohw, dx + (in * g->C + gr * p.Cg) * g->H * g->W);
      }
    }
  return FL_OK;
}

/* Conv on the gpu: the kernels' geometry (fl_conv2d_*_cuda, cuDNN). */
static fl_status conv_gpu_params(const fl_gnode *n, const fl_gctx *c, conv_p *p) {
  FL_TRY(conv_params(n, c, p));
  if (p->fast) return FL_OK;
  return fl_gop_fail(n, FL_ENOTSUP,
                     "on the gpu Conv takes only group=1, dilations 1 and symmetric pads");
}

static fl_status conv_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  conv_p p;
  FL_TRY(conv_gpu_params(n, c, &p));
  size_t need, acc;
  FL_TRY(conv_gpu_ws(n, c, &p, &need, &acc));
  FL_TRY(fl_gcu_need_ws(n, need));
  const fl_conv2d_desc d = conv_desc(&p);
  return fl_gkernel(n,
                    fl_conv2d_forward_cuda(&d, x->data, w->data, b ? b->data : NULL, y->data,
                                           n->ws + acc, p.act, n->math, c->stream),
                    "conv2d");
}

static fl_status conv_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned accum) {
  const fl_gtensor *x = fl_gin(n, c, 0), *w = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  conv_p p;
  FL_TRY(conv_gpu_params(n, c, &p));
  size_t need, acc;
  FL_TRY(conv_gpu_ws(n, c, &p, &need, &acc));
  FL_TRY(fl_gcu_need_ws(n, need));
  float *dx = x->grad, *dw = w->grad, *db = b ? b->grad : NULL;
  const int ax = fl_gacc(accum, 0), aw = fl_gacc(accum, 1), ab = fl_gacc(accum, 2);
  float *kx = dx && ax ? n->ws : dx, *kw = dw && aw ? n->ws + x->n : dw;
  float *kb = db && ab ? n->ws + x->n + w->n : db;
  const fl_conv2d_desc d = conv_desc(&p);
  FL_TRY(fl_gkernel(n,
                    fl_conv2d_backward_cuda(&d, x->data, w->data, y->data, y->grad, kx, kw, kb,
                                            n->ws + acc, p.act, n->math, c->stream),
                    "conv2d backward"));
  if (dx && ax) FL_TRY(fl_gcu_put(n, c, dx, kx, x->n, 1));
  if (dw && aw) FL_TRY(fl_gcu_put(n, c, dw, kw, w->n, 1));
  if (db && ab) FL_TRY(fl_gcu_put(n, c, db, kb, b->n, 1));
  return FL_OK;
}

/* ------------------------------------------------------------- MaxPool */

static fl_status pool_params(const fl_gnode *n, const fl_gctx *c, int is_max, win2d *g) {
  FL_TRY(win_parse(n, fl_gin(n, c, 0), NULL, 1, is_max, g));
  if (g->pt >= g->kh || g->pb >= g->kh || g->pl >= g->kw || g->pr >= g->kw)
    return fl_gop_fail(n, FL_EINVAL, "pads must be smaller than the kernel");
  if (is_max) {
    int64_t so;
    FL_TRY(fl_ga_int(n, "storage_order", 0, &so));
    if (so != 0) return fl_gop_fail(n, FL_EINVAL, "storage_order %lld is not supported (0)",
                                    (long long)so);
  }
  return FL_OK;
}

static int maxpool_fast(const win2d *g) {
  return g->dh == 1 && g->dw == 1 && !g->pt && !g->pl && !g->pb && !g->pr && !g->ceil_mode &&
         g->N > 0 && g->C > 0;
}

static fl_status maxpool_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  if (n->n_out > 1)
    return fl_gop_fail(n, FL_EINVAL, "the Indices output is not supported (Y only)");
  win2d g;
  FL_TRY(pool_params(n, c, 1, &g));
  if (g.H * g.W > INT32_MAX) return fl_gop_fail(n, FL_EINVAL, "image plane too large");
  int64_t ys[4];
  int nd;
  win_out_shape(&g, g.C, ys, &nd);
  fl_gset_out(n, c, 0, FL_G_F32, nd, ys);
  if (c->stream) { /* a gpu bind: refuse what it lacks */
    fl_pool2d_desc d;
    FL_TRY(maxpool_gpu_desc(n, c, &d));
  }
  *ws = c->stream ? fl_gin(n, c, 0)->n : 0; /* gpu: dx when it accumulates */
  *saved = fl_gnumel(nd, ys); /* the argmax, int32 per output */
  return FL_OK;
}

static fl_status maxpool_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  win2d g;
  FL_TRY(pool_params(n, c, 1, &g));
  int32_t *am = (int32_t *)n->saved;
  if (y->n == 0) return FL_OK;
  if (maxpool_fast(&g)) {
    const fl_pool2d_desc d = {.batch = (size_t)g.N, .channels = (size_t)g.C,
                              .in_h = (size_t)g.H, .in_w = (size_t)g.W,
                              .k_h = (size_t)g.kh, .k_w = (size_t)g.kw,
                              .stride_h = (size_t)g.sh, .stride_w = (size_t)g.sw};
    const fl_status st = fl_maxpool2d_forward(&d, x->data, y->data, am);
    return st == FL_OK ? FL_OK : fl_gop_fail(n, st, "max-pool kernel failed");
  }
  /* Padding takes no part (as -inf); the first maximum in row-major window
   * order wins, a NaN propagates, as in fl_maxpool2d_forward. */
  const int64_t planes = g.N * g.C;
  for (int64_t pl = 0; pl < planes; pl++) {
    const float *xp = x->data + pl * g.H * g.W;
    float *yp = y->data + pl * g.oh * g.ow;
    int32_t *ap = am ? am + pl * g.oh * g.ow : NULL;
    for (int64_t oy = 0; oy < g.oh; oy++)
      for (int64_t ox = 0; ox < g.ow; ox++) {
        int64_t bi = -1;
        float bv = -INFINITY;
        for (int64_t i = 0; i < g.kh; i++) {
          const int64_t iy = oy * g.sh - g.pt + i * g.dh;
          if (iy < 0 || iy >= g.H) continue;
          for (int64_t j = 0; j < g.kw; j++) {
            const int64_t ix = ox * g.sw - g.pl + j * g.dw;
            if (ix < 0 || ix >= g.W) continue;
            const float v = xp[iy * g.W + ix];
            if (bi < 0 || v > bv || (isnan(v) && !isnan(bv))) bv = v, bi = iy * g.W + ix;
          }
        }
        yp[oy * g.ow + ox] = bv;
        if (ap) ap[oy * g.ow + ox] = (int32_t)bi;
      }
  }
  return FL_OK;
}

static fl_status maxpool_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  win2d g;
  FL_TRY(pool_params(n, c, 1, &g));
  if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
  const int32_t *am = (const int32_t *)n->saved;
  const int64_t planes = g.N * g.C, ohw = g.oh * g.ow;
  for (int64_t pl = 0; pl < planes; pl++) {
    float *dp = x->grad + pl * g.H * g.W;
    const float *gp = y->grad + pl * ohw;
    const int32_t *ap = am + pl * ohw;
    for (int64_t k = 0; k < ohw; k++)
      if (ap[k] >= 0) dp[ap[k]] += gp[k];
  }
  return FL_OK;
}

/* MaxPool on the gpu: the kernels' geometry (no pads, no dilation, floor). */
static fl_status maxpool_gpu_desc(const fl_gnode *n, const fl_gctx *c, fl_pool2d_desc *d) {
  win2d g;
  FL_TRY(pool_params(n, c, 1, &g));
  if (!maxpool_fast(&g))
    return fl_gop_fail(n, FL_ENOTSUP,
                       "on the gpu MaxPool takes only no pads, dilations 1 and ceil_mode 0");
  *d = (fl_pool2d_desc){.batch = (size_t)g.N, .channels = (size_t)g.C, .in_h = (size_t)g.H,
                        .in_w = (size_t)g.W, .k_h = (size_t)g.kh, .k_w = (size_t)g.kw,
                        .stride_h = (size_t)g.sh, .stride_w = (size_t)g.sw};
  return FL_OK;
}

static fl_status maxpool_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  fl_pool2d_desc d;
  FL_TRY(maxpool_gpu_desc(n, c, &d));
  return fl_gkernel(n,
                    fl_maxpool2d_forward_cuda(&d, x->data, y->data, (int32_t *)n->saved,
                                              c->stream),
                    "max-pool");
}

static fl_status maxpool_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned accum) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  fl_pool2d_desc d;
  FL_TRY(maxpool_gpu_desc(n, c, &d));
  const int ax = fl_gacc(accum, 0);
  if (ax) FL_TRY(fl_gcu_need_ws(n, x->n));
  float *kx = ax ? n->ws : x->grad;
  FL_TRY(fl_gkernel(n,
                    fl_maxpool2d_backward_cuda(&d, y->grad, (const int32_t *)n->saved, kx,
                                               c->stream),
                    "max-pool backward"));
  return ax ? fl_gcu_put(n, c, x->grad, kx, x->n, 1) : FL_OK;
}

/* --------------------------------------------------------- AveragePool */

typedef struct avg_p {
  win2d g;
  int include_pad;
} avg_p;

static fl_status avg_params(const fl_gnode *n, const fl_gctx *c, avg_p *p) {
  FL_TRY(pool_params(n, c, 0, &p->g));
  int64_t cip;
  FL_TRY(fl_ga_int(n, "count_include_pad", 0, &cip));
  if (cip != 0 && cip != 1) return fl_gop_fail(n, FL_EINVAL, "count_include_pad must be 0 or 1");
  p->include_pad = (int)cip;
  return FL_OK;
}

/* Window of output (oy, ox): its clipped input ranges and divisor.  With
 * count_include_pad the divisor counts the padded positions, but not
 * what a ceil_mode window reaches beyond the padding (PyTorch's rule). */
static void avg_window(const avg_p *p, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1,
                       int64_t *x0, int64_t *x1, float *div) {
  const win2d *g = &p->g;
  int64_t hs = oy * g->sh - g->pt, ws = ox * g->sw - g->pl;
  int64_t he = hs + g->kh, we = ws + g->kw;
  if (he > g->H + g->pb) he = g->H + g->pb;
  if (we > g->W + g->pr) we = g->W + g->pr;
  const int64_t padded = (he - hs) * (we - ws);
  *y0 = hs < 0 ? 0 : hs;
  *x0 = ws < 0 ? 0 : ws;
  *y1 = he > g->H ? g->H : he;
  *x1 = we > g->W ? g->W : we;
  const int64_t inside = (*y1 - *y0) * (*x1 - *x0);
  *div = (float)(p->include_pad ? padded : inside);
}

static fl_status avgpool_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  avg_p p;
  FL_TRY(avg_params(n, c, &p));
  int64_t ys[4];
  int nd;
  win_out_shape(&p.g, p.g.C, ys, &nd);
  fl_gset_out(n, c, 0, FL_G_F32, nd, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static fl_status avgpool_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  avg_p p;
  FL_TRY(avg_params(n, c, &p));
  const win2d *g = &p.g;
  for (int64_t pl = 0; pl < g->N * g->C; pl++) {
    const float *xp = x->data + pl * g->H * g->W;
    float *yp = y->data + pl * g->oh * g->ow;
    for (int64_t oy = 0; oy < g->oh; oy++)
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t y0, y1, x0, x1;
        float div;
        avg_window(&p, oy, ox, &y0, &y1, &x0, &x1, &div);
        float s = 0.0f;
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++) s += xp[iy * g->W + ix];
        yp[oy * g->ow + ox] = div > 0.0f ? s / div : 0.0f;
      }
  }
  return FL_OK;
}

static fl_status avgpool_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  avg_p p;
  FL_TRY(avg_params(n, c, &p));
  const win2d *g = &p.g;
  if (!fl_gacc(acc, 0)) memset(x->grad, 0, x->n * sizeof *x->grad);
  for (int64_t pl = 0; pl < g->N * g->C; pl++) {
    float *dp = x->grad + pl * g->H * g->W;
    const float *gp = y->grad + pl * g->oh * g->ow;
    for (int64_t oy = 0; oy < g->oh; oy++)
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t y0, y1, x0, x1;
        float div;
        avg_window(&p, oy, ox, &y0, &y1, &x0, &x1, &div);
        if (div <= 0.0f) continue;
        const float v = gp[oy * g->ow + ox] / div;
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++) dp[iy * g->W + ix] += v;
      }
  }
  return FL_OK;
}

/* --------------------------------------------------- GlobalAveragePool */

static fl_status gap_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  char sx[160];
  if (x->ndim < 3)
    return fl_gop_fail(n, FL_EINVAL, "input %s %s must be [N,C,spatial...]", x->name,
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  int64_t ys[FL_G_MAX_DIMS];
  ys[0] = x->shape[0];
  ys[1] = x->shape[1];
  for (int d = 2; d < x->ndim; d++) ys[d] = 1;
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static size_t gap_inner(const fl_gtensor *x) { return fl_gnumel(x->ndim - 2, x->shape + 2); }

static fl_status gap_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  const size_t inner = gap_inner(x);
  for (size_t pl = 0; pl < y->n; pl++) {
    const float *xp = x->data + pl * inner;
    double s = 0.0;
    for (size_t k = 0; k < inner; k++) s += xp[k];
    y->data[pl] = inner ? (float)(s / (double)inner) : 0.0f;
  }
  return FL_OK;
}

static fl_status gap_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  const size_t inner = gap_inner(x);
  const int accum = fl_gacc(acc, 0);
  for (size_t pl = 0; pl < y->n; pl++) {
    const float v = y->grad[pl] / (float)inner;
    float *dp = x->grad + pl * inner;
    if (accum)
      for (size_t k = 0; k < inner; k++) dp[k] += v;
    else
      for (size_t k = 0; k < inner; k++) dp[k] = v;
  }
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                         "pads", "strides", FL_GRAPH_ACT_ATTR, NULL};
static const char *const maxpool_attrs[] = {"auto_pad", "ceil_mode", "dilations",
                                            "kernel_shape", "pads", "storage_order",
                                            "strides", NULL};
static const char *const avgpool_attrs[] = {"auto_pad", "ceil_mode", "count_include_pad",
                                            "kernel_shape", "pads", "strides", NULL};
static const char *const no_attrs[] = {NULL};

const fl_gop fl_gops_conv[] = {
    {.type = "Conv", .paddle = "conv2d", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = conv_attrs, .infer = conv_infer, .forward = conv_forward,
     .backward = conv_backward, .save_in = 3, .save_out = 1,
     .forward_cuda = conv_forward_cuda, .backward_cuda = conv_backward_cuda,
     .traits = FL_GOP_FUSES_ACT | FL_GOP_AMP16,
     .doc = "1-D and 2-D, groups, dilations, strides, pads; auto_pad NOTSET or VALID (SAME "
            "refused: give pads); Winograd for 3x3 stride-1 pad-1; gpu: group 1, dilation "
            "1, symmetric pads"},
    {.type = "MaxPool", .paddle = "pool2d", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 2, .attrs = maxpool_attrs, .infer = maxpool_infer, .forward = maxpool_forward,
     .backward = maxpool_backward, .forward_cuda = maxpool_forward_cuda,
     .backward_cuda = maxpool_backward_cuda,
     .doc = "1-D and 2-D, pads, strides, dilations, ceil_mode; the Indices output and "
            "storage_order 1 refused; gpu: no pads, dilation 1, ceil_mode 0"},
    {.type = "AveragePool", .paddle = NULL, .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = avgpool_attrs, .infer = avgpool_infer, .forward = avgpool_forward,
     .backward = avgpool_backward,
     .doc = "1-D and 2-D, pads, strides, ceil_mode, count_include_pad"},
    {.type = "GlobalAveragePool", .paddle = NULL, .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = gap_infer, .forward = gap_forward,
     .backward = gap_backward,
     .doc = "[N, C, spatial...] to [N, C, 1...]"},
};
const size_t fl_gops_conv_n = sizeof fl_gops_conv / sizeof fl_gops_conv[0];
