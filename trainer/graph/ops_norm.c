/* ops_norm.c - the normalisation ops of the graph engine:
 * BatchNormalization, GroupNormalization, LayerNormalization,
 * InstanceNormalization, Softmax and LogSoftmax.
 *
 * GroupNormalization and batch norm's inference run on the kernels of
 * fl_layers.h, as the sequential engine called them; batch norm's CPU
 * training forward and backward are this file's (bn_chan_*: the kernels'
 * formulas, faster sums).  Batch norm in training mode normalises with
 * the batch's statistics and updates the running mean/var buffers (its
 * inputs 3 and 4) in place, except while a recompute re-runs the forward;
 * with a norm-sync hook (fl_gctx.norm_sync) it normalises with the
 * statistics of the global batch, summed per phase, and a recompute reuses
 * the statistics the step's forward kept (per-node state), so every rank
 * makes the same hook calls in the same order.  ONNX's momentum weighs the
 * running value (running = momentum*running + (1-momentum)*batch),
 * PyTorch's the batch value: the kernels take PyTorch's, 1 - ONNX's (see
 * bn_momentum).
 *
 * Opset 13's BatchNormalization (version 9) has two more optional
 * training outputs, saved_mean and saved_var: the batch's mean and biased
 * variance here.  InstanceNormalization normalises each image's channel
 * over its own values (double sums as layer norm's), which is also how
 * PyTorch exports GroupNorm (a Reshape to [N, groups, -1] around it).
 *
 * GroupNormalization takes per-channel scale and bias [C] as PyTorch's
 * GroupNorm (and ONNX opset 21) do; a [num_groups] scale/bias (opset 18's
 * text) is also accepted and repeated over each group's channels. */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "fl_device.h"
#include "ops_internal.h"

static fl_status norm_kernel(const fl_gnode *n, fl_status st, const char *what) {
  if (st == FL_OK) return FL_OK;
  return fl_gop_fail(n, st, "%s kernel failed: %s", what, fl_strerror(st));
}

/* ------------------------------------------------- BatchNormalization */

/* Per-node state: the global statistics of the last training forward
 * (sum[C], count, sqdev[C]; kept for a recompute) and the backward sums
 * (2C), all for the norm-sync hook. */
typedef struct bn_state {
  size_t C;
  double *sum;    /* C + 1: sums, then the count */
  double *sqdev;  /* C */
  double *sums;   /* 2C */
  double *dev;    /* a gpu graph: the same 4C + 1 doubles on the device */
} bn_state;

static void bn_free_state(fl_gnode *n) {
  bn_state *s = n->state;
  if (!s) return;
  if (s->dev) fl_cuda_free(s->dev);
  free(s->sum);
  free(s);
  n->state = NULL;
}

/* The kernels' (PyTorch's) momentum from ONNX's.  The ONNX value is a
 * float such as 0.9f, written from PyTorch's 0.1 as 1 - 0.1; 1 - 0.9f in
 * float is 0.100000024, not 0.1f.  So the complement is taken of the
 * shortest decimal that reads back as the same float ("0.9" -> 0.1 ->
 * 0.1f): PyTorch's momentum 0.1 (the presets' default) reaches the
 * kernels as exactly 0.1f. */
static float bn_momentum(float onnx) {
  char buf[32];
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)onnx);
    if (strtof(buf, NULL) == onnx) return (float)(1.0 - strtod(buf, NULL));
  }
  return (float)(1.0 - (double)onnx);
}

typedef struct bn_p {
  fl_norm_desc d;
  fl_act act;
} bn_p;

static fl_status bn_params(const fl_gnode *n, const fl_gctx *c, bn_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  float eps, mom;
  int64_t tm;
  FL_TRY(fl_ga_float(n, "epsilon", 1e-5f, &eps));
  FL_TRY(fl_ga_float(n, "momentum", 0.9f, &mom));
  FL_TRY(fl_ga_int(n, "training_mode", 0, &tm)); /* the engine decides the mode */
  FL_TRY(fl_ga_act(n, &p->act));
  if (!(eps > 0.0f)) return fl_gop_fail(n, FL_EINVAL, "epsilon %g must be > 0", (double)eps);
  if (!(mom >= 0.0f && mom <= 1.0f))
    return fl_gop_fail(n, FL_EINVAL, "momentum %g is outside [0, 1]", (double)mom);
  p->d.batch = (size_t)x->shape[0];
  p->d.channels = (size_t)x->shape[1];
  p->d.inner = fl_gnumel(x->ndim - 2, x->shape + 2);
  p->d.groups = 1;
  p->d.eps = eps;
  p->d.momentum = bn_momentum(mom);
  return FL_OK;
}

static fl_status bn_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  const fl_gtensor *x = fl_gin(n, c, 0);
  char sx[160];
  if (x->ndim < 2)
    return fl_gop_fail(n, FL_EINVAL, "input %s %s must be [N,C,...]", x->name,
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  const int64_t C = x->shape[1];
  static const char *const what[] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 1; i <= 4; i++) {
    FL_TRY(fl_gneed(n, c, i, FL_G_F32));
    const fl_gtensor *t = fl_gin(n, c, i);
    if (t->ndim != 1 || t->shape[0] != C)
      return fl_gop_fail(n, FL_EINVAL, "%s %s is %s, expected [%lld]", what[i - 1], t->name,
                         fl_gshape_str(t->ndim, t->shape, sx, sizeof sx), (long long)C);
  }
  bn_p p;
  FL_TRY(bn_params(n, c, &p));
  if (c->stream && n->n_out > 3)
    return fl_gop_fail(n, FL_ENOTSUP, "%d outputs (opset 13's saved_mean, saved_var) are "
                       "taken on the CPU only; export at opset 14 or later for the gpu",
                       n->n_out);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  for (int o = 1; o < n->n_out; o++) fl_gset_out(n, c, o, FL_G_F32, 1, &C);
  bn_state *s = n->state;
  if (s && s->C != (size_t)C) {
    bn_free_state(n);
    s = NULL;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    double *buf = calloc(4 * (size_t)C + 1, sizeof *buf);
    if (!s || !buf) {
      free(s);
      free(buf);
      return fl_gop_fail(n, FL_ENOMEM, "no memory for the statistics of %lld channels",
                         (long long)C);
    }
    s->C = (size_t)C;
    s->sum = buf;
    s->sqdev = buf + C + 1;
    s->sums = buf + 2 * C + 1;
    n->state = s;
  }
  *ws = 2 * (size_t)C;      /* dgamma, dbeta when they accumulate */
  *saved = 4 * (size_t)C;   /* save_mean, save_invstd; the CPU's a, b (save_ab) */
  return FL_OK;
}

/* Batch norm's CPU training path, written here (rather than the kernels'
 * fl_batchnorm_forward_train / _backward and phase kernels) for speed: the
 * same formulas, with the double sums kept in eight lanes by element
 * index (a fixed order: deterministic) instead of one serial chain, and
 * the per-element float work four at a time with SSE2 (each element's
 * float operations as the scalar formula orders them).  The local path
 * and the norm-sync phases share every per-channel function, so an
 * identity exchange gives the local bits (test_batchnorm_sync). */

/* Sum in double of n floats: lane k%8 for the first n/8*8, then the rest
 * in order, the lanes added in a fixed order. */
