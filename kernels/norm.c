/* norm.c - CPU batch norm and group norm, forward and backward, with an
 * optional fused activation, and batch norm's phase kernels for
 * synchronised batch norm.  Declared and documented in fl_layers.h.
 *
 * Statistics and the backward reductions are accumulated in double, in a
 * fixed order, so results do not depend on anything but the inputs; the
 * per-element work stays in float.  The one-call batch-norm kernels and the
 * phase kernels share their per-channel code (seg_sum, seg_sqdev,
 * bn_channel_apply, bn_channel_sums, bn_channel_dx), so the phases with
 * an identity exchange of their sums give the one-call kernels' bits. */
#include <config.h>

#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "fl_layers.h"
#include "layers_internal.h"

static int norm_desc_ok(const fl_norm_desc *d) {
  return d && d->batch > 0 && d->channels > 0 && d->inner > 0 && d->eps > 0.0f &&
         isfinite(d->eps);
}

/* Sum (in double, in order) of the values of `segments` contiguous runs of
 * `len` floats each, starting at p with `stride` floats between runs. */
static double seg_sum(const float *p, size_t segments, size_t len, size_t stride) {
  double s = 0.0;
  for (size_t k = 0; k < segments; k++) {
    const float *q = p + k * stride;
    for (size_t i = 0; i < len; i++) s += q[i];
  }
  return s;
}

/* Sum of (x - mu)^2 over the same values. */
static double seg_sqdev(const float *p, size_t segments, size_t len, size_t stride, double mu) {
  double v = 0.0;
  for (size_t k = 0; k < segments; k++) {
    const float *q = p + k * stride;
    for (size_t i = 0; i < len; i++) {
      const double t = (double)q[i] - mu;
      v += t * t;
    }
  }
  return v;
}

/* Mean and biased variance of those m = segments*len values (two passes). */
static void seg_stats(const float *p, size_t segments, size_t len, size_t stride,
                      double *mean, double *var) {
  const double m = (double)(segments * len);
  const double mu = seg_sum(p, segments, len, stride) / m;
  *mean = mu;
  *var = seg_sqdev(p, segments, len, stride, mu) / m;
}

/* y = act(a*x + b) over n floats (the normalise-and-affine pass); four
 * lanes at a time with SSE2, the same float multiply and add per value. */
static void affine_act(const float *x, float *y, size_t n, float a, float b, fl_act act) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b), zero = _mm_setzero_ps();
#endif
  if (act == FL_ACT_RELU) { /* max(v, +0) is v > 0 ? v : 0, NaN included */
#ifdef __SSE2__
    for (; i + 4 <= n; i += 4)
      _mm_storeu_ps(y + i, _mm_max_ps(_mm_add_ps(_mm_mul_ps(va, _mm_loadu_ps(x + i)), vb), zero));
#endif
    for (; i < n; i++) {
      const float v = a * x[i] + b;
      y[i] = v > 0.0f ? v : 0.0f;
    }
    return;
  }
#ifdef __SSE2__
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(y + i, _mm_add_ps(_mm_mul_ps(va, _mm_loadu_ps(x + i)), vb));
#endif
  for (; i < n; i++) y[i] = a * x[i] + b;
  fl_act_apply(act, y, n);
}

/* ------------------------------------------------------------- batch norm */

/* Channel c of batch norm with the statistics mu and var (biased) of
 * `count` values: the saved statistics, the running statistics (when
 * running_mean is set) and y = act(gamma*(x - mu)*invstd + beta) =
 * act(a*x + b), a and b saved at [c] and [C + c] of save_ab when it is
 * set. */
static void bn_channel_apply(const fl_norm_desc *d, size_t c, const float *x, float *y,
                             const float *gamma, const float *beta, double mu, double var,
                             double count, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd, float *save_ab, fl_act act) {
  const size_t C = d->channels, S = d->inner, N = d->batch;
  const double invstd = 1.0 / sqrt(var + (double)d->eps);
  save_mean[c] = (float)mu;
  save_invstd[c] = (float)invstd;
  if (running_mean) {
    const double mom = d->momentum;
    running_mean[c] = (float)((1.0 - mom) * running_mean[c] + mom * mu);
    running_var[c] = (float)((1.0 - mom) * running_var[c] + mom * var * count / (count - 1.0));
  }
  /* y = gamma*(x - mu)*invstd + beta = a*x + b */
  const float g = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
  const float a = (float)(g * invstd);
  const float b = (float)(be - g * invstd * mu);
  if (save_ab) {
    save_ab[c] = a;
    save_ab[C + c] = b;
  }
  for (size_t n = 0; n < N; n++)
    affine_act(x + (n * C + c) * S, y + (n * C + c) * S, S, a, b, act);
}

