/* gradcheck.h - finite-difference gradient checking for the layer and model
 * tests (test_layers.c, test_models.c, test_plugin.c).
 *
 * Central differences of a scalar objective computed in double, with the
 * step actually taken (the float value after the step minus the value
 * before) in the denominator, compared element-wise with the analytic
 * gradient as |a - n| <= atol + rtol * max(|a|, |n|).  The worst ratio is
 * returned so a test can assert it is <= 1 and also that a gradient off by
 * a small factor would fail (the tolerance bites).  The checks end with one
 * more call of the objective at the restored point, so whatever it computes
 * (outputs, model gradients) is that of the unperturbed inputs again.
 *
 * For objectives with kinks (ReLU, max-pool) gc_check_kinked takes two
 * step sizes and skips the elements where the two estimates disagree (a
 * kink lies within the step); the caller bounds how many may be skipped. */
#ifndef FL_TEST_GRADCHECK_H
#define FL_TEST_GRADCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef double (*gc_fn)(void *ctx);

typedef struct gc_result {
  double worst;    /* max over elements of |a - n| / (atol + rtol*max(|a|,|n|)) */
  size_t worst_i;  /* where */
  double worst_a, worst_n;
  double num_norm; /* L2 norm of the numerical gradient (0 would test nothing) */
  size_t skipped;  /* gc_check_kinked: elements skipped at a kink */
} gc_result;

/* Deterministic test data: splitmix64 -> uniform in [lo, hi). */
static inline double gc_uniform(uint64_t *s, double lo, double hi) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * (double)(z >> 11) * 0x1p-53;
}

static inline void gc_fill(float *v, size_t n, uint64_t *s, double lo, double hi) {
  for (size_t i = 0; i < n; i++) v[i] = (float)gc_uniform(s, lo, hi);
}

/* Values in +-[lo, hi] (random sign), kept away from 0 (ReLU's kink). */
static inline void gc_fill_away(float *v, size_t n, uint64_t *s, double lo, double hi) {
  for (size_t i = 0; i < n; i++) {
    const double m = gc_uniform(s, lo, hi);
    v[i] = (float)(gc_uniform(s, 0, 1) < 0.5 ? -m : m);
  }
}

/* Numerical derivative of f with respect to v[i] with step eps. */
static inline double gc_numeric(float *v, size_t i, gc_fn f, void *ctx, double eps) {
  const float v0 = v[i];
  const float vp = (float)(v0 + eps), vm = (float)(v0 - eps);
  v[i] = vp;
  const double fp = f(ctx);
  v[i] = vm;
  const double fm = f(ctx);
  v[i] = v0;
  return (fp - fm) / ((double)vp - (double)vm);
}

static inline void gc_account(gc_result *r, size_t i, double a, double n, double atol,
                              double rtol) {
  const double scale = atol + rtol * fmax(fabs(a), fabs(n));
  const double e = fabs(a - n) / scale;
  if (e > r->worst || isnan(e)) {
    r->worst = isnan(e) ? INFINITY : e;
    r->worst_i = i;
    r->worst_a = a;
    r->worst_n = n;
  }
  r->num_norm += n * n;
}

/* Check analytic[0..n) against central differences of f over v[0..n). */
static inline gc_result gc_check(float *v, size_t n, const float *analytic, gc_fn f, void *ctx,
                                 double eps, double atol, double rtol) {
  gc_result r = {0};
  for (size_t i = 0; i < n; i++)
    gc_account(&r, i, analytic[i], gc_numeric(v, i, f, ctx, eps), atol, rtol);
  r.num_norm = sqrt(r.num_norm);
  f(ctx); /* leave what f computes consistent with the restored v */
  return r;
}

/* Same with two steps (eps and eps/4): where the two estimates differ by
 * more than the tolerance, a kink lies within eps and the element is
 * skipped (counted in skipped). */
static inline gc_result gc_check_kinked(float *v, size_t n, const float *analytic, gc_fn f,
                                        void *ctx, double eps, double atol, double rtol) {
  gc_result r = {0};
  for (size_t i = 0; i < n; i++) {
    const double n1 = gc_numeric(v, i, f, ctx, eps);
    const double n2 = gc_numeric(v, i, f, ctx, eps / 4);
    if (fabs(n1 - n2) > atol + rtol * fmax(fabs(n1), fabs(n2))) {
      r.skipped++;
      continue;
    }
    gc_account(&r, i, analytic[i], n2, atol, rtol);
  }
  r.num_norm = sqrt(r.num_norm);
  f(ctx);
  return r;
}

#define GC_ASSERT(what, r)                                                                   \
  ck_assert_msg((r).worst <= 1.0 && (r).num_norm > 0.0,                                      \
                "%s: gradient mismatch at %zu: analytic %.9g numeric %.9g (ratio %.3g, "     \
                "|num| %.3g)", (what), (r).worst_i, (r).worst_a, (r).worst_n, (r).worst,     \
                (r).num_norm)

#endif