static double bn_sum(const float *p, size_t n) {
  size_t i = 0;
  double lanes = 0.0;
#ifdef __SSE2__
  __m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 8 <= n; i += 8) {
    const __m128 u = _mm_loadu_ps(p + i), v = _mm_loadu_ps(p + i + 4);
    a0 = _mm_add_pd(a0, _mm_cvtps_pd(u));
    a1 = _mm_add_pd(a1, _mm_cvtps_pd(_mm_movehl_ps(u, u)));
    a2 = _mm_add_pd(a2, _mm_cvtps_pd(v));
    a3 = _mm_add_pd(a3, _mm_cvtps_pd(_mm_movehl_ps(v, v)));
  }
  double l[2];
  _mm_storeu_pd(l, _mm_add_pd(_mm_add_pd(a0, a1), _mm_add_pd(a2, a3)));
  lanes = l[0] + l[1];
#endif
  double t = 0.0;
  for (; i < n; i++) t += p[i];
  return lanes + t;
}

/* Sum in double of (p[i] - mu)^2, lanes as bn_sum. */
static double bn_sqdev(const float *p, size_t n, double mu) {
  size_t i = 0;
  double lanes = 0.0;
#ifdef __SSE2__
  const __m128d m = _mm_set1_pd(mu);
  __m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 8 <= n; i += 8) {
    const __m128 u = _mm_loadu_ps(p + i), v = _mm_loadu_ps(p + i + 4);
    const __m128d d0 = _mm_sub_pd(_mm_cvtps_pd(u), m);
    const __m128d d1 = _mm_sub_pd(_mm_cvtps_pd(_mm_movehl_ps(u, u)), m);
    const __m128d d2 = _mm_sub_pd(_mm_cvtps_pd(v), m);
    const __m128d d3 = _mm_sub_pd(_mm_cvtps_pd(_mm_movehl_ps(v, v)), m);
    a0 = _mm_add_pd(a0, _mm_mul_pd(d0, d0));
    a1 = _mm_add_pd(a1, _mm_mul_pd(d1, d1));
    a2 = _mm_add_pd(a2, _mm_mul_pd(d2, d2));
    a3 = _mm_add_pd(a3, _mm_mul_pd(d3, d3));
  }
  double l[2];
  _mm_storeu_pd(l, _mm_add_pd(_mm_add_pd(a0, a1), _mm_add_pd(a2, a3)));
  lanes = l[0] + l[1];
#endif
  double t = 0.0;
  for (; i < n; i++) {
    const double d = (double)p[i] - mu;
    t += d * d;
  }
  return lanes + t;
}

/* Channel c's sum (or its sum of squared deviations from mu) over the
 * batch: image by image, in image order. */
static double bn_chan_sum(const fl_norm_desc *d, size_t c, const float *x) {
  double s = 0.0;
  for (size_t i = 0; i < d->batch; i++)
    s += bn_sum(x + (i * d->channels + c) * d->inner, d->inner);
  return s;
}

static double bn_chan_sqdev(const fl_norm_desc *d, size_t c, const float *x, double mu) {
  double s = 0.0;
  for (size_t i = 0; i < d->batch; i++)
    s += bn_sqdev(x + (i * d->channels + c) * d->inner, d->inner, mu);
  return s;
}

/* A fused Relu's mask for one channel: its output a*x + b (float, as
 * fl_batchnorm_apply_channel computed it, so the same bits) was > 0.
 * Computing it from x, which backward reads anyway, instead of reading the
 * output keeps a channel's backward streams (x, dy) small enough for the
 * dx pass to find them in cache. */
typedef struct bn_mask {
  int on;
  float a, b;
} bn_mask;

/* Channel c's mask from the saved a, b (save_ab of
 * fl_batchnorm_apply_channel); off without a Relu. */
static bn_mask bn_mask_of(const fl_gnode *n, fl_act act, size_t C, size_t c) {
  return (bn_mask){act == FL_ACT_RELU, n->saved[2 * C + c], n->saved[3 * C + c]};
}

/* dz: dy where the mask holds (+0 elsewhere, as fl_act_backward writes
 * it), dy itself without a Relu; saves the activation's own pass. */
static inline float bn_dz(const bn_mask *m, float x, float dy) {
  return m->on && !(m->a * x + m->b > 0.0f) ? 0.0f : dy;
}
#ifdef __SSE2__
static inline __m128 bn_dz4(const bn_mask *m, __m128 x, __m128 dy) {
  if (!m->on) return dy;
  const __m128 v = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(m->a), x), _mm_set1_ps(m->b));
  return _mm_and_ps(_mm_cmpgt_ps(v, _mm_setzero_ps()), dy);
}
#endif

/* Channel c's sum dz and sum dz*xhat in double (xhat = (x - mu)*is in
 * float, as the dx pass computes it), lanes as bn_sum, image by image; dz
 * as bn_dz reads it from dy. */
static void bn_chan_sums(const fl_norm_desc *d, size_t c, const float *x, const bn_mask *msk,
                         const float *dy, float mu, float is, double *sdz_out,
                         double *sdzx_out) {
  const size_t S = d->inner;
#ifdef __SSE2__
  const __m128 vm = _mm_set1_ps(mu), vi = _mm_set1_ps(is);
#endif
  double sdz = 0.0, sdzx = 0.0;
  for (size_t i = 0; i < d->batch; i++) {
    const size_t o = (i * d->channels + c) * S;
    const float *xp = x + o, *gp = dy + o;
    size_t k = 0;
    double t = 0.0, u = 0.0;
#ifdef __SSE2__
    __m128d a0 = _mm_setzero_pd(), a1 = a0, b0 = a0, b1 = a0;
    for (; k + 4 <= S; k += 4) {
      const __m128 xv = _mm_loadu_ps(xp + k);
      const __m128 g = bn_dz4(msk, xv, _mm_loadu_ps(gp + k));
      const __m128 h = _mm_mul_ps(_mm_sub_ps(xv, vm), vi);
      const __m128d g0 = _mm_cvtps_pd(g), g1 = _mm_cvtps_pd(_mm_movehl_ps(g, g));
      a0 = _mm_add_pd(a0, g0);
      a1 = _mm_add_pd(a1, g1);
      b0 = _mm_add_pd(b0, _mm_mul_pd(g0, _mm_cvtps_pd(h)));
      b1 = _mm_add_pd(b1, _mm_mul_pd(g1, _mm_cvtps_pd(_mm_movehl_ps(h, h))));
    }
    double l[2], m[2];
    _mm_storeu_pd(l, _mm_add_pd(a0, a1));
    _mm_storeu_pd(m, _mm_add_pd(b0, b1));
    t = l[0] + l[1];
    u = m[0] + m[1];
#endif
    for (; k < S; k++) {
      const float g = bn_dz(msk, xp[k], gp[k]);
      t += g;
      u += (double)g * (double)((xp[k] - mu) * is);
    }
    sdz += t;
    sdzx += u;
  }
  *sdz_out = sdz;
  *sdzx_out = sdzx;
}

/* Channel c of dx = gamma*invstd*(dz - sum dz/m - xhat*sum(dz*xhat)/m),
 * m = count, dz read from dy as bn_dz does; dx == dy is fine (each
 * element is read before it is written). */