fl_status fl_batchnorm_forward_train(const fl_norm_desc *d, const float *x, float *y,
                                     const float *gamma, const float *beta, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd,
                                     fl_act act) {
  if (!norm_desc_ok(d) || !x || !y || !save_mean || !save_invstd || !fl_act_valid(act) ||
      (!running_mean) != (!running_var) || d->batch * d->inner < 2 || !(d->momentum >= 0.0f) ||
      d->momentum > 1.0f)
    return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch;
  const double m = (double)(N * S);
  for (size_t c = 0; c < C; c++) {
    double mu, var;
    seg_stats(x + c * S, N, S, C * S, &mu, &var);
    bn_channel_apply(d, c, x, y, gamma, beta, mu, var, m, running_mean, running_var, save_mean,
                     save_invstd, NULL, act);
  }
  return FL_OK;
}

fl_status fl_batchnorm_stats_sum(const fl_norm_desc *d, const float *x, double *sum) {
  if (!norm_desc_ok(d) || !x || !sum) return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch;
  for (size_t c = 0; c < C; c++) sum[c] = seg_sum(x + c * S, N, S, C * S);
  return FL_OK;
}

fl_status fl_batchnorm_stats_sqdev(const fl_norm_desc *d, const float *x, const double *sum,
                                   double count, double *sqdev) {
  if (!norm_desc_ok(d) || !x || !sum || !sqdev || !(count >= (double)(d->batch * d->inner)) ||
      !isfinite(count))
    return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch;
  for (size_t c = 0; c < C; c++) sqdev[c] = seg_sqdev(x + c * S, N, S, C * S, sum[c] / count);
  return FL_OK;
}

fl_status fl_batchnorm_forward_apply(const fl_norm_desc *d, const float *x, float *y,
                                     const float *gamma, const float *beta, const double *sum,
                                     const double *sqdev, double count, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd,
                                     fl_act act) {
  if (!norm_desc_ok(d) || !x || !y || !sum || !sqdev || !save_mean || !save_invstd ||
      !fl_act_valid(act) || (!running_mean) != (!running_var) || !(count >= 2.0) ||
      count < (double)(d->batch * d->inner) || !isfinite(count) || !(d->momentum >= 0.0f) ||
      d->momentum > 1.0f)
    return FL_EINVAL;
  for (size_t c = 0; c < d->channels; c++)
    bn_channel_apply(d, c, x, y, gamma, beta, sum[c] / count, sqdev[c] / count, count,
                     running_mean, running_var, save_mean, save_invstd, NULL, act);
  return FL_OK;
}

fl_status fl_batchnorm_apply_channel(const fl_norm_desc *d, size_t c, const float *x, float *y,
                                     const float *gamma, const float *beta, double mu,
                                     double var, double count, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd,
                                     float *save_ab, fl_act act) {
  if (!norm_desc_ok(d) || c >= d->channels || !x || !y || !save_mean || !save_invstd ||
      !fl_act_valid(act) || (!running_mean) != (!running_var) || !(count >= 2.0) ||
      !isfinite(count) || !(d->momentum >= 0.0f) ||
      d->momentum > 1.0f)
    return FL_EINVAL;
  bn_channel_apply(d, c, x, y, gamma, beta, mu, var, count, running_mean, running_var, save_mean,
                   save_invstd, save_ab, act);
  return FL_OK;
}

fl_status fl_batchnorm_forward_eval(const fl_norm_desc *d, const float *x, float *y,
                                    const float *gamma, const float *beta,
                                    const float *running_mean, const float *running_var,
                                    fl_act act) {
  if (!norm_desc_ok(d) || !x || !y || !running_mean || !running_var || !fl_act_valid(act))
    return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch;
  for (size_t c = 0; c < C; c++) {
    const double invstd = 1.0 / sqrt((double)running_var[c] + (double)d->eps);
    const float g = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
    const float a = (float)(g * invstd);
    const float b = (float)(be - g * invstd * running_mean[c]);
    for (size_t n = 0; n < N; n++)
      affine_act(x + (n * C + c) * S, y + (n * C + c) * S, S, a, b, act);
  }
  return FL_OK;
}

