/* kern_internal.h - what the CPU files of the optimizer library share
 * (never installed): OpenMP pragmas that vanish in a build without OpenMP,
 * the thread-count policy, the split of a flattened multi-tensor index
 * space among threads, and float bit casts.
 *
 * Determinism: every kernel in this library is either elementwise (the
 * result of an element does not depend on which thread computes it) or a
 * reduction whose blocking depends only on the tensor length (see
 * fl_kern_nseg), so the same inputs give the same bits at any thread
 * count. */
#ifndef FL_KERN_INTERNAL_H
#define FL_KERN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define FL_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define FL_OMP(...)
#endif

/* Below this many elements per thread, more threads cost more than they
 * save (fork/join is a few microseconds; 16K floats stream in about that). */
#define FL_KERN_MIN_PER_THREAD ((size_t)16384)

/* Reductions (LARS/LAMB norms) cut a tensor into fl_kern_nseg(n) segments
 * whose bounds depend on n only; each segment is summed in a fixed order
 * and the segment sums are added in index order. */
#define FL_KERN_NSEG_MAX 64
#define FL_KERN_SEG_MIN ((size_t)32768)

/* Threads for `work` elements: `requested` (<= 0 means OpenMP's default,
 * i.e. all cores or OMP_NUM_THREADS), capped so each thread gets at least
 * FL_KERN_MIN_PER_THREAD elements.  1 without OpenMP. */
static inline int fl_kern_threads(int requested, size_t work) {
#ifdef _OPENMP
  size_t t = requested > 0 ? (size_t)requested : (size_t)omp_get_max_threads();
  size_t cap = work / FL_KERN_MIN_PER_THREAD;
  if (cap < 1)
    cap = 1;
  if (t > cap)
    t = cap;
  return (int)t;
#else
  (void)requested, (void)work;
  return 1;
#endif
}

static inline int fl_kern_tid(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

static inline int fl_kern_nthreads(void) {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}

/* Start of part k of `total` items split into `parts` near-equal parts,
 * rounded down to a multiple of `align` (except the end, which is total).
 * Monotonic in k; never overflows. */
static inline size_t fl_kern_split(size_t total, size_t parts, size_t k, size_t align) {
  if (k >= parts)
    return total;
  size_t base = total / parts, rem = total % parts;
  size_t off = base * k + (k < rem ? k : rem);
  return off - off % align;
}

static inline size_t fl_kern_nseg(size_t n) {
  size_t s = n / FL_KERN_SEG_MIN + (n % FL_KERN_SEG_MIN != 0);
  return s > FL_KERN_NSEG_MAX ? FL_KERN_NSEG_MAX : (s < 1 ? 1 : s);
}

/* The part of tensor [off, off+n) of a flattened index space that falls in
 * [lo, hi), as local indices [*a, *b); 0 when empty. */
static inline int fl_kern_clip(size_t off, size_t n, size_t lo, size_t hi, size_t *a, size_t *b) {
  if (off + n <= lo || off >= hi)
    return 0;
  *a = lo > off ? lo - off : 0;
  *b = hi - off < n ? hi - off : n;
  return *a < *b;
}

/* Whether byte ranges [a, a+na) and [b, b+nb) overlap. */
static inline int fl_kern_overlap(const void *a, size_t na, const void *b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

static inline uint32_t fl_kern_f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float fl_kern_u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