static void bn_chan_dx(const fl_norm_desc *d, size_t c, const float *x, const bn_mask *msk,
                       const float *dy, const float *gamma, float mu, float is, double sdz,
                       double sdzx, double count, float *dx) {
  const size_t S = d->inner;
  const float g = gamma ? gamma[c] : 1.0f;
  const float k = g * is;
  const float mdz = (float)(sdz / count), mdzx = (float)(sdzx / count);
#ifdef __SSE2__
  const __m128 vk = _mm_set1_ps(k), vmdz = _mm_set1_ps(mdz), vmdzx = _mm_set1_ps(mdzx);
  const __m128 vm = _mm_set1_ps(mu), vi = _mm_set1_ps(is);
#endif
  for (size_t i = 0; i < d->batch; i++) {
    const size_t o = (i * d->channels + c) * S;
    const float *xp = x + o, *gp = dy + o;
    float *dp = dx + o;
    size_t s = 0;
#ifdef __SSE2__
    for (; s + 4 <= S; s += 4) {
      const __m128 xv = _mm_loadu_ps(xp + s);
      const __m128 h = _mm_mul_ps(_mm_mul_ps(_mm_sub_ps(xv, vm), vi), vmdzx);
      const __m128 u = _mm_sub_ps(_mm_sub_ps(bn_dz4(msk, xv, _mm_loadu_ps(gp + s)), vmdz), h);
      _mm_storeu_ps(dp + s, _mm_mul_ps(vk, u));
    }
#endif
    for (; s < S; s++)
      dp[s] = k * (bn_dz(msk, xp[s], gp[s]) - mdz - (xp[s] - mu) * is * mdzx);
  }
}

/* Opset 13's (BatchNormalization-9's) training outputs saved_mean and
 * saved_var when the node has them: channel ch's batch mean and biased
 * variance, which pass no gradient back. */
static void bn_saved_out(const fl_gnode *n, const fl_gctx *c, size_t ch, double mu, double var) {
  if (n->n_out > 3) fl_gout(n, c, 3)->data[ch] = (float)mu;
  if (n->n_out > 4) fl_gout(n, c, 4)->data[ch] = (float)var;
}

static fl_status bn_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *gamma = fl_gin(n, c, 1), *beta = fl_gin(n, c, 2);
  fl_gtensor *rm = fl_gin(n, c, 3), *rv = fl_gin(n, c, 4), *y = fl_gout(n, c, 0);
  bn_p p;
  FL_TRY(bn_params(n, c, &p));
  const fl_norm_desc *d = &p.d;
  const size_t C = d->channels;
  if (y->n == 0) return FL_OK;
  fl_status st = FL_OK;
  if (!c->training) {
    st = fl_batchnorm_forward_eval(d, x->data, y->data, gamma->data, beta->data, rm->data,
                                   rv->data, p.act);
    return norm_kernel(n, st, "batch-norm inference");
  }
  if (d->batch * d->inner < 2)
    return fl_gop_fail(n, FL_EINVAL,
                       "training needs at least 2 values per channel (batch %zu x %zu)",
                       d->batch, d->inner);
  float *run_m = c->recomputing ? NULL : rm->data, *run_v = c->recomputing ? NULL : rv->data;
  const double m = (double)(d->batch * d->inner);
  if (c->norm_sync) {
    bn_state *s = n->state;
    if (!c->recomputing) {
      for (size_t ch = 0; ch < C; ch++) s->sum[ch] = bn_chan_sum(d, ch, x->data);
      s->sum[C] = m;
      FL_TRY(c->norm_sync(c->norm_sync_ctx, s->sum, C + 1));
      for (size_t ch = 0; ch < C; ch++)
        s->sqdev[ch] = bn_chan_sqdev(d, ch, x->data, s->sum[ch] / s->sum[C]);
      FL_TRY(c->norm_sync(c->norm_sync_ctx, s->sqdev, C));
    }
    const double count = s->sum[C];
    for (size_t ch = 0; ch < C && st == FL_OK; ch++) {
      st = fl_batchnorm_apply_channel(d, ch, x->data, y->data, gamma->data, beta->data,
                                      s->sum[ch] / count, s->sqdev[ch] / count, count, run_m,
                                      run_v, n->saved, n->saved + C, n->saved + 2 * C, p.act);
      bn_saved_out(n, c, ch, s->sum[ch] / count, s->sqdev[ch] / count);
    }
  } else {
    for (size_t ch = 0; ch < C && st == FL_OK; ch++) {
      const double mu = bn_chan_sum(d, ch, x->data) / m;
      const double var = bn_chan_sqdev(d, ch, x->data, mu) / m;
      st = fl_batchnorm_apply_channel(d, ch, x->data, y->data, gamma->data, beta->data, mu, var,
                                      m, run_m, run_v, n->saved, n->saved + C, n->saved + 2 * C,
                                      p.act);
      bn_saved_out(n, c, ch, mu, var);
    }
  }
  if (st != FL_OK) return norm_kernel(n, st, "batch-norm training forward");
  /* The optional outputs running_mean and running_var: the updated values. */
  for (int o = 1; o < n->n_out && o < 3; o++) {
    fl_gtensor *t = fl_gout(n, c, o);
    memcpy(t->data, (o == 1 ? rm : rv)->data, C * sizeof *t->data);
  }
  return FL_OK;
}

static fl_status bn_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *gamma = fl_gin(n, c, 1), *beta = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  bn_p p;
  FL_TRY(bn_params(n, c, &p));
  const fl_norm_desc *d = &p.d;
  const size_t C = d->channels;
  if (!c->training)
    return fl_gop_fail(n, FL_ESTATE, "backward needs the training forward's statistics");
  if (y->n == 0) return FL_OK;
  const int ax = fl_gacc(acc, 0), ag = fl_gacc(acc, 1), ab = fl_gacc(acc, 2);
  float *dx = x->grad, *dg = gamma->grad, *db = beta->grad;
  float *dg_k = dg && ag ? n->ws : dg, *db_k = db && ab ? n->ws + C : db;
  float *dy = y->grad;
  const float *save_mean = n->saved, *save_invstd = n->saved + C;
  if (p.act != FL_ACT_NONE && p.act != FL_ACT_RELU) { /* dy becomes dz in place */
    const fl_status st = fl_act_backward(p.act, y->data, dy, dy, y->n);
    if (st != FL_OK) return norm_kernel(n, st, "batch-norm activation backward");
  }
  float *dxk = ax ? dy : dx; /* dx == dy in bn_chan_dx is fine */
  if (c->norm_sync) {
    bn_state *s = n->state;
    for (size_t ch = 0; ch < C; ch++) {
      const bn_mask mk = bn_mask_of(n, p.act, C, ch);
      bn_chan_sums(d, ch, x->data, &mk, dy, save_mean[ch], save_invstd[ch], &s->sums[ch],
                   &s->sums[C + ch]);
      if (dg_k) dg_k[ch] = (float)s->sums[C + ch];
      if (db_k) db_k[ch] = (float)s->sums[ch];
    }
    if (dx) {
      FL_TRY(c->norm_sync(c->norm_sync_ctx, s->sums, 2 * C));
      for (size_t ch = 0; ch < C; ch++) {
        const bn_mask mk = bn_mask_of(n, p.act, C, ch);
        bn_chan_dx(d, ch, x->data, &mk, dy, gamma->data, save_mean[ch], save_invstd[ch],
                   s->sums[ch], s->sums[C + ch], s->sum[C], dxk);
      }
    }
  } else {
    const double m = (double)(d->batch * d->inner);
    for (size_t ch = 0; ch < C; ch++) {
      double sdz, sdzx;
      const bn_mask mk = bn_mask_of(n, p.act, C, ch);
      bn_chan_sums(d, ch, x->data, &mk, dy, save_mean[ch], save_invstd[ch], &sdz, &sdzx);
      if (dg_k) dg_k[ch] = (float)sdzx;
      if (db_k) db_k[ch] = (float)sdz;
      if (dx)
        bn_chan_dx(d, ch, x->data, &mk, dy, gamma->data, save_mean[ch], save_invstd[ch], sdz,
                   sdzx, m, dxk);
    }
  }
  if (dx && ax) fl_gput(dx, dy, x->n, 1);
  if (dg && ag) fl_gput(dg, dg_k, C, 1);
  if (db && ab) fl_gput(db, db_k, C, 1);
  return FL_OK;
}