/* Channel c's sum dz and sum dz*xhat (xhat from the saved float
 * statistics, as the dx pass computes it). */
static void bn_channel_sums(const fl_norm_desc *d, size_t c, const float *x, const float *dz,
                            float mu, float is, double *sdz_out, double *sdzx_out) {
  const size_t C = d->channels, S = d->inner, N = d->batch;
  double sdz = 0.0, sdzx = 0.0;
  for (size_t n = 0; n < N; n++) {
    const float *xp = x + (n * C + c) * S, *gp = dz + (n * C + c) * S;
    for (size_t s = 0; s < S; s++) {
      sdz += gp[s];
      sdzx += (double)gp[s] * (double)((xp[s] - mu) * is);
    }
  }
  *sdz_out = sdz;
  *sdzx_out = sdzx;
}

/* Channel c of dx = gamma*invstd*(dz - sum dz/m - xhat * sum(dz*xhat)/m),
 * m = count; dx == dz is fine (each element is read before it is
 * written). */
static void bn_channel_dx(const fl_norm_desc *d, size_t c, const float *x, const float *dz,
                          const float *gamma, float mu, float is, double sdz, double sdzx,
                          double count, float *dx) {
  const size_t C = d->channels, S = d->inner, N = d->batch;
  const float g = gamma ? gamma[c] : 1.0f;
  const float k = g * is;
  const float mdz = (float)(sdz / count), mdzx = (float)(sdzx / count);
  for (size_t n = 0; n < N; n++) {
    const float *xp = x + (n * C + c) * S, *gp = dz + (n * C + c) * S;
    float *dp = dx + (n * C + c) * S;
    for (size_t s = 0; s < S; s++) dp[s] = k * (gp[s] - mdz - (xp[s] - mu) * is * mdzx);
  }
}

fl_status fl_batchnorm_backward(const fl_norm_desc *d, const float *x, const float *y, float *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, float *dx, float *dgamma,
                                float *dbeta, fl_act act) {
  if (!norm_desc_ok(d) || !x || !dy || !save_mean || !save_invstd || !fl_act_valid(act) ||
      (act != FL_ACT_NONE && !y))
    return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch;
  const double m = (double)(N * S);
  fl_act_grad_inplace(act, y, dy, N * C * S);
  for (size_t c = 0; c < C; c++) {
    double sdz, sdzx; /* sum dz, sum dz*xhat */
    bn_channel_sums(d, c, x, dy, save_mean[c], save_invstd[c], &sdz, &sdzx);
    if (dgamma) dgamma[c] = (float)sdzx;
    if (dbeta) dbeta[c] = (float)sdz;
    if (dx) bn_channel_dx(d, c, x, dy, gamma, save_mean[c], save_invstd[c], sdz, sdzx, m, dx);
  }
  return FL_OK;
}

fl_status fl_batchnorm_backward_reduce(const fl_norm_desc *d, const float *x, const float *y,
                                       float *dy, const float *save_mean,
                                       const float *save_invstd, double *sums, float *dgamma,
                                       float *dbeta, fl_act act) {
  if (!norm_desc_ok(d) || !x || !dy || !save_mean || !save_invstd || !sums ||
      !fl_act_valid(act) || (act != FL_ACT_NONE && !y))
    return FL_EINVAL;
  const size_t C = d->channels;
  fl_act_grad_inplace(act, y, dy, d->batch * C * d->inner);
  for (size_t c = 0; c < C; c++) {
    bn_channel_sums(d, c, x, dy, save_mean[c], save_invstd[c], &sums[c], &sums[C + c]);
    if (dgamma) dgamma[c] = (float)sums[C + c];
    if (dbeta) dbeta[c] = (float)sums[c];
  }
  return FL_OK;
}

