/* layers.c - CPU layer kernels: activations, bias, linear (OpenBLAS GEMM)
 * and softmax cross-entropy.  Declared and documented in fl_layers.h.
 *
 * The linear layer is one cblas_sgemm with the transposes PyTorch uses
 * (weights stored [out, in]) followed by a single fused pass for bias and
 * activation; its backward does the activation mask and the bias gradient
 * in one pass over dy before the two GEMMs, so no step walks a tensor more
 * than once beyond what BLAS does. */
#include <config.h>

#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "fl_layers.h"
#include "fl_names.h"
#include "layers_internal.h"

const char *const fl_loss_names[] = {"softmax_cross_entropy", "bce_with_logits", "mse", NULL};
_Static_assert(sizeof fl_loss_names / sizeof fl_loss_names[0] == FL_LOSS_COUNT + 1,
               "one name per fl_loss_kind, then NULL");

/* Indexed by fl_act, then NULL. */
static const char *const k_act_names[] = {"none", "relu", "tanh", NULL};
#define N_ACTS (sizeof k_act_names / sizeof k_act_names[0] - 1)
_Static_assert(N_ACTS == FL_ACT_TANH + 1, "one name per fl_act");

const char *fl_act_name(fl_act act) { return fl_act_valid(act) ? k_act_names[act] : "unknown"; }

fl_status fl_act_parse(const char *name, fl_act *out) {
  if (!out) return FL_EINVAL;
  const int i = fl_names_find(k_act_names, name && *name ? name : k_act_names[FL_ACT_NONE]);
  if (i < 0) return FL_EINVAL;
  *out = (fl_act)i;
  return FL_OK;
}

int fl_act_valid(fl_act act) { return (unsigned)act < N_ACTS; }

/* ------------------------------------------------------------ element-wise */

/* Relu in place.  With SSE2, four at a time: the mask of y > 0 (false for
 * NaN) ANDed with y gives the scalar select's bits (+0 where not > 0). */
static void relu_inplace(float *y, size_t n) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(y + i);
    _mm_storeu_ps(y + i, _mm_and_ps(_mm_cmpgt_ps(v, zero), v));
  }