/* Batch norm on the gpu: the CUDA twins of the same kernels.  With the
 * norm-sync hook each exchange goes device -> host, the hook, host ->
 * device (the hook takes host memory), as the sequential engine did. */
static fl_status bn_dev_state(fl_gnode *n, bn_state **out) {
  bn_state *s = n->state;
  if (!s->dev) {
    void *p = NULL;
    FL_TRY(fl_gkernel(n, fl_cuda_malloc(&p, (4 * s->C + 1) * sizeof(double)),
                      "device statistics allocation"));
    s->dev = p;
  }
  *out = s;
  return FL_OK;
}

/* Sum host[0..nh) over the ranks after bringing dev[0..n) to host (what
 * lies beyond n the caller has set), then back to dev. */
static fl_status bn_dev_exchange(const fl_gnode *n, const fl_gctx *c, double *dev, double *host,
                                 size_t cnt, size_t nh) {
  FL_TRY(fl_gkernel(n, fl_cuda_copy_to_host(host, dev, cnt * sizeof *host, c->stream),
                    "statistics download"));
  FL_TRY(c->norm_sync(c->norm_sync_ctx, host, nh));
  return fl_gkernel(n, fl_cuda_copy_to_device(dev, host, nh * sizeof *host, c->stream),
                    "statistics upload");
}

static fl_status bn_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *gamma = fl_gin(n, c, 1), *beta = fl_gin(n, c, 2);
  fl_gtensor *rm = fl_gin(n, c, 3), *rv = fl_gin(n, c, 4), *y = fl_gout(n, c, 0);
  bn_p p;
  FL_TRY(bn_params(n, c, &p));
  const fl_norm_desc *d = &p.d;
  const size_t C = d->channels;
  if (y->n == 0) return FL_OK;
  if (!c->training)
    return fl_gkernel(n,
                      fl_batchnorm_forward_eval_cuda(d, x->data, y->data, gamma->data,
                                                     beta->data, rm->data, rv->data, p.act,
                                                     c->stream),
                      "batch-norm inference");
  if (d->batch * d->inner < 2)
    return fl_gop_fail(n, FL_EINVAL,
                       "training needs at least 2 values per channel (batch %zu x %zu)",
                       d->batch, d->inner);
  float *save_mean = n->saved, *save_invstd = n->saved + C;
  float *run_m = c->recomputing ? NULL : rm->data, *run_v = c->recomputing ? NULL : rv->data;
  fl_status st;
  if (c->norm_sync) {
    bn_state *s;
    FL_TRY(bn_dev_state(n, &s));
    double *dsum = s->dev, *dsq = s->dev + C + 1;
    if (!c->recomputing) {
      FL_TRY(fl_gkernel(n, fl_batchnorm_stats_sum_cuda(d, x->data, dsum, c->stream),
                        "batch-norm statistics"));
      s->sum[C] = (double)(d->batch * d->inner);
      FL_TRY(bn_dev_exchange(n, c, dsum, s->sum, C, C + 1));
      FL_TRY(fl_gkernel(n, fl_batchnorm_stats_sqdev_cuda(d, x->data, dsum, s->sum[C], dsq,
                                                         c->stream),
                        "batch-norm statistics"));
      FL_TRY(bn_dev_exchange(n, c, dsq, s->sqdev, C, C));
    }
    st = fl_batchnorm_forward_apply_cuda(d, x->data, y->data, gamma->data, beta->data, dsum,
                                         dsq, s->sum[C], run_m, run_v, save_mean, save_invstd,
                                         p.act, c->stream);
  } else {
    st = fl_batchnorm_forward_train_cuda(d, x->data, y->data, gamma->data, beta->data, run_m,
                                         run_v, save_mean, save_invstd, p.act, c->stream);
  }
  FL_TRY(fl_gkernel(n, st, "batch-norm training"));
  for (int o = 1; o < n->n_out; o++)
    FL_TRY(fl_gcu_put(n, c, fl_gout(n, c, o)->data, (o == 1 ? rm : rv)->data, C, 0));
  return FL_OK;
}

static fl_status bn_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *gamma = fl_gin(n, c, 1), *beta = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  bn_p p;
  FL_TRY(bn_params(n, c, &p));
  const fl_norm_desc *d = &p.d;
  const size_t C = d->channels;
  if (!c->training)
    return fl_gop_fail(n, FL_ESTATE, "backward needs the training forward's statistics");
  if (y->n == 0) return FL_OK;
  const int ax = fl_gacc(acc, 0), ag = fl_gacc(acc, 1), ab = fl_gacc(acc, 2);
  float *dx = x->grad, *dg = gamma->grad, *db = beta->grad, *dy = y->grad;
  if ((dg && ag) || (db && ab)) FL_TRY(fl_gcu_need_ws(n, 2 * C));
  float *dg_k = dg && ag ? n->ws : dg, *db_k = db && ab ? n->ws + C : db;
  const float *save_mean = n->saved, *save_invstd = n->saved + C;
  if (c->norm_sync) {
    bn_state *s;
    FL_TRY(bn_dev_state(n, &s));
    double *dsums = s->dev + 2 * C + 1;
    FL_TRY(fl_gkernel(n,
                      fl_batchnorm_backward_reduce_cuda(d, x->data, y->data, dy, save_mean,
                                                        save_invstd, dsums, dg_k, db_k, p.act,
                                                        c->stream),
                      "batch-norm backward"));
    if (dx) {
      FL_TRY(bn_dev_exchange(n, c, dsums, s->sums, 2 * C, 2 * C));
      FL_TRY(fl_gkernel(n,
                        fl_batchnorm_backward_apply_cuda(d, x->data, dy, gamma->data, save_mean,
                                                         save_invstd, dsums, s->sum[C],
                                                         ax ? dy : dx, c->stream),
                        "batch-norm backward"));
    }
  } else {
    FL_TRY(fl_gkernel(n,
                      fl_batchnorm_backward_cuda(d, x->data, y->data, dy, gamma->data, save_mean,
                                                 save_invstd, dx ? (ax ? dy : dx) : NULL, dg_k,
                                                 db_k, p.act, c->stream),
                      "batch-norm backward"));
  }
  if (dx && ax) FL_TRY(fl_gcu_put(n, c, dx, dy, x->n, 1));
  if (dg && ag) FL_TRY(fl_gcu_put(n, c, dg, dg_k, C, 1));
  if (db && ab) FL_TRY(fl_gcu_put(n, c, db, db_k, C, 1));
  return FL_OK;
}

/* ------------------------------------------------- GroupNormalization */

typedef struct gn_p {
  fl_norm_desc d;
  fl_act act;
  int per_group; /* scale/bias are [num_groups], repeated over channels */
} gn_p;

