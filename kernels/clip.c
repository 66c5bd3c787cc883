/* clip.c - gradient clipping: by the norm over all gradients, by each
 * tensor's norm, and by value (fl_optim.h), with torch's formulas.
 *
 * The trainer clips the gradient the optimizer is about to apply (merged,
 * averaged across ranks, unscaled), so one kernel serves every mode.  Norms
 * are sums in double in tensor and element order: the same bits on every
 * rank for the same gradients. */
#include <config.h>

#include <math.h>
#include <stddef.h>

#include "fl_optim.h"

const char *const fl_clip_kind_names[] = {"none", "global_norm", "value", "norm", NULL};
_Static_assert(sizeof fl_clip_kind_names / sizeof fl_clip_kind_names[0] == FL_CLIP_COUNT + 1,
               "one name per fl_clip_kind, then NULL");

static int positive(float x) { return isfinite(x) && x > 0.0f; }

fl_status fl_clip_check(const fl_clip *c) {
  if (!c || (unsigned)c->kind >= FL_CLIP_COUNT) return FL_EINVAL;
  switch (c->kind) {
  case FL_CLIP_GLOBAL_NORM:
  case FL_CLIP_NORM:
    if (!positive(c->max_norm) || !(positive(c->norm_type) || c->norm_type == INFINITY))
      return FL_EINVAL;
    break;
  case FL_CLIP_VALUE:
    if (!positive(c->clip_value)) return FL_EINVAL;
    break;
  default: break;
  }
  return FL_OK;
}

/* Fold one tensor into the running sum of |g|^p (or max |g| for p = inf,
 * which a nan element turns nan). */
static double fold(double acc, const float *g, size_t n, double p) {
  if (isinf(p)) {
    for (size_t i = 0; i < n; i++) {
      double a = fabs((double)g[i]);
      if (isnan(a) || a > acc) acc = a;
      if (isnan(acc)) return acc;
    }
  } else if (p == 2.0) {
    for (size_t i = 0; i < n; i++) acc += (double)g[i] * (double)g[i];
  } else {
    for (size_t i = 0; i < n; i++) acc += pow(fabs((double)g[i]), p);
  }
  return acc;
}

static double finish(double acc, double p) {
  if (isinf(p)) return acc;
  return p == 2.0 ? sqrt(acc) : pow(acc, 1.0 / p);
}

/* Scale by max_norm / (norm + 1e-6) when that is below 1 (or nan). */
static void scale_by(float *const *g, const size_t *n, size_t nt, double norm, float max_norm) {
  float coef = (float)((double)max_norm / (norm + 1e-6));
  if (coef >= 1.0f) return;
  for (size_t t = 0; t < nt; t++)
    for (size_t i = 0; i < n[t]; i++) g[t][i] *= coef;
}

static void clip_values(float *const *g, const size_t *n, size_t nt, float v) {
  for (size_t t = 0; t < nt; t++)
    for (size_t i = 0; i < n[t]; i++) {
      float x = g[t][i];
      g[t][i] = x > v ? v : x < -v ? -v : x; /* a nan stays */
    }
}

static int lists_ok(float *const *g, const size_t *n, size_t nt) {
  if (!g || !n || nt == 0) return 0;
  for (size_t t = 0; t < nt; t++)
    if (!g[t] || n[t] == 0) return 0;
  return 1;
}

fl_status fl_clip_grads(const fl_clip *c, float *const *g, const size_t *n, size_t nt,
                        double *norm) {
  if (norm) *norm = NAN;
  if (fl_clip_check(c) != FL_OK) return FL_EINVAL;
  if (c->kind == FL_CLIP_NONE) return FL_OK;
  if (!lists_ok(g, n, nt)) return FL_EINVAL;
  double p = c->norm_type, big = 0.0;
  switch (c->kind) {
  case FL_CLIP_GLOBAL_NORM: {
    double acc = 0.0;
    for (size_t t = 0; t < nt; t++) acc = fold(acc, g[t], n[t], p);
    big = finish(acc, p);
    scale_by(g, n, nt, big, c->max_norm);
    break;
  }
  case FL_CLIP_NORM:
    for (size_t t = 0; t < nt; t++) {
      double one = finish(fold(0.0, g[t], n[t], p), p);
      if (!isnan(big) && (isnan(one) || one > big)) big = one;
      scale_by(&g[t], &n[t], 1, one, c->max_norm);
    }
    break;
  case FL_CLIP_VALUE: clip_values(g, n, nt, c->clip_value); return FL_OK;
  default: return FL_OK;
  }
  if (norm) *norm = big;
  return FL_OK;
}
