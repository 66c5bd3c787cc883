/* conv.c - CPU 2-D convolution (im2col + OpenBLAS GEMM) and max-pooling.
 * Declared and documented in fl_layers.h.
 *
 * Convolution works one image at a time so the im2col buffer stays the size
 * of one image's patches (it lives in the caller's workspace and is reused
 * for the column gradient in backward).  A 1x1 convolution with stride 1
 * and no padding skips im2col: the image already is its column matrix. */
#include <config.h>

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fl_layers.h"
#include "layers_internal.h"

/* ------------------------------------------------------------------ conv2d */

fl_status fl_conv2d_check(const fl_conv2d_desc *d) {
  if (!d || d->batch == 0 || d->in_c == 0 || d->in_h == 0 || d->in_w == 0 || d->out_c == 0 ||
      d->k_h == 0 || d->k_w == 0 || d->stride_h == 0 || d->stride_w == 0)
    return FL_EINVAL;
  if (d->k_h > d->in_h + 2 * d->pad_h || d->k_w > d->in_w + 2 * d->pad_w) return FL_EINVAL;
  /* Every GEMM dimension must fit the int BLAS takes. */
  const size_t oh = (d->in_h + 2 * d->pad_h - d->k_h) / d->stride_h + 1;
  const size_t ow = (d->in_w + 2 * d->pad_w - d->k_w) / d->stride_w + 1;
  const size_t ckk = d->in_c * d->k_h * d->k_w;
  if (ckk / d->k_h / d->k_w != d->in_c || ckk > INT32_MAX || oh * ow > INT32_MAX ||
      d->out_c > INT32_MAX)
    return FL_EINVAL;
  return FL_OK;
}

size_t fl_conv2d_out_h(const fl_conv2d_desc *d) {
  if (fl_conv2d_check(d) != FL_OK) return 0;
  return (d->in_h + 2 * d->pad_h - d->k_h) / d->stride_h + 1;
}

size_t fl_conv2d_out_w(const fl_conv2d_desc *d) {
  if (fl_conv2d_check(d) != FL_OK) return 0;
  return (d->in_w + 2 * d->pad_w - d->k_w) / d->stride_w + 1;
}

size_t fl_conv2d_workspace_floats(const fl_conv2d_desc *d) {
  if (fl_conv2d_check(d) != FL_OK) return 0;
  return d->in_c * d->k_h * d->k_w * fl_conv2d_out_h(d) * fl_conv2d_out_w(d);
}

/* 1x1, stride 1, no padding: the column matrix is the image itself. */
static int conv_is_pointwise(const fl_conv2d_desc *d) {
  return d->k_h == 1 && d->k_w == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
         d->pad_w == 0;
}

/* Range of output columns ow whose input column ow*stride - pad + j lies in
 * [0, in_w): [*lo, *hi). */
static void valid_cols(size_t j, size_t in_w, size_t out_w, size_t stride, size_t pad,
                       size_t *lo, size_t *hi) {
  /* first ow with ow*stride + j >= pad */
  size_t a = j >= pad ? 0 : (pad - j + stride - 1) / stride;
  /* last ow with ow*stride + j - pad <= in_w - 1, i.e. ow*stride <= in_w - 1 + pad - j */
  size_t b;
  if (in_w - 1 + pad < j) b = 0;
  else b = (in_w - 1 + pad - j) / stride + 1;
  if (b > out_w) b = out_w;
  if (a > b) a = b;
  *lo = a;
  *hi = b;
}