static fl_status gn_params(const fl_gnode *n, const fl_gctx *c, gn_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  char sx[160];
  if (x->ndim < 2)
    return fl_gop_fail(n, FL_EINVAL, "input %s %s must be [N,C,...]", x->name,
                       fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  float eps;
  int64_t G, stash;
  FL_TRY(fl_ga_float(n, "epsilon", 1e-5f, &eps));
  FL_TRY(fl_ga_int(n, "num_groups", 0, &G));
  FL_TRY(fl_ga_int(n, "stash_type", 1, &stash));
  FL_TRY(fl_ga_act(n, &p->act));
  const int64_t C = x->shape[1];
  if (stash != 1)
    return fl_gop_fail(n, FL_EINVAL, "stash_type %lld is not supported (1: float statistics)",
                       (long long)stash);
  if (!(eps > 0.0f)) return fl_gop_fail(n, FL_EINVAL, "epsilon %g must be > 0", (double)eps);
  if (G < 1 || C % G)
    return fl_gop_fail(n, FL_EINVAL, "num_groups %lld must be >= 1 and divide %lld channels",
                       (long long)G, (long long)C);
  if (s->ndim != 1 || b->ndim != 1 || s->shape[0] != b->shape[0] ||
      (s->shape[0] != C && s->shape[0] != G))
    return fl_gop_fail(n, FL_EINVAL,
                       "scale %s and bias %s must both be [%lld] (per channel) or [%lld] (per "
                       "group)",
                       s->name, b->name, (long long)C, (long long)G);
  p->per_group = s->shape[0] != C;
  p->d.batch = (size_t)x->shape[0];
  p->d.channels = (size_t)C;
  p->d.inner = fl_gnumel(x->ndim - 2, x->shape + 2);
  p->d.groups = (size_t)G;
  p->d.eps = eps;
  p->d.momentum = 0.0f;
  return FL_OK;
}

static fl_status gn_gpu_params(const fl_gnode *n, const fl_gctx *c, gn_p *p);

static fl_status gn_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  for (int i = 0; i < 3; i++) FL_TRY(fl_gneed(n, c, i, FL_G_F32));
  gn_p p;
  FL_TRY(gn_params(n, c, &p));
  if (c->stream) FL_TRY(gn_gpu_params(n, c, &p)); /* a gpu bind: refuse what it lacks */
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = 4 * p.d.channels;                  /* expanded scale, bias; their grads */
  *saved = 2 * p.d.batch * p.d.groups;     /* save_mean, save_invstd */
  return FL_OK;
}

/* Per-channel gamma and beta: the inputs, or per-group ones expanded into ws. */
static void gn_affine(const fl_gnode *n, const fl_gctx *c, const gn_p *p, const float **g,
                      const float **b) {
  const fl_gtensor *s = fl_gin(n, c, 1), *bt = fl_gin(n, c, 2);
  if (!p->per_group) {
    *g = s->data;
    *b = bt->data;
    return;
  }
  const size_t C = p->d.channels, cpg = C / p->d.groups;
  for (size_t ch = 0; ch < C; ch++) {
    n->ws[ch] = s->data[ch / cpg];
    n->ws[C + ch] = bt->data[ch / cpg];
  }
  *g = n->ws;
  *b = n->ws + C;
}

static fl_status gn_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  gn_p p;
  FL_TRY(gn_params(n, c, &p));
  if (y->n == 0) return FL_OK;
  const float *g, *b;
  gn_affine(n, c, &p, &g, &b);
  const size_t m = p.d.batch * p.d.groups;
  return norm_kernel(n,
                     fl_groupnorm_forward(&p.d, x->data, y->data, g, b, n->saved, n->saved + m,
                                          p.act),
                     "group-norm");
}

static fl_status gn_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *bt = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  gn_p p;
  FL_TRY(gn_params(n, c, &p));
  if (y->n == 0) return FL_OK;
  const size_t C = p.d.channels, m = p.d.batch * p.d.groups;
  const int ax = fl_gacc(acc, 0), ag = fl_gacc(acc, 1), ab = fl_gacc(acc, 2);
  float *dx = x->grad, *dg = s->grad, *db = bt->grad, *dy = y->grad;
  const float *g, *b;
  gn_affine(n, c, &p, &g, &b);
  /* The kernel's per-channel dgamma/dbeta go to ws when they must be
   * accumulated or summed over a group's channels. */
  float *dg_k = dg && (ag || p.per_group) ? n->ws + 2 * C : dg;
  float *db_k = db && (ab || p.per_group) ? n->ws + 3 * C : db;
  const fl_status st = fl_groupnorm_backward(&p.d, x->data, y->data, dy, g, n->saved,
                                             n->saved + m, dx ? (ax ? dy : dx) : NULL, dg_k,
                                             db_k, p.act);
  if (st != FL_OK) return norm_kernel(n, st, "group-norm backward");
  if (dx && ax) fl_gput(dx, dy, x->n, 1);
  if (p.per_group) {
    const size_t G = p.d.groups, cpg = C / G;
    for (int k = 0; k < 2; k++) {
      float *dst = k ? db : dg;
      const float *src = k ? db_k : dg_k;
      if (!dst) continue;
      if (!(k ? ab : ag)) memset(dst, 0, G * sizeof *dst);
      for (size_t ch = 0; ch < C; ch++) dst[ch / cpg] += src[ch];
    }
  } else {
    if (dg && ag) fl_gput(dg, dg_k, C, 1);
    if (db && ab) fl_gput(db, db_k, C, 1);
  }
  return FL_OK;
}

/* Group norm on the gpu: per-channel scale and bias only. */
static fl_status gn_gpu_params(const fl_gnode *n, const fl_gctx *c, gn_p *p) {
  FL_TRY(gn_params(n, c, p));
  if (!p->per_group) return FL_OK;
  return fl_gop_fail(n, FL_ENOTSUP, "on the gpu scale and bias must be per channel [C]");
}

static fl_status gn_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  gn_p p;
  FL_TRY(gn_gpu_params(n, c, &p));
  if (y->n == 0) return FL_OK;
  const size_t m = p.d.batch * p.d.groups;
  return fl_gkernel(n,
                    fl_groupnorm_forward_cuda(&p.d, x->data, y->data, s->data, b->data,
                                              n->saved, n->saved + m, p.act, c->stream),
                    "group-norm");
}

static fl_status gn_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *bt = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  gn_p p;
  FL_TRY(gn_gpu_params(n, c, &p));
  if (y->n == 0) return FL_OK;
  const size_t C = p.d.channels, m = p.d.batch * p.d.groups;
  const int ax = fl_gacc(acc, 0), ag = fl_gacc(acc, 1), ab = fl_gacc(acc, 2);
  float *dx = x->grad, *dg = s->grad, *db = bt->grad, *dy = y->grad;
  if ((dg && ag) || (db && ab)) FL_TRY(fl_gcu_need_ws(n, 4 * C));
  float *dg_k = dg && ag ? n->ws + 2 * C : dg, *db_k = db && ab ? n->ws + 3 * C : db;
  FL_TRY(fl_gkernel(n,
                    fl_groupnorm_backward_cuda(&p.d, x->data, y->data, dy, s->data, n->saved,
                                               n->saved + m, dx ? (ax ? dy : dx) : NULL, dg_k,
                                               db_k, p.act, c->stream),
                    "group-norm backward"));
  if (dx && ax) FL_TRY(fl_gcu_put(n, c, dx, dy, x->n, 1));
  if (dg && ag) FL_TRY(fl_gcu_put(n, c, dg, dg_k, C, 1));
  if (db && ab) FL_TRY(fl_gcu_put(n, c, db, db_k, C, 1));
  return FL_OK;
}