fl_status fl_batchnorm_backward_apply(const fl_norm_desc *d, const float *x, const float *dz,
                                      const float *gamma, const float *save_mean,
                                      const float *save_invstd, const double *sums,
                                      double count, float *dx) {
  if (!norm_desc_ok(d) || !x || !dz || !save_mean || !save_invstd || !sums || !dx ||
      !(count >= (double)(d->batch * d->inner)) || !isfinite(count))
    return FL_EINVAL;
  const size_t C = d->channels;
  for (size_t c = 0; c < C; c++)
    bn_channel_dx(d, c, x, dz, gamma, save_mean[c], save_invstd[c], sums[c], sums[C + c], count,
                  dx);
  return FL_OK;
}

/* ------------------------------------------------------------- group norm */

static int gn_desc_ok(const fl_norm_desc *d) {
  return norm_desc_ok(d) && d->groups > 0 && d->channels % d->groups == 0;
}

fl_status fl_groupnorm_forward(const fl_norm_desc *d, const float *x, float *y,
                               const float *gamma, const float *beta, float *save_mean,
                               float *save_invstd, fl_act act) {
  if (!gn_desc_ok(d) || !x || !y || !save_mean || !save_invstd || !fl_act_valid(act))
    return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch, G = d->groups, cg = C / G;
  for (size_t n = 0; n < N; n++)
    for (size_t g = 0; g < G; g++) {
      const size_t c0 = g * cg;
      const float *xg = x + (n * C + c0) * S;
      double mu, var;
      seg_stats(xg, 1, cg * S, 0, &mu, &var);
      const double invstd = 1.0 / sqrt(var + (double)d->eps);
      save_mean[n * G + g] = (float)mu;
      save_invstd[n * G + g] = (float)invstd;
      for (size_t c = c0; c < c0 + cg; c++) {
        const float gm = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
        const float a = (float)(gm * invstd);
        const float b = (float)(be - gm * invstd * mu);
        affine_act(x + (n * C + c) * S, y + (n * C + c) * S, S, a, b, act);
      }
    }
  return FL_OK;
}

fl_status fl_groupnorm_backward(const fl_norm_desc *d, const float *x, const float *y, float *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, float *dx, float *dgamma,
                                float *dbeta, fl_act act) {
  if (!gn_desc_ok(d) || !x || !dy || !save_mean || !save_invstd || !fl_act_valid(act) ||
      (act != FL_ACT_NONE && !y))
    return FL_EINVAL;
  const size_t C = d->channels, S = d->inner, N = d->batch, G = d->groups, cg = C / G;
  const double m = (double)(cg * S);
  fl_act_grad_inplace(act, y, dy, N * C * S);
  if (dgamma) memset(dgamma, 0, C * sizeof *dgamma);
  if (dbeta) memset(dbeta, 0, C * sizeof *dbeta);
  for (size_t n = 0; n < N; n++)
    for (size_t g = 0; g < G; g++) {
      const float mu = save_mean[n * G + g], is = save_invstd[n * G + g];
      double sdxh = 0.0, sdxhx = 0.0; /* sum dxhat, sum dxhat*xhat over the group */
      for (size_t c = g * cg; c < (g + 1) * cg; c++) {
        const float *xp = x + (n * C + c) * S, *gp = dy + (n * C + c) * S;
        const float gm = gamma ? gamma[c] : 1.0f;
        double sdz = 0.0, sdzx = 0.0;
        for (size_t s = 0; s < S; s++) {
          sdz += gp[s];
          sdzx += (double)gp[s] * (double)((xp[s] - mu) * is);
        }
        if (dgamma) dgamma[c] += (float)sdzx;
        if (dbeta) dbeta[c] += (float)sdz;
        sdxh += gm * sdz;
        sdxhx += gm * sdzx;
      }
      if (!dx) continue;
      /* dx = invstd*(dxhat - sum dxhat/m - xhat * sum(dxhat*xhat)/m) */
      const float mdxh = (float)(sdxh / m), mdxhx = (float)(sdxhx / m);
      for (size_t c = g * cg; c < (g + 1) * cg; c++) {
        const float *xp = x + (n * C + c) * S, *gp = dy + (n * C + c) * S;
        float *dp = dx + (n * C + c) * S;
        const float gm = gamma ? gamma[c] : 1.0f;
        for (size_t s = 0; s < S; s++)
          dp[s] = is * (gm * gp[s] - mdxh - (xp[s] - mu) * is * mdxhx);
      }
    }
  return FL_OK;
}