/* col[(c*k_h + i)*k_w + j][oh*out_w + ow] = x[c][oh*s - p + i][ow*s - p + j] or 0. */
static void im2col(const fl_conv2d_desc *d, size_t oh_n, size_t ow_n, const float *x,
                   float *col) {
  for (size_t c = 0; c < d->in_c; c++)
    for (size_t i = 0; i < d->k_h; i++)
      for (size_t j = 0; j < d->k_w; j++) {
        float *dst = col + ((c * d->k_h + i) * d->k_w + j) * oh_n * ow_n;
        size_t lo, hi;
        valid_cols(j, d->in_w, ow_n, d->stride_w, d->pad_w, &lo, &hi);
        for (size_t oh = 0; oh < oh_n; oh++, dst += ow_n) {
          const size_t ihp = oh * d->stride_h + i; /* ih + pad_h */
          if (ihp < d->pad_h || ihp - d->pad_h >= d->in_h) {
            memset(dst, 0, ow_n * sizeof *dst);
            continue;
          }
          const float *src = x + (c * d->in_h + (ihp - d->pad_h)) * d->in_w;
          for (size_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
          if (d->stride_w == 1) {
            if (hi > lo) memcpy(dst + lo, src + lo + j - d->pad_w, (hi - lo) * sizeof *dst);
          } else {
            for (size_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * d->stride_w + j - d->pad_w];
          }
          for (size_t ow = hi; ow < ow_n; ow++) dst[ow] = 0.0f;
        }
      }
}

/* dx (zeroed by the caller) += the columns of dcol put back where im2col
 * took them from, in the same order. */
static void col2im(const fl_conv2d_desc *d, size_t oh_n, size_t ow_n, const float *col,
                   float *dx) {
  for (size_t c = 0; c < d->in_c; c++)
    for (size_t i = 0; i < d->k_h; i++)
      for (size_t j = 0; j < d->k_w; j++) {
        const float *src = col + ((c * d->k_h + i) * d->k_w + j) * oh_n * ow_n;
        size_t lo, hi;
        valid_cols(j, d->in_w, ow_n, d->stride_w, d->pad_w, &lo, &hi);
        for (size_t oh = 0; oh < oh_n; oh++, src += ow_n) {
          const size_t ihp = oh * d->stride_h + i;
          if (ihp < d->pad_h || ihp - d->pad_h >= d->in_h) continue;
          float *dst = dx + (c * d->in_h + (ihp - d->pad_h)) * d->in_w;
          if (d->stride_w == 1) { /* contiguous: a vectorisable add */
            float *dd = dst + (lo + j - d->pad_w);
            const float *ss = src + lo;
            for (size_t k = 0; k < hi - lo; k++) dd[k] += ss[k];
          } else {
            for (size_t ow = lo; ow < hi; ow++) dst[ow * d->stride_w + j - d->pad_w] += src[ow];
          }
        }
      }
}

fl_status fl_conv2d_forward(const fl_conv2d_desc *d, const float *x, const float *w,
                            const float *b, float *y, float *ws, fl_act act) {
  if (fl_conv2d_check(d) != FL_OK || !x || !w || !y || !fl_act_valid(act)) return FL_EINVAL;
  const int pointwise = conv_is_pointwise(d);
  if (!pointwise && !ws) return FL_EINVAL;
  const size_t oh = fl_conv2d_out_h(d), ow = fl_conv2d_out_w(d);
  const size_t ohw = oh * ow, ckk = d->in_c * d->k_h * d->k_w;
  const size_t in_img = d->in_c * d->in_h * d->in_w, out_img = d->out_c * ohw;
  for (size_t n = 0; n < d->batch; n++) {
    const float *xn = x + n * in_img;
    float *yn = y + n * out_img;
    const float *col = xn;
    if (!pointwise) {
      im2col(d, oh, ow, xn, ws);
      col = ws;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d->out_c, (int)ohw, (int)ckk,
                1.0f, w, (int)ckk, col, (int)ohw, 0.0f, yn, (int)ohw);
    for (size_t c = 0; c < d->out_c; c++) {
      float *p = yn + c * ohw;
      if (b) {
        const float bc = b[c];
        for (size_t s = 0; s < ohw; s++) p[s] += bc;
      }
      fl_act_apply(act, p, ohw);
    }
  }
  return FL_OK;
}

fl_status fl_conv2d_backward(const fl_conv2d_desc *d, const float *x, const float *w,
                             const float *y, float *dy, float *dx, float *dw, float *db,
                             float *ws, fl_act act) {
  if (fl_conv2d_check(d) != FL_OK || !x || !w || !dy || !fl_act_valid(act) ||
      (act != FL_ACT_NONE && !y))
    return FL_EINVAL;
  const int pointwise = conv_is_pointwise(d);
  if (!pointwise && !ws && (dx || dw)) return FL_EINVAL;
  const size_t oh = fl_conv2d_out_h(d), ow = fl_conv2d_out_w(d);
  const size_t ohw = oh * ow, ckk = d->in_c * d->k_h * d->k_w;
  const size_t in_img = d->in_c * d->in_h * d->in_w, out_img = d->out_c * ohw;
  fl_act_grad_inplace(act, y, dy, d->batch * out_img);
  if (db) fl_bias_grad(dy, db, d->batch, d->out_c, ohw);
  for (size_t n = 0; n < d->batch; n++) {
    const float *xn = x + n * in_img;
    const float *dyn = dy + n * out_img;
    if (dw) { /* dw[out_c, ckk] (+)= dz_n[out_c, ohw] . col^T */
      const float *col = xn;
      if (!pointwise) {
        im2col(d, oh, ow, xn, ws);
        col = ws;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d->out_c, (int)ckk, (int)ohw,
                  1.0f, dyn, (int)ohw, col, (int)ohw, n == 0 ? 0.0f : 1.0f, dw, (int)ckk);
    }
    if (dx) { /* dcol[ckk, ohw] = w^T . dz_n, then scattered back into dx_n */
      float *dxn = dx + n * in_img;
      if (pointwise) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)ohw, (int)d->out_c,
                    1.0f, w, (int)ckk, dyn, (int)ohw, 0.0f, dxn, (int)ohw);
      } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)ohw, (int)d->out_c,
                    1.0f, w, (int)ckk, dyn, (int)ohw, 0.0f, ws, (int)ohw);
        memset(dxn, 0, in_img * sizeof *dxn);
        col2im(d, oh, ow, ws, dxn);
      }
    }
  }
  return FL_OK;
}