/* ------------------------------------------------- LayerNormalization */

typedef struct ln_p {
  size_t rows, cols;
  int axis;
  float eps;
} ln_p;

static fl_status ln_params(const fl_gnode *n, const fl_gctx *c, ln_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  int64_t axis, stash;
  FL_TRY(fl_ga_int(n, "axis", -1, &axis));
  FL_TRY(fl_ga_float(n, "epsilon", 1e-5f, &p->eps));
  FL_TRY(fl_ga_int(n, "stash_type", 1, &stash));
  if (stash != 1)
    return fl_gop_fail(n, FL_EINVAL, "stash_type %lld is not supported (1: float statistics)",
                       (long long)stash);
  if (!(p->eps > 0.0f))
    return fl_gop_fail(n, FL_EINVAL, "epsilon %g must be > 0", (double)p->eps);
  FL_TRY(fl_gaxis(n, axis, x->ndim, "axis", &p->axis));
  p->rows = fl_gnumel(p->axis, x->shape);
  p->cols = fl_gnumel(x->ndim - p->axis, x->shape + p->axis);
  char sx[160], ss[160];
  for (int i = 1; i <= 2; i++) {
    const fl_gtensor *t = i == 1 ? s : b;
    if (!t) continue;
    /* Scale and bias have the normalised dims' shape (leading 1s allowed). */
    int ok = t->n == p->cols && t->ndim <= x->ndim;
    for (int d = 0; ok && d < t->ndim; d++) {
      const int xd = x->ndim - t->ndim + d;
      ok = xd >= p->axis ? t->shape[d] == x->shape[xd] : t->shape[d] == 1;
    }
    if (!ok)
      return fl_gop_fail(n, FL_EINVAL, "%s %s %s does not match input %s from axis %d",
                         i == 1 ? "scale" : "bias", t->name,
                         fl_gshape_str(t->ndim, t->shape, ss, sizeof ss),
                         fl_gshape_str(x->ndim, x->shape, sx, sizeof sx), p->axis);
  }
  return FL_OK;
}

static fl_status ln_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  if (fl_gin(n, c, 2)) FL_TRY(fl_gneed(n, c, 2, FL_G_F32));
  ln_p p;
  FL_TRY(ln_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  int64_t ms[FL_G_MAX_DIMS];
  for (int d = 0; d < x->ndim; d++) ms[d] = d < p.axis ? x->shape[d] : 1;
  for (int o = 1; o < n->n_out; o++) fl_gset_out(n, c, o, FL_G_F32, x->ndim, ms);
  *ws = 0;
  *saved = 2 * p.rows; /* mean, invstd */
  return FL_OK;
}

static fl_status ln_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  ln_p p;
  FL_TRY(ln_params(n, c, &p));
  float *mean = n->saved, *invstd = n->saved ? n->saved + p.rows : NULL;
  for (size_t r = 0; r < p.rows; r++) {
    const float *xr = x->data + r * p.cols;
    float *yr = y->data + r * p.cols;
    /* mean and biased variance in double (bn_sum's lanes), then
     * y = xhat*scale + bias four at a time (the scalar formula's bits) */
    const double m = bn_sum(xr, p.cols) / (double)p.cols;
    const double v = bn_sqdev(xr, p.cols, m) / (double)p.cols;
    const float mf = (float)m, is = (float)(1.0 / sqrt(v + (double)p.eps));
    size_t k = 0;
#ifdef __SSE2__
    const __m128 vm = _mm_set1_ps(mf), vi = _mm_set1_ps(is);
    for (; k + 4 <= p.cols; k += 4) {
      const __m128 xh = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xr + k), vm), vi);
      const __m128 bb = b ? _mm_loadu_ps(b->data + k) : _mm_setzero_ps();
      _mm_storeu_ps(yr + k, _mm_add_ps(_mm_mul_ps(xh, _mm_loadu_ps(s->data + k)), bb));
    }
#endif
    for (; k < p.cols; k++) {
      const float xh = (xr[k] - mf) * is;
      yr[k] = xh * s->data[k] + (b ? b->data[k] : 0.0f);
    }
    if (mean) mean[r] = mf, invstd[r] = is;
    fl_gtensor *om = fl_gout(n, c, 1), *oi = fl_gout(n, c, 2);
    if (om) om->data[r] = mf;
    if (oi) oi->data[r] = is;
  }
  return FL_OK;
}

static fl_status ln_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  ln_p p;
  FL_TRY(ln_params(n, c, &p));
  float *dx = x->grad, *ds = s->grad, *db = b ? b->grad : NULL;
  const int ax = fl_gacc(acc, 0);
  if (ds && !fl_gacc(acc, 1)) memset(ds, 0, p.cols * sizeof *ds);
  if (db && !fl_gacc(acc, 2)) memset(db, 0, p.cols * sizeof *db);
  const float *mean = n->saved, *invstd = n->saved + p.rows, *sc = s->data;
  for (size_t r = 0; r < p.rows; r++) {
    const float *xr = x->data + r * p.cols, *gr = y->grad + r * p.cols;
    const float mf = mean[r], is = invstd[r];
    /* sum dxhat, sum dxhat*xhat in double (two lanes each with SSE2);
     * ds, db and dx element by element as the scalar formulas */
    double s1 = 0.0, s2 = 0.0;
    size_t k = 0;
#ifdef __SSE2__
    const __m128 vm = _mm_set1_ps(mf), vi = _mm_set1_ps(is);
    __m128d a1 = _mm_setzero_pd(), a2 = a1, b1 = a1, b2 = a1;
    for (; k + 4 <= p.cols; k += 4) {
      const __m128 g = _mm_loadu_ps(gr + k);
      const __m128 xh = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xr + k), vm), vi);
      const __m128 dxh = _mm_mul_ps(g, _mm_loadu_ps(sc + k));
      const __m128d d0 = _mm_cvtps_pd(dxh), d1 = _mm_cvtps_pd(_mm_movehl_ps(dxh, dxh));
      a1 = _mm_add_pd(a1, d0);
      a2 = _mm_add_pd(a2, d1);
      b1 = _mm_add_pd(b1, _mm_mul_pd(d0, _mm_cvtps_pd(xh)));
      b2 = _mm_add_pd(b2, _mm_mul_pd(d1, _mm_cvtps_pd(_mm_movehl_ps(xh, xh))));
      if (ds) _mm_storeu_ps(ds + k, _mm_add_ps(_mm_loadu_ps(ds + k), _mm_mul_ps(g, xh)));
      if (db) _mm_storeu_ps(db + k, _mm_add_ps(_mm_loadu_ps(db + k), g));
    }
    double l1[2], l2[2];
    _mm_storeu_pd(l1, _mm_add_pd(a1, a2));
    _mm_storeu_pd(l2, _mm_add_pd(b1, b2));
    s1 = l1[0] + l1[1];
    s2 = l2[0] + l2[1];
#endif
    for (; k < p.cols; k++) {
      const float xh = (xr[k] - mf) * is, dxh = gr[k] * sc[k];
      s1 += dxh;
      s2 += (double)dxh * xh;
      if (ds) ds[k] += gr[k] * xh;
      if (db) db[k] += gr[k];
    }
    if (!dx) continue;
    const float m1 = (float)(s1 / (double)p.cols), m2 = (float)(s2 / (double)p.cols);
    float *dr = dx + r * p.cols;
    k = 0;
