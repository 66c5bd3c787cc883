/* gradmerge.c - gradient merge on the CPU: acc += g at every micro-step, and
 * acc /= k_steps (with avg) at the k-th, over a list of tensors per call.
 *
 * Both are memory-bound elementwise passes; threads split the flattened
 * element space of all tensors, as the optimizer step does.  With avg the
 * accumulator is divided (not multiplied by 1/k), so a merged gradient is
 * the correctly rounded mean of the exact float sum. */
#include <config.h>

#include "fl_optim.h"
#include "kern_internal.h"

/* Common checks: non-NULL arrays, nt > 0, every n[i] > 0, every acc[i]
 * (and g[i] when g is given) non-NULL and not overlapping; *total gets the
 * element count. */
static fl_status check_lists(float *const *acc, const float *const *g, const size_t *n, size_t nt,
                             size_t *total) {
  if (!acc || !n || nt == 0)
    return FL_EINVAL;
  size_t sum = 0;
  for (size_t i = 0; i < nt; i++) {
    if (!acc[i] || n[i] == 0 || n[i] > SIZE_MAX / (2 * sizeof(float)) || sum > SIZE_MAX / 2 - n[i])
      return FL_EINVAL;
    if (g && (!g[i] || fl_kern_overlap(acc[i], n[i] * sizeof(float), g[i], n[i] * sizeof(float))))
      return FL_EINVAL;
    sum += n[i];
  }
  *total = sum;
  return FL_OK;
}

static void add_range(float *restrict a, const float *restrict g, size_t n) {
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++)
    a[i] = a[i] + g[i];
}

static void div_range(float *restrict a, size_t n, float k) {
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++)
    a[i] = a[i] / k;
}

fl_status fl_gm_accumulate(float *const *acc, const float *const *g, const size_t *n, size_t nt) {
  size_t total;
  if (!g)
    return FL_EINVAL;
  fl_status st = check_lists(acc, g, n, nt, &total);
  if (st != FL_OK)
    return st;
  int nthr = fl_kern_threads(0, total);
  (void)nthr; /* unused without OpenMP */
  FL_OMP(omp parallel num_threads(nthr) if (nthr > 1))
  {
    size_t T = (size_t)fl_kern_nthreads(), k = (size_t)fl_kern_tid();
    size_t lo = fl_kern_split(total, T, k, 16), hi = fl_kern_split(total, T, k + 1, 16);
    size_t off = 0, a, b;
    for (size_t i = 0; i < nt && off < hi; off += n[i], i++)
      if (fl_kern_clip(off, n[i], lo, hi, &a, &b))
        add_range(acc[i] + a, g[i] + a, b - a);
  }
  return FL_OK;
}

fl_status fl_gm_finalize(float *const *acc, const size_t *n, size_t nt, int k_steps, int avg) {
  size_t total;
  if (k_steps < 1)
    return FL_EINVAL;
  fl_status st = check_lists(acc, NULL, n, nt, &total);
  if (st != FL_OK)
    return st;
  if (!avg || k_steps == 1)
    return FL_OK;
  float k = (float)k_steps;
  int nthr = fl_kern_threads(0, total);
  (void)nthr; /* unused without OpenMP */
  FL_OMP(omp parallel num_threads(nthr) if (nthr > 1))
  {
    size_t T = (size_t)fl_kern_nthreads(), t = (size_t)fl_kern_tid();
    size_t lo = fl_kern_split(total, T, t, 16), hi = fl_kern_split(total, T, t + 1, 16);
    size_t off = 0, a, b;
    for (size_t i = 0; i < nt && off < hi; off += n[i], i++)
      if (fl_kern_clip(off, n[i], lo, hi, &a, &b))
        div_range(acc[i] + a, b - a, k);
  }
  return FL_OK;
}