/* ---------------------------------------------------------------- max-pool */

fl_status fl_pool2d_check(const fl_pool2d_desc *d) {
  if (!d || d->batch == 0 || d->channels == 0 || d->in_h == 0 || d->in_w == 0 || d->k_h == 0 ||
      d->k_w == 0 || d->stride_h == 0 || d->stride_w == 0 || d->k_h > d->in_h ||
      d->k_w > d->in_w || d->in_h * d->in_w > INT32_MAX)
    return FL_EINVAL;
  return FL_OK;
}

size_t fl_pool2d_out_h(const fl_pool2d_desc *d) {
  if (fl_pool2d_check(d) != FL_OK) return 0;
  return (d->in_h - d->k_h) / d->stride_h + 1;
}

size_t fl_pool2d_out_w(const fl_pool2d_desc *d) {
  if (fl_pool2d_check(d) != FL_OK) return 0;
  return (d->in_w - d->k_w) / d->stride_w + 1;
}

fl_status fl_maxpool2d_forward(const fl_pool2d_desc *d, const float *x, float *y,
                               int32_t *argmax) {
  if (fl_pool2d_check(d) != FL_OK || !x || !y) return FL_EINVAL;
  const size_t oh_n = fl_pool2d_out_h(d), ow_n = fl_pool2d_out_w(d);
  const size_t planes = d->batch * d->channels, in_plane = d->in_h * d->in_w;
  /* The window's input offsets in scan order, precomputed for windows of
   * up to 16 (the models use 2x2), computed on the way for larger ones. */
  size_t offs[16];
  const size_t nwin = d->k_h * d->k_w;
  for (size_t k = 0; k < nwin && k < 16; k++) offs[k] = (k / d->k_w) * d->in_w + k % d->k_w;
  for (size_t p = 0; p < planes; p++) {
    const float *xp = x + p * in_plane;
    float *yp = y + p * oh_n * ow_n;
    int32_t *ap = argmax ? argmax + p * oh_n * ow_n : NULL;
    for (size_t oh = 0; oh < oh_n; oh++)
      for (size_t ow = 0; ow < ow_n; ow++) {
        const size_t base = oh * d->stride_h * d->in_w + ow * d->stride_w;
        const float *w = xp + base;
        size_t bi = 0;
        float bv = w[0];
        for (size_t k = 1; k < nwin && !isnan(bv); k++) {
          const size_t o = k < 16 ? offs[k] : (k / d->k_w) * d->in_w + k % d->k_w;
          const float v = w[o];
          if (v > bv || isnan(v)) bv = v, bi = o;
        }
        yp[oh * ow_n + ow] = bv;
        if (ap) ap[oh * ow_n + ow] = (int32_t)(base + bi);
      }
  }
  return FL_OK;
}

fl_status fl_maxpool2d_backward(const fl_pool2d_desc *d, const float *dy, const int32_t *argmax,
                                float *dx) {
  if (fl_pool2d_check(d) != FL_OK || !dy || !argmax || !dx) return FL_EINVAL;
  const size_t out_plane = fl_pool2d_out_h(d) * fl_pool2d_out_w(d);
  const size_t planes = d->batch * d->channels, in_plane = d->in_h * d->in_w;
  for (size_t p = 0; p < planes; p++) /* indices are checked before dx is touched */
    for (size_t o = 0; o < out_plane; o++) {
      const int32_t a = argmax[p * out_plane + o];
      if (a < 0 || (size_t)a >= in_plane) return FL_EINVAL;
    }
  memset(dx, 0, planes * in_plane * sizeof *dx);
  for (size_t p = 0; p < planes; p++) {
    float *dxp = dx + p * in_plane;
    const float *dyp = dy + p * out_plane;
    const int32_t *ap = argmax + p * out_plane;
    for (size_t o = 0; o < out_plane; o++) dxp[ap[o]] += dyp[o];
  }
  return FL_OK;
}