#ifdef __SSE2__
    const __m128 v1 = _mm_set1_ps(m1), v2 = _mm_set1_ps(m2);
    for (; k + 4 <= p.cols; k += 4) {
      const __m128 xh = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xr + k), vm), vi);
      const __m128 t = _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(gr + k), _mm_loadu_ps(sc + k)), v1);
      const __m128 v = _mm_mul_ps(vi, _mm_sub_ps(t, _mm_mul_ps(xh, v2)));
      _mm_storeu_ps(dr + k, ax ? _mm_add_ps(_mm_loadu_ps(dr + k), v) : v);
    }
#endif
    for (; k < p.cols; k++) {
      const float xh = (xr[k] - mf) * is;
      const float v = is * (gr[k] * sc[k] - m1 - xh * m2);
      dr[k] = ax ? dr[k] + v : v;
    }
  }
  return FL_OK;
}

/* ---------------------------------------------- InstanceNormalization */

/* Each (image, channel) row of inner values normalised by its own mean and
 * biased variance, then scaled and shifted per channel. */
typedef struct in_p {
  size_t N, C, inner;
  float eps;
} in_p;

static fl_status in_params(const fl_gnode *n, const fl_gctx *c, in_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  char sx[160];
  FL_TRY(fl_ga_float(n, "epsilon", 1e-5f, &p->eps));
  if (!(p->eps > 0.0f))
    return fl_gop_fail(n, FL_EINVAL, "epsilon %g must be > 0", (double)p->eps);
  if (x->ndim < 3)
    return fl_gop_fail(n, FL_EINVAL, "input %s %s must be [N,C,D1,...] (rank 3 or more)",
                       x->name, fl_gshape_str(x->ndim, x->shape, sx, sizeof sx));
  p->N = (size_t)x->shape[0];
  p->C = (size_t)x->shape[1];
  p->inner = fl_gnumel(x->ndim - 2, x->shape + 2);
  for (int i = 1; i <= 2; i++) {
    const fl_gtensor *t = fl_gin(n, c, i);
    if (t->ndim != 1 || t->shape[0] != x->shape[1])
      return fl_gop_fail(n, FL_EINVAL, "%s %s is %s, expected [%lld] (the input's channels)",
                         i == 1 ? "scale" : "B", t->name,
                         fl_gshape_str(t->ndim, t->shape, sx, sizeof sx),
                         (long long)x->shape[1]);
  }
  return FL_OK;
}

static fl_status in_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  for (int i = 0; i < 3; i++) FL_TRY(fl_gneed(n, c, i, FL_G_F32));
  in_p p;
  FL_TRY(in_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = 0;
  *saved = 2 * p.N * p.C; /* each row's mean and inverse std */
  return FL_OK;
}

static fl_status in_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  in_p p;
  FL_TRY(in_params(n, c, &p));
  const size_t rows = p.N * p.C;
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x->data + r * p.inner;
    float *yr = y->data + r * p.inner;
    const double m = p.inner ? bn_sum(xr, p.inner) / (double)p.inner : 0.0;
    const double v = p.inner ? bn_sqdev(xr, p.inner, m) / (double)p.inner : 0.0;
    const float mf = (float)m, is = (float)(1.0 / sqrt(v + (double)p.eps));
    const float sc = s->data[r % p.C], bi = b->data[r % p.C];
    for (size_t k = 0; k < p.inner; k++) yr[k] = (xr[k] - mf) * is * sc + bi;
    if (n->saved) n->saved[r] = mf, n->saved[rows + r] = is;
  }
  return FL_OK;
}

/* dx = scale*is*(dy - mean dy - xhat*mean(dy*xhat)) per row; dscale and dB
 * sum dy*xhat and dy over the rows of their channel. */
static fl_status in_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *s = fl_gin(n, c, 1), *b = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  in_p p;
  FL_TRY(in_params(n, c, &p));
  float *dx = x->grad, *ds = s->grad, *db = b->grad;
  const int ax = fl_gacc(acc, 0);
  if (ds && !fl_gacc(acc, 1)) memset(ds, 0, p.C * sizeof *ds);
  if (db && !fl_gacc(acc, 2)) memset(db, 0, p.C * sizeof *db);
  const size_t rows = p.N * p.C;
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x->data + r * p.inner, *gr = y->grad + r * p.inner;
    const float mf = n->saved[r], is = n->saved[rows + r], sc = s->data[r % p.C];
    double s1 = 0.0, s2 = 0.0;
    for (size_t k = 0; k < p.inner; k++) {
      s1 += gr[k];
      s2 += (double)gr[k] * ((xr[k] - mf) * is);
    }
    if (ds) ds[r % p.C] += (float)s2;
    if (db) db[r % p.C] += (float)s1;
    if (!dx || !p.inner) continue;
    const float m1 = (float)(s1 / (double)p.inner), m2 = (float)(s2 / (double)p.inner);
    const float k0 = sc * is;
    float *dr = dx + r * p.inner;
    for (size_t k = 0; k < p.inner; k++) {
      const float v = k0 * (gr[k] - m1 - (xr[k] - mf) * is * m2);
      dr[k] = ax ? dr[k] + v : v;
    }
  }
  return FL_OK;
}

/* ---------------------------------------------------- Softmax, LogSoftmax */

typedef struct sm_p {
  size_t outer, len, inner;
  int log;
} sm_p;

static fl_status sm_params(const fl_gnode *n, const fl_gctx *c, sm_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t axis;
  int a;
  FL_TRY(fl_ga_int(n, "axis", -1, &axis));
  if (x->ndim == 0) return fl_gop_fail(n, FL_EINVAL, "input %s is a scalar", x->name);
  FL_TRY(fl_gaxis(n, axis, x->ndim, "axis", &a));
  p->outer = fl_gnumel(a, x->shape);
  p->len = (size_t)x->shape[a];
  p->inner = fl_gnumel(x->ndim - a - 1, x->shape + a + 1);
  p->log = n->op->variant; /* LogSoftmax's row */
  return FL_OK;
}

