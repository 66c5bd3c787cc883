/* amp.c - mixed-precision support on the CPU: check_finite_and_unscale over
 * a list of gradient tensors, and the dynamic loss-scaling state machine.
 *
 * The check and the unscale are one pass (read, test, multiply, write).  An
 * element is non-finite exactly when x - x is not 0 (inf - inf and nan - nan
 * are nan), a test that vectorizes.  The state machine follows Paddle's
 * update_loss_scaling: consecutive good/bad step counters, a skipped update
 * on overflow, a floor of 1 on the scale (docs/DESIGN.md section 5). */
#include <config.h>

#include <math.h>

#include "fl_optim.h"
#include "kern_internal.h"

/* Unscale a[0..n) by inv; 1 when an element was inf or nan. */
static int unscale_range(float *restrict a, size_t n, float inv) {
  int bad = 0;
  FL_OMP(omp simd reduction(| : bad))
  for (size_t i = 0; i < n; i++) {
    float x = a[i];
    bad |= (x - x) != 0.0f;
    a[i] = x * inv;
  }
  return bad;
}

fl_status fl_amp_check_finite_and_unscale(float *const *t, const size_t *n, size_t nt,
                                          float scale, int *found_inf) {
  if (!t || !n || nt == 0 || !found_inf || !isfinite(scale) || !(scale > 0.0f))
    return FL_EINVAL;
  size_t total = 0;
  for (size_t i = 0; i < nt; i++) {
    if (!t[i] || n[i] == 0 || n[i] > SIZE_MAX / (2 * sizeof(float)) || total > SIZE_MAX / 2 - n[i])
      return FL_EINVAL;
    total += n[i];
  }
  float inv = (float)(1.0 / (double)scale);
  int found = 0;
  int nthr = fl_kern_threads(0, total);
  (void)nthr; /* unused without OpenMP */
  FL_OMP(omp parallel num_threads(nthr) if (nthr > 1) reduction(| : found))
  {
    size_t T = (size_t)fl_kern_nthreads(), k = (size_t)fl_kern_tid();
    size_t lo = fl_kern_split(total, T, k, 16), hi = fl_kern_split(total, T, k + 1, 16);
    size_t off = 0, a, b;
    for (size_t i = 0; i < nt && off < hi; off += n[i], i++)
      if (fl_kern_clip(off, n[i], lo, hi, &a, &b))
        found |= unscale_range(t[i] + a, b - a, inv);
  }
  *found_inf = found != 0;
  return FL_OK;
}

fl_loss_scaler fl_loss_scaler_default(void) {
  fl_loss_scaler s = {
      .scale = 32768.0f,
      .incr_every_n_steps = 1000,
      .decr_every_n_nan_or_inf = 2,
      .incr_ratio = 2.0f,
      .decr_ratio = 0.8f,
      .good_steps = 0,
      .bad_steps = 0,
      .dynamic = 1,
  };
  return s;
}

fl_status fl_loss_scaler_check(const fl_loss_scaler *s) {
  if (!s || !isfinite(s->scale) || !(s->scale > 0.0f))
    return FL_EINVAL;
  if (s->incr_every_n_steps < 1 || s->decr_every_n_nan_or_inf < 1)
    return FL_EINVAL;
  if (!isfinite(s->incr_ratio) || !(s->incr_ratio >= 1.0f))
    return FL_EINVAL;
  if (!isfinite(s->decr_ratio) || !(s->decr_ratio > 0.0f) || s->decr_ratio > 1.0f)
    return FL_EINVAL;
  if (s->good_steps < 0 || s->bad_steps < 0 || (s->dynamic != 0 && s->dynamic != 1))
    return FL_EINVAL;
  if (s->dynamic && s->scale < 1.0f) /* the floor of a dynamic scale is 1 */
    return FL_EINVAL;
  return FL_OK;
}

fl_status fl_loss_scaler_update(fl_loss_scaler *s, int found_inf, int *skip) {
  if (!skip)
    return FL_EINVAL;
  fl_status st = fl_loss_scaler_check(s);
  if (st != FL_OK)
    return st;
  *skip = found_inf != 0;
  if (!s->dynamic)
    return FL_OK;
  if (found_inf) {
    s->good_steps = 0;
    if (++s->bad_steps >= s->decr_every_n_nan_or_inf) {
      float next = s->scale * s->decr_ratio;
      s->scale = next < 1.0f ? 1.0f : next;
      s->bad_steps = 0;
    }
  } else {
    s->bad_steps = 0;
    if (++s->good_steps >= s->incr_every_n_steps) {
      float next = s->scale * s->incr_ratio;
      if (isfinite(next)) /* a scale that would overflow stays where it is */
        s->scale = next;
      s->good_steps = 0;
    }
  }
  return FL_OK;
}