#endif
  for (; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

/* dy = y > 0 ? dy : +0, in place; the same mask trick as relu_inplace. */
static void relu_grad_inplace(const float *y, float *dy, size_t n) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(dy + i, _mm_and_ps(_mm_cmpgt_ps(_mm_loadu_ps(y + i), zero),
                                     _mm_loadu_ps(dy + i)));
#endif
  for (; i < n; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void fl_act_apply(fl_act act, float *y, size_t n) {
  if (act == FL_ACT_RELU) {
    relu_inplace(y, n);
  } else if (act == FL_ACT_TANH) {
    for (size_t i = 0; i < n; i++) y[i] = tanhf(y[i]);
  }
}

void fl_act_grad_inplace(fl_act act, const float *y, float *dy, size_t n) {
  if (act == FL_ACT_RELU) {
    relu_grad_inplace(y, dy, n);
  } else if (act == FL_ACT_TANH) {
    for (size_t i = 0; i < n; i++) dy[i] *= 1.0f - y[i] * y[i];
  }
}

fl_status fl_act_forward(fl_act act, const float *x, float *y, size_t n) {
  if (!x || !y || n == 0 || !fl_act_valid(act)) return FL_EINVAL;
  if (x != y) memcpy(y, x, n * sizeof *y);
  fl_act_apply(act, y, n);
  return FL_OK;
}

fl_status fl_act_backward(fl_act act, const float *y, const float *dy, float *dx, size_t n) {
  if (!dy || !dx || n == 0 || !fl_act_valid(act) || (act != FL_ACT_NONE && !y))
    return FL_EINVAL;
  if (dx != dy) memcpy(dx, dy, n * sizeof *dx);
  fl_act_grad_inplace(act, y, dx, n);
  return FL_OK;
}

fl_status fl_bias_forward(float *y, const float *b, size_t batch, size_t channels, size_t inner) {
  if (!y || !b || batch == 0 || channels == 0 || inner == 0) return FL_EINVAL;
  for (size_t n = 0; n < batch; n++)
    for (size_t c = 0; c < channels; c++) {
      float *p = y + (n * channels + c) * inner;
      const float bc = b[c];
      for (size_t s = 0; s < inner; s++) p[s] += bc;
    }
  return FL_OK;
}

void fl_bias_grad(const float *dy, float *db, size_t batch, size_t channels, size_t inner) {
  memset(db, 0, channels * sizeof *db);
  if (inner == 1) { /* row sums of a [batch, channels] matrix: add rows */
    for (size_t n = 0; n < batch; n++) {
      const float *p = dy + n * channels;
      for (size_t c = 0; c < channels; c++) db[c] += p[c];
    }
    return;
  }
  for (size_t n = 0; n < batch; n++)
    for (size_t c = 0; c < channels; c++) {
      const float *p = dy + (n * channels + c) * inner;
      float acc = 0.0f;
      for (size_t s = 0; s < inner; s++) acc += p[s];
      db[c] += acc;
    }
}

fl_status fl_bias_backward(const float *dy, float *db, size_t batch, size_t channels,
                           size_t inner) {
  if (!dy || !db || batch == 0 || channels == 0 || inner == 0) return FL_EINVAL;
  fl_bias_grad(dy, db, batch, channels, inner);
  return FL_OK;
}

/* ------------------------------------------------------------------ linear */

/* Fits a blasint (OpenBLAS uses int for dimensions in this build). */
static int blas_ok(size_t a, size_t b, size_t c) {
  return a <= (size_t)INT32_MAX && b <= (size_t)INT32_MAX && c <= (size_t)INT32_MAX;
}

fl_status fl_linear_forward(const float *x, const float *w, const float *b, float *y,
                            size_t batch, size_t in, size_t out, fl_act act) {
  if (!x || !w || !y || batch == 0 || in == 0 || out == 0 || !fl_act_valid(act) ||
      !blas_ok(batch, in, out))
    return FL_EINVAL;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch, (int)out, (int)in, 1.0f, x,
              (int)in, w, (int)in, 0.0f, y, (int)out);
  /* One pass: bias then activation, row by row. */
  for (size_t n = 0; n < batch; n++) {
    float *row = y + n * out;
    if (b) {
      if (act == FL_ACT_RELU) {
        for (size_t o = 0; o < out; o++) {
          const float v = row[o] + b[o];
          row[o] = v > 0.0f ? v : 0.0f;
        }
        continue;
      }
      for (size_t o = 0; o < out; o++) row[o] += b[o];
    }
    fl_act_apply(act, row, out);
  }
  return FL_OK;
}

fl_status fl_linear_backward(const float *x, const float *w, const float *y, float *dy,
                             float *dx, float *dw, float *db, size_t batch, size_t in,
                             size_t out, fl_act act) {
  if (!x || !w || !dy || batch == 0 || in == 0 || out == 0 || !fl_act_valid(act) ||
      (act != FL_ACT_NONE && !y) || !blas_ok(batch, in, out))
    return FL_EINVAL;
  /* Activation mask and bias gradient in one pass over dy. */
  if (db) memset(db, 0, out * sizeof *db);
  if (act != FL_ACT_NONE || db) {
    for (size_t n = 0; n < batch; n++) {
      float *g = dy + n * out;
      const float *yr = act != FL_ACT_NONE ? y + n * out : NULL;
      if (act == FL_ACT_RELU) {
        for (size_t o = 0; o < out; o++) g[o] = yr[o] > 0.0f ? g[o] : 0.0f;
      } else if (act == FL_ACT_TANH) {
        for (size_t o = 0; o < out; o++) g[o] *= 1.0f - yr[o] * yr[o];
      }
      if (db)
        for (size_t o = 0; o < out; o++) db[o] += g[o];
    }
  }
  if (dw) /* dw[out, in] = dz^T . x */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)batch, 1.0f,
                dy, (int)out, x, (int)in, 0.0f, dw, (int)in);
  if (dx) /* dx[batch, in] = dz . w */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch, (int)in, (int)out, 1.0f,
                dy, (int)out, w, (int)in, 0.0f, dx, (int)in);
  return FL_OK;
}

/* ------------------------------------------------- softmax cross-entropy */

fl_status fl_softmax_xent(const float *logits, const int32_t *labels, size_t batch,
                          size_t classes, float grad_scale, float *dlogits, double *loss_sum,
                          size_t *correct1, size_t *correct5) {
  if (!logits || !labels || batch == 0 || classes == 0 || classes > (size_t)INT32_MAX)
    return FL_EINVAL;
  for (size_t n = 0; n < batch; n++)
    if (labels[n] < 0 || (size_t)labels[n] >= classes) return FL_EINVAL;
  double loss = 0.0;
  size_t c1 = 0, c5 = 0;
  const double gscale = (double)grad_scale / (double)batch;
  for (size_t n = 0; n < batch; n++) {
    const float *z = logits + n * classes;
    const size_t lab = (size_t)labels[n];
    float zmax = z[0];
    for (size_t j = 1; j < classes; j++)
      if (z[j] > zmax) zmax = z[j];
    double sum = 0.0;
    for (size_t j = 0; j < classes; j++) sum += exp((double)z[j] - (double)zmax);
    const double lse = (double)zmax + log(sum);
    loss += lse - (double)z[lab];
    /* Rank of the label: larger logits, and equal ones at a lower index.
     * A NaN label logit (a diverged model) is never counted as correct. */
    const float zl = z[lab];
    size_t rank = isnan(zl) ? classes : 0;
    for (size_t j = 0; j < classes; j++)
      if (z[j] > zl || (z[j] == zl && j < lab)) rank++;
    c1 += rank < 1;
    c5 += rank < 5;
    if (dlogits) {
      float *g = dlogits + n * classes; /* may alias z: z is read first per element */
      for (size_t j = 0; j < classes; j++) {
        const double p = exp((double)z[j] - lse);
        g[j] = (float)(gscale * (p - (j == lab ? 1.0 : 0.0)));
      }
    }
  }
  if (loss_sum) *loss_sum = loss;
  if (correct1) *correct1 = c1;
  if (correct5) *correct5 = c5;
  return FL_OK;
}