static fl_status sm_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  sm_p p;
  FL_TRY(sm_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gset_out(n, c, 0, FL_G_F32, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Softmax over one contiguous row (inner 1, the common case): the same
 * values as the strided loop but the max and the scaling four at a time,
 * and the double sum of the exps in four lanes by index (a fixed order). */
static void sm_row(const float *xv, float *yv, size_t len, int log_sm) {
  size_t k = 0;
  float mx = -INFINITY;
#ifdef __SSE2__
  if (len >= 4) { /* max(x, m) keeps m for a NaN x, as the scalar test does */
    __m128 m = _mm_set1_ps(-INFINITY);
    for (; k + 4 <= len; k += 4) m = _mm_max_ps(_mm_loadu_ps(xv + k), m);
    float l[4];
    _mm_storeu_ps(l, m);
    for (int j = 0; j < 4; j++)
      if (l[j] > mx) mx = l[j];
  }
#endif
  for (; k < len; k++)
    if (xv[k] > mx) mx = xv[k];
  double s4[4] = {0.0, 0.0, 0.0, 0.0};
  for (k = 0; k < len; k++) {
    const float e = expf(xv[k] - mx);
    yv[k] = e;
    s4[k & 3] += e;
  }
  const double sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  if (log_sm) {
    const float lse = mx + (float)log(sum);
    for (k = 0; k < len; k++) yv[k] = xv[k] - lse;
    return;
  }
  const float inv = (float)(1.0 / sum);
  k = 0;
#ifdef __SSE2__
  const __m128 vi = _mm_set1_ps(inv);
  for (; k + 4 <= len; k += 4) _mm_storeu_ps(yv + k, _mm_mul_ps(_mm_loadu_ps(yv + k), vi));
#endif
  for (; k < len; k++) yv[k] *= inv;
}

static fl_status sm_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  sm_p p;
  FL_TRY(sm_params(n, c, &p));
  if (p.inner == 1) {
    for (size_t o = 0; o < p.outer; o++)
      sm_row(x->data + o * p.len, y->data + o * p.len, p.len, p.log);
    return FL_OK;
  }
  for (size_t o = 0; o < p.outer; o++)
    for (size_t i = 0; i < p.inner; i++) {
      const float *xv = x->data + o * p.len * p.inner + i;
      float *yv = y->data + o * p.len * p.inner + i;
      float mx = -INFINITY;
      for (size_t k = 0; k < p.len; k++)
        if (xv[k * p.inner] > mx) mx = xv[k * p.inner];
      /* One exp per value (kept in y), summed in double in index order. */
      double sum = 0.0;
      for (size_t k = 0; k < p.len; k++) {
        const float e = expf(xv[k * p.inner] - mx);
        yv[k * p.inner] = e;
        sum += e;
      }
      if (p.log) {
        const float lse = mx + (float)log(sum);
        for (size_t k = 0; k < p.len; k++) yv[k * p.inner] = xv[k * p.inner] - lse;
      } else {
        const float inv = (float)(1.0 / sum);
        for (size_t k = 0; k < p.len; k++) yv[k * p.inner] *= inv;
      }
    }
  return FL_OK;
}

static fl_status sm_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  sm_p p;
  FL_TRY(sm_params(n, c, &p));
  const int ax = fl_gacc(acc, 0);
  if (p.inner == 1 && !p.log) { /* contiguous rows: dx = y*(g - sum g*y) */
    for (size_t o = 0; o < p.outer; o++) {
      const float *yv = y->data + o * p.len, *gv = y->grad + o * p.len;
      float *dv = x->grad + o * p.len;
      double s4[4] = {0.0, 0.0, 0.0, 0.0};
      for (size_t k = 0; k < p.len; k++) s4[k & 3] += (double)gv[k] * yv[k];
      const float sf = (float)((s4[0] + s4[1]) + (s4[2] + s4[3]));
      size_t k = 0;
#ifdef __SSE2__
      const __m128 vs = _mm_set1_ps(sf);
      for (; k + 4 <= p.len; k += 4) {
        const __m128 v = _mm_mul_ps(_mm_loadu_ps(yv + k), _mm_sub_ps(_mm_loadu_ps(gv + k), vs));
        _mm_storeu_ps(dv + k, ax ? _mm_add_ps(_mm_loadu_ps(dv + k), v) : v);
      }
#endif
      for (; k < p.len; k++) {
        const float v = yv[k] * (gv[k] - sf);
        dv[k] = ax ? dv[k] + v : v;
      }
    }
    return FL_OK;
  }
  for (size_t o = 0; o < p.outer; o++)
    for (size_t i = 0; i < p.inner; i++) {
      const size_t base = o * p.len * p.inner + i;
      const float *yv = y->data + base, *gv = y->grad + base;
      float *dv = x->grad + base;
      double s = 0.0;
      if (p.log)
        for (size_t k = 0; k < p.len; k++) s += gv[k * p.inner];
      else
        for (size_t k = 0; k < p.len; k++) s += (double)gv[k * p.inner] * yv[k * p.inner];
      const float sf = (float)s;
      for (size_t k = 0; k < p.len; k++) {
        const size_t j = k * p.inner;
        const float v = p.log ? gv[j] - expf(yv[j]) * sf : yv[j] * (gv[j] - sf);
        dv[j] = ax ? dv[j] + v : v;
      }
    }
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const bn_attrs[] = {"epsilon", "momentum", "training_mode", FL_GRAPH_ACT_ATTR,
                                       NULL};
static const char *const gn_attrs[] = {"epsilon", "num_groups", "stash_type", FL_GRAPH_ACT_ATTR,
                                       NULL};
static const char *const ln_attrs[] = {"axis", "epsilon", "stash_type", NULL};
static const char *const in_attrs[] = {"epsilon", NULL};
static const char *const sm_attrs[] = {"axis", NULL};

const fl_gop fl_gops_norm[] = {
    {.type = "BatchNormalization", .paddle = "batch_norm", .min_in = 5, .max_in = 5,
     .min_out = 1, .max_out = 5, .attrs = bn_attrs, .infer = bn_infer, .forward = bn_forward,
     .backward = bn_backward, .save_in = 3, .save_out = 1, .nodiff_in = 0x18,
     .forward_cuda = bn_forward_cuda, .backward_cuda = bn_backward_cuda,
     .free_state = bn_free_state, .traits = FL_GOP_FUSES_ACT | FL_GOP_FOLDS_RELU,
     .buffer_in = 0x18, .export_n_out = 1, .export_drop_attr = "training_mode",
     .doc = "epsilon, momentum; training_mode ignored (the engine decides); outputs "
            "running_mean, running_var (opsets 14+) and opset 13's saved_mean, saved_var "
            "(batch mean, biased variance; CPU only)"},
    {.type = "GroupNormalization", .paddle = "group_norm", .min_in = 3, .max_in = 3,
     .min_out = 1, .max_out = 1, .attrs = gn_attrs, .infer = gn_infer, .forward = gn_forward,
     .backward = gn_backward, .save_in = 7, .save_out = 1, .forward_cuda = gn_forward_cuda,
     .backward_cuda = gn_backward_cuda, .traits = FL_GOP_FUSES_ACT, .opset_min = 18,
     .doc = "ONNX has it from opset 18: built by the presets (model.norm gn); in a file at "
            "opsets 13..17 it is refused"},
    {.type = "LayerNormalization", .paddle = "layer_norm", .min_in = 2, .max_in = 3,
     .min_out = 1, .max_out = 3, .attrs = ln_attrs, .infer = ln_infer, .forward = ln_forward,
     .backward = ln_backward, .save_in = 3,
     .doc = "axis, epsilon; Mean and InvStdDev outputs filled, no gradient through them"},
    {.type = "InstanceNormalization", .paddle = "instance_norm", .min_in = 3, .max_in = 3,
     .min_out = 1, .max_out = 1, .attrs = in_attrs, .infer = in_infer, .forward = in_forward,
     .backward = in_backward, .save_in = 3,
     .doc = "epsilon; scale and B [C]; rank 3 or more; statistics per image and channel "
            "(biased variance)"},
    {.type = "Softmax", .paddle = "softmax", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = sm_attrs, .infer = sm_infer, .forward = sm_forward,
     .backward = sm_backward, .save_out = 1,
     .doc = "any axis (opset 13 semantics: one axis)"},
    {.type = "LogSoftmax", .paddle = "log_softmax", .min_in = 1, .max_in = 1, .min_out = 1,
     .max_out = 1, .attrs = sm_attrs, .infer = sm_infer, .forward = sm_forward,
     .backward = sm_backward, .save_out = 1, .variant = 1,
     .doc = "any axis (opset 13 semantics: one axis)"},
};
const size_t fl_gops_norm_n = sizeof fl_gops_norm / sizeof fl_gops_norm[0];
